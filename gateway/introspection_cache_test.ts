import assert from "node:assert/strict";
import { gate, manualFeed } from "../lib/testing/mod.ts";
import {
  type Answer,
  createIntrospectionCache,
  introspectionChannels,
} from "./introspection_cache.ts";

/** A cache over its feeds driven by hand, with both clocks in the test's hands. */
async function setup(options: { notifies?: () => Promise<boolean>; maxBytes?: number } = {}) {
  const feeds = {
    registry: manualFeed(),
    revocations: manualFeed(),
    keys: manualFeed(),
  };
  const byChannel = [feeds.registry, feeds.revocations, feeds.keys];
  const clock = { wall: 1_800_000_000_000, mono: 10_000 };
  const cache = createIntrospectionCache({
    follow: (channel, handlers) =>
      byChannel[introspectionChannels.indexOf(channel as never)]!.follow(handlers),
    maxBytes: options.maxBytes ?? 100_000,
    notifies: options.notifies ?? (() => Promise.resolve(true)),
    now: () => clock.wall,
    monotonic: () => clock.mono,
  });
  // The first answer of `notifies` is in.
  await new Promise((r) => setTimeout(r, 0));
  let calls = 0;
  /** An active answer for `token`, reusable for `forMs` (0: not reusable). */
  const load = (token: string, forMs = 30_000) => (): Promise<Answer> => {
    calls++;
    return Promise.resolve({
      body: `{"active":true,"jti":"${token}","call":${calls}}`,
      reusableUntil: forMs === 0 ? 0 : clock.wall + forMs,
    });
  };
  return { cache, feeds, clock, load, calls: () => calls };
}

Deno.test("introspection cache: an answer is given again until the token service's time, per caller and token", async () => {
  const { cache, clock, load, calls } = await setup();
  const first = await cache.through("basic\nc1\ns1\n", "t1", load("t1"));
  assert.equal(await cache.through("basic\nc1\ns1\n", "t1", load("t1")), first);
  assert.equal(calls(), 1);
  // Another secret, another client, another token: each asks.
  await cache.through("basic\nc1\nwrong\n", "t1", load("t1"));
  await cache.through("basic\nc2\ns1\n", "t1", load("t1"));
  await cache.through("basic\nc1\ns1\n", "t2", load("t2"));
  assert.equal(calls(), 4);
  // Until the time it said, not after.
  clock.wall += 29_999;
  assert.equal(await cache.through("basic\nc1\ns1\n", "t1", load("t1")), first);
  clock.wall += 1;
  assert.notEqual(await cache.through("basic\nc1\ns1\n", "t1", load("t1")), first);
  assert.equal(calls(), 5);
  // An answer not to be given again (an inactive token's, a refresh token's) always asks.
  await cache.through("basic\nc1\ns1\n", "t3", load("t3", 0));
  await cache.through("basic\nc1\ns1\n", "t3", load("t3", 0));
  assert.equal(calls(), 7);
  const stats = cache.stats();
  assert.deepEqual([stats.hits, stats.misses, stats.bypassed], [2, 7, 0]);
  await cache.close();
});

Deno.test("introspection cache: any change on any channel, or a lost connection, drops every answer", async () => {
  const { cache, feeds, clock, load, calls } = await setup();
  for (
    const drop of [
      () => feeds.registry.handlers().onChange("client:00000000-0000-0000-0000-000000000001"),
      () => feeds.revocations.handlers().onChange("some-jti"),
      () => feeds.revocations.handlers().onReset(),
      () => feeds.registry.handlers().onReset(),
      () => feeds.keys.handlers().onChange("keys"),
      () => feeds.keys.handlers().onReset(),
    ]
  ) {
    const before = calls();
    await cache.through("c", "t1", load("t1"));
    await cache.through("c", "t2", load("t2"));
    assert.equal(calls(), before + 2);
    assert.equal(cache.stats().entries, 2);
    drop();
    assert.deepEqual([cache.stats().entries, cache.stats().bytes], [0, 0]);
    clock.mono += 801; // past the lag after the change (below)
  }
  await cache.close();
});

