/**
 * sha256 and hmacSha256 are node:crypto's createHash and createHmac, for any key and message,
 * short or long, and at every length where SHA-256's padding takes one block or two.
 */

import assert from "node:assert/strict";
import { createHash, createHmac } from "node:crypto";
import fc from "fast-check";
import { hmacSha256, sha256 } from "./hash.ts";

const keys = fc.oneof(
  fc.string({ minLength: 1, maxLength: 100 }),
  fc.string({ unit: "grapheme", maxLength: 80 }),
  fc.uint8Array({ minLength: 1, maxLength: 200 }),
);
const messages = fc.oneof(
  fc.string({ maxLength: 200 }),
  fc.string({ unit: "grapheme", maxLength: 100 }),
  // Past the 4096 bytes of the module's own buffer: encoded into arrays of their own.
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

Deno.test("sha256(): createHash's digest at every length up to three blocks, and past 4096 bytes", () => {
  const bytes = crypto.getRandomValues(new Uint8Array(5000));
  for (const length of [...Array(200).keys(), 4095, 4096, 4097, 5000]) {
    const data = bytes.subarray(0, length);
    const expected = new Uint8Array(createHash("sha256").update(data).digest());
    assert.deepEqual(sha256(data), expected, `${length} bytes`);
    const text = "é".repeat(length >> 1) + "a".repeat(length & 1);
    assert.deepEqual(
      sha256(text),
      new Uint8Array(createHash("sha256").update(text).digest()),
      `${length} bytes of text`,
    );
  }
  // FIPS 180-4's examples (NIST's SHA256.pdf): "abc" and the two-block message.
  const hex = (b: Uint8Array) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  assert.equal(
    hex(sha256("abc")),
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
  );
  assert.equal(
    hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
    "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
  );
});

Deno.test("hmacSha256(): createHmac's MAC where the inner message's padding takes one block or two", () => {
  const mac = hmacSha256("k".repeat(40));
  for (let length = 0; length < 200; length++) {
    const text = "m".repeat(length);
    const expected = createHmac("sha256", "k".repeat(40)).update(text).digest();
    assert.deepEqual(mac.bytes(text), new Uint8Array(expected), `${length} bytes`);
    assert.equal(mac.base64(text), expected.toString("base64"), `${length} bytes`);
  }
  // RFC 4231 4.2, test case 1.
  const key = new Uint8Array(20).fill(0x0b);
  assert.equal(
    Array.from(hmacSha256(key).bytes("Hi There"), (x) => x.toString(16).padStart(2, "0")).join(""),
    "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
  );
});
