/**
 * Faults, beyond tests/operations_test.ts (SIGTERM, kill -9, a cut without
 * load):
 *
 * - a Postgres "restart" under load: the machine's Postgres is shared, so the services reach it
 *   through a TCP proxy that drops every connection and refuses new ones for ~2 s. The services
 *   recover without a restart, readiness (HTTP and gRPC health) shows the outage, every answer is
 *   a 2xx or a 503 JSON error, and nothing is half-applied;
 * - Postgres down at start (refusing, or nothing listening): the process stays up, not ready,
 *   and becomes ready when Postgres answers, without a restart;
 * - a frozen backend (SIGSTOP): every gateway request still gets its JSON error within
 *   RPC_TIMEOUT_MS plus a margin (504 deadline_exceeded: the backend accepted the connection and
 *   did not answer in time; 503 is for a backend that cannot be reached), and the other backend
 *   keeps serving;
 * - SIGTERM to a service (operations_test covers the gateway) while 30 requests wait inside it on
 *   a row lock the test holds: every one completes, then the process exits 0.
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import { Health, HealthCheckResponse_ServingStatus } from "../gen/grpc/health/v1/health_pb.ts";
import { CoreService } from "../gen/registry/core/v1/core_service_pb.ts";
import { ClientType } from "../gen/registry/oauth/v1/client_pb.ts";
import { OAuthRegistryService } from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { signToken } from "../lib/policy/mod.ts";
import { createTestDatabase } from "../lib/testing/mod.ts";
import { type GrpcFailure, type GrpcTestClient, grpcTestClient } from "../lib/testing/mod.ts";
import { httpClient, status, until } from "../lib/testing/mod.ts";
import { type Proc, spawn, startStack } from "../lib/testing/mod.ts";
import { startTcpProxy } from "../lib/testing/mod.ts";

const oauthRpc = OAuthRegistryService.method;
const { SERVING, NOT_SERVING } = HealthCheckResponse_ServingStatus;

// deno-lint-ignore no-console
const report = (line: string) => console.log(line);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One gRPC client per address for the whole file (made on first use, closed at the end). */
const grpcClients = new Map<string, GrpcTestClient>();
function grpcTo(address: string): GrpcTestClient {
  if (!grpcClients.has(address)) grpcClients.set(address, grpcTestClient(address));
  return grpcClients.get(address)!;
}
function closeGrpcClients(): void {
  for (const client of grpcClients.values()) client.close();
  grpcClients.clear();
}

async function health(address: string, service: string): Promise<number> {
  try {
    return (await grpcTo(address).call(Health.method.check, { service })).status;
  } catch (error) {
    return -(error as GrpcFailure).code;
  }
}

const realDb = new URL(Deno.env.get("DATABASE_URL") ?? "postgres://127.0.0.1:5432/postgres");
const realTarget = { hostname: realDb.hostname, port: Number(realDb.port || 5432) };

function viaPort(url: string, port: number): string {
  const u = new URL(url);
  u.hostname = "127.0.0.1";
  u.port = String(port);
  return u.toString();
}

/** What one request of the load did. */
interface Outcome {
  kind: "client" | "secret" | "grpc-client" | "unit" | "delete" | "config";
  tag: string;
  status: number;
  code?: string;
  id?: string;
  secret?: string;
  clientId?: string;
}

