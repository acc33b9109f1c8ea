/**
 * The signing keys against a real Postgres, on an injected clock: the current and the next key are
 * published, rotation moves signing to the next one, a retired key stays published until the last
 * token it signed has expired, replicas starting together create each key once, and the private
 * parts are stored sealed; access tokens verified with them are remembered within their bytes. A
 * key deleted or changed by SQL stops verifying in every replica within the promised second:
 * through the notifications, through a read again when the feed is late or was lost, and without a
 * feed once what was read is a second old.
 */

import assert from "node:assert/strict";
import {
  connect,
  followChanges,
  migrate,
  propagationMs,
  readMigrations,
  signingKeysChannel,
  type Sql,
} from "../../lib/db/mod.ts";

type Migration = Awaited<ReturnType<typeof readMigrations>>[number];
import { createTestDatabase, manualFeed, propagated } from "../../lib/testing/mod.ts";
import { createKeyRing, seal, unseal } from "./keys.ts";
import { createAccessTokens } from "./access_tokens.ts";
import { createMemoryBudget } from "../../lib/platform/mod.ts";

const hour = 3_600_000;

/**
 * Runs `use` on a pool (at most 4 connections) over a new test database, dropped after; the token
 * schema's migrations are applied first unless `migrated` is false (`use` gets them either way).
 */
async function withTokenSchema(
  use: (sql: Sql, migrations: Migration[]) => Promise<void>,
  migrated = true,
): Promise<void> {
  const db = await createTestDatabase();
  const sql = connect(db.url, { applicationName: "keys-test", max: 4 });
  try {
    const migrations = await readMigrations(new URL("./migrations/", import.meta.url));
    if (migrated) await migrate(sql, "token", migrations);
    await use(sql, migrations);
  } finally {
    await sql.end();
    await db.drop();
  }
}
const secret = "a".repeat(32);

Deno.test("signing keys: published ahead, rotated, retired after their tokens", async () => {
  await withTokenSchema(async (sql) => {
    let clock = Date.UTC(2030, 0, 1);
    const options = {
      sql,
      encryptionKey: secret,
      rotationMs: 24 * hour,
      tokenLifetimeMs: hour,
      now: () => clock,
    };
    // Two replicas starting together.
    const [one, two] = [createKeyRing(options), createKeyRing(options)];
    await Promise.all([one.refresh(), two.refresh()]);
    const [row] = await sql<{ count: number }[]>`
      select count(*)::int as count from token.signing_keys`;
    const count = row!.count;
    assert.equal(count, 2, "the current key and the next one, created once");
    const first = one.signing().kid;
    assert.equal(two.signing().kid, first);
    const published = one.jwks().keys.map((k) => k.kid);
    assert.equal(published.length, 2);
    const next = published.find((kid) => kid !== first)!;
    for (const key of one.jwks().keys) {
      assert.deepEqual(Object.keys(key).sort(), ["alg", "crv", "kid", "kty", "use", "x"]);
      assert.deepEqual([key.kty, key.crv, key.alg], ["OKP", "Ed25519", "EdDSA"]);
    }

    // Past the first key's period: the next one signs; the old one is still published.
    clock += 24 * hour + 1;
    await one.refresh();
    assert.equal(one.signing().kid, next);
    assert.ok(one.jwks().keys.some((k) => k.kid === first));
    assert.equal(one.jwks().keys.length, 3, "old, current and a new next key");
    assert.ok(one.byKid(first), "tokens it signed still verify");

    // Once the last token it signed has expired, it is gone.
    clock += hour;
    await one.refresh();
    assert.ok(!one.jwks().keys.some((k) => k.kid === first));
    assert.equal(one.byKid(first), undefined);

    // The private parts are sealed: no JWK "d" in the table.
    const rows = await sql`select private_jwk_sealed from token.signing_keys`;
    for (const row of rows) {
      assert.ok(!new TextDecoder().decode(row.private_jwk_sealed).includes('"d"'));
    }
  });
});

