/**
 * The oauth schema's migrations on a database that already holds data: each later migration applies
 * over rows written under the earlier ones, as it does in production.
 *
 * @module
 */

import assert from "node:assert/strict";
import { connect, migrate, readMigrations, type Sql } from "../../lib/db/mod.ts";
import { createTestDatabase, listenTo } from "../../lib/testing/mod.ts";
import { ids } from "./ids.ts";

/**
 * Runs `body` on a new database migrated up to `file` (not included), whose project `p` has a
 * config; `rest()` applies `file` and those after it, and checks that it applied exactly those.
 */
async function beforeMigration(
  file: string,
  body: (sql: Sql, rest: () => Promise<void>) => Promise<void>,
) {
  const db = await createTestDatabase();
  const sql = connect(db.url, { applicationName: "test" });
  try {
    const files = await readMigrations(new URL("./migrations/", import.meta.url));
    const at = files.findIndex((f) => f.name === file);
    assert.ok(at > 0, file);
    await migrate(sql, "oauth", files.slice(0, at));
    await sql`insert into oauth.configs (project_id, application_name, audience)
      values ('p', 'Demo', 'external')`;
    await body(sql, async () => {
      assert.deepEqual(await migrate(sql, "oauth", files), files.slice(at).map((f) => f.name));
    });
  } finally {
    await sql.end();
    await db.drop();
  }
}

Deno.test("0005 (secret expiry, last use) applies over existing secrets and configs", async () => {
  await beforeMigration("0005_secret_expiry.sql", async (sql, rest) => {
    const client = crypto.randomUUID();
    const secret = crypto.randomUUID();
    await sql`insert into oauth.clients (id, project_id, name, type)
      values (${client}, 'p', 'web', 'web')`;
    await sql`insert into oauth.client_secrets (id, client_id, secret_hash, secret_hint)
      values (${secret}, ${client}, '\\x00', 'ocs_****abcd')`;

    await rest();
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
  });
});

Deno.test("0006 (client keys) applies over existing clients; keys notify on insert and delete only", async () => {
  await beforeMigration("0006_client_keys.sql", async (sql, rest) => {
    const [web, spa, native] = [crypto.randomUUID(), crypto.randomUUID(), crypto.randomUUID()];
    await sql`insert into oauth.clients (id, project_id, name, type) values
      (${web}, 'p', 'web', 'web'), (${spa}, 'p', 'spa', 'spa'), (${native}, 'p', 'n', 'native')`;

    await rest();
    const rows = await sql<{ type: string; m: string; dpop: boolean }[]>`
      select type, token_endpoint_auth_method as m, dpop_bound_access_tokens as dpop
      from oauth.clients order by name desc`;
    assert.deepEqual(rows.map((r) => ({ ...r })), [
      { type: "web", m: "client_secret_basic", dpop: false },
      { type: "spa", m: "none", dpop: false },
      { type: "native", m: "none", dpop: false },
    ]);
    // The values are checked, and a public client has no other method than none.
    await assert.rejects(
      sql`update oauth.clients set token_endpoint_auth_method = 'tls_client_auth' where id = ${web}`,
      /check constraint/,
    );
    await assert.rejects(
      sql`update oauth.clients set token_endpoint_auth_method = 'private_key_jwt' where id = ${spa}`,
      /check constraint/,
    );
    await sql`update oauth.clients set token_endpoint_auth_method = 'private_key_jwt'
      where id = ${web}`;
    // A client inserted without a method (SQL of before 0006) gets its type's default.
    const later = crypto.randomUUID();
    await sql`insert into oauth.clients (id, project_id, name, type)
      values (${later}, 'p', 'later', 'web')`;
    const [added] = await sql`select token_endpoint_auth_method as m from oauth.clients
      where id = ${later}`;
    assert.equal(added?.m, "client_secret_basic");

    const heard = await listenTo(sql, "oauth_registry_changes");
    try {
      const key = crypto.randomUUID();
      const jwk = { kty: "OKP", crv: "Ed25519", x: "x", kid: "k1", alg: "EdDSA", use: "sig" };
      await sql`insert into oauth.client_keys (id, client_id, kid, algorithm, jwk)
        values (${key}, ${web}, 'k1', 'EdDSA', ${sql.json(jwk)})`;
      assert.deepEqual(await heard.flush(), [`client:${web}`], "a new key is heard");
      await sql`update oauth.client_keys set last_used_at = now() where id = ${key}`;
      assert.deepEqual(await heard.flush(), [], "a use is not");
      await assert.rejects(
        sql`insert into oauth.client_keys (id, client_id, kid, algorithm, jwk)
          values (${crypto.randomUUID()}, ${web}, 'k1', 'EdDSA', ${sql.json(jwk)})`,
        /unique/,
      );
      await assert.rejects(
        sql`insert into oauth.client_keys (id, client_id, kid, algorithm, jwk)
          values (${crypto.randomUUID()}, ${web}, 'k2', 'EdDSA', ${sql.json({ ...jwk, d: "s" })})`,
        /check constraint/,
        "the table keeps no private member",
      );
      assert.deepEqual(await heard.flush(), []);
      await sql`delete from oauth.client_keys where id = ${key}`;
      assert.deepEqual(await heard.flush(), [`client:${web}`], "a deleted key is heard");
      // A client's deletion takes its keys.
      await sql`insert into oauth.client_keys (id, client_id, kid, algorithm, jwk)
        values (${crypto.randomUUID()}, ${web}, 'k3', 'EdDSA', ${sql.json(jwk)})`;
      await sql`delete from oauth.clients where id = ${web}`;
      const [left] = await sql`select count(*)::int as n from oauth.client_keys`;
      assert.equal(left?.n, 0);
      assert.deepEqual(await heard.flush(), [`client:${web}`, `client:${web}`]);
    } finally {
      await heard.close();
    }
  });
});

