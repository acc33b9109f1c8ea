/**
 * The `oauth.clients` table, and `oauth.deleted_clients`, which remembers deleted ids so that a
 * page cursor naming one stays valid.
 *
 * @module
 */

import {
  type AuditContext,
  type AuditedRows,
  changes,
  constant,
  deleteAudited,
  eventCte,
  type Fragment,
  insertAudited,
  rowJson,
  updateAudited,
  type Write,
} from "../../../lib/audit/mod.ts";
import { secretShown } from "./client_secrets.ts";
import { keyShown } from "./client_keys.ts";
import { ids } from "../ids.ts";
import type { Sql } from "../../../lib/db/mod.ts";
import { uuidTime } from "../../../lib/platform/mod.ts";
import { etagMismatch } from "../../../lib/resource/mod.ts";

/** A row of oauth.clients. */
export interface ClientRow {
  id: string;
  project_id: string;
  name: string;
  type: string;
  redirect_uris: string[];
  javascript_origins: string[];
  status: string;
  created_at: Date;
  updated_at: Date;
  /** `client_secret_basic`, `client_secret_post`, `private_key_jwt` (web) or `none` (spa, native). */
  token_endpoint_auth_method: string;
  dpop_bound_access_tokens: boolean;
  require_pushed_authorization_requests: boolean;
  /** The row's version (lib/resource/etag.ts). */
  etag: string;
}

/**
 * What an event shows of a client: its settings; not its ids (in the resource name), project,
 * timestamps, nor its origin keys (internal).
 */
export const clientShown = [
  "name",
  "type",
  "redirect_uris",
  "javascript_origins",
  "status",
  "token_endpoint_auth_method",
  "dpop_bound_access_tokens",
  "require_pushed_authorization_requests",
] as const;

/** How its rows are named in events. */
const audited: AuditedRows = {
  table: "oauth.clients",
  schema: "oauth",
  shown: clientShown,
  parent: (sql, r) => sql`${r}.project_id`,
};

/** A client's resource name, from its project and stored id. */
const clientName = (projectId: string, id: string) =>
  `projects/${projectId}/clients/${ids.client.fromUuid(id)}`;

/**
 * The columns set when a client is created. Without a token_endpoint_auth_method, the table gives
 * the type's default (migrations/0006_client_keys.sql); dpop_bound_access_tokens and
 * require_pushed_authorization_requests default to false.
 */
export type NewClient =
  & Pick<ClientRow, "id" | "project_id" | "name" | "type" | "redirect_uris" | "javascript_origins">
  & Partial<
    Pick<
      ClientRow,
      | "token_endpoint_auth_method"
      | "dpop_bound_access_tokens"
      | "require_pushed_authorization_requests"
    >
  >;

/** The columns a caller may change. */
export type ClientChanges = Partial<
  Pick<
    ClientRow,
    | "name"
    | "redirect_uris"
    | "javascript_origins"
    | "status"
    | "token_endpoint_auth_method"
    | "dpop_bound_access_tokens"
    | "require_pushed_authorization_requests"
  >
>;

/**
 * The CTEs that delete the secrets (`secrets_gone`) or the keys (`keys_gone`) of the client that
 * the statement's CTE `gone` deletes, named `client`,
 * with one event each (`<cte>_events`), as their own deletion would write it: the foreign key's
 * cascade would delete them too, and leave no trace of them in the trail. The statement must start
 * under the client's row lock, which creations take: then it sees every credential there is.
 */
function cascadedCredentials(
  sql: Sql,
  audit: AuditContext,
  projectId: string,
  client: string,
  cte: "secrets_gone" | "keys_gone",
): Fragment {
  const [table, prefix, shown, collection] = cte === "secrets_gone"
    ? ["oauth.client_secrets", "sec", secretShown, "secrets"] as const
    : ["oauth.client_keys", "key", keyShown, "keys"] as const;
  return sql`${constant(sql, cte)} as (
      delete from ${constant(sql, table)} where client_id in (select id from gone) returning *
    ),
    ${
    eventCte(sql, "oauth", audit, {
      parent: projectId,
      // The credential's TypeID, made by PL/pgSQL: a delete is not a hot path.
      resource: sql`${`${client}/${collection}/`} || oauth.type_id(${prefix}, ${
        constant(sql, cte)
      }.id)`,
      from: constant(sql, cte),
      changes: changes(sql, rowJson(sql, cte, shown), null),
    }, `${cte}_events`)
  }`;
}

