/**
 * Compact JWS (RFC 7515 3.1) as the token service reads them from clients: client assertions
 * (./client_assertion.ts) and DPoP proofs (./dpop.ts). Parsing refuses anything but three
 * base64url parts whose first two are JSON objects in UTF-8: bytes that are not UTF-8 refuse the
 * JWS, never becoming U+FFFD (RFC 7515 5.2 step 3, RFC 7519 7.2 step 10), and so does a byte order
 * mark (RFC 8259 8.1: no JSON text sent begins with one). Signatures are checked with node:crypto,
 * synchronously (37 us for an Ed25519 signature here, where WebCrypto's took 51).
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { createPublicKey, type KeyObject, verify } from "node:crypto";

/** A compact JWS, parsed; its signature not yet checked. */
export interface CompactJws {
  /** The protected header. */
  header: Record<string, unknown>;
  /** The payload, a JWT's claims. */
  claims: Record<string, unknown>;
  /** The signing input: `header.payload`, as sent. */
  input: Buffer;
  /** The signature's bytes. */
  signature: Buffer;
}

/** The key families of the JWS algorithms read here (RFC 7518 3.1, RFC 8037 3.1). */
export type KeyFamily = "EdDSA" | "ES256" | "RS256";

const compact = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

/** The JWS in `token`; undefined when it is not one, or longer than `maxLength`. */
export function parseJws(token: string, maxLength: number): CompactJws | undefined {
  if (token.length > maxLength || !compact.test(token)) return undefined;
  const [h, p, s] = token.split(".") as [string, string, string];
  const header = jsonObject(h);
  const claims = jsonObject(p);
  if (!header || !claims) return undefined;
  return {
    header,
    claims,
    input: Buffer.from(`${h}.${p}`),
    signature: Buffer.from(s, "base64url"),
  };
}

/**
 * Whether a JWS header's `typ` names one of `types` (media subtypes in lower case, such as
 * `dpop+jwt`), compared as RFC 7515 4.1.9 asks: in any case, with `application/` before it or not.
 */
export function typIs(typ: unknown, types: readonly string[]): boolean {
  if (typeof typ !== "string") return false;
  const lower = typ.toLowerCase();
  return types.includes(lower.startsWith("application/") ? lower.slice(12) : lower);
}

/** The public key of a JWK; null when it is not a valid one. */
export function importPublicJwk(jwk: Record<string, unknown>): KeyObject | null {
  try {
    // deno-lint-ignore no-explicit-any
    const key = createPublicKey({ key: jwk as any, format: "jwk" });
    return key.type === "public" ? key : null;
  } catch {
    return null;
  }
}

/** Whether `jws`'s signature verifies with `key`, a key of `family`. */
export function verifyJws(family: KeyFamily, key: KeyObject, jws: CompactJws): boolean {
  try {
    switch (family) {
      case "EdDSA":
        return jws.signature.length === 64 && verify(null, jws.input, key, jws.signature);
      case "ES256":
        // r || s (RFC 7518 3.4): node:crypto's `ieee-p1363`.
        return jws.signature.length === 64 &&
          verify("sha256", jws.input, { key, dsaEncoding: "ieee-p1363" }, jws.signature);
      case "RS256":
        return verify("sha256", jws.input, key, jws.signature);
    }
  } catch {
    return false; // a key of another type than the family says
  }
}

/** Strict UTF-8: invalid bytes throw; a BOM is kept, so that JSON.parse refuses it. */
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** The JSON object a base64url segment holds, or undefined. */
function jsonObject(segment: string): Record<string, unknown> | undefined {
  try {
    const value = JSON.parse(utf8.decode(Buffer.from(segment, "base64url")));
    return typeof value === "object" && value !== null && !Array.isArray(value) ? value : undefined;
  } catch {
    return undefined;
  }
}
