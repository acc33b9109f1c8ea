import assert from "node:assert/strict";
import { connect, migrate, type Migration, readMigrations } from "./db.ts";
import { createTestDatabase } from "./testing/database.ts";

const migrations: Migration[] = [
  { version: 1, name: "0001_a.sql", sql: "create table t.a (id int primary key);" },
  { version: 2, name: "0002_b.sql", sql: "insert into t.a values (1); create table t.b (x int);" },
];

Deno.test("migrate() applies each migration once when replicas start together", async () => {
  const db = await createTestDatabase();
  const pools = Array.from(
    { length: 4 },
    () => connect(db.url, { max: 2, applicationName: "test" }),
  );
  try {
    const applied = await Promise.all(pools.map((sql) => migrate(sql, "t", migrations)));
    assert.deepEqual(applied.flat().sort(), ["0001_a.sql", "0002_b.sql"]);
    const [row] = await pools[0]!`select count(*)::int as n from t.a`;
    assert.equal(row!.n, 1); // the insert of 0002 ran once
    assert.deepEqual(await migrate(pools[0]!, "t", migrations), []);
  } finally {
    await Promise.all(pools.map((sql) => sql.end()));
    await db.drop();
  }
});

Deno.test("migrate() refuses a migration that changed after it was applied", async () => {
  const db = await createTestDatabase();
  const sql = connect(db.url, { applicationName: "test" });
  try {
    await migrate(sql, "t", migrations);
    const edited = [migrations[0]!, { ...migrations[1]!, sql: "select 1;" }];
    await assert.rejects(migrate(sql, "t", edited), /0002_b.sql changed after it was applied/);
  } finally {
    await sql.end();
    await db.drop();
  }
});

Deno.test("readMigrations() rejects gaps and bad names", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/0001_a.sql`, "select 1;");
    await Deno.writeTextFile(`${dir}/0003_c.sql`, "select 1;");
    await assert.rejects(
      readMigrations(new URL(`file://${dir}/`)),
      /0003_c.sql should be number 2/,
    );
    await Deno.remove(`${dir}/0003_c.sql`);
    await Deno.writeTextFile(`${dir}/2_bad.sql`, "select 1;");
    await assert.rejects(readMigrations(new URL(`file://${dir}/`)), /expected NNNN_name.sql/);
    await Deno.remove(`${dir}/2_bad.sql`);
    assert.deepEqual((await readMigrations(new URL(`file://${dir}/`))).map((m) => m.version), [1]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the oauth migrations apply to an empty database", async () => {
  const db = await createTestDatabase();
  const sql = connect(db.url, { applicationName: "test" });
  try {
    const files = await readMigrations(new URL("../services/oauth/migrations/", import.meta.url));
    assert.deepEqual(await migrate(sql, "oauth", files), files.map((f) => f.name));
    const tables = await sql`select table_name from information_schema.tables
      where table_schema = 'oauth' order by table_name`;
    assert.deepEqual(tables.map((t) => t.table_name), [
      "client_secrets",
      "clients",
      "configs",
      "deleted_clients",
      "idempotency_keys",
      "installations",
      "schema_migrations",
    ]);
  } finally {
    await sql.end();
    await db.drop();
  }
});
