/**
 * Client secrets: generation, keyed hashing and constant-time verification.
 *
 * A secret is `ocs_` + 43 base64url characters (256 bits from the CSPRNG). Only its HMAC-SHA256
 * under CLIENT_SECRET_HMAC_KEY is stored: the value has full entropy, so no slow KDF is needed,
 * and the key keeps a copy of the database alone useless for checking guesses.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { createHmac, timingSafeEqual } from "node:crypto";

/** The prefix that makes a secret recognisable (to people and to secret scanners). */
export const secretPrefix = "ocs_";

/** A newly generated secret. */
export interface NewSecret {
  /** The plaintext, returned to the caller once. */
  secret: string;
  /** The non-secret hint stored and shown: prefix, stars, last four characters. */
  hint: string;
  /** The keyed hash stored in place of the plaintext. */
  hash: Uint8Array;
}

/** Generates, hashes and verifies secrets under one key. */
export interface SecretHasher {
  /** Generates a new secret. */
  generate(): NewSecret;
  /**
   * The index of the stored hash (hex) that `secret` matches, or -1; compares every one in
   * constant time.
   */
  match(secret: string, hashesHex: readonly string[]): number;
}

/** Creates the hasher; the key must be at least 32 characters. */
export function createSecretHasher(key: string): SecretHasher {
  if (key.length < 32) {
    throw new Error("Cannot hash secrets: CLIENT_SECRET_HMAC_KEY must be at least 32 characters");
  }
  const hash = (secret: string): Uint8Array =>
    createHmac("sha256", key).update(secret, "utf8").digest();
  return {
    generate() {
      const bytes = crypto.getRandomValues(new Uint8Array(32));
      const secret = secretPrefix + btoa(String.fromCharCode(...bytes))
        .replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
      return { secret, hint: `${secretPrefix}****${secret.slice(-4)}`, hash: hash(secret) };
    },
    match(secret, hashesHex) {
      const candidate = hash(secret);
      let found = -1;
      for (const [i, hex] of hashesHex.entries()) {
        const stored = Buffer.from(hex, "hex"); // native; a regex and parseInt per byte took 3 us
        if (stored.length === candidate.length && timingSafeEqual(stored, candidate)) found = i;
      }
      return found;
    },
  };
}
