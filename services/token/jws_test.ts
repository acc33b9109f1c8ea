/**
 * The parsing of compact JWS (./jws.ts): three base64url parts whose first two are JSON objects in
 * UTF-8, strictly (RFC 7515 5.2, RFC 7519 7.2): bytes that are not UTF-8 refuse the JWS.
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { parseJws } from "./jws.ts";

const b64u = (bytes: Uint8Array | string) => Buffer.from(bytes).toString("base64url");
const json = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));

/** `{"k":"<bytes>"}`, the bytes as they are. */
function objectWith(bytes: number[]): Uint8Array {
  return Uint8Array.from([...Buffer.from('{"k":"'), ...bytes, ...Buffer.from('"}')]);
}

const header = json({ alg: "EdDSA" });
const claims = json({ jti: "j" });
const jws = (h: Uint8Array, c: Uint8Array) => `${b64u(h)}.${b64u(c)}.${b64u("sig")}`;

Deno.test("header and claims are read as UTF-8 JSON objects", () => {
  const parsed = parseJws(jws(header, claims), 4096);
  assert.deepEqual(parsed?.header, { alg: "EdDSA" });
  assert.deepEqual(parsed?.claims, { jti: "j" });
  // Multi-byte characters, up to four bytes.
  const text = "caf\u00e9 \u20ac \u{1f511}";
  const utf8 = parseJws(jws(header, objectWith([...new TextEncoder().encode(text)])), 4096);
  assert.equal(utf8?.claims.k, text);
  for (const bad of ["[1]", "null", '"x"', "{", "1"]) {
    assert.equal(parseJws(jws(header, Buffer.from(bad)), 4096), undefined, bad);
  }
});

Deno.test("bytes that are not UTF-8, or a byte order mark, refuse the JWS", () => {
  const invalid: [string, number[]][] = [
    ["0xFF", [0xff]],
    ["0xFE", [0xfe]],
    ["a lone continuation byte", [0x80]],
    ["an overlong encoding of /", [0xc0, 0xaf]],
    ["a UTF-16 surrogate", [0xed, 0xa0, 0x80]],
    ["past U+10FFFF", [0xf4, 0x90, 0x80, 0x80]],
    ["a truncated sequence", [0xe2, 0x82]],
  ];
  for (const [what, bytes] of invalid) {
    assert.equal(parseJws(jws(header, objectWith(bytes)), 4096), undefined, `claims: ${what}`);
    assert.equal(parseJws(jws(objectWith(bytes), claims), 4096), undefined, `header: ${what}`);
  }
  const bom = Uint8Array.from([0xef, 0xbb, 0xbf, ...claims]);
  assert.equal(parseJws(jws(header, bom), 4096), undefined, "a BOM before the claims");
});
