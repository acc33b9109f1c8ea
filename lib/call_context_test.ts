import assert from "node:assert/strict";
import { Code, ConnectError } from "@connectrpc/connect";
import { Health } from "../gen/grpc/health/v1/health_pb.ts";
import { createCallContext } from "./call_context.ts";

function call(timeoutMs: number | undefined) {
  return createCallContext({
    service: Health,
    method: Health.method.check,
    protocolName: "grpc",
    url: "/grpc.health.v1.Health/Check",
    requestHeader: new Headers(),
    timeoutMs,
    requestSignal: new AbortController().signal,
  });
}

Deno.test("createCallContext() aborts with DEADLINE_EXCEEDED at the deadline", async () => {
  const c = call(20);
  await new Promise((r) => c.ctx.signal.addEventListener("abort", r, { once: true }));
  const reason = c.ctx.signal.reason as ConnectError;
  assert.equal(reason.code, Code.DeadlineExceeded);
  c.end();
});

Deno.test("createCallContext() keeps a deadline past setTimeout's range (30 days) instead of firing at once", async () => {
  const days30 = 30 * 24 * 3600 * 1000;
  const c = call(days30);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(c.ctx.signal.aborted, false);
  const left = c.ctx.timeoutMs()!;
  assert.ok(left > days30 - 60_000 && left <= days30, String(left));
  c.end();
  assert.equal(c.ctx.signal.aborted, true);
});
