/**
 * Postgres, for the services only (the gateway's module graph must not contain it): the pool,
 * forward-only migrations, pool metrics, and the idempotency keys' table.
 *
 * @module
 */

export { createIdempotencyStore } from "./idempotency_store.ts";
export { connect, migrate, readMigrations, registerPoolMetrics, type Sql } from "./postgres.ts";
