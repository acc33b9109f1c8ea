/**
 * Running it: correlation ids and traces across processes, metrics, readiness that follows the
 * database, graceful shutdown under load, and recovery after a backend dies.
 */

import assert from "node:assert/strict";
import { httpClient, status, until } from "../lib/testing/mod.ts";
import { type Proc, startStack, waitReady } from "../lib/testing/mod.ts";
import { startTcpProxy } from "../lib/testing/mod.ts";

function logLines(proc: Proc): Record<string, unknown>[] {
  return proc.lines.flatMap((l) => {
    try {
      return [JSON.parse(l)];
    } catch {
      return [];
    }
  });
}

Deno.test("request ids and trace context follow a call from the gateway into the service", async () => {
  const stack = await startStack();
  try {
    const api = httpClient(stack.gatewayUrl);
    /** The gateway's access log line of the request `requestId`, once it is written. */
    const accessLine = async (requestId: string) => {
      const line = () => logLines(stack.procs.gateway).find((l) => l.request_id === requestId);
      await until(() => line() !== undefined, 30_000, `the access log line of ${requestId}`);
      return line()!;
    };
    const token = await stack.token({ sub: "u", projects: ["obs"] });
    const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
    const res = await api("PATCH", "/v1/projects/obs/config", {
      token,
      json: { application_name: "Obs" },
      headers: { "x-request-id": "req-obs-1", traceparent: `00-${traceId}-00f067aa0ba902b7-01` },
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("x-request-id"), "req-obs-1");
    const access = await accessLine("req-obs-1");
    assert.equal(access.msg, "request");
    assert.equal(access.route, "/v1/projects/{project_id}/config");
    assert.equal(access.status, 200);
    assert.equal(access.trace_id, traceId, "the gateway continues the caller's trace");
    const rpc = logLines(stack.procs.oauth).find((l) => l.request_id === "req-obs-1")!;
    assert.equal(rpc.msg, "rpc");
    assert.equal(rpc.rpc, "registry.oauth.v1.OAuthRegistryService/UpdateOAuthConfig");
    assert.equal(rpc.code, "ok");
    assert.equal(rpc.trace_id, traceId);
    assert.equal(rpc.parent_span_id, access.span_id, "the service's parent is the gateway's span");

    // The OAuth endpoints are in the access log too: a failed client authentication included.
    const refused = await fetch(`${stack.gatewayUrl}/oauth2/token`, {
      method: "POST",
      headers: {
        authorization: `Basic ${btoa("cli_nobody:wrong")}`,
        "content-type": "application/x-www-form-urlencoded",
        "x-request-id": "req-obs-2",
      },
      body: "grant_type=client_credentials",
    });
    await refused.body?.cancel();
    assert.equal(refused.status, 401);
    const token401 = await accessLine("req-obs-2");
    assert.equal(token401.msg, "request");
    assert.equal(token401.route, "/oauth2/token");
    assert.equal(token401.status, 401);

    // A method is any token, as long as the request head: its line keeps a bounded part of it.
    const conn = await Deno.connect({
      hostname: "127.0.0.1",
      port: Number(new URL(stack.gatewayUrl).port),
    });
    await conn.write(new TextEncoder().encode(
      `${"M".repeat(20_000)} /v1/x HTTP/1.1\r\nhost: a\r\nx-request-id: req-obs-3\r\n` +
        "connection: close\r\n\r\n",
    ));
    await conn.readable.pipeTo(new WritableStream());
    const unknownMethod = await accessLine("req-obs-3");
    assert.equal(unknownMethod.status, 501);
    assert.ok(String(unknownMethod.method).length <= 64, "the method is cut");
    assert.ok(String(unknownMethod.method).startsWith("MMMM"));

    const unsafe = await api("GET", "/v1/projects/obs/config", {
      token,
      headers: { "x-request-id": 'bad id\twith"quotes' },
    });
    assert.match(
      unsafe.headers.get("x-request-id")!,
      /^[0-9a-f-]{36}$/,
      "an unsafe id is replaced",
    );
  } finally {
    await stack.stop();
  }
});

Deno.test("every component serves Prometheus metrics", async () => {
  const stack = await startStack();
  try {
    const api = httpClient(stack.gatewayUrl);
    const token = await stack.token({ sub: "u", projects: ["m"], space: "s" });
    await api("GET", "/v1/projects/m/config", { token });
    await api("GET", "/v1/core/roles", { token });
    // Any token is an HTTP method; one a client makes up must not become a series of its own.
    for (const method of ["FROB1", "FROB2"]) {
      const res = await fetch(`${stack.gatewayUrl}/v1/nothing`, { method });
      assert.equal(res.status, 501, "a method no path takes");
      await res.body?.cancel();
    }
    const gateway = await (await fetch(`${stack.gatewayUrl}/metrics`)).text();
    assert.doesNotMatch(gateway, /FROB/);
    assert.match(
      gateway,
      /http_requests_total\{[^}]*method="other"[^}]*route="unmatched"[^}]*\} 2/,
    );
    assert.match(
      gateway,
      /http_requests_total\{[^}]*route="\/v1\/projects\/\{project_id\}\/config"[^}]*status="404"/,
    );
    assert.match(gateway, /http_request_duration_seconds_bucket\{/);
    assert.match(gateway, /http_requests_in_flight\{component="gateway"\} 1/);
    for (const [url, rpc] of [[stack.oauthHttp, "GetOAuthConfig"], [stack.coreHttp, "ListRoles"]]) {
      const text = await (await fetch(`${url}/metrics`)).text();
      assert.match(text, new RegExp(`rpc_requests_total\\{[^}]*rpc="[\\w.]+/${rpc}"`));
      assert.match(text, /rpc_duration_seconds_bucket\{/);
      assert.match(text, /db_pool_max\{component="[a-z-]+"\} 10/);
      assert.match(text, /db_pool_connections\{state="[a-z ]+",component="[a-z-]+"\} [1-9]/);
      // The resident set, not the 0 prom-client reports where it finds no /proc/self/stat.
      const rss = Number(/^process_resident_memory_bytes\{[^}]*\} (\d+)$/m.exec(text)?.[1]);
      assert.ok(rss > 10 * 1024 * 1024, `process_resident_memory_bytes: ${rss}`);
    }
  } finally {
    await stack.stop();
  }
});

