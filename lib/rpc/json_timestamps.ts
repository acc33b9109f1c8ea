/**
 * The Timestamps of a JSON request message, read strictly before connect-es reads the message.
 *
 * Why: connect-es parses a JSON request (the Connect protocol's `application/json`, gRPC-web's
 * `application/grpc-web+json`) with protobuf-es's `fromJson`, which reads a
 * `google.protobuf.Timestamp` string with `Date.parse` once it has the RFC 3339 shape, and
 * `Date.parse` rolls a time that does not exist over instead of refusing it:
 * `2027-02-30T00:00:00Z` became March 2 (and April 31 May 1, hour 24 the next day), a typo taken
 * for another time and stored. The `/v1` gateway reads Timestamps with its own strict parser;
 * this applies the same parser (lib/platform's `parseTimestamp`) to every Timestamp of the
 * request first, so that the Connect port refuses what `/v1` refuses, INVALID_ARGUMENT naming the
 * field (`unit.due_at`, `items[2].at`, `by_key["k"]`, proto names as the services' own violations
 * have them) with `/v1`'s description.
 *
 * What each message type holds is found once per type and kept ({@link holdsTimestamp}): a
 * request whose type has no Timestamp at any depth is not looked at (no second `JSON.parse`). A
 * body that is not JSON, and a value of the wrong shape where a message, list or map should be,
 * are left to connect-es, which refuses them as it does. Binary requests need none of this: a
 * Timestamp there is its seconds and nanos, no date that could be impossible.
 *
 * @module
 */

import type { DescField, DescMessage } from "@bufbuild/protobuf";
import { TimestampSchema } from "@bufbuild/protobuf/wkt";
import { type FieldViolation, parseTimestamp, timestampExpected } from "../platform/mod.ts";

/** A field that is a Timestamp, or a message (list, map) holding one at some depth. */
interface TimestampField {
  /** The JSON keys protobuf-es reads the field by: its JSON name and its proto name. */
  readonly keys: readonly string[];
  /** The proto name, for the violation's path. */
  readonly name: string;
  readonly shape: "singular" | "list" | "map";
  /** The type of a value when it is a message that holds a Timestamp; undefined for a Timestamp. */
  readonly holder: DescMessage | undefined;
}

const fieldsOf = new WeakMap<DescMessage, readonly TimestampField[]>();
const reaches = new WeakMap<DescMessage, boolean>();

/** The message type of a field's values (singular, list items, map values), if a message. */
function messageOf(f: DescField): DescMessage | undefined {
  switch (f.fieldKind) {
    case "message":
      return f.message;
    case "list":
      return f.listKind === "message" ? f.message : undefined;
    case "map":
      return f.mapKind === "message" ? f.message : undefined;
    default:
      return undefined;
  }
}

/** Whether `desc` is a Timestamp or holds one at some depth (recursive types included). */
function reachesTimestamp(desc: DescMessage): boolean {
  let known = reaches.get(desc);
  if (known === undefined) {
    known = false;
    const seen = new Set<DescMessage>();
    const pending = [desc];
    for (let d = pending.pop(); d !== undefined; d = pending.pop()) {
      if (d.typeName === TimestampSchema.typeName) {
        known = true;
        break;
      }
      if (seen.has(d)) continue;
      seen.add(d);
      for (const f of d.fields) {
        const m = messageOf(f);
        if (m !== undefined) pending.push(m);
      }
    }
    reaches.set(desc, known);
  }
  return known;
}

/** The fields of `desc` that are or hold a Timestamp; found once per type. */
function timestampFields(desc: DescMessage): readonly TimestampField[] {
  let fields = fieldsOf.get(desc);
  if (fields === undefined) {
    const found: TimestampField[] = [];
    for (const f of desc.fields) {
      const m = messageOf(f);
      if (m === undefined || !reachesTimestamp(m)) continue;
      found.push({
        keys: f.jsonName === f.name ? [f.name] : [f.jsonName, f.name],
        name: f.name,
        shape: f.fieldKind === "list" ? "list" : f.fieldKind === "map" ? "map" : "singular",
        holder: m.typeName === TimestampSchema.typeName ? undefined : m,
      });
    }
    fields = found;
    fieldsOf.set(desc, fields);
  }
  return fields;
}

/** Whether messages of `desc` have a Timestamp field, in themselves or in a message they hold. */
export function holdsTimestamp(desc: DescMessage): boolean {
  return timestampFields(desc).length > 0;
}

function isObject(json: unknown): json is Record<string, unknown> {
  return typeof json === "object" && json !== null && !Array.isArray(json);
}

/**
 * The violations of the Timestamps in `json`, a request message of type `desc` as protobuf-es's
 * JSON mapping has it (keys by JSON or proto name, `null` for unset): one for each value at a
 * Timestamp's place that {@link parseTimestamp} does not read. Empty when there is none.
 */
export function timestampViolations(desc: DescMessage, json: unknown): FieldViolation[] {
  const violations: FieldViolation[] = [];
  // Objects still to look at, breadth first (no recursion: JSON.parse nests deeper than a stack).
  const pending: [DescMessage, unknown, string][] = [[desc, json, ""]];
  for (let i = 0; i < pending.length; i++) {
    const [type, object, base] = pending[i]!;
    if (!isObject(object)) continue;
    for (const f of timestampFields(type)) {
      for (const key of f.keys) {
        if (!Object.hasOwn(object, key)) continue;
        const path = base + f.name;
        const value = object[key];
        const values: [string, unknown][] = [];
        if (f.shape === "singular") values.push([path, value]);
        else if (f.shape === "list" && Array.isArray(value)) {
          value.forEach((item, n) => values.push([`${path}[${n}]`, item]));
        } else if (f.shape === "map" && isObject(value)) {
          for (const [k, item] of Object.entries(value)) {
            values.push([`${path}[${JSON.stringify(k)}]`, item]);
          }
        }
        for (const [at, item] of values) {
          if (item === null) continue;
          if (f.holder !== undefined) pending.push([f.holder, item, `${at}.`]);
          else if (typeof item !== "string" || parseTimestamp(item) === undefined) {
            violations.push({ field: at, description: timestampExpected });
          }
        }
      }
    }
  }
  return violations;
}

/**
 * The violations of the Timestamps in a JSON request body of type `desc` (call it only for a type
 * that {@link holdsTimestamp}), or undefined when there are none or the body is not JSON (which
 * connect-es refuses as it does).
 */
export function jsonBodyViolations(
  desc: DescMessage,
  body: Uint8Array,
): FieldViolation[] | undefined {
  let json: unknown;
  try {
    // As connect-es reads it: a TextDecoder that replaces what is not UTF-8, then JSON.parse.
    json = JSON.parse(new TextDecoder().decode(body));
  } catch {
    return undefined;
  }
  const violations = timestampViolations(desc, json);
  return violations.length > 0 ? violations : undefined;
}
