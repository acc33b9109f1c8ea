/**
 * Client secrets are stored only as keyed hashes: after secrets are created through the gateway
 * and over gRPC and verified, neither a full `pg_dump` of the database, nor any log line of any
 * process, nor the bytes the services sent to Postgres, nor any response other than the create
 * response contains a plaintext. Verification fails for a wrong secret, a suspended client, a
 * deleted secret and a deleted client; with two live secrets (rotation) both verify, and deleting
 * one leaves the other working.
 */

import assert from "node:assert/strict";
import { ClientStatus, ClientType } from "../gen/registry/oauth/v1/client_pb.ts";
import { OAuthRegistryService } from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { grpcTestClient } from "../lib/testing/mod.ts";
import { httpClient } from "../lib/testing/mod.ts";
import { startStack } from "../lib/testing/mod.ts";

const rpc = OAuthRegistryService.method;
const bigints = (_: string, v: unknown) => typeof v === "bigint" ? String(v) : v;

/** A TCP proxy to Postgres that keeps a copy of every byte the services send. */
function startTap(target: { hostname: string; port: number }) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const sent: Uint8Array[][] = []; // per connection, in order
  const conns = new Set<Deno.Conn>();
  const closeAll = () => {
    for (const c of conns) {
      try {
        c.close();
      } catch { /* closed */ }
    }
    conns.clear();
  };
  const accepting = (async () => {
    for await (const client of listener) {
      conns.add(client);
      Deno.connect(target).then((server) => {
        conns.add(server);
        const chunks: Uint8Array[] = [];
        sent.push(chunks);
        const tee = new TransformStream<Uint8Array, Uint8Array>({
          transform(chunk, controller) {
            chunks.push(chunk.slice());
            controller.enqueue(chunk);
          },
        });
        client.readable.pipeThrough(tee).pipeTo(server.writable).catch(() => {});
        server.readable.pipeTo(client.writable).catch(() => {});
      }, () => client.close());
    }
  })().catch(() => {});
  return {
    port: (listener.addr as Deno.NetAddr).port,
    /** What each connection sent to Postgres so far, as Latin-1 (one character per byte). */
    texts: () =>
      sent.map((chunks) => chunks.map((c) => new TextDecoder("latin1").decode(c)).join("")),
    async close() {
      listener.close();
      closeAll();
      await accepting;
    },
  };
}

/** The forms a leaked secret could take: as issued, without its prefix, its raw bytes as hex. */
function forms(secret: string): string[] {
  const body = secret.slice("ocs_".length);
  const raw = atob(body.replaceAll("-", "+").replaceAll("_", "/") + "=");
  const hex = Array.from(raw, (c) => c.charCodeAt(0).toString(16).padStart(2, "0")).join("");
  return [secret, body, hex];
}