Deno.test("the current key deleted by SQL: the next key, already published, signs at once", async () => {
  await withTokenSchema(async (sql) => {
    const clock = Date.UTC(2030, 0, 1);
    const ring = createKeyRing({
      sql,
      encryptionKey: secret,
      rotationMs: 24 * hour,
      tokenLifetimeMs: hour,
      now: () => clock,
    });
    await ring.refresh();
    const current = ring.signing().kid;
    const next = ring.jwks().keys.find((k) => k.kid !== current)!.kid;
    await sql`delete from token.signing_keys where kid = ${current}`;
    await ring.refresh();
    assert.equal(ring.signing().kid, next, "the published next key, not a new one");
    const rows = await sql<{ kid: string; signs_from: Date; signs_until: Date }[]>`
      select kid, signs_from, signs_until from token.signing_keys order by signs_from`;
    assert.equal(rows.length, 2, "the promoted key and a new next one");
    assert.equal(rows[0]!.signs_from.getTime(), clock);
    assert.equal(rows[0]!.signs_until.getTime(), clock + 48 * hour, "to its own period's end");
    assert.equal(rows[1]!.signs_from.getTime(), clock + 48 * hour);
    assert.ok(ring.jwks().keys.some((k) => k.kid === rows[1]!.kid), "published ahead");
  });
});

Deno.test("the sealing secret changes: signing keys open under the previous one, sealed again under the new", async () => {
  await withTokenSchema(async (sql) => {
    const now = () => Date.UTC(2030, 0, 1);
    const ring = (encryptionKey: string, previousEncryptionKeys: string[] = []) => {
      const resealed: string[] = [];
      const keys = createKeyRing({
        sql,
        encryptionKey,
        previousEncryptionKeys,
        onResealed: (kid) => resealed.push(kid),
        rotationMs: 24 * hour,
        tokenLifetimeMs: hour,
        now,
      });
      return { keys, resealed };
    };
    const sealedRows = async () =>
      (await sql<{ kid: string; sealed: Uint8Array }[]>`
        select kid, private_jwk_sealed as sealed from token.signing_keys order by kid`)
        .map((r) => `${r.kid}:${Array.from(r.sealed).join(",")}`);
    const before = ring(secret);
    await before.keys.refresh();
    const kid = before.keys.signing().kid;
    const rowsBefore = await sealedRows();

    // A new secret alone opens nothing: the error names the key, and nothing is written.
    const newSecret = "b".repeat(32);
    await assert.rejects(ring(newSecret).keys.refresh(), /Cannot open signing key .*TOKEN_KEY/);
    assert.deepEqual(await sealedRows(), rowsBefore);

    // With the old secret as a previous one, the same keys sign, each sealed again once.
    const during = ring(newSecret, [secret]);
    await during.keys.refresh();
    assert.equal(during.keys.signing().kid, kid);
    assert.deepEqual(during.resealed.length, 2, "the current key and the next one");
    const rowsAfter = await sealedRows();
    assert.equal(rowsAfter.length, rowsBefore.length);
    for (let i = 0; i < rowsAfter.length; i++) assert.notEqual(rowsAfter[i], rowsBefore[i]);

    // The old secret gone, they still open; under the old secret alone, no more.
    const after = ring(newSecret);
    await after.keys.refresh();
    assert.equal(after.keys.signing().kid, kid);
    assert.deepEqual(after.resealed, []);
    await assert.rejects(ring(secret).keys.refresh(), /Cannot open signing key/);
  });
});

Deno.test("sealed keys open only with the same key and kid", async () => {
  const key = async (text: string) =>
    await crypto.subtle.importKey(
      "raw",
      await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)),
      "AES-GCM",
      false,
      ["encrypt", "decrypt"],
    );
  const right = await key("right");
  const sealed = await seal(right, "kid1", { kty: "EC", d: "secret" });
  assert.deepEqual(await unseal(right, "kid1", sealed as Uint8Array<ArrayBuffer>), {
    kty: "EC",
    d: "secret",
  });
  await assert.rejects(unseal(await key("wrong"), "kid1", sealed as Uint8Array<ArrayBuffer>));
  await assert.rejects(unseal(right, "kid2", sealed as Uint8Array<ArrayBuffer>));
});

