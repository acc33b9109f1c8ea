import assert from "node:assert/strict";
import { createMemoryBudget } from "./budget.ts";
import { createBoundedCache } from "./bounded_cache.ts";

function setup(options: { maxBytes?: number; maxEntries?: number; budget?: number } = {}) {
  const budget = options.budget === undefined ? undefined : createMemoryBudget(options.budget);
  const cache = createBoundedCache({
    maxBytes: options.maxBytes ?? 1000,
    maxEntries: options.maxEntries,
    budget,
  });
  return { cache, a: cache.region<string>(), b: cache.region<number>(), budget };
}

Deno.test("bounded cache: bytes and entries are counted exactly, whatever replaces or resizes them", () => {
  const { cache, a, b } = setup();
  assert.ok(a.set("k", "one", 100));
  assert.ok(a.set("k", "two", 150)); // replaced: the first entry's bytes are given back
  assert.ok(b.set("k", 1, 50));
  assert.deepEqual(cache.stats(), { entries: 2, bytes: 200 });
  assert.ok(a.resize("k", 30));
  assert.ok(a.resize("k", -80));
  assert.equal(a.resize("absent", 10), false);
  assert.equal(cache.stats().bytes, 150);
  a.delete("k");
  b.clear();
  assert.deepEqual(cache.stats(), { entries: 0, bytes: 0 });
  a.set("x", "x", 10);
  b.set("y", 2, 10);
  cache.clear();
  assert.deepEqual(cache.stats(), { entries: 0, bytes: 0 });
});

Deno.test("bounded cache: full, the oldest of the fullest region goes first", () => {
  const { cache, a, b } = setup({ maxBytes: 300, maxEntries: 3 });
  a.set("a1", "1", 100);
  a.set("a2", "2", 100);
  b.set("b1", 1, 100);
  assert.ok(b.set("b2", 2, 50)); // `a` holds the most: its oldest goes
  assert.deepEqual([a.get("a1"), a.get("a2"), b.get("b1"), b.get("b2")], [undefined, "2", 1, 2]);
  assert.equal(a.set("big", "x", 301), false);
  assert.deepEqual(cache.stats(), { entries: 3, bytes: 250 });
});

Deno.test("bounded cache: growing the oldest entry of the fullest region may drop that entry itself", () => {
  const { cache, a, b } = setup({ maxBytes: 300 });
  b.set("b1", 1, 100);
  b.set("b2", 2, 100);
  a.set("a1", "1", 50);
  assert.equal(b.resize("b1", 100), false);
  assert.deepEqual([b.get("b1"), b.get("b2"), a.get("a1")], [undefined, 2, "1"]);
  assert.deepEqual(cache.stats(), { entries: 2, bytes: 150 });
});

Deno.test("bounded cache: within the memory budget's cache share, and all given back on close", () => {
  const { cache, a, budget } = setup({ budget: 1000 });
  // Requests hold the budget: nothing more is kept, until they give it back.
  const held = budget!.take(1000)!;
  assert.equal(a.set("k", "v", 100), false);
  held.release();
  assert.ok(a.set("k", "v", 100));
  assert.equal(budget!.heldBy("cache"), 100);
  cache.close();
  assert.equal(budget!.held, 0);
  assert.equal(a.set("k", "v", 100), false); // closed: nothing is kept any more
});
