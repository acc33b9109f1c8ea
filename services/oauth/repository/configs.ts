/**
 * The `oauth.configs` table: one consent-screen configuration per project.
 *
 * @module
 */

import {
  changes as diff,
  eventCte,
  ifMatch,
  rowJson,
  unchangedRow,
  type Write,
} from "../../../lib/audit/mod.ts";
import { assignments, differences, insertion, type Sql } from "../../../lib/db/mod.ts";
import { etagMismatch, preconditionFailed } from "../../../lib/resource/mod.ts";
import type { ConnectError } from "@connectrpc/connect";

/** One declared scope, as the `scopes` jsonb column holds it. */
export interface ScopeRow {
  name: string;
  description: string;
  sensitive: boolean;
}

/** A row of oauth.configs. */
export interface ConfigRow {
  project_id: string;
  application_name: string;
  support_email: string | null;
  logo_uri: string | null;
  homepage_uri: string | null;
  privacy_policy_uri: string | null;
  terms_of_service_uri: string | null;
  authorized_domains: string[];
  audience: string;
  publishing_status: string;
  secret_max_lifetime_seconds: number;
  /** The declared scopes (0007), in the order given; empty: none declared. */
  scopes: ScopeRow[];
  created_at: Date;
  updated_at: Date;
  /** The row's version (lib/resource/etag.ts). */
  etag: string;
}

/** The columns a caller may change. */
export type ConfigChanges = Partial<
  Pick<
    ConfigRow,
    | "application_name"
    | "support_email"
    | "logo_uri"
    | "homepage_uri"
    | "privacy_policy_uri"
    | "terms_of_service_uri"
    | "authorized_domains"
    | "audience"
    | "secret_max_lifetime_seconds"
    | "scopes"
  >
>;

/** Reads and writes oauth.configs. */
export interface ConfigRepository {
  /** Returns the project's configuration, or undefined. */
  get(projectId: string): Promise<ConfigRow | undefined>;
  /**
   * Changes the given columns; returns undefined when the project has no configuration, throws
   * ABORTED when `write.etag` is not the configuration's (also when there is none: no version is
   * the one it names).
   */
  update(projectId: string, changes: ConfigChanges, write: Write): Promise<ConfigRow | undefined>;
  /**
   * Creates the configuration with `changes` over the defaults, or, if it exists (also when
   * another request creates it concurrently), changes only the given columns. Unconditional: a
   * write with an etag names a version that must exist, and is an {@link update}.
   */
  upsert(
    projectId: string,
    changes: ConfigChanges & { application_name: string },
    write: Write,
  ): Promise<ConfigRow>;
  /**
   * Creates the configuration with `changes` over the defaults; ABORTED when the project has one
   * (also when another request creates it concurrently: the insert is the check).
   */
  create(
    projectId: string,
    changes: ConfigChanges & { application_name: string },
    write: Write,
  ): Promise<ConfigRow>;
}

/**
 * What an event shows of a configuration: its settings; not the project (in the name) nor the
 * timestamps.
 */
export const configShown = [
  "application_name",
  "support_email",
  "logo_uri",
  "homepage_uri",
  "privacy_policy_uri",
  "terms_of_service_uri",
  "authorized_domains",
  "audience",
  "publishing_status",
  "secret_max_lifetime_seconds",
  "scopes",
] as const;

