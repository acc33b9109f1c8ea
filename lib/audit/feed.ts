/**
 * The change feed: a server-streaming `WatchEvents` sends every new event of a project (or space)
 * as it commits, in commit order, after the cursor the watcher gives (the last event number it
 * saw), so a watcher that reconnects with its cursor misses nothing and sees nothing twice.
 *
 * How: the table is the feed. Events are numbered once they have committed (./events.ts's
 * numberEvents: per project, with no gaps, never below a number already given), so a watcher
 * reads `seq > cursor` from the table, in order, a batch at a time, and never skips an event that
 * is numbered later. While anyone watches, the process ticks every `tickMs` (250 ms): it numbers
 * what has committed, reads the heads (each project's last number) of the projects watched, and
 * wakes the watchers that are behind their project's head (without watchers, ./retention.ts numbers
 * every 2 s). An event therefore reaches a watcher within about 250 ms of its commit, on every
 * replica, whichever replica wrote it.
 *
 * Why not `LISTEN/NOTIFY` on each write: Postgres serialises the commits of every transaction that
 * notifies (a database-wide lock held until the commit is on disk), so a notification per change
 * costs every writer of the database its concurrency; a tick costs a short numbering transaction
 * and one query four times a second per process, however many watch or write. Why not logical
 * replication: it needs a replication slot per consumer and a privileged role, and holds WAL while
 * a consumer is away; the table with its cursor needs neither and keeps the retention the audit
 * trail has anyway.
 *
 * What a watcher may cost: a watcher holds at most one batch (`batch` rows, 500) in memory, and is
 * not read ahead of: the next batch is read when the previous one has been written to the stream,
 * so a watcher that does not read is held back by HTTP/2 flow control and cut off by the
 * transport's window timeout, not buffered without limit. At most `maxWatchers` watch at once per
 * process, and at most a quarter of them (at least one) one project's or space's events, so that
 * one caller's streams leave room for the others' (RESOURCE_EXHAUSTED beyond).
 *
 * A position retention has passed (`after` below the oldest event kept, less one) is refused
 * (OUT_OF_RANGE, naming the oldest kept) rather than followed from the oldest kept: a consumer
 * that resumes after an outage longer than the retention learns that it missed events; when
 * retention took every event of the project, a position below its head (the last number given)
 * is refused the same way, naming the head. A position past the last number given, which this
 * feed never gave (another project's, or one from before a restore), is refused too (OUT_OF_RANGE,
 * naming the last), rather than waited on: the events up to it would be skipped when they come.
 * `after` 0, a consumer's first watch, starts at the oldest kept.
 *
 * @module
 */

import { Code, ConnectError } from "@connectrpc/connect";
import type { Sql } from "../db/mod.ts";
import { eventColumns, type EventRow, numberEvents } from "./events.ts";

/** Options of {@link createEventFeed}. */
export interface EventFeedOptions {
  /** Most watchers at once (RESOURCE_EXHAUSTED beyond). */
  maxWatchers: number;
  /** Most events read and held at once per watcher (default 500). */
  batch?: number;
  /** How often the feed numbers events and wakes watchers while anyone watches (default 250 ms). */
  tickMs?: number;
}

/** A process's feed of one schema's events. */
export interface EventFeed {
  /**
   * The events of `parent` numbered above `after`, a batch at a time in commit order, as they
   * commit, until `signal` aborts (then throws its reason). Throws RESOURCE_EXHAUSTED when
   * `maxWatchers` watch already.
   */
  watch(parent: string, after: bigint, signal: AbortSignal): AsyncGenerator<EventRow[]>;
  /** How many watch now. */
  watchers(): number;
  /**
   * Ends every watch (UNAVAILABLE: watch again, elsewhere, from the last id seen), refuses new
   * ones, and stops ticking. For a draining process.
   */
  close(): void;
}

/** A watcher waiting for its project's head to pass its cursor. */
interface Waiter {
  cursor: bigint;
  wake(): void;
}

