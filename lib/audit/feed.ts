/**
 * The change feed: a server-streaming `WatchEvents` sends every new event of a project (or space)
 * as it commits, in commit order, after the cursor the watcher gives (the last event number it
 * saw), so a watcher that reconnects with its cursor misses nothing and sees nothing twice.
 *
 * How: the table is the feed, and `LISTEN/NOTIFY` only says when to look. Each event's insert
 * notifies `<schema>_events` with its project and number (a trigger, so the notification goes out
 * when the change commits); a watcher reads `seq > cursor` from the table, in order, a batch at a
 * time, and waits for the next notification of its project. Numbers are given in commit order
 * with no gaps (migrations/0009_audit_events.sql), so a read never skips an event that commits
 * later. A lost notification (the listening connection dropped) costs latency, never an event:
 * each watcher also looks every `pollMs` (1 s) while it waits, so an event reaches a watcher
 * within about a second of its commit even then. Why not logical replication: it needs a
 * replication slot per consumer and a privileged role, and holds WAL while a consumer is away; the
 * table with its cursor needs neither and keeps the retention the audit trail has anyway.
 *
 * What a watcher may cost: one process listens on one connection for all its watchers; a watcher
 * holds at most one batch (`batch` rows, 500) in memory, and is not read ahead of: the next batch
 * is read when the previous one has been written to the stream, so a watcher that does not read
 * is held back by HTTP/2 flow control and cut off by the transport's window timeout, not buffered
 * without limit. At most `maxWatchers` watch at once per process (RESOURCE_EXHAUSTED beyond).
 *
 * @module
 */

import { Code, ConnectError } from "@connectrpc/connect";
import type { Sql } from "../db/mod.ts";
import { eventColumns, type EventRow } from "./events.ts";

/** Options of {@link createEventFeed}. */
export interface EventFeedOptions {
  /** Most watchers at once (RESOURCE_EXHAUSTED beyond). */
  maxWatchers: number;
  /** Most events read and held at once per watcher (default 500). */
  batch?: number;
  /** How often a waiting watcher looks even without a notification (default 1,000 ms). */
  pollMs?: number;
}

/** A process's feed of one schema's events. */
export interface EventFeed {
  /**
   * The events of `parent` numbered above `after`, a batch at a time in commit order, as they
   * commit, until `signal` aborts. Throws RESOURCE_EXHAUSTED when `maxWatchers` watch already.
   */
  watch(parent: string, after: bigint, signal: AbortSignal): AsyncGenerator<EventRow[]>;
  /** How many watch now. */
  watchers(): number;
  /**
   * Ends every watch (UNAVAILABLE: watch again, elsewhere, from the last id seen) and refuses new
   * ones; stops listening. For a draining process.
   */
  close(): Promise<void>;
}

/** Creates the feed of `<schema>.events` over `sql`. */
export function createEventFeed(sql: Sql, schema: string, options: EventFeedOptions): EventFeed {
  const batch = options.batch ?? 500;
  const pollMs = options.pollMs ?? 1000;
  const table = sql(`${schema}.events`);
  /** The wake-up of each waiting watcher, by project. */
  const waiting = new Map<string, Set<() => void>>();
  let count = 0;
  let closed = false;
  let listening: Promise<{ unlisten(): Promise<void> } | undefined> | undefined;

  const onNotify = (payload: string) => {
    const parent = payload.slice(0, payload.lastIndexOf(" "));
    for (const wake of waiting.get(parent) ?? []) wake();
  };
  const listen = () => {
    // A listen that fails (the database is down) is tried again by the next watcher; meanwhile
    // watchers poll.
    listening ??= sql.listen(`${schema}_events`, onNotify).catch(() => {
      listening = undefined;
      return undefined;
    });
  };

  /** Resolves at the next notification of `parent`, after `pollMs`, or when `signal` aborts. */
  function nextWake(parent: string, signal: AbortSignal, woken: { flag: boolean }) {
    return new Promise<void>((resolve) => {
      if (woken.flag || signal.aborted) return resolve();
      const set = waiting.get(parent) ?? new Set();
      waiting.set(parent, set);
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", done);
        set.delete(done);
        if (set.size === 0) waiting.delete(parent);
        resolve();
      };
      const timer = setTimeout(done, pollMs);
      signal.addEventListener("abort", done, { once: true });
      set.add(done);
    });
  }

  return {
    async *watch(parent, after, signal) {
      if (closed) throw draining();
      if (count >= options.maxWatchers) {
        throw new ConnectError(
          `This process serves ${options.maxWatchers} watchers already; retry later or elsewhere`,
          Code.ResourceExhausted,
        );
      }
      count++;
      listen();
      // Set by a notification that comes while a read runs, so that it is not slept through.
      const woken = { flag: false };
      const wake = () => woken.flag = true;
      const mine = waiting.get(parent) ?? new Set();
      waiting.set(parent, mine);
      mine.add(wake);
      let cursor = after;
      try {
        while (!signal.aborted) {
          woken.flag = false;
          const rows = await sql<EventRow[]>`
            select ${eventColumns(sql)} from ${table} e
            where parent = ${parent} and seq > ${cursor.toString()}::bigint
            order by e.seq
            limit ${batch}`;
          if (rows.length > 0) {
            cursor = BigInt(rows[rows.length - 1]!.seq);
            yield rows;
            if (rows.length === batch) continue;
          }
          await nextWake(parent, signal, woken);
          if (closed) throw draining();
        }
      } finally {
        count--;
        mine.delete(wake);
        if (mine.size === 0 && waiting.get(parent) === mine) waiting.delete(parent);
      }
    },
    watchers: () => count,
    async close() {
      closed = true;
      for (const set of waiting.values()) for (const wake of set) wake();
      await (await listening)?.unlisten().catch(() => {});
    },
  };
}

/** UNAVAILABLE: the process is draining; a watcher reconnects with its cursor. */
function draining(): ConnectError {
  return new ConnectError(
    "This server is shutting down; watch again from the last event id you saw",
    Code.Unavailable,
  );
}
