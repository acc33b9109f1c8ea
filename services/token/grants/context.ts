/**
 * What every grant (./client_credentials.ts, ./authorization_code.ts, ./refresh_token.ts,
 * ./token_exchange.ts) is given, and the token of an installation they share.
 *
 * @module
 */

import type { Client } from "../../../gen/registry/oauth/v1/client_pb.ts";
import type {
  IssueTokenRequest,
  IssueTokenResponse,
} from "../../../gen/registry/token/v1/token_service_pb.ts";
import type { AccessTokens, SignedAccessToken } from "../access_tokens.ts";
import { randomToken, sha256 } from "../opaque_tokens.ts";
import type { Registry } from "../registry.ts";
import type { GrantRepository } from "../repository/grants.ts";

/** What a grant needs. */
export interface GrantDeps {
  /** Signs and verifies access tokens. */
  accessTokens: AccessTokens;
  /** Codes, refresh tokens and families. */
  grants: GrantRepository;
  /** The registry (installations, clients). */
  registry: Registry;
  /** Whether an access token's `jti` is on the revocation list. */
  isRevoked(jti: string): Promise<boolean>;
  /** Lifetime of a refresh token, in ms. */
  refreshTtlMs: number;
  /** The clock (ms since the epoch). */
  now: () => number;
}

/** A grant: runs a token request of its type for an authenticated client. */
export type Grant = (
  deps: GrantDeps,
  client: Client,
  req: IssueTokenRequest,
) => Promise<Omit<IssueTokenResponse, "$typeName">>;

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
): Promise<SignedAccessToken> {
  return await deps.accessTokens.sign({
    sub: principal.principalId,
    aud: client.projectId,
    client_id: client.id,
    scope: scopes.join(" "),
    account_id: principal.accountId,
    installation_id: principal.installationId,
    ...(act ? { act } : {}),
  });
}

/**
 * Issues what an authorization code or a refresh token buys: an access token of the installation
 * and a new refresh token, both recorded in the family (so that revoking it revokes them).
 */
export async function issueInFamily(
  deps: GrantDeps,
  client: Client,
  familyId: string,
  principal: Principal,
  scopes: string[],
): Promise<Omit<IssueTokenResponse, "$typeName">> {
  const access = await principalToken(deps, client, principal, scopes);
  await deps.grants.addAccessToken(access.jti, familyId, access.expiresAt);
  const refresh = randomToken("ort_");
  const at = deps.now();
  await deps.grants.addRefreshToken({
    token_hash: await sha256(refresh),
    family_id: familyId,
    client_id: client.id,
    scopes,
    account_id: principal.accountId,
    principal_id: principal.principalId,
    created_at: new Date(at),
    expires_at: new Date(at + deps.refreshTtlMs),
  });
  return {
    accessToken: access.jwt,
    tokenType: "Bearer",
    expiresIn: BigInt(access.expiresIn),
    scope: scopes.join(" "),
    refreshToken: refresh,
    issuedTokenType: "",
  };
}
