/**
 * The `core.units` table.
 *
 * @module
 */

import type { Sql } from "../../../lib/db/mod.ts";
import { uuidTime } from "../../../lib/platform/mod.ts";
import { isTombstone } from "./tombstones.ts";

/** A row of core.units. */
export interface UnitRow {
  id: string;
  space: string;
  journey_id: string;
  originator: string;
  title: string;
  assignee: string | null;
  status: string;
  priority: string;
  description: string | null;
  due_at: Date | null;
  created_at: Date;
  updated_at: Date;
}

/** The columns a caller sets (create and replace). */
export type UnitFields = Pick<
  UnitRow,
  "journey_id" | "title" | "assignee" | "status" | "priority" | "description" | "due_at"
>;

/** Filters of a unit list. */
export interface UnitFilter {
  /** Only units in this status. */
  status?: string | undefined;
  /** Only units assigned to this identifier. */
  assignee?: string | undefined;
}

/** Reads and writes core.units. */
export interface UnitRepository {
  /** Inserts a unit; throws Postgres 23503 when its journey was deleted meanwhile. */
  create(unit: UnitFields & { id: string; space: string; originator: string }): Promise<UnitRow>;
  /** Returns the space's unit, or undefined. */
  get(space: string, id: string): Promise<UnitRow | undefined>;
  /** Returns up to `limit` + 1 units of the journey after the cursor, in id order. */
  list(
    journeyId: string,
    filter: UnitFilter,
    limit: number,
    after: string | undefined,
  ): Promise<UnitRow[]>;
  /** Whether the id names a unit of the journey, present or deleted. */
  isCursor(journeyId: string, id: string): Promise<boolean>;
  /** Replaces the caller-set columns; undefined when there is no such unit. */
  replace(space: string, id: string, unit: UnitFields): Promise<UnitRow | undefined>;
  /** Deletes a unit; false when there was none. */
  delete(space: string, id: string): Promise<boolean>;
}

/** Creates the repository over a pool. */
export function createUnitRepository(sql: Sql): UnitRepository {
  return {
    async create(unit) {
      const at = uuidTime(unit.id); // creation time in id order
      const [row] = await sql<UnitRow[]>`
        insert into core.units ${sql({ ...unit, created_at: at, updated_at: at })}
        returning *`;
      return row!;
    },
    async get(space, id) {
      const [row] = await sql<UnitRow[]>`
        select * from core.units where id = ${id} and space = ${space}`;
      return row;
    },
    async list(journeyId, filter, limit, after) {
      return await sql<UnitRow[]>`
        select * from core.units
        where journey_id = ${journeyId}
          ${filter.status === undefined ? sql`` : sql`and status = ${filter.status}`}
          ${filter.assignee === undefined ? sql`` : sql`and assignee = ${filter.assignee}`}
          ${after === undefined ? sql`` : sql`and id > ${after}`}
        order by id
        limit ${limit + 1}`;
    },
    async isCursor(journeyId, id) {
      const [row] = await sql<{ found: boolean }[]>`
        select exists (select 1 from core.units where id = ${id} and journey_id = ${journeyId}) as found`;
      return row!.found || await isTombstone(sql, "unit", id, journeyId);
    },
    async replace(space, id, unit) {
      const [row] = await sql<UnitRow[]>`
        update core.units set ${sql(unit)}, updated_at = greatest(now(), created_at)
        where id = ${id} and space = ${space}
        returning *`;
      return row;
    },
    async delete(space, id) {
      const rows = await sql`
        with gone as (
          delete from core.units where id = ${id} and space = ${space} returning id, journey_id
        )
        insert into core.tombstones (id, kind, space, list_key)
        select id, 'unit', ${space}, journey_id::text from gone
        returning id`;
      return rows.length > 0;
    },
  };
}
