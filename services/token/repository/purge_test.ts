/**
 * Deleting what expired, on a real Postgres with the token schema's migrations: families go with
 * their codes (and leave their device codes without one), a batch at a time, what has not expired
 * stays; and the rows a family's delete must reach are found by index, not by reading their whole
 * tables (without 0013, a purge of 10,000 families with 50,000 device codes took a core 67 s).
 */

import assert from "node:assert/strict";
import { connect, inBatches, migrate, readMigrations } from "../../../lib/db/mod.ts";
import { sha256 } from "../../../lib/platform/mod.ts";
import { createTestDatabase } from "../../../lib/testing/mod.ts";
import { guessLimit } from "../device.ts";
import { createDeviceCodeRepository } from "./device_codes.ts";
import { createGrantRepository, type GrantRepository } from "./grants.ts";
import { createPushedRequests } from "./pushed_requests.ts";
import { createUsedJtis } from "./used_jtis.ts";

/** A new family `id` of client `cli_a` with its authorization code, made at `created`. */
async function createCode(
  grants: GrantRepository,
  id: string,
  codeHash: Uint8Array,
  created: Date,
  expires: Date,
): Promise<void> {
  await grants.createCode(
    {
      id,
      client_id: "cli_a",
      project_id: "p1",
      installation_id: "inst_a",
      created_at: created,
      expires_at: expires,
    },
    {
      code_hash: codeHash,
      family_id: id,
      client_id: "cli_a",
      redirect_uri: "",
      code_challenge: "c",
      scopes: ["s"],
      account_id: "acc",
      principal_id: "prn",
      expires_at: expires,
      dpop_jkt: null,
    },
  );
}

Deno.test("purge: expired families with their codes, a batch at a time, found by index", async () => {
  const db = await createTestDatabase();
  const sql = connect(db.url, { applicationName: "purge-test", max: 4 });
  try {
    await migrate(sql, "token", await readMigrations(new URL("../migrations/", import.meta.url)));
    const grants = createGrantRepository(sql);
    const devices = createDeviceCodeRepository(sql);
    const t0 = Date.UTC(2030, 0, 1);
    const at = (ms: number) => new Date(t0 + ms);

    // 7 families that expire at 1 s, 2 that expire at 1 h; each with a code, the expired ones
    // also with a device code approved into them.
    const families: string[] = [];
    for (let i = 0; i < 9; i++) {
      const id = crypto.randomUUID();
      const expires = at(i < 7 ? 1000 : 3_600_000);
      families.push(id);
      await createCode(grants, id, await sha256(`code ${i}`), at(0), expires);
      if (i < 7) {
        await sql`
          insert into token.device_codes (device_code_hash, user_code_hash, client_id, project_id,
            scopes, created_at, expires_at, interval_seconds, last_polled_at, status, family_id)
          values (${await sha256(`device ${i}`)}, ${await sha256(`user ${i}`)}, 'cli_a', 'p1',
            '{s}', ${at(0)}, ${at(7_200_000)}, 5, ${at(0)}, 'approved', ${id})`;
      }
    }

    // Batches of 3: 7 expired families take 3 batches (3, 3, 1), whatever else is purged.
    const batches: number[] = [];
    const purged = await inBatches(async (limit) => {
      const n = await grants.purge(at(2000), limit);
      batches.push(n);
      return n;
    }, { limit: 3 });
    assert.equal(purged, 7);
    assert.deepEqual(batches, [3, 3, 1]);
    const left = await sql<{ id: string }[]>`select id from token.families order by expires_at`;
    assert.deepEqual(new Set(left.map((r) => r.id)), new Set(families.slice(7)));
    const [codes] = await sql<{ n: number }[]>`
      select count(*)::int as n from token.authorization_codes`;
    assert.equal(codes!.n, 2, "the codes of the families left");
    const [orphans] = await sql<{ n: number }[]>`
      select count(*)::int as n from token.device_codes where family_id is null`;
    assert.equal(orphans!.n, 7, "device codes stay until their own expiry, without a family");

    // Device codes go an hour after they expire (2 h here), at most a batch at a time.
    assert.equal(await devices.purge(at(3 * 3_600_000 - 1), guessLimit, 5), 0);
    assert.equal(await devices.purge(at(3 * 3_600_000 + 1), guessLimit, 5), 5);
    assert.equal(await devices.purge(at(3 * 3_600_000 + 1), guessLimit, 5), 2);

    // What a family's delete must reach, by family_id, is an index's lookup (seq scans are made
    // the last resort, so a table without such an index shows one).
    for (const table of ["authorization_codes", "device_codes", "refresh_tokens"]) {
      const plan = await sql.begin(async (tx) => {
        await tx`set local enable_seqscan = off`;
        return await tx.unsafe(
          `explain select 1 from token.${table} where family_id = '${families[0]}'`,
        );
      });
      const text = plan.map((r) => Object.values(r)[0]).join("\n");
      assert.doesNotMatch(text, /Seq Scan/, `${table}: ${text}`);
    }

    // The single-use JWTs and pushed requests are purged a batch at a time as well.
    const jtis = createUsedJtis(sql);
    for (let i = 0; i < 5; i++) await jtis.use("dpop:k", `j${i}`, at(1000), at(0));
    assert.equal(await inBatches((limit) => jtis.purge(at(2000), limit), { limit: 2 }), 5);
    const pushed = createPushedRequests(sql);
    assert.equal(await pushed.purge(at(2000), 2), 0);
  } finally {
    await sql.end();
    await db.drop();
  }
});

Deno.test("a code or refresh token whose family is purged between its two reads is unknown, not a failure", async () => {
  const db = await createTestDatabase();
  const sql = connect(db.url, { applicationName: "purge-test", max: 4 });
  try {
    await migrate(sql, "token", await readMigrations(new URL("../migrations/", import.meta.url)));
    const at = new Date(Date.UTC(2030, 0, 1));
    const familyId = crypto.randomUUID();
    const codeHash = await sha256("code"), tokenHash = await sha256("refresh");
    // The purge, run just before the repository reads the family (its second read).
    let purgeFirst = false;
    const racing = ((strings: TemplateStringsArray, ...values: unknown[]) => {
      if (purgeFirst && strings.join("").includes("from token.families")) {
        return sql`delete from token.families where id = ${values[0] as string}`
          .then(() => sql(strings, ...(values as never[])));
      }
      return sql(strings, ...(values as never[]));
    }) as unknown as typeof sql;
    const grants = createGrantRepository(racing);
    await createCode(grants, familyId, codeHash, at, at);
    // A refresh token of another family, made as a code's family is.
    const otherFamilyId = crypto.randomUUID();
    await sql`
      insert into token.families (id, client_id, project_id, installation_id, created_at,
        expires_at)
      values (${otherFamilyId}, 'cli_a', 'p1', 'inst_a', ${at}, ${at})`;
    await sql`
      insert into token.refresh_tokens (token_hash, family_id, client_id, scopes, account_id,
        principal_id, created_at, expires_at)
      values (${tokenHash}, ${otherFamilyId}, 'cli_a', '{s}', 'acc', 'prn', ${at}, ${at})`;
    assert.ok(await grants.findCode(codeHash));
    assert.ok(await grants.findRefreshToken(tokenHash));
    purgeFirst = true;
    assert.equal(await grants.findCode(codeHash), undefined);
    assert.equal(await grants.findRefreshToken(tokenHash), undefined);
  } finally {
    await sql.end();
    await db.drop();
  }
});
