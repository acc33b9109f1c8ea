import assert from "node:assert/strict";
import { Code } from "@connectrpc/connect";
import { createMemoryBudget, overBudget, overBudgetReason } from "./budget.ts";
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
