/**
 * The `oauth.configs` table: one consent-screen configuration per project.
 *
 * @module
 */

import type { Sql } from "../../../lib/db/mod.ts";

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
  /** Changes the given columns; returns undefined when the project has no configuration. */
  update(projectId: string, changes: ConfigChanges): Promise<ConfigRow | undefined>;
  /**
   * Creates the configuration with `changes` over the defaults, or, if it exists (also when
   * another request creates it concurrently), changes only the given columns.
   */
  upsert(
    projectId: string,
    changes: ConfigChanges & { application_name: string },
  ): Promise<ConfigRow>;
}

/** Creates the repository over a pool. */
export function createConfigRepository(sql: Sql): ConfigRepository {
  /** The changes as columns take them: `scopes` as JSON (an array would be a Postgres array). */
  const stored = (changes: ConfigChanges): ConfigChanges =>
    changes.scopes === undefined ? changes : {
      ...changes,
      scopes: sql.json(changes.scopes as never) as unknown as ScopeRow[],
    };
  return {
    async get(projectId) {
      const [row] = await sql<ConfigRow[]>`
        select * from oauth.configs where project_id = ${projectId}`;
      return row;
    },
    async update(projectId, changes) {
      const columns = Object.keys(changes) as (keyof ConfigChanges)[];
      const [row] = columns.length === 0
        ? await sql<ConfigRow[]>`select * from oauth.configs where project_id = ${projectId}`
        : await sql<ConfigRow[]>`
            update oauth.configs set ${sql(stored(changes), columns)}, updated_at = now()
            where project_id = ${projectId}
            returning *`;
      return row;
    },
    async upsert(projectId, changes) {
      const columns = Object.keys(changes) as (keyof ConfigChanges)[];
      const values = { audience: "external", ...stored(changes), project_id: projectId };
      const [row] = await sql<ConfigRow[]>`
        insert into oauth.configs ${sql(values as never)}
        on conflict (project_id) do update set ${sql(stored(changes), columns)}, updated_at = now()
        returning *`;
      return row!;
    },
  };
}
