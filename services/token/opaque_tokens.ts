/**
 * Opaque credentials (authorization codes, refresh tokens): 256 random bits in base64url behind a
 * prefix that names their kind (`oac_` a code, `ort_` a refresh token; secret scanners and
 * people can tell them apart), stored only as their SHA-256.
 *
 * @module
 */

import { base64Encode } from "@bufbuild/protobuf/wire";

/** A new credential: `prefix` and 43 base64url characters (32 random bytes). */
export function randomToken(prefix: string): string {
  return prefix + base64Encode(crypto.getRandomValues(new Uint8Array(32)), "url");
}
