/**
 * ./encode.ts writes protobuf-es's bytes: `toBinary(schema, create(schema, value))` for messages
 * and initializers of every type the services use, refuses what protobuf-es refuses, and gives each
 * result its own memory.
 */

import assert from "node:assert/strict";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { ClientSchema } from "../../gen/registry/oauth/v1/client_pb.ts";
import { ListClientsResponseSchema } from "../../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { randomMessage, seeded, serviceMessageTypes } from "../testing/mod.ts";
import { encodeMessage, lengthPrefixed } from "./encode.ts";

const types = serviceMessageTypes();

Deno.test("encodeMessage(): protobuf-es's bytes for random messages and initializers of every type", () => {
  const rnd = seeded(1130);
  let checked = 0;
  for (const schema of types) {
    for (let i = 0; i < 40; i++) {
      const value = randomMessage(schema, rnd, { init: i % 2 === 1, long: true });
      let expected: Uint8Array | Error;
      try {
        expected = toBinary(schema, create(schema, value));
      } catch (error) {
        expected = error as Error;
      }
      if (expected instanceof Error) {
        assert.throws(() => encodeMessage(schema, value), `${schema.typeName} was not refused`);
        continue;
      }
      assert.deepEqual(encodeMessage(schema, value), expected, schema.typeName);
      checked++;
    }
  }
  assert.ok(checked > 2_000, `only ${checked} checked`);
});

Deno.test("encodeMessage(): fields read with a message but not known to its type are written back", () => {
  const client = create(ClientSchema, { id: "a", name: "b" });
  const withUnknown = new Uint8Array([...toBinary(ClientSchema, client), 0xb8, 0x3e, 0x07]);
  const read = fromBinary(ClientSchema, withUnknown);
  assert.deepEqual(encodeMessage(ClientSchema, read), toBinary(ClientSchema, read));
  assert.deepEqual(encodeMessage(ClientSchema, read), withUnknown);
});

Deno.test("encodeMessage(): values protobuf-es refuses are refused, and others it takes are taken", () => {
  for (const type of [2 ** 40, 1.5, -1, "1", "x", true]) {
    const value = { id: "x", type } as unknown as Parameters<typeof create<typeof ClientSchema>>[1];
    let expected: Uint8Array | undefined;
    try {
      expected = toBinary(ClientSchema, create(ClientSchema, value));
    } catch {
      expected = undefined;
    }
    if (expected === undefined) assert.throws(() => encodeMessage(ClientSchema, value!));
    else assert.deepEqual(encodeMessage(ClientSchema, value!), expected);
  }
  // After a refusal, the next message is written from the start.
  const client = create(ClientSchema, { id: "y", redirectUris: ["https://example.com/cb"] });
  assert.deepEqual(encodeMessage(ClientSchema, client), toBinary(ClientSchema, client));
});

Deno.test("encodeMessage(): each result is its own copy, a large one included", () => {
  const first = encodeMessage(ClientSchema, { id: "a".repeat(300) });
  const kept = first.slice();
  const page = {
    data: Array.from({ length: 40 }, (_, i) => ({ id: `${i}`, name: "é".repeat(20_000) })),
  };
  const large = encodeMessage(ListClientsResponseSchema, page);
  assert.deepEqual(
    large,
    toBinary(ListClientsResponseSchema, create(ListClientsResponseSchema, page)),
  );
  const second = encodeMessage(ClientSchema, { id: "b".repeat(300) });
  assert.deepEqual(first, kept);
  assert.notEqual(first.buffer, second.buffer);
  assert.ok(first.buffer.byteLength < 1024);
});

Deno.test("lengthPrefixed(): the flag byte, the length in 32 bits big-endian, the message", () => {
  const message = new Uint8Array(70_000).fill(7);
  const framed = lengthPrefixed(message);
  assert.deepEqual([...framed.subarray(0, 5)], [0, 0x00, 0x01, 0x11, 0x70]);
  assert.deepEqual(framed.subarray(5), message);
  assert.deepEqual([...lengthPrefixed(new Uint8Array(0))], [0, 0, 0, 0, 0]);
});
