/**
 * The TokenService handlers: grants, introspection, revocation and the JWK Set. Which caller may
 * call what is settled before a handler runs, by client authentication (./client_auth.ts) in the
 * process's interceptor list (./main.ts).
 *
 * @module
 */

import type { ServiceImpl } from "@connectrpc/connect";
import { decodeProtectedHeader, type JWTPayload, jwtVerify, SignJWT } from "jose";
import { ClientStatus, ClientType } from "../../gen/registry/oauth/v1/client_pb.ts";
import type { TokenService } from "../../gen/registry/token/v1/token_service_pb.ts";
import type { Sql } from "../../lib/db/mod.ts";
import { clientOf } from "./client_auth.ts";
import type { KeyRing } from "./keys.ts";
import { oauthError } from "./oauth_errors.ts";
import type { Registry } from "./registry.ts";

/** What the handlers need. */
export interface TokenServiceDeps {
  /** The pool (schema `token`). */
  sql: Sql;
  /** The signing keys. */
  keys: KeyRing;
  /** The registry, for clients. */
  registry: Registry;
  /** The `iss` of every token. */
  issuer: string;
  /** Lifetime of an access token, in seconds. */
  accessTokenTtlSeconds: number;
  /** How long a verifier may cache the JWK Set, in seconds. */
  jwksMaxAgeSeconds: number;
  /** The clock (ms since the epoch). */
  now: () => number;
}

/** The grant types of RFC 6749 and RFC 8693, and which of them this server runs. */
const knownGrantTypes = new Set([
  "authorization_code",
  "refresh_token",
  "client_credentials",
  "password",
  "implicit",
  "urn:ietf:params:oauth:grant-type:token-exchange",
  "urn:ietf:params:oauth:grant-type:jwt-bearer",
  "urn:ietf:params:oauth:grant-type:device_code",
]);

/** RFC 6749 3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ). */
const scopeToken = /^[\x21\x23-\x5B\x5D-\x7E]{1,512}$/;
const maxScopes = 100;

/** The scopes of a `scope` parameter, in order, without duplicates; `invalid_scope` when bad. */
export function parseScope(scope: string): string[] {
  if (scope === "") return [];
  const tokens = scope.split(" ");
  const out = new Set<string>();
  for (const token of tokens) {
    if (!scopeToken.test(token)) {
      throw oauthError(
        "invalid_scope",
        "scope must be scope tokens separated by single spaces, each 1..512 printable ASCII " +
          "characters other than double quote and backslash (RFC 6749 3.3)",
      );
    }
    out.add(token);
  }
  if (out.size > maxScopes) {
    throw oauthError("invalid_scope", `At most ${maxScopes} scopes may be asked for`);
  }
  return [...out];
}

/** The claims of one of our access tokens. */
interface AccessClaims extends JWTPayload {
  sub: string;
  aud: string;
  exp: number;
  iat: number;
  jti: string;
  client_id: string;
  scope: string;
}

