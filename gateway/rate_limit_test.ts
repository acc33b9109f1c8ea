import assert from "node:assert/strict";
import { createRateLimiter } from "./rate_limit.ts";
import { createMemoryBudget } from "../lib/platform/mod.ts";

Deno.test("the rate limit is off at 0 requests per second", () => {
  assert.equal(createRateLimiter({ perSecond: 0, burst: 10 }), undefined);
});

Deno.test("a bucket allows the burst, then one request per 1/rate seconds", () => {
  let now = 0;
  const take = createRateLimiter({ perSecond: 2, burst: 3, now: () => now })!;
  assert.deepEqual([take("a"), take("a"), take("a")], [undefined, undefined, undefined]);
  assert.equal(take("a"), 1); // empty: one request in 0.5 s, rounded up to whole seconds
  assert.equal(take("b"), undefined, "another subject has its own bucket");
  now += 499;
  assert.equal(take("a"), 1);
  now += 1;
  assert.equal(take("a"), undefined);
  assert.equal(take("a"), 1);
  now += 10_000; // refills to the burst, never above
  assert.deepEqual([take("a"), take("a"), take("a"), take("a")], [
    undefined,
    undefined,
    undefined,
    1,
  ]);
});

Deno.test("Retry-After covers the wait for one request at a slow rate", () => {
  let now = 0;
  const take = createRateLimiter({ perSecond: 0.1, burst: 1, now: () => now })!;
  assert.equal(take("a"), undefined);
  assert.equal(take("a"), 10);
  now += 9_000;
  assert.equal(take("a"), 1);
  now += 1_000;
  assert.equal(take("a"), undefined);
});

Deno.test("memory is bounded: the least recently seen buckets are dropped first", () => {
  let now = 0;
  const take = createRateLimiter({ perSecond: 1, burst: 2, maxBuckets: 10, now: () => now })!;
  take("busy");
  take("busy");
  for (let i = 0; i < 1000; i++) {
    take(`s${i}`);
    assert.ok(take.tracked() <= 10, `${take.tracked()} buckets`);
  }
  assert.ok(take.tracked() >= 1);
  take("x");
  take("x");
  assert.equal(take("x"), 1);
  now += 1000;
  assert.equal(take("x"), undefined);
});

Deno.test("the buckets are counted in the memory budget, and given back as they go", () => {
  const budget = createMemoryBudget(1024 * 1024);
  const take = createRateLimiter({ perSecond: 1, burst: 1, maxBuckets: 4, budget })!;
  take("a");
  const one = budget.heldBy("cache");
  assert.ok(one >= "a".length * 2 + 64, `${one}`);
  for (const s of ["b", "c", "d"]) take(s);
  assert.equal(budget.heldBy("cache"), 4 * one);
  // A fifth subject: the least recently seen ("a") goes, and its bytes with it.
  take("e");
  assert.equal(take.tracked(), 4);
  assert.equal(budget.heldBy("cache"), 4 * one);
  assert.equal(take("e"), 1, "e's bucket is kept: empty");
  assert.equal(take("a"), undefined, "a's was forgotten: a new, full one");
});

Deno.test("a bucket the budget has no room for limits nothing, and is not kept", () => {
  const budget = createMemoryBudget(64);
  const take = createRateLimiter({ perSecond: 1, burst: 1, budget })!;
  assert.equal(take("a"), undefined);
  assert.equal(take("a"), undefined);
  assert.equal(take.tracked(), 0);
  assert.equal(budget.held, 0);
});
