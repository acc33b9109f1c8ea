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