Deno.test("a Postgres outage under load: not ready meanwhile, recovered without a restart, nothing half-applied", async () => {
  const proxy = startTcpProxy(realTarget);
  const stack = await startStack({
    // The default RPC deadline (10 s): a connection attempt that gets no answer fails after the
    // pool's connect_timeout (5 s), within it.
    serviceDatabaseUrl: (url) => viaPort(url, proxy.port),
  });
  const db = postgres(stack.databaseUrl, { max: 2, onnotice: () => {} });
  const grpc = grpcTo(stack.oauthGrpc);
  let running = true;
  try {
    const api = httpClient(stack.gatewayUrl);
    const token = await stack.token({ sub: "u", projects: ["*"], space: "f" });
    const tokenMeta = { authorization: `Bearer ${token}` };
    assert.equal(
      (await api("PATCH", "/v1/projects/f/config", { token, json: { application_name: "F" } }))
        .status,
      200,
    );
    const journey = await api("POST", "/v1/core/journeys", { token, json: { name: "f" } });
    assert.equal(journey.status, 201);
    const pids = { oauth: stack.procs.oauth.child.pid, core: stack.procs.core.child.pid };

    const outcomes: Outcome[] = [];
    const deletable: string[] = [];
    let n = 0;
    const failed = (res: { status: number; body?: { error?: { code?: string } } }) =>
      res.status >= 300 ? { code: res.body?.error?.code ?? "(no JSON error body)" } : {};
    const worker = async (w: number) => {
      while (running) {
        const tag = `t${w}-${n++}`;
        const kind = (["client", "grpc-client", "unit", "delete", "config"] as const)[n % 5]!;
        if (kind === "client") {
          const res = await api("POST", "/v1/projects/f/clients", {
            token,
            json: { name: tag, type: "web" },
          });
          outcomes.push({ kind, tag, status: res.status, id: res.body?.id, ...failed(res) });
          if (res.status !== 201) continue;
          const sec = await api("POST", `/v1/projects/f/clients/${res.body.id}/secrets`, { token });
          outcomes.push({
            kind: "secret",
            tag,
            status: sec.status,
            id: sec.body?.id,
            secret: sec.body?.secret,
            clientId: res.body.id,
            ...failed(sec),
          });
          if (w % 2 === 0) deletable.push(res.body.id);
        } else if (kind === "grpc-client") {
          try {
            const res = await grpc.call(oauthRpc.createClient, {
              projectId: "f",
              client: { name: tag, type: ClientType.WEB },
            }, tokenMeta);
            outcomes.push({ kind, tag, status: 200, id: res.client!.id });
          } catch (error) {
            const code = (error as GrpcFailure).code;
            outcomes.push({ kind, tag, status: code === 14 ? 503 : 500, code: `grpc ${code}` });
          }
        } else if (kind === "unit") {
          const res = await api("POST", "/v1/core/units", {
            token,
            json: { journey: journey.body.id, title: tag },
          });
          outcomes.push({ kind, tag, status: res.status, id: res.body?.id, ...failed(res) });
        } else if (kind === "delete") {
          const id = deletable.shift();
          if (id === undefined) continue;
          const res = await api("DELETE", `/v1/projects/f/clients/${id}`, { token });
          outcomes.push({ kind, tag, status: res.status, id, ...failed(res) });
        } else {
          const res = await api("PATCH", `/v1/projects/f-${tag}/config`, {
            token,
            json: { application_name: tag },
          });
          outcomes.push({ kind, tag, status: res.status, ...failed(res) });
        }
      }
    };
    const workers = Array.from({ length: 6 }, async (_, w) => {
      while (running) {
        // A request without any answer (the gateway gone) is recorded, and fails the test below.
        await worker(w).catch((error) =>
          outcomes.push({ kind: "client", tag: `t${w}-?`, status: 0, code: String(error) })
        );
      }
    });

    await sleep(800);
    const before = outcomes.length;
    proxy.cut();
    const cutAt = Date.now();
    // Readiness shows the outage: both services over HTTP and gRPC health, and the gateway.
    const notReady = await until(
      async () =>
        (await status(`${stack.oauthHttp}/readyz`)) === 503 &&
        (await status(`${stack.coreHttp}/readyz`)) === 503 &&
        (await status(`${stack.gatewayUrl}/readyz`)) === 503 &&
        (await health(stack.oauthGrpc, OAuthRegistryService.typeName)) === NOT_SERVING &&
        (await health(stack.coreGrpc, CoreService.typeName)) === NOT_SERVING,
      10_000,
      "every component to report not ready",
    );
    assert.equal(await health(stack.oauthGrpc, ""), SERVING, "alive while not ready");
    assert.equal(await status(`${stack.oauthHttp}/healthz`), 200);
    await sleep(Math.max(0, 2000 - (Date.now() - cutAt)));
    const during = outcomes.length;
    proxy.restore();
    const ready = await until(
      async () =>
        (await status(`${stack.oauthHttp}/readyz`)) === 200 &&
        (await status(`${stack.coreHttp}/readyz`)) === 200 &&
        (await status(`${stack.gatewayUrl}/readyz`)) === 200 &&
        (await health(stack.oauthGrpc, OAuthRegistryService.typeName)) === SERVING &&
        (await health(stack.coreGrpc, CoreService.typeName)) === SERVING,
      15_000,
      "every component to be ready again",
    );
    const atReady = outcomes.length;
    const readyAt = Date.now();
    await until(
      () =>
        outcomes.slice(during).filter((o) => o.status < 300 && o.kind !== "delete").length >= 30,
      10_000,
      "requests to succeed again",
    );
    running = false;
    await Promise.all(workers);
    // Recovered: once every component said it is ready, every request succeeds. Each worker has
    // one request at a time, so only its first answer after that may have been sent before.
    const seen = new Set<string>();
    const failedAfterReady = outcomes.slice(atReady).filter((o) => {
      const worker = /^t(\d+)-/.exec(o.tag)?.[1] ?? o.tag;
      if (!seen.has(worker)) {
        seen.add(worker);
        return false;
      }
      return o.status >= 300;
    });
    assert.deepEqual(failedAfterReady, [], "requests made after readiness failed");

    // Nobody restarted.
    assert.equal(stack.procs.oauth.child.pid, pids.oauth);
    assert.equal(stack.procs.core.child.pid, pids.core);
    for (const p of Object.values(stack.procs)) {
      const exited = await Promise.race([
        p.child.status.then(() => true),
        sleep(0).then(() => false),
      ]);
      assert.equal(exited, false, "every process still runs");
    }

    // Every answer is a 2xx, or a 503 with the JSON error body; the outage produced 503s.
    const bad = outcomes.filter((o) =>
      o.status >= 300 && !(o.status === 503 && (o.code === "unavailable" || o.code === "grpc 14"))
    );
    assert.deepEqual(bad, [], "only 2xx and 503 unavailable");
    const unavailable = outcomes.filter((o) => o.status === 503).length;
    assert.ok(unavailable > 0, "the outage was seen by requests");

    // Nothing half-applied. Every 2xx is in the database exactly once (deleted clients: gone,
    // with their tombstone); a failed create either left nothing or a complete record (the
    // statement may commit after the connection to the service was cut: a caller cannot tell,
    // which is what idempotency keys are for).
    const clients = await db<{ id: string; name: string; type: string; secrets: number }[]>`
      select c.id::text, c.name, c.type,
        (select count(*)::int from oauth.client_secrets s where s.client_id = c.id) as secrets
      from oauth.clients c where c.project_id = 'f'`;
    type ClientRow = (typeof clients)[number];
    const byName = new Map<string, ClientRow[]>();
    for (const c of clients) byName.set(c.name, [...(byName.get(c.name) ?? []), c]);
    const tombstones = new Set(
      (await db<{ id: string }[]>`select id::text from oauth.deleted_clients`).map((r) => r.id),
    );
    const units = await db<{ title: string }[]>`select title from core.units`;
    const unitCount = new Map<string, number>();
    for (const u of units) unitCount.set(u.title, (unitCount.get(u.title) ?? 0) + 1);
    const configs = new Set(
      (await db<{ project_id: string }[]>`select project_id from oauth.configs`).map((r) =>
        r.project_id
      ),
    );
    const { ids } = await import("../services/oauth/ids.ts");
    const uuidOf = (id: string) => ids.client.toUuid(id)!;
    const deletedOk = new Set(
      outcomes.filter((o) => o.kind === "delete" && o.status === 204).map((o) => uuidOf(o.id!)),
    );
    const deleteTried = new Set(
      outcomes.filter((o) => o.kind === "delete").map((o) => uuidOf(o.id!)),
    );
    let ambiguous = 0;
    let checked = 0;
    for (const o of outcomes) {
      checked++;
      const ok = o.status < 300;
      if (o.kind === "client" || o.kind === "grpc-client") {
        const rows = byName.get(o.tag) ?? [];
        if (ok) {
          const uuid = uuidOf(o.id!);
          if (deletedOk.has(uuid)) {
            assert.equal(rows.length, 0, `deleted client ${o.tag} is gone`);
            assert.ok(tombstones.has(uuid), `deleted client ${o.tag} has its tombstone`);
          } else if (!deleteTried.has(uuid)) {
            assert.equal(rows.length, 1, `client ${o.tag} stored exactly once`);
            assert.equal(rows[0]!.id, uuid);
          }
        } else {
          assert.ok(rows.length <= 1, `failed create ${o.tag} stored at most once`);
          if (rows.length === 1) {
            ambiguous++;
            assert.equal(rows[0]!.type, "web", "a committed create is complete");
          }
        }
      } else if (o.kind === "secret") {
        const row = (byName.get(o.tag) ?? [])[0];
        if (row === undefined) continue; // the client was deleted
        if (ok) assert.equal(row.secrets, 1, `secret of ${o.tag} stored exactly once`);
        else {
          assert.ok(row.secrets <= 1, `failed secret of ${o.tag} stored at most once`);
          if (row.secrets === 1) ambiguous++;
        }
      } else if (o.kind === "unit") {
        const count = unitCount.get(o.tag) ?? 0;
        if (ok) assert.equal(count, 1, `unit ${o.tag} stored exactly once`);
        else {
          assert.ok(count <= 1, `failed unit ${o.tag} stored at most once`);
          if (count === 1) ambiguous++;
        }
      } else if (o.kind === "config") {
        if (ok) assert.ok(configs.has(`f-${o.tag}`), `config f-${o.tag} stored`);
        else if (configs.has(`f-${o.tag}`)) ambiguous++;
      } else if (o.kind === "delete") {
        const uuid = uuidOf(o.id!);
        const present = clients.some((c) => c.id === uuid);
        assert.notEqual(present, tombstones.has(uuid), `client ${o.id}: gone iff tombstoned`);
        if (ok) assert.equal(present, false);
        else if (!present) ambiguous++;
      }
    }
    // Every live secret that was answered 201 still verifies (its hash is whole).
    const live = outcomes.filter((o) =>
      o.kind === "secret" && o.status === 201 && (byName.get(o.tag) ?? []).length === 1
    );
    for (const o of live.slice(0, 20)) {
      const res = await grpc.call(
        oauthRpc.verifyClientSecret,
        { clientId: o.clientId!, secret: o.secret! },
        tokenMeta,
      );
      assert.equal(res.valid, true, `secret of ${o.tag} verifies`);
    }
    const orphans = await db<{ n: number }[]>`
      select count(*)::int as n from oauth.clients c
      where exists (select 1 from oauth.deleted_clients d where d.id = c.id)`;
    assert.equal(orphans[0]!.n, 0, "no client is both live and deleted");
    report(
      `faults: Postgres cut under load for ~2 s (1 fault): ${outcomes.length} requests checked ` +
        `(${before} before, ${during - before} during, ${outcomes.length - during} after), ` +
        `${unavailable} answered 503; not ready ${notReady} ms after the cut, ready ` +
        `${ready} ms after the restore (${readyAt - cutAt} ms outage); ${ambiguous} failed ` +
        `writes had committed anyway (complete, counted once); ${checked} outcomes checked ` +
        `against the database`,
    );
  } finally {
    running = false;
    closeGrpcClients();
    await db.end();
    await stack.stop();
    await proxy.close();
  }
});

