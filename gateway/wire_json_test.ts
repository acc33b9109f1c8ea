import assert from "node:assert/strict";
import {
  create,
  type DescField,
  type DescMessage,
  fromBinary,
  type Message,
  ScalarType,
  toBinary,
} from "@bufbuild/protobuf";
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

/** A small deterministic generator (mulberry32), so that a failure can be replayed. */
function random(seed: number) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const pieces = [
  "a",
  "Z",
  " ",
  '"',
  "\\",
  "\n",
  "\t",
  "\u0000",
  "\u001f",
  "\u007f",
  "é",
  "€",
  "\u2028",
  "😀",
  "\ud800",
  "/",
  "<",
];

function fill(schema: DescMessage, rnd: () => number, depth: number): Message {
  const init: Record<string, unknown> = {};
  for (const field of schema.fields) {
    if (rnd() < 0.25) continue;
    if (field.oneof !== undefined && rnd() < 0.5) continue;
    const value = (one: () => unknown) =>
      field.fieldKind === "list" ? Array.from({ length: Math.floor(rnd() * 4) }, one) : one();
    const v = valueOf(field, rnd, depth);
    if (v === undefined) continue;
    const produced = value(() => valueOf(field, rnd, depth));
    if (field.oneof !== undefined) {
      init[field.oneof.localName] = { case: field.localName, value: v };
    } else init[field.localName] = produced;
  }
  return create(schema, init);
}

function valueOf(field: DescField, rnd: () => number, depth: number): unknown {
  if (field.fieldKind === "map") return undefined;
  if (field.message !== undefined) {
    if (field.message.typeName === "google.protobuf.Timestamp") {
      const seconds = rnd() < 0.02
        ? BigInt(Math.floor(rnd() * 1e13))
        : BigInt(Math.floor(rnd() * 4e9));
      return create(field.message, { seconds, nanos: Math.floor(rnd() * 1e9) });
    }
    if (depth > 3) return undefined;
    return fill(field.message, rnd, depth + 1);
  }
  if (field.enum !== undefined) {
    const values = field.enum.values;
    return rnd() < 0.1
      ? Math.floor(rnd() * 100)
      : values[Math.floor(rnd() * values.length)]!.number;
  }
  switch (field.scalar) {
    case ScalarType.STRING:
      return Array.from(
        { length: Math.floor(rnd() * 12) },
        () => pieces[Math.floor(rnd() * pieces.length)],
      ).join("");
    case ScalarType.BYTES:
      return Uint8Array.from({ length: Math.floor(rnd() * 9) }, () => Math.floor(rnd() * 256));
    case ScalarType.BOOL:
      return rnd() < 0.5;
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64: {
      const big = BigInt(Math.floor(rnd() * 2 ** 53)) * (rnd() < 0.3 ? 1024n : 1n);
      return rnd() < 0.3 ? -big : big;
    }
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return BigInt(Math.floor(rnd() * 2 ** 53)) * (rnd() < 0.3 ? 2048n : 1n);
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return rnd() < 0.05 ? NaN : (rnd() - 0.5) * 10 ** Math.floor(rnd() * 30);
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return Math.floor(rnd() * 2 ** 32);
    default:
      return Math.floor((rnd() - 0.5) * 2 ** 32);
  }
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
  const rnd = random(20261130);
  let written = 0;
  for (const schema of outputs.filter(wireJsonSupported)) {
    for (let i = 0; i < 60; i++) {
      const message = fill(schema, rnd, 0);
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
      const other = toBinary(schema, fill(schema, rnd, 0));
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
