/**
 * What resource-oriented handlers of every service share: identifiers in paths, list pages and
 * nullable fields.
 *
 * @module
 */

import type { DescMessage } from "@bufbuild/protobuf";
import * as v from "valibot";
import { invalidArgument, notFound } from "../platform/mod.ts";
import type { IdKind } from "../platform/mod.ts";
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
      description: `must be the id of ${/^[aeiou]/.test(label) ? "an" : "a"} ${label} of this list`,
    }]);
  }
  return { limit, after: uuid };
}

/**
 * The most a page may hold, roughly, in bytes of its rows' text (1 MiB). A page of 100 clients
 * with 100 redirect URIs and 100 origins of 2,048 characters each is ~41 MB: a few such lists at
 * once would take a process past its memory limit, so a page ends early instead, with `has_more`
 * (AIP-158 lets a page hold fewer items than asked for).
 */
export const maxPageBytes = 1024 * 1024;

/** The text a row holds: its strings and arrays of strings, at one level. */
export function rowTextSize(row: object): number {
  // No array of the row's values, nor an iterator for each of its arrays: a page of 100 clients
  // allocated about 38 KiB for them.
  let size = 0;
  for (const key in row) {
    const value = (row as Record<string, unknown>)[key];
    if (typeof value === "string") size += value.length;
    else if (Array.isArray(value)) {
      for (let i = 0; i < value.length; i++) {
        const item: unknown = value[i];
        if (typeof item === "string") size += item.length;
      }
    }
  }
  return size;
}

/**
 * Splits `limit + 1` rows into the page and `has_more`. The page also ends before the row that
 * would take its text past {@link maxPageBytes} (it always holds at least one row).
 */
export function pageOf<R extends object, T>(
  rows: R[],
  limit: number,
  map: (row: R) => T,
): { data: T[]; hasMore: boolean } {
  let end = Math.min(limit, rows.length);
  let size = 0;
  for (let i = 0; i < end; i++) {
    size += rowTextSize(rows[i]!);
    if (size > maxPageBytes && i > 0) end = i;
  }
  const data: T[] = [];
  for (let i = 0; i < end; i++) data.push(map(rows[i]!));
  return { data, hasMore: rows.length > end };
}

/** `{ [key]: value }`, or `{}` when the value is null: explicit-presence fields stay unset. */
export function nullable<K extends string, T>(key: K, value: T | null): { [P in K]?: T } {
  return (value === null ? {} : { [key]: value }) as { [P in K]?: T };
}
