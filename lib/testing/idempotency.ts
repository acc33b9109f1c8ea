/**
 * The crash an idempotency key must survive, made deterministic: the handler's write commits, and
 * storing its outcome fails (as a Postgres hiccup, or the process dying, after the commit would
 * make it fail). The key then stays "in progress" until its lock expires.
 *
 * @module
 */

import { plainName, type Sql } from "../db/mod.ts";

/** What {@link losingOutcomes} returns. */
export interface LostOutcomes {
  /** Lets outcomes be stored again. */
  heal(): Promise<void>;
  /** Ages every key of the schema that is in progress past its lock (60 s). */
  expireLocks(): Promise<void>;
}

/**
 * Makes every attempt to store an outcome in `<schema>.idempotency_keys` fail (a trigger raises on
 * the update that completes a key) until `heal`: the handler's own statement still commits.
 */
export async function losingOutcomes(sql: Sql, schema: string): Promise<LostOutcomes> {
  const s = plainName(schema);
  await sql.unsafe(`
    create function ${s}.lose_outcome() returns trigger language plpgsql as $$
    begin raise exception 'the outcome is lost (a test''s fault)'; end $$`);
  await sql.unsafe(`
    create trigger lose_outcome before update on ${s}.idempotency_keys for each row
      when (new.completed_at is not null) execute function ${s}.lose_outcome()`);
  return {
    async heal() {
      await sql.unsafe(`drop trigger lose_outcome on ${s}.idempotency_keys`);
      await sql.unsafe(`drop function ${s}.lose_outcome()`);
    },
    async expireLocks() {
      await sql.unsafe(`
        update ${s}.idempotency_keys set created_at = created_at - interval '61 seconds'
        where completed_at is null`);
    },
  };
}
