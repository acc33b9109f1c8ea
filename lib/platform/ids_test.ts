/**
 * Tests of lib/platform/ids.ts. Where time matters, the generators run on a clock of the test's own (a
 * fixed instant, or one that goes back), so the results are the same on any day.
 *
 * @module
 */

import assert from "node:assert/strict";
import { idKind, uuidTime, uuidv7Bytes, uuidv7Generator } from "./ids.ts";

const clients = idKind("cli");

/** The first 48 bits of a UUIDv7: its Unix milliseconds. */
function timeOf(bytes: Uint8Array): number {
  let ms = 0;
  for (let i = 0; i < 6; i++) ms = ms * 256 + bytes[i]!;
  return ms;
}

/** The 12-bit counter in rand_a. */
const counterOf = (bytes: Uint8Array) => ((bytes[6]! & 0x0f) << 8) | bytes[7]!;

const hex = (bytes: Uint8Array) =>
  Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");

Deno.test("idKind().generate() returns a TypeID whose UUID round-trips", () => {
  const { id, uuid } = clients.generate();
  assert.match(id, /^cli_[0-7][0-9a-hjkmnp-tv-z]{25}$/);
  assert.match(uuid, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.equal(clients.toUuid(id), uuid);
  assert.equal(clients.fromUuid(uuid), id);
});

Deno.test("idKind().generate() ids sort by creation, also within one millisecond", () => {
  // A clock that stands still: every id after the first comes from the counter.
  const kind = idKind("cli", uuidv7Generator(() => Date.UTC(2030, 0, 1)));
  const ids = Array.from({ length: 5000 }, () => kind.generate());
  for (let i = 1; i < ids.length; i++) {
    assert.ok(ids[i - 1]!.id < ids[i]!.id, `${ids[i - 1]!.id} < ${ids[i]!.id}`);
    assert.ok(ids[i - 1]!.uuid < ids[i]!.uuid);
  }
  // 5000 ids in one "millisecond" overflow the 12-bit counter: the time moves on by a little.
  const last = uuidTime(ids.at(-1)!.uuid).getTime();
  assert.ok(last > Date.UTC(2030, 0, 1) && last <= Date.UTC(2030, 0, 1) + 5, `${last}`);
});

Deno.test("uuidv7Generator() encodes its clock's time in the first 48 bits", () => {
  for (
    const ms of [0, 1, Date.UTC(2026, 10, 21, 12, 0, 0, 123), Date.UTC(9999, 11, 31), 2 ** 48 - 1]
  ) {
    const bytes = uuidv7Generator(() => ms)();
    assert.equal(timeOf(bytes), ms, `${ms}`);
    assert.equal(bytes[6]! >>> 4, 7, "version 7");
    assert.equal(bytes[8]! >>> 6, 0b10, "RFC 9562 variant");
  }
});

Deno.test("uuidv7Generator() ids increase when the clock stands still or goes back", () => {
  let now = Date.UTC(2030, 5, 1);
  const next = uuidv7Generator(() => now);
  const first = next();
  const same = next();
  assert.equal(timeOf(same), now);
  assert.equal(counterOf(same), counterOf(first) + 1, "the same millisecond: the counter counts");
  now -= 60_000; // the clock is set back a minute
  const back = next();
  assert.equal(timeOf(back), Date.UTC(2030, 5, 1), "the last time is kept");
  assert.ok(hex(same) < hex(back));
  now += 120_000;
  const ahead = next();
  assert.equal(timeOf(ahead), now, "a later clock is used as it is");
  assert.ok(hex(back) < hex(ahead));
  assert.ok(counterOf(ahead) < 0x800, "a new millisecond seeds the counter below half its range");
});

Deno.test("a generator on its own clock leaves the process-wide one alone", () => {
  const before = uuidv7Bytes();
  uuidv7Generator(() => 2 ** 48 - 1)(); // the end of UUIDv7 time
  const after = uuidv7Bytes();
  assert.ok(timeOf(after) < 2 ** 48 - 1, "the process-wide ids did not jump to the future");
  assert.ok(hex(before) < hex(after));
});

Deno.test("the default generator reads the system clock", () => {
  // Compares the process clock with itself, so it holds on any day and with the clock shifted.
  const before = Date.now();
  const at = uuidTime(idKind("cli").generate().uuid).getTime();
  const after = Date.now();
  assert.ok(before <= at && at <= after, `${before} <= ${at} <= ${after}`);
});

Deno.test("idKind().toUuid() rejects other kinds and malformed text", () => {
  const { id } = clients.generate();
  const secrets = idKind("sec");
  assert.equal(secrets.toUuid(id), undefined);
  assert.equal(clients.toUuid(id.toUpperCase()), undefined);
  assert.equal(clients.toUuid(id.slice(0, -1)), undefined);
  assert.equal(clients.toUuid(id + "0"), undefined);
  assert.equal(clients.toUuid("cli_8" + id.slice(5)), undefined); // overflows 128 bits
  assert.equal(clients.toUuid("cli_" + "u".repeat(26)), undefined); // u is not base32
  assert.equal(clients.toUuid(""), undefined);
});

Deno.test("fromUuid and toUuid are inverse on any UUID, every byte value included", () => {
  const uuids = Array.from({ length: 2000 }, () => crypto.randomUUID());
  uuids.push("00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff");
  for (const uuid of uuids) {
    const id = clients.fromUuid(uuid);
    assert.match(id, /^cli_[0-7][0-9a-hjkmnp-tv-z]{25}$/);
    assert.equal(clients.toUuid(id), uuid);
  }
  assert.notEqual(clients.fromUuid(uuids[0]!), clients.fromUuid(uuids[1]!));
});

Deno.test("uuidTime() reads the creation time out of a UUIDv7", () => {
  const at = Date.UTC(2031, 2, 4, 5, 6, 7, 890);
  const { uuid } = idKind("cli", uuidv7Generator(() => at)).generate();
  assert.equal(uuidTime(uuid).getTime(), at);
  assert.equal(
    uuidTime("0190a3c4-5e6f-7000-8000-000000000000").toISOString(),
    "2024-07-11T21:47:53.839Z",
  );
});
