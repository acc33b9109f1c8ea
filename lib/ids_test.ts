import assert from "node:assert/strict";
import { idKind, uuidTime, uuidv7Bytes } from "./ids.ts";

const clients = idKind("cli");

Deno.test("idKind().generate() returns a TypeID whose UUID round-trips", () => {
  const { id, uuid } = clients.generate();
  assert.match(id, /^cli_[0-7][0-9a-hjkmnp-tv-z]{25}$/);
  assert.match(uuid, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.equal(clients.toUuid(id), uuid);
  assert.equal(clients.fromUuid(uuid), id);
});

Deno.test("idKind().generate() ids sort by creation, also within one millisecond", () => {
  const ids = Array.from({ length: 5000 }, () => clients.generate());
  for (let i = 1; i < ids.length; i++) {
    assert.ok(ids[i - 1]!.id < ids[i]!.id, `${ids[i - 1]!.id} < ${ids[i]!.id}`);
    assert.ok(ids[i - 1]!.uuid < ids[i]!.uuid);
  }
});

Deno.test("uuidv7Bytes() encodes the timestamp in the first 48 bits", () => {
  const ms = Date.UTC(2026, 10, 21, 12, 0, 0, 123);
  const bytes = uuidv7Bytes(ms + 10_000_000); // later than anything generated before
  let decoded = 0;
  for (let i = 0; i < 6; i++) decoded = decoded * 256 + bytes[i]!;
  assert.equal(decoded, ms + 10_000_000);
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
  // Ids stay increasing when the clock goes back (other tests here generate in the future), so a
  // new id's time is never before now.
  const before = Date.now();
  assert.ok(uuidTime(idKind("cli").generate().uuid).getTime() >= before);
  assert.equal(
    uuidTime("0190a3c4-5e6f-7000-8000-000000000000").toISOString(),
    "2024-07-11T21:47:53.839Z",
  );
});
