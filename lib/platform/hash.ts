/**
 * SHA-256 and HMAC-SHA-256, computed at once.
 *
 * @module
 */

import { createHash, hash } from "node:crypto";

/**
 * The SHA-256 of `data` (a string's UTF-8 bytes). node:crypto's, not Web Crypto's asynchronous
 * `digest`: about 5 µs of CPU a call against 40 (a loop of 20,000 codes); under load, 9.7% of the
 * token service's samples on a remembered consent's authorization were in `digest`.
 */
export function sha256(data: string | Uint8Array): Uint8Array {
  return new Uint8Array(createHash("sha256").update(data).digest());
}

/** HMAC-SHA-256 under one key: a message's MAC as bytes (a new array each) or in base64. */
export interface HmacSha256 {
  bytes(message: string): Uint8Array;
  base64(message: string): string;
}

const blockBytes = 64;
/** The longest message (UTF-8 bytes) hashed in the key's own buffer; a longer one gets its own. */
const inlineBytes = 4096;
const utf8 = new TextEncoder();

/**
 * HMAC-SHA-256 (RFC 2104) under `key` (a string's UTF-8 bytes), for many messages: the key's
 * padded blocks are made once, and each message is two one-shot `hash` calls of node:crypto over
 * buffers kept for the key. node:crypto's `createHmac` makes a key object and two hash objects a
 * call: 9.7 us a MAC of 80 characters against 5.0 this way (a loop of 100,000 here); it was 9.1%
 * of the token service's busy time on introspection, which keeps verified secrets by such a MAC.
 */
export function hmacSha256(key: string | Uint8Array): HmacSha256 {
  let k = typeof key === "string" ? utf8.encode(key) : key;
  if (k.length > blockBytes) k = new Uint8Array(createHash("sha256").update(k).digest());
  const inner = new Uint8Array(blockBytes + inlineBytes);
  const outer = new Uint8Array(blockBytes + 32);
  for (let i = 0; i < blockBytes; i++) {
    inner[i] = (k[i] ?? 0) ^ 0x36;
    outer[i] = (k[i] ?? 0) ^ 0x5c;
  }
  const message = inner.subarray(blockBytes);
  /** Writes H((K ^ ipad) || message) after the outer block. */
  const innerHash = (text: string) => {
    const { read, written } = utf8.encodeInto(text, message);
    const digest = read === text.length
      ? hash("sha256", inner.subarray(0, blockBytes + written), "buffer")
      : createHash("sha256").update(inner.subarray(0, blockBytes)).update(text).digest();
    outer.set(digest as Uint8Array, blockBytes);
  };
  return {
    bytes(text) {
      innerHash(text);
      return hash("sha256", outer, "buffer") as Uint8Array;
    },
    base64(text) {
      innerHash(text);
      return hash("sha256", outer, "base64");
    },
  };
}
