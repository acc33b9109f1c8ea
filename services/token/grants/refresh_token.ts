/**
 * The `refresh_token` grant (RFC 6749 6), with rotation (RFC 9700 4.14.2): a successful use spends
 * the refresh token and issues a new one with the access token; its client presenting a spent one
 * again, before the token's own expiry, is `invalid_grant` and revokes its whole family, as one of
 * the two users of a copied token is an attacker (an expired one is only expired).
 *
 * A refused request leaves the token exactly as it was: every check runs before anything is
 * written, and the token is spent only in the transaction that stores the new tokens. Another
 * client's refresh token (of this project or another) is as unknown to a client as a made-up one:
 * it is told nothing and changes nothing, so a leaked token and any client's credentials cannot end
 * its user's session, nor can a client's mistaken scope.
 *
 * DPoP (RFC 9449 5): a refresh token bound to a key (a public client's, issued with a proof) is
 * used only with a proof of that key: without a proof the request is `invalid_dpop_proof`, with
 * another key's `invalid_grant` (the proof is valid; the grant is not the prover's, as
 * node-oidc-provider answers). Both are checked before the token's state, so that nobody without
 * the key learns it or, by presenting a spent token, revokes its family.
 *
 * @module
 */

import { sha256 } from "../../../lib/platform/mod.ts";
import { oauthError } from "../oauth_errors.ts";
import { narrowScope } from "../scope.ts";
import { type Grant, issueInFamily, type Replay, replayed } from "./context.ts";

const reused: Replay = {
  description: "The refresh token was already used; every token of its grant is revoked",
  result: "refresh_token_reused",
  grantType: "refresh_token",
};

/** Runs the grant. */
export const refreshToken: Grant = async (deps, client, req, jkt) => {
  if (req.refreshToken === "") throw oauthError("invalid_request", "refresh_token is required");
  const hash = sha256(req.refreshToken);
  const found = await deps.grants.findRefreshToken(hash);
  if (!found || found.token.client_id !== client.id) {
    throw oauthError("invalid_grant", "The refresh token is not valid");
  }
  const { token, family } = found;
  if (token.dpop_jkt !== null && jkt === undefined) {
    throw await deps.dpopError(
      "invalid_dpop_proof",
      "The refresh token is DPoP-bound: send a DPoP proof of its key",
    );
  }
  if (token.dpop_jkt !== null && token.dpop_jkt !== jkt) {
    throw oauthError("invalid_grant", "The refresh token is bound to another DPoP key");
  }
  // Expired before spent, as node-oidc-provider checks: a spent token whose grant lived on past its
  // expiry is stale, not a second user of it, and ends nothing.
  if (token.expires_at.getTime() <= deps.now()) {
    throw oauthError("invalid_grant", "The refresh token has expired");
  }
  if (token.spent_at !== null) return await replayed(deps, family.id, reused);
  if (family.revoked_at !== null) {
    throw oauthError("invalid_grant", "The refresh token was revoked");
  }
  // The access token may be narrowed; the new refresh token keeps the grant's scopes (RFC 6749 6).
  return await issueInFamily(
    deps,
    client,
    { family, spent: { refreshTokenHash: hash }, replayed: reused },
    { principalId: token.principal_id, accountId: token.account_id },
    token.scopes,
    jkt,
    narrowScope(req.scope, token.scopes),
  );
};
