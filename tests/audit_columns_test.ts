/**
 * What an audit event shows of a row is an allow-list (lib/audit/events.ts): each audited table's
 * repository lists the columns its events show. Here every column of every audited table, as the
 * migrations leave it, is classified: shown, or not shown and why. A migration that adds a column
 * fails this test until someone decides whether events show it; and no column named like a
 * credential is shown, but the few listed below with why they are not one. The token service's
 * events show no row: each lists its fields by hand (services/token/security_events.ts).
 *
 * @module
 */

import assert from "node:assert/strict";
import { connect, migrate, readMigrations } from "../lib/db/mod.ts";
import { createTestDatabase } from "../lib/testing/mod.ts";
import { clientShown } from "../services/oauth/repository/clients.ts";
import { secretShown } from "../services/oauth/repository/client_secrets.ts";
import { keyShown } from "../services/oauth/repository/client_keys.ts";
import { configShown } from "../services/oauth/repository/configs.ts";
import { installationShown } from "../services/oauth/repository/installations.ts";
import { journeyShown } from "../services/core/repository/journeys.ts";
import { roleShown } from "../services/core/repository/roles.ts";
import { unitShown } from "../services/core/repository/units.ts";

/**
 * Why an event does not show a column: the event's `resource` holds it (an id, a name), or its
 * `parent` (the project or space); it is a time of the write or of a use, which the event's own
 * `occurred_at` stands for; it is a credential or derived from one (a hash, a hint, the key a hash
 * is under); or it is internal, derived from other columns.
 */
type NotShown = "resource" | "parent" | "time" | "credential" | "internal";

/** What a space's resource does not show: the columns every core table has besides its fields. */
const inSpace: Record<string, NotShown> = {
  id: "resource",
  space: "parent",
  created_at: "time",
  updated_at: "time",
};

/** Every audited table: the columns its events show, and why the others are not shown. */
const audited: Record<string, { shown: readonly string[]; notShown: Record<string, NotShown> }> = {
  "oauth.configs": {
    shown: configShown,
    notShown: { project_id: "parent", created_at: "time", updated_at: "time" },
  },
  "oauth.clients": {
    shown: clientShown,
    notShown: {
      id: "resource",
      project_id: "parent",
      created_at: "time",
      updated_at: "time",
      origin_keys: "internal",
    },
  },
  "oauth.client_secrets": {
    shown: secretShown,
    notShown: {
      id: "resource",
      client_id: "resource",
      secret_hash: "credential",
      secret_hint: "credential",
      hash_key_id: "credential",
      created_at: "time",
      last_used_at: "time",
    },
  },
  "oauth.client_keys": {
    shown: keyShown,
    notShown: { id: "resource", client_id: "resource", created_at: "time", last_used_at: "time" },
  },
  "oauth.installations": {
    shown: installationShown,
    notShown: { id: "resource", name: "resource", project_id: "parent", created_at: "time" },
  },
  "core.journeys": {
    shown: journeyShown,
    notShown: inSpace,
  },
  "core.roles": {
    shown: roleShown,
    notShown: inSpace,
  },
  "core.units": {
    shown: unitShown,
    notShown: inSpace,
  },
};

/** A column name that suggests a credential or key material. */
const credentialLike =
  /hash|seal|secret|private|passw|token|code|verifier|challenge|jti|nonce|salt|key|jwk|pem/;

/** The shown columns whose names look like a credential's, with why each is not one. */
const notCredentials: Record<string, string> = {
  "oauth.clients.token_endpoint_auth_method": "how the client authenticates, not a token",
  "oauth.clients.dpop_bound_access_tokens": "a setting (a boolean), not a token",
  "oauth.configs.secret_max_lifetime_seconds": "a setting (how long a secret may live), no secret",
  "oauth.client_keys.jwk": "the public key: the table refuses a JWK with a private member",
};

Deno.test("every column of an audited table is shown by events or classified not shown, and no credential is shown", async () => {
  const db = await createTestDatabase();
  const sql = connect(db.url, { applicationName: "test" });
  try {
    for (const schema of ["oauth", "core"]) {
      const dir = new URL(`../services/${schema}/migrations/`, import.meta.url);
      await migrate(sql, schema, await readMigrations(dir));
    }
    const problems: string[] = [];
    for (const [table, { shown, notShown }] of Object.entries(audited)) {
      const [schema, name] = table.split(".");
      const columns = (await sql<{ column_name: string }[]>`
        select column_name from information_schema.columns
        where table_schema = ${schema!} and table_name = ${name!}
        order by ordinal_position`).map((c) => c.column_name);
      assert.ok(columns.length > 0, `${table} has columns`);
      for (const column of columns) {
        const isShown = shown.includes(column);
        if (isShown && column in notShown) problems.push(`${table}.${column}: shown and not shown`);
        if (!isShown && !(column in notShown)) {
          problems.push(`${table}.${column}: neither shown nor classified not shown`);
        }
        if (isShown && credentialLike.test(column) && !(`${table}.${column}` in notCredentials)) {
          problems.push(`${table}.${column}: shown, and named like a credential`);
        }
      }
      for (const column of [...shown, ...Object.keys(notShown)]) {
        if (!columns.includes(column)) problems.push(`${table}.${column}: listed, but no column`);
      }
    }
    for (const column of Object.keys(notCredentials)) {
      const [schema, name, col] = column.split(".");
      if (!audited[`${schema}.${name}`]?.shown.includes(col!)) {
        problems.push(`${column}: vouched for as no credential, but not shown`);
      }
    }
    assert.deepEqual(problems, []);
  } finally {
    await sql.end();
    await db.drop();
  }
});
