/**
 * The errors every service and the gateway share: ConnectError is the one error class; this module
 * builds the common ones and turns anything else that was thrown into a ConnectError whose message
 * is safe to show to a caller.
 *
 * @module
 */

import { Code, ConnectError } from "@connectrpc/connect";
import { fromBinary } from "@bufbuild/protobuf";
import { BadRequestSchema, ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.ts";

/** The ErrorInfo domain of the reasons this project's errors carry (google.rpc.ErrorInfo). */
export const errorDomain = "registry.example.com";

/** One bad field of a request: its path (snake_case proto names) and what is wrong with it. */
export interface FieldViolation {
  /** The field path, e.g. `redirect_uris[2]`. */
  field: string;
  /** What is wrong, e.g. `must use https`. */
  description: string;
}

/**
 * Returns an INVALID_ARGUMENT error carrying a google.rpc.BadRequest with one field violation per
 * bad field.
 */
export function invalidArgument(violations: FieldViolation[], message?: string): ConnectError {
  const text = message ??
    (violations.length === 1
      ? `Invalid ${violations[0]!.field || "request"}: ${violations[0]!.description}`
      : `The request has ${violations.length} invalid fields`);
  return new ConnectError(text, Code.InvalidArgument, undefined, [
    { desc: BadRequestSchema, value: { fieldViolations: violations } },
  ]);
}

/** Returns a NOT_FOUND error for a resource, e.g. `notFound("client", "cli_...")`. */
export function notFound(kind: string, id: string): ConnectError {
  return new ConnectError(`No ${kind} with id ${id}`, Code.NotFound);
}

/** Reads the field violations out of an error, whether it was created here or came off the wire. */
export function fieldViolations(error: ConnectError): FieldViolation[] {
  const out: FieldViolation[] = [];
  for (const detail of error.details) {
    if ("desc" in detail) {
      if (detail.desc.typeName !== BadRequestSchema.typeName) continue;
      const value = detail.value as { fieldViolations?: FieldViolation[] };
      for (const v of value.fieldViolations ?? []) {
        out.push({ field: v.field, description: v.description });
      }
    } else if (detail.type === BadRequestSchema.typeName) {
      try {
        for (const v of fromBinary(BadRequestSchema, detail.value).fieldViolations) {
          out.push({ field: v.field, description: v.description });
        }
      } catch {
        // A malformed detail is ignored; the code and message still stand.
      }
    }
  }
  return out;
}

/** Postgres SQLSTATE classes that mean the database cannot be reached or is restarting. */
const unavailableStates = new Set([
  "25P03", // idle_in_transaction_session_timeout: the server ended the session
  "57P01",
  "57P02",
  "57P03",
  "53300",
  "08000",
  "08001",
  "08003",
  "08006",
]);
const unavailableErrnos = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EPIPE",
  "ENOTFOUND",
  "CONNECT_TIMEOUT",
  "CONNECTION_CLOSED",
  "CONNECTION_ENDED",
  "CONNECTION_DESTROYED",
]);

/** The longest error message sent to a caller, in UTF-16 code units, before the mark below. */
export const maxMessageLength = 1024;

/** What ends a message that was cut at {@link maxMessageLength}. */
export const truncationMark = "… (truncated)";

/** A message cut at {@link maxMessageLength}, marked, and valid Unicode. */
export function boundedText(message: string): string {
  if (message.length <= maxMessageLength) return message;
  return `${message.slice(0, maxMessageLength).toWellFormed()}${truncationMark}`;
}

/** The longest `error_description` sent (RFC 6749 sets none; a sentence or two is plenty). */
const maxDescriptionLength = 300;

/**
 * An OAuth `error_description` (RFC 6749 4.1.2.1 and 5.2): only the characters %x20-21, %x23-5B
 * and %x5D-7E (printable ASCII but `"` and `\`), at most 300 of them. Every writer of an OAuth
 * error passes its text through here, so that a description stays within the RFC whatever it
 * says; the texts themselves never quote what a client sent (they name a parameter only when it
 * is one the endpoint knows).
 */
export function oauthDescription(text: string): string {
  const kept = text.replace(/[^\x20\x21\x23-\x5B\x5D-\x7E]+/g, "");
  return kept.length <= maxDescriptionLength
    ? kept
    : `${kept.slice(0, maxDescriptionLength - 3)}...`;
}

/**
 * Bounds the message of an error: messages quote what the caller sent (`No client with id ...`),
 * and a 10^6-character id quoted, then percent-encoded into `grpc-message` (up to 12 bytes per
 * character), took a service past its heap limit with a few such calls at once; a grpc-js client
 * also cancels a call whose trailers are that large. Code, details and cause are kept.
 */
export function boundedMessage(error: ConnectError): ConnectError {
  if (error.rawMessage.length <= maxMessageLength) return error;
  const message = boundedText(error.rawMessage);
  const bounded = new ConnectError(message, error.code, error.metadata, undefined, error.cause);
  bounded.details.push(...error.details);
  return bounded;
}

/**
 * Whether a database error means the connection it came from is gone (or never was): the server
 * ended the session, the socket closed, or connecting failed. What was in flight on it is lost.
 */
export function isConnectionLost(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && (unavailableStates.has(code) || unavailableErrnos.has(code));
}

const conflict = "The change conflicted with another made at the same time; try again";
const unstorable = "The request contains characters that cannot be stored";
/** What a caller is told of a database error, by SQLSTATE. */
const databaseErrors = new Map<unknown, readonly [string, Code]>([
  // A statement that ran past DB_STATEMENT_TIMEOUT_MS (lib/db/postgres.ts).
  ["57014", ["The database did not answer in time; try again", Code.DeadlineExceeded]],
  // A serialization failure or a deadlock: the transaction was rolled back and may be retried.
  ["40001", [conflict, Code.Aborted]],
  ["40P01", [conflict, Code.Aborted]],
  ["22021", [unstorable, Code.InvalidArgument]],
  ["22P05", [unstorable, Code.InvalidArgument]],
  ["23505", ["The resource already exists", Code.AlreadyExists]],
]);

/**
 * Converts anything a handler threw into a ConnectError that is safe to send: ConnectErrors pass
 * through (their message bounded by {@link boundedMessage}); database outages become UNAVAILABLE,
 * and the database errors above what they say; everything else becomes INTERNAL with a generic
 * message (the cause is kept on the error for logging, never sent).
 */
export function toConnectError(error: unknown): ConnectError {
  if (error instanceof ConnectError) return boundedMessage(error);
  const code = (error as { code?: unknown } | null)?.code;
  const [message, status] = isConnectionLost(error)
    ? ["The database is unavailable; try again", Code.Unavailable] as const
    : databaseErrors.get(code) ?? ["Internal error", Code.Internal] as const;
  return new ConnectError(message, status, undefined, undefined, error);
}

/** Whether an error (from a service, or off the wire) carries the ErrorInfo `reason`. */
export function hasReason(error: ConnectError, reason: string): boolean {
  return error.findDetails(ErrorInfoSchema).some((d) => d.reason === reason);
}
