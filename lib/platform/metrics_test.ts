import assert from "node:assert/strict";
import { createMetrics } from "./metrics.ts";

Deno.test("the process metrics include the event loop's delay, with the component's label", async () => {
  const metrics = createMetrics("test-component");
  const text = await (await metrics.response()).text();
  for (const name of ["nodejs_eventloop_lag_p99_seconds", "process_resident_memory_bytes"]) {
    assert.match(
      text,
      new RegExp(`^${name}\\{component="test-component"\\} [0-9.e+-]+$`, "m"),
      name,
    );
  }
});
