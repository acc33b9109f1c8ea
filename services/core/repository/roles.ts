/**
 * The `core.roles` table.
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
  /** The row's version (lib/resource/etag.ts). */
  etag: string;
}

/** The columns a caller sets (create and replace). */
export type RoleFields = Pick<RoleRow, "name" | "description" | "resource_type" | "permissions">;

/**
 * What an event shows of a role: its fields; not its ids (in the resource name), the space or the
 * timestamps.
 */
export const roleShown = ["name", "description", "resource_type", "permissions"] as const;

/** How its rows are named in events. */
const audited: AuditedRows = {
  table: "core.roles",
  schema: "core",
  shown: roleShown,
  parent: (sql, r) => sql`${r}.space`,
};

/** A role's resource name, from its space and stored id. */
const roleName = (space: string, id: string) => `spaces/${space}/roles/${ids.role.fromUuid(id)}`;

/** Reads and writes core.roles. */
export interface RoleRepository {
  /** Inserts a role; throws Postgres 23505 when the name is taken for the resource type. */
  create(role: RoleFields & { id: string; space: string }, write: Write): Promise<RoleRow>;
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
  /**
   * Replaces the caller-set columns; undefined when there is no such role, throws ABORTED when
   * `write.etag` is not the role's.
   */
  replace(space: string, id: string, role: RoleFields, write: Write): Promise<RoleRow | undefined>;
  /** Deletes a role; false when there was none, throws ABORTED when `write.etag` is not the role's. */
  delete(space: string, id: string, write: Write): Promise<boolean>;
}

/** Creates the repository over a pool. */
export function createRoleRepository(sql: Sql): RoleRepository {
  const repo: RoleRepository = {
    async create(role, write) {
      const at = uuidTime(role.id); // creation time in id order
      const name = roleName(role.space, role.id);
      return (await insertAudited<RoleRow>(sql, audited, role, at, write.audit, name))!;
    },
    async get(space, id) {
      const [row] = await sql<RoleRow[]>`
        select *, core.etag(xmin) as etag from core.roles where id = ${id} and space = ${space}`;
      return row;
    },
    async list(space, resourceType, limit, after) {
      return await sql<RoleRow[]>`
        select *, core.etag(xmin) as etag from core.roles
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
    async replace(space, id, role, write) {
      const where = sql`id = ${id} and space = ${space}`;
      const row = await updateAudited<RoleRow, RoleFields>(
        sql,
        audited,
        where,
        role,
        write,
        roleName(space, id),
      );
      if (!row && write.etag !== undefined && await repo.get(space, id)) {
        throw etagMismatch("role");
      }
      return row;
    },
    async delete(space, id, write) {
      const deleted = await deleteAudited(
        sql,
        audited,
        sql`id = ${id} and space = ${space}`,
        sql`insert into core.tombstones (id, kind, space, list_key)
          select id, 'role', space, space from gone`,
        write,
        roleName(space, id),
      );
      if (!deleted && write.etag !== undefined && await repo.get(space, id)) {
        throw etagMismatch("role");
      }
      return deleted;
    },
  };
  return repo;
}
