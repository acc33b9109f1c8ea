import assert from "node:assert/strict";
import { connect, migrate, readMigrations } from "../../lib/db/mod.ts";
import { createTestDatabase, manualFeed } from "../../lib/testing/mod.ts";
import { createRevocations } from "./revocations.ts";

Deno.test("revocations: the list read again holds every token unexpired by this service's clock, not Postgres's", async () => {
  const db = await createTestDatabase();
  const sql = connect(db.url, { applicationName: "test" });
  try {
    await migrate(sql, "token", await readMigrations(new URL("./migrations/", import.meta.url)));
    // This service's clock is two hours behind Postgres's: a token it issued an hour ago (by its
    // clock) expires in an hour by that clock, an hour ago by Postgres's.
    const clock = { now: Date.now() - 2 * 3600_000 };
    const jti = crypto.randomUUID();
    await sql`insert into token.revoked_tokens (jti, expires_at, revoked_at)
      values (${jti}, ${new Date(clock.now + 3600_000)}, ${new Date(clock.now)})`;
    const feed = manualFeed();
    const revocations = createRevocations(sql, { follow: feed.follow, now: () => clock.now });
    try {
      await revocations.reload();
      assert.equal(revocations.size(), 1);
      assert.equal(await revocations.isRevoked(jti), true, "revoked, and not expired here");
    } finally {
      await revocations.close();
    }
  } finally {
    await sql.end();
    await db.drop();
  }
});
