/**
 * The `oauth.installations` table: accounts' consent for projects.
 *
 * @module
 */

import {
  changes,
  columnsJson,
  constant,
  eventCte,
  type Fragment,
  ifMatch,
  perPool,
  rowJson,
  type Write,
} from "../../../lib/audit/mod.ts";
import { Code, ConnectError } from "@connectrpc/connect";
import { insertion, type Sql } from "../../../lib/db/mod.ts";
import { ids } from "../ids.ts";
import { uuidTime } from "../../../lib/platform/mod.ts";
import { etagMismatch } from "../../../lib/resource/mod.ts";

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
  /** The resource name, `projects/{project}/installations/{id}`. */
  name: string;
  /** The row's version (lib/resource/etag.ts). */
  etag: string;
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
   * Throws Postgres's check violation (23514) when the union would exceed 100 scopes, and ABORTED
   * when concurrent first consents kept taking the place (three tries).
   */
  consent(consent: Consent, write: Write): Promise<InstallationRow>;
  /** Returns the account's installation, or undefined. */
  get(accountId: string, id: string): Promise<InstallationRow | undefined>;
  /** Returns the project's installation, whoever's account it is in, or undefined. */
  getInProject(projectId: string, id: string): Promise<InstallationRow | undefined>;
  /** Returns up to `limit` + 1 installations of the account after the cursor id, in id order. */
  list(
    accountId: string,
    projectId: string | undefined,
    limit: number,
    after: string | undefined,
  ): Promise<InstallationRow[]>;
  /**
   * Revokes the account's installation; returns false when there is no such installation, throws
   * ABORTED when `write.etag` is not the installation's.
   */
  revoke(accountId: string, id: string, write: Write): Promise<boolean>;
}

/**
 * What an event shows of an installation: who consented to what, and its status; not its ids and
 * name (the resource name) nor its creation time.
 */
export const installationShown = [
  "account_id",
  "principal_id",
  "application_name",
  "scopes",
  "status",
  "authorized_by_id",
  "authorized_at",
  "revoked_at",
] as const;

/**
 * The parts of an installation's events that never change, made once per pool: a consent (from
 * `changed`, the row written, and `prior`, the one it replaced if any) and a revocation (from
 * `prior` to `changed`).
 */
const shapes = perPool((sql) => {
  // What a consent again and a revocation set (the statements below): their events keep these
  // columns before and after (lib/audit's columnsJson), a first consent the whole row.
  const consented = ["scopes", "application_name", "authorized_by_id", "authorized_at"];
  const revoked = ["status", "revoked_at"];
  return {
    consent: {
      from: constant(sql, "changed left join prior on true"),
      changes: changes(
        sql,
        sql`case when prior is null then null else ${columnsJson(sql, "prior", consented)} end`,
        sql`case when prior is null then ${rowJson(sql, "changed", installationShown)}
          else ${columnsJson(sql, "changed", consented)} end`,
      ),
    },
    revoke: {
      from: constant(sql, "prior, changed"),
      changes: changes(
        sql,
        columnsJson(sql, "prior", revoked),
        columnsJson(sql, "changed", revoked),
      ),
    },
  };
});

/** The event CTEs of a consent or a revocation (of the installation `changed`). */
function installationEvent(sql: Sql, write: Write, kind: "consent" | "revoke"): Fragment {
  return eventCte(sql, "oauth", write.audit, {
    parent: constant(sql, "changed.project_id"),
    resource: constant(sql, "changed.name"),
    ...shapes(sql)[kind],
  });
}

/** Creates the repository over a pool. */
export function createInstallationRepository(sql: Sql): InstallationRepository {
  return {
    async consent(consent, write) {
      const at = uuidTime(consent.id); // creation time in id order
      const name = `projects/${consent.project_id}/installations/${
        ids.installation.fromUuid(consent.id)
      }`;
      // The live installation is locked first, so the event's old values are the version this
      // consent replaces; it is updated, or a new one is inserted when there is none. A concurrent
      // first consent can insert one in between, which ours then leaves alone (only the one locked
      // is updated) and returns no row: the next try finds and updates it. A consent again (and a
      // revocation) is dated by its statement's time, but never before the consent it follows: one
      // that began first and then waited for the row would otherwise go back behind it.
      for (let attempt = 1;; attempt++) {
        const [row] = await sql<InstallationRow[]>`
          with prior as (
            select *, oauth.etag(xmin) as etag from oauth.installations
            where project_id = ${consent.project_id} and account_id = ${consent.account_id}
              and status <> 'revoked'
            for update
          ),
          changed as (
            insert into oauth.installations ${
          insertion(sql, { ...consent, name, status: "active", created_at: at, authorized_at: at })
        }
            on conflict (project_id, account_id) where status <> 'revoked' do update set
              scopes = installations.scopes || array(
                select s from unnest(excluded.scopes) with ordinality as given(s, k)
                where s <> all(installations.scopes)
                order by k
              ),
              application_name = excluded.application_name,
              authorized_by_id = excluded.authorized_by_id,
              authorized_at = greatest(now(), installations.authorized_at)
            where installations.id in (select id from prior)
            returning *, oauth.etag(xmin) as etag
          ),
          ${installationEvent(sql, write, "consent")}
          select * from changed`;
        if (row) return row;
        if (attempt === 3) {
          throw new ConnectError(
            "Concurrent consents for this project and account kept conflicting; try again",
            Code.Aborted,
          );
        }
      }
    },
    async get(accountId, id) {
      const [row] = await sql<InstallationRow[]>`
        select *, oauth.etag(xmin) as etag from oauth.installations where id = ${id} and account_id = ${accountId}`;
      return row;
    },
    async getInProject(projectId, id) {
      const [row] = await sql<InstallationRow[]>`
        select *, oauth.etag(xmin) as etag from oauth.installations where id = ${id} and project_id = ${projectId}`;
      return row;
    },
    async list(accountId, projectId, limit, after) {
      return await sql<InstallationRow[]>`
        select *, oauth.etag(xmin) as etag from oauth.installations
        where account_id = ${accountId}
          ${projectId === undefined ? sql`` : sql`and project_id = ${projectId}`}
          ${after === undefined ? sql`` : sql`and id > ${after}`}
        order by id
        limit ${limit + 1}`;
    },
    async revoke(accountId, id, write) {
      const [row] = await sql<{ id: string; etag: string; revoked: boolean }[]>`
        with prior as (
          select *, oauth.etag(xmin) as etag from oauth.installations
          where id = ${id} and account_id = ${accountId} and status <> 'revoked'
          for update
        ),
        changed as (
          update oauth.installations i set status = 'revoked',
            revoked_at = greatest(now(), i.authorized_at)
          from prior
          where i.id = prior.id ${ifMatch(sql, "prior.etag", write.etag)}
          returning i.*
        ),
        ${installationEvent(sql, write, "revoke")}
        select id, null as etag, true as revoked from changed
        union all
        select id, oauth.etag(xmin), false from oauth.installations
        where id = ${id} and account_id = ${accountId}
        limit 1`;
      // Revoking a revoked installation changes nothing and succeeds, but a condition is still
      // checked as for any write that changes nothing: a stale etag, or the one the gateway sends
      // for `If-None-Match: *` on a record that exists (RFC 9110 13.1.2), is ABORTED.
      if (row && !row.revoked && write.etag !== undefined && row.etag !== write.etag) {
        throw etagMismatch("installation");
      }
      return row !== undefined;
    },
  };
}
