/**
 * Timestamps of stored rows in answers.
 *
 * @module
 */

import type { Timestamp } from "@bufbuild/protobuf/wkt";

/**
 * A stored time as a google.protobuf.Timestamp: protobuf-es's `timestampFromDate` without its
 * `create` (a page of 100 units holds 200 to 300 of them).
 */
export function timestampOf(date: Date): Timestamp {
  const ms = date.getTime();
  const seconds = Math.floor(ms / 1000);
  return {
    $typeName: "google.protobuf.Timestamp",
    seconds: BigInt(seconds),
    nanos: (ms - seconds * 1000) * 1_000_000,
  };
}

/**
 * A request's Timestamp as the millisecond it falls in (its nanos truncated), for a time that is
 * stored (`timestamptz(3)`) or compared with stored ones. protobuf-es's `timestampDate` rounds to
 * the nearest millisecond instead: a stored time later than the one given, and from
 * `9999-12-31T23:59:59.9995Z` on, a date in the year 10000 that Postgres refused (an internal
 * error for a value validation had accepted).
 */
export function timestampFloorMs(t: Timestamp): number {
  return Number(t.seconds) * 1000 + Math.floor(t.nanos / 1_000_000);
}

/**
 * The first millisecond at or after a request's Timestamp: for stored times, which are whole
 * milliseconds, `t >= since` holds exactly when `t >= timestampCeilMs(since)`, and `t < until`
 * when `t < timestampCeilMs(until)`. May be 10000-01-01T00:00:00.000Z, after every stored time.
 */
export function timestampCeilMs(t: Timestamp): number {
  return Number(t.seconds) * 1000 + Math.ceil(t.nanos / 1_000_000);
}

/** The latest millisecond a Timestamp of the API holds: 9999-12-31T23:59:59.999Z. */
export const maxTimestampMs = 253_402_300_799_999;

/** Whether Timestamp `a` is before `b`, to the nanosecond. */
export function timestampBefore(a: Timestamp, b: Timestamp): boolean {
  return a.seconds < b.seconds || (a.seconds === b.seconds && a.nanos < b.nanos);
}