Deno.test("secret plaintexts appear only in the create response: never in the database, logs or other responses", async () => {
  const real = new URL(Deno.env.get("DATABASE_URL") ?? "postgres://127.0.0.1:5432/postgres");
  const tap = startTap({ hostname: real.hostname, port: Number(real.port || 5432) });
  const stack = await startStack({
    serviceDatabaseUrl: (url) => {
      const u = new URL(url);
      u.hostname = "127.0.0.1";
      u.port = String(tap.port);
      return u.toString();
    },
  });
  let stopped = false;
  const grpc = grpcTestClient(stack.oauthGrpc);
  try {
    const api = httpClient(stack.gatewayUrl);
    const token = await stack.token({ sub: "owner", projects: ["sec"] });
    const admin = { authorization: `Bearer ${token}` };
    const tokenService = {
      authorization: `Bearer ${await stack.token({ sub: "token-service", projects: ["*"] })}`,
    };
    /** Every response body other than a create-secret response, to be scanned too. */
    const otherResponses: string[] = [];
    const plaintexts: string[] = [];

    assert.equal(
      (await api("PATCH", "/v1/projects/sec/config", { token, json: { application_name: "S" } }))
        .status,
      200,
    );

    // Two clients through the gateway, two over gRPC; three secrets each, created both ways.
    const clientIds: string[] = [];
    for (let i = 0; i < 2; i++) {
      const res = await api("POST", "/v1/projects/sec/clients", {
        token,
        json: { name: `http ${i}`, type: "web", redirect_uris: ["https://app.example.com/cb"] },
      });
      assert.equal(res.status, 201, res.text);
      otherResponses.push(res.text);
      clientIds.push(res.body.id);
      const { client } = await grpc.call(rpc.createClient, {
        projectId: "sec",
        client: {
          name: `grpc ${i}`,
          type: ClientType.WEB,
          redirectUris: ["https://app.example.com/cb"],
        },
      }, admin);
      clientIds.push(client!.id);
    }
    const secrets = new Map<string, { id: string; secret: string }[]>();
    for (const clientId of clientIds) {
      const held: { id: string; secret: string }[] = [];
      for (let i = 0; i < 3; i++) {
        if (i % 2 === 0) {
          const res = await api("POST", `/v1/projects/sec/clients/${clientId}/secrets`, { token });
          assert.equal(res.status, 201, res.text);
          assert.match(res.body.secret, /^ocs_[A-Za-z0-9_-]{43}$/);
          assert.equal(res.body.secret_hint, `ocs_****${res.body.secret.slice(-4)}`);
          held.push({ id: res.body.id, secret: res.body.secret });
        } else {
          const { clientSecret } = await grpc.call(
            rpc.createClientSecret,
            { projectId: "sec", clientId },
            admin,
          );
          assert.equal(clientSecret!.plaintext.case, "secret");
          held.push({ id: clientSecret!.id, secret: clientSecret!.plaintext.value! });
        }
      }
      secrets.set(clientId, held);
      plaintexts.push(...held.map((h) => h.secret));
    }
    assert.equal(new Set(plaintexts).size, plaintexts.length, "every secret is new");

    // Every secret verifies, over gRPC and over the Connect port (JSON), for its own client only.
    const verify = async (clientId: string, secret: string) =>
      (await grpc.call(rpc.verifyClientSecret, { clientId, secret }, tokenService)).valid;
    const verifyConnect = async (clientId: string, secret: string) => {
      const res = await fetch(
        `${stack.oauthHttp}/${OAuthRegistryService.typeName}/VerifyClientSecret`,
        {
          method: "POST",
          headers: { ...tokenService, "content-type": "application/json" },
          body: JSON.stringify({ clientId, secret }),
        },
      );
      const text = await res.text();
      assert.equal(res.status, 200, text);
      otherResponses.push(text);
      return JSON.parse(text).valid === true;
    };
    let verifications = 0;
    for (const [clientId, held] of secrets) {
      for (const { secret } of held) {
        assert.equal(await verify(clientId, secret), true);
        assert.equal(await verifyConnect(clientId, secret), true);
        const other = clientIds.find((c) => c !== clientId)!;
        assert.equal(await verify(other, secret), false, "a secret verifies only its own client");
        verifications += 3;
      }
    }

    // Non-create responses never carry a plaintext (and never a `secret` field).
    const [c0, c1, c2, c3] = clientIds as [string, string, string, string];
    for (const clientId of clientIds) {
      const list = await api("GET", `/v1/projects/sec/clients/${clientId}/secrets`, { token });
      assert.equal(list.status, 200);
      assert.equal(list.body.data.length, 3);
      for (const s of list.body.data) {
        assert.equal("secret" in s, false, "a listed secret has no plaintext field");
        assert.match(s.secret_hint, /^ocs_\*{4}[A-Za-z0-9_-]{4}$/);
      }
      const get = await api("GET", `/v1/projects/sec/clients/${clientId}`, { token });
      assert.equal(get.status, 200);
      const listed = await grpc.call(rpc.listClientSecrets, { projectId: "sec", clientId }, admin);
      assert.ok(listed.data.every((s) => s.plaintext.case === undefined));
      otherResponses.push(list.text, get.text, JSON.stringify(listed, bigints));
    }
    const clients = await api("GET", "/v1/projects/sec/clients?limit=100", { token });
    assert.equal(clients.body.data.length, 4);
    otherResponses.push(clients.text);

    // A wrong secret: one character changed, truncated, empty, another client's secret.
    const s0 = secrets.get(c0)![0]!.secret;
    const flipped = s0.slice(0, -1) + (s0.endsWith("A") ? "B" : "A");
    for (const wrong of [flipped, s0.slice(0, -1), s0 + "A", "", secrets.get(c1)![0]!.secret]) {
      assert.equal(await verify(c0, wrong), false, `wrong secret ${JSON.stringify(wrong)}`);
      verifications++;
    }
    assert.equal(await verify("cli_00000000000000000000000000", s0), false, "unknown client");
    assert.equal(await verify("not-an-id", s0), false, "malformed client id");

    // A suspended client verifies none of its secrets (the one non-active state, spec 3.2);
    // active again, they verify again.
    const suspend = await api("PATCH", `/v1/projects/sec/clients/${c1}`, {
      token,
      json: { status: "suspended" },
    });
    assert.equal(suspend.body.status, "suspended");
    otherResponses.push(suspend.text);
    for (const { secret } of secrets.get(c1)!) assert.equal(await verify(c1, secret), false);
    await grpc.call(rpc.updateClient, {
      projectId: "sec",
      clientId: c1,
      client: { status: ClientStatus.ACTIVE },
      updateMask: { paths: ["status"] },
    }, admin);
    for (const { secret } of secrets.get(c1)!) assert.equal(await verify(c1, secret), true);
    verifications += 6;

    // Rotation: two live secrets both verify; deleting one leaves the other working.
    const [old, next, third] = secrets.get(c2)! as [
      { id: string; secret: string },
      { id: string; secret: string },
      { id: string; secret: string },
    ];
    assert.equal(
      (await api("DELETE", `/v1/projects/sec/clients/${c2}/secrets/${third.id}`, { token })).status,
      204,
    );
    assert.equal(await verify(c2, old.secret), true);
    assert.equal(await verify(c2, next.secret), true);
    assert.equal(
      (await api("DELETE", `/v1/projects/sec/clients/${c2}/secrets/${old.id}`, { token })).status,
      204,
    );
    assert.equal(await verify(c2, old.secret), false, "a deleted secret never verifies");
    assert.equal(await verify(c2, third.secret), false);
    assert.equal(await verify(c2, next.secret), true, "the remaining secret still verifies");
    assert.equal(await verifyConnect(c2, next.secret), true);
    await grpc.call(rpc.deleteClientSecret, {
      projectId: "sec",
      clientId: c2,
      secretId: next.id,
    }, admin);
    assert.equal(await verify(c2, next.secret), false, "no secret left: nothing verifies");
    verifications += 6;

    // A deleted client verifies none of its secrets.
    assert.equal((await api("DELETE", `/v1/projects/sec/clients/${c3}`, { token })).status, 204);
    for (const { secret } of secrets.get(c3)!) {
      assert.equal(await verify(c3, secret), false);
      assert.equal(await verifyConnect(c3, secret), false);
      verifications += 2;
    }

    // The database: a full dump. The scan must be able to find things: the hints and the hashes'
    // rows are there.
    const dump = await new Deno.Command("pg_dump", {
      args: ["--no-owner", "--dbname", stack.databaseUrl],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(dump.code, 0, new TextDecoder().decode(dump.stderr));
    const dumpText = new TextDecoder("latin1").decode(dump.stdout);
    assert.ok(dumpText.includes("COPY oauth.client_secrets"), "the dump holds the secrets table");
    const hint = secrets.get(c0)![1]!;
    assert.ok(dumpText.includes(`ocs_****${hint.secret.slice(-4)}`), "the dump holds the hints");

    // Every line every process wrote, once the processes have flushed and exited (the gRPC
    // channel is closed first, as every client should before its server goes).
    grpc.close();
    await stack.stop();
    stopped = true;
    await new Promise((r) => setTimeout(r, 100));
    const lines = Object.values(stack.procs).flatMap((p) => p.lines);
    assert.ok(
      lines.some((l) => l.includes("CreateClientSecret")) &&
        lines.some((l) => l.includes("VerifyClientSecret")),
      "the services logged the secret RPCs",
    );
    const wire = tap.texts();
    const wireBytes = wire.reduce((n, t) => n + t.length, 0);
    assert.ok(
      wire.some((t) => t.includes("oauth.client_secrets")),
      "the tap saw the services' queries",
    );

    const found: string[] = [];
    for (const secret of plaintexts) {
      for (const form of forms(secret)) {
        if (dumpText.includes(form)) found.push(`pg_dump: ${form}`);
        if (wire.some((t) => t.includes(form))) found.push(`sent to Postgres: ${form}`);
        for (const line of lines) if (line.includes(form)) found.push(`log: ${line}`);
        for (const body of otherResponses) if (body.includes(form)) found.push(`response: ${body}`);
      }
    }
    assert.deepEqual(found, [], "no plaintext secret anywhere but in its create response");
    // deno-lint-ignore no-console
    console.log(
      `secrets: ${plaintexts.length} plaintexts searched in ${dump.stdout.length} bytes of dump ` +
        `and ${lines.length} log lines, 0 found (also ${wireBytes} bytes sent to Postgres and ` +
        `${otherResponses.length} other responses; ${verifications} verifications checked)`,
    );
  } finally {
    grpc.close();
    if (!stopped) await stack.stop();
    await tap.close();
  }
});
