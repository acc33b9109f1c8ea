/**
 * The upkeep of the audit trail, in the background: events older than `AUDIT_RETENTION_DAYS`
 * (default 400, as Google Cloud keeps admin activity logs) are deleted a thousand at a time every
 * `intervalMs`, and what has committed is numbered every `numberMs` (./events.ts's numberEvents),
 * so that what waits for a number stays small when nobody reads. Every replica runs both; the
 * batches are small, one replica's delete of rows another is deleting only finds fewer, and
 * numbering runs one at a time.
 *
 * @module
 */

import { inBatches, type Sql } from "../db/mod.ts";
import { type Logger, positiveInt } from "../platform/mod.ts";
import { numberEvents, pruneEvents } from "./events.ts";
import { createEventFeed, type EventFeed } from "./feed.ts";

/** The settings of the services that keep events. */
export const auditSettings = {
  /** How long events are kept, in days (default 400). */
  AUDIT_RETENTION_DAYS: positiveInt(400),
  /** Most WatchEvents streams at once per process (default 100). */
  AUDIT_MAX_WATCHERS: positiveInt(100),
};

/** Options of {@link keepEvents}. */
export interface RetentionOptions {
  /** Days to keep. */
  days: number;
  /** The clock (ms since the epoch). */
  now: () => number;
  /** Where deletions and failures are reported. */
  log: Logger;
  /** How often to prune (default 10 minutes). */
  intervalMs?: number;
  /** How often to number events (default 2 s). */
  numberMs?: number;
  /** Most batches per run (default 100: 100,000 events). */
  maxBatches?: number;
  /**
   * Resolves once the schema is migrated: nothing runs before (on a new database the tables are
   * not there yet, and every start would warn that they are missing).
   */
  migrated?: Promise<void>;
}

/** Deletes what is past retention now; returns how many events. */
export async function pruneOnce(sql: Sql, schema: string, o: RetentionOptions): Promise<number> {
  const cutoff = new Date(o.now() - o.days * 86_400_000);
  return await inBatches((limit) => pruneEvents(sql, schema, cutoff, limit), {
    maxBatches: o.maxBatches ?? 100,
  });
}

/**
 * Prunes 30 s after the start and then every `intervalMs`, and numbers every `numberMs`, until the
 * returned function is called.
 */
export function keepEvents(sql: Sql, schema: string, o: RetentionOptions): () => void {
  let migrated = o.migrated === undefined;
  o.migrated?.then(() => migrated = true, () => {});
  let running = false;
  const run = async () => {
    if (running || !migrated) return;
    running = true;
    try {
      const n = await pruneOnce(sql, schema, o);
      if (n > 0) o.log.info("pruned audit events past retention", { count: n, days: o.days });
    } catch (error) {
      o.log.warn("cannot prune audit events", { error });
    } finally {
      running = false;
    }
  };
  const timer = setInterval(run, o.intervalMs ?? 600_000);
  Deno.unrefTimer(timer);
  // Once soon after the start as well: a process restarted more often than the interval would
  // otherwise never prune.
  const first = setTimeout(run, Math.min(o.intervalMs ?? 600_000, 30_000));
  Deno.unrefTimer(first);
  let numbering = false;
  let failing = false; // reported once, not every run, while the database is away
  const numberer = setInterval(async () => {
    if (numbering || !migrated) return;
    numbering = true;
    try {
      await numberEvents(sql, schema);
      failing = false;
    } catch (error) {
      if (!failing) o.log.warn("cannot number audit events", { error });
      failing = true;
    } finally {
      numbering = false;
    }
  }, o.numberMs ?? 2000);
  Deno.unrefTimer(numberer);
  return () => {
    clearTimeout(first);
    clearInterval(timer);
    clearInterval(numberer);
  };
}

/** A service's audit machinery: its change feed, and the retention running beside it. */
export interface Audit {
  /** The change feed its WatchEvents serves. */
  feed: EventFeed;
  /** Ends the watches and stops the retention (for a draining process). */
  stop(): void;
}

/** Starts a service's audit machinery over its schema, from its settings. */
export function startAudit(
  sql: Sql,
  schema: string,
  o: {
    config: { AUDIT_RETENTION_DAYS: number; AUDIT_MAX_WATCHERS: number };
    now: () => number;
    log: Logger;
    /** Resolves once the schema is migrated (see {@link RetentionOptions}). */
    migrated?: Promise<void>;
  },
): Audit {
  const stopPruning = keepEvents(sql, schema, {
    days: o.config.AUDIT_RETENTION_DAYS,
    now: o.now,
    log: o.log,
    ...(o.migrated === undefined ? {} : { migrated: o.migrated }),
  });
  const feed = createEventFeed(sql, schema, { maxWatchers: o.config.AUDIT_MAX_WATCHERS });
  return {
    feed,
    stop() {
      stopPruning();
      feed.close();
    },
  };
}
