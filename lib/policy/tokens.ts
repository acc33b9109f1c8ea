/**
 * Signs HS256 tokens with the claims the services read. Used by `deno task token`, the local
 * stack's printed dev token, and the tests.
 *
 * @module
 */

import { SignJWT } from "jose";

/** Claims of a token. */
export interface TokenClaims {
  /** `sub`. */
  sub: string;
  /** `projects`: project ids, or ["*"]. */
  projects?: string[];
  /** `account_id` (defaults to `sub` on the server). */
  accountId?: string;
  /** `space` (core area). */
  space?: string;
  /** `client_id`: the OAuth client the token was issued to (recorded in audit events). */
  clientId?: string;
  /** Lifetime in seconds (default 3600); negative for an already expired token. */
  ttlSeconds?: number;
  /** `iss`. */
  issuer?: string;
  /** `aud`. */
  audience?: string;
}

/** Returns a compact HS256 JWT. */
export async function signToken(secret: string, claims: TokenClaims): Promise<string> {
  const payload: Record<string, unknown> = {};
  if (claims.projects !== undefined) payload.projects = claims.projects;
  if (claims.accountId !== undefined) payload.account_id = claims.accountId;
  if (claims.space !== undefined) payload.space = claims.space;
  if (claims.clientId !== undefined) payload.client_id = claims.clientId;
  const now = Math.floor(Date.now() / 1000);
  let jwt = new SignJWT(payload)
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .setSubject(claims.sub)
    .setIssuedAt(now)
    .setExpirationTime(now + (claims.ttlSeconds ?? 3600));
  if (claims.issuer !== undefined) jwt = jwt.setIssuer(claims.issuer);
  if (claims.audience !== undefined) jwt = jwt.setAudience(claims.audience);
  return await jwt.sign(new TextEncoder().encode(secret));
}
