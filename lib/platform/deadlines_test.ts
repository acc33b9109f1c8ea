import assert from "node:assert/strict";
import { Deadlines, type TimerHost } from "./deadlines.ts";

/** A clock and timers that move only when the test says. */
function fakeHost() {
  let now = 0;
  const timers: { at: number; fire: () => void }[] = [];
  const host: TimerHost = {
    now: () => now,
    set: (fire, ms) => void timers.push({ at: now + ms, fire }),
  };
  return {
    host,
    timers,
    /** Moves the clock to `to`, firing the timers due on the way, in order. */
    advance(to: number) {
      for (;;) {
        timers.sort((a, b) => a.at - b.at);
        if (timers.length === 0 || timers[0]!.at > to) break;
        const next = timers.shift()!;
        now = next.at;
        next.fire();
      }
      now = to;
    },
  };
}

Deno.test("Deadlines: each fires at its time, never before, and one timer serves a delay however many calls", () => {
  const clock = fakeHost();
  const deadlines = new Deadlines(clock.host);
  const fired: string[] = [];
  for (let i = 0; i < 100; i++) {
    clock.advance(i);
    deadlines.after(1000, () => fired.push(`a${i}`));
  }
  assert.equal(clock.timers.length, 1);
  clock.advance(1000);
  assert.deepEqual(fired, ["a0"]);
  clock.advance(1049.5);
  assert.equal(fired.length, 50);
  clock.advance(1099);
  assert.equal(fired.length, 100);
  assert.deepEqual(fired, Array.from({ length: 100 }, (_, i) => `a${i}`));
  assert.equal(deadlines.size, 0);
});

Deno.test("Deadlines: a cancelled deadline never fires, and ended calls are let go", () => {
  const clock = fakeHost();
  const deadlines = new Deadlines(clock.host);
  const fired: number[] = [];
  const slow = deadlines.after(1000, () => fired.push(0));
  const ended = Array.from({ length: 5000 }, (_, i) => deadlines.after(1000, () => fired.push(i)));
  for (const d of ended) d.cancel();
  // Behind the slow call, the ended ones wait; once it ends too, none is held.
  assert.equal(deadlines.size, 5001);
  slow.cancel();
  assert.equal(deadlines.size, 0);
  clock.advance(5000);
  assert.equal(fired.length, 0);
  // In the order calls usually end (oldest first), nothing piles up.
  for (let i = 0; i < 5000; i++) {
    deadlines.after(1000, () => fired.push(i)).cancel();
  }
  assert.equal(deadlines.size, 0);
  assert.equal(fired.length, 0);
});

Deno.test("Deadlines: delays of their own, a deadline added as one fires, and one cancelled twice", () => {
  const clock = fakeHost();
  const deadlines = new Deadlines(clock.host);
  const fired: string[] = [];
  deadlines.after(300, () => fired.push("300"));
  deadlines.after(100, () => {
    fired.push("100");
    deadlines.after(100, () => fired.push("100 again"));
  });
  const twice = deadlines.after(200, () => fired.push("200"));
  twice.cancel();
  twice.cancel();
  clock.advance(199);
  assert.deepEqual(fired, ["100"]);
  clock.advance(200);
  assert.deepEqual(fired, ["100", "100 again"]);
  clock.advance(300);
  assert.deepEqual(fired, ["100", "100 again", "300"]);
  assert.equal(deadlines.size, 0);
});

Deno.test("Deadlines: delays within a 64th of each other share a queue; a deadline behind a later one is late by less than that", () => {
  const clock = fakeHost();
  const deadlines = new Deadlines(clock.host);
  const fired: number[] = [];
  // 1015 and 1009 ms fall in one queue (1008 to 1015), 1016 in the next: two timers.
  deadlines.after(1015, () => fired.push(1015));
  deadlines.after(1009, () => fired.push(1009));
  deadlines.after(1016, () => fired.push(1016));
  deadlines.after(20, () => fired.push(20));
  assert.equal(clock.timers.length, 3);
  clock.advance(1008);
  assert.deepEqual(fired, [20]);
  clock.advance(1014);
  assert.deepEqual(fired, [20]);
  clock.advance(1015);
  assert.deepEqual(fired, [20, 1015, 1009]);
  clock.advance(1016);
  assert.deepEqual(fired, [20, 1015, 1009, 1016]);
  // Each 64th is its own queue, however long the delay: a month's is capped at a timer's limit.
  const queues = new Set<number>();
  for (let ms = 64; ms < 2 ** 31; ms = Math.ceil(ms * 1.01)) {
    const before = clock.timers.length;
    deadlines.after(ms, () => {}).cancel();
    if (clock.timers.length > before) queues.add(ms);
  }
  assert.ok(queues.size < 25 * 64, `${queues.size}`);
  deadlines.after(31 * 24 * 3600 * 1000, () => fired.push(-1));
  clock.advance(1016 + 2 ** 31 - 2);
  assert.equal(fired.at(-1), 1016);
  clock.advance(1016 + 2 ** 31 - 1);
  assert.equal(fired.at(-1), -1);
});

Deno.test("Deadlines: the real timers fire, and a pending one does not keep the process alive", async () => {
  const { deadlines } = await import("./deadlines.ts");
  const started = performance.now();
  // The deadline's timer does not hold the process (nor this test) open: an interval does.
  const alive = setInterval(() => {}, 1000);
  await new Promise<void>((resolve) => deadlines.after(20, resolve));
  clearInterval(alive);
  assert.ok(performance.now() - started >= 19.5);
  // A timer left armed after its call ended is no leak to the test's sanitizers.
  deadlines.after(60_000, () => {}).cancel();
  deadlines.after(60_000, () => {});
});

Deno.test("Deadlines: one that throws does not keep the others of its queue from firing", () => {
  const clock = fakeHost();
  const deadlines = new Deadlines(clock.host);
  const fired: number[] = [];
  const thrown: unknown[] = [];
  const original = globalThis.queueMicrotask;
  globalThis.queueMicrotask = (task) => {
    try {
      task();
    } catch (error) {
      thrown.push(error);
    }
  };
  try {
    deadlines.after(100, () => {
      throw new Error("boom");
    });
    deadlines.after(100, () => fired.push(1));
    clock.advance(100);
    deadlines.after(100, () => fired.push(2));
    clock.advance(200);
  } finally {
    globalThis.queueMicrotask = original;
  }
  assert.deepEqual(fired, [1, 2]);
  assert.equal(String(thrown[0]), "Error: boom");
});
