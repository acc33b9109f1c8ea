/**
 * Authentication: every API call carries `authorization: Bearer <JWT>`. The gateway and every
 * service verify it the same way (HS256 with a shared secret, or a JWKS), so an internal gRPC
 * caller cannot skip authorization. Verified tokens are remembered until they expire, because a
 * signature check costs about 40% of the cheapest request (measured: a Deno.serve + postgres.js
 * read did ~12,000 req/s with an HS256 check per request, ~21,000 without): at most `cacheBytes`
 * (2 MiB; each token counted with its claims by `memoBytes`), taken from the process's memory
 * budget (lib/platform/bounded_cache.ts).
 *
 * The HS256 secret can change without a token being refused: the old one goes to
 * AUTH_JWT_PREVIOUS_SECRETS, and a token whose signature does not verify with AUTH_JWT_SECRET is
 * tried with each of those (tokens are made with AUTH_JWT_SECRET only).
 *
 * @module
 */

import {
  Code,
  ConnectError,
  type ContextValues,
  createContextKey,
  type HandlerContext,
  type Interceptor,
} from "@connectrpc/connect";
import {
  createBoundedCache,
  memoBytes,
  type MemoryBudget,
  optionalSecretKey,
  optionalString,
  secretKeyList,
} from "../platform/mod.ts";
import { createRemoteJWKSet, errors, type JWTPayload, jwtVerify, type JWTVerifyGetKey } from "jose";

/** The authenticated caller of an RPC, from the token's claims. */
export interface Caller {
  /** The `sub` claim: the user or service acting. */
  readonly subject: string;
  /** The `account_id` claim, or `sub` when absent: the account the caller acts for. */
  readonly accountId: string;
  /** The `projects` claim: the project ids the caller administers, or "*" for all. */
  readonly projects: "*" | ReadonlySet<string>;
  /** The `space` claim (core area tenancy), if present. */
  readonly space: string | undefined;
  /** The `client_id` claim, when the token was issued to an OAuth client (audit, idempotency). */
  readonly clientId?: string | undefined;
  /** The `installation_id` claim, when the token was issued for an installation. */
  readonly installationId?: string | undefined;
}

/** How tokens are verified. Exactly one of `jwtSecret` and `jwksUrl` must be set. */
export interface AuthOptions {
  /** Shared HS256 secret (AUTH_JWT_SECRET), at least 32 characters. */
  jwtSecret?: string | undefined;
  /** Earlier HS256 secrets, which tokens may still be signed with (AUTH_JWT_PREVIOUS_SECRETS). */
  previousJwtSecrets?: readonly string[] | undefined;
  /** URL of a JSON Web Key Set for asymmetric tokens (AUTH_JWKS_URL). */
  jwksUrl?: string | undefined;
  /** Required `iss` claim, when set (AUTH_ISSUER). */
  issuer?: string | undefined;
  /** Required `aud` claim, when set (AUTH_AUDIENCE). */
  audience?: string | undefined;
  /** The most bytes of verified tokens to remember (default 2 MiB). */
  cacheBytes?: number | undefined;
  /** The process's memory budget, which the remembered tokens are counted in. */
  budget?: MemoryBudget | undefined;
}

/** Verifies an `authorization` header value and returns the caller, or throws UNAUTHENTICATED. */
export type TokenVerifier = (authorization: string | null) => Promise<Caller>;

const asymmetric = [
  "RS256",
  "RS384",
  "RS512",
  "PS256",
  "PS384",
  "PS512",
  "ES256",
  "ES384",
  "EdDSA",
];
const maxIdLength = 255;
/**
 * What an identifier may not hold: control characters (C0, DEL, C1), format characters (zero
 * widths, bidirectional overrides, the BOM) and line and paragraph separators. An identifier names
 * the caller in audit events and log lines, where an invisible or reordering character would make
 * one caller look like another.
 */
const unseenCharacters = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u;

