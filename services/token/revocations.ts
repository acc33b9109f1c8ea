/**
 * Which access tokens were revoked (RFC 7009), known from memory in every replica: introspection
 * asks on every call, and the answer is almost always "no". The list lives in
 * `token.revoked_tokens`; each revocation notifies `token_revocations` as it commits
 * (migrations/0004_revocation_feed.sql), and each replica follows the channel
 * (lib/db/change_feed.ts): a revocation takes effect in every replica within a second. A TRUNCATE
 * of the table notifies `reset` (migrations/0016_revocation_feed_truncate.sql).
 *
 * The replica reads the tokens revoked and not yet expired (by its own clock, which its tokens
 * expire by) when it starts listening, again after
 * a lost listening connection or a `reset`, once a minute (which forgets the expired ones), and a
 * second after a read that failed. It
 * answers from memory only while the feed is fresh and the list is loaded; otherwise, or when more
 * than `max` tokens are revoked and unexpired (or the memory budget has no room for them), it asks
 * Postgres, as without the list. Each jti is counted as 100 bytes in the budget's `cache` share.
 *
 * @module
 */

import type { ChangeFeed, FollowOptions, Sql } from "../../lib/db/mod.ts";
import type { Lease, MemoryBudget } from "../../lib/platform/mod.ts";

/** Revoked access tokens. */
export interface Revocations {
  /** Whether the token of `jti` was revoked. */
  isRevoked(jti: string): Promise<boolean>;
  /**
   * Tokens this replica has just revoked (committed): known at once here, where the feed brings
   * them a moment later, so that a caller who revoked a token never sees it active on this replica.
   */
  revoked(jtis: readonly string[]): void;
  /** Reads the list again (forgetting expired tokens). */
  reload(): Promise<void>;
  /** How many are known from memory (undefined: asking Postgres). */
  size(): number | undefined;
  /** Stops following the feed. */
  close(): Promise<void>;
}

/** Options of {@link createRevocations}. */
export interface RevocationsOptions {
  /** Follows the channel (lib/db/change_feed.ts's followChanges, bound). */
  follow(options: FollowOptions): ChangeFeed;
  /** The most tokens kept in memory (default 20,000). */
  max?: number;
  /** The process's memory budget. */
  budget?: MemoryBudget | undefined;
  /**
   * The clock tokens expire by (ms since the epoch; default `Date.now`): the list read again holds
   * the tokens unexpired by it, not by Postgres's, which may be ahead.
   */
  now?: () => number;
}

const bytesPerToken = 100;

/** Asks Postgres every time (no feed: the embedded database's single connection). */
export function uncachedRevocations(sql: Sql): Revocations {
  return {
    isRevoked: (jti) => revokedInDatabase(sql, jti),
    revoked: () => {},
    reload: () => Promise.resolve(),
    size: () => undefined,
    close: () => Promise.resolve(),
  };
}

async function revokedInDatabase(sql: Sql, jti: string): Promise<boolean> {
  const [row] = await sql`select 1 from token.revoked_tokens where jti = ${jti}`;
  return row !== undefined;
}

/** Follows the revocations of `sql` (see the module's header). */
export function createRevocations(sql: Sql, options: RevocationsOptions): Revocations {
  const max = options.max ?? 20_000;
  const now = options.now ?? Date.now;
  /** The revoked jtis, when known; undefined while loading, or when there are too many. */
  let known: Set<string> | undefined;
  /** Revocations notified while a load runs, added to what it reads. */
  let arriving: Set<string> | undefined;
  let loads = 0;
  let lease: Lease | undefined = options.budget?.take(0, ["cache"]);
  /** When a load last failed (the table not there yet, Postgres out of reach): tried again. */
  let failedAt: number | undefined;

  function forget(): void {
    known = undefined;
    lease?.shrink(lease.bytes);
  }
  function add(jti: string): void {
    arriving?.add(jti);
    if (!known || known.has(jti)) return;
    if (known.size >= max || (lease && !lease.grow(bytesPerToken))) return forget();
    known.add(jti);
  }

  async function reload(): Promise<void> {
    const load = ++loads;
    forget();
    arriving = new Set();
    try {
      const rows = await sql<{ jti: string }[]>`
        select jti::text from token.revoked_tokens where expires_at > ${new Date(now())}
        limit ${max + 1}`;
      if (load !== loads) return; // a later load took over
      const all = new Set([...rows.map((r) => r.jti), ...arriving]);
      if (all.size > max || (lease && !lease.grow(all.size * bytesPerToken))) return;
      known = all;
      failedAt = undefined;
    } catch {
      // Postgres is out of reach, or the table is not migrated yet (the feed listens from the
      // start): calls ask Postgres, and the load is tried again on use, at most once a second.
      if (load === loads) failedAt = performance.now();
    } finally {
      if (load === loads) arriving = undefined;
    }
  }

  const feed = options.follow({
    onChange(payload) {
      if (payload === "reset") void reload();
      else add(payload);
    },
    onReset() {
      void reload();
    },
  });

  return {
    async isRevoked(jti) {
      if (known && feed.fresh()) return known.has(jti);
      if (failedAt !== undefined && performance.now() - failedAt > 1000) {
        failedAt = undefined;
        void reload();
      }
      return await revokedInDatabase(sql, jti);
    },
    revoked(jtis) {
      for (const jti of jtis) add(jti);
    },
    reload,
    size: () => known?.size,
    async close() {
      await feed.close();
      forget();
      lease?.release();
      lease = undefined;
    },
  };
}
