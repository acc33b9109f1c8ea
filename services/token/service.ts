/**
 * The TokenService handlers: the token endpoint (one module per grant in ./grants/), the
 * authorization endpoint's two steps (./authorization.ts), introspection, revocation, the JWK
 * Set, and the security events (./security_events.ts: ListEvents, WatchEvents). Who may call what
 * is settled before a handler runs, by ./client_auth.ts in the process's interceptor list
 * (./main.ts).
 *
 * @module
 */

import { sha256 } from "../../lib/platform/mod.ts";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import * as v from "valibot";
import { ClientStatus } from "../../gen/registry/oauth/v1/client_pb.ts";
import { InstallationStatus } from "../../gen/registry/oauth/v1/installation_pb.ts";
import {
  AuthorizationRequestSchema,
  ListEventsRequestSchema,
  type TokenService,
  WatchEventsRequestSchema,
} from "../../gen/registry/token/v1/token_service_pb.ts";
import {
  type EventFeed,
  eventRowSize,
  listEvents,
  readCursor,
  readEventQuery,
  toEvent,
} from "../../lib/audit/mod.ts";
import type { Sql } from "../../lib/db/mod.ts";
import { pageOf, validate } from "../../lib/resource/mod.ts";
import type { AccessClaims, AccessTokens } from "./access_tokens.ts";
import {
  type AuthorizationDeps,
  checkPushed,
  decideAuthorization,
  startAuthorization,
} from "./authorization.ts";
import { clientOf, isPublic, secretUntilOf } from "./client_auth.ts";
import type { Dpop } from "./dpop.ts";
import type { Pushed } from "./pushed.ts";
import type { UsedJtis } from "./repository/used_jtis.ts";
import { authorizationCode } from "./grants/authorization_code.ts";
import { clientCredentials } from "./grants/client_credentials.ts";
import type { Grant, GrantDeps } from "./grants/context.ts";
import { refreshToken } from "./grants/refresh_token.ts";
import { tokenExchange } from "./grants/token_exchange.ts";
import { deviceCode } from "./grants/device_code.ts";
import {
  decideDeviceCode,
  type DeviceDeps,
  lookupDeviceCode,
  startDeviceAuthorization,
  startDeviceVerification,
} from "./device.ts";
import { createDeviceCodeRepository } from "./repository/device_codes.ts";
import type { KeyRing } from "./keys.ts";
import { oauthError } from "./oauth_errors.ts";
import type { Registry } from "./registry.ts";
import { reportUsesEveryMs } from "./registry_cache.ts";
import type { Revocations } from "./revocations.ts";
import { createGrantRepository, type FamilyRow, type RefreshRow } from "./repository/grants.ts";
import {
  changesOf,
  clientActorOf,
  clientResource,
  eventSchema,
  eventsProjectId,
  installationResource,
  recordEvent,
  securityEventCtes,
} from "./security_events.ts";

/** What the handlers need. */
export interface TokenServiceDeps {
  /** The pool (schema `token`). */
  sql: Sql;
  /** The signing keys. */
  keys: KeyRing;
  /** Access tokens. */
  accessTokens: AccessTokens;
  /** The registry, for clients, configs and installations. */
  registry: Registry;
  /** Which access tokens were revoked. */
  revocations: Pick<Revocations, "isRevoked" | "revoked">;
  /** The `iss` of every token and authorization answer. */
  issuer: string;
  /** Lifetime of a refresh token, in seconds. */
  refreshTokenTtlSeconds: number;
  /** How long a verifier may cache the JWK Set, in seconds. */
  jwksMaxAgeSeconds: number;
  /** The HMAC keys of the consent page's CSRF tokens (./csrf.ts). */
  csrfKeys: readonly Promise<CryptoKey>[];
  /** Checks DPoP proofs (RFC 9449) and makes their nonces. */
  dpop: Dpop;
  /** Pushed authorization requests (RFC 9126). */
  pushed: Pushed;
  /** Where a consent page's CSRF token is spent by its one decision. */
  usedJtis: Pick<UsedJtis, "use">;
  /** Whether every client must push its authorization requests (REQUIRE_PAR). */
  requirePar: boolean;
  /** The clock (ms since the epoch). */
  now: () => number;
  /** The feed WatchEvents serves (none: WatchEvents is UNAVAILABLE). */
  feed?: EventFeed | undefined;
}

/** A ListEvents or WatchEvents request's project. */
const eventsRequest = v.object({ projectId: eventsProjectId });

