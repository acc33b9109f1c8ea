/**
 * What resource-oriented handlers of every service share: identifiers in paths, list pages and
 * nullable fields.
 *
 * @module
 */

import { Buffer } from "node:buffer";
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
      // "an installation", but "a unit": the article goes by the sound, which the spelling of
      // these labels gives but for a leading "u" said "you".
      description: `must be the id of ${/^(?:[aeio]|u(?!ni))/.test(label) ? "an" : "a"} ${label} ` +
        "of this list",
    }]);
  }
  return { limit, after: uuid };
}

/**
 * The most a page may hold, roughly, in UTF-8 bytes of its rows' text (1 MiB). A page of 100
 * clients with 100 redirect URIs and 100 origins of 2,048 characters each is ~41 MB: a few such
 * lists at once would take a process past its memory limit, so a page ends early instead, with
 * `has_more` (AIP-158 lets a page hold fewer items than asked for). Bytes, not characters: a page
 * is answered in UTF-8, and the gateway takes 5 times the answer's bytes from its memory budget (a
 * caller's share is 12 MiB by default); counted in characters, a page of CJK (3 bytes each) was
 * 3 MiB, and the gateway refused it (503) at every try. JSON escapes (`"` as `\"`) may double the
 * text the gateway writes, but it takes its bytes by the protobuf answer, in which the text is as
 * counted here.
 */
export const maxPageBytes = 1024 * 1024;

/** The UTF-8 bytes of the text a row holds: its strings and arrays of strings, at one level. */
export function rowTextSize(row: object): number {
  return rowText(row, utf8Length);
}

/**
 * UTF-8 bytes of a string: Node's `Buffer.byteLength` is native in Deno, and for a string of
 * Latin-1 characters (ASCII among them) it does not look at each character (10,000 ASCII
 * characters in 0.3 us, 10,000 CJK in 1 us; a regular expression finding no non-ASCII one took
 * 24 us).
 */
const utf8Length = (text: string): number => Buffer.byteLength(text);
/** UTF-16 code units of a string: at least a third of its UTF-8 bytes, and free to know. */
const codeUnits = (text: string): number => text.length;

/** The sum of `measure` over a row's strings and arrays of strings, at one level. */
function rowText(row: object, measure: (text: string) => number): number {
  // No array of the row's values, nor an iterator for each of its arrays: a page of 100 clients
  // allocated about 38 KiB for them.
  let size = 0;
  for (const key in row) {
    const value = (row as Record<string, unknown>)[key];
    if (typeof value === "string") size += measure(value);
    else if (Array.isArray(value)) {
      for (let i = 0; i < value.length; i++) {
        const item: unknown = value[i];
        if (typeof item === "string") size += measure(item);
      }
    }
  }
  return size;
}

/**
 * Splits `limit + 1` rows into the page and `has_more`. The page also ends before the row that
 * would take its text past {@link maxPageBytes} of UTF-8 (it always holds at least one row).
 * A character is at most 3 bytes per UTF-16 code unit, so a page of at most a third of the cap in
 * code units (nearly every page) is not counted in bytes: that took 70 to 80 us a page of 100
 * units or clients, against 8 to 11 us for their lengths. Rows whose text is not all in strings
 * and lists of strings (an event's `changes`, JSON) give their own `sizeOf`, in UTF-8 bytes, which
 * is always taken.
 */
export function pageOf<R extends object, T>(
  rows: R[],
  limit: number,
  map: (row: R) => T,
  sizeOf?: (row: R) => number,
): { data: T[]; hasMore: boolean } {
  let end = Math.min(limit, rows.length);
  let measure = sizeOf;
  if (measure === undefined) {
    let units = 0;
    for (let i = 0; i < end; i++) units += rowText(rows[i]!, codeUnits);
    if (units * 3 > maxPageBytes) measure = rowTextSize;
  }
  if (measure !== undefined) {
    let size = 0;
    for (let i = 0; i < end; i++) {
      size += measure(rows[i]!);
      if (size > maxPageBytes && i > 0) end = i;
    }
  }
  const data: T[] = [];
  for (let i = 0; i < end; i++) data.push(map(rows[i]!));
  return { data, hasMore: rows.length > end };
}

/** `{ [key]: value }`, or `{}` when the value is null: explicit-presence fields stay unset. */
export function nullable<K extends string, T>(key: K, value: T | null): { [P in K]?: T } {
  return (value === null ? {} : { [key]: value }) as { [P in K]?: T };
}
