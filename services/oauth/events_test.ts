/**
 * The audit trail, the change feed and etags of the oauth-registry, in process through its real
 * interceptors against a real Postgres. The wire (gRPC with stock clients, the gateway's `/v1`
 * headers) is tested by tests/audit_test.ts.
 *
 * @module
 */

import assert from "node:assert/strict";
import { getOption, hasOption, toJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { http } from "../../gen/google/api/annotations_pb.ts";
import { ClientType } from "../../gen/registry/oauth/v1/client_pb.ts";
import { OAuthRegistryService } from "../../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { createEventFeed, numberEvents, pruneOnce } from "../../lib/audit/mod.ts";
import { hasReason } from "../../lib/platform/mod.ts";
import { etagMismatchReason } from "../../lib/resource/mod.ts";
import { rejection, serveInProcess } from "../../lib/testing/mod.ts";
import { ids } from "./ids.ts";
import { oauthRegistryService } from "./main.ts";

const service = OAuthRegistryService.typeName;

Deno.test("every change writes exactly one event, in its transaction; etags guard updates", async (t) => {
  const svc = await serveInProcess(oauthRegistryService, {
    CLIENT_SECRET_HMAC_KEY: "in-process-test-key-".padEnd(40, "k"),
  });
  const api = createClient(OAuthRegistryService, svc.transport);
  const admin = {
    ...await svc.bearer({ sub: "alice", projects: ["p"], clientId: "cli_console" }),
    "x-forwarded-for": "203.0.113.7",
    "x-forwarded-user-agent": "curl/8.0",
    "x-request-id": "req-1",
  };
  const user = await svc.bearer({ sub: "bob", accountId: "acct-b", projects: [] });
  // What has committed, numbered (as ListEvents and the feed number it before they read).
  const events = async () => {
    await numberEvents(svc.sql, "oauth");
    return await svc.sql<{ seq: string; method: string; resource: string; actor_sub: string }[]>`
      select e.seq::text as seq, method, resource, actor_sub from oauth.events e
      where parent = 'p' order by e.seq`;
  };
  const newClient = async () =>
    (await api.createClient({
      projectId: "p",
      client: { name: "web", type: ClientType.WEB, redirectUris: ["https://a.example/cb"] },
    }, { headers: admin })).client!;
  try {
    await api.updateOAuthConfig({ projectId: "p", config: { applicationName: "Demo" } }, {
      headers: admin,
    });

    await t.step("every mutating RPC writes one event per resource it changes", async () => {
      // Each call makes one change and returns the resource name its event must carry, or the
      // names of all it changed, one event each.
      const calls: Record<string, () => Promise<string | string[]>> = {
        updateOAuthConfig: async () => {
          await api.updateOAuthConfig({ projectId: "p", config: { supportEmail: "a@b.example" } }, {
            headers: admin,
          });
          return "projects/p/config";
        },
        createClient: async () => `projects/p/clients/${(await newClient()).id}`,
        updateClient: async () => {
          const c = await newClient();
          await api.updateClient({ projectId: "p", clientId: c.id, client: { name: "n" } }, {
            headers: admin,
          });
          return `projects/p/clients/${c.id}`;
        },
        deleteClient: async () => {
          // Its secrets and keys go with it, each with its own event, of this call.
          const c = await newClient();
          const s = await api.createClientSecret({ projectId: "p", clientId: c.id }, {
            headers: admin,
          });
          const k = await api.createClientKey(
            { projectId: "p", clientId: c.id, generate: "EdDSA" },
            { headers: admin },
          );
          await api.deleteClient({ projectId: "p", clientId: c.id }, { headers: admin });
          return [
            `projects/p/clients/${c.id}`,
            `projects/p/clients/${c.id}/secrets/${s.clientSecret!.id}`,
            `projects/p/clients/${c.id}/keys/${k.clientKey!.id}`,
          ];
        },
        createClientSecret: async () => {
          const c = await newClient();
          const before = (await events()).length;
          const s = await api.createClientSecret({ projectId: "p", clientId: c.id }, {
            headers: admin,
          });
          assert.equal((await events()).length, before + 1);
          return `projects/p/clients/${c.id}/secrets/${s.clientSecret!.id}`;
        },
        deleteClientSecret: async () => {
          const c = await newClient();
          const s = await api.createClientSecret({ projectId: "p", clientId: c.id }, {
            headers: admin,
          });
          await api.deleteClientSecret({
            projectId: "p",
            clientId: c.id,
            secretId: s.clientSecret!.id,
          }, { headers: admin });
          return `projects/p/clients/${c.id}/secrets/${s.clientSecret!.id}`;
        },
        createClientKey: async () => {
          const c = await newClient();
          const k = await api.createClientKey(
            { projectId: "p", clientId: c.id, generate: "EdDSA" },
            {
              headers: admin,
            },
          );
          return `projects/p/clients/${c.id}/keys/${k.clientKey!.id}`;
        },
        deleteClientKey: async () => {
          const c = await newClient();
          const k = await api.createClientKey(
            { projectId: "p", clientId: c.id, generate: "EdDSA" },
            {
              headers: admin,
            },
          );
          await api.deleteClientKey({ projectId: "p", clientId: c.id, keyId: k.clientKey!.id }, {
            headers: admin,
          });
          return `projects/p/clients/${c.id}/keys/${k.clientKey!.id}`;
        },
        consentInstallation: async () => {
          const { installation } = await api.consentInstallation({
            projectId: "p",
            scopes: ["read"],
          }, { headers: user });
          return `projects/p/installations/${installation!.id}`;
        },
        revokeInstallation: async () => {
          // Consent again: the installation there is updated, and its event names it.
          const { installation } = await api.consentInstallation({
            projectId: "p",
            scopes: ["write"],
          }, { headers: user });
          const again = (await events()).at(-1)!;
          assert.equal(again.method, `${service}/ConsentInstallation`);
          assert.equal(again.resource, `projects/p/installations/${installation!.id}`);
          await api.revokeInstallation({ installationId: installation!.id }, { headers: user });
          // Each lists what it changed: the scopes added (and when), then the status.
          const [revoked, consented] = (await api.listEvents({
            projectId: "p",
            resource: `projects/p/installations/${installation!.id}`,
            limit: 2,
          }, { headers: admin })).data;
          const fields = (e: typeof revoked) =>
            Object.fromEntries(
              e!.changes.map((
                c,
              ) => [c.field, [
                c.old && toJson(ValueSchema, c.old),
                c.new && toJson(ValueSchema, c.new),
              ]]),
            );
          assert.deepEqual(Object.keys(fields(consented)).sort(), ["authorized_at", "scopes"]);
          assert.deepEqual(fields(consented).scopes, [["read"], ["read", "write"]]);
          assert.deepEqual(Object.keys(fields(revoked)).sort(), ["revoked_at", "status"]);
          assert.deepEqual(fields(revoked).status, ["active", "revoked"]);
          return `projects/p/installations/${installation!.id}`;
        },
      };
      const mutating = OAuthRegistryService.methods.filter((m) =>
        hasOption(m, http) && ["post", "patch", "delete", "put"].includes(
          getOption(m, http).pattern.case ?? "",
        )
      );
      assert.deepEqual(
        mutating.map((m) => m.localName).sort(),
        Object.keys(calls).sort(),
        "a mutating RPC without a case here has no checked event",
      );
      for (const m of mutating) {
        const call = calls[m.localName]!;
        const before = await events();
        const resources = [await call()].flat();
        const after = (await events()).slice(before.length);
        const mine = after.filter((e) => e.method === `${service}/${m.name}`);
        assert.deepEqual(
          mine.map((e) => e.resource).sort(),
          [...resources].sort(),
          `${m.name}: one event per resource in ${JSON.stringify(after)}`,
        );
        const sub = m.localName.includes("nstallation") ? "bob" : "alice";
        for (const e of mine) assert.equal(e.actor_sub, sub, `${m.name}: its actor`);
      }
      // Numbers are 1, 2, 3... in commit order.
      const seqs = (await events()).map((e) => Number(e.seq));
      assert.deepEqual(seqs, seqs.map((_, i) => i + 1));
    });

    await t.step("an event says who, from where, and what changed (old and new)", async () => {
      const c = await newClient();
      await api.updateClient({
        projectId: "p",
        clientId: c.id,
        client: { name: "renamed", redirectUris: ["https://b.example/cb"] },
      }, { headers: admin });
      const page = await api.listEvents({
        projectId: "p",
        resource: `projects/p/clients/${c.id}`,
        method: `${service}/UpdateClient`,
      }, { headers: admin });
      assert.equal(page.data.length, 1);
      const e = page.data[0]!;
      assert.equal(e.actor?.sub, "alice");
      assert.equal(e.actor?.clientId, "cli_console");
      assert.equal(e.requestId, "req-1");
      assert.equal(e.sourceIp, "203.0.113.7");
      assert.equal(e.userAgent, "curl/8.0");
      assert.equal(e.result, "ok");
      const changes = Object.fromEntries(e.changes.map((ch) => [ch.field, ch]));
      assert.deepEqual(Object.keys(changes).sort(), ["name", "redirect_uris"]);
      assert.equal(changes.name!.old?.kind.value, "web");
      assert.equal(changes.name!.new?.kind.value, "renamed");
    });

    await t.step(
      "a secret created, verified and deleted leaves no trace of its value",
      async () => {
        const c = await newClient();
        const s = await api.createClientSecret({ projectId: "p", clientId: c.id }, {
          headers: admin,
        });
        const plaintext = s.clientSecret!.plaintext.value as string;
        const verified = await api.verifyClientSecret({ clientId: c.id, secret: plaintext }, {
          headers: admin,
        });
        assert.equal(verified.valid, true);
        await api.deleteClientSecret({
          projectId: "p",
          clientId: c.id,
          secretId: s.clientSecret!.id,
        }, {
          headers: admin,
        });
        const [dump] = await svc.sql<{ text: string }[]>`
        select coalesce(string_agg(e::text, ' '), '') as text from oauth.events e`;
        assert.ok(dump!.text.length > 0);
        assert.ok(!dump!.text.includes(plaintext), "the secret's value is in no event");
        assert.ok(!dump!.text.includes(plaintext.slice(-8)), "nor its end (the hint)");
        assert.ok(!dump!.text.includes("secret_hash"), "nor its hash");
      },
    );

    await t.step("ListEvents: newest first, keyset pages, filters", async () => {
      const first = await api.listEvents({ projectId: "p", limit: 2 }, { headers: admin });
      assert.equal(first.data.length, 2);
      assert.equal(first.hasMore, true);
      assert.ok(Number(first.data[0]!.id) > Number(first.data[1]!.id));
      const next = await api.listEvents({ projectId: "p", limit: 2, after: first.data[1]!.id }, {
        headers: admin,
      });
      assert.equal(Number(next.data[0]!.id), Number(first.data[1]!.id) - 1);
      const bob = await api.listEvents({ projectId: "p", actor: "bob" }, { headers: admin });
      assert.ok(bob.data.length >= 2 && bob.data.every((e) => e.actor?.sub === "bob"));
      const bad = await rejection(
        api.listEvents({ projectId: "p", after: "x1" }, { headers: admin }),
      );
      assert.equal(bad.code, Code.InvalidArgument);
      const denied = await rejection(api.listEvents({ projectId: "p" }, { headers: user }));
      assert.equal(denied.code, Code.PermissionDenied);
    });

    await t.step(
      "etags: a stale one changes nothing; two PATCHes with one etag, one wins",
      async () => {
        const c = await newClient();
        // A keyed digest of the row's version, not the version itself (a counter of the whole
        // database's transactions, which would tell how much everyone else writes).
        assert.match(c.etag, /^[0-9a-f]{16}$/);
        const [row] = await svc.sql<{ xmin: string; digest: string }[]>`
          select xmin::text, oauth.etag(xmin) as digest from oauth.clients
          where id = ${ids.client.toUuid(c.id)!}`;
        assert.equal(c.etag, row?.digest);
        assert.notEqual(c.etag, row?.xmin);
        const got = (await api.getClient({ projectId: "p", clientId: c.id }, { headers: admin }))
          .client!;
        assert.equal(got.etag, c.etag, "unchanged, the same etag");
        const before = (await events()).length;
        const results = await Promise.allSettled(["one", "two"].map((name) =>
          api.updateClient({
            projectId: "p",
            clientId: c.id,
            client: { name, etag: c.etag },
            updateMask: { paths: ["name"] },
          }, { headers: admin })
        ));
        const won = results.filter((r) => r.status === "fulfilled");
        const lost = results.filter((r) => r.status === "rejected");
        assert.equal(won.length, 1);
        assert.equal(lost.length, 1);
        const err = (lost[0] as PromiseRejectedResult).reason;
        assert.equal(err.code, Code.Aborted);
        assert.ok(hasReason(err, etagMismatchReason));
        assert.equal((await events()).length, before + 1, "one event: the winner's");
        const now = (await api.getClient({ projectId: "p", clientId: c.id }, { headers: admin }))
          .client!;
        assert.notEqual(now.etag, c.etag);
        const stale = await rejection(
          api.deleteClient({ projectId: "p", clientId: c.id, etag: c.etag }, { headers: admin }),
        );
        assert.ok(hasReason(stale, etagMismatchReason));
        await api.deleteClient({ projectId: "p", clientId: c.id, etag: now.etag }, {
          headers: admin,
        });
        const gone = await rejection(
          api.deleteClient({ projectId: "p", clientId: c.id, etag: now.etag }, { headers: admin }),
        );
        assert.equal(gone.code, Code.NotFound);
      },
    );

    await t.step(
      "a PATCH that changes nothing is answered while another transaction holds the row",
      async () => {
        const c = await newClient();
        const uuid = ids.client.toUuid(c.id)!;
        /** Whether `call` waits for the lock that `lock` takes meanwhile in another transaction. */
        const waitsForLock = async <T>(lock: "client" | "config", call: () => Promise<T>) => {
          const holder = await svc.sql.reserve();
          try {
            await holder`begin`;
            await (lock === "client"
              ? holder`select from oauth.clients where id = ${uuid} for update`
              : holder`select from oauth.configs where project_id = 'p' for update`);
            const [held] = await holder<{ pid: number }[]>`select pg_backend_pid() as pid`;
            let answered = false;
            const answer = call().finally(() => answered = true);
            // Whichever comes first: the answer, or a backend that waits for the holder's lock.
            let waited = false;
            while (!answered && !waited) {
              const [row] = await svc.sql<{ n: number }[]>`
                select count(*)::int as n from pg_stat_activity
                where ${held!.pid}::int = any(pg_blocking_pids(pid))`;
              waited = row!.n > 0;
            }
            await holder`rollback`;
            return { waited, answer: await answer };
          } finally {
            holder.release();
          }
        };
        const rename = (name: string) => () =>
          api.updateClient({
            projectId: "p",
            clientId: c.id,
            client: { name },
            updateMask: { paths: ["name"] },
          }, { headers: admin });
        const same = await waitsForLock("client", rename(c.name));
        assert.equal(same.waited, false, "a no-op takes no lock");
        assert.equal(same.answer.client!.etag, c.etag);
        // The check can tell: a real change waits for the lock, then writes.
        const renamed = await waitsForLock("client", rename("renamed"));
        assert.equal(renamed.waited, true, "a change locks the row");
        assert.notEqual(renamed.answer.client!.etag, c.etag);
        assert.equal(renamed.answer.client!.name, "renamed");
        // The project's config alike, through its create-or-update path (application_name given)
        // and its update path.
        const config = (config: { applicationName?: string; supportEmail?: string }) => () =>
          api.updateOAuthConfig({ projectId: "p", config }, { headers: admin });
        const current = (await api.getOAuthConfig({ projectId: "p" }, { headers: admin })).config!;
        assert.ok(current.supportEmail, "set by a step before");
        for (
          const same of [{ applicationName: current.applicationName }, {
            supportEmail: current.supportEmail!,
          }]
        ) {
          const { waited, answer } = await waitsForLock("config", config(same));
          assert.equal(waited, false, `a no-op takes no lock: ${Object.keys(same)}`);
          assert.equal(answer.config!.etag, current.etag);
        }
        const changed = await waitsForLock("config", config({ applicationName: "Changed" }));
        assert.equal(changed.waited, true, "a change locks the row");
        assert.equal(changed.answer.config!.applicationName, "Changed");
      },
    );

    await t.step(
      "WatchEvents: from a cursor, every event once and in order, as they commit",
      async () => {
        const start = (await events()).at(-1)!.seq;
        const controller = new AbortController();
        const seen: string[] = [];
        const watching = (async () => {
          for await (
            const m of api.watchEvents({ projectId: "p", after: start }, {
              headers: admin,
              signal: controller.signal,
            })
          ) {
            seen.push(m.event!.id);
            if (seen.length === 30) controller.abort();
          }
        })().catch((e) => {
          if (!controller.signal.aborted) throw e;
        });
        // 30 changes from concurrent writers.
        await Promise.all(Array.from({ length: 3 }, async () => {
          for (let i = 0; i < 5; i++) await newClient();
        }));
        // A reconnecting watcher from a cursor in the middle sees the rest once.
        await Promise.all(Array.from({ length: 3 }, async () => {
          for (let i = 0; i < 5; i++) await newClient();
        }));
        await watching;
        const expected = Array.from({ length: 30 }, (_, i) => String(Number(start) + 1 + i));
        assert.deepEqual(seen, expected);
        const resumed: string[] = [];
        for await (
          const m of api.watchEvents({ projectId: "p", after: expected[14]! }, {
            headers: admin,
            signal: AbortSignal.timeout(30_000),
          })
        ) {
          resumed.push(m.event!.id);
          if (resumed.length === 15) break;
        }
        assert.deepEqual(resumed, expected.slice(15));
        // The feed is authorized as the list: a project admin's, nobody else's.
        const cases: [Record<string, string>, Code][] = [
          [user, Code.PermissionDenied],
          [{}, Code.Unauthenticated],
        ];
        for (const [headers, code] of cases) {
          const refused = await rejection((async () => {
            for await (const _ of api.watchEvents({ projectId: "p" }, { headers })) break;
          })());
          assert.equal(refused.code, code);
        }
      },
    );

    await t.step(
      "numbering: concurrent writers and numbering runs; a follower reads each event once",
      async () => {
        const parents = ["n1", "n2"];
        let writing = true;
        const write = async (w: number) => {
          for (let i = 0; i < 40; i++) {
            await svc.sql`
              insert into oauth.events (parent, occurred_at, method, resource, actor_sub,
                request_id, source_ip, user_agent, peer, changes, result)
              values (${parents[w % 2]!}, now(), 'm', ${`r/${w}/${i}`}, 's', '', '', '', '',
                '[]', 'ok')`;
          }
        };
        // A follower of n1 as the feed reads: above its cursor, in order.
        const followed: { seq: number; resource: string }[] = [];
        const follow = async () => {
          let cursor = 0;
          for (let more = true; more;) {
            more = writing;
            const rows = await svc.sql<{ seq: string; resource: string }[]>`
              select e.seq::text as seq, resource from oauth.events e
              where parent = 'n1' and seq > ${cursor} order by e.seq`;
            for (const r of rows) followed.push({ seq: Number(r.seq), resource: r.resource });
            cursor = followed.at(-1)?.seq ?? cursor;
            if (rows.length > 0) more = true;
          }
        };
        const numbering = async () => {
          while (writing) await numberEvents(svc.sql, "oauth");
        };
        const following = follow();
        const runs = [numbering(), numbering(), numbering()];
        await Promise.all(Array.from({ length: 6 }, (_, w) => write(w)));
        writing = false;
        await Promise.all(runs);
        await numberEvents(svc.sql, "oauth");
        await following;
        // A last read after the last numbering: the follower ends with everything.
        const rest = await svc.sql<{ seq: string; resource: string }[]>`
          select e.seq::text as seq, resource from oauth.events e
          where parent = 'n1' and seq > ${followed.at(-1)?.seq ?? 0} order by e.seq`;
        for (const r of rest) followed.push({ seq: Number(r.seq), resource: r.resource });
        assert.deepEqual(followed.map((e) => e.seq), Array.from({ length: 120 }, (_, i) => i + 1));
        assert.equal(new Set(followed.map((e) => e.resource)).size, 120, "each event once");
        // Each writer's events are numbered in the order it wrote them.
        for (const w of [0, 2, 4]) {
          const mine = followed.filter((e) => e.resource.startsWith(`r/${w}/`));
          assert.deepEqual(
            mine.map((e) => e.resource),
            Array.from({ length: 40 }, (_, i) => `r/${w}/${i}`),
          );
        }
        const [n2] = await svc.sql<{ n: number; max: string }[]>`
          select count(distinct seq)::int as n, max(seq)::text as max from oauth.events
          where parent = 'n2'`;
        assert.deepEqual({ ...n2 }, { n: 120, max: "120" });
      },
    );

    await t.step(
      "a watch ends with its signal's reason: a deadline is DEADLINE_EXCEEDED",
      async () => {
        const feed = createEventFeed(svc.sql, "oauth", { maxWatchers: 1 });
        const controller = new AbortController();
        // From the last event given: a watch that waits for the next.
        const [last] = await svc.sql<{ seq: string }[]>`
          select coalesce(max(seq), 0)::text as seq from oauth.events where parent = 'p'`;
        const waiting = feed.watch("p", BigInt(last!.seq), controller.signal).next();
        controller.abort(new ConnectError("the operation timed out", Code.DeadlineExceeded));
        assert.equal((await rejection(waiting)).code, Code.DeadlineExceeded);
        assert.equal(feed.watchers(), 0);
        feed.close();
      },
    );

    await t.step(
      "a draining process ends its watches (UNAVAILABLE), and takes no new one",
      async () => {
        const feed = createEventFeed(svc.sql, "oauth", { maxWatchers: 1 });
        const signal = AbortSignal.timeout(30_000);
        const batches = feed.watch("p", 0n, signal);
        assert.ok((await batches.next()).value!.length > 0, "the first batch");
        const busy = await rejection(feed.watch("p", 0n, signal).next());
        assert.equal(busy.code, Code.ResourceExhausted, "one watcher at most");
        const waiting = batches.next(); // caught up: waits for the next commit
        feed.close();
        assert.equal((await rejection(waiting)).code, Code.Unavailable);
        assert.equal(feed.watchers(), 0);
        assert.equal((await rejection(feed.watch("p", 0n, signal).next())).code, Code.Unavailable);
      },
    );

    await t.step(
      "retention: events older than the days kept go, a thousand at a time",
      async () => {
        const day = 86_400_000;
        // Relative to the present the other steps' events were written in (the service's clock).
        const now = Date.now();
        // 2,500 events 401 days old and 10 of 399 days, in a project of their own.
        await svc.sql`
        insert into oauth.events (parent, seq, occurred_at, method, resource, actor_sub,
          request_id, source_ip, user_agent, peer, changes, result)
        select 'old', g, case when g <= 2500 then ${new Date(now - 401 * day)}::timestamptz
          else ${new Date(now - 399 * day)}::timestamptz end, 'm', 'r', 's', '', '', '', '',
          '[]', 'ok'
        from generate_series(1, 2510) g`;
        const log = { info: () => {}, warn: () => {} } as unknown as Parameters<
          typeof pruneOnce
        >[2]["log"];
        const keep = { days: 400, now: () => now, log };
        // At most maxBatches batches a run: the rest waits for the next run.
        assert.equal(await pruneOnce(svc.sql, "oauth", { ...keep, maxBatches: 1 }), 1000);
        assert.equal(await pruneOnce(svc.sql, "oauth", keep), 1500);
        assert.equal(await pruneOnce(svc.sql, "oauth", keep), 0);
        const [left] = await svc.sql<{ n: number; first: string }[]>`
        select count(*)::int as n, min(seq)::text as first from oauth.events where parent = 'old'`;
        assert.deepEqual({ ...left }, { n: 10, first: "2501" });
        const [p] = await svc.sql<{ n: number }[]>`
        select count(*)::int as n from oauth.events where parent = 'p'`;
        assert.ok(p!.n > 50, "this run's events are kept");

        // A watch from a position retention has passed learns that it missed events; from the
        // position before the oldest kept, or from 0, it goes on.
        const feed = createEventFeed(svc.sql, "oauth", { maxWatchers: 4 });
        const signal = AbortSignal.timeout(30_000);
        const gone = await rejection(feed.watch("old", 100n, signal).next());
        assert.equal(gone.code, Code.OutOfRange);
        assert.match(gone.rawMessage, /the oldest kept is 2501/);
        for (const after of [2500n, 0n]) {
          const batches = feed.watch("old", after, signal);
          assert.equal((await batches.next()).value![0]!.seq, "2501");
          await batches.return(undefined);
        }

        // A quiet project whose every event retention took (1 to 5, numbered: its head says 5): a
        // consumer that saw 2 missed 3 to 5 as surely, though no event is left to name; one that
        // saw 5 missed nothing, and goes on with the next change.
        await svc.sql`
        insert into oauth.events (parent, seq, occurred_at, method, resource, actor_sub,
          request_id, source_ip, user_agent, peer, changes, result)
        select 'quiet', g, ${new Date(now - 401 * day)}::timestamptz, 'm', 'r', 's', '', '', '',
          '', '[]', 'ok'
        from generate_series(1, 5) g`;
        await svc.sql`insert into oauth.event_heads (parent, seq) values ('quiet', 5)`;
        assert.equal(await pruneOnce(svc.sql, "oauth", keep), 5);
        // (Before, it waited for the next change, until the step's deadline.)
        const missed = await rejection(feed.watch("quiet", 2n, signal).next());
        assert.equal(missed.code, Code.OutOfRange);
        assert.match(missed.rawMessage, /none is kept.*watch from 5/);
        // A position the feed never gave (past the head; a project with no event at all) is
        // refused, not waited on until the events up to it come and are skipped.
        const never = [["quiet", 6n, 5], ["old", 2511n, 2510], ["none", 1n, 0]] as const;
        for (const [parent, after, last] of never) {
          const refused = await rejection(feed.watch(parent, after, signal).next());
          assert.equal(refused.code, Code.OutOfRange, `${parent} after ${after}`);
          assert.match(refused.rawMessage, new RegExp(`watch from ${last} `));
        }
        const batches = feed.watch("quiet", 5n, signal);
        const next = batches.next();
        await svc.sql`
        insert into oauth.events (parent, occurred_at, method, resource, actor_sub, request_id,
          source_ip, user_agent, peer, changes, result)
        values ('quiet', now(), 'm', 'r', 's', '', '', '', '', '[]', 'ok')`;
        assert.equal((await next).value![0]!.seq, "6");
        await batches.return(undefined);
        const first = feed.watch("quiet", 0n, signal);
        assert.equal((await first.next()).value![0]!.seq, "6", "0 starts at the oldest kept");
        await first.return(undefined);
        feed.close();
      },
    );

    await t.step("one project's watchers take at most a quarter of the process's", async () => {
      const feed = createEventFeed(svc.sql, "oauth", { maxWatchers: 8 });
      const signal = AbortSignal.timeout(30_000);
      const held = [feed.watch("p", 0n, signal), feed.watch("p", 0n, signal)];
      for (const w of held) await w.next();
      const third = await rejection(feed.watch("p", 0n, signal).next());
      assert.equal(third.code, Code.ResourceExhausted);
      assert.match(third.rawMessage, /p has 2 watchers/);
      // Another project still watches, and a place freed is taken again.
      const other = feed.watch("old", 0n, signal);
      assert.ok((await other.next()).value!.length > 0);
      await held[0]!.return(undefined);
      const again = feed.watch("p", 0n, signal);
      assert.ok((await again.next()).value!.length > 0);
      for (const w of [held[1]!, other, again]) await w.return(undefined);
      assert.equal(feed.watchers(), 0);
      feed.close();
    });
  } finally {
    await svc.close();
  }
});
