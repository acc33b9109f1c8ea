/**
 * The `refresh_token` grant (RFC 6749 6), with rotation (RFC 9700 4.14.2): every use spends the
 * refresh token and issues a new one with the access token; using a spent one is `invalid_grant`
 * and revokes its whole family, as one of the two users of a copied token is an attacker.
 *
 * @module
 */

import { InstallationStatus } from "../../../gen/registry/oauth/v1/installation_pb.ts";
import { oauthError } from "../oauth_errors.ts";
import { sha256 } from "../opaque_tokens.ts";
import { narrowScope } from "../scope.ts";
import { type Grant, issueInFamily } from "./context.ts";

/** Runs the grant. */
export const refreshToken: Grant = async (deps, client, req) => {
  if (req.refreshToken === "") throw oauthError("invalid_request", "refresh_token is required");
  const at = deps.now();
  const found = await deps.grants.useRefreshToken(await sha256(req.refreshToken), new Date(at));
  if (found.kind === "unknown") throw oauthError("invalid_grant", "The refresh token is not valid");
  if (found.kind === "spent") {
    // Only the client it was issued to can set this off: another client's token is just invalid.
    if (found.token.client_id === client.id) {
      await deps.grants.revokeFamily(found.token.family_id, new Date(at));
      throw oauthError(
        "invalid_grant",
        "The refresh token was already used; every token of its grant is revoked",
      );
    }
    throw oauthError("invalid_grant", "The refresh token is not valid");
  }
  const { token, family } = found;
  if (token.client_id !== client.id) {
    throw oauthError("invalid_grant", "The refresh token was issued to another client");
  }
  if (family.revoked_at !== null) {
    throw oauthError("invalid_grant", "The refresh token was revoked");
  }
  if (token.expires_at.getTime() <= at) {
    throw oauthError("invalid_grant", "The refresh token has expired");
  }
  const scopes = narrowScope(req.scope, token.scopes);
  const installation = await deps.registry.getInstallation(
    family.project_id,
    family.installation_id,
  );
  if (!installation || installation.status !== InstallationStatus.ACTIVE) {
    await deps.grants.revokeFamily(family.id, new Date(at));
    throw oauthError("invalid_grant", "The installation was revoked");
  }
  return await issueInFamily(deps, client, family.id, {
    installationId: installation.id,
    principalId: token.principal_id,
    accountId: token.account_id,
  }, scopes);
};
