/**
 * Following a channel on a real Postgres: changes are applied, the feed is fresh once its own
 * heartbeat is back, and heartbeats stop while nobody asks and start again on the next ask. The
 * lag is measured on an injected clock, which also stamps each heartbeat: those sent after the
 * clock moved are told apart from those already under way, whatever the machine's speed.
 */

import assert from "node:assert/strict";
import { createTestDatabase } from "../testing/mod.ts";
import { followChanges, heartbeatPrefix } from "./change_feed.ts";
import { connect } from "./postgres.ts";

/** Polls `check` until it holds (10 s at most). */
async function until(check: () => boolean | Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

Deno.test("change feed: changes applied, heartbeats only while the feed is asked", async () => {
  const db = await createTestDatabase();
  const sql = connect(db.url, { applicationName: "change-feed-test", max: 3 });
  const watcher = connect(db.url, { applicationName: "change-feed-watcher", max: 1 });
  let clock = 1_000_000;
  const changes: string[] = [];
  let resets = 0;
  /** The clock readings stamped on the heartbeats seen on the channel. */
  const stamps: number[] = [];
  try {
    await watcher.listen("feed_test", (payload) => {
      if (payload.startsWith(heartbeatPrefix)) stamps.push(Number(payload.split(":").at(-1)));
    });
    const feed = followChanges(sql, "feed_test", {
      onChange: (payload) => changes.push(payload),
      onReset: () => resets++,
      heartbeatMs: 20,
      maxLagMs: 800,
      idleAfterMs: 1_000,
      now: () => clock,
    });
    try {
      await until(() => feed.fresh(), "the first heartbeat is back");
      assert.equal(resets, 1, "listening the first time is a reset");
      await sql`select pg_notify('feed_test', 'client:1')`;
      await until(() => changes.length === 1, "the change is applied");
      assert.deepEqual(changes, ["client:1"]);

      // Nobody asks for longer than idleAfterMs: no heartbeat is stamped with the new time.
      clock += 5_000;
      await sql`select pg_notify('feed_test', 'client:2')`;
      await until(() => changes.length === 2, "a change is applied while idle too");
      await new Promise((r) => setTimeout(r, 300)); // 15 heartbeat periods
      assert.deepEqual(stamps.filter((s) => s >= clock), [], "heartbeats sent while idle");

      // The next ask finds it stale (its last heartbeat is 5 s old), and sends one at once.
      assert.equal(feed.fresh(), false);
      await until(() => stamps.some((s) => s >= clock), "a heartbeat is sent on the ask");
      await until(() => feed.fresh(), "the feed is fresh again");
      assert.equal(resets, 1, "waking up is not a reset: nothing was missed");
    } finally {
      await feed.close();
    }
  } finally {
    await watcher.end();
    await sql.end();
    await db.drop();
  }
});

Deno.test("change feed: a heartbeat stamped later than now, which no follower sends, makes nothing fresh", async () => {
  const db = await createTestDatabase();
  const sql = connect(db.url, { applicationName: "change-feed-test", max: 3 });
  const watcher = connect(db.url, { applicationName: "change-feed-watcher", max: 1 });
  let clock = 1_000_000;
  /** The follower's heartbeats, as anyone listening on the channel sees them. */
  const seen: string[] = [];
  try {
    await watcher.listen("feed_test", (payload) => {
      if (payload.startsWith(heartbeatPrefix)) seen.push(payload);
    });
    const feed = followChanges(sql, "feed_test", {
      onChange: () => {},
      onReset: () => {},
      heartbeatMs: 20,
      maxLagMs: 800,
      now: () => clock,
    });
    try {
      await until(() => feed.fresh() && seen.length > 0, "the first heartbeat is back");
      // Any role that may connect may notify: one stamps the follower's id with a time far ahead.
      const id = seen[0]!.slice(0, seen[0]!.lastIndexOf(":") + 1);
      await watcher`select pg_notify('feed_test', ${`${id}${clock + 1e9}`})`;
      const marker = `${heartbeatPrefix}marker`;
      await watcher`select pg_notify('feed_test', ${marker})`;
      await until(() => seen.includes(marker), "the forged heartbeat was delivered");
      // Nothing the follower sent since is back yet: it is stale, whatever the forged stamp said.
      clock += 10_000;
      assert.equal(feed.fresh(), false);
    } finally {
      await feed.close();
    }
  } finally {
    await watcher.end();
    await sql.end();
    await db.drop();
  }
});
