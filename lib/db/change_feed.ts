/**
 * Following a schema's changes through Postgres `LISTEN/NOTIFY`, so that a process may keep what
 * another one owns in memory and still never answer from a copy that is more than a second old.
 *
 * The owner's triggers `pg_notify` a channel in the same transaction as each change, so a
 * notification is sent exactly when the change commits, and never for one that rolls back. The
 * follower listens on one connection and applies each notification as it comes. Two things can go
 * wrong, and each is answered:
 *
 * - **The listening connection is lost.** Notifications sent meanwhile are gone for good, so when
 *   postgres.js has listened again, {@link FollowOptions.onReset} empties the cache (a full
 *   reload: every entry is read again on its next use).
 * - **Notifications are late** (a cut network that TCP has not noticed yet, a stalled connection).
 *   Every `heartbeatMs` the follower notifies the channel itself, stamped with the time it sent it.
 *   Postgres delivers notifications in commit order, so once one of its own heartbeats has come back,
 *   every change committed before that heartbeat was sent has been applied. {@link ChangeFeed.fresh}
 *   is true only while the latest heartbeat back was sent at most `maxLagMs` ago: a cache that
 *   serves only while the feed is fresh never serves a copy older than `maxLagMs` after the change
 *   committed, whatever the load (a late heartbeat makes the cache step aside, not lie).
 *
 * A heartbeat is one small query every `heartbeatMs` per follower; every follower of the channel
 * also receives the others' heartbeats, and ignores them. Heartbeats are sent only while the feed
 * is in use: after `idleAfterMs` in which nobody asked whether it is fresh, the follower stops
 * sending them and stops their timer (it still listens and applies every change), and the next ask
 * finds it stale, sends one at once and is answered `false` until it is back (a millisecond or two,
 * in which the cache steps aside). Measured on this project's stack at rest (CPU over 20 s, twice
 * each), the oauth registry went from 8 to 3 ms of CPU a second, the token service from 8-9 to 2-3,
 * Postgres from 6 to 1-2.
 *
 * @module
 */

import type { Sql } from "./postgres.ts";

/** Options of {@link followChanges}. */
export interface FollowOptions {
  /** One change: the payload the owner's trigger sent. */
  onChange(payload: string): void;
  /** Everything may have changed (first listen, or listening again after a lost connection). */
  onReset(): void;
  /** How often to send a heartbeat (default 200 ms). */
  heartbeatMs?: number;
  /** How old the latest heartbeat back may be for the feed to be fresh (default 800 ms). */
  maxLagMs?: number;
  /** How long after the last ask whether the feed is fresh heartbeats go on (default 10 s). */
  idleAfterMs?: number;
  /**
   * The clock the lag is measured on (ms; default `performance.now()`, monotonic: a step of the
   * wall clock, an NTP correction, must not make the feed look fresh when it is not, which a step
   * back would for as long as it is, nor stale, which a step forward would, emptying the cache).
   */
  now?: () => number;
}

/** A feed being followed. */
export interface ChangeFeed {
  /** Whether every change committed more than `maxLagMs` ago has been applied. */
  fresh(): boolean;
  /** Stops following (the listening connection is the pool's to close). */
  close(): Promise<void>;
}

/**
 * The promise a follower keeps with the defaults: a change committed this long ago has been applied
 * (or the cache steps aside), in every replica. The README states it; tests wait for it.
 */
export const propagationMs = 1000;

/**
 * The channels the owners' triggers notify, named once for every follower: the oauth registry's
 * (services/oauth/migrations/0004_change_feed.sql; its triggers are named after it, the clients'
 * one `<channel>_clients`), the token service's revoked tokens
 * (services/token/migrations/0004_revocation_feed.sql, trigger `revoked_tokens_inserted`) and
 * signing keys (services/token/migrations/0017_signing_keys_feed.sql, trigger
 * `signing_keys_changed`), and the core area's units (services/core/migrations/0008_change_feed.sql,
 * trigger `<channel>_units`).
 */