function unauthenticated(message: string): ConnectError {
  return new ConnectError(message, Code.Unauthenticated);
}

/** What an identifier claim must be, for the refusal's message. */
const identifierRule =
  `must be a string of 1 to ${maxIdLength} characters, none of them control or invisible`;

function isIdentifier(value: unknown): value is string {
  return typeof value === "string" && value.length > 0 && value.length <= maxIdLength &&
    !unseenCharacters.test(value) && value.isWellFormed();
}

/** Reads the claims this service uses; throws UNAUTHENTICATED when one has the wrong shape. */
export function callerFromClaims(claims: JWTPayload): Caller {
  if (!isIdentifier(claims.sub)) {
    throw unauthenticated(`Token claim sub ${identifierRule}`);
  }
  const account = claims.account_id ?? claims.sub;
  if (!isIdentifier(account)) {
    throw unauthenticated(`Token claim account_id ${identifierRule}`);
  }
  const list = claims.projects ?? [];
  if (!Array.isArray(list) || !list.every(isIdentifier)) {
    throw unauthenticated("Token claim projects must be an array of strings");
  }
  const space = claims.space;
  if (space !== undefined && !isIdentifier(space)) {
    throw unauthenticated(`Token claim space ${identifierRule}`);
  }
  // Who a token acted for is recorded (and scopes idempotency keys), never relied on for access:
  // a malformed one is left out.
  const clientId = isIdentifier(claims.client_id) ? claims.client_id : undefined;
  const installationId = isIdentifier(claims.installation_id) ? claims.installation_id : undefined;
  return {
    subject: claims.sub,
    accountId: account,
    projects: list.includes("*") ? "*" : new Set(list),
    space,
    ...(clientId === undefined ? {} : { clientId }),
    ...(installationId === undefined ? {} : { installationId }),
  };
}

/** Creates the verifier used by the gateway and the services. */
export function createTokenVerifier(options: AuthOptions): TokenVerifier {
  let key: Uint8Array | JWTVerifyGetKey;
  let previousKeys: Uint8Array[] = [];
  let algorithms: string[];
  if (options.jwtSecret !== undefined && options.jwksUrl === undefined) {
    for (const secret of [options.jwtSecret, ...options.previousJwtSecrets ?? []]) {
      if (secret.length < 32) {
        throw new Error(
          "Cannot use AUTH_JWT_SECRET or AUTH_JWT_PREVIOUS_SECRETS: each must be at least 32 characters",
        );
      }
    }
    key = new TextEncoder().encode(options.jwtSecret);
    previousKeys = (options.previousJwtSecrets ?? []).map((s) => new TextEncoder().encode(s));
    algorithms = ["HS256"];
  } else if (options.jwksUrl !== undefined && options.jwtSecret === undefined) {
    key = createRemoteJWKSet(new URL(options.jwksUrl));
    algorithms = asymmetric;
  } else {
    throw new Error("Cannot verify tokens: set exactly one of AUTH_JWT_SECRET and AUTH_JWKS_URL");
  }
  if (options.jwtSecret === undefined && (options.previousJwtSecrets ?? []).length > 0) {
    throw new Error("Cannot use AUTH_JWT_PREVIOUS_SECRETS without AUTH_JWT_SECRET");
  }
  const verifyOptions = {
    algorithms,
    requiredClaims: ["sub", "exp"],
    ...(options.issuer !== undefined ? { issuer: options.issuer } : {}),
    ...(options.audience !== undefined ? { audience: options.audience } : {}),
  };
  const cache = createBoundedCache({
    maxBytes: options.cacheBytes ?? 2 * 1024 * 1024,
    budget: options.budget,
  }).region<{ caller: Caller; expiresAt: number }>();

  /** The token's claims, checked with the current key, else with each previous one. */
  const verified = async (token: string): Promise<JWTPayload> => {
    try {
      // deno-lint-ignore no-explicit-any
      return (await jwtVerify(token, key as any, verifyOptions)).payload;
    } catch (error) {
      // Only a signature that does not verify is tried with the previous keys.
      if (!(error instanceof errors.JWSSignatureVerificationFailed)) throw error;
      for (const previous of previousKeys) {
        try {
          return (await jwtVerify(token, previous, verifyOptions)).payload;
        } catch (again) {
          if (!(again instanceof errors.JWSSignatureVerificationFailed)) throw again;
        }
      }
      throw error;
    }
  };

  return async (authorization) => {
    if (authorization === null || authorization === "") {
      throw unauthenticated("Missing bearer token: send Authorization: Bearer <token>");
    }
    const match = /^Bearer +([A-Za-z0-9_.~+/=-]+) *$/i.exec(authorization);
    if (!match) throw unauthenticated("Malformed Authorization header: expected Bearer <token>");
    const token = match[1]!;
    const hit = cache.get(token);
    if (hit) {
      if (hit.expiresAt > Date.now()) return hit.caller;
      cache.delete(token);
    }
    let payload: JWTPayload;
    try {
      payload = await verified(token);
    } catch (error) {
      if (error instanceof errors.JWTExpired) throw unauthenticated("Token expired");
      if (error instanceof errors.JWTClaimValidationFailed) {
        throw unauthenticated(`Invalid token: claim ${error.claim} is not acceptable`);
      }
      if (error instanceof errors.JOSEError) throw unauthenticated("Invalid token");
      throw new ConnectError(
        "Cannot verify tokens now",
        Code.Unavailable,
        undefined,
        undefined,
        error,
      );
    }
    const caller = callerFromClaims(payload);
    cache.set(token, { caller, expiresAt: payload.exp! * 1000 }, memoBytes(token, payload));
    return caller;
  };
}

