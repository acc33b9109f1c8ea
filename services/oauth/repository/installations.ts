/**
 * The `oauth.installations` table: accounts' consent for projects.
 *
 * @module
 */

import type { Sql } from "../../../lib/db/mod.ts";
import { uuidTime } from "../../../lib/platform/mod.ts";

/** A row of oauth.installations. */
export interface InstallationRow {
  id: string;
  project_id: string;
  account_id: string;
  principal_id: string | null;
  application_name: string;
  scopes: string[];
  status: string;
  authorized_by_id: string;
  authorized_at: Date;
  created_at: Date;
  revoked_at: Date | null;
}

/** The consent being recorded. */
export interface Consent {
  id: string;
  project_id: string;
  account_id: string;
  principal_id: string;
  application_name: string;
  scopes: string[];
  authorized_by_id: string;
}

/** Reads and writes oauth.installations. */
export interface InstallationRepository {
  /**
   * Creates an active installation, or updates the live one of the same project and account:
   * adds the scopes it does not hold yet after those it holds (the union, never removing one),
   * and sets the application name, who and when; its id and principal stay. Safe under
   * concurrency: a partial unique index admits one live installation per (project, account).
   * Throws Postgres's check violation (23514) when the union would exceed 100 scopes.
   */
  consent(consent: Consent): Promise<InstallationRow>;
  /** Returns the account's installation, or undefined. */
  get(accountId: string, id: string): Promise<InstallationRow | undefined>;
  /** Returns the project's installation, whoever's account it is in, or undefined. */
  getInProject(projectId: string, id: string): Promise<InstallationRow | undefined>;
  /** Returns up to `limit` + 1 installations of the account after the cursor id, in id order. */
  list(accountId: string, limit: number, after: string | undefined): Promise<InstallationRow[]>;
  /** Revokes the account's installation; returns false when there is no such installation. */
  revoke(accountId: string, id: string): Promise<boolean>;
}

/** Creates the repository over a pool. */
export function createInstallationRepository(sql: Sql): InstallationRepository {
  return {
    async consent(consent) {
      const at = uuidTime(consent.id); // creation time in id order
      const [row] = await sql<InstallationRow[]>`
        insert into oauth.installations ${
        sql({ ...consent, status: "active", created_at: at, authorized_at: at })
      }
        on conflict (project_id, account_id) where status <> 'revoked' do update set
          scopes = installations.scopes || array(
            select s from unnest(excluded.scopes) with ordinality as given(s, i)
            where s <> all(installations.scopes)
            order by i
          ),
          application_name = excluded.application_name,
          authorized_by_id = excluded.authorized_by_id,
          authorized_at = now()
        returning *`;
      return row!;
    },
    async get(accountId, id) {
      const [row] = await sql<InstallationRow[]>`
        select * from oauth.installations where id = ${id} and account_id = ${accountId}`;
      return row;
    },
    async getInProject(projectId, id) {
      const [row] = await sql<InstallationRow[]>`
        select * from oauth.installations where id = ${id} and project_id = ${projectId}`;
      return row;
    },
    async list(accountId, limit, after) {
      return await sql<InstallationRow[]>`
        select * from oauth.installations
        where account_id = ${accountId} ${after === undefined ? sql`` : sql`and id > ${after}`}
        order by id
        limit ${limit + 1}`;
    },
    async revoke(accountId, id) {
      const [row] = await sql<{ id: string }[]>`
        with revoked as (
          update oauth.installations set status = 'revoked', revoked_at = now()
          where id = ${id} and account_id = ${accountId} and status <> 'revoked'
          returning id
        )
        select id from revoked
        union all
        select id from oauth.installations where id = ${id} and account_id = ${accountId}
        limit 1`;
      return row !== undefined;
    },
  };
}
