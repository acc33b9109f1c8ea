/**
 * Postgres: the pool, forward-only migrations, pool metrics, the idempotency keys' table, change
 * feeds and the caches they keep honest, and purges in batches. The gateway uses only the pool and
 * the change feeds (it reads no table: tests/boundaries_test.ts).
 *
 * @module
 */

export {
  type ChangeFeed,
  coreChangesChannel,
  followChanges,
  type FollowOptions,
  heartbeatPrefix,
  propagationMs,
  registryChangesChannel,
  revocationsChannel,
  signingKeysChannel,
} from "./change_feed.ts";
export {
  createFeedCache,
  createSettling,
  dropNamed,
  type FeedCache,
  type FeedCacheOptions,
  type KeptRows,
  keptRows,
  type RowCache,
  type RowCacheOptions,
  type Settling,
} from "./feed_cache.ts";
export { createIdempotencyStore } from "./idempotency_store.ts";
export { deleteBatch, inBatches, purgeBatch } from "./purge.ts";
export {
  assignments,
  connect,
  differences,
  insertion,
  isLockTimeout,
  migrate,
  plainName,
  readMigrations,
  registerPoolMetrics,
  type Sql,
} from "./postgres.ts";
