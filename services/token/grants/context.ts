/**
 * What every grant (./client_credentials.ts, ./authorization_code.ts, ./refresh_token.ts,
 * ./token_exchange.ts, ./device_code.ts) is given, and the token of an installation they share.
 *
 * @module
 */

import { sha256 } from "../../../lib/platform/mod.ts";
import type { Client } from "../../../gen/registry/oauth/v1/client_pb.ts";
import type { AuditContext } from "../../../lib/audit/mod.ts";
import type {
  IssueTokenRequest,
  IssueTokenResponse,
} from "../../../gen/registry/token/v1/token_service_pb.ts";
import type { AccessTokens, SignedAccessToken } from "../access_tokens.ts";
import { randomToken } from "../opaque_tokens.ts";
import type { Registry } from "../registry.ts";
import { InstallationStatus } from "../../../gen/registry/oauth/v1/installation_pb.ts";
import type { FamilyRow, GrantRepository, Spent } from "../repository/grants.ts";
import type { DeviceCodeRepository } from "../repository/device_codes.ts";
import type { Dpop } from "../dpop.ts";
import { oauthError } from "../oauth_errors.ts";
import { isPublic } from "../client_auth.ts";

/** What a grant needs. */
export interface GrantDeps {
  /** Signs and verifies access tokens. */
  accessTokens: AccessTokens;
  /** Codes, refresh tokens and families. */
  grants: GrantRepository;
  /** Device codes (RFC 8628). */
  devices: DeviceCodeRepository;
  /** The registry (installations, clients). */
  registry: Registry;
  /** Whether an access token's `jti` is on the revocation list. */
  isRevoked(jti: string): Promise<boolean>;
  /** Lifetime of a refresh token, in ms. */
  refreshTtlMs: number;
  /** The clock (ms since the epoch). */
  now: () => number;
  /**
   * A DPoP error (`invalid_dpop_proof` of a bound token presented without a proof), with the
   * current nonce when nonces are required, as the proof checker's own errors (../dpop.ts).
   */
  dpopError: Dpop["error"];
  /**
   * Spends the request's DPoP proof (its `jti`, ../dpop.ts); throws `invalid_dpop_proof` when it
   * was spent before. Without a proof it does nothing, and so once the proof is spent: a
   * confidential client's is spent before the grant runs. A public client's waits for this call,
   * which {@link issueInFamily} and {@link replayed} make before they write: only a request whose
   * code, refresh token or device code was found good for its client (a bound refresh token, for
   * the proof's key) leaves a row, and a replayed proof is refused before anything is spent,
   * revoked or issued.
   */
  spendProof(): Promise<void>;
  /**
   * Who makes this request, from where (the client: ../security_events.ts), for the event of a
   * family revoked for a replay; none: the revocation records none.
   */
  audit?: AuditContext | undefined;
}

/**
 * What a code or refresh token presented again is: the `invalid_grant` description, the security
 * event's result, and the grant type (the event's `grant_type`).
 */
export interface Replay {
  description: string;
  result: "code_replayed" | "refresh_token_reused";
  grantType: string;
}

/**
 * A grant: runs a token request of its type for an authenticated client. `jkt` is the thumbprint
 * of the key of the request's DPoP proof, checked (../dpop.ts), when it had one: the access token
 * is bound to it (`cnf.jkt`, RFC 9449 6.1), and so is a public client's refresh token (RFC 9449 5).
 */
export type Grant = (
  deps: GrantDeps,
  client: Client,
  req: IssueTokenRequest,
  jkt?: string,
) => Promise<Omit<IssueTokenResponse, "$typeName">>;

/** The `token_type` of an access token (RFC 9449 5): `DPoP` when bound to a key. */
export function tokenType(jkt: string | undefined): string {
  return jkt === undefined ? "Bearer" : "DPoP";
}

/** The `cnf` claim of an access token bound to `jkt` (RFC 9449 6.1); nothing when unbound. */
export function confirmation(jkt: string | undefined): { cnf?: { jkt: string } } {
  return jkt === undefined ? {} : { cnf: { jkt } };
}

/** Who an installation's token acts as. */
export interface Principal {
  installationId: string;
  principalId: string;
  accountId: string;
}

