/**
 * The token service's caches, kept honest by Postgres, with two replicas of it over one database
 * and one registry (real processes, real gRPC): every change to what they keep in memory (a
 * secret deleted, a client suspended, an installation revoked, an access token revoked on the
 * other replica, a signing key deleted by SQL) takes effect in both within the promised second,
 * also when one replica's listening connection is cut just before the change. And the cache is
 * really in use: the replicas answer from memory (their
 * `registry_cache_answers_total{result="hits"}` grows). The same for two gateways and their caches
 * of introspections and client reads (gateway/introspection_cache.ts, gateway/read_cache.ts).
 */

import assert from "node:assert/strict";
import { TokenService } from "../gen/registry/token/v1/token_service_pb.ts";
import type { IntrospectTokenResponse } from "../gen/registry/token/v1/token_service_pb.ts";
import {
  freePort,
  type GrpcTestClient,
  grpcTestClient,
  httpClient,
  propagated,
  spawn,
  startStack,
  until,
  waitReady,
} from "../lib/testing/mod.ts";
import postgres from "postgres";
import { keptReads } from "../gateway/read_cache.ts";
import { createOAuthPolicy } from "../services/oauth/policy.ts";
import { corePolicy } from "../services/core/policy.ts";
import { idKind } from "../lib/platform/mod.ts";

const ids = idKind("cli");

/** The `kid` in a JWT's header. */
const kidOf = (jwt: string): string =>
  JSON.parse(atob(jwt.split(".")[0]!.replace(/-/g, "+").replace(/_/g, "/"))).kid;

Deno.test("the gateway's read cache checks the owner's own rule of each read it keeps", () => {
  const policies = new Map<unknown, Record<string, unknown>>([
    [keptReads.client.service, createOAuthPolicy({} as never) as Record<string, unknown>],
    [keptReads.unit.service, corePolicy as unknown as Record<string, unknown>],
  ]);
  for (const [name, kept] of Object.entries(keptReads)) {
    assert.equal(kept.rule, policies.get(kept.service)?.[kept.method.localName], name);
  }
});

/** Makes web clients and their secrets in `project`, through the gateway. */
function registrar(api: ReturnType<typeof httpClient>, admin: string, project: string) {
  return {
    async newClient() {
      const client = await api("POST", `/v1/projects/${project}/clients`, {
        token: admin,
        json: { name: "cached", type: "web" },
      });
      assert.equal(client.status, 201, client.text);
      return client.body.id as string;
    },
    async newSecret(clientId: string) {
      const secret = await api("POST", `/v1/projects/${project}/clients/${clientId}/secrets`, {
        token: admin,
      });
      assert.equal(secret.status, 201, secret.text);
      return { id: secret.body.id as string, secret: secret.body.secret as string };
    },
  };
}

