/**
 * SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), computed at once, in JavaScript for the short
 * inputs of requests (secrets, codes, refresh tokens); `sha256` hands inputs past 4 KiB to
 * node:crypto, while an HMAC's message of any length is hashed here (it goes on from the key's
 * midstate, which node:crypto cannot start from; the messages MACed are secrets, a few dozen bytes).
 *
 * Why not node:crypto for everything: under Deno each of its calls makes hash objects and buffers
 * outside V8's heap, a fixed cost of several microseconds that dwarfs hashing 100 bytes. In loops
 * of 200,000 here (several runs), a MAC of 89 bytes took 5.4 to 10.4 us through node:crypto's
 * `hash` over the key's padded blocks, 1.6 to 3.0 us in JavaScript from the key's two midstates;
 * the MAC was 6.4% of the token service's busy time on introspection (its verified-secret cache is
 * keyed by one). The compression function has no branch and no table lookup that depends on the
 * data. The tests compare every function here with node:crypto's, at every length where the
 * padding takes one block or two, and past the 4 KiB that are hashed here.
 *
 * @module
 */

import { createHash } from "node:crypto";

/** Inputs longer than this (bytes) are hashed by node:crypto, which is faster per byte. */
const inlineBytes = 4096;
const blockBytes = 64;

/** The round constants (FIPS 180-4 4.2.2). */
// deno-fmt-ignore
const K = Int32Array.of(
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
);
/** The initial hash value (FIPS 180-4 5.3.3). */
// deno-fmt-ignore
const initial = Int32Array.of(
  0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
);

const schedule = new Int32Array(64);