/** Creates the repository over a pool. */
export function createConfigRepository(sql: Sql): ConfigRepository {
  /** The changes as columns take them: `scopes` as JSON (an array would be a Postgres array). */
  const stored = (changes: ConfigChanges): ConfigChanges =>
    changes.scopes === undefined ? changes : {
      ...changes,
      scopes: sql.json(changes.scopes as never) as unknown as ScopeRow[],
    };
  /** The event of a change from `prior` (absent for a creation) to `changed`. */
  const event = (projectId: string, write: Write) =>
    eventCte(sql, "oauth", write.audit, {
      parent: projectId,
      resource: `projects/${projectId}/config`,
      from: sql`changed left join prior on true`,
      changes: diff(
        sql,
        sql`case when prior is null then null else ${rowJson(sql, "prior", configShown)} end`,
        rowJson(sql, "changed", configShown),
      ),
    });
  // Locked, so that `prior` is the version replaced, or, when the write would change nothing, the
  // version returned (the latest: a locking read waits for a concurrent writer and reads its row).
  // After `unchanged`, only when that found nothing.
  const prior = (projectId: string, afterUnchanged = false) =>
    sql`prior as (
      select *, oauth.etag(xmin) as etag from oauth.configs
      where project_id = ${projectId} ${
      afterUnchanged ? sql`and not exists (select from unchanged)` : sql``
    }
      for update
    )`;
  /** The configuration, when the write would change nothing: answered without the lock. */
  const unchanged = (
    projectId: string,
    changes: ConfigChanges,
    columns: (keyof ConfigChanges)[],
    etag: string | undefined,
  ) =>
    unchangedRow(
      sql,
      { table: "oauth.configs", schema: "oauth" },
      sql`project_id = ${projectId}`,
      stored(changes),
      columns,
      etag,
    );
  /**
   * The configuration written, or the one there when the write changed nothing (every column
   * given already held its value: no event, the etag and `updated_at` unchanged) and `etag`, if
   * any, is its.
   */
  const result = (etag: string | undefined) =>
    sql`select * from unchanged
      union all
      select * from changed
      union all
      select * from prior where not exists (select from changed) ${
      ifMatch(sql, "prior.etag", etag)
    }`;
  // A write dates its version by its statement's time, but never before the version it replaces:
  // one that began first and then waited for the row would otherwise date its version before the
  // one a later writer committed meanwhile (or, an upsert that found the row another request had
  // just created, before that creation).
  const repo: ConfigRepository = {
    async get(projectId) {
      const [row] = await sql<ConfigRow[]>`
        select *, oauth.etag(xmin) as etag from oauth.configs where project_id = ${projectId}`;
      return row;
    },
    async update(projectId, changes, write) {
      const columns = Object.keys(changes) as (keyof ConfigChanges)[];
      const [row] = columns.length === 0
        ? await repo.get(projectId).then((r) => r ? [r] : [])
        : await sql<ConfigRow[]>`
            with ${unchanged(projectId, changes, columns, write.etag)},
            ${prior(projectId, true)},
            changed as (
              update oauth.configs c set ${
          assignments(sql, stored(changes), columns)
        }, updated_at = greatest(now(), c.updated_at, c.created_at)
              from prior
              where c.project_id = prior.project_id ${ifMatch(sql, "prior.etag", write.etag)}
                and ${differences(sql, "c", stored(changes), columns)}
              returning c.*, oauth.etag(c.xmin) as etag
            ),
            ${event(projectId, write)}
            ${result(write.etag)}`;
      await stale(row, columns.length, projectId, write);
      return row;
    },
    async upsert(projectId, changes, write) {
      if (write.etag !== undefined) throw new Error("a conditional write of a config is an update");
      const columns = Object.keys(changes) as (keyof ConfigChanges)[];
      const values = { audience: "external", ...stored(changes), project_id: projectId };
      const [row] = await sql<ConfigRow[]>`
        with ${unchanged(projectId, changes, columns, undefined)},
        ${prior(projectId, true)},
        changed as (
          insert into oauth.configs ${insertion(sql, values, "select")}
          where not exists (select from unchanged)
          on conflict (project_id) do update set ${
        assignments(sql, stored(changes), columns)
      }, updated_at = greatest(now(), configs.updated_at, configs.created_at)
          where ${differences(sql, "configs", stored(changes), columns)}
          returning *, oauth.etag(xmin) as etag
        ),
        ${event(projectId, write)}
        ${result(undefined)}`;
      // None when another request created the configuration just now, as this one would have.
      return row ?? (await repo.get(projectId))!;
    },
    async create(projectId, changes, write) {
      const values = { audience: "external", ...stored(changes), project_id: projectId };
      // `prior` is empty whenever the insert takes place: the event is a creation's.
      const [row] = await sql<ConfigRow[]>`
        with ${prior(projectId)},
        changed as (
          insert into oauth.configs ${insertion(sql, values)}
          on conflict (project_id) do nothing
          returning *, oauth.etag(xmin) as etag
        ),
        ${event(projectId, write)}
        select * from changed`;
      if (!row) {
        throw preconditionFailed(
          `The project ${projectId} has an OAuth config already; create_only creates one only`,
        );
      }
      return row;
    },
  };
  /** ABORTED when a conditional write found the configuration at another version, or none. */
  async function stale(
    row: ConfigRow | undefined,
    columns: number,
    projectId: string,
    write: Write,
  ): Promise<void> {
    if (write.etag === undefined) return;
    if (row ? columns === 0 && row.etag !== write.etag : await repo.get(projectId)) {
      throw etagMismatch("OAuth config");
    }
    if (!row) throw noCurrentConfig(projectId);
  }
  return repo;
}

/**
 * ABORTED: a write conditional on a version of a project's config, when it has none. No etag is
 * its version (RFC 9110 13.1.1: If-Match is false without a current representation), and a
 * conditional write never creates.
 */
export function noCurrentConfig(projectId: string): ConnectError {
  return preconditionFailed(
    `The project ${projectId} has no OAuth config, so no etag is current; create it without one`,
  );
}
