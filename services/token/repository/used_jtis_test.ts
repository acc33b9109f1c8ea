/**
 * The single-use JWT store on a real Postgres: first use, replay, expiry and takeover, and uses
 * made at once (written together in batches) decided exactly as one by one, the same key twice
 * in a batch included; the token schema's migrations run first (0006 included).
 */

import assert from "node:assert/strict";
import { connect, migrate, readMigrations } from "../../../lib/db/mod.ts";
import { createTestDatabase } from "../../../lib/testing/mod.ts";
import { createUsedJtis, maxBatch } from "./used_jtis.ts";

Deno.test("used_jtis: once per scope and jti, until expiry, also when used all at once", async () => {
  const db = await createTestDatabase();
  const sql = connect(db.url, { applicationName: "used-jtis-test", max: 3 });
  try {
    await migrate(sql, "token", await readMigrations(new URL("../migrations/", import.meta.url)));
    const jtis = createUsedJtis(sql);
    const t0 = Date.UTC(2030, 0, 1);
    const at = (ms: number) => new Date(t0 + ms);

    assert.equal(await jtis.use("dpop:k1", "a", at(1000), at(0)), true);
    assert.equal(await jtis.use("dpop:k1", "a", at(1000), at(500)), false, "a replay");
    assert.equal(await jtis.use("dpop:k2", "a", at(1000), at(500)), true, "another scope");
    assert.equal(await jtis.use("dpop:k1", "a", at(3000), at(1001)), true, "past its expiry");
    assert.equal(await jtis.use("dpop:k1", "a", at(3000), at(2000)), false, "kept to the new one");

    // Many at once, more than a batch, each jti twice: exactly one of each pair is fresh.
    const n = maxBatch * 2 + 7;
    const uses = Array.from(
      { length: n * 2 },
      (_, i) => jtis.use("dpop:many", `j${i % n}`, at(60_000), at(0)),
    );
    const outcomes = await Promise.all(uses);
    for (let i = 0; i < n; i++) {
      assert.equal(
        Number(outcomes[i]) + Number(outcomes[i + n]),
        1,
        `j${i}: one of its two uses is fresh`,
      );
    }
    const [row] = await sql<{ n: number }[]>`
      select count(*)::int as n from token.used_jtis where expires_at = ${at(60_000)}`;
    assert.equal(row!.n, n);
    // Concurrent replays of ones already written: all refused.
    assert.deepEqual(
      new Set(
        await Promise.all(
          Array.from({ length: 50 }, (_, i) => jtis.use("dpop:many", `j${i}`, at(60_000), at(1))),
        ),
      ),
      new Set([false]),
    );

    // A use commits without waiting for the disk, in its own transaction only: the pool's
    // connections keep the server's setting.
    const settings = await Promise.all(
      Array.from(
        { length: 3 },
        () => sql<{ s: string }[]>`select current_setting('synchronous_commit') as s`,
      ),
    );
    assert.deepEqual(new Set(settings.map(([r]) => r!.s)), new Set(["on"]));

    assert.equal(await jtis.purge(at(59_999)), 2, "the rows of dpop:k1 (3 s) and dpop:k2 (1 s)");
    assert.equal(await jtis.purge(at(60_001), 100), 100, "at most the limit");
    assert.equal(await jtis.purge(at(60_001)), n - 100);
  } finally {
    await sql.end();
    await db.drop();
  }
});
