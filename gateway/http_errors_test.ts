import assert from "node:assert/strict";
import { Code, ConnectError } from "@connectrpc/connect";
import { overBudget } from "../lib/platform/mod.ts";
import { errorResponse, rpcErrorResponse } from "./http_errors.ts";

Deno.test("rpcErrorResponse() answers a service at its memory budget 503 with Retry-After", async () => {
  const res = rpcErrorResponse(overBudget());
  assert.equal(res.status, 503);
  assert.equal(res.headers.get("retry-after"), "1");
  assert.deepEqual(await res.json(), {
    error: {
      code: "unavailable",
      message: "The server is at its memory budget; retry later",
      details: [],
    },
  });
});

Deno.test("rpcErrorResponse(): every 503 has Retry-After, a backend's own when it sent one", async () => {
  const refused = new ConnectError("busy", Code.Unavailable, { "retry-after": "2" });
  const res = rpcErrorResponse(refused);
  assert.equal(res.status, 503);
  assert.equal(res.headers.get("retry-after"), "2");
  const plain = rpcErrorResponse(new ConnectError("down", Code.Unavailable));
  assert.equal(plain.status, 503);
  assert.equal(plain.headers.get("retry-after"), "1");
  await res.body?.cancel();
  await plain.body?.cancel();
});

Deno.test("errorResponse() bounds a message that quotes a huge input, as the services do", async () => {
  const res = errorResponse(400, Code.InvalidArgument, `Invalid ${"k".repeat(5000)}`);
  const { error } = await res.json();
  assert.equal(error.message.length, 1024 + "… (truncated)".length);
  assert.ok(error.message.endsWith("… (truncated)"));
});
