/** hmacSha256 is node:crypto's createHmac, for any key and message, short or long. */

import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import fc from "fast-check";
import { hmacSha256 } from "./hash.ts";

const keys = fc.oneof(
  fc.string({ minLength: 1, maxLength: 100 }),
  fc.string({ unit: "grapheme", maxLength: 80 }),
  fc.uint8Array({ minLength: 1, maxLength: 200 }),
);
const messages = fc.oneof(
  fc.string({ maxLength: 200 }),
  fc.string({ unit: "grapheme", maxLength: 100 }),
  // Past the key's own buffer (4096 bytes): hashed in buffers of their own.
  fc.string({ minLength: 4000, maxLength: 5000 }),
  fc.string({ unit: "grapheme", minLength: 1400, maxLength: 1500 }),
);

Deno.test("hmacSha256(): createHmac's MAC, as bytes and in base64, message after message", () => {
  fc.assert(
    fc.property(keys, fc.array(messages, { minLength: 1, maxLength: 4 }), (key, texts) => {
      const mac = hmacSha256(key);
      for (const text of texts) {
        const expected = createHmac("sha256", key).update(text, "utf8").digest();
        assert.deepEqual(new Uint8Array(mac.bytes(text)), new Uint8Array(expected));
        assert.equal(mac.base64(text), expected.toString("base64"));
      }
    }),
    { numRuns: 300 },
  );
});

Deno.test("hmacSha256(): each MAC in bytes is its own array", () => {
  const mac = hmacSha256("k".repeat(32));
  const first = mac.bytes("one");
  const kept = new Uint8Array(first);
  mac.bytes("two");
  assert.deepEqual(new Uint8Array(first), kept);
});