/** Starts one service process on its own ports against `databaseUrl`. */
function startService(
  entry: "services/oauth/main.ts" | "services/core/main.ts",
  databaseUrl: string,
  jwtSecret: string,
): { proc: Proc; grpc: string; http: string } {
  const free = () => {
    const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const port = (l.addr as Deno.NetAddr).port;
    l.close();
    return port;
  };
  const grpcPort = free();
  const httpPort = free();
  const proc = spawn(entry, {
    AUTH_JWT_SECRET: jwtSecret,
    CLIENT_SECRET_HMAC_KEY: "k".repeat(32),
    HOST: "127.0.0.1",
    LOG_LEVEL: "debug",
    DATABASE_URL: databaseUrl,
    GRPC_PORT: String(grpcPort),
    HTTP_PORT: String(httpPort),
  });
  return { proc, grpc: `127.0.0.1:${grpcPort}`, http: `http://127.0.0.1:${httpPort}` };
}

Deno.test("Postgres down at start: the services wait, not ready, and come up without a restart", async () => {
  const db = await createTestDatabase();
  // Two ways to be down: a proxy that refuses (accepts and resets), and nothing listening.
  const refusing = startTcpProxy(realTarget);
  refusing.cut();
  const silent = (() => {
    const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const port = (l.addr as Deno.NetAddr).port;
    l.close();
    return port;
  })();
  const jwtSecret = "s".repeat(32);
  const services = [
    {
      name: "oauth",
      ...startService("services/oauth/main.ts", viaPort(db.url, refusing.port), jwtSecret),
      service: OAuthRegistryService.typeName,
    },
    {
      name: "core",
      ...startService("services/core/main.ts", viaPort(db.url, silent), jwtSecret),
      service: CoreService.typeName,
    },
  ];
  let forwarder: Deno.Listener | undefined;
  const forwarded: Promise<void>[] = [];
  try {
    for (const s of services) await s.proc.serving;
    const token = await signToken(jwtSecret, { sub: "u", projects: ["d"], space: "d" });
    const meta = { authorization: `Bearer ${token}` };
    const oauthCall = () =>
      grpcTo(services[0]!.grpc).call(oauthRpc.getOAuthConfig, { projectId: "d" }, meta)
        .then(() => ({ code: 0, details: "" }), (e: GrpcFailure) => e);
    const started = Date.now();
    let probes = 0;
    while (Date.now() - started < 2000) {
      for (const s of services) {
        assert.equal(await status(`${s.http}/healthz`), 200, `${s.name} alive`);
        assert.equal(await status(`${s.http}/readyz`), 503, `${s.name} not ready`);
        assert.equal(await health(s.grpc, ""), SERVING);
        assert.equal(await health(s.grpc, s.service), NOT_SERVING);
        probes += 4;
      }
      const failure = await oauthCall();
      assert.equal(failure.code, 14, "an RPC is UNAVAILABLE meanwhile");
      assert.match(failure.details, /database does not answer/, "and says what it waits for");
      await sleep(100);
    }
    for (const s of services) {
      const exited = await Promise.race([
        s.proc.child.status.then(() => true),
        sleep(0).then(() => false),
      ]);
      assert.equal(exited, false, `${s.name} still runs:\n${s.proc.lines.join("\n")}`);
      assert.ok(
        s.proc.lines.some((l) => l.includes("database unavailable; retrying migrations")),
        `${s.name} says why it waits`,
      );
    }

    // Postgres comes up: the proxy lets connections through; on the silent port a forwarder
    // starts listening.
    refusing.restore();
    forwarder = Deno.listen({ hostname: "127.0.0.1", port: silent });
    (async () => {
      for await (const conn of forwarder!) {
        forwarded.push(
          Deno.connect(realTarget).then(async (server) => {
            await Promise.all([
              conn.readable.pipeTo(server.writable).catch(() => {}),
              server.readable.pipeTo(conn.writable).catch(() => {}),
            ]);
          }, () => conn.close()),
        );
      }
    })().catch(() => {});
    const upAt = Date.now();
    const times: number[] = [];
    for (const s of services) {
      times.push(
        await until(
          async () =>
            (await status(`${s.http}/readyz`)) === 200 &&
            (await health(s.grpc, s.service)) === SERVING,
          15_000,
          `${s.name} ready`,
        ),
      );
    }
    assert.equal((await oauthCall()).code, 5, "the service answers (NOT_FOUND: no config yet)");
    const core = grpcTo(services[1]!.grpc);
    const role = await core.call(CoreService.method.createRole, {
      role: { name: "r", resourceType: "project" },
    }, meta);
    assert.ok(role.role?.id.startsWith("role_"));
    report(
      `faults: Postgres down at start (2 faults: refusing, not listening): ${probes} probes ` +
        `not ready over 2 s; ready ${Date.now() - upAt} ms after Postgres came up ` +
        `(${times.join(", ")} ms), same processes`,
    );
  } finally {
    closeGrpcClients();
    for (const s of services) {
      try {
        s.proc.child.kill("SIGTERM");
      } catch { /* gone */ }
      await s.proc.child.status;
    }
    forwarder?.close();
    await refusing.close();
    await db.drop();
  }
});

