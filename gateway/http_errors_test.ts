import assert from "node:assert/strict";
import { Code, ConnectError } from "@connectrpc/connect";
import { overBudget } from "../lib/platform/mod.ts";
import { bearerChallenge, errorResponse, rpcErrorResponse } from "./http_errors.ts";

Deno.test("rpcErrorResponse() answers a service at its memory budget 503 with Retry-After", async () => {
  const res = rpcErrorResponse(overBudget(), undefined, null);
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
  const res = rpcErrorResponse(refused, undefined, null);
  assert.equal(res.status, 503);
  assert.equal(res.headers.get("retry-after"), "2");
  const plain = rpcErrorResponse(new ConnectError("down", Code.Unavailable), undefined, null);
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

Deno.test("a 401's challenge names an error only when a bearer token was presented (RFC 6750 3.1)", () => {
  const unauthenticated = new ConnectError("no", Code.Unauthenticated);
  const challenge = (authorization: string | null) =>
    rpcErrorResponse(unauthenticated, undefined, authorization).headers.get("www-authenticate");
  assert.equal(challenge(null), "Bearer");
  assert.equal(challenge("Basic Zm9vOmJhcg=="), "Bearer");
  assert.equal(challenge("Bearer"), "Bearer");
  assert.equal(challenge("Bearer x.y.z"), 'Bearer error="invalid_token"');
  assert.equal(challenge("bearer x.y.z"), 'Bearer error="invalid_token"');
  assert.equal(bearerChallenge(""), "Bearer");
});