Deno.test("readiness follows the database; requests during an outage are 503 JSON", async () => {
  const real = new URL(Deno.env.get("DATABASE_URL") ?? "postgres://127.0.0.1:5432/postgres");
  const proxy = startTcpProxy({ hostname: real.hostname, port: Number(real.port || 5432) });
  const stack = await startStack({
    serviceDatabaseUrl: (url) => {
      const u = new URL(url);
      u.hostname = "127.0.0.1";
      u.port = String(proxy.port);
      return u.toString();
    },
  });
  try {
    const api = httpClient(stack.gatewayUrl);
    const token = await stack.token({ sub: "u", projects: ["r"] });
    proxy.cut();
    const down = await until(
      async () => (await status(`${stack.oauthHttp}/readyz`)) === 503,
      10_000,
      "not ready",
    );
    assert.equal(await status(`${stack.gatewayUrl}/readyz`), 503);
    const res = await api("GET", "/v1/projects/r/config", { token });
    assert.equal(res.status, 503, res.text);
    assert.equal(res.body.error.code, "unavailable");
    proxy.restore();
    const up = await until(
      async () => (await status(`${stack.oauthHttp}/readyz`)) === 200,
      10_000,
      "ready",
    );
    await waitReady(stack.gatewayUrl);
    assert.equal(
      (await api("GET", "/v1/projects/r/config", { token })).status,
      404,
      "serves again",
    );
    // deno-lint-ignore no-console
    console.log(`not ready ${down} ms after the cut; ready ${up} ms after the restore`);
  } finally {
    await stack.stop();
    await proxy.close();
  }
});