Deno.test("two token-service replicas: every change reaches both caches within a second", async (t) => {
  const stack = await startStack();
  const grpcPort = freePort();
  const httpPort = freePort();
  const second = spawn("services/token/main.ts", {
    ...stack.envOf("token"),
    GRPC_PORT: `${grpcPort}`,
    HTTP_PORT: `${httpPort}`,
  });
  const sql = postgres(stack.databaseUrl, { max: 1, onnotice: () => {} });
  const replicas: GrpcTestClient[] = [];
  try {
    await waitReady(`http://127.0.0.1:${httpPort}`);
    replicas.push(grpcTestClient(stack.tokenGrpc), grpcTestClient(`127.0.0.1:${grpcPort}`));
    const api = httpClient(stack.gatewayUrl);
    const admin = await stack.token({ sub: "admin", projects: ["cp1"] });
    const user = await stack.token({ sub: "user-1", projects: [] });
    await api("PATCH", "/v1/projects/cp1/config", {
      token: admin,
      json: { application_name: "Cached", audience: "external" },
    });
    const { newClient, newSecret } = registrar(api, admin, "cp1");
    const a = await newClient();
    const aSecret = await newSecret(a);
    const watcher = await newClient(); // introspects the others' tokens
    const watcherSecret = await newSecret(watcher);

    /** A client_credentials grant on a replica: the access token, or the gRPC failure's code. */
    const grant = async (replica: GrpcTestClient, clientId: string, secret: string) => {
      try {
        const res = await replica.call(TokenService.method.issueToken, {
          client: { clientId, clientSecret: secret },
          grantType: "client_credentials",
        });
        return res.accessToken;
      } catch (error) {
        return `failed: ${(error as Error).message}`;
      }
    };
    const introspect = async (replica: GrpcTestClient, token: string) =>
      ((await replica.call(TokenService.method.introspectToken, {
        client: { clientId: watcher, clientSecret: watcherSecret.secret },
        token,
      })) as IntrospectTokenResponse).active;
    /** Suspends or reactivates client `a`, through the gateway. */
    const setStatus = async (status: "suspended" | "active") => {
      const res = await api("PATCH", `/v1/projects/cp1/clients/${a}`, {
        token: admin,
        json: { status },
      });
      assert.equal(res.status, 200, res.text);
    };
    const hits = async (port: string) => {
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      return Number(
        /registry_cache_answers_total\{result="hits"[^}]*\} (\d+)/.exec(text)?.[1] ?? 0,
      );
    };

    await t.step("both replicas answer grants and introspection from memory", async () => {
      // A replica serves from memory once it has seen the registry's triggers in the catalog and
      // its feed is fresh: soon after it starts (asked again every 250 ms), not at a known time.
      const ports = [new URL(stack.tokenHttp).port, `${httpPort}`];
      for (const [i, replica] of replicas.entries()) {
        for (let round = 0; await hits(ports[i]!) === 0; round++) {
          assert.ok(round < 300, `replica ${i + 1} never answered from memory`);
          const token = await grant(replica, a, aSecret.secret);
          assert.doesNotMatch(token, /^failed/);
          assert.equal(await introspect(replica, token), true);
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    });

    await t.step("a deleted secret stops working in both", async () => {
      const extra = await newSecret(a);
      for (const replica of replicas) {
        assert.doesNotMatch(await grant(replica, a, extra.secret), /^failed/);
      }
      const deleted = await api("DELETE", `/v1/projects/cp1/clients/${a}/secrets/${extra.id}`, {
        token: admin,
      });
      assert.equal(deleted.status, 204, deleted.text);
      await propagated();
      for (const replica of replicas) {
        assert.match(await grant(replica, a, extra.secret), /^failed/);
        assert.doesNotMatch(await grant(replica, a, aSecret.secret), /^failed/);
      }
    });

    await t.step("a revoked access token is inactive in the other replica too", async () => {
      const token = await grant(replicas[0]!, a, aSecret.secret);
      for (const replica of replicas) assert.equal(await introspect(replica, token), true);
      await replicas[0]!.call(TokenService.method.revokeToken, {
        client: { clientId: a, clientSecret: aSecret.secret },
        token,
      });
      assert.equal(await introspect(replicas[0]!, token), false, "at once where it was revoked");
      await propagated();
      assert.equal(await introspect(replicas[1]!, token), false);
    });

    await t.step("a revoked installation's tokens are inactive in both", async () => {
      const installation = await api("POST", "/v1/installations", {
        token: user,
        json: { project_id: "cp1", scopes: ["read"] },
      });
      assert.equal(installation.status, 201, installation.text);
      const own = await grant(replicas[0]!, a, aSecret.secret);
      const exchanged = await replicas[0]!.call(TokenService.method.issueToken, {
        client: { clientId: a, clientSecret: aSecret.secret },
        grantType: "urn:ietf:params:oauth:grant-type:token-exchange",
        subjectToken: own,
        subjectTokenType: "urn:ietf:params:oauth:token-type:access_token",
        audience: installation.body.id,
      });
      for (const replica of replicas) {
        assert.equal(await introspect(replica, exchanged.accessToken), true);
      }
      const revoked = await api("DELETE", `/v1/installations/${installation.body.id}`, {
        token: user,
      });
      assert.equal(revoked.status, 204, revoked.text);
      await propagated();
      for (const replica of replicas) {
        assert.equal(await introspect(replica, exchanged.accessToken), false);
      }
    });

    await t.step(
      "a suspended client gets nothing in both, and its tokens are inactive",
      async () => {
        const token = await grant(replicas[1]!, a, aSecret.secret);
        await setStatus("suspended");
        await propagated();
        for (const replica of replicas) {
          assert.match(await grant(replica, a, aSecret.secret), /^failed/);
          assert.equal(await introspect(replica, token), false);
        }
        await setStatus("active");
        await propagated();
        for (const replica of replicas) {
          assert.doesNotMatch(await grant(replica, a, aSecret.secret), /^failed/);
        }
      },
    );

    await t.step("a change made while a replica's listener is cut still reaches it", async () => {
      // Fill both caches, cut the second replica's listening connection, and change at once:
      // the notification is sent while nobody of that replica listens, and is gone for it.
      for (const replica of replicas) {
        assert.doesNotMatch(await grant(replica, a, aSecret.secret), /^failed/);
      }
      const cut = await sql`
        select pg_terminate_backend(pid) from pg_stat_activity
        where application_name = ${`token-service/${second.child.pid}`}
          and query ilike 'listen%'`;
      assert.ok(cut.length >= 1, "the second replica listens on a connection of its own");
      await setStatus("suspended");
      await propagated();
      for (const replica of replicas) {
        assert.match(await grant(replica, a, aSecret.secret), /^failed/);
      }
      await setStatus("active");
    });

    await t.step(
      "a signing key deleted by SQL verifies nothing in both, also with a listener cut",
      async () => {
        for (const cutFirst of [false, true]) {
          // Both replicas sign with the same current key; its tokens are active in both.
          await until(
            async () => !(await grant(replicas[1]!, a, aSecret.secret)).startsWith("failed"),
            5000,
            "client a active",
          );
          const token = await grant(replicas[0]!, a, aSecret.secret);
          assert.doesNotMatch(token, /^failed/);
          for (const replica of replicas) assert.equal(await introspect(replica, token), true);
          if (cutFirst) {
            const cut = await sql`
            select pg_terminate_backend(pid) from pg_stat_activity
            where application_name = ${`token-service/${second.child.pid}`}
              and query ilike 'listen%'`;
            assert.ok(cut.length >= 1);
          }
          const deleted = await sql`delete from token.signing_keys where kid = ${kidOf(token)}`;
          assert.equal(deleted.count, 1);
          // The promised second gone by, neither may still take it: asked then, not polled, so
          // that a slow answer on a busy machine cannot miss the bound.
          await propagated();
          for (const replica of replicas) {
            assert.equal(await introspect(replica, token), false, "the deleted key's token");
          }
          // Each signs with another key, whose tokens both take.
          for (const replica of replicas) {
            const fresh = await grant(replica, a, aSecret.secret);
            assert.notEqual(kidOf(fresh), kidOf(token));
            for (const other of replicas) assert.equal(await introspect(other, fresh), true);
          }
        }
      },
    );
  } finally {
    for (const replica of replicas) replica.close();
    await sql.end();
    second.child.kill("SIGTERM");
    await second.child.status;
    await stack.stop();
  }
});

Deno.test("two gateways: introspection answered from memory, and every change reaches both within a second", async (t) => {
  const stack = await startStack();
  const port = freePort();
  const second = spawn("gateway/main.ts", { ...stack.envOf("gateway"), GATEWAY_PORT: `${port}` });
  const sql = postgres(stack.databaseUrl, { max: 1, onnotice: () => {} });
  const gateways = [stack.gatewayUrl, `http://127.0.0.1:${port}`];
  try {
    await waitReady(gateways[1]!);
    const api = httpClient(stack.gatewayUrl);
    const admin = await stack.token({ sub: "admin", projects: ["gp1"] });
    const user = await stack.token({ sub: "user-1", projects: [] });
    await api("PATCH", "/v1/projects/gp1/config", {
      token: admin,
      json: { application_name: "Cached", audience: "external" },
    });
    const { newClient, newSecret } = registrar(api, admin, "gp1");
    const basic = (clientId: string, secret: string) => ({
      "content-type": "application/x-www-form-urlencoded",
      authorization: `Basic ${btoa(`${clientId}:${secret}`)}`,
    });
    const a = await newClient();
    const aSecret = await newSecret(a);
    const watcher = await newClient(); // the resource server that introspects a's tokens
    const watcherSecret = await newSecret(watcher);

    const grant = async () => {
      const res = await api("POST", "/oauth2/token", {
        headers: basic(a, aSecret.secret),
        raw: "grant_type=client_credentials",
      });
      assert.equal(res.status, 200, res.text);
      return res.body.access_token as string;
    };
    /** Introspects on gateway `i`: the status and the body's text. */
    const introspect = async (i: number, token: string, secret = watcherSecret.secret) => {
      const res = await httpClient(gateways[i]!)("POST", "/oauth2/introspect", {
        headers: basic(watcher, secret),
        raw: new URLSearchParams({ token }).toString(),
      });
      return { status: res.status, text: res.text };
    };
    const hits = async (i: number) => {
      const text = await (await fetch(`${gateways[i]}/metrics`)).text();
      return Number(
        /introspection_cache_answers_total\{result="hits"[^}]*\} (\d+)/.exec(text)?.[1] ?? 0,
      );
    };
    /**
     * Introspects `token` on both gateways until each answers it from memory: an answer is kept
     * once the gateway has seen the triggers and its feeds are fresh, and not within 800 ms after
     * a change (so not at a known time). Returns the active answer's text.
     */
    const held = async (token: string, secret = watcherSecret.secret) => {
      let text = "";
      for (const i of [0, 1]) {
        const before = await hits(i);
        for (let round = 0;; round++) {
          assert.ok(round < 300, `gateway ${i + 1} never answered from memory`);
          const res = await introspect(i, token, secret);
          assert.equal(res.status, 200, res.text);
          assert.equal(JSON.parse(res.text).active, true, res.text);
          // The answer from memory is the token service's, to the byte.
          if (text !== "") assert.equal(res.text, text);
          text = res.text;
          if (await hits(i) > before) break;
          await new Promise((r) => setTimeout(r, 100));
        }
      }
      return text;
    };
    const inactive = async (i: number, token: string) => {
      const res = await introspect(i, token);
      assert.equal(res.status, 200, res.text);
      assert.equal(res.text, '{"active":false}', `gateway ${i + 1}`);
    };

    await t.step("both gateways answer from memory what the token service answered", async () => {
      const token = await grant();
      const text = await held(token);
      const body = JSON.parse(text);
      assert.equal(body.client_id, a);
      assert.equal(body.token_type, "Bearer");
    });

    await t.step(
      "a token revoked through one gateway: at once there, within a second in the other",
      async () => {
        const token = await grant();
        await held(token);
        const revoked = await api("POST", "/oauth2/revoke", {
          headers: basic(a, aSecret.secret),
          raw: new URLSearchParams({ token }).toString(),
        });
        assert.equal(revoked.status, 200, revoked.text);
        await inactive(0, token);
        await propagated();
        await inactive(1, token);
      },
    );

    await t.step("a deleted secret of the caller stops working in both", async () => {
      const extra = await newSecret(watcher);
      const token = await grant();
      await held(token, extra.secret);
      const deleted = await api(
        "DELETE",
        `/v1/projects/gp1/clients/${watcher}/secrets/${extra.id}`,
        { token: admin },
      );
      assert.equal(deleted.status, 204, deleted.text);
      await propagated();
      for (const i of [0, 1]) {
        const res = await introspect(i, token, extra.secret);
        assert.equal(res.status, 401, res.text);
        assert.equal(JSON.parse(res.text).error, "invalid_client");
      }
    });

    await t.step("a revoked installation's tokens are inactive in both", async () => {
      const installation = await api("POST", "/v1/installations", {
        token: user,
        json: { project_id: "gp1", scopes: ["read"] },
      });
      assert.equal(installation.status, 201, installation.text);
      const exchanged = await api("POST", "/oauth2/token", {
        headers: basic(a, aSecret.secret),
        raw: new URLSearchParams({
          grant_type: "urn:ietf:params:oauth:grant-type:token-exchange",
          subject_token: await grant(),
          subject_token_type: "urn:ietf:params:oauth:token-type:access_token",
          audience: installation.body.id,
        }).toString(),
      });
      assert.equal(exchanged.status, 200, exchanged.text);
      const token = exchanged.body.access_token as string;
      await held(token);
      const revoked = await api("DELETE", `/v1/installations/${installation.body.id}`, {
        token: user,
      });
      assert.equal(revoked.status, 204, revoked.text);
      await propagated();
      for (const i of [0, 1]) await inactive(i, token);
    });

    /** Suspends or reactivates client `a`. */
    const setStatus = async (status: "suspended" | "active") => {
      const res = await api("PATCH", `/v1/projects/gp1/clients/${a}`, {
        token: admin,
        json: { status },
      });
      assert.equal(res.status, 200, res.text);
    };

    await t.step("a suspended client's tokens are inactive in both", async () => {
      const token = await grant();
      await held(token);
      await setStatus("suspended");
      await propagated();
      for (const i of [0, 1]) await inactive(i, token);
      await setStatus("active");
    });

    await t.step("a deleted client's tokens are inactive in both", async () => {
      const doomed = await newClient();
      const doomedSecret = await newSecret(doomed);
      const issued = await api("POST", "/oauth2/token", {
        headers: basic(doomed, doomedSecret.secret),
        raw: "grant_type=client_credentials",
      });
      assert.equal(issued.status, 200, issued.text);
      const token = issued.body.access_token as string;
      await held(token);
      const deleted = await api("DELETE", `/v1/projects/gp1/clients/${doomed}`, { token: admin });
      assert.equal(deleted.status, 204, deleted.text);
      await propagated();
      for (const i of [0, 1]) await inactive(i, token);
    });

    await t.step(
      "a signing key deleted by SQL: its tokens inactive, the key unpublished, in both",
      async () => {
        const token = await grant();
        await held(token);
        for (const i of [0, 1]) {
          const set = await httpClient(gateways[i]!)("GET", "/oauth2/jwks");
          assert.ok(set.body.keys.some((k: { kid: string }) => k.kid === kidOf(token)));
        }
        const deleted = await sql`delete from token.signing_keys where kid = ${kidOf(token)}`;
        assert.equal(deleted.count, 1);
        const refused = async (i: number) =>
          (await introspect(i, token)).text === '{"active":false}';
        const published = async (i: number) =>
          (await httpClient(gateways[i]!)("GET", "/oauth2/jwks")).body.keys.some((
            k: { kid: string },
          ) => k.kid === kidOf(token));
        await propagated(); // asked then, not polled (see above)
        for (const i of [0, 1]) {
          assert.ok(await refused(i), `the deleted key's token inactive in gateway ${i}`);
          assert.ok(!await published(i), `the deleted key unpublished in gateway ${i}`);
        }
        assert.notEqual(kidOf(await grant()), kidOf(token), "another key signs");
      },
    );

    const clientPath = (clientId: string) => `/v1/projects/gp1/clients/${clientId}`;
    /** How many reads gateway `i` answered from memory. */
    const readHits = async (i: number) => {
      const text = await (await fetch(`${gateways[i]}/metrics`)).text();
      return Number(/read_cache_answers_total\{result="hits"[^}]*\} (\d+)/.exec(text)?.[1] ?? 0);
    };
    /** GET of a client (or of what `path` names) on gateway `i`, as `as` (the admin by default). */
    const read = (i: number, clientId: string, as = admin, path = clientPath(clientId)) =>
      httpClient(gateways[i]!)("GET", path, { token: as });
    /** Reads `clientId` (or `path`, as `as`) on both gateways until each answers it from memory. */
    const readHeld = async (clientId: string, as = admin, path = clientPath(clientId)) => {
      let text = "";
      for (const i of [0, 1]) {
        const before = await readHits(i);
        for (let round = 0;; round++) {
          assert.ok(round < 300, `gateway ${i + 1} never answered a read from memory`);
          const res = await read(i, clientId, as, path);
          assert.equal(res.status, 200, res.text);
          if (text !== "") assert.equal(res.text, text, "the answer from memory is the registry's");
          text = res.text;
          if (await readHits(i) > before) break;
          await new Promise((r) => setTimeout(r, 100));
        }
      }
      return JSON.parse(text).name ?? JSON.parse(text).title as string;
    };

    await t.step(
      "a client read from memory: renamed, at once where, within a second elsewhere",
      async () => {
        const c = await newClient();
        assert.equal(await readHeld(c), "cached");
        // Only for callers the registry lets read it: the others get the registry's own refusal.
        const stranger = await stack.token({ sub: "stranger", projects: ["other"] });
        for (const i of [0, 1]) assert.equal((await read(i, c, stranger)).status, 403);
        const renamed = await httpClient(gateways[0]!)("PATCH", `/v1/projects/gp1/clients/${c}`, {
          token: admin,
          json: { name: "renamed" },
        });
        assert.equal(renamed.status, 200, renamed.text);
        assert.equal((await read(0, c)).body.name, "renamed", "at once through the same gateway");
        await propagated();
        assert.equal((await read(1, c)).body.name, "renamed");
        assert.equal(await readHeld(c), "renamed");
        const deleted = await httpClient(gateways[1]!)("DELETE", `/v1/projects/gp1/clients/${c}`, {
          token: admin,
        });
        assert.equal(deleted.status, 204, deleted.text);
        assert.equal((await read(1, c)).status, 404, "at once through the same gateway");
        await propagated();
        assert.equal((await read(0, c)).status, 404);
      },
    );

    await t.step(
      "a unit read from memory: in its space only, changed within a second elsewhere",
      async () => {
        const member = await stack.token({ sub: "member", projects: [], space: "cs1" });
        const outsider = await stack.token({ sub: "outsider", projects: [], space: "cs2" });
        const journey = await api("POST", "/v1/core/journeys", {
          token: member,
          json: { name: "kept" },
        });
        assert.equal(journey.status, 201, journey.text);
        const unit = await api("POST", "/v1/core/units", {
          token: member,
          json: { journey: journey.body.id, title: "one" },
        });
        assert.equal(unit.status, 201, unit.text);
        const path = `/v1/core/units/${unit.body.id}`;
        assert.equal(await readHeld("", member, path), "one");
        for (const i of [0, 1]) assert.equal((await read(i, "", outsider, path)).status, 404);
        const renamed = await httpClient(gateways[0]!)("PUT", path, {
          token: member,
          json: { journey: journey.body.id, title: "two" },
        });
        assert.equal(renamed.status, 200, renamed.text);
        assert.equal((await read(0, "", member, path)).body.title, "two", "at once, same gateway");
        await propagated();
        assert.equal((await read(1, "", member, path)).body.title, "two");
      },
    );

    await t.step("Cache-Control: no-cache reads past both memories", async () => {
      const c = await newClient();
      await readHeld(c);
      // A change that notifies nobody (triggers off in this session): memory keeps the old name,
      // and a no-cache GET reads Postgres through both gateways and the registry.
      await sql.begin(async (tx) => {
        await tx`set local session_replication_role = replica`;
        await tx`update oauth.clients set name = 'unnotified' where id = ${ids.toUuid(c)!}`;
      });
      for (const i of [0, 1]) {
        assert.equal((await read(i, c)).body.name, "cached", "from memory");
        const fresh = await httpClient(gateways[i]!)("GET", `/v1/projects/gp1/clients/${c}`, {
          token: admin,
          headers: { "cache-control": "no-cache" },
        });
        assert.equal(fresh.status, 200, fresh.text);
        assert.equal(fresh.body.name, "unnotified", "from Postgres");
      }
    });

    await t.step("a change made while a gateway's listener is cut still reaches it", async () => {
      const c = await newClient();
      await readHeld(c);
      const token = await grant();
      await held(token);
      const cut = await sql`
        select pg_terminate_backend(pid) from pg_stat_activity
        where application_name = ${`gateway/${second.child.pid}`} and query ilike 'listen%'`;
      assert.ok(cut.length >= 1, "the second gateway listens on a connection of its own");
      await setStatus("suspended");
      await sql`update oauth.clients set name = 'changed' where id = ${ids.toUuid(c)!}`;
      await propagated();
      for (const i of [0, 1]) await inactive(i, token);
      for (const i of [0, 1]) assert.equal((await read(i, c)).body.name, "changed");
    });
  } finally {
    await sql.end();
    second.child.kill("SIGTERM");
    await second.child.status;
    await stack.stop();
  }
});
