/**
 * Access tokens: JWTs per RFC 9068 (header `typ` `at+jwt`, EdDSA under the key named by `kid`),
 * signed with the key ring's current key and verified against every published key.
 *
 * Verified tokens are remembered until they expire: a resource server introspects the same token
 * again and again, and a signature check and the JWT's parsing are most of an introspection's CPU.
 * A remembered token is checked again at every use against its expiry and its key as the ring has
 * it now (one no longer published is verified again, and refused); revocation is not remembered
 * here (the caller looks it up every time). At most `cacheBytes` (2 MiB; a token counted with its
 * claims by `memoBytes`), taken from the memory budget (lib/platform/bounded_cache.ts).
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { KeyObject, sign } from "node:crypto";
import { decodeProtectedHeader, type JWTPayload, jwtVerify } from "jose";
import { createBoundedCache, memoBytes, type MemoryBudget } from "../../lib/platform/mod.ts";
import type { KeyRing } from "./keys.ts";

/** The claims of an access token this server issues. */
export interface AccessClaims extends JWTPayload {
  /** The client itself (client_credentials), or the installation's principal. */
  sub: string;
  /** The client's project. */
  aud: string;
  exp: number;
  iat: number;
  jti: string;
  client_id: string;
  /**
   * Space-separated scopes; absent when none were granted (a scope is one or more tokens, RFC 6749
   * 3.3, so there is no empty one to carry).
   */
  scope?: string;
  /** A token of an installation: the account it was installed in. */
  account_id?: string;
  /** A token of an installation: its id. */
  installation_id?: string;
  /** A token from a token exchange: the client that acts (RFC 8693 4.1). */
  act?: { sub: string };
  /**
   * A DPoP-bound token (RFC 9449 6.1): the RFC 7638 thumbprint of the key whose proofs must come
   * with it.
   */
  cnf?: { jkt: string };
}

/** What a new token's claims are made of; the rest (`iss`, times, `jti`) is added. */
export type NewAccessToken = Pick<
  AccessClaims,
  "sub" | "aud" | "client_id" | "scope" | "account_id" | "installation_id" | "act" | "cnf"
>;

/** A signed token. */
export interface SignedAccessToken {
  /** The JWT. */
  jwt: string;
  /** Its `jti`. */
  jti: string;
  /** Seconds it lives. */
  expiresIn: number;
  /** When it expires. */
  expiresAt: Date;
}

/** Signs and verifies access tokens. */
export interface AccessTokens {
  /** Signs a token with the current key. */
  sign(claims: NewAccessToken): Promise<SignedAccessToken>;
  /**
   * The claims of a token this server signed, under a key still published, that has not expired,
   * written as it was issued (its signature's base64url canonical); undefined for anything else
   * (revocation is not looked at here).
   */
  verify(token: string): Promise<AccessClaims | undefined>;
}

/** Options of {@link createAccessTokens}. */
export interface AccessTokenOptions {
  /** The signing keys. */
  keys: KeyRing;
  /** The `iss` of every token. */
  issuer: string;
  /** Lifetime of a token, in seconds. */
  ttlSeconds: number;
  /** The clock (ms since the epoch). */
  now: () => number;
  /** The most bytes of verified tokens to remember (default 2 MiB). */
  cacheBytes?: number | undefined;
  /** The process's memory budget, which the remembered tokens are counted in. */
  budget?: MemoryBudget | undefined;
}

/** Creates the signer and verifier. */
export function createAccessTokens(options: AccessTokenOptions): AccessTokens {
  const { keys, issuer, now } = options;
  const verified = createBoundedCache({
    maxBytes: options.cacheBytes ?? 2 * 1024 * 1024,
    budget: options.budget,
  }).region<{ claims: AccessClaims; exp: number; kid: string; publicKey: CryptoKey }>();
  return {
    async sign(claims) {
      await keys.ready();
      const key = keys.signing();
      const iat = Math.floor(now() / 1000);
      const exp = iat + options.ttlSeconds;
      const jti = crypto.randomUUID();
      const payload: JWTPayload = { client_id: claims.client_id };
      if (claims.scope) payload.scope = claims.scope;
      if (claims.account_id !== undefined) payload.account_id = claims.account_id;
      if (claims.installation_id !== undefined) payload.installation_id = claims.installation_id;
      if (claims.act !== undefined) payload.act = claims.act;
      if (claims.cnf !== undefined) payload.cnf = { jkt: claims.cnf.jkt };
      Object.assign(payload, { iss: issuer, sub: claims.sub, aud: claims.aud, iat, exp, jti });
      const jwt = signJwt({ alg: key.alg, typ: "at+jwt", kid: key.kid }, payload, key.privateKey!);
      return { jwt, jti, expiresIn: exp - iat, expiresAt: new Date(exp * 1000) };
    },

    async verify(token) {
      if (token.length > 8192) return undefined;
      await keys.ready();
      const hit = verified.get(token);
      if (hit) {
        // Expired, or signed by a key no longer published (or no longer the same): verified
        // again, and refused.
        if (hit.exp * 1000 > now() && keys.byKid(hit.kid)?.publicKey === hit.publicKey) {
          return hit.claims;
        }
        verified.delete(token);
      }
      try {
        // One token, one text: base64url decoding drops the signature's last bits, so that other
        // texts of the token would verify too, and miss whatever is kept by the token's text.
        const signature = token.slice(token.lastIndexOf(".") + 1);
        if (Buffer.from(signature, "base64url").toString("base64url") !== signature) return;
        const { kid } = decodeProtectedHeader(token);
        const key = typeof kid === "string" ? keys.byKid(kid) : undefined;
        if (!key) return undefined;
        const { payload } = await jwtVerify(token, key.publicKey, {
          issuer,
          typ: "at+jwt",
          algorithms: [key.alg],
          currentDate: new Date(now()),
          requiredClaims: ["sub", "aud", "exp", "iat", "jti", "client_id"],
        });
        if (typeof payload.aud !== "string" || typeof payload.client_id !== "string") return;
        if (!isUuid(payload.jti!)) return undefined;
        const claims = payload as AccessClaims;
        verified.set(
          token,
          { claims, exp: claims.exp, kid: key.kid, publicKey: key.publicKey },
          memoBytes(token, claims),
        );
        return claims;
      } catch {
        return undefined;
      }
    },
  };
}

/** Node's KeyObject of each private key, made once (the ring's keys live as long as they sign). */
const keyObjects = new WeakMap<CryptoKey, KeyObject>();

/**
 * A compact JWS (RFC 7515) of `payload`, signed in one synchronous call: node:crypto's Ed25519
 * signature took 31 us here where WebCrypto's (through jose) took 72, a fifth of a grant's CPU in
 * the token service. ES256 signatures are in the JWS form (r || s, RFC 7518 3.4).
 */
function signJwt(header: Record<string, string>, payload: JWTPayload, key: CryptoKey): string {
  let keyObject = keyObjects.get(key);
  if (!keyObject) keyObjects.set(key, keyObject = KeyObject.from(key));
  const input = `${base64url(JSON.stringify(header))}.${base64url(JSON.stringify(payload))}`;
  const signature = header.alg === "EdDSA"
    ? sign(null, Buffer.from(input), keyObject)
    : sign("sha256", Buffer.from(input), { key: keyObject, dsaEncoding: "ieee-p1363" });
  return `${input}.${signature.toString("base64url")}`;
}

const base64url = (text: string) => Buffer.from(text).toString("base64url");

function isUuid(value: string): boolean {
  return /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(value);
}