Deno.test("SIGTERM to the gateway with 100 requests in flight fails none of them", async () => {
  const stack = await startStack();
  try {
    const token = await stack.token({ sub: "u", projects: ["t"] });
    const api = httpClient(stack.gatewayUrl);
    await api("PATCH", "/v1/projects/t/config", { token, json: { application_name: "T" } });
    // Freeze the backend so that the requests stay in flight inside the gateway.
    stack.procs.oauth.child.kill("SIGSTOP");
    const calls = Array.from({ length: 100 }, () => api("GET", "/v1/projects/t/config", { token }));
    try {
      await until(
        async () => {
          const text = await (await fetch(`${stack.gatewayUrl}/metrics`)).text();
          const n = Number(/http_requests_in_flight\{component="gateway"\} (\d+)/.exec(text)?.[1]);
          return n >= 101; // the 100 calls and this scrape
        },
        10_000,
        "100 requests in flight",
      );
      stack.procs.gateway.child.kill("SIGTERM");
      await new Promise((r) => setTimeout(r, 200));
    } finally {
      stack.procs.oauth.child.kill("SIGCONT");
    }
    const results = await Promise.all(calls);
    assert.deepEqual(results.map((r) => r.status), Array(100).fill(200));
    const exit = await stack.procs.gateway.child.status;
    assert.equal(exit.code, 0);
    assert.ok(logLines(stack.procs.gateway).some((l) => l.msg === "stopped"));
    assert.equal(await status(`${stack.gatewayUrl}/healthz`), 0, "the gateway is gone");
  } finally {
    await stack.stop();
  }
});

Deno.test("a backend killed under load: 503 JSON meanwhile, served again soon after it returns", async () => {
  const stack = await startStack({ env: { RPC_TIMEOUT_MS: "2000" } });
  try {
    const token = await stack.token({ sub: "u", projects: ["k"] });
    const api = httpClient(stack.gatewayUrl);
    await api("PATCH", "/v1/projects/k/config", { token, json: { application_name: "K" } });
    let running = true;
    const seen: { at: number; status: number; code?: string; message?: string }[] = [];
    const workers = Array.from({ length: 8 }, async () => {
      while (running) {
        const res = await api("GET", "/v1/projects/k/config", { token });
        seen.push({
          at: Date.now(),
          status: res.status,
          code: res.body?.error?.code,
          message: res.body?.error?.message,
        });
      }
    });
    await new Promise((r) => setTimeout(r, 300));
    await stack.kill("oauth");
    const killedAt = Date.now();
    await until(() => seen.some((s) => s.at > killedAt && s.status === 503), 5000, "a 503");
    await new Promise((r) => setTimeout(r, 500));
    const respawnedAt = Date.now();
    const proc = stack.respawn("oauth");
    await proc.serving;
    await waitReady(stack.oauthHttp);
    const readyAt = Date.now();
    await until(
      () => seen.some((s) => s.at > readyAt && s.status === 200),
      5000,
      "a 200 after the restart",
    );
    running = false;
    await Promise.all(workers);
    const firstOk = seen.find((s) => s.at > readyAt && s.status === 200)!.at;
    const during = seen.filter((s) => s.at > killedAt && s.at < readyAt);
    for (const s of during) {
      assert.ok(
        s.status === 503 || s.status === 200,
        `status ${s.status} while the backend was down: ${s.code} ${s.message}`,
      );
      if (s.status === 503) assert.equal(s.code, "unavailable");
    }
    assert.ok(
      firstOk - readyAt <= 2000,
      `served again ${firstOk - readyAt} ms after the backend was ready`,
    );
    // deno-lint-ignore no-console
    console.log(
      `${seen.length} requests; ${
        during.filter((s) => s.status === 503).length
      } answered 503 while down; ` +
        `first 200 ${firstOk - readyAt} ms after the backend was ready (${
          firstOk - respawnedAt
        } ms after respawn)`,
    );
  } finally {
    await stack.stop();
  }
});

Deno.test("gRPC clients that close their connections never take a service down", async () => {
  const { grpcChurn } = await import("../lib/testing/mod.ts");
  const { OAuthRegistryService } = await import(
    "../gen/registry/oauth/v1/oauth_registry_service_pb.ts"
  );
  const stack = await startStack();
  try {
    // 4 rounds of 32 stock grpc-js channels (on Node.js), 10 calls each, then closed.
    const churn = await grpcChurn({
      address: stack.oauthGrpc,
      method: OAuthRegistryService.method.getOAuthConfig,
      request: { projectId: "g" },
      metadata: { authorization: `Bearer ${await stack.token({ sub: "u", projects: ["g"] })}` },
      rounds: 4,
      clients: 32,
      calls: 10,
    });
    // NOT_FOUND (no config yet) is an answer: what matters is that the process answers every call.
    assert.deepEqual(churn, { calls: 4 * 32 * 10, codes: { "5": 4 * 32 * 10 } });
    assert.equal(await status(`${stack.oauthHttp}/readyz`), 200, "the service is still up");
  } finally {
    await stack.stop();
  }
});
