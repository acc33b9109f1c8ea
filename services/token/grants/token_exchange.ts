/**
 * Token exchange (RFC 8693) for installations, as a GitHub App's installation token but standard:
 * a confidential client presents, with its own authentication, an access token it got from
 * `client_credentials` (`subject_token`) and the id of an active installation of its project
 * (`audience`), and receives an access token of that installation's principal, with `act`
 * `{"sub": "<client_id>"}` (RFC 8693 4.1): it acts for the installation. No refresh token: the
 * client exchanges again when it needs to.
 *
 * DPoP (RFC 9449): a subject token bound to a key (`cnf.jkt`) is exchanged only with a proof of
 * that key, and the new token is bound to it too; without a proof the request is
 * `invalid_dpop_proof`, with another key's `invalid_request`: a bound token is of use only to the
 * key's holder, and exchanging must not unbind it. A bearer subject token exchanged with a proof
 * gives a token bound to the proof's key.
 *
 * A subject token that is invalid or unacceptable (not an access token of this service, expired,
 * revoked, another client's, already an installation's, bound to another key) is
 * `invalid_request`, as RFC 8693 2.2.2 requires of the token exchange; not `invalid_grant`, which
 * RFC 6749 5.2 gives to grants of its own kinds.
 *
 * @module
 */

import { InstallationStatus } from "../../../gen/registry/oauth/v1/installation_pb.ts";
import { isPublic } from "../client_auth.ts";
import { oauthError } from "../oauth_errors.ts";
import { narrowScope } from "../scope.ts";
import { type Grant, principalToken, tokenType } from "./context.ts";

/** RFC 8693 3: the URI of an access token. */
export const accessTokenType = "urn:ietf:params:oauth:token-type:access_token";

/** Runs the grant. */
export const tokenExchange: Grant = async (deps, client, req, jkt) => {
  if (isPublic(client)) {
    throw oauthError(
      "unauthorized_client",
      "Token exchange is for confidential (web) clients only",
    );
  }
  if (req.subjectToken === "") throw oauthError("invalid_request", "subject_token is required");
  if (req.subjectTokenType !== accessTokenType) {
    throw oauthError("invalid_request", `subject_token_type must be ${accessTokenType}`);
  }
  if (req.requestedTokenType !== "" && req.requestedTokenType !== accessTokenType) {
    throw oauthError("invalid_request", `requested_token_type must be ${accessTokenType}`);
  }
  if (req.actorToken !== "") {
    throw oauthError("invalid_request", "actor_token is not supported: the client is the actor");
  }
  if (req.resource !== "") {
    throw oauthError(
      "invalid_target",
      "resource is not supported: name the installation in audience",
    );
  }
  if (req.audience === "") {
    throw oauthError("invalid_request", "audience is required: the installation's id");
  }
  const subject = await deps.accessTokens.verify(req.subjectToken);
  if (
    !subject || subject.client_id !== client.id || subject.sub !== client.id ||
    subject.installation_id !== undefined || await deps.isRevoked(subject.jti)
  ) {
    throw oauthError(
      "invalid_request",
      "subject_token must be an active access token this client got from client_credentials",
    );
  }
  const bound = subject.cnf?.jkt;
  if (bound !== undefined && jkt === undefined) {
    throw await deps.dpopError(
      "invalid_dpop_proof",
      "subject_token is DPoP-bound: send a DPoP proof of its key",
    );
  }
  if (bound !== undefined && bound !== jkt) {
    throw oauthError("invalid_request", "subject_token is bound to another DPoP key");
  }
  const installation = await deps.registry.getInstallation(client.projectId, req.audience);
  if (!installation || installation.status !== InstallationStatus.ACTIVE) {
    throw oauthError("invalid_target", "audience is not an active installation of the project");
  }
  const scopes = narrowScope(req.scope, installation.scopes);
  const token = await principalToken(
    deps,
    client,
    {
      installationId: installation.id,
      principalId: installation.principalId ?? "",
      accountId: installation.accountId,
    },
    scopes,
    { sub: client.id },
    jkt,
  );
  return {
    accessToken: token.jwt,
    tokenType: tokenType(jkt),
    expiresIn: BigInt(token.expiresIn),
    scope: scopes.join(" "),
    refreshToken: "",
    issuedTokenType: accessTokenType,
    dpopNonce: "",
  };
};
