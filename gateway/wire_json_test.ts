import assert from "node:assert/strict";
import { create, type DescMessage, fromBinary, type Message, toBinary } from "@bufbuild/protobuf";
import { randomMessage, seeded } from "../lib/testing/mod.ts";
import { CoreService } from "../gen/registry/core/v1/core_service_pb.ts";
import { OAuthRegistryService } from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { TokenService } from "../gen/registry/token/v1/token_service_pb.ts";
import { ListClientsResponseSchema } from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { encodeMessage } from "./json_codec.ts";
import { wireJsonSupported, wireToJson } from "./wire_json.ts";

/** The usual way: decode, encode, stringify. */
function usual(schema: DescMessage, bytes: Uint8Array): string {
  return JSON.stringify(encodeMessage(schema, fromBinary(schema, bytes)));
}

/** Every message type the services answer with. */
const outputs = [
  ...new Set(
    [OAuthRegistryService, CoreService, TokenService].flatMap((s) =>
      s.methods.map((m) => m.output)
    ),
  ),
];

/** The same answer both ways, or `undefined` from the wire way and a failure of the usual one. */
function same(schema: DescMessage, bytes: Uint8Array): void {
  const fast = wireToJson(schema, bytes);
  let slow: string | Error;
  try {
    slow = usual(schema, bytes);
  } catch (error) {
    slow = error as Error;
  }
  if (fast === undefined) return;
  assert(
    typeof slow === "string",
    `the usual way failed where the wire way did not: ${slow} ${schema.typeName} ${bytes}`,
  );
  assert.deepEqual(new TextDecoder().decode(fast), slow);
}

Deno.test("wire JSON: the services' lists and most answers are written from the wire", () => {
  assert(wireJsonSupported(ListClientsResponseSchema));
  const supported = outputs.filter(wireJsonSupported);
  assert(supported.length > outputs.length / 2, `${supported.length} of ${outputs.length}`);
});

Deno.test("wire JSON: random messages of every answer type read as the usual way reads them", () => {
  const rnd = seeded(20261130);
  let written = 0;
  for (const schema of outputs.filter(wireJsonSupported)) {
    for (let i = 0; i < 60; i++) {
      const message = randomMessage(schema, rnd) as Message;
      let bytes: Uint8Array;
      try {
        bytes = toBinary(schema, message);
      } catch {
        continue;
      }
      let slow: string | undefined;
      try {
        slow = usual(schema, bytes);
      } catch {
        slow = undefined;
      }
      const fast = wireToJson(schema, bytes);
      if (slow === undefined) {
        assert.deepEqual(fast, undefined, `${schema.typeName}: wrote what has no JSON form`);
        continue;
      }
      // Valid bytes of a valid message: always written from the wire.
      assert(fast !== undefined, `${schema.typeName}: not written from the wire`);
      assert.deepEqual(new TextDecoder().decode(fast), slow, schema.typeName);
      written++;
      // Merged messages, unknown fields, truncated and flipped bytes: the same, or the usual way.
      const other = toBinary(schema, randomMessage(schema, rnd) as Message);
      const merged = new Uint8Array(bytes.length + other.length);
      merged.set(bytes);
      merged.set(other, bytes.length);
      same(schema, merged);
      same(schema, Uint8Array.from([...bytes, 0xb8, 0x3e, 0x07, 0xc2, 0x3e, 0x01, 0x41]));
      same(schema, bytes.subarray(0, Math.floor(rnd() * bytes.length)));
      const flipped = bytes.slice();
      const at = Math.floor(rnd() * flipped.length);
      if (flipped.length > 0) flipped[at] = flipped[at]! ^ (1 << Math.floor(rnd() * 8));
      same(schema, flipped);
    }
  }
  assert(written > 500, `only ${written} written`);
});

Deno.test("wire JSON: strings are escaped as JSON.stringify escapes them, invalid UTF-8 is the usual way's error", () => {
  const schema = ListClientsResponseSchema;
  const all = Array.from({ length: 0x80 }, (_, i) => String.fromCharCode(i)).join("") +
    "é€😀\u2028\u2029\ufeff";
  const bytes = toBinary(schema, create(schema, { data: [{ name: all }] }));
  assert.deepEqual(new TextDecoder().decode(wireToJson(schema, bytes)!), usual(schema, bytes));
  // A client (data, 1) whose name (3) is an overlong "/", an encoded surrogate, a cut sequence,
  // a byte no sequence starts with.
  for (const bad of [[0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xe2, 0x82], [0xf5, 0x80, 0x80, 0x80]]) {
    const wire = Uint8Array.from([0x0a, bad.length + 2, 0x1a, bad.length, ...bad]);
    assert.deepEqual(wireToJson(schema, wire), undefined);
    assert.throws(() => usual(schema, wire), /not valid/);
  }
});

Deno.test("wire JSON: a timestamp out of range is left to the usual way, which refuses it", () => {
  const schema = ListClientsResponseSchema;
  const page = create(schema, { data: [{ name: "a", createdAt: { seconds: 10n ** 13n } }] });
  const bytes = toBinary(schema, page);
  assert.deepEqual(wireToJson(schema, bytes), undefined);
  assert.throws(() => usual(schema, bytes));
});