export const registryChangesChannel = "oauth_registry_changes";
export const revocationsChannel = "token_revocations";
export const signingKeysChannel = "token_signing_keys";
export const coreChangesChannel = "core_changes";

/** The prefix of heartbeats; owners' payloads never start with it. */
export const heartbeatPrefix = "~hb:";

/** Follows `channel` on `sql` (see the module's header). */
export function followChanges(sql: Sql, channel: string, options: FollowOptions): ChangeFeed {
  const now = options.now ?? (() => performance.now());
  const heartbeatMs = options.heartbeatMs ?? 200;
  const maxLagMs = options.maxLagMs ?? 800;
  const idleAfterMs = options.idleAfterMs ?? 10_000;
  const resubscribeMs = Math.max(5_000, maxLagMs * 4);
  const me = `${heartbeatPrefix}${crypto.randomUUID().slice(0, 8)}:`;
  /** When the latest of our own heartbeats to come back was sent; undefined: none yet. */
  let confirmedAt: number | undefined;
  let closed = false;

  const onNotify = (payload: string) => {
    if (payload.startsWith(heartbeatPrefix)) {
      if (payload.startsWith(me)) {
        const sentAt = Number(payload.slice(me.length));
        // Anyone who may connect may notify, and every listener sees this follower's id: a stamp
        // later than now was never sent by it, and would keep the feed fresh however late it fell.
        if (sentAt <= now() && (confirmedAt === undefined || sentAt > confirmedAt)) {
          confirmedAt = sentAt;
        }
      }
      return;
    }
    options.onChange(payload);
  };
  const onListen = () => {
    // Listening (again): whatever was sent while nobody listened is gone.
    options.onReset();
  };
  /** The current subscription; postgres.js listens again by itself after a lost connection. */
  let subscription: Promise<{ unlisten(): Promise<void> } | undefined> | undefined;
  let subscribedAt = now();
  const subscribe = () => {
    const previous = subscription;
    subscribedAt = now();
    subscription = (async () => {
      await (await previous)?.unlisten().catch(() => {});
      // A listen that fails (the database is down) is tried again below.
      return await sql.listen(channel, onNotify, onListen).catch(() => undefined);
    })();
  };
  subscribe();

  /** When the feed was last asked whether it is fresh. */
  let askedAt = now();
  /** Since when heartbeats are sent (again); undefined while idle. */
  let beatingSince: number | undefined;
  /** The heartbeats' timer; undefined while idle (so that an idle process is not woken). */
  let timer: ReturnType<typeof setInterval> | undefined;
  let sending = false;
  const beat = async () => {
    if (sending || closed) return;
    const at = now();
    if (at - askedAt > idleAfterMs) {
      // Nobody asks: no heartbeats, and no timer, until somebody does.
      clearInterval(timer);
      timer = beatingSince = undefined;
      return;
    }
    beatingSince ??= at;
    // When postgres.js's own listening again failed too (the database was down when it tried),
    // nothing would ever listen again: after `resubscribeMs` of heartbeats none of which came
    // back, listen anew.
    const last = Math.max(confirmedAt ?? 0, subscribedAt, beatingSince);
    if (at - last > resubscribeMs) subscribe();
    sending = true;
    try {
      await sql`select pg_notify(${channel}, ${me + at})`;
    } catch {
      // The database is out of reach: the feed goes stale, and the cache steps aside.
    } finally {
      sending = false;
    }
  };
  const startBeating = () => {
    const interval = setInterval(beat, heartbeatMs);
    Deno.unrefTimer(interval);
    timer = interval;
    void beat();
  };
  startBeating();

  return {
    fresh() {
      const at = now();
      askedAt = at;
      // A heartbeat comes back only to a listener: none back yet, not fresh.
      if (confirmedAt !== undefined && at - confirmedAt <= maxLagMs) return true;
      if (timer === undefined && !closed) startBeating(); // waking up: one heartbeat now
      return false;
    },
    async close() {
      closed = true;
      clearInterval(timer);
      await (await subscription)?.unlisten().catch(() => {});
    },
  };
}