Deno.test("a published ES256 key of before the move to EdDSA still verifies, and signs no more", async () => {
  await withTokenSchema(async (sql, migrations) => {
    // The schema as it was before 0003, with an ES256 key signing now, as that version made it.
    await migrate(sql, "token", migrations.filter((m) => m.version < 3));
    const pair = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, [
      "sign",
      "verify",
    ]);
    const { kty, crv, x, y } = await crypto.subtle.exportKey("jwk", pair.publicKey);
    const at = Date.now();
    await sql`
      insert into token.signing_keys (kid, alg, public_jwk, private_jwk_sealed, created_at,
        signs_from, signs_until, published_until)
      values ('old-es256', 'ES256',
        ${sql.json({ kty, crv, x, y, kid: "old-es256", alg: "ES256", use: "sig" } as never)},
        ${new Uint8Array(32)}, ${new Date(at - hour)}, ${new Date(at - hour)},
        ${new Date(at + 24 * hour)}, ${new Date(at + 25 * hour)})`;
    await migrate(sql, "token", migrations);
    const ring = createKeyRing({
      sql,
      encryptionKey: secret,
      rotationMs: 24 * hour,
      tokenLifetimeMs: hour,
      now: () => Date.now(),
    });
    await ring.refresh();
    const old = ring.byKid("old-es256");
    assert.equal(old?.alg, "ES256");
    const data = new TextEncoder().encode("a token");
    const signature = await crypto.subtle.sign(
      { name: "ECDSA", hash: "SHA-256" },
      pair.privateKey,
      data,
    );
    assert.ok(
      await crypto.subtle.verify(
        { name: "ECDSA", hash: "SHA-256" },
        old.publicKey,
        signature,
        data,
      ),
    );
    assert.equal(ring.signing().alg, "EdDSA");
    assert.ok(ring.jwks().keys.some((k) => k.kid === "old-es256"));
  }, false);
});

Deno.test("access tokens: verified ones are remembered within their bytes, in the memory budget", async () => {
  await withTokenSchema(async (sql) => {
    const now = () => Date.UTC(2030, 0, 1);
    const keys = createKeyRing({
      sql,
      encryptionKey: secret,
      rotationMs: 24 * hour,
      tokenLifetimeMs: hour,
      now,
    });
    await keys.refresh();
    const budget = createMemoryBudget(1024 * 1024);
    const tokens = createAccessTokens({
      keys,
      issuer: "https://issuer.example",
      ttlSeconds: 900,
      now,
      cacheBytes: 8192,
      budget,
    });
    const signed = [];
    for (let i = 0; i < 20; i++) {
      signed.push(await tokens.sign({ sub: `c${i}`, aud: "p1", client_id: `c${i}`, scope: "" }));
    }
    assert.equal((await tokens.verify(signed[0]!.jwt))?.sub, "c0");
    const one = budget.heldBy("cache");
    assert.ok(one > signed[0]!.jwt.length, `${one}`);
    for (const s of signed) assert.ok(await tokens.verify(s.jwt));
    const held = budget.heldBy("cache");
    assert.ok(held <= 8192 && held >= one, `${held}`);
    assert.equal((await tokens.verify(signed[0]!.jwt))?.sub, "c0"); // the oldest, verified again

    // A token granted no scope has no scope claim (a scope is one or more tokens, RFC 6749 3.3);
    // one granted some has them.
    const claimsOf = (jwt: string) =>
      JSON.parse(atob(jwt.split(".")[1]!.replace(/-/g, "+").replace(/_/g, "/")));
    assert.ok(!("scope" in claimsOf(signed[0]!.jwt)), JSON.stringify(claimsOf(signed[0]!.jwt)));
    const scoped = await tokens.sign({ sub: "c", aud: "p1", client_id: "c", scope: "read write" });
    assert.equal(claimsOf(scoped.jwt).scope, "read write");
    assert.equal((await tokens.verify(scoped.jwt))?.scope, "read write");

    // The signature's last character carries 4 bits that base64url decoding drops: the same token
    // written another way is not the token (what is kept by its text, as the gateway's
    // introspections are, would miss it).
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const last = alphabet.indexOf(scoped.jwt.at(-1)!);
    for (let bits = 1; bits < 16; bits++) {
      const variant = scoped.jwt.slice(0, -1) + alphabet[last ^ bits];
      assert.equal(await tokens.verify(variant), undefined, variant);
    }
  });
});

/** The `kid` in a JWT's header. */
const kidOf = (jwt: string) =>
  JSON.parse(atob(jwt.split(".")[0]!.replace(/-/g, "+").replace(/_/g, "/"))).kid;

