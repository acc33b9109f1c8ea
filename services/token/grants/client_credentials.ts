/**
 * The `client_credentials` grant (RFC 6749 4.4): a confidential client's own token, `sub` its
 * client_id; no refresh token (RFC 6749 4.4.3).
 *
 * @module
 */

import { isPublic } from "../client_auth.ts";
import { oauthError } from "../oauth_errors.ts";
import { checkDeclared, parseScope } from "../scope.ts";
import { confirmation, type Grant, tokenType } from "./context.ts";

/** Runs the grant. */
export const clientCredentials: Grant = async (deps, client, req, jkt) => {
  if (isPublic(client)) {
    throw oauthError(
      "unauthorized_client",
      "client_credentials is for confidential (web) clients only",
    );
  }
  const scope = parseScope(req.scope);
  // A project that declares its scopes gives its clients none other (../scope.ts).
  if (scope.length > 0) checkDeclared(await deps.registry.getConfig(client.projectId), scope);
  const token = await deps.accessTokens.sign({
    sub: client.id,
    aud: client.projectId,
    client_id: client.id,
    scope: scope.join(" "),
    ...confirmation(jkt),
  });
  return {
    accessToken: token.jwt,
    tokenType: tokenType(jkt),
    expiresIn: BigInt(token.expiresIn),
    scope: scope.join(" "),
    refreshToken: "",
    issuedTokenType: "",
    dpopNonce: "",
  };
};
