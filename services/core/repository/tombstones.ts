/**
 * The `core.tombstones` table: ids of deleted records, so that a page cursor naming one stays
 * valid. Rows are written by each repository's delete, in the same statement as the delete.
 *
 * @module
 */

import type { Sql } from "../../../lib/db/mod.ts";

/** Whether `id` was a record of `kind` in the list named by `listKey` (space or journey id). */
export async function isTombstone(
  sql: Sql,
  kind: "role" | "journey" | "unit",
  id: string,
  listKey: string,
): Promise<boolean> {
  const [row] = await sql<{ found: boolean }[]>`
    select exists (
      select 1 from core.tombstones where id = ${id} and kind = ${kind} and list_key = ${listKey}
    ) as found`;
  return row!.found;
}
