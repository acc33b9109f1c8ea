/**
 * The `core.units` table.
 *
 * @module
 */

import {
  type AuditedRows,
  deleteAudited,
  insertAudited,
  updateAudited,
  type Write,
} from "../../../lib/audit/mod.ts";
import { ids } from "../ids.ts";
import type { Sql } from "../../../lib/db/mod.ts";
import { uuidTime } from "../../../lib/platform/mod.ts";
import { etagMismatch } from "../../../lib/resource/mod.ts";

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
  /** The row's version (lib/resource/etag.ts). */
  etag: string;
}

/** The columns a caller sets (create and replace). */
export type UnitFields = Pick<
  UnitRow,
  "journey_id" | "title" | "assignee" | "status" | "priority" | "description" | "due_at"
>;

/**
 * What an event shows of a unit: its fields; not its ids (in the resource name), the space or the
 * timestamps.
 */
export const unitShown = [
  "journey_id",
  "originator",
  "title",
  "assignee",
  "status",
  "priority",
  "description",
  "due_at",
] as const;

/** How its rows are named in events. */
const audited: AuditedRows = {
  table: "core.units",
  schema: "core",
  shown: unitShown,
  parent: (sql, r) => sql`${r}.space`,
};

/** A unit's resource name, from its space and stored ids. */
const unitName = (space: string, journeyId: string, id: string) =>
  `spaces/${space}/journeys/${ids.journey.fromUuid(journeyId)}/units/${ids.unit.fromUuid(id)}`;

/** Filters of a unit list. */
export interface UnitFilter {
  /** Only units in this status. */
  status?: string | undefined;
  /** Only units assigned to this identifier. */
  assignee?: string | undefined;
}

/** Reads and writes core.units. */
export interface UnitRepository {
  /**
   * Inserts a unit into its journey; undefined when the space has no such journey (checked by the
   * insert itself, in the same round trip).
   */
  create(
    unit: UnitFields & { id: string; space: string; originator: string },
    write: Write,
  ): Promise<UnitRow | undefined>;
  /** Returns the space's unit, or undefined. */
  get(space: string, id: string): Promise<UnitRow | undefined>;
  /** Returns the unit, whatever its space (../unit_cache.ts keeps it by id, with its space). */
  find(id: string): Promise<UnitRow | undefined>;
  /** Returns up to `limit` + 1 units of the journey after the cursor, in id order. */
  list(
    journeyId: string,
    filter: UnitFilter,
    limit: number,
    after: string | undefined,
  ): Promise<UnitRow[]>;
  /**
   * Whether the id names a unit of the journey's space, present or deleted, in this journey or
   * another: a position in the journey's list.
   */
  isCursor(journeyId: string, id: string): Promise<boolean>;
  /**
   * Replaces the caller-set columns; undefined when there is no such unit, throws ABORTED when
   * `write.etag` is not the unit's.
   */
  replace(space: string, id: string, unit: UnitFields, write: Write): Promise<UnitRow | undefined>;
  /** Deletes a unit; false when there was none, throws ABORTED when `write.etag` is not the unit's. */
  delete(space: string, id: string, write: Write): Promise<boolean>;
}

/** Creates the repository over a pool. */
export function createUnitRepository(sql: Sql): UnitRepository {
  const repo: UnitRepository = {
    async create(unit, write) {
      const at = uuidTime(unit.id); // creation time in id order
      // The journey is looked up by the insert: one of another space, or none, leaves the column
      // null, which it refuses (23502), and a journey deleted meanwhile fails the foreign key
      // (23503). Reading the journey first cost a round trip.
      const journey = sql`(
        select id from core.journeys where id = ${unit.journey_id} and space = ${unit.space}
      )`;
      const name = unitName(unit.space, unit.journey_id, unit.id);
      try {
        const values = { ...unit, journey_id: journey };
        return await insertAudited<UnitRow>(sql, audited, values, at, write.audit, name);
      } catch (error) {
        const { code, column_name } = error as { code?: string; column_name?: string };
        if ((code === "23502" && column_name === "journey_id") || code === "23503") {
          return undefined;
        }
        throw error;
      }
    },
    async get(space, id) {
      const [row] = await sql<UnitRow[]>`
        select *, core.etag(xmin) as etag from core.units where id = ${id} and space = ${space}`;
      return row;
    },
    async find(id) {
      const [row] = await sql<UnitRow[]>`
        select *, core.etag(xmin) as etag from core.units where id = ${id}`;
      return row;
    },
    async list(journeyId, filter, limit, after) {
      return await sql<UnitRow[]>`
        select *, core.etag(xmin) as etag from core.units
        where journey_id = ${journeyId}
          ${filter.status === undefined ? sql`` : sql`and status = ${filter.status}`}
          ${filter.assignee === undefined ? sql`` : sql`and assignee = ${filter.assignee}`}
          ${after === undefined ? sql`` : sql`and id > ${after}`}
        order by id
        limit ${limit + 1}`;
    },
    async isCursor(journeyId, id) {
      // The list is keyset by id, so any id is a position in it: a unit of the journey's space,
      // wherever it is now or was when deleted, is accepted. A unit that moved to another journey
      // (which leaves no tombstone here) must not stop a client paging through this one, as a
      // deleted one does not; another space's stays refused, as an id that names nothing.
      const [row] = await sql<{ found: boolean }[]>`
        select exists (
          select 1 from core.journeys j
          where j.id = ${journeyId} and (
            exists (select 1 from core.units u where u.id = ${id} and u.space = j.space)
            or exists (
              select 1 from core.tombstones t
              where t.id = ${id} and t.kind = 'unit' and t.space = j.space
            )
          )
        ) as found`;
      return row!.found;
    },
    async replace(space, id, unit, write) {
      const row = await updateAudited<UnitRow, UnitFields>(
        sql,
        audited,
        sql`id = ${id} and space = ${space}`,
        unit,
        write,
        unitName(space, unit.journey_id, id),
      );
      if (!row && write.etag !== undefined && await repo.get(space, id)) {
        throw etagMismatch("unit");
      }
      return row;
    },
    async delete(space, id, write) {
      const deleted = await deleteAudited(
        sql,
        audited,
        sql`id = ${id} and space = ${space}`,
        sql`insert into core.tombstones (id, kind, space, list_key)
          select id, 'unit', space, journey_id::text from gone`,
        write,
        // The journey is the row's: only Postgres has it, and a delete is not a hot path.
        sql`'spaces/' || gone.space || '/journeys/' || core.type_id('journey', gone.journey_id)
            || ${"/units/" + ids.unit.fromUuid(id)}`,
      );
      if (!deleted && write.etag !== undefined && await repo.get(space, id)) {
        throw etagMismatch("unit");
      }
      return deleted;
    },
  };
  return repo;
}
