import assert from "node:assert/strict";
import { createMemoryBudget } from "../platform/mod.ts";
import { manualFeed } from "../testing/mod.ts";
import { createFeedCache } from "./feed_cache.ts";

/** A cache of two regions over a feed driven by hand; `drop:<key>` drops a key of both. */
function setup(options: { maxBytes?: number; maxEntries?: number; budget?: number } = {}) {
  const feed = manualFeed();
  const budget = options.budget === undefined ? undefined : createMemoryBudget(options.budget);
  const cache = createFeedCache({
    follow: feed.follow,
    maxBytes: options.maxBytes ?? 1000,
    maxEntries: options.maxEntries,
    budget,
    onChange(payload) {
      if (!payload.startsWith("drop:")) return false;
      a.delete(payload.slice(5));
      b.delete(payload.slice(5));
      return true;
    },
  });
  const a = cache.region<string>();
  const b = cache.region<number>();
  return { cache, a, b, feed, budget };
}

Deno.test("feed cache: bytes and entries are counted exactly, whatever replaces or resizes them", () => {
  const { cache, a, b, feed } = setup();
  assert.ok(a.set("k", "one", 100));
  assert.ok(a.set("k", "two", 150)); // replaced: the first entry's bytes are given back
  assert.ok(b.set("k", 1, 50));
  assert.deepEqual([cache.stats().entries, cache.stats().bytes], [2, 200]);
  assert.ok(a.resize("k", 30));
  assert.ok(a.resize("k", -80));
  assert.equal(a.resize("absent", 10), false);
  assert.equal(cache.stats().bytes, 150);
  feed.handlers().onChange("drop:k");
  assert.deepEqual([cache.stats().entries, cache.stats().bytes], [0, 0]);
  // An unknown payload, or a reset, drops everything.
  a.set("x", "x", 10);
  feed.handlers().onChange("something:new");
  assert.equal(cache.stats().entries, 0);
  b.set("y", 2, 10);
  feed.handlers().onReset();
  assert.deepEqual([cache.stats().entries, cache.stats().bytes], [0, 0]);
});

Deno.test("feed cache: full, the oldest of the fullest region goes first", () => {
  const { cache, a, b } = setup({ maxBytes: 300, maxEntries: 3 });
  a.set("a1", "1", 100);
  a.set("a2", "2", 100);
  b.set("b1", 1, 100);
  assert.ok(b.set("b2", 2, 50)); // `a` holds the most: its oldest goes
  assert.deepEqual([a.get("a1"), a.get("a2"), b.get("b1"), b.get("b2")], [
    undefined,
    "2",
    1,
    2,
  ]);
  assert.equal(a.set("big", "x", 301), false);
  assert.deepEqual([cache.stats().entries, cache.stats().bytes], [3, 250]);
});

Deno.test("feed cache: growing the oldest entry of the fullest region may drop that entry itself", () => {
  const { cache, a, b } = setup({ maxBytes: 300 });
  b.set("b1", 1, 100);
  b.set("b2", 2, 100);
  a.set("a1", "1", 50);
  assert.equal(b.resize("b1", 100), false);
  assert.deepEqual([b.get("b1"), b.get("b2"), a.get("a1")], [undefined, 2, "1"]);
  assert.deepEqual([cache.stats().entries, cache.stats().bytes], [2, 150]);
});

Deno.test("feed cache: served only while fresh, never kept across a change, within the budget", async () => {
  const { cache, a, feed, budget } = setup({ budget: 1000 });
  let reads = 0;
  const load = () => Promise.resolve(`v${++reads}`);
  assert.equal(await cache.through(a, "k", load, () => 100), "v1");
  assert.equal(await cache.through(a, "k", load, () => 100), "v1");
  feed.setFresh(false);
  assert.equal(await cache.through(a, "k", load, () => 100), "v2");
  feed.setFresh(true);
  a.delete("k");
  // A change while reading: the answer is not kept.
  assert.equal(
    await cache.through(a, "k", () => (cache.changed(), load()), () => 100),
    "v3",
  );
  assert.equal(a.get("k"), undefined);
  assert.deepEqual(cache.stats(), { entries: 0, bytes: 0, hits: 1, misses: 2, bypassed: 1 });
  // Requests hold the budget: nothing more is kept, until they give it back.
  const held = budget!.take(1000)!;
  await cache.through(a, "k", load, () => 100);
  assert.equal(a.get("k"), undefined);
  held.release();
  await cache.through(a, "k", load, () => 100);
  assert.equal(budget!.heldBy("cache"), 100);
  await cache.close();
  assert.equal(budget!.held, 0);
});
