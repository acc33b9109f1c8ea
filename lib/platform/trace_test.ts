import assert from "node:assert/strict";
import { formatTraceparent, parseTraceparent, startSpan } from "./trace.ts";

Deno.test("startSpan makes valid, distinct ids for new traces (more than one random pool's worth)", () => {
  const seen = new Set<string>();
  for (let i = 0; i < 2000; i++) {
    const span = startSpan(new Headers());
    const header = formatTraceparent(span);
    assert.match(header, /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    assert.deepEqual(parseTraceparent(header), span);
    seen.add(span.traceId);
    seen.add(span.spanId);
  }
  assert.equal(seen.size, 4000);
});

Deno.test("startSpan continues an incoming trace with a new span", () => {
  const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
  const span = startSpan(new Headers({ traceparent: parent }));
  assert.equal(span.traceId, "0af7651916cd43dd8448eb211c80319c");
  assert.equal(span.flags, "00");
  assert.notEqual(span.spanId, "b7ad6b7169203331");
});