Deno.test("introspection cache: nothing from memory while either feed is stale, or before the triggers exist", async () => {
  let triggers = false;
  const { cache, feeds, clock, load, calls } = await setup({
    notifies: () => Promise.resolve(triggers),
  });
  await cache.through("c", "t", load("t"));
  await cache.through("c", "t", load("t"));
  assert.equal(calls(), 2);
  triggers = true;
  await new Promise((r) => setTimeout(r, 300)); // asked again at most every 250 ms
  await cache.through("c", "t", load("t")); // starts the next ask
  await new Promise((r) => setTimeout(r, 0));
  await cache.through("c", "t", load("t"));
  await cache.through("c", "t", load("t"));
  assert.equal(calls(), 4);
  feeds.revocations.setFresh(false);
  await cache.through("c", "t", load("t"));
  feeds.revocations.setFresh(true);
  feeds.registry.setFresh(false);
  await cache.through("c", "t", load("t"));
  assert.equal(calls(), 6);
  feeds.registry.setFresh(true);
  feeds.keys.setFresh(false);
  await cache.through("c", "t", load("t"));
  assert.equal(calls(), 7);
  feeds.keys.setFresh(true);
  clock.mono += 1;
  await cache.through("c", "t", load("t"));
  assert.equal(calls(), 7);
  await cache.close();
});

Deno.test("introspection cache: an answer is not kept across a change, nor from a call begun within 800 ms after one", async () => {
  const { cache, feeds, clock, load, calls } = await setup();
  // A change arrives while the call is under way: its answer may predate it.
  const held = gate();
  const release = held.hold();
  const pending = cache.through("c", "t", async () => {
    await held.pass();
    return await load("t")();
  });
  feeds.revocations.handlers().onChange("jti");
  release();
  await pending;
  // A call begun within 800 ms after the change: the replica that answers may not have it yet.
  clock.mono += 800;
  await cache.through("c", "t", load("t"));
  await cache.through("c", "t", load("t"));
  assert.equal(calls(), 3);
  clock.mono += 1;
  await cache.through("c", "t", load("t"));
  await cache.through("c", "t", load("t"));
  assert.equal(calls(), 4);
  await cache.close();
});

Deno.test("introspection cache: a token revoked through this gateway is dropped at once, and not kept again for 800 ms", async () => {
  const { cache, clock, load, calls } = await setup();
  await cache.through("c", "t", load("t"));
  await cache.through("c", "other", load("other"));
  // A call under way when the revocation succeeds is not kept either.
  const held = gate();
  const release = held.hold();
  const pending = cache.through("c2", "t", async () => {
    await held.pass();
    return await load("t")();
  });
  cache.revoked("t");
  release();
  await pending;
  assert.equal(cache.stats().entries, 1); // "other"'s
  await cache.through("c", "other", load("other"));
  assert.equal(calls(), 3);
  clock.mono += 800;
  await cache.through("c", "t", load("t"));
  await cache.through("c", "t", load("t"));
  assert.equal(calls(), 5);
  clock.mono += 1;
  await cache.through("c", "t", load("t"));
  await cache.through("c", "t", load("t"));
  assert.equal(calls(), 6);
  await cache.close();
});

Deno.test("introspection cache: a refresh token revoked with its grant's access tokens drops every answer at once", async () => {
  const { cache, clock, load, calls } = await setup();
  // The grant's access token, and another, held for two callers.
  await cache.through("c", "access", load("access"));
  await cache.through("c2", "access", load("access"));
  await cache.through("c", "other", load("other"));
  assert.equal(cache.stats().entries, 2);
  // RFC 7009 2.1: the refresh token took its grant's access tokens with it, which the cache cannot
  // name (it keeps digests): everything goes, before the notification is here.
  cache.revoked("refresh", true);
  assert.equal(cache.stats().entries, 0);
  await cache.through("c", "access", load("access"));
  await cache.through("c", "access", load("access"));
  assert.equal(calls(), 5, "nothing kept for 800 ms: the replica that answered may lag");
  clock.mono += 801;
  await cache.through("c", "access", load("access"));
  await cache.through("c", "access", load("access"));
  assert.equal(calls(), 6);
  // A revocation that took nothing else with it drops only its token.
  await cache.through("c", "other", load("other"));
  cache.revoked("refresh", false);
  await cache.through("c", "access", load("access"));
  assert.equal(calls(), 7);
  await cache.close();
});

Deno.test("introspection cache: bounded in bytes, oldest out first", async () => {
  const { cache, load } = await setup({ maxBytes: 4_000 });
  for (let i = 0; i < 100; i++) await cache.through("c", `t${i}`, load(`t${i}`));
  const { entries, bytes } = cache.stats();
  assert.ok(bytes <= 4_000 && entries > 0 && entries < 100, `${entries} entries, ${bytes} bytes`);
  // The newest is kept, the oldest is gone.
  const before = cache.stats().misses;
  await cache.through("c", "t99", load("t99"));
  await cache.through("c", "t0", load("t0"));
  assert.equal(cache.stats().misses, before + 1);
  await cache.close();
});
