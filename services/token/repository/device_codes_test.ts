/**
 * The device code tables on a real Postgres (the token schema's migrations, 0007 included): the
 * guessing limit's numbers, per session and per address, exact under concurrent guesses, with its
 * sliding minute and its cool-down; polling (`slow_down` and the growing interval, another
 * client's code, expiry); a decision taken once.
 */

import { sha256 } from "../../../lib/platform/mod.ts";
import assert from "node:assert/strict";
import { connect, migrate, readMigrations } from "../../../lib/db/mod.ts";
import { createTestDatabase, untilWaitingForLock } from "../../../lib/testing/mod.ts";
import { guessLimit } from "../device.ts";
import { createDeviceCodeRepository } from "./device_codes.ts";

Deno.test("device codes: the guessing limit, polling, one decision", async (t) => {
  const db = await createTestDatabase();
  const sql = connect(db.url, { applicationName: "device-codes-test", max: 8 });
  try {
    await migrate(sql, "token", await readMigrations(new URL("../migrations/", import.meta.url)));
    const devices = createDeviceCodeRepository(sql);
    const t0 = Date.UTC(2030, 0, 1);
    const at = (ms: number) => new Date(t0 + ms);
    const key = (name: string) => sha256(name);
    const code = async (name: string, clientId = "cli_a") => {
      const created = await devices.create({
        device_code_hash: await sha256(`device ${name}`),
        user_code_hash: await sha256(name),
        client_id: clientId,
        project_id: "p1",
        scopes: ["s"],
        created_at: at(0),
        expires_at: at(600_000),
        interval_seconds: 5,
        last_polled_at: at(0),
      });
      assert.ok(created);
      return await sha256(name);
    };
    const right = await code("BCDFGHJK");
    const wrong = await sha256("ZZZZZZZZ");

    await t.step(
      "20 wrong codes from one session and address, 30 at once: 20 counted",
      async () => {
        const keys = [await key("session A"), await key("address X")];
        const outcomes = await Promise.all(
          Array.from({ length: 30 }, () => devices.attempt(wrong, keys, at(1000), guessLimit)),
        );
        assert.equal(outcomes.filter((o) => o === undefined).length, 20);
        assert.equal(outcomes.filter((o) => o === "blocked").length, 10);
        // Right or wrong, refused now.
        assert.equal(await devices.attempt(right, keys, at(2000), guessLimit), "blocked");
      },
    );

    await t.step("the session counts alone, and so does the address", async () => {
      const [a, b, x, y] = await Promise.all(
        ["session A", "session B", "address X", "address Y"].map(key),
      );
      assert.equal(await devices.attempt(right, [a!, y!], at(3000), guessLimit), "blocked");
      assert.equal(await devices.attempt(right, [b!, x!], at(3000), guessLimit), "blocked");
      const row = await devices.attempt(right, [b!, y!], at(3000), guessLimit);
      assert.equal(typeof row, "object");
    });

    await t.step("the cool-down: 5 minutes from the 20th wrong code", async () => {
      const keys = [await key("session A"), await key("address X")];
      assert.equal(await devices.attempt(right, keys, at(1000 + 299_999), guessLimit), "blocked");
      assert.equal(
        typeof await devices.attempt(right, keys, at(1000 + 300_000), guessLimit),
        "object",
      );
    });

    await t.step(
      "within a minute, sliding: 19 then 1 at 59 s blocks; at 61 s it does not",
      async () => {
        const c = [await key("session C")];
        const d = [await key("session D")];
        for (let i = 0; i < 19; i++) {
          assert.equal(await devices.attempt(wrong, c, at(10_000), guessLimit), undefined);
          assert.equal(await devices.attempt(wrong, d, at(10_000), guessLimit), undefined);
        }
        assert.equal(await devices.attempt(wrong, c, at(69_000), guessLimit), undefined);
        assert.equal(await devices.attempt(right, c, at(69_001), guessLimit), "blocked");
        assert.equal(await devices.attempt(wrong, d, at(71_000), guessLimit), undefined);
        assert.equal(typeof await devices.attempt(right, d, at(71_001), guessLimit), "object");
        // Not a code at all counts as a wrong one.
        const e = [await key("session E")];
        for (let i = 0; i < 20; i++) await devices.attempt(undefined, e, at(80_000), guessLimit);
        assert.equal(await devices.attempt(right, e, at(80_001), guessLimit), "blocked");
      },
    );

    await t.step(
      "polling: slow_down grows the interval by 5 s; another client's is unknown",
      async () => {
        const hash = await sha256("device BCDFGHJK");
        assert.deepEqual(await devices.poll(hash, "cli_other", at(10_000)), { kind: "unknown" });
        assert.equal((await devices.poll(hash, "cli_a", at(4_999))).kind, "slow_down");
        assert.equal((await devices.poll(hash, "cli_a", at(14_998))).kind, "slow_down");
        // The interval is now 15 s, from the poll at 14.998 s.
        assert.equal((await devices.poll(hash, "cli_a", at(29_997))).kind, "slow_down");
        const ready = await devices.poll(hash, "cli_a", at(29_997 + 20_000));
        assert.equal(ready.kind, "ready");
        assert.equal(ready.kind === "ready" && ready.row.interval_seconds, 20);
        assert.equal((await devices.poll(hash, "cli_a", at(600_000))).kind, "expired");
        // Redeemed, then polled again: a replay while the code lives, only expired after, as
        // node-oidc-provider answers (a stale code ends no grant).
        await sql`update token.device_codes set redeemed_at = ${at(50_000)}
          where device_code_hash = ${hash}`;
        assert.equal((await devices.poll(hash, "cli_a", at(599_999))).kind, "redeemed");
        assert.equal((await devices.poll(hash, "cli_a", at(600_000))).kind, "expired");
      },
    );

    await t.step(
      "two polls at once, on time: one is answered, the other is slow_down and counted",
      async () => {
        await code("FGHJKLMN");
        const hash = await sha256("device FGHJKLMN");
        // The row held until a poll queues for it: the two then take it in turn, however sent.
        const held = sql.begin(async (tx) => {
          await tx`select 1 from token.device_codes where device_code_hash = ${hash} for update`;
          const polls = [0, 1].map(() => devices.poll(hash, "cli_a", at(5_000)));
          await untilWaitingForLock(sql, "the polls to wait for the row");
          return polls;
        });
        const kinds = (await Promise.all(await held)).map((p) => p.kind).sort();
        assert.deepEqual(kinds, ["ready", "slow_down"]);
        const [row] = await sql<{ interval_seconds: number }[]>`
          select interval_seconds from token.device_codes where device_code_hash = ${hash}`;
        assert.equal(row!.interval_seconds, 10);
      },
    );

    await t.step("a decision is taken once, and never after expiry", async () => {
      const other = await code("CDFGHJKL");
      const holder = { installationId: "ins_1", accountId: "acct", principalId: "prn" };
      assert.equal(await devices.decided(other), false);
      assert.equal(await devices.approve(other, at(1000), () => Promise.resolve(holder)), true);
      assert.equal(await devices.decided(other), true);
      assert.equal(await devices.deny(other, at(1001)), false);
      assert.equal(await devices.approve(other, at(1002), () => Promise.resolve(holder)), false);
      const late = await code("DFGHJKLM");
      assert.equal(await devices.deny(late, at(600_000)), false);
      assert.equal(await devices.approve(late, at(600_000), () => Promise.resolve(holder)), false);
      assert.equal(await devices.decided(late), false);
      assert.equal(await devices.deny(late, at(599_999)), true);
      assert.equal(await devices.decided(late), true);
      assert.equal(await devices.decided(wrong), false);
      // The same user code twice: the second is refused (a new one is drawn).
      assert.equal(
        await devices.create({
          device_code_hash: await sha256("another device"),
          user_code_hash: late,
          client_id: "cli_a",
          project_id: "p1",
          scopes: [],
          created_at: at(0),
          expires_at: at(600_000),
          interval_seconds: 5,
          last_polled_at: at(0),
        }),
        false,
      );
    });
  } finally {
    await sql.end();
    await db.drop();
  }
});