Deno.test("a frozen backend: every gateway request gets its JSON error within the RPC deadline", async () => {
  const timeoutMs = 1500;
  const margin = 2000;
  const stack = await startStack({ env: { RPC_TIMEOUT_MS: String(timeoutMs) } });
  try {
    const api = httpClient(stack.gatewayUrl);
    const token = await stack.token({ sub: "u", projects: ["z"], space: "z" });
    assert.equal(
      (await api("PATCH", "/v1/projects/z/config", { token, json: { application_name: "Z" } }))
        .status,
      200,
    );
    const seen: { at: number; ms: number; area: string; status: number; code?: string }[] = [];
    let running = true;
    const worker = async (w: number) => {
      for (let i = 0; running; i++) {
        const started = Date.now();
        const oauth = w % 3 !== 2;
        const res = oauth
          ? (i % 2 === 0
            ? await api("GET", "/v1/projects/z/config", { token })
            : await api("PATCH", "/v1/projects/z/config", {
              token,
              json: { support_email: `w${w}@example.com` },
            }))
          : await api("GET", "/v1/core/roles", { token });
        seen.push({
          at: started,
          ms: Date.now() - started,
          area: oauth ? "oauth" : "core",
          status: res.status,
          code: res.body?.error?.code,
        });
      }
    };
    const workers = Array.from({ length: 6 }, (_, w) => worker(w));
    await sleep(300);
    stack.procs.oauth.child.kill("SIGSTOP");
    const stoppedAt = Date.now();
    let gatewayReady: number;
    try {
      await sleep(timeoutMs * 2 + 500);
      gatewayReady = await status(`${stack.gatewayUrl}/readyz`);
    } finally {
      stack.procs.oauth.child.kill("SIGCONT");
    }
    const resumedAt = Date.now();
    await until(
      () => seen.some((s) => s.at > resumedAt && s.area === "oauth" && s.status === 200),
      10_000,
      "oauth to answer again",
    );
    running = false;
    await Promise.all(workers);

    assert.equal(gatewayReady, 503, "the gateway is not ready while a backend is frozen");
    const frozen = seen.filter((s) =>
      s.area === "oauth" && s.at >= stoppedAt && s.at + s.ms < resumedAt
    );
    assert.ok(frozen.length >= 4, `${frozen.length} requests ran into the frozen backend`);
    for (const s of frozen) {
      assert.equal(s.status, 504, JSON.stringify(s));
      assert.equal(s.code, "deadline_exceeded");
    }
    const all = seen.filter((s) => s.area === "oauth");
    for (const s of all) {
      assert.ok(s.ms <= timeoutMs + margin, `answered after ${s.ms} ms: ${JSON.stringify(s)}`);
      assert.ok([200, 504].includes(s.status), JSON.stringify(s));
    }
    const core = seen.filter((s) => s.area === "core" && s.at >= stoppedAt && s.at < resumedAt);
    assert.ok(core.length > 0 && core.every((s) => s.status === 200), "core kept serving");
    const slowest = Math.max(...frozen.map((s) => s.ms));
    report(
      `faults: oauth frozen (SIGSTOP) ${resumedAt - stoppedAt} ms under load (1 fault): ` +
        `${seen.length} requests checked, ${frozen.length} answered 504 deadline_exceeded ` +
        `(slowest ${slowest} ms, deadline ${timeoutMs} ms), ${core.length} core requests ` +
        `served meanwhile`,
    );
  } finally {
    await stack.stop();
  }
});