/** Creates the feed of `<schema>.events` over `sql`. */
export function createEventFeed(sql: Sql, schema: string, options: EventFeedOptions): EventFeed {
  const batch = options.batch ?? 500;
  const tickMs = options.tickMs ?? 250;
  const table = sql(`${schema}.events`);
  const heads = sql(`${schema}.event_heads`);
  /** The waiting watchers, by project. */
  const waiting = new Map<string, Set<Waiter>>();
  let count = 0;
  /** Watchers by parent, and the most one parent may hold. */
  const byParent = new Map<string, number>();
  const perParent = Math.max(1, Math.floor(options.maxWatchers / 4));
  let closed = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let ticking = false;

  const schedule = (ms: number) => {
    clearTimeout(timer);
    timer = closed || count === 0 ? undefined : setTimeout(tick, ms);
  };
  async function tick() {
    if (ticking) return;
    ticking = true;
    try {
      await numberEvents(sql, schema);
      const parents = [...waiting.keys()];
      if (parents.length > 0) {
        const rows = await sql<{ parent: string; seq: string }[]>`
          select parent, seq::text as seq from ${heads} where parent = any(${parents})`;
        for (const row of rows) {
          const head = BigInt(row.seq);
          for (const w of waiting.get(row.parent) ?? []) if (head > w.cursor) w.wake();
        }
      }
    } catch {
      // The database is away: the next tick tries again; watchers wait meanwhile.
    } finally {
      ticking = false;
      schedule(tickMs);
    }
  }

  /** Resolves when the tick finds `parent`'s head past `cursor`, or when `signal` aborts. */
  function behind(parent: string, cursor: bigint, signal: AbortSignal) {
    return new Promise<void>((resolve) => {
      if (closed || signal.aborted) return resolve();
      const set = waiting.get(parent) ?? new Set();
      waiting.set(parent, set);
      const waiter: Waiter = {
        cursor,
        wake() {
          signal.removeEventListener("abort", waiter.wake);
          set.delete(waiter);
          if (set.size === 0 && waiting.get(parent) === set) waiting.delete(parent);
          resolve();
        },
      };
      signal.addEventListener("abort", waiter.wake, { once: true });
      set.add(waiter);
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
      const held = byParent.get(parent) ?? 0;
      if (held >= perParent) {
        throw new ConnectError(
          `${parent} has ${perParent} watchers on this process already; retry later or elsewhere`,
          Code.ResourceExhausted,
        );
      }
      byParent.set(parent, held + 1);
      // The first watcher starts the tick; it stops when the last one leaves.
      if (count++ === 0 && !ticking) schedule(tickMs);
      let cursor = after;
      try {
        if (after > 0n) {
          const [kept] = await sql<{ seq: string | null; head: string | null; given: string }[]>`
            select seq::text, head::text, coalesce(greatest(head, last), 0)::text as given
            from (select
              (select min(seq) from ${table} where parent = ${parent} and seq is not null) as seq,
              (select seq from ${heads} where parent = ${parent}) as head,
              (select max(seq) from ${table} where parent = ${parent}) as last) kept`;
          // A position past the last number given was never given for this project or space
          // (another's, or a database restored from before it): refused rather than waited on,
          // since the events up to it would be skipped when they come.
          const given = BigInt(kept!.given);
          if (after > given) {
            throw new ConnectError(
              `No event after ${given} was given for ${parent}: ${after} is no position of its ` +
                `feed; watch from ${given} (or 0)`,
              Code.OutOfRange,
            );
          }
          if (kept?.seq != null && after < BigInt(kept.seq) - 1n) {
            throw new ConnectError(
              `The events after ${after} are past retention: the oldest kept is ${kept.seq}; ` +
                `watch from ${BigInt(kept.seq) - 1n} (or 0) to go on from it`,
              Code.OutOfRange,
            );
          }
          // Retention took every event (a project quiet for longer than it keeps them): the
          // numbers up to the head were given, so a cursor below it missed events as surely,
          // though none is left to name.
          if (kept?.seq == null && kept?.head != null && after < BigInt(kept.head)) {
            throw new ConnectError(
              `The events after ${after} are past retention: none is kept, the last was ` +
                `${kept.head}; watch from ${kept.head} (or 0) to go on from it`,
              Code.OutOfRange,
            );
          }
        }
        // Ended by `signal` with its reason: a deadline that passes is DEADLINE_EXCEEDED to the
        // caller, not a stream that ended as if the feed had nothing more.
        for (signal.throwIfAborted();; signal.throwIfAborted()) {
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
          await behind(parent, cursor, signal);
          if (closed) throw draining();
        }
      } finally {
        if (--count === 0) clearTimeout(timer);
        const left = byParent.get(parent)! - 1;
        if (left === 0) byParent.delete(parent);
        else byParent.set(parent, left);
      }
    },
    watchers: () => count,
    close() {
      closed = true;
      clearTimeout(timer);
      for (const set of [...waiting.values()]) for (const w of [...set]) w.wake();
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