Deno.test("a signing key deleted or ended by SQL stops verifying in both replicas within a second", async () => {
  await withTokenSchema(async (sql) => {
    let clock = Date.UTC(2030, 0, 1);
    const now = () => clock;
    const replica = () => {
      const keys = createKeyRing({
        sql,
        encryptionKey: secret,
        rotationMs: 24 * hour,
        tokenLifetimeMs: hour,
        now,
        follow: (handlers) => followChanges(sql, signingKeysChannel, handlers),
      });
      return {
        keys,
        tokens: createAccessTokens({ keys, issuer: "https://i.example", ttlSeconds: 900, now }),
      };
    };
    const replicas = [replica(), replica()];
    try {
      await Promise.all(replicas.map((r) => r.keys.ready()));
      const claims = { sub: "c", aud: "p1", client_id: "c" };
      /** Whether `jwt` verifies in no replica. */
      const refused = async (jwt: string) =>
        (await Promise.all(replicas.map((r) => r.tokens.verify(jwt)))).every((c) => !c);

      // A compromised key deleted: its tokens are refused, and a new key signs, in both.
      const first = (await replicas[0]!.tokens.sign(claims)).jwt;
      for (const r of replicas) assert.ok(await r.tokens.verify(first));
      await sql`delete from token.signing_keys where kid = ${kidOf(first)}`;
      // The promised second gone by, no replica may still take it (each reads the keys again when
      // its feed is late): asked then, not polled, so that a slow answer cannot miss the bound.
      await propagated();
      assert.ok(await refused(first), "the deleted key's token refused in both");
      for (const r of replicas) {
        const signed = (await r.tokens.sign(claims)).jwt;
        assert.notEqual(kidOf(signed), kidOf(first));
        assert.ok(await replicas[0]!.tokens.verify(signed));
        assert.ok(await replicas[1]!.tokens.verify(signed));
      }

      // A key's publication ended by an update: the same.
      clock += 10 * 60_000;
      const second = (await replicas[1]!.tokens.sign(claims)).jwt;
      for (const r of replicas) assert.ok(await r.tokens.verify(second));
      const ended = new Date(clock - 60_000);
      await sql`update token.signing_keys set signs_until = ${ended}, published_until = ${ended}
        where kid = ${kidOf(second)}`;
      await propagated();
      assert.ok(await refused(second), "the ended key's token refused in both");
      for (const r of replicas) {
        assert.equal(r.keys.jwks().keys.some((k) => k.kid === kidOf(second)), false);
        assert.notEqual(kidOf((await r.tokens.sign(claims)).jwt), kidOf(second));
      }
    } finally {
      await Promise.all(replicas.map((r) => r.keys.close()));
    }
  });
});

Deno.test("the keys are read again when the feed is late or was lost, and without a feed after a second", async () => {
  await withTokenSchema(async (sql) => {
    const now = () => Date.UTC(2030, 0, 1);
    let mono = 0;
    const feed = manualFeed();
    const options = {
      sql,
      encryptionKey: secret,
      rotationMs: 24 * hour,
      tokenLifetimeMs: hour,
      now,
      monotonic: () => mono,
    };
    const followed = createKeyRing({ ...options, follow: feed.follow });
    const unfollowed = createKeyRing(options);
    await followed.ready();
    await unfollowed.ready();
    const published = () => followed.jwks().keys.map((k) => k.kid!);
    const [current, next] = published();
    assert.equal(unfollowed.jwks().keys.length, 2);

    // Deleted with no notification heard: memory answers while the feed is fresh...
    await sql`delete from token.signing_keys where kid = ${next!}`;
    await followed.ready();
    assert.ok(followed.byKid(next!));
    // ...and the table while it is late.
    feed.setFresh(false);
    await followed.ready();
    assert.equal(followed.byKid(next!), undefined);
    feed.setFresh(true);

    // Listening again after a lost connection: everything is read again.
    await sql`delete from token.signing_keys where kid = ${current!}`;
    await followed.ready();
    assert.ok(followed.byKid(current!));
    feed.handlers().onReset();
    await followed.ready();
    assert.equal(followed.byKid(current!), undefined);
    assert.notEqual(followed.signing().kid, current);

    // Without a feed: what was read is used for a second, then read again.
    assert.ok(unfollowed.byKid(current!));
    mono += propagationMs - 1;
    await unfollowed.ready();
    assert.ok(unfollowed.byKid(current!));
    mono += 1;
    await unfollowed.ready();
    assert.equal(unfollowed.byKid(current!), undefined);
    assert.equal(unfollowed.byKid(next!), undefined);
    await followed.close();
  });
});
