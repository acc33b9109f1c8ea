/**
 * The `authorization_code` grant (RFC 6749 4.1.3) with PKCE (RFC 7636 4.6): a code from
 * DecideAuthorization buys an access token of the installation the consent made and a refresh
 * token. Its client presenting it after it was redeemed, with a verifier or without, is
 * `invalid_grant` and revokes everything the redemption issued (RFC 6749 4.1.2, RFC 9700 4.5), as
 * long as the code has not expired (then it is only expired).
 *
 * A code bound to a DPoP key (RFC 9449 10: the authorization request's `dpop_jkt`, or the key of
 * the proof its pushed request carried) is redeemed only with a proof of that key.
 *
 * As with refresh tokens, a refused request spends nothing: the client, expiry, redirect URI,
 * verifier, DPoP key and installation are checked before anything is written, and the code is marked
 * redeemed only in the transaction that stores the tokens. Another client's code is as unknown
 * to a client as a made-up one.
 *
 * @module
 */

import { sha256 } from "../../../lib/platform/mod.ts";
import { oauthError } from "../oauth_errors.ts";
import { verifierMatches } from "../pkce.ts";
import { type Grant, issueInFamily, type Replay, replayed } from "./context.ts";

const reused: Replay = {
  description: "The code was already used; the tokens it was exchanged for are revoked",
  result: "code_replayed",
  grantType: "authorization_code",
};

/** Runs the grant. */
export const authorizationCode: Grant = async (deps, client, req, jkt) => {
  if (req.code === "") throw oauthError("invalid_request", "code is required");
  const hash = sha256(req.code);
  const found = await deps.grants.findCode(hash);
  if (!found || found.code.client_id !== client.id) {
    throw oauthError("invalid_grant", "The code is not valid");
  }
  const { code, family } = found;
  // Expired before redeemed, as node-oidc-provider checks: a code that turns up again after its
  // 60 seconds (from a browser's history, a log) is stale, and ends nothing.
  if (code.expires_at.getTime() <= deps.now()) {
    throw oauthError("invalid_grant", "The code has expired");
  }
  if (code.redeemed_at !== null) return await replayed(deps, family.id, reused);
  const redirectOk = req.redirectUri === code.redirect_uri ||
    (code.redirect_uri === "" && client.redirectUris.includes(req.redirectUri));
  if (!redirectOk) {
    throw oauthError(
      "invalid_grant",
      "redirect_uri differs from the one of the authorization request",
    );
  }
  // Asked for only now: a redeemed code presented without it is a second use all the same, and
  // revokes what the first issued (as node-oidc-provider checks PKCE after the code's state).
  if (req.codeVerifier === "") {
    throw oauthError("invalid_request", "code_verifier is required (PKCE)");
  }
  if (!(await verifierMatches(req.codeVerifier, code.code_challenge))) {
    throw oauthError("invalid_grant", "code_verifier does not match the code_challenge");
  }
  // RFC 9449 10: a code bound to a DPoP key (dpop_jkt, or the proof of its pushed request) needs
  // a proof of that key; both refusals are invalid_grant, as node-oidc-provider answers them.
  if (code.dpop_jkt !== null && jkt === undefined) {
    throw oauthError("invalid_grant", "The code is bound to a DPoP key: send a DPoP proof of it");
  }
  if (code.dpop_jkt !== null && jkt !== code.dpop_jkt) {
    throw oauthError("invalid_grant", "The DPoP proof's key is not the one the code is bound to");
  }
  return await issueInFamily(
    deps,
    client,
    { family, spent: { codeHash: hash }, replayed: reused },
    { principalId: code.principal_id, accountId: code.account_id },
    code.scopes,
    jkt,
  );
};
