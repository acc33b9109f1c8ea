/**
 * The `core.roles` table.
 *
 * @module
 */

import type { Sql } from "../../../lib/db/mod.ts";
import { uuidTime } from "../../../lib/platform/mod.ts";
import { isTombstone } from "./tombstones.ts";

/** A row of core.roles. */
export interface RoleRow {
  id: string;
  space: string;
  name: string;
  description: string | null;
  resource_type: string;
  permissions: string[];
  created_at: Date;
  updated_at: Date;
}

/** The columns a caller sets (create and replace). */
export type RoleFields = Pick<RoleRow, "name" | "description" | "resource_type" | "permissions">;

/** Reads and writes core.roles. */
export interface RoleRepository {
  /** Inserts a role; throws Postgres 23505 when the name is taken for the resource type. */
  create(role: RoleFields & { id: string; space: string }): Promise<RoleRow>;
  /** Returns the space's role, or undefined. */
  get(space: string, id: string): Promise<RoleRow | undefined>;
  /** Returns up to `limit` + 1 roles of the space after the cursor, in id order. */
  list(
    space: string,
    resourceType: string | undefined,
    limit: number,
    after: string | undefined,
  ): Promise<RoleRow[]>;
  /** Whether the id names a role of the space, present or deleted. */
  isCursor(space: string, id: string): Promise<boolean>;
  /** Replaces the caller-set columns; undefined when there is no such role. */
  replace(space: string, id: string, role: RoleFields): Promise<RoleRow | undefined>;
  /** Deletes a role; false when there was none. */
  delete(space: string, id: string): Promise<boolean>;
}

/** Creates the repository over a pool. */
export function createRoleRepository(sql: Sql): RoleRepository {
  return {
    async create(role) {
      const at = uuidTime(role.id); // creation time in id order
      const [row] = await sql<RoleRow[]>`
        insert into core.roles ${sql({ ...role, created_at: at, updated_at: at })}
        returning *`;
      return row!;
    },
    async get(space, id) {
      const [row] = await sql<RoleRow[]>`
        select * from core.roles where id = ${id} and space = ${space}`;
      return row;
    },
    async list(space, resourceType, limit, after) {
      return await sql<RoleRow[]>`
        select * from core.roles
        where space = ${space}
          ${resourceType === undefined ? sql`` : sql`and resource_type = ${resourceType}`}
          ${after === undefined ? sql`` : sql`and id > ${after}`}
        order by id
        limit ${limit + 1}`;
    },
    async isCursor(space, id) {
      const [row] = await sql<{ found: boolean }[]>`
        select exists (select 1 from core.roles where id = ${id} and space = ${space}) as found`;
      return row!.found || await isTombstone(sql, "role", id, space);
    },
    async replace(space, id, role) {
      const [row] = await sql<RoleRow[]>`
        update core.roles set ${sql(role)}, updated_at = greatest(now(), created_at)
        where id = ${id} and space = ${space}
        returning *`;
      return row;
    },
    async delete(space, id) {
      const rows = await sql`
        with gone as (delete from core.roles where id = ${id} and space = ${space} returning id)
        insert into core.tombstones (id, kind, space, list_key)
        select id, 'role', ${space}, ${space} from gone
        returning id`;
      return rows.length > 0;
    },
  };
}
