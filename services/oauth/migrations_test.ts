/**
 * The oauth schema's migrations on a database that already holds data: each later migration applies
 * over rows written under the earlier ones, as it does in production.
 *
 * @module
 */

import assert from "node:assert/strict";
import { connect, migrate, readMigrations } from "../../lib/db/mod.ts";
import { createTestDatabase, listenTo } from "../../lib/testing/mod.ts";

Deno.test("0005 (secret expiry, last use) applies over existing secrets and configs", async () => {
  const db = await createTestDatabase();
  const sql = connect(db.url, { applicationName: "test" });
  try {
    const files = await readMigrations(new URL("./migrations/", import.meta.url));
    const before = files.findIndex((f) => f.name === "0005_secret_expiry.sql");
    assert.ok(before > 0);
    await migrate(sql, "oauth", files.slice(0, before));
    const client = crypto.randomUUID();
    const secret = crypto.randomUUID();
    await sql`insert into oauth.configs (project_id, application_name, audience)
      values ('p', 'Demo', 'external')`;
    await sql`insert into oauth.clients (id, project_id, name, type)
      values (${client}, 'p', 'web', 'web')`;
    await sql`insert into oauth.client_secrets (id, client_id, secret_hash, secret_hint)
      values (${secret}, ${client}, '\\x00', 'ocs_****abcd')`;

    assert.deepEqual(await migrate(sql, "oauth", files), files.slice(before).map((f) => f.name));
    const [row] = await sql`select expires_at, last_used_at from oauth.client_secrets`;
    assert.deepEqual({ ...row }, { expires_at: null, last_used_at: null }, "never expires");
    const [config] = await sql`select secret_max_lifetime_seconds from oauth.configs`;
    assert.equal(config?.secret_max_lifetime_seconds, 0, "no limit");
    await assert.rejects(
      sql`update oauth.configs set secret_max_lifetime_seconds = 315360001`,
      /check constraint/,
    );

    // A use updates the secret and notifies nobody; its deletion notifies its client's followers.
    const heard = await listenTo(sql, "oauth_registry_changes");
    try {
      await sql`update oauth.client_secrets set last_used_at = now() where id = ${secret}`;
      assert.deepEqual(await heard.flush(), []);
      await sql`delete from oauth.client_secrets where id = ${secret}`;
      assert.deepEqual(await heard.flush(), [`client:${client}`]);
    } finally {
      await heard.close();
    }
  } finally {
    await sql.end();
    await db.drop();
  }
});
