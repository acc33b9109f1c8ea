/**
 * Valibot building blocks shared by the services, and the step that turns valibot issues into
 * field violations named like the request's proto fields (`client.redirect_uris[2]`).
 *
 * Services validate the decoded request message (whatever transport it came by) with a valibot
 * schema whose keys are the message's property names; {@link validate} returns the typed output or
 * throws INVALID_ARGUMENT with one violation per bad field.
 *
 * @module
 */

import type { DescField, DescMessage } from "@bufbuild/protobuf";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import * as v from "valibot";
import {
  type FieldViolation,
  invalidArgument,
  maxTimestampSeconds,
  minTimestampSeconds,
} from "../platform/mod.ts";

/** The list page size when `limit` is absent. */
export const defaultPageSize = 20;

/** The largest list page. */
export const maxPageSize = 100;

/** Adds the issue returned by a rule (a description, or undefined when the value is fine). */
export function rule<T>(
  check: (value: T) => string | undefined,
): v.RawCheckAction<T> {
  return v.rawCheck<T>(({ dataset, addIssue }) => {
    if (!dataset.typed) return;
    const problem = check(dataset.value);
    if (problem !== undefined) addIssue({ message: problem });
  });
}

// deno-lint-ignore no-control-regex
const controlCharacters = /[\u0000-\u001f\u007f-\u009f]/;
const controlCharactersButLineBreaksAndTabs =
  // deno-lint-ignore no-control-regex
  /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f]/;

/**
 * Characters that change how the text around them is shown without being seen themselves: the
 * bidirectional embeddings, overrides and isolates (U+202A..U+202E, U+2066..U+2069; an override
 * shows `gnp.exe` as `exe.png`), and the zero-width space, word joiner and byte order mark. Marks
 * that scripts and emoji need (ZWJ, ZWNJ, LRM, RLM) stay allowed.
 */
const invisibleCharacters = /[\u200b\u202a-\u202e\u2060\u2066-\u2069\ufeff]/;

/**
 * Text that shows nothing: white space, and characters that are not drawn alone (Unicode's
 * default-ignorable code points: joiners, marks, the soft hyphen, variation selectors, the Hangul
 * fillers U+115F, U+1160, U+3164, U+FFA0), and the blank Braille pattern U+2800.
 */
const blank = /^[\s\p{Default_Ignorable_Code_Point}\u2800]*$/u;

/**
 * A human-readable text of min..max characters (Unicode code points) with no control characters
 * (with `multiline`, line breaks and tabs are allowed), no lone surrogates, and none of
 * {@link invisibleCharacters}; when `min` is 1 or more, not blank either. What users are shown as
 * an application's or a record's name must look like what it is.
 */
export function text(min: number, max: number, options: { multiline?: boolean } = {}) {
  const range = min === 0 ? `at most ${max}` : min === max ? `${min}` : `between ${min} and ${max}`;
  const forbidden = options.multiline ? controlCharactersButLineBreaksAndTabs : controlCharacters;
  return v.pipe(
    v.string("must be a string"),
    v.minCodePoints(min, `must be ${range} characters`),
    v.maxCodePoints(max, `must be ${range} characters`),
    rule((s: string) =>
      forbidden.test(s)
        ? "must not contain control characters"
        : !s.isWellFormed()
        ? "must be valid Unicode"
        : invisibleCharacters.test(s)
        ? "must not contain invisible or direction-changing characters (U+200B, U+202A..U+202E, " +
          "U+2060, U+2066..U+2069, U+FEFF)"
        : min > 0 && s !== "" && blank.test(s)
        ? "must not be blank"
        : undefined
    ),
  );
}

/** A string of at most `max` characters (code points) checked by `check`. */
export function checkedString(max: number, check: (value: string) => string | undefined) {
  return v.pipe(
    v.string("must be a string"),
    v.maxCodePoints(max, `must be at most ${max} characters`),
    rule(check),
  );
}

/** A list of at most `max` items, each valid by `item`, with no two items equal by `key`. */
export function uniqueList<T extends v.GenericSchema<unknown, string>>(
  item: T,
  max: number,
  key: (value: string) => string = (s) => s,
) {
  return v.pipe(
    v.array(item, "must be a list"),
    v.maxLength(max, `must have at most ${max} items`),
    v.metadata({ uniqueItems: true }),
    rule((items: string[]) => {
      const seen = new Map<string, number>();
      for (const [i, value] of items.entries()) {
        const k = key(value);
        const first = seen.get(k);
        if (first !== undefined) {
          return `must not contain duplicates (item ${i} repeats item ${first})`;
        }
        seen.set(k, i);
      }
      return undefined;
    }),
  );
}

/** A proto enum field: any of `allowed`; the zero value (UNSPECIFIED) reads as "is required". */
export function enumValue<const T extends readonly number[]>(allowed: T, names: string) {
  return v.pipe(
    v.number(),
    v.check((n) => n !== 0, "is required"),
    v.picklist(allowed, `must be one of ${names}`),
  );
}

// Years 0001..9999, the range of RFC 3339 (and of google.protobuf.Timestamp).
const minSeconds = BigInt(minTimestampSeconds);
const maxSeconds = BigInt(maxTimestampSeconds);

/** A google.protobuf.Timestamp within the years 0001..9999. */
export const timestamp = v.pipe(
  v.custom<Timestamp>((t) => typeof t === "object" && t !== null),
  rule((t: Timestamp) =>
    t.seconds < minSeconds || t.seconds > maxSeconds || t.nanos < 0 || t.nanos > 999_999_999
      ? "must be between years 0001 and 9999"
      : undefined
  ),
);

/** A list page size: absent (the default, 20) or 1..100. */
export const pageLimit = v.optional(
  v.pipe(
    v.number(),
    v.integer("must be an integer"),
    v.minValue(1, `must be between 1 and ${maxPageSize}`),
    v.maxValue(maxPageSize, `must be between 1 and ${maxPageSize}`),
  ),
  defaultPageSize,
);

/** Converts valibot issues into field violations named by the proto fields of `schema`. */
export function violationsOf(
  schema: DescMessage,
  issues: v.BaseIssue<unknown>[],
): FieldViolation[] {
  return issues.map((issue) => {
    let desc: DescMessage | undefined = schema;
    let field = "";
    for (const item of issue.path ?? []) {
      if (typeof item.key === "number") {
        field += `[${item.key}]`;
        continue;
      }
      const key = String(item.key);
      const f: DescField | undefined = desc?.fields.find((f) => f.localName === key);
      field += (field ? "." : "") + (f?.name ?? key);
      desc = f?.fieldKind === "message" || (f?.fieldKind === "list" && f.listKind === "message")
        ? f.message
        : undefined;
    }
    // A value that is not there fails as missing, whatever its schema would say of a bad one.
    const missing = issue.input === undefined && issue.received === "undefined";
    return { field, description: missing ? "is required" : issue.message };
  });
}

/** Validates a request message; returns the schema's output or throws INVALID_ARGUMENT. */
export function validate<S extends v.GenericSchema>(
  schema: S,
  desc: DescMessage,
  value: unknown,
): v.InferOutput<S> {
  const result = v.safeParse(schema, value);
  if (result.success) return result.output;
  throw invalidArgument(violationsOf(desc, result.issues));
}

/** Throws INVALID_ARGUMENT if any violation was collected by hand. */
export function assertValid(violations: FieldViolation[]): void {
  if (violations.length > 0) throw invalidArgument(violations);
}
