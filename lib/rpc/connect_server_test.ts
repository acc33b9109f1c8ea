import assert from "node:assert/strict";
import {
  Health,
  HealthCheckResponse_ServingStatus as Status,
} from "../../gen/grpc/health/v1/health_pb.ts";
import { create, toBinary } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { trailerParse } from "@connectrpc/connect/protocol-grpc-web";
import {
  CoreService,
  CreateUnitRequestSchema,
} from "../../gen/registry/core/v1/core_service_pb.ts";
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

Deno.test("a Connect JSON request with a date that does not exist is INVALID_ARGUMENT, not rolled over", async () => {
  // protobuf-es reads a JSON Timestamp with Date.parse, which took February 30 for March 2.
  const seen: (string | undefined)[] = [];
  const routes = connectRoutes(
    createRouter([bindGrpc(CoreService, {
      createUnit(req) {
        seen.push(req.unit?.dueAt && timestampDate(req.unit.dueAt).toISOString());
        return { unit: req.unit };
      },
    })], { interceptors: [], maxMessageBytes: 4096, protocols: "http" }),
    { maxMessageBytes: 4096, budget: createMemoryBudget(1024 * 1024) },
  );
  const path = `/${CoreService.typeName}/CreateUnit`;
  const post = (contentType: string, body: string | Uint8Array<ArrayBuffer>) =>
    routes.get(path)!(
      new Request(`http://localhost${path}`, {
        method: "POST",
        headers: { "content-type": contentType },
        body,
      }),
      "127.0.0.1",
    );
  const unit = (key: string, at: string) =>
    JSON.stringify({ unit: { journey: "journey_1", title: "t", [key]: at } });

  const refused: [string, string, string][] = [
    ["application/json", "dueAt", "2027-02-30T00:00:00Z"],
    ["application/json; charset=utf-8", "due_at", "2027-02-30T00:00:00Z"],
    ["application/json", "dueAt", "2027-04-31T12:00:00+02:00"],
    ["application/json", "dueAt", "2027-03-01T24:00:00Z"],
    ["application/json", "dueAt", "2100-02-29T00:00:00Z"],
  ];
  for (const [contentType, key, at] of refused) {
    const res = await post(contentType, unit(key, at));
    assert.equal(res.status, 400, at);
    assert.equal(res.headers.get("content-type"), "application/json");
    const error = await res.json();
    assert.equal(error.code, "invalid_argument", at);
    assert.equal(
      error.message,
      "Invalid unit.due_at: must be an RFC 3339 timestamp between 0001-01-01T00:00:00Z and " +
        '9999-12-31T23:59:59Z, e.g. "2026-01-02T03:04:05Z"',
    );
    assert.equal(error.details[0].type, "google.rpc.BadRequest");
  }
  assert.deepEqual(seen, []);

  // A date that exists is taken, by either name; so is no date.
  for (const key of ["dueAt", "due_at"]) {
    const res = await post("application/json", unit(key, "2027-02-28T23:30:00-01:00"));
    assert.equal(res.status, 200, await res.clone().text());
    assert.equal((await res.json()).unit.dueAt, "2027-03-01T00:30:00Z");
  }
  const none = await post("application/json", JSON.stringify({ unit: { title: "t" } }));
  assert.equal(none.status, 200);
  assert.deepEqual(seen, ["2027-03-01T00:30:00.000Z", "2027-03-01T00:30:00.000Z", undefined]);

  // Malformed JSON is answered by connect-es, as before.
  const malformed = await post("application/json", '{"unit":{"dueAt":"2027-02-30T00:00:00Z"');
  assert.equal(malformed.status, 400);
  const error = await malformed.json();
  assert.equal(error.code, "invalid_argument");
  assert.doesNotMatch(error.message, /RFC 3339/);

  // gRPC-web's JSON: refused as its protocol answers errors, the status in a trailer frame.
  const envelope = (json: string) => {
    const data = new TextEncoder().encode(json);
    const out = new Uint8Array(5 + data.length);
    new DataView(out.buffer).setUint32(1, data.length);
    out.set(data, 5);
    return out;
  };
  const web = await post(
    "application/grpc-web+json",
    envelope(unit("dueAt", "2027-02-30T00:00:00Z")),
  );
  assert.equal(web.status, 200);
  const frame = new Uint8Array(await web.arrayBuffer());
  assert.equal(frame[0], 0x80);
  const trailer = trailerParse(frame.subarray(5));
  assert.equal(trailer.get("grpc-status"), "3");
  assert.match(
    decodeURIComponent(trailer.get("grpc-message")!),
    /^Invalid unit\.due_at: must be an RFC 3339/,
  );
  const webOk = await post(
    "application/grpc-web+json",
    envelope(unit("dueAt", "2027-02-28T00:00:00Z")),
  );
  assert.equal(new Uint8Array(await webOk.arrayBuffer())[0], 0, "a message frame first");
  assert.equal(seen.at(-1), "2027-02-28T00:00:00.000Z");

  // Binary carries seconds and nanos, no date: not looked at here.
  const binary = toBinary(
    CreateUnitRequestSchema,
    create(CreateUnitRequestSchema, { unit: { title: "b", dueAt: { seconds: 1_803_859_200n } } }),
  ) as Uint8Array<ArrayBuffer>;
  assert.equal((await post("application/proto", binary)).status, 200);
  assert.equal(seen.at(-1), "2027-03-01T00:00:00.000Z");
});