Deno.test("0012 (installation names) names the installations there as the API does", async () => {
  await beforeMigration("0012_installation_names.sql", async (sql, rest) => {
    const made = [ids.installation.generate(), ids.installation.generate()];
    for (const [i, id] of made.entries()) {
      await sql`insert into oauth.installations
        (id, project_id, account_id, application_name, status, authorized_by_id)
        values (${id.uuid}, 'p', ${`a${i}`}, 'Demo', 'active', 'u')`;
    }

    await rest();
    const rows = await sql<{ name: string }[]>`select name from oauth.installations order by id`;
    assert.deepEqual(
      rows.map((r) => r.name),
      made.map((id) => `projects/p/installations/${id.id}`),
    );
    await assert.rejects(
      sql`insert into oauth.installations
        (id, project_id, account_id, application_name, status, authorized_by_id)
        values (${crypto.randomUUID()}, 'p', 'a9', 'Demo', 'active', 'u')`,
      /not-null/,
      "every installation has its name",
    );
  });
});

Deno.test("0014 (origin keys in PL/pgSQL) keeps every client's keys as they were", async () => {
  await beforeMigration("0014_origin_keys_function.sql", async (sql, rest) => {
    const origins = [
      [],
      ["https://app.example"],
      ["HTTPS://App.Example.com:443", "http://localhost:080", "http://x.example:8080"],
      ["https://a.example:0443", "http://[::1]:80", "https://b.example:444", "https://a.example"],
    ];
    const keys = async () =>
      (await sql<{ origin_keys: string[] }[]>`select origin_keys from oauth.clients order by name`)
        .map((r) => r.origin_keys);
    for (const [i, list] of origins.entries()) {
      await sql`insert into oauth.clients (id, project_id, name, type, javascript_origins)
        values (${crypto.randomUUID()}, 'p', ${`c${i}`}, 'spa', ${list})`;
    }
    const was = await keys();
    assert.deepEqual(was[2], [
      "https://app.example.com",
      "http://localhost",
      "http://x.example:8080",
    ]);

    await rest();
    // Computed again (an update of the origins) and for new clients, the keys are the same.
    await sql`update oauth.clients set javascript_origins = javascript_origins || '{}'::text[]`;
    assert.deepEqual(await keys(), was);
    for (const [i, list] of origins.entries()) {
      await sql`insert into oauth.clients (id, project_id, name, type, javascript_origins)
        values (${crypto.randomUUID()}, 'p', ${`d${i}`}, 'spa', ${list})`;
    }
    assert.deepEqual((await keys()).slice(origins.length), was);
  });
});

Deno.test("0015 (installation notifications) notifies every change the token service keeps, and no other", async () => {
  await beforeMigration("0015_installation_notify_decisions.sql", async (sql, rest) => {
    const id = crypto.randomUUID();
    await sql`insert into oauth.installations
        (id, project_id, account_id, application_name, scopes, status, authorized_by_id, name)
      values (${id}, 'p', 'acc', 'Demo', '{a}', 'active', 'usr', ${`projects/p/installations/${id}`})`;

    await rest();
    const heard = await listenTo(sql, "oauth_registry_changes");
    try {
      // A consent again that adds no scope: when, by whom, under which name.
      await sql`update oauth.installations
        set authorized_at = now(), authorized_by_id = 'usr2', application_name = 'Renamed'
        where id = ${id}`;
      assert.deepEqual(await heard.flush(), []);
      const changes = [
        () => sql`update oauth.installations set scopes = '{a,b}' where id = ${id}`,
        () => sql`update oauth.installations set principal_id = 'prn' where id = ${id}`,
        () =>
          sql`update oauth.installations set status = 'revoked', revoked_at = now() where id = ${id}`,
        () => sql`delete from oauth.installations where id = ${id}`,
      ];
      for (const change of changes) {
        await change();
        assert.deepEqual(await heard.flush(), [`installation:${id}`]);
      }
    } finally {
      await heard.close();
    }
  });
});
