/**
 * The scratch buffer of ./encode.ts changes how bytes are written, never which: every message
 * encodes to protobuf-es's own bytes, results never share memory, and a writer that fails does
 * not keep the buffer from the next message.
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { BinaryWriter } from "@bufbuild/protobuf/wire";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { type Client, ClientSchema } from "../../gen/registry/oauth/v1/client_pb.ts";
import { encodeMessage, lengthPrefixed, scratchBytes, scratchLent } from "./encode.ts";

/** protobuf-es's bytes as without the patch: the scratch buffer held by another writer. */
function plainBytes(message: Client): Uint8Array {
  const holder = new BinaryWriter().uint32(1); // holds the scratch buffer until its finish()
  assert.ok(scratchLent());
  try {
    return toBinary(ClientSchema, message);
  } finally {
    holder.finish();
  }
}

const text = fc.oneof(fc.string(), fc.string({ unit: "grapheme", maxLength: 200 }));
const clients = fc.record({
  id: text,
  projectId: text,
  name: fc.oneof(text, fc.string({ minLength: 70_000, maxLength: 70_100 })),
  type: fc.integer({ min: 0, max: 3 }),
  redirectUris: fc.array(text, { maxLength: 12 }),
  javascriptOrigins: fc.array(text, { maxLength: 3 }),
  status: fc.integer({ min: 0, max: 2 }),
  createdAt: fc.option(fc.integer({ min: 0, max: 4e12 }), { nil: undefined }),
}).map(({ createdAt, ...fields }) =>
  create(ClientSchema, {
    ...fields,
    createdAt: createdAt === undefined ? undefined : timestampFromMs(createdAt),
  })
);

Deno.test("encodeMessage(): protobuf-es's own bytes, for any client, small or past the scratch buffer", () => {
  fc.assert(
    fc.property(clients, (client) => {
      const bytes = encodeMessage(ClientSchema, client);
      assert.deepEqual(bytes, plainBytes(client));
      assert.ok(!scratchLent());
      assert.deepEqual(fromBinary(ClientSchema, bytes), client);
    }),
    { numRuns: 300 },
  );
});

Deno.test("encodeMessage(): each result is its own copy, untouched by the next message", () => {
  const first = encodeMessage(ClientSchema, create(ClientSchema, { id: "a".repeat(300) }));
  const kept = first.slice();
  const second = encodeMessage(ClientSchema, create(ClientSchema, { id: "b".repeat(300) }));
  assert.deepEqual(first, kept);
  assert.notEqual(first.buffer, second.buffer);
  assert.ok(first.buffer.byteLength < scratchBytes);
});

Deno.test("encodeMessage(): a message that cannot be encoded throws and leaves the buffer free", () => {
  // An int32 out of range: protobuf-es refuses it while writing.
  const bad = create(ClientSchema, { id: "x", type: 2 ** 40 });
  assert.throws(() => encodeMessage(ClientSchema, bad));
  assert.ok(!scratchLent());
  // toBinary itself leaves it held (its writer never finished); the next message still encodes
  // right, into buffers of its own, and encodeMessage frees it again.
  assert.throws(() => toBinary(ClientSchema, bad));
  assert.ok(scratchLent());
  const client = create(ClientSchema, { id: "y", redirectUris: ["https://example.com/cb"] });
  assert.deepEqual(fromBinary(ClientSchema, toBinary(ClientSchema, client)), client);
  assert.deepEqual(encodeMessage(ClientSchema, client), toBinary(ClientSchema, client));
  assert.ok(!scratchLent());
});

Deno.test("lengthPrefixed(): the flag byte, the length in 32 bits big-endian, the message", () => {
  const message = new Uint8Array(70_000).fill(7);
  const framed = lengthPrefixed(message);
  assert.deepEqual([...framed.subarray(0, 5)], [0, 0x00, 0x01, 0x11, 0x70]);
  assert.deepEqual(framed.subarray(5), message);
  assert.deepEqual([...lengthPrefixed(new Uint8Array(0))], [0, 0, 0, 0, 0]);
});
