/**
 * The HTTP side of errors: status codes for RPC codes, and the one JSON error body,
 * `{"error": {"code": "invalid_argument", "message": "...", "details": [{"field", "description"}]}}`.
 *
 * @module
 */

import { Code, type ConnectError } from "@connectrpc/connect";
import { codeToHttpStatus, codeToString } from "@connectrpc/connect/protocol-connect";
import {
  boundedText,
  type FieldViolation,
  fieldViolations,
  hasReason,
} from "../lib/platform/mod.ts";
import { overBudgetReason } from "../lib/platform/mod.ts";
import { GuardResponse } from "../lib/transport/mod.ts";
import { keyReusedReason } from "../lib/policy/mod.ts";
import { etagMismatchReason } from "../lib/resource/mod.ts";

/**
 * HTTP status per RPC code: connect-es's mapping, but FAILED_PRECONDITION is 409 here (a state
 * conflict, as Google's APIs answer it), not 400.
 */
function statusOf(code: Code): number {
  return code === Code.FailedPrecondition ? 409 : codeToHttpStatus(code);
}

const jsonHeaders = { "content-type": "application/json" };

/** Writes the JSON error body. */
export function errorResponse(
  status: number,
  code: Code,
  message: string,
  details: FieldViolation[] = [],
  headers: Record<string, string> = {},
): Response {
  return new GuardResponse(
    // The gateway's own messages quote what it was sent (an unknown key) as the services' do:
    // bounded the same way.
    JSON.stringify({ error: { code: codeToString(code), message: boundedText(message), details } }),
    { status, headers: { ...jsonHeaders, ...headers } },
  );
}

/** 405 for a method the path does not take, with `Allow`. */
export function methodNotAllowed(method: string, allow: readonly string[]): Response {
  return errorResponse(
    405,
    Code.Unimplemented,
    `${method} is not allowed here; use ${allow.join(", ")}`,
    [],
    { allow: allow.join(", ") },
  );
}

/**
 * The challenge of a 401 (RFC 6750 3): `Bearer` alone to a request that presented no bearer token
 * (none, or another scheme), which has no error to report (3.1: it "SHOULD NOT include an error
 * code"); `error="invalid_token"` to one whose token did not verify.
 */
export function bearerChallenge(authorization: string | null): string {
  return /^bearer /i.test(authorization ?? "") ? 'Bearer error="invalid_token"' : "Bearer";
}

/**
 * Writes an RPC error. Field paths are made relative to the JSON body when the body is a field of
 * the request (`client.redirect_uris[0]` -> `redirect_uris[0]`); `authorization` is the request's
 * header, for the challenge of a 401.
 */
export function rpcErrorResponse(
  error: ConnectError,
  bodyField: string | undefined,
  authorization: string | null,
): Response {
  const prefix = bodyField === undefined ? undefined : `${bodyField}.`;
  const details = fieldViolations(error).map((v) => ({
    field: prefix && v.field.startsWith(prefix) ? v.field.slice(prefix.length) : v.field,
    description: v.description,
  }));
  let message = error.rawMessage;
  if (prefix) message = message.replace(`Invalid ${prefix}`, "Invalid ");
  const headers: Record<string, string> = error.code === Code.Unauthenticated
    ? { "www-authenticate": bearerChallenge(authorization) }
    : {};
  // A service that asks for a pause says how long: passed on.
  const retryAfter = error.metadata.get("retry-after");
  if (hasReason(error, overBudgetReason)) {
    // A service at its memory budget: a moment's unavailability, as the gateway's own refusal.
    return errorResponse(503, Code.Unavailable, message, [], { "retry-after": retryAfter ?? "1" });
  }
  // Every 503 says when to come back (the contract's promise): the service's pause, else 1 s.
  if (error.code === Code.Unavailable) headers["retry-after"] = retryAfter ?? "1";
  // An idempotency key reused with another request: 422, as Stripe answers; a stale `If-Match`
  // (or etag field): 412 Precondition Failed (RFC 9110 13.1.1).
  const status = hasReason(error, keyReusedReason)
    ? 422
    : hasReason(error, etagMismatchReason)
    ? 412
    : statusOf(error.code);
  return errorResponse(status, error.code, message, details, headers);
}