/** Whether the caller administers the project. */
export function administers(caller: Caller, projectId: string): boolean {
  return caller.projects === "*" || caller.projects.has(projectId);
}

const callerKey = createContextKey<Caller | undefined>(undefined, { description: "caller" });

/**
 * Authentication: verifies the call's `authorization` header and puts the caller in the call's
 * context (UNAUTHENTICATED when it is missing or invalid). Every API call goes through it; only
 * health and reflection are served without.
 */
export function authentication(verify: TokenVerifier): Interceptor {
  return (next) => async (req) => {
    req.contextValues.set(callerKey, await verify(req.header.get("authorization")));
    return await next(req);
  };
}

/** The authenticated caller of a call (from a handler's context or an interceptor's values). */
export function callerOf(ctx: HandlerContext | { values: ContextValues }): Caller {
  const caller = ctx.values.get(callerKey);
  if (!caller) throw new ConnectError("No authenticated caller", Code.Internal);
  return caller;
}

/** The token verification settings every process reads . */
export const authSettings = {
  AUTH_JWT_SECRET: optionalSecretKey,
  AUTH_JWT_PREVIOUS_SECRETS: secretKeyList,
  AUTH_JWKS_URL: optionalString,
  AUTH_ISSUER: optionalString,
  AUTH_AUDIENCE: optionalString,
};

/** Maps the {@link authSettings} to the verifier's options. */
export function authOptions(config: {
  AUTH_JWT_SECRET?: string | undefined;
  AUTH_JWT_PREVIOUS_SECRETS?: readonly string[] | undefined;
  AUTH_JWKS_URL?: string | undefined;
  AUTH_ISSUER?: string | undefined;
  AUTH_AUDIENCE?: string | undefined;
}): AuthOptions {
  return {
    jwtSecret: config.AUTH_JWT_SECRET,
    previousJwtSecrets: config.AUTH_JWT_PREVIOUS_SECRETS,
    jwksUrl: config.AUTH_JWKS_URL,
    issuer: config.AUTH_ISSUER,
    audience: config.AUTH_AUDIENCE,
  };
}
