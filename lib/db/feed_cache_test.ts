import assert from "node:assert/strict";
import { createMemoryBudget } from "../platform/mod.ts";
import { manualFeed } from "../testing/mod.ts";
import { createFeedCache, createSettling, dropNamed } from "./feed_cache.ts";

/** A cache of two regions over a feed driven by hand; `drop:<key>` drops a key of both. */
function setup() {
  const feed = manualFeed();
  const cache = createFeedCache({
    follow: feed.follow,
    maxBytes: 1000,
    onChange(payload) {
      if (!payload.startsWith("drop:")) return false;
      a.delete(payload.slice(5));
      b.delete(payload.slice(5));
      return true;
    },
  });
  const a = cache.region<string>();
  const b = cache.region<number>();
  return { cache, a, b, feed };
}

Deno.test("feed cache: a notification drops what it names; one it does not know, or a reset, all", () => {
  const { cache, a, b, feed } = setup();
  a.set("k", "v", 100);
  b.set("k", 1, 100);
  a.set("other", "v", 100);
  feed.handlers().onChange("drop:k");
  assert.deepEqual(cache.stats().entries, 1);
  feed.handlers().onChange("something:new");
  assert.deepEqual([cache.stats().entries, cache.stats().bytes], [0, 0]);
  b.set("y", 2, 10);
  feed.handlers().onReset();
  assert.deepEqual([cache.stats().entries, cache.stats().bytes], [0, 0]);
});

Deno.test("feed cache: served only while fresh, never kept across a change", async () => {
  const { cache, a, feed } = setup();
  let reads = 0;
  const load = () => Promise.resolve(`v${++reads}`);
  assert.equal(await cache.through(a, "k", load, () => 100), "v1");
  assert.equal(await cache.through(a, "k", load, () => 100), "v1");
  feed.setFresh(false);
  assert.equal(await cache.through(a, "k", load, () => 100), "v2");
  feed.setFresh(true);
  a.delete("k");
  // A change while reading (this process's own, or any notification): the answer is not kept.
  assert.equal(await cache.through(a, "k", () => (cache.changed(), load()), () => 100), "v3");
  assert.equal(
    await cache.through(a, "k", () => (feed.handlers().onChange("drop:x"), load()), () => 100),
    "v4",
  );
  assert.equal(a.get("k"), undefined);
  // No key: always read, never kept.
  assert.equal(await cache.through(a, undefined, load, () => 100), "v5");
  assert.deepEqual(cache.stats(), { entries: 0, bytes: 0, hits: 1, misses: 3, bypassed: 2 });
  await cache.close();
});

Deno.test("dropNamed: drops the key of its kind, knows the others, and asks to drop all for the rest", () => {
  const dropped: string[] = [];
  const apply = (payload: string) =>
    dropNamed(payload, "client", ["config", "origins"], (key) => dropped.push(key));
  assert.equal(apply("client:a:b"), true);
  assert.equal(apply("config:p"), true);
  assert.equal(apply("origins"), true);
  assert.equal(apply("installation:x"), false);
  assert.equal(apply("reset"), false);
  assert.equal(apply("client"), false);
  assert.deepEqual(dropped, ["a:b"]);
});

Deno.test("createSettling: a key read within the lag after its change, or after a change to all, is not settled", () => {
  let at = 1_000;
  const settling = createSettling({ lagMs: 800, maxKeys: 2, monotonic: () => at });
  assert.equal(settling.settled("a", at), true);
  settling.changed("a");
  assert.equal(settling.settled("a", at - 1), false, "a read begun before the change");
  assert.equal(settling.settled("a", at + 800), false);
  assert.equal(settling.settled("a", at + 801), true);
  assert.equal(settling.settled("b", at), true, "another key");
  settling.changed();
  assert.equal(settling.settled("b", at), false, "a change to all");
  at += 801;
  assert.equal(settling.settled("b", at), true);
  // Past maxKeys remembered at once, a change counts for all.
  settling.changed("a");
  settling.changed("b");
  assert.equal(settling.settled("c", at), true);
  settling.changed("c");
  assert.equal(settling.settled("d", at), false);
});

Deno.test("createSettling: remembered keys are taken from the budget, given back, and past it a change counts for all", () => {
  let at = 1_000;
  const budget = createMemoryBudget(300);
  const settling = createSettling({ lagMs: 800, maxKeys: 100, monotonic: () => at, budget });
  settling.changed("a");
  const one = budget.held;
  assert.ok(one > 0, "a remembered key holds bytes");
  settling.changed("a");
  assert.equal(budget.held, one, "the same key again holds them once");
  settling.changed("b");
  assert.equal(budget.held, 2 * one);
  // The budget is full: a change counts for all, and what the keys held is given back.
  budget.take(300 - 2 * one - 1);
  settling.changed("c");
  assert.equal(settling.settled("d", at), false, "a change to all");
  assert.equal(budget.held, 300 - 2 * one - 1);
  // Past the lag, keys are forgotten as changes arrive, and their bytes given back.
  at += 801;
  const spare = createMemoryBudget(1000);
  const later = createSettling({ lagMs: 800, maxKeys: 100, monotonic: () => at, budget: spare });
  later.changed("x");
  at += 801;
  later.changed("y");
  assert.equal(spare.held, one, "x forgotten, y remembered");
  assert.equal(later.settled("x", at), true);
  assert.equal(later.settled("y", at), false);
});

Deno.test("feed cache: reads of a key at once make one load; not across a change; a failed one is not joined", async () => {
  const { cache, a, feed } = setup();
  let loads = 0;
  /** Loads wait until `release()`; `hold()` closes the gate again and returns its release. */
  let gateOpen = Promise.resolve();
  const held = {
    pass: () => gateOpen,
    hold() {
      let open!: () => void;
      gateOpen = new Promise((resolve) => open = resolve);
      return open;
    },
  };
  const slow = async () => {
    const n = ++loads;
    await held.pass();
    return `v${n}`;
  };
  const size = () => 10;
  // Three reads while the first load is under way: one load, one answer.
  let release = held.hold();
  const three = [1, 2, 3].map(() => cache.through(a, "k", slow, size));
  release();
  assert.deepEqual(await Promise.all(three), ["v1", "v1", "v1"]);
  assert.equal(loads, 1);
  assert.deepEqual([cache.stats().misses, cache.stats().hits], [1, 2]);
  // A read that starts after a change does not join a load begun before it.
  feed.handlers().onChange("drop:k");
  release = held.hold();
  const before = cache.through(a, "k", slow, size);
  feed.handlers().onChange("drop:k");
  const after = cache.through(a, "k", slow, size);
  release();
  assert.deepEqual([await before, await after], ["v2", "v3"]);
  // A joined load that fails: the read loads on its own.
  feed.handlers().onChange("drop:k");
  release = held.hold();
  const failing = cache.through(a, "k", async () => {
    await held.pass();
    throw new Error("deadline");
  }, size);
  const joiner = cache.through(a, "k", slow, size);
  release();
  await assert.rejects(failing, /deadline/);
  assert.equal(await joiner, "v4");
  // Nothing found is not joined either (a load may ask in its caller's terms).
  feed.handlers().onChange("drop:k");
  release = held.hold();
  const none = cache.through(a, "k", async () => {
    await held.pass();
    return undefined;
  }, size);
  const other = cache.through(a, "k", slow, size);
  release();
  assert.deepEqual([await none, await other], [undefined, "v5"]);
});
