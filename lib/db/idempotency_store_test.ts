import assert from "node:assert/strict";
import { connect, migrate, readMigrations } from "./postgres.ts";
import { createIdempotencyStore } from "./idempotency_store.ts";
import { createLogger } from "../platform/mod.ts";
import { createTestDatabase } from "../testing/mod.ts";

Deno.test("the key store: claim, replay, takeover of a dead request, effects, expiry and purge", async () => {
  const db = await createTestDatabase();
  const sql = connect(db.url, { applicationName: "idempotency-test", max: 2 });
  try {
    await migrate(
      sql,
      "core",
      await readMigrations(new URL("../../services/core/migrations/", import.meta.url)),
    );
    const log = createLogger("test", "error");
    const store = createIdempotencyStore(sql, { schema: "core", ttlSeconds: 3600, log });
    const h1 = new Uint8Array([1]);
    const h2 = new Uint8Array([2]);

    const first = await store.claim("c", "rpc", "k", h1);
    assert.equal(first.kind, "owner");
    const busy = await store.claim("c", "rpc", "k", h1);
    assert.equal(busy.kind, "existing");
    assert.equal(busy.kind === "existing" && busy.completed, false);
    assert.equal((await store.claim("other", "rpc", "k", h1)).kind, "owner", "scoped by caller");
    assert.equal((await store.claim("c", "rpc2", "k", h1)).kind, "owner", "scoped by RPC");

    // Only the owner completes the key.
    await store.complete("c", "rpc", "k", "00000000-0000-0000-0000-000000000000", {
      response: new Uint8Array([9]),
    });
    assert.equal(
      (await store.claim("c", "rpc", "k", h1) as { completed: boolean }).completed,
      false,
    );
    if (first.kind !== "owner") throw new Error("unreachable");
    await store.complete("c", "rpc", "k", first.owner, { response: new Uint8Array([7, 8]) });
    const done = await store.claim("c", "rpc", "k", h2);
    assert.ok(done.kind === "existing" && done.completed);
    assert.deepEqual([...done.response!], [7, 8]);
    assert.deepEqual([...done.hash], [1]);

    // A request that never finished: after the lock, the same request takes the key over.
    const dead = await store.claim("c", "rpc", "dead", h1);
    assert.equal(dead.kind, "owner");
    const quick = createIdempotencyStore(sql, {
      schema: "core",
      ttlSeconds: 3600,
      lockSeconds: 0,
      log,
    });
    assert.equal((await quick.claim("c", "rpc", "dead", h2)).kind, "existing", "another body");
    assert.equal((await quick.claim("c", "rpc", "dead", h1)).kind, "owner");
    // One whose change committed (its effect marked) is never taken over: it tells its effect.
    assert.equal((await store.claim("c", "rpc", "marked", h1)).kind, "owner");
    await sql`update core.idempotency_keys set effect = 'spaces/s/roles/r' where key = 'marked'`;
    const marked = await quick.claim("c", "rpc", "marked", h1);
    assert.ok(marked.kind === "existing" && !marked.completed);
    assert.equal(marked.effect, "spaces/s/roles/r");

    // Released keys are gone, but for one whose change committed before its call failed (a lost
    // connection can fail a call after its commit); expired keys, marked or not, are new again,
    // then purged.
    const released = await store.claim("c", "rpc", "released", h1);
    if (released.kind !== "owner") throw new Error("expected to own the key");
    await store.release("c", "rpc", "released", released.owner);
    assert.equal((await store.claim("c", "rpc", "released", h2)).kind, "owner");
    const committed = await store.claim("c", "rpc", "committed", h1);
    if (committed.kind !== "owner") throw new Error("expected to own the key");
    await sql`update core.idempotency_keys set effect = 'spaces/s/roles/q' where key = 'committed'`;
    await store.release("c", "rpc", "committed", committed.owner);
    const kept = await store.claim("c", "rpc", "committed", h1);
    assert.ok(kept.kind === "existing" && kept.effect === "spaces/s/roles/q", "released");
    await sql`update core.idempotency_keys set created_at = now() - interval '2 hours'
      where caller = 'c' and rpc = 'rpc' and key in ('k', 'dead', 'marked')`;
    assert.equal((await store.claim("c", "rpc", "k", h2)).kind, "owner", "expired: new again");
    const renewed = await store.claim("c", "rpc", "marked", h1);
    assert.equal(renewed.kind, "owner", "expired with an effect: new again");
    assert.equal((await store.claim("c", "rpc", "marked", h1) as { effect: unknown }).effect, null);
    assert.equal(await store.purge(), 1); // 'dead'; 'k' and 'marked' were renewed
    const { n } = (await sql<
      { n: number }[]
    >`select count(*)::int as n from core.idempotency_keys`)[0]!;
    assert.equal(n, 6);
  } finally {
    await sql.end();
    await db.drop();
  }
});
