/**
 * The token service's caches, kept honest by Postgres, with two replicas of it over one database
 * and one registry (real processes, real gRPC): every change to what they keep in memory (a
 * secret deleted, a client suspended, an installation revoked, an access token revoked on the
 * other replica) takes effect in both within the promised second, also when one replica's
 * listening connection is cut just before the change. And the cache is really in use: the
 * replicas answer from memory (their `registry_cache_answers_total{result="hits"}` grows).
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
  waitReady,
} from "../lib/testing/mod.ts";
import postgres from "postgres";

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
    const newClient = async () => {
      const client = await api("POST", "/v1/projects/cp1/clients", {
        token: admin,
        json: { name: "cached", type: "web" },
      });
      assert.equal(client.status, 201, client.text);
      return client.body.id as string;
    };
    const newSecret = async (clientId: string) => {
      const secret = await api("POST", `/v1/projects/cp1/clients/${clientId}/secrets`, {
        token: admin,
      });
      assert.equal(secret.status, 201, secret.text);
      return { id: secret.body.id as string, secret: secret.body.secret as string };
    };
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
    });
  } finally {
    for (const replica of replicas) replica.close();
    await sql.end();
    second.child.kill("SIGTERM");
    await second.child.status;
    await stack.stop();
  }
});
