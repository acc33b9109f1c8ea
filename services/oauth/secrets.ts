/**
 * Client secrets: generation, keyed hashing and constant-time verification.
 *
 * A secret is `ocs_` + 43 base64url characters (256 bits from the CSPRNG). Only its HMAC-SHA256
 * under CLIENT_SECRET_HMAC_KEY is stored: the value has full entropy, so no slow KDF is needed,
 * and the key keeps a copy of the database alone useless for checking guesses.
 *
 * The key can be changed without invalidating a secret: the old one goes to
 * CLIENT_SECRET_HMAC_PREVIOUS_KEYS, each hash is stored with the id of the key it was made under
 * ({@link keyIdOf}), and a secret that verifies under a previous key is hashed again under the
 * current one (by the caller, on that use), so that once every secret in use has been used, the
 * old key can go. A hash stored without an id (made before ids were kept) is tried under every key,
 * and gets the id of the one that matches.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { hmacSha256 } from "../../lib/platform/mod.ts";
import { createHmac, timingSafeEqual } from "node:crypto";

/** The prefix that makes a secret recognisable (to people and to secret scanners). */
export const secretPrefix = "ocs_";

/** A newly generated secret. */
export interface NewSecret {
  /** The plaintext, returned to the caller once. */
  secret: string;
  /** The non-secret hint stored and shown: prefix, stars, last four characters. */
  hint: string;
  /** The keyed hash stored in place of the plaintext, under the current key. */
  hash: Uint8Array;
}

/** A stored hash of a secret. */
export interface StoredHash {
  /** The hash, in hex. */
  hash: string;
  /** The id (hex) of the key it was made under; null: made before key ids were stored. */
  keyId: string | null;
}

/** What {@link SecretHasher.match} found. */
export interface SecretMatch {
  /** The index of the stored hash the secret matches, or -1. */
  index: number;
  /**
   * Whether that hash is made under the current key and says so; when not, the caller replaces
   * it with {@link SecretHasher.hash} of the secret and {@link SecretHasher.keyId}.
   */
  current: boolean;
}

/** Generates, hashes and verifies secrets under the current key, and under previous ones. */
export interface SecretHasher {
  /** The current key's id (hex), stored beside each hash made under it. */
  readonly keyId: string;
  /** The previous keys' ids (hex), in the order they were given. */
  readonly previousKeyIds: readonly string[];
  /** Generates a new secret, hashed under the current key. */
  generate(): NewSecret;
  /** The hash of `secret` under the current key. */
  hash(secret: string): Uint8Array;
  /**
   * The stored hash that `secret` matches, under the key its id names (every key when it names
   * none); compares in constant time with every stored hash that a configured key made.
   */
  match(secret: string, stored: readonly StoredHash[]): SecretMatch;
}

/**
 * A key's id: the first 8 bytes of an HMAC of a fixed label under it, in hex. It tells keys
 * apart and says nothing of the key or of any secret.
 */
export function keyIdOf(key: string): string {
  return createHmac("sha256", key).update("client secret hash key id").digest("hex").slice(0, 16);
}

/**
 * Creates the hasher over `key` (CLIENT_SECRET_HMAC_KEY) and the `previous` keys that secrets may
 * still be hashed under (CLIENT_SECRET_HMAC_PREVIOUS_KEYS); each at least 32 characters.
 */
export function createSecretHasher(key: string, previous: readonly string[] = []): SecretHasher {
  for (const k of [key, ...previous]) {
    if (k.length < 32) {
      throw new Error("Cannot hash secrets: a client-secret key must be at least 32 characters");
    }
  }
  const current = { id: keyIdOf(key), key };
  const keys = new Map([[current.id, current]]);
  for (const k of previous) {
    const id = keyIdOf(k);
    if (!keys.has(id)) keys.set(id, { id, key: k });
  }
  const all = [...keys.values()];
  const macs = new Map(all.map((k) => [k.key, hmacSha256(k.key)]));
  const hash = (secret: string, under = key): Uint8Array => macs.get(under)!.bytes(secret);
  return {
    keyId: current.id,
    previousKeyIds: all.slice(1).map((k) => k.id),
    generate() {
      const bytes = crypto.getRandomValues(new Uint8Array(32));
      const secret = secretPrefix + btoa(String.fromCharCode(...bytes))
        .replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
      return { secret, hint: `${secretPrefix}****${secret.slice(-4)}`, hash: hash(secret) };
    },
    hash: (secret) => hash(secret),
    match(secret, stored) {
      // The current key's hash is always made, so that a client without secrets costs as much.
      const candidates = new Map([[current.id, hash(secret)]]);
      const under = (k: { id: string; key: string }) => {
        let candidate = candidates.get(k.id);
        if (!candidate) candidates.set(k.id, candidate = hash(secret, k.key));
        return candidate;
      };
      let found: SecretMatch = { index: -1, current: false };
      for (const [i, s] of stored.entries()) {
        const bytes = Buffer.from(s.hash, "hex"); // native; a regex and parseInt per byte took 3 us
        const named = s.keyId === null ? undefined : keys.get(s.keyId);
        for (const k of s.keyId === null ? all : named ? [named] : []) {
          const candidate = under(k);
          if (bytes.length === candidate.length && timingSafeEqual(bytes, candidate)) {
            found = { index: i, current: s.keyId === current.id };
          }
        }
      }
      return found;
    },
  };
}

/** How many stored secrets each kind of key made (see {@link secretsByKey}). */
export interface SecretsByKey {
  /** Hashed under the current key. */
  current: number;
  /** Hashed under a previous key: each is hashed again on its next use. */
  previous: number;
  /** Hashed before key ids were kept: under whichever key was current then. */
  unstamped: number;
  /** Hashed under a key that is neither the current one nor a previous one: these never verify. */
  unverifiable: number;
}

/** What the counts of stored secrets by key id ("": none) mean for `hasher`'s keys. */
export function secretsByKey(hasher: SecretHasher, counts: Map<string, number>): SecretsByKey {
  const by: SecretsByKey = { current: 0, previous: 0, unstamped: 0, unverifiable: 0 };
  for (const [keyId, n] of counts) {
    if (keyId === "") by.unstamped += n;
    else if (keyId === hasher.keyId) by.current += n;
    else if (hasher.previousKeyIds.includes(keyId)) by.previous += n;
    else by.unverifiable += n;
  }
  return by;
}
