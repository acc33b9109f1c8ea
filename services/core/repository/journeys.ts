/**
 * The `core.journeys` table.
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
import { isTombstone } from "./tombstones.ts";

/** A row of core.journeys. */
export interface JourneyRow {
  id: string;
  space: string;
  owner: string;
  parent_id: string | null;
  name: string;
  description: string;
  active: boolean;
  created_at: Date;
  updated_at: Date;
  /** The row's version (lib/resource/etag.ts). */
  etag: string;
}

/** The columns a caller sets (create and replace). */
export type JourneyFields = Pick<
  JourneyRow,
  "owner" | "parent_id" | "name" | "description" | "active"
>;

/** Why a journey could not be replaced or deleted. */
export type JourneyRefusal = "not_found" | "no_parent" | "cycle" | "has_children" | "has_units";

/**
 * What an event shows of a journey: its fields; not its ids (in the resource name), the space or
 * the timestamps.
 */
export const journeyShown = ["owner", "parent_id", "name", "description", "active"] as const;

/** How its rows are named in events. */
const audited: AuditedRows = {
  table: "core.journeys",
  schema: "core",
  shown: journeyShown,
  parent: (sql, r) => sql`${r}.space`,
};

/** A journey's resource name, from its space and stored id. */
const journeyName = (space: string, id: string) =>
  `spaces/${space}/journeys/${ids.journey.fromUuid(id)}`;

/** Filters of a journey list. */
export interface JourneyFilter {
  /** Only children of this journey. */
  parentId?: string | undefined;
  /** Only journeys with this active flag. */
  active?: boolean | undefined;
}

/** Reads and writes core.journeys. */
export interface JourneyRepository {
  /** Inserts a journey whose parent (if any) the caller has checked. */
  create(journey: JourneyFields & { id: string; space: string }, write: Write): Promise<JourneyRow>;
  /** Returns the space's journey, or undefined. */
  get(space: string, id: string): Promise<JourneyRow | undefined>;
  /** Returns up to `limit` + 1 journeys of the space after the cursor, in id order. */
  list(
    space: string,
    filter: JourneyFilter,
    limit: number,
    after: string | undefined,
  ): Promise<JourneyRow[]>;
  /** Whether the id names a journey of the space, present or deleted. */
  isCursor(space: string, id: string): Promise<boolean>;
  /**
   * Replaces the caller-set columns. The parent must be a journey of the space that does not
   * descend from this one; parent changes in a space are serialised, so two concurrent changes
   * cannot build a cycle together. Throws ABORTED when `write.etag` is not the journey's.
   */
  replace(
    space: string,
    id: string,
    journey: JourneyFields,
    write: Write,
  ): Promise<JourneyRow | JourneyRefusal>;
  /**
   * Deletes a journey that has no units and no children. Throws ABORTED when `write.etag` is not
   * the journey's.
   */
  delete(space: string, id: string, write: Write): Promise<true | JourneyRefusal>;
}

/** Creates the repository over a pool. */
export function createJourneyRepository(sql: Sql): JourneyRepository {
  return {
    async create(journey, write) {
      const at = uuidTime(journey.id); // creation time in id order
      const name = journeyName(journey.space, journey.id);
      return (await insertAudited<JourneyRow>(sql, audited, journey, at, write.audit, name))!;
    },
    async get(space, id) {
      const [row] = await sql<JourneyRow[]>`
        select *, core.etag(xmin) as etag from core.journeys where id = ${id} and space = ${space}`;
      return row;
    },
    async list(space, filter, limit, after) {
      return await sql<JourneyRow[]>`
        select *, core.etag(xmin) as etag from core.journeys
        where space = ${space}
          ${filter.parentId === undefined ? sql`` : sql`and parent_id = ${filter.parentId}`}
          ${filter.active === undefined ? sql`` : sql`and active = ${filter.active}`}
          ${after === undefined ? sql`` : sql`and id > ${after}`}
        order by id
        limit ${limit + 1}`;
    },
    async isCursor(space, id) {
      const [row] = await sql<{ found: boolean }[]>`
        select exists (select 1 from core.journeys where id = ${id} and space = ${space}) as found`;
      return row!.found || await isTombstone(sql, "journey", id, space);
    },
    async replace(space, id, journey, write) {
      return await sql.begin(async (tx) => {
        await tx`select pg_advisory_xact_lock(hashtext(${"core.journeys:" + space}))`;
        if (journey.parent_id !== null) {
          const [parent] = await tx<{ cycle: boolean }[]>`
            with recursive ancestors (id, parent_id) as (
              select id, parent_id from core.journeys where id = ${journey.parent_id} and space = ${space}
              union all
              select j.id, j.parent_id from core.journeys j join ancestors a on j.id = a.parent_id
            )
            select bool_or(id = ${id}) as cycle from ancestors having count(*) > 0`;
          if (!parent) return "no_parent" as const;
          if (parent.cycle) return "cycle" as const;
        }
        const row = await updateAudited<JourneyRow, JourneyFields>(
          sql,
          audited,
          sql`id = ${id} and space = ${space}`,
          journey,
          write,
          journeyName(space, id),
          tx as unknown as Sql,
        );
        if (row) return row;
        if (write.etag !== undefined) {
          const [found] =
            await tx`select 1 from core.journeys where id = ${id} and space = ${space}`;
          if (found) throw etagMismatch("journey");
        }
        return "not_found" as const;
      });
    },
    async delete(space, id, write) {
      return await sql.begin(async (tx) => {
        const [row] = await tx<{ children: boolean; units: boolean; etag: string }[]>`
          select
            exists (select 1 from core.journeys c where c.parent_id = j.id) as children,
            exists (select 1 from core.units u where u.journey_id = j.id) as units,
            core.etag(j.xmin) as etag
          from core.journeys j
          where j.id = ${id} and j.space = ${space}
          for update`;
        if (!row) return "not_found" as const;
        // Locked: the version read is the one the delete removes.
        if (write.etag !== undefined && row.etag !== write.etag) throw etagMismatch("journey");
        if (row.children) return "has_children" as const;
        if (row.units) return "has_units" as const;
        await deleteAudited(
          sql,
          audited,
          sql`id = ${id} and space = ${space}`,
          sql`insert into core.tombstones (id, kind, space, list_key)
            select id, 'journey', space, space from gone`,
          { ...write, etag: undefined }, // checked above, under the lock
          journeyName(space, id),
          tx as unknown as Sql,
        );
        return true as const;
      });
    },
  };
}
