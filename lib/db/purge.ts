/**
 * Deleting what expired, beside the traffic: in small batches, each its own short statement, so
 * that no purge holds locks for long or builds one huge transaction, and a backlog (a replica that
 * was down, a burst of tokens) is worked off in the runs that follow rather than all at once.
 *
 * @module
 */

import type postgres from "postgres";
import type { Sql } from "./postgres.ts";

/** Rows one batch deletes, at most. */
export const purgeBatch = 1000;

/**
 * Deletes at most `limit` rows of `table` (schema-qualified; the code's name, never a caller's)
 * that match `where`; returns how many it deleted. The rows are picked by their physical address
 * (`ctid`), so any table works whatever its key; a row updated between the pick and the delete
 * (in the same statement) is left for the next batch.
 */
export async function deleteBatch(
  sql: Sql,
  table: string,
  where: postgres.PendingQuery<postgres.Row[]>,
  limit = purgeBatch,
): Promise<number> {
  const t = sql(table);
  const gone = await sql`
    delete from ${t} where ctid = any(array(select ctid from ${t} where ${where} limit ${limit}))`;
  return gone.count;
}

/**
 * Runs `batch` (which deletes at most `limit` rows and says how many) until one deletes fewer than
 * `limit`, or `maxBatches` times; returns how many rows in all.
 */
export async function inBatches(
  batch: (limit: number) => Promise<number>,
  options: { limit?: number; maxBatches?: number } = {},
): Promise<number> {
  const limit = options.limit ?? purgeBatch;
  let total = 0;
  for (let i = 0; i < (options.maxBatches ?? 100); i++) {
    const n = await batch(limit);
    total += n;
    if (n < limit) break;
  }
  return total;
}
