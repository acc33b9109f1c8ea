/**
 * Concurrency, in the OAuth and the core area, through the gateway and over gRPC:
 *
 * - 500 concurrent creates make exactly 500 records with unique ids (in the database and in a
 *   full list walk);
 * - concurrent PATCHes of one record by writers of different fields never lose a field: the code
 *   updates only the masked columns in one statement, so the rule is last writer wins per field
 *   and no conflict is ever returned (asserted strictly: every PATCH is 200); a core PUT replaces
 *   the whole record in one statement, so the result is exactly one writer's body, never a mix;
 * - concurrent secret creates stop at the limit of 10; concurrent deletes of a client succeed once;
 * - concurrent consent for one (project, account) makes one installation;
 * - concurrent parent changes of two journeys never build a cycle; a journey delete racing the
 *   insert of a child or a unit is refused (409) with the right reason;
 * - paginated walks (limit 7) while records are inserted and deleted (the walker's own cursor
 *   among them) see no duplicate, ids in strictly increasing order, and every record that
 *   existed throughout exactly once.
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import { ClientStatus, ClientType } from "../gen/registry/oauth/v1/client_pb.ts";
import { OAuthRegistryService } from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { CoreService } from "../gen/registry/core/v1/core_service_pb.ts";
import { idKind } from "../lib/platform/mod.ts";
import { grpcTestClient } from "../lib/testing/mod.ts";
import { httpClient, type HttpResult } from "../lib/testing/mod.ts";
import { type Stack, startStack, untilWaitingForLock } from "../lib/testing/mod.ts";
import type { TokenClaims } from "../lib/policy/mod.ts";

const oauthRpc = OAuthRegistryService.method;
const coreRpc = CoreService.method;
/** The stored UUID of a journey id, for queries. */
const journeyUuid = (id: string) => idKind("journey").toUuid(id)!;

// deno-lint-ignore no-console
const report = (line: string) => console.log(line);

/** Tokens by subject, so that no single token carries all the load (per-token rate limits). */
function tokens(stack: Stack, claims: Omit<TokenClaims, "sub">) {
  const cache = new Map<string, Promise<string>>();
  return (sub: string) => {
    if (!cache.has(sub)) cache.set(sub, stack.token({ sub, ...claims }));
    return cache.get(sub)!;
  };
}

function ok(res: HttpResult, status: number, what: string): void {
  assert.equal(res.status, status, `${what}: ${res.status} ${res.text}`);
}

/** Walks a list through the gateway with `limit`; returns the ids of every page in order. */
async function walk(
  api: ReturnType<typeof httpClient>,
  path: string,
  token: string,
  limit: number,
  onPage: (ids: string[]) => Promise<void> = async () => {},
): Promise<{ ids: string[]; created: string[]; pages: number }> {
  const ids: string[] = [];
  const created: string[] = [];
  let after = "";
  let pages = 0;
  for (;;) {
    const sep = path.includes("?") ? "&" : "?";
    const res = await api("GET", `${path}${sep}limit=${limit}${after && `&after=${after}`}`, {
      token,
    });
    ok(res, 200, `GET ${path} after ${after}`);
    pages++;
    const page = (res.body.data as { id: string }[]).map((r) => r.id);
    assert.ok(page.length <= limit);
    ids.push(...page);
    created.push(...(res.body.data as { created_at: string }[]).map((r) => r.created_at));
    if (!res.body.has_more) return { ids, created, pages };
    assert.equal(page.length, limit, "a page with has_more is full");
    after = page.at(-1)!;
    await onPage(page);
  }
}

/** Ids strictly increasing; creation times (RFC 3339 UTC, fixed width) never going back. */
function assertOrdered(list: { ids: string[]; created: string[] }, what: string): void {
  const { ids, created } = list;
  for (let i = 1; i < ids.length; i++) {
    assert.ok(ids[i - 1]! < ids[i]!, `${what}: ${ids[i - 1]} then ${ids[i]} at ${i}`);
    assert.ok(
      created[i - 1]! <= created[i]!,
      `${what}: created_at ${created[i - 1]} then ${created[i]} at ${i} (${ids[i]})`,
    );
  }
}

