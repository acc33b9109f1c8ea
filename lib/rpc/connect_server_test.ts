import assert from "node:assert/strict";
import {
  Health,
  HealthCheckResponse_ServingStatus as Status,
} from "../../gen/grpc/health/v1/health_pb.ts";
import { createMemoryBudget } from "../platform/mod.ts";
import { connectRoutes } from "./connect_server.ts";
import { bindGrpc } from "./grpc_server.ts";
import { createRouter } from "./router.ts";

Deno.test("a Connect deadline further away than a timer can wait does not end the call at once", async () => {
  // connect-timeout-ms of 10 digits, past 2^31 - 1 ms, the longest timer: armed as it is, such a
  // timer fires at once. The handlers take a moment, so that a deadline that fired at once would
  // be seen.
  // They listen to their signal, as every handler here does (a query is cancelled with it).
  const moment = async (signal: AbortSignal) => {
    await new Promise((r) => setTimeout(r, 20));
    signal.throwIfAborted();
  };
  const routes = connectRoutes(
    createRouter([bindGrpc(Health, {
      async check(_req, ctx) {
        await moment(ctx.signal);
        return { status: Status.SERVING };
      },
      async *watch() {},
    })], { interceptors: [], maxMessageBytes: 1024, protocols: "http" }),
    { maxMessageBytes: 1024, budget: createMemoryBudget(1024 * 1024) },
  );
  const call = (
    method: string,
    contentType: string,
    body: Uint8Array<ArrayBuffer>,
    timeout: string,
  ) => {
    const path = `/${Health.typeName}/${method}`;
    return routes.get(path)!(
      new Request(`http://localhost${path}`, {
        method: "POST",
        headers: { "content-type": contentType, "connect-timeout-ms": timeout },
        body,
      }),
      "127.0.0.1",
    );
  };
  const json = new TextEncoder().encode("{}");
  for (const timeout of ["9999999999", "2600000000"]) {
    const unary = await call("Check", "application/json", json, timeout);
    assert.equal(unary.status, 200, `Check ${timeout}`);
    assert.deepEqual(await unary.json(), { status: "SERVING" });
  }
});

Deno.test("a Connect JSON request with a field its message does not have is INVALID_ARGUMENT, not ignored", async () => {
  const seen: string[] = [];
  const routes = connectRoutes(
    createRouter([bindGrpc(Health, {
      check(req) {
        seen.push(req.service);
        return { status: Status.SERVING };
      },
      async *watch() {},
    })], { interceptors: [], maxMessageBytes: 1024, protocols: "http" }),
    { maxMessageBytes: 1024, budget: createMemoryBudget(1024 * 1024) },
  );
  const check = (body: string) => {
    const path = `/${Health.typeName}/Check`;
    return routes.get(path)!(
      new Request(`http://localhost${path}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body,
      }),
      "127.0.0.1",
    );
  };
  // A misspelled field of a request that replaces a whole record would clear the one meant.
  for (const body of ['{"servise":"a"}', '{"service":"a","status":"SERVING"}']) {
    const res = await check(body);
    assert.equal(res.status, 400, body);
    const error = await res.json();
    assert.equal(error.code, "invalid_argument", body);
    assert.match(error.message, /servise|status/, body);
  }
  assert.deepEqual(seen, []);
  // Its own field, or none.
  for (const body of ['{"service":"a"}', "{}"]) {
    const res = await check(body);
    assert.equal(res.status, 200, body);
    assert.deepEqual(await res.json(), { status: "SERVING" });
  }
  assert.deepEqual(seen, ["a", ""]);
});

Deno.test("a server stream is refused on the Connect port (it answers whole), before its source is read", async () => {
  let watched = 0;
  const routes = connectRoutes(
    createRouter([bindGrpc(Health, {
      check() {
        return { status: Status.SERVING };
      },
      async *watch() {
        watched++;
        for (;;) yield { status: Status.SERVING }; // a feed without end
      },
    })], { interceptors: [], maxMessageBytes: 1024, protocols: "http" }),
    { maxMessageBytes: 1024, budget: createMemoryBudget(1024 * 1024) },
  );
  const path = `/${Health.typeName}/Watch`;
  const res = await routes.get(path)!(
    new Request(`http://localhost${path}`, {
      method: "POST",
      headers: { "content-type": "application/connect+json" },
      body: new Uint8Array([0, 0, 0, 0, 2, 0x7b, 0x7d]),
    }),
    "127.0.0.1",
  );
  assert.equal(res.status, 501);
  const error = await res.json();
  assert.equal(error.code, "unimplemented");
  assert.match(error.message, /Watch streams: call it over gRPC/);
  assert.equal(watched, 0);
});
