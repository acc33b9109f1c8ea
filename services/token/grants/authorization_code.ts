/**
 * The `authorization_code` grant (RFC 6749 4.1.3) with PKCE (RFC 7636 4.6): a code from
 * DecideAuthorization buys an access token of the installation the consent made and a refresh
 * token. The code is spent by its first redemption, whatever follows; a second one is
 * `invalid_grant` and revokes everything the first issued (RFC 6749 4.1.2, RFC 9700 4.5).
 *
 * @module
 */

import { InstallationStatus } from "../../../gen/registry/oauth/v1/installation_pb.ts";
import { oauthError } from "../oauth_errors.ts";
import { sha256 } from "../opaque_tokens.ts";
import { verifierMatches } from "../pkce.ts";
import { type Grant, issueInFamily } from "./context.ts";

/** Runs the grant. */
export const authorizationCode: Grant = async (deps, client, req) => {
  if (req.code === "") throw oauthError("invalid_request", "code is required");
  if (req.codeVerifier === "") {
    throw oauthError("invalid_request", "code_verifier is required (PKCE)");
  }
  const at = deps.now();
  const found = await deps.grants.redeemCode(await sha256(req.code), new Date(at));
  if (found.kind === "unknown") throw oauthError("invalid_grant", "The code is not valid");
  if (found.kind === "replayed") {
    await deps.grants.revokeFamily(found.code.family_id, new Date(at));
    throw oauthError(
      "invalid_grant",
      "The code was already used; the tokens it was exchanged for are revoked",
    );
  }
  const { code, family } = found;
  if (code.client_id !== client.id) {
    throw oauthError("invalid_grant", "The code was issued to another client");
  }
  if (code.expires_at.getTime() <= at) throw oauthError("invalid_grant", "The code has expired");
  const redirectOk = req.redirectUri === code.redirect_uri ||
    (code.redirect_uri === "" && client.redirectUris.includes(req.redirectUri));
  if (!redirectOk) {
    throw oauthError(
      "invalid_grant",
      "redirect_uri differs from the one of the authorization request",
    );
  }
  if (!(await verifierMatches(req.codeVerifier, code.code_challenge))) {
    throw oauthError("invalid_grant", "code_verifier does not match the code_challenge");
  }
  const installation = await deps.registry.getInstallation(
    family.project_id,
    family.installation_id,
  );
  if (!installation || installation.status !== InstallationStatus.ACTIVE) {
    throw oauthError("invalid_grant", "The installation was revoked");
  }
  return await issueInFamily(deps, client, family.id, {
    installationId: installation.id,
    principalId: code.principal_id,
    accountId: code.account_id,
  }, code.scopes);
};
