/**
 * The three writes every audited resource table makes the same way, each one statement with its
 * event (./events.ts): a create, an update of the columns a caller set (under the row's lock and
 * the caller's etag), and a delete under the caller's etag. What differs between tables (how a row
 * is found, what a delete leaves behind) is the repository's, passed in as SQL.
 *
 * @module
 */

import { assignments, differences, insertion, type Sql } from "../db/mod.ts";
import {
  type AuditContext,
  type AuditedTable,
  constant,
  etagOf,
  type Fragment,
  ifMatch,
  rowEvent,
  type Write,
} from "./events.ts";

/** An audited table of resources, with `id`, `created_at` and `updated_at` columns. */
export interface AuditedRows extends AuditedTable {
  /** The table, schema-qualified (a constant of the code). */
  table: string;
}

/**
 * Inserts a row (`created_at` and `updated_at` set to `at`) and its `created` event, named
 * `resource`; returns the row with its etag. Values may be SQL (a lookup the insert makes).
 */
export async function insertAudited<T extends object>(
  sql: Sql,
  rows: AuditedRows,
  values: object,
  at: Date,
  audit: AuditContext,
  resource: string,
): Promise<T | undefined> {
  const [row] = await sql<T[]>`
    with created as (
      insert into ${constant(sql, rows.table)} ${
    insertion(sql, { ...values, created_at: at, updated_at: at })
  }
      returning *, ${constant(sql, etagOf(rows.schema))} as etag
    ),
    ${rowEvent(sql, rows, audit, resource, "created", "created", null, "created")}
    select * from created`;
  return row;
}

/**
 * Sets `changes` (their keys are the code's column names) and `updated_at` on the one row that
 * `where` finds, when `write.etag` is absent or is the row's, with its `updated` event naming the
 * columns set, before and after; returns the row with its new etag, or undefined when there is no
 * such row or the etag is not its (the caller tells the two apart). The row is locked first, so
 * the event's old values are the version the update replaces. `updated_at` is the statement's
 * time, but never before the version it replaces: a statement that began first and then waited for
 * the row would otherwise date its version before the one a later writer committed meanwhile. A
 * write that would change none of the columns (each already holds its value) writes nothing: no
 * event, and the row is returned as it was, its etag and `updated_at` unchanged. Nor does it lock:
 * a row that the statement's snapshot finds already so is answered from that read (the write takes
 * effect as of the snapshot, where it is a no-op), since a row lock is itself a write, with a
 * transaction id and a WAL record to flush at commit, and retries of one request would queue on
 * it. In a transaction, pass its `run` and the pool as `sql` (lib/audit's fragments are made once
 * per pool).
 */
export async function updateAudited<T extends object, C extends object>(
  sql: Sql,
  rows: AuditedRows,
  where: Fragment,
  changes: C,
  write: Write,
  resource: string,
  run: Sql = sql,
): Promise<T | undefined> {
  const columns = Object.keys(changes) as (keyof C & string)[];
  const table = constant(sql, rows.table);
  const [row] = await run<T[]>`
    with ${unchangedRow(sql, rows, where, changes, columns, write.etag)},
    prior as (
      select *, ${constant(sql, etagOf(rows.schema))} as etag from ${table}
      where ${where} and not exists (select from unchanged)
      for update
    ),
    updated as (
      update ${table} t
      set ${assignments(sql, changes, columns)},
        updated_at = greatest(now(), t.updated_at, t.created_at)
      from prior
      where t.id = prior.id ${ifMatch(sql, "prior.etag", write.etag)}
        and ${differences(sql, "t", changes, columns)}
      returning t.*, ${constant(sql, etagOf(rows.schema, "t"))} as etag
    ),
    ${
    rowEvent(
      sql,
      rows,
      write.audit,
      resource,
      "prior, updated",
      "updated",
      "prior",
      "updated",
      columns,
    )
  }
    select * from unchanged
    union all
    select * from updated
    union all
    select * from prior
    where not exists (select from updated) ${ifMatch(sql, "prior.etag", write.etag)}`;
  return row;
}

/**
 * The CTE `unchanged`: the row of `rows.table` that `where` finds, with its etag, as the statement's
 * snapshot has it, when each of `columns` already holds its value in `changes` and `etag`, if
 * given, is its; else nothing. A write that finds it is a no-op, answered from it without locking
 * the row (see {@link updateAudited}); a lock that follows it belongs behind `not exists (select
 * from unchanged)`. `where` names the table's columns unqualified.
 */
export function unchangedRow<C extends object>(
  sql: Sql,
  rows: Pick<AuditedRows, "table" | "schema">,
  where: Fragment,
  changes: C,
  columns: readonly (keyof C & string)[],
  etag: string | undefined,
): Fragment {
  const version = etagOf(rows.schema, "u");
  return sql`unchanged as (
    select *, ${constant(sql, version)} as etag from ${constant(sql, rows.table)} u
    where ${where} ${ifMatch(sql, version, etag)}
      and not ${differences(sql, "u", changes, columns)}
  )`;
}

/**
 * Deletes the one row that `where` finds, when `write.etag` is absent or is the row's, with its
 * `deleted` event (the row as it was) and `leaves`, a statement over the deleted row `gone` (the
 * tombstone that keeps a list cursor naming it valid); true when a row was deleted, false when
 * there is none or the etag is not its (the caller tells the two apart). `also`: more CTEs over
 * `gone` (what the delete takes along, with their events). In a transaction, pass its `run` and
 * the pool as `sql`.
 */
export async function deleteAudited(
  sql: Sql,
  rows: AuditedRows,
  where: Fragment,
  leaves: Fragment,
  write: Write,
  resource: string | Fragment,
  run: Sql = sql,
  also?: Fragment,
): Promise<boolean> {
  const deleted = await run`
    with gone as (
      delete from ${constant(sql, rows.table)}
      where ${where} ${ifMatch(sql, etagOf(rows.schema), write.etag)}
      returning *
    ),
    tombstone as (${leaves}),
    ${also === undefined ? constant(sql, "") : sql`${also},`}
    ${rowEvent(sql, rows, write.audit, resource, "gone", "gone", "gone", null)}
    select id from gone`;
  return deleted.length > 0;
}