Deno.test("SIGTERM to a service with 30 requests in flight: all of them complete, then it exits 0", async () => {
  // A pool larger than the load, so that every request waits inside the database, where the test
  // can count it: in flight for sure. Larger, because a query goes to a busy connection (to wait
  // behind its query there, here behind the lock) when none is free, and the service's own
  // background queries take a connection now and then.
  const stack = await startStack({ env: { DB_POOL_MAX: "40" } });
  const db = postgres(stack.databaseUrl, { max: 2, onnotice: () => {} });
  let release = () => {};
  try {
    const api = httpClient(stack.gatewayUrl);
    const token = await stack.token({ sub: "u", projects: ["t"] });
    await api("PATCH", "/v1/projects/t/config", { token, json: { application_name: "T" } });
    const client = await api("POST", "/v1/projects/t/clients", {
      token,
      json: { name: "held", type: "web" },
    });
    assert.equal(client.status, 201);
    const { ids } = await import("../services/oauth/ids.ts");
    const uuid = ids.client.toUuid(client.body.id)!;
    // The test holds the client's row lock, so the service's updates wait inside it (in flight).
    const held = new Promise<void>((r) => release = r);
    let locked!: () => void;
    const lockTaken = new Promise<void>((r) => locked = r);
    const holding = db.begin(async (tx) => {
      await tx`select id from oauth.clients where id = ${uuid} for update`;
      locked();
      await held;
    });
    await lockTaken;
    const calls = Array.from(
      { length: 30 },
      (_, i) =>
        api("PATCH", `/v1/projects/t/clients/${client.body.id}`, {
          token,
          json: { name: `name ${i}` },
        }),
    );
    await until(
      async () => {
        const [row] = await db<{ n: number }[]>`
          select count(*)::int as n from pg_stat_activity
          where wait_event_type = 'Lock' and query like '%update oauth.clients%'`;
        return row!.n === 30;
      },
      10_000,
      "30 updates waiting for the lock",
    );
    stack.procs.oauth.child.kill("SIGTERM");
    await sleep(300);
    release();
    await holding;
    const results = await Promise.all(calls);
    assert.deepEqual(
      results.map((r) => r.status),
      Array(30).fill(200),
      results.map((r) => r.text).join("\n") + "\n" + stack.procs.oauth.lines.slice(-8).join("\n"),
    );
    const exit = await stack.procs.oauth.child.status;
    assert.equal(exit.code, 0);
    const [row] = await db<{ name: string }[]>`select name from oauth.clients where id = ${uuid}`;
    assert.match(row!.name, /^name \d+$/);
    report(
      `faults: SIGTERM to oauth-registry with 30 requests in flight (1 fault): 30 of 30 ` +
        `completed 200, exit 0`,
    );
  } finally {
    release();
    await db.end();
    await stack.stop();
  }
});
