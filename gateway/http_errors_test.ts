import assert from "node:assert/strict";
import { Code, ConnectError } from "@connectrpc/connect";
import { overBudget } from "../lib/platform/mod.ts";
import { rpcErrorResponse } from "./http_errors.ts";

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

Deno.test("rpcErrorResponse() passes a backend's Retry-After on with its 503", async () => {
  const refused = new ConnectError("busy", Code.Unavailable, { "retry-after": "2" });
  const res = rpcErrorResponse(refused);
  assert.equal(res.status, 503);
  assert.equal(res.headers.get("retry-after"), "2");
  const plain = rpcErrorResponse(new ConnectError("down", Code.Unavailable));
  assert.equal(plain.headers.get("retry-after"), null);
  await res.body?.cancel();
  await plain.body?.cancel();
});
