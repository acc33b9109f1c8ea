import assert from "node:assert/strict";
import { noCache } from "./cache_control.ts";

Deno.test("noCache: the no-cache directive, in any case, among others; nothing else", () => {
  const has = (value?: string) =>
    noCache(new Headers(value === undefined ? {} : { "cache-control": value }));
  assert.equal(has("no-cache"), true);
  assert.equal(has("No-Cache"), true);
  assert.equal(has("max-age=0, no-cache"), true);
  assert.equal(has(" no-cache ,max-stale"), true);
  assert.equal(has(), false);
  assert.equal(has("no-store"), false);
  assert.equal(has("max-age=0"), false);
  assert.equal(has("no-cachex"), false);
});
