/**
 * The owners' triggers notify every change to what followers keep in memory, whatever the SQL
 * that makes it (not only the API's own statements): an operator who ends a leaked secret or key
 * with an `UPDATE` of its expiry, or empties a table with `TRUNCATE` (which fires no row
 * trigger), must reach every replica's memory as the API's changes do (lib/db/change_feed.ts).
 *
 * @module
 */

import assert from "node:assert/strict";
import { connect, migrate, readMigrations, type Sql } from "../lib/db/mod.ts";
import { createTestDatabase, listenTo } from "../lib/testing/mod.ts";

/** Runs `body` on a new database with `schema` migrated. */
async function migrated(schema: "oauth" | "core" | "token", body: (sql: Sql) => Promise<void>) {
  const db = await createTestDatabase();
  const sql = connect(db.url, { applicationName: "test" });
  try {
    const dir = new URL(`../services/${schema}/migrations/`, import.meta.url);
    await migrate(sql, schema, await readMigrations(dir));
    await body(sql);
  } finally {
    await sql.end();
    await db.drop();
  }
}

Deno.test("an update of a secret's or key's expiry or material notifies its client; a use or a re-hash nobody", async () => {
  await migrated("oauth", async (sql) => {
    const client = crypto.randomUUID();
    const secret = crypto.randomUUID();
    const key = crypto.randomUUID();
    await sql`insert into oauth.configs (project_id, application_name, audience)
      values ('p', 'Demo', 'external')`;
    await sql`insert into oauth.clients (id, project_id, name, type)
      values (${client}, 'p', 'web', 'web')`;
    await sql`insert into oauth.client_secrets (id, client_id, secret_hash, secret_hint)
      values (${secret}, ${client}, '\\x00', 'ocs_****abcd')`;
    await sql`insert into oauth.client_keys (id, client_id, kid, algorithm, jwk)
      values (${key}, ${client}, 'k1', 'EdDSA', '{"kty":"OKP","crv":"Ed25519","x":"AA"}')`;
    const heard = await listenTo(sql, "oauth_registry_changes");
    try {
      const silent = [
        () => sql`update oauth.client_secrets set last_used_at = now() where id = ${secret}`,
        // A re-hash under another server key (services/oauth/secrets.ts): the same secret.
        () =>
          sql`update oauth.client_secrets set secret_hash = '\\x01', hash_key_id = '\\x02'
            where id = ${secret}`,
        () => sql`update oauth.client_keys set last_used_at = now() where id = ${key}`,
      ];
      for (const change of silent) {
        await change();
        assert.deepEqual(await heard.flush(), []);
      }
      const notified = [
        () => sql`update oauth.client_secrets set expires_at = now() where id = ${secret}`,
        // Another secret's hash under the same server key.
        () => sql`update oauth.client_secrets set secret_hash = '\\x03' where id = ${secret}`,
        () => sql`update oauth.client_keys set expires_at = now() where id = ${key}`,
        () =>
          sql`update oauth.client_keys set jwk = '{"kty":"OKP","crv":"Ed25519","x":"AB"}'
            where id = ${key}`,
      ];
      for (const change of notified) {
        await change();
        assert.deepEqual(await heard.flush(), [`client:${client}`]);
      }
    } finally {
      await heard.close();
    }
  });
});

Deno.test("a truncate of a table followers keep notifies that everything may have changed", async () => {
  await migrated("oauth", async (sql) => {
    await sql`insert into oauth.configs (project_id, application_name, audience)
      values ('p', 'Demo', 'external')`;
    await sql`insert into oauth.clients (id, project_id, name, type)
      values (${crypto.randomUUID()}, 'p', 'web', 'web')`;
    const heard = await listenTo(sql, "oauth_registry_changes");
    try {
      for (
        const table of [
          "oauth.client_secrets",
          "oauth.client_keys",
          "oauth.installations",
          "oauth.clients",
          "oauth.configs",
        ]
      ) {
        await sql.unsafe(`truncate ${table} cascade`);
        assert.ok((await heard.flush()).includes("reset"), table);
      }
    } finally {
      await heard.close();
    }
  });
  await migrated("core", async (sql) => {
    const heard = await listenTo(sql, "core_changes");
    try {
      await sql`truncate core.units`;
      assert.deepEqual(await heard.flush(), ["reset"]);
    } finally {
      await heard.close();
    }
  });
  await migrated("token", async (sql) => {
    const heard = await listenTo(sql, "token_revocations");
    try {
      await sql`truncate token.revoked_tokens`;
      assert.deepEqual(await heard.flush(), ["reset"]);
    } finally {
      await heard.close();
    }
  });
});

Deno.test("a signing key created, deleted or changed notifies the token service's replicas; sealing it again nobody", async () => {
  await migrated("token", async (sql) => {
    const insert = (kid: string) =>
      sql`insert into token.signing_keys
          (kid, alg, public_jwk, private_jwk_sealed, created_at, signs_from, signs_until,
           published_until)
        values (${kid}, 'EdDSA', '{"kty":"OKP","crv":"Ed25519","x":"AA"}', '\\x00', now(), now(),
                now() + interval '1 hour', now() + interval '2 hours')`;
    const heard = await listenTo(sql, "token_signing_keys");
    try {
      await insert("k1");
      assert.deepEqual(await heard.flush(), ["keys"]);
      await sql`update token.signing_keys set private_jwk_sealed = '\\x01' where kid = 'k1'`;
      assert.deepEqual(await heard.flush(), [], "sealed again under another secret");
      await sql`delete from token.signing_keys where kid = 'nothing'`;
      assert.deepEqual(await heard.flush(), [], "a statement that changes no key");
      for (
        const change of [
          () => sql`update token.signing_keys set published_until = now() + interval '1 hour'`,
          () => sql`update token.signing_keys set signs_until = now() + interval '1 minute'`,
          () => sql`update token.signing_keys set public_jwk = '{"kty":"OKP"}'`,
          () => sql`delete from token.signing_keys where kid = 'k1'`,
        ]
      ) {
        await change();
        assert.deepEqual(await heard.flush(), ["keys"]);
      }
      await insert("k2");
      await heard.flush();
      await sql`truncate token.signing_keys`;
      assert.deepEqual(await heard.flush(), ["reset"]);
    } finally {
      await heard.close();
    }
  });
});