/** Runs the compression function over the 64-byte block of `bytes` at `at` (FIPS 180-4 6.2.2). */
function compress(h: Int32Array, bytes: Uint8Array, at: number): void {
  const w = schedule;
  for (let i = 0; i < 16; i++, at += 4) {
    w[i] = (bytes[at]! << 24) | (bytes[at + 1]! << 16) | (bytes[at + 2]! << 8) | bytes[at + 3]!;
  }
  for (let i = 16; i < 64; i++) {
    const x = w[i - 15]!, y = w[i - 2]!;
    const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
    const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
    w[i] = (w[i - 16]! + s0 + w[i - 7]! + s1) | 0;
  }
  let a = h[0]!, b = h[1]!, c = h[2]!, d = h[3]!, e = h[4]!, f = h[5]!, g = h[6]!, k = h[7]!;
  for (let i = 0; i < 64; i++) {
    const s1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
    const t1 = (k + s1 + ((e & f) ^ (~e & g)) + K[i]! + w[i]!) | 0;
    const s0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
    const t2 = (s0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
    k = g;
    g = f;
    f = e;
    e = (d + t1) | 0;
    d = c;
    c = b;
    b = a;
    a = (t1 + t2) | 0;
  }
  h[0] = (h[0]! + a) | 0;
  h[1] = (h[1]! + b) | 0;
  h[2] = (h[2]! + c) | 0;
  h[3] = (h[3]! + d) | 0;
  h[4] = (h[4]! + e) | 0;
  h[5] = (h[5]! + f) | 0;
  h[6] = (h[6]! + g) | 0;
  h[7] = (h[7]! + k) | 0;
}

const state = new Int32Array(8);
/** The last block or two of a message, padded. */
const tail = new Uint8Array(2 * blockBytes);
/** A string's UTF-8 bytes, when they fit. */
const text = new Uint8Array(inlineBytes);
const utf8 = new TextEncoder();

/**
 * Hashes `bytes[0, length)` into {@link state}, which has taken `before` bytes already, and pads
 * (FIPS 180-4 5.1.1): `state` is then the digest.
 */
function finish(bytes: Uint8Array, length: number, before: number): void {
  let at = 0;
  for (; length - at >= blockBytes; at += blockBytes) compress(state, bytes, at);
  let n = length - at;
  for (let i = 0; i < n; i++) tail[i] = bytes[at + i]!;
  tail[n++] = 0x80;
  const end = n > blockBytes - 8 ? 2 * blockBytes : blockBytes;
  tail.fill(0, n, end - 8);
  const bits = (before + length) * 8;
  const high = Math.floor(bits / 2 ** 32), low = bits >>> 0;
  tail[end - 8] = high >>> 24;
  tail[end - 7] = high >>> 16;
  tail[end - 6] = high >>> 8;
  tail[end - 5] = high;
  tail[end - 4] = low >>> 24;
  tail[end - 3] = low >>> 16;
  tail[end - 2] = low >>> 8;
  tail[end - 1] = low;
  compress(state, tail, 0);
  if (end > blockBytes) compress(state, tail, blockBytes);
}

/** Writes {@link state}'s eight words, big-endian, into `out` at `at`. */
function wordsInto(out: Uint8Array, at: number): void {
  for (let i = 0; i < 8; i++, at += 4) {
    const x = state[i]!;
    out[at] = x >>> 24;
    out[at + 1] = x >>> 16;
    out[at + 2] = x >>> 8;
    out[at + 3] = x;
  }
}

/** A string's UTF-8 bytes in {@link text} (their length), or undefined when they do not fit. */
function encoded(data: string): number | undefined {
  const { read, written } = utf8.encodeInto(data, text);
  return read === data.length ? written : undefined;
}

/** The SHA-256 of `data` (a string's UTF-8 bytes), a new array each call. */
export function sha256(data: string | Uint8Array): Uint8Array {
  const length = typeof data === "string" ? encoded(data) : data.length;
  if (length === undefined || length > inlineBytes) {
    return new Uint8Array(createHash("sha256").update(data).digest());
  }
  state.set(initial);
  finish(typeof data === "string" ? text : data, length, 0);
  const out = new Uint8Array(32);
  wordsInto(out, 0);
  return out;
}

/** HMAC-SHA-256 under one key: a message's MAC as bytes (a new array each) or in base64. */
export interface HmacSha256 {
  bytes(message: string): Uint8Array;
  base64(message: string): string;
}

const base64Codes = Uint8Array.from(
  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
  (c) => c.charCodeAt(0),
);
const base64Chars = new Uint16Array(44);

/** {@link state}'s digest in base64 with its padding (RFC 4648 4), as node:crypto gives it. */
function stateBase64(): string {
  const bytes = tail; // free again once a digest is in `state`
  wordsInto(bytes, 0);
  bytes[32] = bytes[33] = 0;
  for (let i = 0, j = 0; i < 33; i += 3) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8) | bytes[i + 2]!;
    base64Chars[j++] = base64Codes[n >>> 18]!;
    base64Chars[j++] = base64Codes[(n >>> 12) & 63]!;
    base64Chars[j++] = base64Codes[(n >>> 6) & 63]!;
    base64Chars[j++] = base64Codes[n & 63]!;
  }
  base64Chars[43] = 61; // "=": 32 bytes are 43 characters and one of padding
  return String.fromCharCode.apply(null, base64Chars as unknown as number[]);
}

/**
 * HMAC-SHA-256 (RFC 2104) under `key` (a string's UTF-8 bytes), for many messages: the states
 * after the key's inner and outer padded blocks are computed once, so a MAC of a message of up to
 * 55 bytes is three compressions (89 bytes, four) and no allocation but its result.
 */
export function hmacSha256(key: string | Uint8Array): HmacSha256 {
  let k = typeof key === "string" ? utf8.encode(key) : key;
  if (k.length > blockBytes) k = sha256(k);
  const pad = new Uint8Array(blockBytes);
  const midstate = (mask: number) => {
    for (let i = 0; i < blockBytes; i++) pad[i] = (k[i] ?? 0) ^ mask;
    state.set(initial);
    compress(state, pad, 0);
    return new Int32Array(state);
  };
  const inner = midstate(0x36);
  const outer = midstate(0x5c);
  /** Leaves H((K ^ opad) || H((K ^ ipad) || message)) in `state`. */
  const mac = (message: string) => {
    let bytes: Uint8Array = text;
    let length = encoded(message);
    if (length === undefined) length = (bytes = utf8.encode(message)).length;
    state.set(inner);
    finish(bytes, length, blockBytes);
    wordsInto(pad, 0);
    state.set(outer);
    finish(pad, 32, blockBytes);
  };
  return {
    bytes(message) {
      mac(message);
      const out = new Uint8Array(32);
      wordsInto(out, 0);
      return out;
    },
    base64(message) {
      mac(message);
      return stateBase64();
    },
  };
}
