/**
 * What resource-oriented handlers of every service share: identifiers in paths, list pages and
 * nullable fields.
 *
 * @module
 */

import type { DescMessage } from "@bufbuild/protobuf";
import * as v from "valibot";
import { invalidArgument, notFound } from "./errors.ts";
import type { IdKind } from "./ids.ts";
import { pageLimit, validate } from "./validation.ts";

/** Returns the stored UUID of a path id, or throws NOT_FOUND: a malformed id names nothing. */
export function pathUuid(kind: IdKind, label: string, id: string): string {
  const uuid = kind.toUuid(id);
  if (uuid === undefined) throw notFound(label, id);
  return uuid;
}

const pageSchema = v.object({ limit: pageLimit, after: v.string() });

/** A validated page request. */
export interface Page {
  /** Page size, 1..100. */
  limit: number;
  /** The stored UUID of the cursor, or undefined for the first page. */
  after: string | undefined;
}

/**
 * Validates `limit` and `after` of a list request. The cursor must be an id of `kind` for which
 * `isCursor` says it belongs to this list (present or deleted), else INVALID_ARGUMENT.
 */
export async function readPage(
  req: { limit?: number | undefined; after: string },
  desc: DescMessage,
  kind: IdKind,
  label: string,
  isCursor: (uuid: string) => Promise<boolean>,
): Promise<Page> {
  const { limit, after } = validate(pageSchema, desc, req);
  if (after === "") return { limit, after: undefined };
  const uuid = kind.toUuid(after);
  if (uuid === undefined || !(await isCursor(uuid))) {
    throw invalidArgument([{
      field: "after",
      description: `must be the id of a ${label} of this list`,
    }]);
  }
  return { limit, after: uuid };
}

/** Splits `limit + 1` rows into the page and `has_more`. */
export function pageOf<R, T>(
  rows: R[],
  limit: number,
  map: (row: R) => T,
): { data: T[]; hasMore: boolean } {
  return { data: rows.slice(0, limit).map(map), hasMore: rows.length > limit };
}

/** `{ [key]: value }`, or `{}` when the value is null: explicit-presence fields stay unset. */
export function nullable<K extends string, T>(key: K, value: T | null): { [P in K]?: T } {
  return (value === null ? {} : { [key]: value }) as { [P in K]?: T };
}
