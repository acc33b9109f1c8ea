/**
 * OAuth errors as RPC errors: a ConnectError whose google.rpc.ErrorInfo (domain `oauth2`) names the
 * RFC 6749 5.2 error code; the gateway turns it back into the RFC's JSON (`error`,
 * `error_description`) and status.
 *
 * @module
 */

import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.ts";
import { oauthDescription } from "../../lib/platform/mod.ts";

/** The ErrorInfo domain of OAuth errors. */
export const oauthErrorDomain = "oauth2";

/**
 * The error codes this server answers: RFC 6749 5.2 (token endpoint) and 4.1.2.1 (authorization
 * endpoint), RFC 7009 2.2.1, RFC 8693 2.2.2, RFC 9449 (`invalid_dpop_proof` 5, `use_dpop_nonce`
 * 8) and RFC 8628 3.5 (`authorization_pending`, `slow_down`, `expired_token`; with
 * `access_denied`), all of them 400 at the token endpoint; and OpenID Connect Core 3.1.2.6's
 * `consent_required` and `login_required`, which only the authorization endpoint redirects with.
 */
export type OAuthErrorCode =
  | "invalid_request"
  | "invalid_client"
  | "invalid_grant"
  | "unauthorized_client"
  | "unsupported_grant_type"
  | "invalid_scope"
  | "unsupported_token_type"
  | "unsupported_response_type"
  | "request_not_supported"
  | "access_denied"
  | "invalid_target"
  | "invalid_dpop_proof"
  | "use_dpop_nonce"
  | "consent_required"
  | "login_required"
  | "authorization_pending"
  | "slow_down"
  | "expired_token";

const codes: Record<OAuthErrorCode, Code> = {
  invalid_request: Code.InvalidArgument,
  invalid_client: Code.Unauthenticated,
  invalid_grant: Code.InvalidArgument,
  unauthorized_client: Code.PermissionDenied,
  unsupported_grant_type: Code.InvalidArgument,
  invalid_scope: Code.InvalidArgument,
  unsupported_token_type: Code.InvalidArgument,
  unsupported_response_type: Code.InvalidArgument,
  request_not_supported: Code.InvalidArgument,
  access_denied: Code.PermissionDenied,
  invalid_target: Code.InvalidArgument,
  invalid_dpop_proof: Code.InvalidArgument,
  use_dpop_nonce: Code.InvalidArgument,
  consent_required: Code.InvalidArgument,
  login_required: Code.InvalidArgument,
  authorization_pending: Code.InvalidArgument,
  slow_down: Code.InvalidArgument,
  expired_token: Code.InvalidArgument,
};

/**
 * An OAuth error with its description, which becomes the RFC's `error_description`: kept to its
 * characters by lib/platform's oauthDescription, and never quoting what the client sent. Its
 * `metadata` goes in the ErrorInfo: `dpop_nonce`, the DPoP nonce the client is to use next (the
 * gateway's `DPoP-Nonce` header, RFC 9449 8).
 */
export function oauthError(
  error: OAuthErrorCode,
  description: string,
  metadata: { dpop_nonce?: string } = {},
): ConnectError {
  return new ConnectError(oauthDescription(description), codes[error], undefined, [
    { desc: ErrorInfoSchema, value: { reason: error, domain: oauthErrorDomain, metadata } },
  ]);
}
