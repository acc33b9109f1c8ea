import assert from "node:assert/strict";
import { createMemoryBudget } from "../../lib/platform/mod.ts";
import { gate, manualFeed } from "../../lib/testing/mod.ts";
import { cacheConfigs } from "./config_cache.ts";
import type { ConfigRow } from "./repository/configs.ts";

/** Configs in a map, reads counted, a feed driven by hand, and the cache over them. */
function setup(
  options: { maxEntries?: number; budget?: ReturnType<typeof createMemoryBudget> } = {},
) {
  const rows = new Map<string, ConfigRow>();
  const reads: string[] = [];
  const feed = manualFeed();
  const reading = gate();
  const cache = cacheConfigs(async (projectId) => {
    reads.push(projectId);
    await reading.pass();
    return rows.get(projectId);
  }, { follow: feed.follow, maxEntries: options.maxEntries, budget: options.budget });
  const set = (projectId: string, audience = "external") =>
    rows.set(projectId, { project_id: projectId, application_name: "App", audience } as ConfigRow);
  return { cache, reads, set, feed, reading };
}

Deno.test("config cache: a config is read once, until its project's notification", async () => {
  const t = setup();
  t.set("p1");
  assert.equal((await t.cache.get("p1"))?.audience, "external");
  assert.equal((await t.cache.get("p1"))?.audience, "external");
  assert.deepEqual(t.reads, ["p1"]);
  // The channel's other payloads are not about configs.
  for (const payload of ["client:0190", "installation:0190", "origins"]) {
    t.feed.handlers().onChange(payload);
  }
  await t.cache.get("p1");
  assert.deepEqual(t.reads, ["p1"]);
  // Made internal: the trigger names the project.
  t.set("p1", "internal");
  t.feed.handlers().onChange("config:p1");
  assert.equal((await t.cache.get("p1"))?.audience, "internal");
  assert.deepEqual(t.reads, ["p1", "p1"]);
  assert.deepEqual(t.cache.stats(), { entries: 1, hits: 2, misses: 2, bypassed: 0 });
});

Deno.test("config cache: no config is never kept; a reset, or a payload it does not know, empties it", async () => {
  const t = setup();
  assert.equal(await t.cache.get("p1"), undefined);
  t.set("p1"); // created: no notification
  assert.equal((await t.cache.get("p1"))?.project_id, "p1");
  t.set("p2");
  await t.cache.get("p2");
  t.feed.handlers().onReset();
  assert.equal(t.cache.stats().entries, 0);
  await t.cache.get("p1");
  t.feed.handlers().onChange("something:new");
  assert.equal(t.cache.stats().entries, 0);
});

Deno.test("config cache: nothing from memory while the feed is not fresh, nor kept from a read across a change", async () => {
  const t = setup();
  t.set("p1");
  await t.cache.get("p1");
  t.feed.setFresh(false);
  await t.cache.get("p1");
  assert.deepEqual(t.reads, ["p1", "p1"]);
  assert.equal(t.cache.stats().bypassed, 1);
  t.feed.setFresh(true);
  t.feed.handlers().onChange("config:p1");
  const go = t.reading.hold();
  const answer = t.cache.get("p1");
  await Promise.resolve();
  t.feed.handlers().onChange("config:p1"); // changed again meanwhile
  go();
  assert.equal((await answer)?.project_id, "p1");
  assert.equal(t.cache.stats().entries, 0);
});

Deno.test("config cache: the replica that changed a config forgets it at once, before the feed", async () => {
  const t = setup();
  t.set("p1");
  await t.cache.get("p1");
  t.set("p1", "internal");
  t.cache.changed("p1"); // no notification yet
  assert.equal((await t.cache.get("p1"))?.audience, "internal");
  // A read under way when it changed is not kept.
  t.cache.changed("p1");
  const go = t.reading.hold();
  const answer = t.cache.get("p1");
  await Promise.resolve();
  t.cache.changed("p1");
  go();
  await answer;
  assert.equal(t.cache.stats().entries, 0);
});

Deno.test("config cache: bounded, oldest first, and within the memory budget", async () => {
  const budget = createMemoryBudget(4096);
  const t = setup({ maxEntries: 2, budget });
  for (const p of ["p1", "p2", "p3"]) {
    t.set(p);
    await t.cache.get(p);
  }
  assert.equal(t.cache.stats().entries, 2);
  await t.cache.get("p1"); // the oldest went
  assert.deepEqual(t.reads, ["p1", "p2", "p3", "p1"]);
  const held = budget.heldBy("cache");
  assert.ok(held > 0 && held < 4096, `${held}`);
  await t.cache.close();
  assert.equal(budget.heldBy("cache"), 0);
  // A full budget keeps nothing more.
  const full = setup({ budget });
  const lease = budget.take(4096 - budget.held)!;
  full.set("p4");
  await full.cache.get("p4");
  await full.cache.get("p4");
  assert.deepEqual(full.reads, ["p4", "p4"]);
  lease.release();
});