/** Signs an access token of an installation's principal (RFC 9068 claims, and ours). */
export async function principalToken(
  deps: GrantDeps,
  client: Client,
  principal: Principal,
  scopes: string[],
  act?: { sub: string },
  jkt?: string,
): Promise<SignedAccessToken> {
  return await deps.accessTokens.sign({
    sub: principal.principalId,
    aud: client.projectId,
    client_id: client.id,
    scope: scopes.join(" "),
    account_id: principal.accountId,
    installation_id: principal.installationId,
    ...(act ? { act } : {}),
    ...confirmation(jkt),
  });
}

/**
 * Issues what an authorization code or a refresh token buys, once the installation it acts for is
 * still active: an access token of the installation and a new refresh token, both recorded in the
 * family (so that revoking it revokes them), in the one transaction that spends the code or the
 * token (GrantRepository.issue). When another request spent it first, this one is a replay: the
 * family is revoked (RFC 6749 4.1.2, RFC 9700 4.14.2) and the answer is `invalid_grant` with
 * `replayed` as its description.
 *
 * The new refresh token keeps the grant's `scopes` whatever the access token was narrowed to
 * (`accessScopes`): RFC 6749 6, "the refresh token scope MUST be identical to that of the refresh
 * token included by the client in the request".
 *
 * With a DPoP proof's `jkt`, the access token is bound to its key, and so is the refresh token
 * when the client is public (RFC 9449 5: a confidential client's refresh token is bound to its
 * authentication instead). A public client's request without a proof gets an unbound refresh
 * token (the refresh grant has already refused one whose token was bound). The proof is spent
 * before anything else ({@link GrantDeps.spendProof}).
 */
export async function issueInFamily(
  deps: GrantDeps,
  client: Client,
  grant: { family: FamilyRow; spent: Spent; replayed: Replay },
  holder: { principalId: string; accountId: string },
  scopes: string[],
  jkt?: string,
  accessScopes: string[] = scopes,
): Promise<Omit<IssueTokenResponse, "$typeName">> {
  await deps.spendProof();
  const { family } = grant;
  const installation = await deps.registry.getInstallation(
    family.project_id,
    family.installation_id,
  );
  if (!installation || installation.status !== InstallationStatus.ACTIVE) {
    throw oauthError("invalid_grant", "The installation was revoked");
  }
  const principal = { installationId: installation.id, ...holder };
  const access = await principalToken(deps, client, principal, accessScopes, undefined, jkt);
  const refresh = randomToken("ort_");
  const at = deps.now();
  const outcome = await deps.grants.issue(family.id, grant.spent, new Date(at), {
    access: { jti: access.jti, expiresAt: access.expiresAt },
    refresh: {
      token_hash: sha256(refresh),
      family_id: family.id,
      client_id: client.id,
      scopes,
      account_id: principal.accountId,
      principal_id: principal.principalId,
      created_at: new Date(at),
      expires_at: new Date(at + deps.refreshTtlMs),
      dpop_jkt: jkt !== undefined && isPublic(client) ? jkt : null,
    },
  });
  if (outcome === "spent") await replayed(deps, family.id, grant.replayed);
  if (outcome === "revoked") throw oauthError("invalid_grant", "The grant was revoked");
  return {
    accessToken: access.jwt,
    tokenType: tokenType(jkt),
    expiresIn: BigInt(access.expiresIn),
    scope: accessScopes.join(" "),
    refreshToken: refresh,
    issuedTokenType: "",
    dpopNonce: "",
  };
}

/**
 * A code or refresh token presented again by the client it was issued to after it was spent: one
 * of the two presenters is an attacker, so every token of the family is revoked, and the security
 * event (`code_replayed`, `refresh_token_reused`) recorded in the revocation's transaction; a
 * family already revoked records nothing again. The request's DPoP proof is spent first: a replay
 * of the proof revokes nothing.
 */
export async function replayed(
  deps: GrantDeps,
  familyId: string,
  replay: Replay,
): Promise<never> {
  await deps.spendProof();
  await deps.grants.revokeFamily(
    familyId,
    new Date(deps.now()),
    deps.audit === undefined ? undefined : {
      audit: deps.audit,
      result: replay.result,
      changes: [{ field: "grant_type", new: replay.grantType }],
    },
  );
  throw oauthError("invalid_grant", replay.description);
}