/** Reads and writes oauth.clients. */
export interface ClientRepository {
  /** Inserts a client; throws the Postgres error 23503 when the project has no configuration. */
  create(client: NewClient, write: Write): Promise<ClientRow>;
  /** Returns the project's client, or undefined. */
  get(projectId: string, id: string): Promise<ClientRow | undefined>;
  /** Returns the client of that id in any project, or undefined (for a token service). */
  find(id: string): Promise<ClientRow | undefined>;
  /** Returns up to `limit` + 1 clients of the project after the cursor id, in id order. */
  list(projectId: string, limit: number, after: string | undefined): Promise<ClientRow[]>;
  /** Whether the id names a client of the project, present or deleted. */
  isCursor(projectId: string, id: string): Promise<boolean>;
  /**
   * Changes the given columns; returns undefined when there is no such client, throws ABORTED
   * when `write.etag` is not the client's.
   */
  update(
    projectId: string,
    id: string,
    changes: ClientChanges,
    write: Write,
  ): Promise<ClientRow | undefined>;
  /**
   * Deletes a client, and its secrets and keys with it, each with its own event (of the same call)
   * as if deleted on its own; returns false when there was none, throws ABORTED when `write.etag`
   * is not the client's.
   */
  delete(projectId: string, id: string, write: Write): Promise<boolean>;
  /**
   * Whether an active client registers a JavaScript origin, compared as browsers send it
   * (migrations/0003_origin_keys.sql): a client of `projectId` when given, and of the projects
   * `projects` lists unless it is `*`.
   */
  registersOrigin(
    origin: string,
    scope: { projectId?: string | undefined; projects: ReadonlySet<string> | "*" },
  ): Promise<boolean>;
}

/** Creates the repository over a pool. */
export function createClientRepository(sql: Sql): ClientRepository {
  return {
    async create(client, write) {
      const at = uuidTime(client.id); // creation time in id order
      const name = clientName(client.project_id, client.id);
      return (await insertAudited<ClientRow>(sql, audited, client, at, write.audit, name))!;
    },
    async get(projectId, id) {
      const [row] = await sql<ClientRow[]>`
        select *, oauth.etag(xmin) as etag from oauth.clients
        where id = ${id} and project_id = ${projectId}`;
      return row;
    },
    async find(id) {
      const [row] = await sql<ClientRow[]>`
        select *, oauth.etag(xmin) as etag from oauth.clients where id = ${id}`;
      return row;
    },
    async list(projectId, limit, after) {
      return await sql<ClientRow[]>`
        select *, oauth.etag(xmin) as etag from oauth.clients
        where project_id = ${projectId} ${after === undefined ? sql`` : sql`and id > ${after}`}
        order by id
        limit ${limit + 1}`;
    },
    async isCursor(projectId, id) {
      const [row] = await sql<{ found: boolean }[]>`
        select exists (select 1 from oauth.clients where id = ${id} and project_id = ${projectId})
          or exists (select 1 from oauth.deleted_clients where id = ${id} and project_id = ${projectId})
          as found`;
      return row!.found;
    },
    async update(projectId, id, changes, write) {
      const columns = Object.keys(changes);
      const row = columns.length === 0
        ? await this.get(projectId, id)
        : await updateAudited<ClientRow, ClientChanges>(
          sql,
          audited,
          sql`id = ${id} and project_id = ${projectId}`,
          changes,
          write,
          clientName(projectId, id),
        );
      if (row && write.etag !== undefined && row.etag !== write.etag && columns.length === 0) {
        throw etagMismatch("client");
      }
      if (!row && write.etag !== undefined && await this.get(projectId, id)) {
        throw etagMismatch("client");
      }
      return row;
    },
    async delete(projectId, id, write) {
      return await sql.begin(async (tx) => {
        // Locked first, as a secret's or key's creation locks it: the delete's statement starts
        // after, so it sees (and records) every credential the client has.
        const [row] = await tx<{ etag: string }[]>`
          select oauth.etag(xmin) as etag from oauth.clients
          where id = ${id} and project_id = ${projectId}
          for update`;
        if (!row) return false;
        if (write.etag !== undefined && row.etag !== write.etag) throw etagMismatch("client");
        const name = clientName(projectId, id);
        return await deleteAudited(
          sql,
          audited,
          sql`id = ${id} and project_id = ${projectId}`,
          sql`insert into oauth.deleted_clients (id, project_id) select id, project_id from gone`,
          { ...write, etag: undefined }, // checked above, under the lock
          name,
          tx as unknown as Sql,
          sql`${cascadedCredentials(sql, write.audit, projectId, name, "secrets_gone")},
            ${cascadedCredentials(sql, write.audit, projectId, name, "keys_gone")}`,
        );
      });
    },
    async registersOrigin(origin, { projectId, projects }) {
      const [row] = await sql<{ found: boolean }[]>`
        select exists (
          select 1 from oauth.clients
          where origin_keys @> array[${origin}]::text[] and status = 'active'
          ${projectId === undefined ? sql`` : sql`and project_id = ${projectId}`}
          ${projects === "*" ? sql`` : sql`and project_id = any(${[...projects]})`}
        ) as found`;
      return row!.found;
    },
  };
}