Deno.test("concurrency: creates, field-wise updates, consent and paginated walks under churn", async (t) => {
  const stack = await startStack();
  const db = postgres(stack.databaseUrl, { max: 2, onnotice: () => {} });
  const api = httpClient(stack.gatewayUrl);
  const oauthGrpc = grpcTestClient(stack.oauthGrpc);
  const coreGrpc = grpcTestClient(stack.coreGrpc);
  const oauthToken = tokens(stack, { projects: ["race", "cfg", "consent"] });
  const coreToken = tokens(stack, { space: "race" });
  const meta = async (token: Promise<string>) => ({ authorization: `Bearer ${await token}` });
  try {
    const admin = await oauthToken("admin");
    ok(
      await api("PATCH", "/v1/projects/race/config", {
        token: admin,
        json: { application_name: "Race" },
      }),
      200,
      "config",
    );
    const journey = await api("POST", "/v1/core/journeys", {
      token: await coreToken("admin"),
      json: { name: "Race" },
    });
    ok(journey, 201, "journey");
    const journeyId: string = journey.body.id;

    await t.step("500 concurrent creates make exactly 500 records with unique ids", async () => {
      // Clients: 4 of 5 through the gateway, 1 of 5 over gRPC; units likewise over core.
      const clientIds = await Promise.all(Array.from({ length: 500 }, async (_, i) => {
        const token = oauthToken(`c${i % 50}`);
        if (i % 5 === 4) {
          const res = await oauthGrpc.call(oauthRpc.createClient, {
            projectId: "race",
            client: { name: `bulk ${i}`, type: ClientType.WEB },
          }, await meta(token));
          return res.client!.id;
        }
        const res = await api("POST", "/v1/projects/race/clients", {
          token: await token,
          json: { name: `bulk ${i}`, type: "web" },
        });
        ok(res, 201, `create client ${i}`);
        return res.body.id as string;
      }));
      const unitIds = await Promise.all(Array.from({ length: 500 }, async (_, i) => {
        const token = coreToken(`u${i % 50}`);
        if (i % 5 === 4) {
          const res = await coreGrpc.call(coreRpc.createUnit, {
            unit: { journey: journeyId, title: `bulk ${i}` },
          }, await meta(token));
          return res.unit!.id;
        }
        const res = await api("POST", "/v1/core/units", {
          token: await token,
          json: { journey: journeyId, title: `bulk ${i}` },
        });
        ok(res, 201, `create unit ${i}`);
        return res.body.id as string;
      }));
      for (const [what, ids] of [["client", clientIds], ["unit", unitIds]] as const) {
        assert.equal(new Set(ids).size, 500, `500 distinct ${what} ids in the responses`);
      }

      const [clients] = await db<{ n: number; ids: number; names: number }[]>`
        select count(*)::int as n, count(distinct id)::int as ids, count(distinct name)::int as names
        from oauth.clients where project_id = 'race'`;
      assert.deepEqual(clients, { n: 500, ids: 500, names: 500 });
      const [units] = await db<{ n: number; ids: number; titles: number }[]>`
        select count(*)::int as n, count(distinct id)::int as ids, count(distinct title)::int as titles
        from core.units where journey_id = ${journeyUuid(journeyId)}`;
      assert.deepEqual(units, { n: 500, ids: 500, titles: 500 });

      const clientWalk = await walk(api, "/v1/projects/race/clients", admin, 100);
      assert.deepEqual([...clientWalk.ids].sort(), [...clientIds].sort());
      assertOrdered(clientWalk, "client list");
      const unitWalk = await walk(
        api,
        `/v1/core/units?journey=${journeyId}`,
        await coreToken("admin"),
        100,
      );
      assert.deepEqual([...unitWalk.ids].sort(), [...unitIds].sort());
      assertOrdered(unitWalk, "unit list");
      report(
        `concurrency: 500 clients + 500 units created concurrently; 1000 records checked in ` +
          `the database and in ${clientWalk.pages + unitWalk.pages} list pages`,
      );
    });

    await t.step("concurrent PATCHes of different fields of one client lose none", async () => {
      const created = await api("POST", "/v1/projects/race/clients", {
        token: admin,
        json: { name: "patched", type: "web" },
      });
      ok(created, 201, "client");
      const id: string = created.body.id;
      const rounds = 25;
      // Each writer owns one field and writes it `rounds` times in sequence; the four run at
      // once, two through the gateway and two over gRPC (with an explicit update mask).
      const last: Record<string, unknown> = {};
      const writers = {
        name: (r: number) => `name ${r}`,
        redirect_uris: (r: number) => [`https://r${r}.example.com/cb`],
        javascript_origins: (r: number) => [`https://o${r}.example.com`],
        status: (r: number) => (r % 2 === 0 ? "suspended" : "active"),
      };
      let patches = 0;
      await Promise.all(
        Object.entries(writers).map(async ([field, value], w) => {
          const token = oauthToken(`writer${w}`);
          for (let r = 0; r < rounds; r++) {
            const v = value(r);
            if (field === "name" || field === "status") {
              const res = await api("PATCH", `/v1/projects/race/clients/${id}`, {
                token: await token,
                json: { [field]: v },
              });
              ok(res, 200, `PATCH ${field}`);
              assert.deepEqual(res.body[field], v, "the response shows the writer's own change");
            } else {
              const res = await oauthGrpc.call(oauthRpc.updateClient, {
                projectId: "race",
                clientId: id,
                client: field === "redirect_uris"
                  ? { redirectUris: v as string[] }
                  : { javascriptOrigins: v as string[] },
                updateMask: { paths: [field] },
              }, await meta(token));
              assert.deepEqual(
                field === "redirect_uris"
                  ? res.client!.redirectUris
                  : res.client!.javascriptOrigins,
                v,
              );
            }
            last[field] = v;
            patches++;
          }
        }),
      );
      const final = await api("GET", `/v1/projects/race/clients/${id}`, { token: admin });
      for (const [field, v] of Object.entries(last)) {
        assert.deepEqual(final.body[field], v, `${field} keeps its writer's last value`);
      }

      // Two writers of the same field: the value that stays is the last one of one of them.
      const lastOf: string[] = [];
      await Promise.all([0, 1].map(async (w) => {
        for (let r = 0; r < rounds; r++) {
          const res = await api("PATCH", `/v1/projects/race/clients/${id}`, {
            token: admin,
            json: { name: `w${w} r${r}` },
          });
          ok(res, 200, "PATCH name");
          patches++;
        }
        lastOf.push(`w${w} r${rounds - 1}`);
      }));
      const after = await oauthGrpc.call(oauthRpc.getClient, { projectId: "race", clientId: id }, {
        authorization: `Bearer ${admin}`,
      });
      assert.ok(lastOf.includes(after.client!.name), `name ${after.client!.name}`);
      assert.equal(
        after.client!.status,
        last.status === "active" ? ClientStatus.ACTIVE : ClientStatus.SUSPENDED,
        "status untouched meanwhile",
      );
      report(`concurrency: ${patches} concurrent client PATCHes, no field lost`);
    });

    await t.step(
      "concurrent secret creates stop at 10; concurrent deletes succeed once",
      async () => {
        const created = await api("POST", "/v1/projects/race/clients", {
          token: admin,
          json: { name: "secrets race", type: "web" },
        });
        ok(created, 201, "client");
        const id: string = created.body.id;
        const uuid = idKind("cli").toUuid(id)!;
        const results = await Promise.all(
          Array.from(
            { length: 30 },
            () => api("POST", `/v1/projects/race/clients/${id}/secrets`, { token: admin }),
          ),
        );
        const statuses = results.map((r) => r.status);
        assert.equal(statuses.filter((s) => s === 201).length, 10, statuses.join(" "));
        assert.equal(statuses.filter((s) => s === 409).length, 20, statuses.join(" "));
        const [held] = await db<{ n: number }[]>`
        select count(*)::int as n from oauth.client_secrets where client_id = ${uuid}`;
        assert.equal(held!.n, 10);
        const deletes = await Promise.all(
          Array.from(
            { length: 10 },
            () => api("DELETE", `/v1/projects/race/clients/${id}`, { token: admin }),
          ),
        );
        assert.deepEqual(
          deletes.map((r) => r.status).sort(),
          [204, ...Array(9).fill(404)],
        );
        const [gone] = await db<{ live: number; tombstones: number; secrets: number }[]>`
        select
          (select count(*)::int from oauth.clients where id = ${uuid}) as live,
          (select count(*)::int from oauth.deleted_clients where id = ${uuid}) as tombstones,
          (select count(*)::int from oauth.client_secrets where client_id = ${uuid}) as secrets`;
        assert.deepEqual(gone, { live: 0, tombstones: 1, secrets: 0 });
        report("concurrency: 30 concurrent secret creates (10 stored), 10 concurrent deletes (1)");
      },
    );

    await t.step(
      "concurrent PATCHes of one OAuth config: created once, no field lost",
      async () => {
        const cfg = await oauthToken("cfg");
        const fields = {
          support_email: (r: number) => `help${r}@example.com`,
          logo_uri: (r: number) => `https://example.com/logo${r}.png`,
          homepage_uri: (r: number) => `https://example.com/home${r}`,
          privacy_policy_uri: (r: number) => `https://example.com/privacy${r}`,
          terms_of_service_uri: (r: number) => `https://example.com/tos${r}`,
          authorized_domains: (r: number) => [`d${r}.example.com`],
        };
        // Six writers create the config at once (each with application_name, the upsert path),
        // then keep changing their own field.
        const last: Record<string, unknown> = {};
        let patches = 0;
        await Promise.all(
          Object.entries(fields).map(async ([field, value], w) => {
            for (let r = 0; r < 10; r++) {
              const json = r === 0
                ? { application_name: `writer ${w}`, [field]: value(r) }
                : { [field]: value(r) };
              const res = await api("PATCH", "/v1/projects/cfg/config", { token: cfg, json });
              ok(res, 200, `PATCH config ${field}`);
              assert.deepEqual(res.body[field], value(r));
              last[field] = value(r);
              patches++;
            }
          }),
        );
        const [count] = await db<{ n: number }[]>`
        select count(*)::int as n from oauth.configs where project_id = 'cfg'`;
        assert.equal(count!.n, 1);
        const final = await api("GET", "/v1/projects/cfg/config", { token: cfg });
        for (const [field, v] of Object.entries(last)) {
          assert.deepEqual(final.body[field], v, field);
        }
        assert.match(final.body.application_name, /^writer [0-5]$/);
        report(`concurrency: ${patches} concurrent config PATCHes (6 creating it), no field lost`);
      },
    );

    await t.step("concurrent PUTs of a core record leave exactly one writer's body", async () => {
      const token = await coreToken("admin");
      const role = await api("POST", "/v1/core/roles", {
        token,
        json: { name: "start", resource_type: "project" },
      });
      ok(role, 201, "role");
      const unit = await api("POST", "/v1/core/units", {
        token,
        json: { journey: journeyId, title: "start" },
      });
      ok(unit, 201, "unit");
      const lastOf: { role: string[]; unit: string[] } = { role: [], unit: [] };
      let puts = 0;
      await Promise.all([0, 1, 2, 3].map(async (w) => {
        const tok = await coreToken(`putter${w}`);
        for (let r = 0; r < 15; r++) {
          const tag = `w${w} r${r}`;
          const [a, b] = await Promise.all([
            api("PUT", `/v1/core/roles/${role.body.id}`, {
              token: tok,
              json: { name: tag, description: tag, resource_type: "project", permissions: [] },
            }),
            api("PUT", `/v1/core/units/${unit.body.id}`, {
              token: tok,
              json: {
                journey: journeyId,
                title: tag,
                assignee: tag,
                description: tag,
                priority: ["low", "medium", "high", "urgent"][w],
              },
            }),
          ]);
          ok(a, 200, "PUT role");
          ok(b, 200, "PUT unit");
          puts += 2;
        }
        lastOf.role.push(`w${w} r14`);
        lastOf.unit.push(`w${w} r14`);
      }));
      const r = (await api("GET", `/v1/core/roles/${role.body.id}`, { token })).body;
      assert.ok(lastOf.role.includes(r.name), r.name);
      assert.equal(r.description, r.name, "the role is one writer's whole body");
      const u = (await api("GET", `/v1/core/units/${unit.body.id}`, { token })).body;
      assert.ok(lastOf.unit.includes(u.title), u.title);
      assert.equal(u.assignee, u.title, "the unit is one writer's whole body");
      assert.equal(u.description, u.title);
      assert.equal(u.priority, ["low", "medium", "high", "urgent"][Number(u.title[1])]);
      report(`concurrency: ${puts} concurrent core PUTs, every record one writer's body`);
    });

    await t.step("concurrent parent changes of two journeys never make a cycle", async () => {
      const token = await coreToken("admin");
      let trials = 0;
      for (let i = 0; i < 20; i++) {
        const [a, b] = (await Promise.all(["a", "b"].map(async (name) => {
          const res = await api("POST", "/v1/core/journeys", { token, json: { name } });
          ok(res, 201, "journey");
          return res.body.id as string;
        }))) as [string, string];
        const results = await Promise.all(
          [[a, b], [b, a]].map(([child, parent]) =>
            api("PUT", `/v1/core/journeys/${child}`, { token, json: { name: "x", parent } })
          ),
        );
        const statuses = results.map((r) => r.status).sort();
        assert.deepEqual(
          statuses,
          [200, 409],
          results.map((r) => r.text).join(" "),
        );
        const [row] = await db<{ n: number }[]>`
          select count(*)::int as n from core.journeys
          where parent_id is not null and id in (${journeyUuid(a)}, ${journeyUuid(b)})`;
        assert.equal(row!.n, 1);
        trials++;
      }
      report(`concurrency: ${trials} concurrent re-parenting races, no cycle`);
    });

    await t.step(
      "a journey delete racing a child or unit insert is 409 with its reason",
      async () => {
        // The racing insert is held open in a transaction of the test's own, so the delete's row
        // lock waits for it and the delete then trips the foreign key: deterministic.
        const token = await coreToken("admin");
        for (const what of ["child journeys", "units"] as const) {
          const parent = await api("POST", "/v1/core/journeys", { token, json: { name: "p" } });
          ok(parent, 201, "journey");
          const parentUuid = journeyUuid(parent.body.id);
          const racing = db.begin(async (tx) => {
            if (what === "units") {
              await tx`
              insert into core.units (id, space, journey_id, originator, title, status, priority)
              values (gen_random_uuid(), 'race', ${parentUuid}, 'test', 'racing', 'todo', 'none')`;
            } else {
              await tx`
              insert into core.journeys (id, space, owner, parent_id, name)
              values (gen_random_uuid(), 'race', 'test', ${parentUuid}, 'racing')`;
            }
            await new Promise((r) => setTimeout(r, 300)); // the delete arrives and waits meanwhile
          });
          await new Promise((r) => setTimeout(r, 100));
          const res = await api("DELETE", `/v1/core/journeys/${parent.body.id}`, { token });
          await racing;
          ok(res, 409, `delete racing an insert of ${what}`);
          assert.match(res.body.error.message, new RegExp(`still has ${what}`));
          ok(
            await api("GET", `/v1/core/journeys/${parent.body.id}`, { token }),
            200,
            "the refused delete removed nothing",
          );
        }
        report("concurrency: 2 deletes racing inserts into the journey, 409 with the reason");
      },
    );

    await t.step(
      "a journey created or moved under a parent deleted meanwhile is 404, never a 5xx",
      async () => {
        // The delete is the test's own, held open until the write waits on its row lock (seen
        // in pg_stat_activity, not timed): the write found the parent, then its foreign key did
        // not.
        const token = await coreToken("admin");
        for (const how of ["create", "move"] as const) {
          const parent = await api("POST", "/v1/core/journeys", { token, json: { name: "gone" } });
          ok(parent, 201, "journey");
          const mover = await api("POST", "/v1/core/journeys", { token, json: { name: "m" } });
          ok(mover, 201, "journey");
          let release!: () => void;
          const released = new Promise<void>((r) => release = r);
          let held!: () => void;
          const isHeld = new Promise<void>((r) => held = r);
          const deleting = db.begin(async (tx) => {
            await tx`delete from core.journeys where id = ${journeyUuid(parent.body.id)}`;
            held();
            await released;
          });
          await isHeld;
          const json = { name: how, parent: parent.body.id };
          const writing = how === "create"
            ? api("POST", "/v1/core/journeys", { token, json })
            : api("PUT", `/v1/core/journeys/${mover.body.id}`, { token, json });
          await untilWaitingForLock(db, `the ${how} to wait for the parent's row`);
          release();
          await deleting;
          const res = await writing;
          ok(res, 404, `${how} under a parent deleted meanwhile`);
          assert.match(res.body.error.message, new RegExp(parent.body.id));
        }
        report("concurrency: a journey written under a parent deleted meanwhile, 404");
      },
    );

    await t.step(
      "concurrent consent for one (project, account) makes one installation",
      async () => {
        ok(
          await api("PATCH", "/v1/projects/consent/config", {
            token: admin,
            json: { application_name: "Consent" },
          }),
          200,
          "config",
        );
        let consents = 0;
        for (let account = 0; account < 5; account++) {
          const token = stack.token({ sub: `user${account}`, accountId: `acc${account}` });
          const consent = async (i: number) => {
            const scopes = [`s${i}`, "openid"];
            if (i % 4 === 3) {
              const res = await oauthGrpc.call(
                oauthRpc.consentInstallation,
                { projectId: "consent", scopes },
                await meta(token),
              );
              return { ...res.installation!, created: res.created };
            }
            const res = await api("POST", "/v1/installations", {
              token: await token,
              json: { project_id: "consent", scopes },
            });
            // 201 from the one that created it, 200 from those that updated it.
            ok(res, res.status === 201 ? 201 : 200, "consent");
            return {
              id: res.body.id as string,
              principalId: res.body.principal_id as string,
              created: res.status === 201,
            };
          };
          // Each consent's event names the installation there and shows as old values the version
          // it replaced: in the order they were written, each event's old values are the last's new.
          type Values = Record<string, unknown> | null;
          const trail = async (id: string) => {
            const events = await db<{ changes: { old: Values; new: Values } }[]>`
              select changes from oauth.events
              where resource = ${`projects/consent/installations/${id}`}
                and method = 'registry.oauth.v1.OAuthRegistryService/ConsentInstallation'
              order by id`;
            assert.equal(events.length, 20, "an event for each consent");
            assert.equal(events[0]!.changes.old, null, "the first created it");
            // Each consent's old values are the ones the one before it wrote (a consent again
            // keeps the columns it sets, the first one the whole row).
            for (let i = 1; i < events.length; i++) {
              const old = events[i]!.changes.old!;
              const before = events[i - 1]!.changes.new!;
              assert.ok(Object.keys(old).includes("scopes"), `event ${i}: ${JSON.stringify(old)}`);
              for (const [field, value] of Object.entries(old)) {
                assert.deepEqual(value, before[field], `event ${i}: ${field}`);
              }
            }
          };
          const first = await Promise.all(Array.from({ length: 20 }, (_, i) => consent(i)));
          consents += first.length;
          assert.equal(new Set(first.map((r) => r.id)).size, 1, "one installation id");
          assert.equal(new Set(first.map((r) => r.principalId)).size, 1, "one principal");
          assert.equal(first.filter((r) => r.created).length, 1, "one said it created it");
          await trail(first[0]!.id);
          // Revoked, then consented to again at once: exactly one new live installation.
          ok(
            await api("DELETE", `/v1/installations/${first[0]!.id}`, { token: await token }),
            204,
            "revoke",
          );
          const second = await Promise.all(Array.from({ length: 20 }, (_, i) => consent(i)));
          consents += second.length;
          assert.equal(new Set(second.map((r) => r.id)).size, 1);
          assert.equal(second.filter((r) => r.created).length, 1);
          assert.notEqual(second[0]!.id, first[0]!.id);
          await trail(second[0]!.id);
          const rows = await db<{ status: string; scopes: string[] }[]>`
          select status, scopes from oauth.installations
          where project_id = 'consent' and account_id = ${`acc${account}`} order by id`;
          assert.deepEqual(rows.map((r) => r.status), ["revoked", "active"]);
          // Each consent adds its scopes (the union): none is lost to a concurrent one.
          assert.deepEqual(
            [...rows[1]!.scopes].sort(),
            ["openid", ...Array.from({ length: 20 }, (_, i) => `s${i}`)].sort(),
          );
        }
        report(`concurrency: ${consents} concurrent consents for 5 accounts, one live each`);
      },
    );

    await t.step("paginated walks under concurrent inserts and deletes (limit 7)", async () => {
      const coreAdmin = await coreToken("admin");
      const churnJourney = await api("POST", "/v1/core/journeys", {
        token: coreAdmin,
        json: { name: "churn" },
      });
      ok(churnJourney, 201, "journey");
      const lists = [
        {
          name: "clients",
          path: "/v1/projects/walk/clients",
          token: await stack.token({ sub: "walker", projects: ["walk"] }),
          body: (i: string) => ({ name: `walk ${i}`, type: "web" }),
          create: "/v1/projects/walk/clients",
          item: (id: string) => `/v1/projects/walk/clients/${id}`,
        },
        {
          name: "roles",
          path: "/v1/core/roles",
          token: await stack.token({ sub: "walker", space: "walk" }),
          body: (i: string) => ({ name: `walk ${i}`, resource_type: "project" }),
          create: "/v1/core/roles",
          item: (id: string) => `/v1/core/roles/${id}`,
        },
        {
          name: "units",
          path: `/v1/core/units?journey=${churnJourney.body.id}`,
          token: coreAdmin,
          body: (i: string) => ({ journey: churnJourney.body.id, title: `walk ${i}` }),
          create: "/v1/core/units",
          item: (id: string) => `/v1/core/units/${id}`,
        },
      ];
      ok(
        await api("PATCH", "/v1/projects/walk/config", {
          token: lists[0]!.token,
          json: { application_name: "Walk" },
        }),
        200,
        "config",
      );
      let checked = 0;
      let walks = 0;
      let pages = 0;
      let deletedCursors = 0;
      await Promise.all(lists.map(async (list) => {
        const create = async (tag: string) => {
          const res = await api("POST", list.create, { token: list.token, json: list.body(tag) });
          ok(res, 201, `create ${list.name}`);
          return res.body.id as string;
        };
        const remove = async (id: string) => {
          const res = await api("DELETE", list.item(id), { token: list.token });
          ok(res, 204, `delete ${list.name}`);
        };
        // 120 records; in id order, every other one is stable (exists throughout), the others
        // are deleted while the walks run.
        const seeded = (await Promise.all(Array.from({ length: 120 }, (_, i) => create(`s${i}`))))
          .sort();
        const stable = new Set(seeded.filter((_, i) => i % 2 === 0));
        const churn = seeded.filter((_, i) => i % 2 === 1);
        const deleted = new Set<string>();
        const deleting = new Set<string>();
        const inserted = new Set<string>();
        let running = true;
        const takeChurn = (id?: string) => {
          const pick = id ?? churn[Math.floor(Math.random() * churn.length)];
          if (pick === undefined || deleting.has(pick) || !churn.includes(pick)) return undefined;
          deleting.add(pick);
          return pick;
        };
        const inserter = (async () => {
          for (let i = 0; running; i++) inserted.add(await create(`i${i}`));
        })();
        const deleter = (async () => {
          while (running) {
            const id = takeChurn();
            if (id === undefined) {
              await new Promise((r) => setTimeout(r, 5));
              continue;
            }
            await remove(id);
            deleted.add(id);
          }
        })();
        const results: { ids: string[]; created: string[] }[] = [];
        try {
          for (let w = 0; w < 3; w++) {
            const result = await walk(api, list.path, list.token, 7, async (page) => {
              // Now and then delete the record the next page starts after: a deleted cursor
              // still names a record of the list.
              const cursor = takeChurn(page.at(-1)!);
              if (cursor !== undefined) {
                await remove(cursor);
                deleted.add(cursor);
                deletedCursors++;
              }
            });
            results.push(result);
            pages += result.pages;
          }
        } finally {
          running = false;
          await Promise.all([inserter, deleter]);
        }
        for (const result of results) {
          const { ids } = result;
          assert.equal(new Set(ids).size, ids.length, `${list.name}: no duplicates`);
          assertOrdered(result, list.name);
          const seen = new Set(ids);
          for (const id of stable) assert.ok(seen.has(id), `${list.name}: stable ${id} seen`);
          for (const id of ids) {
            assert.ok(
              stable.has(id) || churn.includes(id) || inserted.has(id),
              `${list.name}: ${id} was never created`,
            );
          }
          checked += ids.length;
          walks++;
        }
        assert.ok(deleted.size > 0 && inserted.size > 0, `${list.name}: churn ran`);
        const final = await walk(api, list.path, list.token, 100);
        assert.deepEqual(
          final.ids,
          [...stable, ...inserted, ...churn.filter((id) => !deleted.has(id))].sort(),
          `${list.name}: afterwards the list is exactly what was not deleted`,
        );
      }));
      assert.ok(deletedCursors > 0, "some walks continued after a deleted cursor");
      report(
        `concurrency: ${walks} walks of ${pages} pages under churn, ${checked} records checked ` +
          `(${deletedCursors} pages after a deleted cursor)`,
      );
    });
  } finally {
    oauthGrpc.close();
    coreGrpc.close();
    await db.end();
    await stack.stop();
  }
});
