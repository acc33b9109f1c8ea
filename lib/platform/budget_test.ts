import assert from "node:assert/strict";
import { Code } from "@connectrpc/connect";
import { budgetFromConfig, createMemoryBudget, overBudget, overBudgetReason } from "./budget.ts";
import { hasReason } from "./errors.ts";

Deno.test("createMemoryBudget() lends bytes until the limit and counts what it refuses", () => {
  const budget = createMemoryBudget(100);
  const a = budget.take(60)!;
  assert.equal(budget.held, 60);
  assert.equal(budget.take(41), undefined);
  assert.equal(budget.refusals, 1);
  assert.ok(a.grow(40));
  assert.equal(a.bytes, 100);
  assert.equal(a.grow(1), false);
  assert.equal(budget.refusals, 2);
  assert.equal(budget.admits(1), false);
  assert.equal(budget.refusals, 3);
  a.release();
  a.release(); // a second release gives nothing back twice
  assert.equal(budget.held, 0);
  assert.equal(budget.peak, 100);
  assert.ok(budget.admits(100));
  assert.equal(a.grow(1), false, "a released lease takes nothing");
  assert.equal(budget.held, 0);
});

Deno.test("Lease.shrink() gives part of a lease back, never more than it holds", () => {
  const budget = createMemoryBudget(100);
  const a = budget.take(70)!;
  a.shrink(30);
  assert.equal(a.bytes, 40);
  assert.equal(budget.held, 40);
  assert.ok(budget.take(60), "what was given back can be taken again");
  a.shrink(1000);
  assert.equal(a.bytes, 0);
  assert.equal(budget.held, 60, "only the lease's own bytes came back");
  a.release();
  assert.equal(budget.held, 60);
});

Deno.test("overBudget() is RESOURCE_EXHAUSTED with Retry-After and the reason the gateway maps", () => {
  const error = overBudget();
  assert.equal(error.code, Code.ResourceExhausted);
  assert.equal(error.metadata.get("retry-after"), "1");
  assert.ok(hasReason(error, overBudgetReason));
});

Deno.test("a holder holds at most its share, across its leases; other holders are not starved", () => {
  const budget = createMemoryBudget(100, 50);
  const a = budget.take(30, ["conn:1", "addr:a"])!;
  const b = budget.take(20, ["conn:2", "addr:a"])!;
  assert.equal(budget.heldBy("addr:a"), 50);
  assert.equal(budget.take(1, ["conn:3", "addr:a"]), undefined, "addr:a is at its share");
  assert.equal(a.grow(1), false);
  assert.equal(budget.refusals, 2);
  const c = budget.take(50, ["conn:4", "addr:b"]);
  assert.ok(c, "another holder still gets its share");
  assert.equal(budget.held, 100);
  b.shrink(20);
  assert.equal(budget.heldBy("addr:a"), 30);
  assert.ok(a.grow(20));
  a.release();
  b.release();
  c!.release();
  assert.equal(budget.held, 0);
  assert.equal(budget.heldBy("addr:a"), 0);
  assert.equal(budget.heldBy("conn:1"), 0);
});

Deno.test("a holder's count lives as long as its leases, even empty ones", () => {
  const budget = createMemoryBudget(100, 50);
  const idle = budget.take(0, ["conn:1"])!;
  const busy = budget.take(40, ["conn:1"])!;
  busy.release();
  assert.ok(idle.grow(50), "the count went back to 0 with the busy lease");
  assert.equal(budget.take(1, ["conn:1"]), undefined, "one count for the holder, not two");
  idle.release();
  assert.ok(budget.take(50, ["conn:1"]));
});

Deno.test("budgetFromConfig() gives each holder MEMORY_BUDGET_SHARE_PERCENT of the budget", () => {
  const budget = budgetFromConfig({ MEMORY_BUDGET_MIB: 24, MEMORY_BUDGET_SHARE_PERCENT: 50 });
  assert.equal(budget.limit, 24 * 1024 * 1024);
  assert.equal(budget.shareLimit, 12 * 1024 * 1024);
});

Deno.test("small requests take from the reserve when the budget or a share is full; large ones never", () => {
  const budget = createMemoryBudget(100_000, 50_000, 20_000);
  const flood = budget.take(50_000, ["addr:a"])!;
  const other = budget.take(50_000, ["addr:b"])!;
  assert.equal(budget.take(1, ["addr:c"]), undefined, "the budget is full");
  const small = budget.take(0, ["addr:a"])!;
  assert.ok(small.grow(8_000, true), "a small request still runs, past addr:a's share");
  assert.ok(small.grow(8_000, true));
  assert.equal(budget.reserveHeld, 16_000);
  assert.equal(small.grow(8_000, false), false, "not marked small: refused");
  assert.equal(small.grow(20_000, true), false, "more than a small request holds: refused");
  assert.equal(small.grow(8_000, true), false, "the reserve is used up");
  assert.equal(budget.held, 100_000, "the reserve is beyond the limit");
  small.shrink(10_000);
  assert.equal(budget.reserveHeld, 6_000, "what came from the reserve goes back first");
  small.release();
  assert.equal(budget.reserveHeld, 0);
  flood.release();
  other.release();
  assert.equal(budget.held, 0);
});
