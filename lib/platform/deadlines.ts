/**
 * Deadlines of calls in flight, on a few shared timers instead of one `setTimeout` each.
 *
 * Every RPC has a deadline, and nearly every one ends long before it: a timer armed and cleared
 * per call cost about 2% of a process's CPU under load (`setTimeout` in a V8 profile of the
 * registry and of the gateway, each answering GETs of a client) and a kilobyte of garbage each.
 * Calls that share a delay (the gateway's calls to a service, and so the service's, all carry the
 * same timeout) have their deadlines in the order they start: they wait in one queue, oldest
 * first, under one timer armed for the oldest deadline still pending. A call that ends drops its
 * entry (and the entries before it that ended too); the timer, when it fires, runs the deadlines
 * that are due and is armed again for the next one. So a busy process arms about one timer per
 * delay per timeout period, whatever its rate.
 *
 * Delays of 64 ms or more share a queue with those within 1/64 of them (a client that counts its
 * deadline down sends 9998 ms, then 9997...): so there are never more queues, nor timers, than a
 * few per power of two, and a deadline behind a later one of its queue fires when that one does.
 * A deadline never fires early; it fires late by at most 1/64 of its delay (under 1.6%), beside
 * what any timer may be late by.
 *
 * @module
 */

/** What {@link Deadlines} needs of a clock and a timer; tests give their own. */
export interface TimerHost {
  /** Milliseconds, monotonic. */
  now(): number;
  /** Calls `fire` once, `ms` from now. */
  set(fire: () => void, ms: number): void;
}

const realHost: TimerHost = {
  now: () => performance.now(),
  set: (fire, ms) => {
    const id = setTimeout(fire, ms);
    // A queue's timer may outlive its calls: it does not keep the process alive by itself.
    Deno.unrefTimer(id);
  },
};

/** A pending deadline: cancel it once the call ends. */
export interface Deadline {
  cancel(): void;
}

/** A timer's longest delay: 2^31 - 1 ms (about 24.8 days); a longer one fires at once. */
export const maxTimerMs = 2 ** 31 - 1;

/** The queue of a delay: itself below 64 ms, else the delay rounded down to a 64th of its power of two. */
function queueKey(ms: number): number {
  const whole = Math.floor(ms);
  if (whole < 64) return whole;
  const shift = 25 - Math.clz32(whole);
  return (whole >>> shift) << shift;
}

/** A queue's compaction: entries dropped from its front are let go once they are this many. */
const compactAfter = 1024;

class Entry implements Deadline {
  constructor(
    readonly at: number,
    public fire: (() => void) | undefined,
    readonly queue: Queue,
  ) {}

  cancel(): void {
    if (this.fire === undefined) return;
    this.fire = undefined;
    this.queue.trim();
  }
}

class Queue {
  entries: Entry[] = [];
  head = 0;
  /** Armed for the oldest deadline (or running it). */
  armed = false;

  constructor(readonly key: number) {}

  /** Drops the ended entries at the front. */
  trim(): void {
    const entries = this.entries;
    while (this.head < entries.length && entries[this.head]!.fire === undefined) this.head++;
    if (this.head === entries.length) {
      entries.length = 0;
      this.head = 0;
    } else if (this.head >= compactAfter && this.head * 2 >= entries.length) {
      this.entries = entries.slice(this.head);
      this.head = 0;
    }
  }
}

/** Deadlines on shared timers (see the module's documentation). */
export class Deadlines {
  readonly #host: TimerHost;
  readonly #queues = new Map<number, Queue>();

  constructor(host: TimerHost = realHost) {
    this.#host = host;
  }

  /**
   * Runs `fire` `ms` milliseconds from now (at most 2^31 - 1, a timer's longest delay), unless the
   * returned deadline is cancelled first.
   */
  after(ms: number, fire: () => void): Deadline {
    const delay = Math.min(Math.max(0, ms), maxTimerMs);
    const key = queueKey(delay);
    let queue = this.#queues.get(key);
    if (queue === undefined) this.#queues.set(key, queue = new Queue(key));
    const entry = new Entry(this.#host.now() + delay, fire, queue);
    queue.entries.push(entry);
    if (!queue.armed) this.#arm(queue, delay);
    return entry;
  }

  /** Deadlines pending (not fired, not cancelled, or cancelled behind a pending one), for tests. */
  get size(): number {
    let n = 0;
    for (const queue of this.#queues.values()) n += queue.entries.length - queue.head;
    return n;
  }

  #arm(queue: Queue, ms: number): void {
    queue.armed = true;
    this.#host.set(() => this.#due(queue), ms);
  }

  /** Runs a queue's deadlines that are due (still armed meanwhile: `fire` may add to it). */
  #due(queue: Queue): void {
    const now = this.#host.now();
    for (;;) {
      queue.trim();
      const next = queue.entries[queue.head];
      if (next === undefined) {
        queue.armed = false;
        this.#queues.delete(queue.key);
        return;
      }
      if (next.at > now) {
        // Timers may fire a fraction of a millisecond before the clock says they are due.
        this.#arm(queue, Math.max(1, Math.ceil(next.at - now)));
        return;
      }
      const fire = next.fire!;
      next.fire = undefined;
      try {
        fire();
      } catch (error) {
        // Thrown on as a timer's callback would throw it, after the queue is in order again.
        queueMicrotask(() => {
          throw error;
        });
      }
    }
  }
}

/** The process's deadlines. */
export const deadlines: Deadlines = new Deadlines();