/** The grants this server runs, by `grant_type`. */
const grantsByType: Record<string, Grant> = {
  client_credentials: clientCredentials,
  authorization_code: authorizationCode,
  refresh_token: refreshToken,
  "urn:ietf:params:oauth:grant-type:token-exchange": tokenExchange,
  "urn:ietf:params:oauth:grant-type:device_code": deviceCode,
};

/** Grant types of RFC 6749 and its extensions that this server knowingly does not run. */
const refusedGrantTypes = new Set([
  "password",
  "implicit",
  "urn:ietf:params:oauth:grant-type:jwt-bearer",
  "urn:ietf:params:oauth:grant-type:saml2-bearer",
]);

/**
 * How long, at most, an introspection's answer may be given again without asking this service
 * (IntrospectTokenResponse.reusable_until_ms): half the period in which a secret answered from
 * memory has its use reported (./registry_cache.ts), so that a secret whose introspections the
 * gateway answers from memory still has its `last_used_time` recorded about once a minute.
 */
export const introspectionReuseMs = reportUsesEveryMs / 2;

/** What introspection answers for a token that is not active (RFC 7662 2.2). */
const inactive = { active: false } as const;

/** Creates the handlers. */
export function createTokenService(deps: TokenServiceDeps): ServiceImpl<typeof TokenService> {
  const { sql, keys, registry, now, accessTokens } = deps;
  const grants = createGrantRepository(sql, (jtis) => deps.revocations.revoked(jtis));

  const isRevoked = (jti: string) => deps.revocations.isRevoked(jti);

  const devices = createDeviceCodeRepository(sql);
  const grantDeps: Omit<GrantDeps, "spendProof"> = {
    accessTokens,
    grants,
    devices,
    registry,
    isRevoked,
    refreshTtlMs: deps.refreshTokenTtlSeconds * 1000,
    now,
    dpopError: deps.dpop.error,
  };
  const device: DeviceDeps = {
    registry,
    devices,
    issuer: deps.issuer,
    csrfKeys: deps.csrfKeys,
    now,
  };
  const authorization: AuthorizationDeps = {
    registry,
    grants,
    issuer: deps.issuer,
    csrfKeys: deps.csrfKeys,
    now,
    recordEvent: (audit, event) => recordEvent(sql, audit, event),
    requirePar: deps.requirePar,
    usedJtis: deps.usedJtis,
  };

  /** Whether the installation a token acts for is still active (a client's own: yes). */
  async function installationActive(projectId: string, installationId: string | undefined) {
    if (installationId === undefined) return true;
    const installation = await registry.getInstallation(projectId, installationId);
    return installation?.status === InstallationStatus.ACTIVE;
  }

  /** Whether the client a token was issued to is still active (the caller itself: it is). */
  async function clientActive(projectId: string, clientId: string, callerId: string) {
    if (clientId === callerId) return true;
    const client = await registry.getClient(projectId, clientId);
    return client?.status === ClientStatus.ACTIVE;
  }

  /** A refresh token's family, when the token is one of ours. */
  async function refreshOf(
    token: string,
  ): Promise<{ token: RefreshRow; family: FamilyRow } | undefined> {
    if (!/^ort_[A-Za-z0-9_-]{43}$/.test(token)) return undefined;
    return await grants.findRefreshToken(sha256(token));
  }

  async function introspectAccess(claims: AccessClaims, callerId: string) {
    if (await isRevoked(claims.jti)) return inactive;
    if (!(await clientActive(claims.aud, claims.client_id, callerId))) return inactive;
    if (!(await installationActive(claims.aud, claims.installation_id))) return inactive;
    return {
      active: true,
      scope: claims.scope ?? "",
      clientId: claims.client_id,
      exp: BigInt(claims.exp),
      iat: BigInt(claims.iat),
      sub: claims.sub,
      aud: claims.aud,
      iss: deps.issuer,
      jti: claims.jti,
      accountId: claims.account_id ?? "",
      installationId: claims.installation_id ?? "",
      actSub: claims.act?.sub ?? "",
      // RFC 9449 6.2: a bound token's key, which a resource server must see a proof of.
      tokenType: claims.cnf?.jkt !== undefined ? "DPoP" : "Bearer",
      cnfJkt: claims.cnf?.jkt ?? "",
    };
  }

  return {
    async issueToken(req, ctx) {
      const client = clientOf(ctx);
      if (req.grantType === "") throw oauthError("invalid_request", "grant_type is required");
      const grant = grantsByType[req.grantType];
      if (!grant) {
        throw oauthError(
          "unsupported_grant_type",
          refusedGrantTypes.has(req.grantType)
            ? `This server does not run the ${req.grantType} grant`
            : "Unknown grant_type",
        );
      }
      // DPoP (RFC 9449): the proof is checked before the grant runs, so that a bad proof spends no
      // code or refresh token. Its jti (a row in token.used_jtis for 5 minutes) is spent once the
      // request has shown more than a proof, which anyone can make: at once for a confidential
      // client, which has authenticated; for a public client, whose client_id anyone may send, by
      // the grant once it has found its code, refresh token or device code good for this client
      // (and key), before it writes or issues anything (./grants/context.ts). A replayed proof is
      // refused either way, having spent nothing; a made-up code with a fresh proof leaves no row.
      const proof = req.dpop ? await deps.dpop.check(req.dpop) : undefined;
      if (proof === undefined && client.dpopBoundAccessTokens) {
        // RFC 9449 5.2: such a client's token requests must carry a proof.
        throw await deps.dpop.error(
          "invalid_dpop_proof",
          "This client's access tokens must be DPoP-bound: send a DPoP proof",
        );
      }
      const spendProof = proof?.spend ?? (() => Promise.resolve());
      if (!isPublic(client)) await spendProof();
      // Who asks, for the event of a family revoked for a replay (./grants/context.ts).
      const audit = clientActorOf(ctx, client.id, now());
      const issued = await grant({ ...grantDeps, audit, spendProof }, client, req, proof?.jkt);
      // Whichever grant ran, no token leaves with its proof unspent (spent, this does nothing).
      await spendProof();
      return { ...issued, dpopNonce: await deps.dpop.nonce() };
    },

    async startAuthorization(req, ctx) {
      // A pushed request has arrived: it now lives for the sign-in and the decision.
      const request = await deps.pushed.resolve(req.request, true);
      const outcome = await startAuthorization(authorization, request, ctx);
      if ("consent" in outcome) return { outcome: { case: "consent", value: outcome.consent } };
      // A redirect (an error, or a code without a page) is the pushed request's one decision.
      await deps.pushed.spend(request);
      return { outcome: { case: "redirectTo", value: outcome.redirectTo } };
    },

    async decideAuthorization(req, ctx) {
      const request = await deps.pushed.resolve(req.request, false);
      return {
        redirectTo: await decideAuthorization(
          authorization,
          request,
          req.decision,
          req.csrfToken,
          ctx,
          // Spent once the session and the CSRF token are verified (a refused POST spends
          // nothing), and before the decision is acted on (two decisions cannot both get a code).
          () => deps.pushed.spend(request),
        ),
      };
    },

    async pushAuthorizationRequest(req, ctx) {
      const request = req.request ?? create(AuthorizationRequestSchema);
      // RFC 9449 10.1: a proof is checked as at the token endpoint before anything is kept; its
      // key binds the request as its dpop_jkt would. Its jti is spent as there: at once for a
      // confidential client; for a public client (its client_id alone), once the request has
      // passed the authorization endpoint's checks, before it is kept.
      const client = clientOf(ctx);
      const proof = req.dpop ? await deps.dpop.check(req.dpop) : undefined;
      if (!isPublic(client)) await proof?.spend();
      const pushed = await deps.pushed.push(
        client,
        request,
        async (checked) => {
          await checkPushed(authorization, checked);
          await proof?.spend();
        },
        proof?.jkt,
      );
      return {
        requestUri: pushed.requestUri,
        expiresIn: BigInt(pushed.expiresIn),
        dpopNonce: await deps.dpop.nonce(),
      };
    },

    async introspectToken(req, ctx) {
      const caller = clientOf(ctx);
      // RFC 7662 2.1: `token` is REQUIRED; checked once the caller is authenticated.
      if (req.token === "") throw oauthError("invalid_request", "token is required");
      const claims = await accessTokens.verify(req.token);
      // Another project's token is inactive to this caller: it learns nothing about it.
      if (claims) {
        if (claims.aud !== caller.projectId) return inactive;
        const answer = await introspectAccess(claims, caller.id);
        const secretUntil = secretUntilOf(ctx);
        if (!answer.active || secretUntil === undefined) return answer;
        // Whatever may end it without a notification: the token's expiry, the secret's, and the
        // next report of the secret's use (see introspectionReuseMs).
        const until = Math.min(claims.exp * 1000, secretUntil, now() + introspectionReuseMs);
        return { ...answer, reusableUntilMs: BigInt(Math.floor(until)) };
      }
      const refresh = await refreshOf(req.token);
      if (!refresh || refresh.family.project_id !== caller.projectId) return inactive;
      const { token, family } = refresh;
      const live = token.spent_at === null && family.revoked_at === null &&
        token.expires_at.getTime() > now() &&
        await clientActive(family.project_id, token.client_id, caller.id) &&
        await installationActive(family.project_id, family.installation_id);
      if (!live) return inactive;
      return {
        active: true,
        scope: token.scopes.join(" "),
        clientId: token.client_id,
        exp: BigInt(Math.floor(token.expires_at.getTime() / 1000)),
        iat: BigInt(Math.floor(token.created_at.getTime() / 1000)),
        sub: token.principal_id,
        aud: family.project_id,
        iss: deps.issuer,
        accountId: token.account_id,
        installationId: family.installation_id,
        // A refresh token bound to a public client's DPoP key says so, as a bound access token
        // does (RFC 9449 6.2); it has no token_type, which names access tokens' kinds.
        cnfJkt: token.dpop_jkt ?? "",
      };
    },

    async revokeToken(req, ctx) {
      const caller = clientOf(ctx);
      // RFC 7009 2.1: `token` is REQUIRED; checked once the client is authenticated (its
      // credentials come first), so that a request without one is never a success.
      if (req.token === "") throw oauthError("invalid_request", "token is required");
      // token_type_hint is a hint: whatever it says, both kinds are looked for (RFC 7009 2.1).
      const claims = await accessTokens.verify(req.token);
      if (claims) {
        if (claims.client_id !== caller.id) {
          throw oauthError("invalid_request", "The token was not issued to this client");
        }
        // The event (`revoked`) is written by the insert, when it revoked the token: a token
        // revoked again changes nothing and records nothing.
        const resource = claims.installation_id === undefined
          ? clientResource(claims.aud, claims.client_id)
          : installationResource(claims.aud, claims.installation_id);
        await sql`
          with revoked as (
            insert into token.revoked_tokens (jti, expires_at, revoked_at)
            values (${claims.jti}, ${new Date(claims.exp * 1000)}, ${new Date(now())})
            on conflict (jti) do nothing
            returning jti
          ), ${
          securityEventCtes(sql, clientActorOf(ctx, caller.id, now()), {
            parent: claims.aud,
            resource,
            from: sql`revoked`,
            changes: changesOf(sql, [
              { field: "token_type", new: "access_token" },
              { field: "jti", new: claims.jti },
              { field: "revoked_access_tokens", new: 1 },
            ]),
            result: "revoked",
          })
        }
          select 1 from revoked`;
        deps.revocations.revoked([claims.jti]);
        return {};
      }
      const refresh = await refreshOf(req.token);
      // Unknown, malformed and expired tokens: nothing to revoke, and success (RFC 7009 2.2). An
      // expired refresh token's grant may live on (each refresh gives a new one its own expiry),
      // and is not its to end.
      if (!refresh || refresh.token.expires_at.getTime() <= now()) return {};
      if (refresh.token.client_id !== caller.id) {
        throw oauthError("invalid_request", "The token was not issued to this client");
      }
      // A refresh token takes every token of its grant with it (RFC 7009 2.1); the event is
      // written with the revocation, when the family was live. How many access tokens went with
      // it tells the gateway's introspection cache to drop what it cannot name.
      const revokedAccessTokens = await grants.revokeFamily(refresh.family.id, new Date(now()), {
        audit: clientActorOf(ctx, caller.id, now()),
        result: "revoked",
        changes: [{ field: "token_type", new: "refresh_token" }],
      });
      return { revokedAccessTokens: BigInt(revokedAccessTokens) };
    },

    async listEvents(req) {
      validate(eventsRequest, ListEventsRequestSchema, { projectId: req.projectId });
      const query = readEventQuery(req, ListEventsRequestSchema);
      const rows = await listEvents(sql, eventSchema, req.projectId, query);
      return pageOf(rows, query.limit, toEvent, eventRowSize);
    },

    async *watchEvents(req, ctx) {
      validate(eventsRequest, WatchEventsRequestSchema, { projectId: req.projectId });
      if (!deps.feed) {
        throw new ConnectError("This process serves no change feed", Code.Unavailable);
      }
      const after = readCursor(req.after, WatchEventsRequestSchema) ?? 0n;
      for await (const rows of deps.feed.watch(req.projectId, after, ctx.signal)) {
        for (const row of rows) yield { event: toEvent(row) };
      }
    },

    async startDeviceAuthorization(req, ctx) {
      return await startDeviceAuthorization(device, clientOf(ctx), req.scope);
    },

    async startDeviceVerification(_req, ctx) {
      return await startDeviceVerification(device, ctx);
    },

    async lookupDeviceCode(req, ctx) {
      return await lookupDeviceCode(device, req, ctx);
    },

    async decideDeviceCode(req, ctx) {
      return await decideDeviceCode(device, req, ctx);
    },

    async checkCorsOrigin(req) {
      return { allowed: await registry.registersOrigin(req.origin, req.clientId) };
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