/** Creates the handlers. */
export function createTokenService(deps: TokenServiceDeps): ServiceImpl<typeof TokenService> {
  const { sql, keys, registry, issuer, now } = deps;

  async function sign(claims: { sub: string; aud: string; clientId: string; scope: string[] }) {
    await keys.ready();
    const key = keys.signing();
    const iat = Math.floor(now() / 1000);
    const exp = iat + deps.accessTokenTtlSeconds;
    const jwt = await new SignJWT({ client_id: claims.clientId, scope: claims.scope.join(" ") })
      .setProtectedHeader({ alg: "ES256", typ: "at+jwt", kid: key.kid })
      .setIssuer(issuer)
      .setSubject(claims.sub)
      .setAudience(claims.aud)
      .setIssuedAt(iat)
      .setExpirationTime(exp)
      .setJti(crypto.randomUUID())
      .sign(key.privateKey!);
    return { jwt, expiresIn: exp - iat };
  }

  /** The claims of a token this server signed and that has not expired, or undefined. */
  async function verified(token: string): Promise<AccessClaims | undefined> {
    if (token.length > 8192) return undefined;
    await keys.ready();
    try {
      const { kid } = decodeProtectedHeader(token);
      const key = typeof kid === "string" ? keys.byKid(kid) : undefined;
      if (!key) return undefined;
      const { payload } = await jwtVerify(token, key.publicKey, {
        issuer,
        typ: "at+jwt",
        algorithms: ["ES256"],
        currentDate: new Date(now()),
        requiredClaims: ["sub", "aud", "exp", "iat", "jti", "client_id"],
      });
      if (typeof payload.aud !== "string" || typeof payload.client_id !== "string") return;
      return payload as AccessClaims;
    } catch {
      return undefined;
    }
  }

  async function revoked(jti: string): Promise<boolean> {
    if (!isUuid(jti)) return true;
    const [row] = await sql`select 1 from token.revoked_tokens where jti = ${jti}`;
    return row !== undefined;
  }

  return {
    async issueToken(req, ctx) {
      const client = clientOf(ctx);
      if (req.grantType === "") throw oauthError("invalid_request", "grant_type is required");
      if (req.grantType !== "client_credentials") {
        throw knownGrantTypes.has(req.grantType)
          ? oauthError(
            "unsupported_grant_type",
            `This server does not run the ${req.grantType} grant`,
          )
          : oauthError("unsupported_grant_type", "Unknown grant_type");
      }
      if (client.type !== ClientType.WEB) {
        throw oauthError(
          "unauthorized_client",
          "client_credentials is for confidential (web) clients only",
        );
      }
      const scope = parseScope(req.scope);
      const { jwt, expiresIn } = await sign({
        sub: client.id,
        aud: client.projectId,
        clientId: client.id,
        scope,
      });
      return {
        accessToken: jwt,
        tokenType: "Bearer",
        expiresIn: BigInt(expiresIn),
        scope: scope.join(" "),
      };
    },

    async introspectToken(req, ctx) {
      const caller = clientOf(ctx);
      const claims = await verified(req.token);
      // Another project's token is inactive to this caller: it learns nothing about it.
      if (!claims || claims.aud !== caller.projectId) return { active: false };
      if (await revoked(claims.jti)) return { active: false };
      if (claims.client_id !== caller.id) {
        const client = await registry.getClient(caller.projectId, claims.client_id);
        if (!client || client.status !== ClientStatus.ACTIVE) return { active: false };
      }
      return {
        active: true,
        scope: claims.scope ?? "",
        clientId: claims.client_id,
        tokenType: "Bearer",
        exp: BigInt(claims.exp),
        iat: BigInt(claims.iat),
        sub: claims.sub,
        aud: claims.aud,
        iss: issuer,
        jti: claims.jti,
      };
    },

    async revokeToken(req, ctx) {
      const caller = clientOf(ctx);
      // token_type_hint is a hint: whatever it says, every kind of token is looked for (RFC 7009
      // 2.1); an access token is the only kind this server issues yet.
      const claims = await verified(req.token);
      // Unknown, malformed and expired tokens: nothing to revoke, and success (RFC 7009 2.2).
      if (!claims) return {};
      if (claims.client_id !== caller.id) {
        throw oauthError("invalid_request", "The token was not issued to this client");
      }
      await sql`
        insert into token.revoked_tokens (jti, expires_at, revoked_at)
        values (${claims.jti}, ${new Date(claims.exp * 1000)}, ${new Date(now())})
        on conflict (jti) do nothing`;
      return {};
    },

    async getJwks() {
      await keys.ready();
      return {
        jwksJson: JSON.stringify(keys.jwks()),
        maxAgeSeconds: BigInt(deps.jwksMaxAgeSeconds),
      };
    },
  };
}

function isUuid(value: string): boolean {
  return /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(value);
}
