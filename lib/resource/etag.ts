/**
 * Etags (AIP-154): every resource carries the version of its row, and a write that names one
 * changes the row only while it is still that version.
 *
 * The version is the row's `xmin`, the id of the transaction that wrote it: Postgres changes it on
 * every write of the row and on nothing else, so it needs no column, no trigger and no write of
 * its own (Npgsql and EF Core use it the same way), and a conditional write is one statement:
 * `... where <schema>.etag(xmin) = $etag`. The etag is not the `xmin` itself, a counter of the
 * whole database that would tell a caller how much everyone else writes, but a keyed digest of it
 * (16 hex digits; each schema's `opaque_etags` migration, lib/audit's `etagOf`). It is opaque to
 * callers: compared, never parsed.
 *
 * A resource whose representation also depends on the clock (a client secret's or key's `status`
 * turns from `active` to `expired` at its `expires_at`, with no write of its row) carries its row's
 * version and the clock's part of it: {@link expiringEtag}. A strong validator changes with every
 * change of the representation (RFC 9110 8.8.1), so a copy read while the credential was active is
 * not revalidated (304) once it shows `expired`, nor deleted under a condition read before.
 *
 * A stale etag is ABORTED (AIP-154) with a google.rpc.ErrorInfo of reason {@link etagMismatchReason},
 * which the gateway answers 412 Precondition Failed.
 *
 * @module
 */

import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.ts";
import * as v from "valibot";
import { errorDomain, invalidArgument } from "../platform/mod.ts";

/** ErrorInfo reason of a stale etag (HTTP 412). */
export const etagMismatchReason = "ETAG_MISMATCH";

/** ABORTED: the resource changed since the etag was read. */
export function etagMismatch(label: string): ConnectError {
  return preconditionFailed(
    `The ${label} is not at the version the request is conditional on (a stale etag, or an ` +
      "If-None-Match that it matches); read it again and retry",
  );
}

/**
 * ABORTED with reason {@link etagMismatchReason} (HTTP 412): a write's precondition on the
 * resource's version is false, e.g. "only if absent" on a resource that exists.
 */
export function preconditionFailed(message: string): ConnectError {
  return new ConnectError(
    message,
    Code.Aborted,
    undefined,
    [{ desc: ErrorInfoSchema, value: { reason: etagMismatchReason, domain: errorDomain } }],
  );
}

/**
 * An etag that no resource ever has (an etag is hex digits, then perhaps `-expired`), yet a
 * well-formed one: a write conditional on it makes every check the write makes (the caller's
 * rights, the resource's existence) and then fails ABORTED. The gateway sends it for a condition
 * it found false.
 */
export const noVersion = "!";

/**
 * The etag of a write conditional on any current version (`If-Match: *`, RFC 9110 13.1.1) where
 * the same write without one would create the resource (a project's config): it updates what is
 * there, whatever its version, and creates nothing. The gateway sends it; where a write without an
 * etag never creates, `If-Match: *` is sent as no etag (the write finds nothing: NOT_FOUND).
 */
export const anyVersion = "*";

/** What {@link expiringEtag} adds to the row's version once the resource has expired. */
export const expiredEtagSuffix = "-expired";

/**
 * The etag of a resource that expires: its row's etag, followed by
 * {@link expiredEtagSuffix} from `expiresAt` on by the service's clock (`now`, ms since the epoch;
 * expired is `expiresAt <= now`, the rule by which such a resource stops being live). The
 * repositories write the same rule in SQL, for a delete's condition.
 */
export function expiringEtag(version: string, expiresAt: Date | null, now: number): string {
  return expiresAt !== null && expiresAt.getTime() <= now ? version + expiredEtagSuffix : version;
}

/** An etag as the services give them: up to 64 printable characters without quotes, or empty. */
const etagPattern = /^[\x21\x23-\x7e]{0,64}$/;

/** What a malformed etag is told. */
const etagRule = "must be an etag as read (up to 64 printable characters, no quotes)";

/** The rule of an `etag` field in a resource being created (where it is ignored once valid). */
export const etagField = v.optional(v.pipe(v.string(), v.regex(etagPattern, etagRule)));

/** Whether `etag` is well-formed (up to 64 printable characters without quotes, or empty). */
export function isEtag(etag: string): boolean {
  return etagPattern.test(etag);
}

/** The etag a write is conditional on: undefined when empty; INVALID_ARGUMENT when malformed. */
export function readEtag(etag: string | undefined, field: string): string | undefined {
  if (etag === undefined || etag === "") return undefined;
  if (!etagPattern.test(etag)) throw invalidArgument([{ field, description: etagRule }]);
  return etag;
}
