/**
 * The JSON codec of the `/v1` gateway: request bodies and query/path values in, response bodies
 * out. It is driven only by protobuf descriptors, so any service's messages can use it.
 *
 * The JSON dialect (deliberately stricter than the canonical protobuf JSON mapping):
 *
 * - keys are proto field names (`redirect_uris`), never the camelCase JSON names;
 * - enums are the lower-case value names without the enum's shared prefix (`CLIENT_TYPE_WEB` is
 *   `web`); the zero (`*_UNSPECIFIED`) value is never accepted and is written as `null`;
 * - every field is written: implicit-presence scalars with their value (defaults included),
 *   explicit-presence (proto3 `optional`) scalars and enums, and singular messages, as `null` when
 *   unset; lists as arrays, maps as objects. Members of a real `oneof` are written only when set;
 * - 64-bit integers are JSON numbers while they are safe integers, strings beyond; bytes are
 *   base64; `google.protobuf.Timestamp` is an RFC 3339 string (written in UTC with milliseconds),
 *   `google.protobuf.Duration` a `"1.5s"` string, `google.protobuf.FieldMask` a comma-separated
 *   string of snake_case paths, wrapper types their bare value. `google.protobuf.Struct` is a JSON
 *   object, read and written as it is: any members, nested at most 16 objects and arrays deep
 *   (itself included), strings valid Unicode without NUL. Value, ListValue and Any cannot be read
 *   (Value and ListValue are written with the canonical protobuf JSON mapping).
 *
 * - a member name appears at most once in an object (RFC 8259 4 leaves what a repeat means to
 *   each parser, so a proxy that reads the first and this gateway, which would read the last,
 *   could see two requests in one): {@link repeatedMember} finds the first repeat.
 *
 * Decoding never throws on bad input: it collects one {@link FieldViolation} per bad field.
 * Lookup tables (fields by name, field behaviours, enum names) are built once per descriptor.
 *
 * Why not protobuf-es's `toJson`/`fromJson` underneath: every rule above differs from the canonical
 * mapping they implement, which accepts camelCase as well as proto names, full enum names (and the
 * zero value), writes 64-bit integers as strings, omits unset fields, writes timestamps with 0, 3, 6
 * or 9 fraction digits and field masks in camelCase, and throws at the first bad value. Adapting
 * their output field by field would take as much code as writing it, on every response's path.
 * From protobuf-es this uses the descriptors, `create`, its base64 codec, and `toJson` for Value
 * and ListValue, whose canonical form is the contract's. A Struct needs none of it: protobuf-es
 * keeps a Struct field (outside a Value) as the JsonObject itself, so that is what is read and
 * written (`fromJson(StructSchema, ...)` would build the message form, which no field holds).
 *
 * @module
 */

import {
  create,
  type DescEnum,
  type DescField,
  type DescMessage,
  type DescOneof,
  getOption,
  type Message,
  type MessageShape,
  ScalarType,
  toJson,
} from "@bufbuild/protobuf";
import { base64Decode, base64Encode } from "@bufbuild/protobuf/wire";
import {
  DurationSchema,
  FeatureSet_FieldPresence,
  FieldMaskSchema,
  TimestampSchema,
} from "@bufbuild/protobuf/wkt";
import { field_behavior, FieldBehavior } from "../gen/google/api/field_behavior_pb.ts";
import {
  type FieldViolation,
  maxTimestampSeconds,
  minTimestampSeconds,
  parseTimestamp,
  timestampExpected,
} from "../lib/platform/mod.ts";
import { enumSpellings } from "../lib/resource/mod.ts";

/** The outcome of {@link decodeMessage}. */
export interface DecodeResult<T> {
  /** The decoded message; fields with violations are left unset. */
  message: T;
  /** One violation per bad field; empty when the input is valid. */
  violations: FieldViolation[];
  /**
   * The proto names of the known top-level keys present in the input, in input order, including
   * keys whose value was invalid (the gateway derives an update mask from them).
   */
  keys: string[];
}

/** Deepest allowed nesting of message objects (the top-level object is level 1). */
const maxDepth = 32;
/** Largest list (and map) accepted before the items are even looked at. */
const maxItems = 10_000;
/** Deepest allowed nesting of objects and arrays in a Struct (the Struct itself is level 1). */
const maxStructDepth = 16;

// ---------------------------------------------------------------------------------------------
// Per-descriptor plans, built lazily and cached.

/** How a message type is represented in JSON. */
type MessageKind =
  | "object"
  | "timestamp"
  | "duration"
  | "field_mask"
  | "wrapper"
  | "struct"
  | "json_message"
  | "unsupported";

const messageKinds: ReadonlyMap<string, MessageKind> = new Map<string, MessageKind>([
  ["google.protobuf.Timestamp", "timestamp"],
  ["google.protobuf.Duration", "duration"],
  ["google.protobuf.FieldMask", "field_mask"],
  ["google.protobuf.DoubleValue", "wrapper"],
  ["google.protobuf.FloatValue", "wrapper"],
  ["google.protobuf.Int64Value", "wrapper"],
  ["google.protobuf.UInt64Value", "wrapper"],
  ["google.protobuf.Int32Value", "wrapper"],
  ["google.protobuf.UInt32Value", "wrapper"],
  ["google.protobuf.BoolValue", "wrapper"],
  ["google.protobuf.StringValue", "wrapper"],
  ["google.protobuf.BytesValue", "wrapper"],
  ["google.protobuf.Struct", "struct"],
  ["google.protobuf.Value", "json_message"],
  ["google.protobuf.ListValue", "json_message"],
  ["google.protobuf.Any", "unsupported"],
]);

/** The type of one value: a singular field, a list item or a map value. */
type Elem =
  | { readonly kind: "scalar"; readonly scalar: ScalarType; readonly longAsString: boolean }
  | { readonly kind: "enum"; readonly desc: DescEnum }
  | { readonly kind: "message"; readonly desc: DescMessage };

/** How a field is read and written (./wire_json.ts writes by the same plans). */
export interface FieldPlan {
  readonly field: DescField;
  /** The proto name, the JSON key. */
  readonly name: string;
  readonly localName: string;
  readonly shape: "singular" | "list" | "map";
  readonly elem: Elem;
  /** Map key type (maps only). */
  readonly mapKey: ScalarType | undefined;
  /** Whether `null` means "unset" (explicit presence scalars and enums, singular messages). */
  readonly nullable: boolean;
  readonly outputOnly: boolean;
  /** The real oneof the field belongs to. */
  readonly oneof: DescOneof | undefined;
  /** Violation for a second member of the same oneof. */
  readonly oneofConflict: string;
}

/** How a message type is read and written. */
export interface MessagePlan {
  readonly kind: MessageKind;
  readonly fields: readonly FieldPlan[];
  readonly byName: ReadonlyMap<string, FieldPlan>;
}

export interface EnumPlan {
  /** Accepted names (lower-case, prefix stripped) to numbers; never the number 0. */
  readonly byName: ReadonlyMap<string, number>;
  /** Numbers to names; never the number 0. */
  readonly byNumber: ReadonlyMap<number, string>;
  /** The violation for a value that is not one of the names. */
  readonly expected: string;
}

const messagePlans = new WeakMap<DescMessage, MessagePlan>();
const enumPlans = new WeakMap<DescEnum, EnumPlan>();

/** The plan of a message type (made once). */
export function messagePlan(desc: DescMessage): MessagePlan {
  let plan = messagePlans.get(desc);
  if (plan === undefined) {
    const fields = desc.fields.map(fieldPlan);
    plan = {
      kind: messageKinds.get(desc.typeName) ?? "object",
      fields,
      byName: new Map(fields.map((f) => [f.name, f])),
    };
    messagePlans.set(desc, plan);
  }
  return plan;
}

function fieldPlan(field: DescField): FieldPlan {
  let elem: Elem;
  if (field.message !== undefined) elem = { kind: "message", desc: field.message };
  else if (field.enum !== undefined) elem = { kind: "enum", desc: field.enum };
  else {
    elem = {
      kind: "scalar",
      scalar: field.scalar,
      longAsString: "longAsString" in field && field.longAsString,
    };
  }
  const shape = field.fieldKind === "list"
    ? "list"
    : field.fieldKind === "map"
    ? "map"
    : "singular";
  const behaviors = getOption(field, field_behavior);
  const oneof = field.oneof;
  return {
    field,
    name: field.name,
    localName: field.localName,
    shape,
    elem,
    mapKey: field.fieldKind === "map" ? field.mapKey : undefined,
    nullable: field.fieldKind === "message" ||
      ((field.fieldKind === "scalar" || field.fieldKind === "enum") &&
        field.presence === FeatureSet_FieldPresence.EXPLICIT),
    outputOnly: behaviors.includes(FieldBehavior.OUTPUT_ONLY),
    oneof,
    oneofConflict: oneof === undefined
      ? ""
      : `only one of ${oneof.fields.map((f) => f.name).join(", ")} may be set`,
  };
}

/** The names of an enum's values (made once). */
export function enumPlan(desc: DescEnum): EnumPlan {
  let plan = enumPlans.get(desc);
  if (plan === undefined) {
    // The services' spellings (lib/resource/enums.ts), but for the number 0, which JSON leaves out.
    const all = enumSpellings(desc);
    const byName = new Map([...all.byName].filter(([, number]) => number !== 0));
    const byNumber = new Map([...all.byNumber].filter(([number]) => number !== 0));
    const expected = `must be one of ${[...byName.keys()].map((n) => `"${n}"`).join(", ")}`;
    plan = { byName, byNumber, expected };
    enumPlans.set(desc, plan);
  }
  return plan;
}

// ---------------------------------------------------------------------------------------------
// Scalars.

/** A rejected value; the reason is the violation's description. */
class Bad {
  constructor(readonly reason: string) {}
}

const notInteger = new Bad("must be an integer");
const notString = new Bad("must be a string");
const notBoolean = new Bad("must be a boolean");
const notNumber = new Bad("must be a finite number");
const notBase64 = new Bad("must be a base64-encoded string");
const notUnicode = new Bad("must be valid Unicode");
const hasNul = new Bad("must not contain NUL characters");
const notObject = new Bad("must be a JSON object");
const notArray = new Bad("must be an array");
const isNull = new Bad("must not be null");
const unsafeNumber = new Bad(
  `must be an integer; use a decimal string beyond ±${Number.MAX_SAFE_INTEGER}`,
);

interface IntRange {
  readonly min: bigint;
  readonly max: bigint;
  readonly minNumber: number;
  readonly maxNumber: number;
  readonly is64: boolean;
  readonly outOfRange: Bad;
}

function intRange(min: bigint, max: bigint, is64: boolean): IntRange {
  return {
    min,
    max,
    minNumber: Number(min),
    maxNumber: Number(max),
    is64,
    outOfRange: new Bad(`must be an integer between ${min} and ${max}`),
  };
}

const int32Range = intRange(-(2n ** 31n), 2n ** 31n - 1n, false);
const uint32Range = intRange(0n, 2n ** 32n - 1n, false);
const int64Range = intRange(-(2n ** 63n), 2n ** 63n - 1n, true);
const uint64Range = intRange(0n, 2n ** 64n - 1n, true);

function rangeOf(scalar: ScalarType): IntRange | undefined {
  switch (scalar) {
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return int32Range;
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return uint32Range;
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return int64Range;
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return uint64Range;
    default:
      return undefined;
  }
}

const decimal = /^-?[0-9]+$/;
const floatRange = new Bad("is out of range for a 32-bit float");

/** Checks a string value: well-formed UTF-16 and no NUL. */
function checkString(value: string): string | Bad {
  if (!value.isWellFormed()) return notUnicode;
  if (value.includes("\0")) return hasNul;
  return value;
}

/** Parses a decimal integer string (already known to match {@link decimal}) within a range. */
function parseDecimal(raw: string, range: IntRange, longAsString: boolean): unknown {
  // Cheap guard before BigInt: more than 20 significant digits is out of every range.
  const digits = raw.replace(/^-?0*/, "");
  if (digits.length > 20) return range.outOfRange;
  const value = BigInt(raw);
  if (value < range.min || value > range.max) return range.outOfRange;
  if (!range.is64) return Number(value);
  return longAsString ? value.toString() : value;
}

/** Converts an integer JSON value. */
function integerFromJson(json: unknown, range: IntRange, longAsString: boolean): unknown {
  if (typeof json === "number") {
    if (!Number.isInteger(json)) return notInteger;
    if (range.is64) {
      if (!Number.isSafeInteger(json)) return unsafeNumber;
      if (json < range.minNumber) return range.outOfRange;
      const value = BigInt(json);
      return longAsString ? value.toString() : value;
    }
    if (json < range.minNumber || json > range.maxNumber) return range.outOfRange;
    return json + 0; // -0 becomes 0
  }
  if (range.is64 && typeof json === "string" && decimal.test(json)) {
    return parseDecimal(json, range, longAsString);
  }
  return notInteger;
}

function isBase64(value: string): boolean {
  if (!/^[A-Za-z0-9+/_-]*={0,2}$/.test(value)) return false;
  return value.endsWith("=") ? value.length % 4 === 0 : value.length % 4 !== 1;
}

/** Converts a JSON value (never null) into a scalar field value, or a {@link Bad}. */
function scalarFromJson(scalar: ScalarType, longAsString: boolean, json: unknown): unknown {
  switch (scalar) {
    case ScalarType.STRING:
      return typeof json === "string" ? checkString(json) : notString;
    case ScalarType.BOOL:
      return typeof json === "boolean" ? json : notBoolean;
    case ScalarType.DOUBLE:
      return typeof json === "number" && Number.isFinite(json) ? json : notNumber;
    case ScalarType.FLOAT:
      if (typeof json !== "number" || !Number.isFinite(json)) return notNumber;
      // Out of range when even rounding to float32 overflows (as protobuf parsers do).
      if (!Number.isFinite(Math.fround(json))) return floatRange;
      return json;
    case ScalarType.BYTES:
      return typeof json === "string" && isBase64(json) ? base64Decode(json) : notBase64;
    default:
      return integerFromJson(json, rangeOf(scalar)!, longAsString);
  }
}

/** Converts a JSON value (never null) into an enum number, or a {@link Bad}. */
function enumFromJson(desc: DescEnum, json: unknown): number | Bad {
  const plan = enumPlan(desc);
  const number = typeof json === "string" ? plan.byName.get(json) : undefined;
  return number ?? new Bad(plan.expected);
}

// ---------------------------------------------------------------------------------------------
// Well-known types given as strings.

const badTimestamp = new Bad(timestampExpected);

function timestampFromJson(json: unknown): Message | Bad {
  const time = typeof json === "string" ? parseTimestamp(json) : undefined;
  return time === undefined ? badTimestamp : create(TimestampSchema, time);
}

const durationPattern = /^(-?)([0-9]{1,12})(?:\.([0-9]{1,9}))?s$/;
const badDuration = new Bad('must be a duration in seconds such as "1.5s"');
const maxDurationSeconds = 315_576_000_000;

function durationFromJson(json: unknown): Message | Bad {
  if (typeof json !== "string") return badDuration;
  const m = durationPattern.exec(json);
  if (m === null) return badDuration;
  const seconds = Number(m[2]);
  if (seconds > maxDurationSeconds) return badDuration;
  const nanos = m[3] === undefined ? 0 : Number(m[3].padEnd(9, "0"));
  const sign = m[1] === "-" ? -1 : 1;
  return create(DurationSchema, {
    seconds: BigInt(sign * seconds),
    nanos: nanos === 0 ? 0 : sign * nanos,
  });
}

const fieldPath = /^[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*$/;
const badFieldMask = new Bad("must be a comma-separated list of snake_case field paths");

function fieldMaskFromJson(json: unknown): Message | Bad {
  if (typeof json !== "string") return badFieldMask;
  if (json === "") return create(FieldMaskSchema);
  const paths = json.split(",");
  for (const path of paths) if (!fieldPath.test(path)) return badFieldMask;
  return create(FieldMaskSchema, { paths });
}

// ---------------------------------------------------------------------------------------------
// Decoding.

function isObject(json: unknown): json is Record<string, unknown> {
  return typeof json === "object" && json !== null && !Array.isArray(json);
}

/** A member name as a field path step: `.name`, or `["odd name"]`. */
function pathStep(key: string): string {
  return /^[A-Za-z_][A-Za-z0-9_]*$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
}

/** How deep a request body may nest objects and arrays (a Struct's 16 with room to spare). */
export const maxBodyDepth = 32;

/**
 * Whether `text` nests objects and arrays more than `max` deep, its strings skipped; checked
 * before `JSON.parse`, whose memory grows with the depth (800 KB of `[` took a gateway past its
 * heap), so that it is only ever given shallow text. Any text, JSON or not; no allocation.
 */
export function nestsDeeperThan(text: string, max: number): boolean {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) { // a string, to its closing quote
      for (i++; i < text.length; i++) {
        const d = text.charCodeAt(i);
        if (d === 0x5c) i++;
        else if (d === 0x22) break;
      }
    } else if (c === 0x7b || c === 0x5b) { // { [
      if (++depth > max) return true;
    } else if (c === 0x7d || c === 0x5d) depth--; // } ]
  }
  return false;
}

/**
 * The path (`type`, `scopes[1].name`, `meta["a b"]`) of the first member whose name its object
 * already has, or undefined. `text` must be JSON that `JSON.parse` accepted; names are compared
 * as decoded (`"a"` and `"\u0061"` are one). One pass with its own stack, so any depth is safe,
 * and no path is built unless a repeat is found: while a container is open, its parent's last
 * name (or index) is the step to it.
 */
export function repeatedMember(text: string): string | undefined {
  /** Each open object (its names so far, and the last) or array (its index). */
  const open: { names: Set<string> | undefined; last: string; index: number }[] = [];
  let expectName = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) { // a string: skipped, or read as a member's name
      let j = i + 1;
      let escaped = false;
      for (; j < text.length; j++) {
        const d = text.charCodeAt(j);
        if (d === 0x5c) {
          escaped = true;
          j++;
        } else if (d === 0x22) break;
      }
      if (expectName) {
        const raw = text.slice(i, j + 1);
        const name: string = escaped ? JSON.parse(raw) : raw.slice(1, -1);
        const top = open.at(-1)!;
        if (top.names!.has(name)) {
          let path = "";
          for (const o of open.slice(0, -1)) {
            path += o.names ? pathStep(o.last) : `[${o.index}]`;
          }
          return (path + pathStep(name)).replace(/^\./, "");
        }
        top.names!.add(name);
        top.last = name;
        expectName = false;
      }
      i = j;
    } else if (c === 0x7b) { // {
      open.push({ names: new Set(), last: "", index: 0 });
      expectName = true;
    } else if (c === 0x5b) { // [
      open.push({ names: undefined, last: "", index: 0 });
    } else if (c === 0x7d || c === 0x5d) { // } ]
      open.pop();
      expectName = false; // `{}`: no name came
    } else if (c === 0x2c) { // ,
      const top = open.at(-1)!;
      if (top.names) expectName = true;
      else top.index++;
    }
  }
  return undefined;
}

/** Sets an own property, even one named `__proto__`, without touching any prototype. */
function setOwn(target: Record<string, unknown>, key: string, value: unknown): void {
  if (key === "__proto__") {
    Object.defineProperty(target, key, {
      value,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  } else {
    target[key] = value;
  }
}

/** Mutable state of one decode call. */
interface Decoding {
  readonly violations: FieldViolation[];
}

/**
 * Decodes one value of type `elem` (never null). `depth` is the nesting level of the object that
 * holds the value. Returns the value, or a {@link Bad} that the caller reports at `path`; nested
 * violations are reported directly.
 */
function decodeElem(
  elem: Elem,
  json: unknown,
  path: string,
  depth: number,
  state: Decoding,
): unknown {
  switch (elem.kind) {
    case "scalar":
      return scalarFromJson(elem.scalar, elem.longAsString, json);
    case "enum":
      return enumFromJson(elem.desc, json);
    case "message":
      return decodeNested(elem.desc, json, path, depth + 1, state);
  }
}

function decodeNested(
  desc: DescMessage,
  json: unknown,
  path: string,
  depth: number,
  state: Decoding,
): unknown {
  if (depth > maxDepth) return new Bad("nested too deeply");
  const plan = messagePlan(desc);
  switch (plan.kind) {
    case "object":
      if (!isObject(json)) return notObject;
      return decodeObject(desc, plan, json, `${path}.`, depth, state, undefined);
    case "timestamp":
      return timestampFromJson(json);
    case "duration":
      return durationFromJson(json);
    case "field_mask":
      return fieldMaskFromJson(json);
    case "wrapper": {
      const inner = plan.fields[0]!;
      if (inner.elem.kind !== "scalar") return new Bad("unsupported type");
      const value = scalarFromJson(inner.elem.scalar, inner.elem.longAsString, json);
      if (value instanceof Bad) return value;
      const message = create(desc) as Message & Record<string, unknown>;
      message[inner.localName] = value;
      return message;
    }
    case "struct":
      return structFromJson(json, path, state);
    case "json_message":
    case "unsupported":
      return new Bad("unsupported type");
  }
}

const notJsonValue = new Bad("must hold only JSON values");

/** An object as JSON.parse makes them (not a Date, a Map or another class's instance). */
function isPlainObject(json: unknown): json is Record<string, unknown> {
  if (!isObject(json)) return false;
  const proto = Object.getPrototypeOf(json);
  return proto === Object.prototype || proto === null;
}

/**
 * Reads a google.protobuf.Struct: a JSON object, copied member by member (own properties only,
 * `__proto__` included, as data) into the JsonObject protobuf-es keeps in a Struct field. Walks
 * with its own stack, so a hostile depth stops at {@link maxStructDepth} without recursing. Bad
 * strings (and keys) are reported at their member's path (`meta["a"][0]`) and left out; a depth,
 * size or type problem is the field's.
 */
function structFromJson(json: unknown, path: string, state: Decoding): unknown {
  if (!isObject(json)) return notObject;
  if (!isPlainObject(json)) return notJsonValue;
  const root: Record<string, unknown> = {};
  // Each entry: a JSON container, the copy to fill, its nesting level, its path.
  const stack: [unknown, Record<string, unknown> | unknown[], number, string][] = [
    [json, root, 1, path],
  ];
  while (stack.length > 0) {
    const [source, target, level, at] = stack.pop()!;
    const entries: [string, string, unknown][] = [];
    if (Array.isArray(source)) {
      if (source.length > maxItems) return new Bad(`holds a list of more than ${maxItems} items`);
      for (let i = 0; i < source.length; i++) entries.push([String(i), `${at}[${i}]`, source[i]]);
    } else {
      const keys = Object.keys(source as object);
      if (keys.length > maxItems) {
        return new Bad(`holds an object of more than ${maxItems} members`);
      }
      for (const key of keys) {
        const keyPath = `${at}[${JSON.stringify(key)}]`;
        const checked = checkString(key);
        if (checked instanceof Bad) {
          state.violations.push({ field: keyPath, description: `key ${checked.reason}` });
          continue;
        }
        entries.push([key, keyPath, (source as Record<string, unknown>)[key]]);
      }
    }
    for (const [key, itemPath, item] of entries) {
      let value: unknown;
      if (item === null || typeof item === "boolean") value = item;
      else if (typeof item === "number") {
        if (!Number.isFinite(item)) return notJsonValue;
        value = item;
      } else if (typeof item === "string") {
        const checked = checkString(item);
        if (checked instanceof Bad) {
          state.violations.push({ field: itemPath, description: checked.reason });
          continue;
        }
        value = checked;
      } else if (Array.isArray(item) || isPlainObject(item)) {
        if (level >= maxStructDepth) {
          return new Bad(
            `nested too deeply: at most ${maxStructDepth} levels of objects and arrays`,
          );
        }
        value = Array.isArray(item) ? [] : {};
        stack.push([item, value as Record<string, unknown> | unknown[], level + 1, itemPath]);
      } else {
        return notJsonValue;
      }
      if (Array.isArray(target)) target.push(value);
      else setOwn(target, key, value);
    }
  }
  // Bad strings were reported, and left out.
  return root;
}

/**
 * Decodes the fields of a JSON object into a new message. `base` is the path prefix of its fields
 * ("" or "parent."); `keys` collects the known keys (top level only).
 */
function decodeObject(
  desc: DescMessage,
  plan: MessagePlan,
  json: Record<string, unknown>,
  base: string,
  depth: number,
  state: Decoding,
  keys: string[] | undefined,
): Message {
  const message = create(desc) as Message & Record<string, unknown>;
  const violations = state.violations;
  let oneofsSet: Set<DescOneof> | undefined;
  for (const key of Object.keys(json)) {
    const path = base + key;
    const fp = plan.byName.get(key);
    if (fp === undefined) {
      violations.push({ field: path, description: "unknown field" });
      continue;
    }
    keys?.push(key);
    if (fp.outputOnly) {
      violations.push({ field: path, description: "is output only and cannot be set" });
      continue;
    }
    const value = json[key];
    if (value === null) {
      if (!fp.nullable) violations.push({ field: path, description: isNull.reason });
      continue;
    }
    if (fp.oneof !== undefined) {
      oneofsSet ??= new Set();
      if (oneofsSet.has(fp.oneof)) {
        violations.push({ field: path, description: fp.oneofConflict });
        continue;
      }
      oneofsSet.add(fp.oneof);
    }
    let decoded: unknown;
    switch (fp.shape) {
      case "singular":
        decoded = decodeElem(fp.elem, value, path, depth, state);
        break;
      case "list":
        decoded = decodeList(fp, value, path, depth, state);
        break;
      case "map":
        decoded = decodeMap(fp, value, path, depth, state);
        break;
    }
    if (decoded instanceof Bad) {
      violations.push({ field: path, description: decoded.reason });
    } else if (fp.oneof !== undefined) {
      message[fp.oneof.localName] = { case: fp.localName, value: decoded };
    } else {
      message[fp.localName] = decoded;
    }
  }
  return message;
}

function decodeList(
  fp: FieldPlan,
  json: unknown,
  path: string,
  depth: number,
  state: Decoding,
): unknown[] | Bad {
  if (!Array.isArray(json)) return notArray;
  if (json.length > maxItems) return new Bad(`must have at most ${maxItems} items`);
  const out: unknown[] = [];
  for (let i = 0; i < json.length; i++) {
    const item: unknown = json[i];
    const itemPath = `${path}[${i}]`;
    const value = item === null ? isNull : decodeElem(fp.elem, item, itemPath, depth, state);
    if (value instanceof Bad) state.violations.push({ field: itemPath, description: value.reason });
    else out.push(value);
  }
  return out;
}

/** Converts a map key (a JSON object key) to its canonical form for the map's key type. */
function mapKeyFromString(scalar: ScalarType, raw: string): string | Bad {
  if (scalar === ScalarType.STRING) return checkString(raw);
  if (scalar === ScalarType.BOOL) {
    return raw === "true" || raw === "false" ? raw : new Bad("key must be true or false");
  }
  const range = rangeOf(scalar);
  if (range === undefined) return new Bad("unsupported type");
  if (!decimal.test(raw)) return new Bad("key must be an integer");
  const value = parseDecimal(raw, range, false);
  return value instanceof Bad ? new Bad(`key ${value.reason}`) : String(value);
}

function decodeMap(
  fp: FieldPlan,
  json: unknown,
  path: string,
  depth: number,
  state: Decoding,
): Record<string, unknown> | Bad {
  if (!isObject(json)) return notObject;
  const keys = Object.keys(json);
  if (keys.length > maxItems) return new Bad(`must have at most ${maxItems} entries`);
  const out: Record<string, unknown> = {};
  for (const raw of keys) {
    const itemPath = `${path}[${JSON.stringify(raw)}]`;
    const key = mapKeyFromString(fp.mapKey!, raw);
    const item = json[raw];
    const value = key instanceof Bad
      ? key
      : item === null
      ? isNull
      : decodeElem(fp.elem, item, itemPath, depth, state);
    if (value instanceof Bad) state.violations.push({ field: itemPath, description: value.reason });
    else setOwn(out, key as string, value);
  }
  return out;
}

/**
 * Decodes a parsed JSON value (the result of `JSON.parse`) into a message of `schema`.
 *
 * Keys are proto field names; unknown keys, output-only fields, wrong types, `null` for fields
 * without explicit presence, and values out of range are reported as violations (all of them, one
 * per bad field) rather than thrown. Field paths use proto names (`redirect_uris[1]`,
 * `parent.child`), prefixed with `options.fieldPrefix` and a dot when given. Bad fields are left
 * unset in the returned message.
 */
export function decodeMessage<Desc extends DescMessage>(
  schema: Desc,
  json: unknown,
  options?: { fieldPrefix?: string },
): DecodeResult<MessageShape<Desc>> {
  const prefix = options?.fieldPrefix;
  const state: Decoding = { violations: [] };
  const keys: string[] = [];
  if (!isObject(json)) {
    return {
      message: create(schema),
      violations: [{ field: prefix ?? "", description: notObject.reason }],
      keys,
    };
  }
  const base = prefix === undefined || prefix === "" ? "" : `${prefix}.`;
  const message = decodeObject(schema, messagePlan(schema), json, base, 1, state, keys);
  return { message: message as MessageShape<Desc>, violations: state.violations, keys };
}

/**
 * Converts one query-string or path value into the value of a scalar or enum field (to assign to
 * the field's `localName`), or a violation. Strings are taken as they are (valid Unicode, no
 * NUL); integers must be decimal (`^-?[0-9]+$`) and in range (64-bit ones become bigints); bools
 * are `true` or `false`; enums are lower-case value names. Other fields (floats, bytes, lists,
 * maps, messages and oneof members) cannot be set this way.
 */
export function decodeScalarParam(
  field: DescField,
  raw: string,
): { value: unknown } | { violation: string } {
  let value: unknown;
  if (field.oneof !== undefined) {
    value = undefined;
  } else if (field.fieldKind === "enum") {
    value = enumFromJson(field.enum, raw);
  } else if (field.fieldKind === "message" && field.message.typeName === TimestampSchema.typeName) {
    // A time in a query (a list's `since`, `until`): the RFC 3339 string of its JSON form.
    value = timestampFromJson(raw);
  } else if (field.fieldKind === "scalar") {
    const range = rangeOf(field.scalar);
    if (field.scalar === ScalarType.STRING) value = checkString(raw);
    else if (field.scalar === ScalarType.BOOL) {
      value = raw === "true" ? true : raw === "false" ? false : new Bad("must be true or false");
    } else if (range !== undefined) {
      value = decimal.test(raw) ? parseDecimal(raw, range, field.longAsString) : notInteger;
    }
  }
  if (value === undefined) return { violation: "cannot be set in the query string" };
  return value instanceof Bad ? { violation: value.reason } : { value };
}

// ---------------------------------------------------------------------------------------------
// Encoding.

const maxSafe = BigInt(Number.MAX_SAFE_INTEGER);

function encodeScalar(scalar: ScalarType, value: unknown): unknown {
  switch (scalar) {
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
    case ScalarType.UINT64:
    case ScalarType.FIXED64: {
      const big = typeof value === "bigint" ? value : BigInt(value as string | number);
      return big >= -maxSafe && big <= maxSafe ? Number(big) : big.toString();
    }
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT: {
      const n = value as number;
      if (Number.isFinite(n)) return n;
      return Number.isNaN(n) ? "NaN" : n > 0 ? "Infinity" : "-Infinity";
    }
    case ScalarType.BYTES:
      return base64Encode(value as Uint8Array);
    default:
      return value;
  }
}

function encodeEnum(desc: DescEnum, value: number): string | number | null {
  // An unknown number (an open enum) is written as the number, as protobuf JSON does.
  return enumPlan(desc).byNumber.get(value) ?? (value === 0 ? null : value);
}

/** Whether seconds and nanos are a Timestamp of the years 0001..9999 (RFC 3339's). */
export function timestampInRange(seconds: number, nanos: number): boolean {
  return seconds >= minTimestampSeconds && seconds <= maxTimestampSeconds && nanos >= 0 &&
    nanos <= 999_999_999;
}

/** Formats seconds and nanos as `2026-01-02T03:04:05.000Z`; throws outside 0001..9999. */
function encodeTimestamp(message: Record<string, unknown>): string {
  const seconds = Number(message.seconds as bigint);
  const nanos = message.nanos as number;
  if (!timestampInRange(seconds, nanos)) {
    throw new Error(`google.protobuf.Timestamp out of range: ${seconds}s ${nanos}ns`);
  }
  return isoMillis(seconds * 1000 + Math.floor(nanos / 1_000_000));
}

/** The date part (`2026-01-02T`) of the last day formatted, and that day's number. */
let cachedDay = NaN;
let cachedDayPrefix = "";

const two = (n: number) => (n < 10 ? `0${n}` : `${n}`);

/**
 * `Date.prototype.toISOString` for milliseconds since the epoch, with the date part remembered:
 * records of one response are mostly of one day, and toISOString was ~4% of the gateway's CPU
 * under GetClient load (two timestamps per record). Same output for years 0001..9999.
 */
export function isoMillis(ms: number): string {
  const day = Math.floor(ms / 86_400_000);
  if (day !== cachedDay) {
    cachedDay = day;
    cachedDayPrefix = new Date(day * 86_400_000).toISOString().slice(0, 11);
  }
  const inDay = ms - day * 86_400_000;
  const h = Math.floor(inDay / 3_600_000);
  const m = Math.floor(inDay / 60_000) % 60;
  const sec = Math.floor(inDay / 1000) % 60;
  const milli = inDay % 1000;
  return `${cachedDayPrefix}${two(h)}:${two(m)}:${two(sec)}.${
    milli < 10 ? `00${milli}` : milli < 100 ? `0${milli}` : milli
  }Z`;
}

function encodeDuration(message: Record<string, unknown>): string {
  const seconds = message.seconds as bigint;
  const nanos = message.nanos as number;
  if (nanos === 0) return `${seconds}s`;
  const negative = seconds < 0n || nanos < 0;
  const abs = (seconds < 0n ? -seconds : seconds).toString();
  let fraction = String(Math.abs(nanos)).padStart(9, "0");
  if (fraction.endsWith("000000")) fraction = fraction.slice(0, 3);
  else if (fraction.endsWith("000")) fraction = fraction.slice(0, 6);
  return `${negative ? "-" : ""}${abs}.${fraction}s`;
}

function encodeElem(elem: Elem, value: unknown): unknown {
  switch (elem.kind) {
    case "scalar":
      return encodeScalar(elem.scalar, value);
    case "enum":
      return encodeEnum(elem.desc, value as number);
    case "message":
      return encodeNested(elem.desc, value as Message);
  }
}

function encodeNested(desc: DescMessage, message: Message): unknown {
  const plan = messagePlan(desc);
  const record = message as unknown as Record<string, unknown>;
  switch (plan.kind) {
    case "object":
      return encodeObject(plan, record);
    case "timestamp":
      return encodeTimestamp(record);
    case "duration":
      return encodeDuration(record);
    case "field_mask":
      return (record.paths as string[]).join(",");
    case "wrapper": {
      const inner = plan.fields[0]!;
      return encodeElem(inner.elem, record[inner.localName]);
    }
    case "struct":
      // A Struct field holds its JsonObject; only a Struct inside a Value is a message.
      return (message as { $typeName?: string }).$typeName === desc.typeName
        ? toJson(desc, message)
        : message;
    case "json_message":
      return toJson(desc, message);
    case "unsupported":
      throw new Error(`${desc.typeName} cannot be written as JSON by the gateway`);
  }
}

const hasOwn = Object.prototype.hasOwnProperty;

function encodeObject(
  plan: MessagePlan,
  message: Record<string, unknown>,
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const fp of plan.fields) {
    let value: unknown;
    if (fp.oneof !== undefined) {
      const group = message[fp.oneof.localName] as { case: string | undefined; value?: unknown };
      if (group.case !== fp.localName) continue;
      value = encodeElem(fp.elem, group.value);
    } else {
      const raw = message[fp.localName];
      if (fp.shape === "list") {
        value = (raw as unknown[]).map((item) => encodeElem(fp.elem, item));
      } else if (fp.shape === "map") {
        const map: Record<string, unknown> = {};
        for (const [key, item] of Object.entries(raw as Record<string, unknown>)) {
          setOwn(map, key, encodeElem(fp.elem, item));
        }
        value = map;
      } else if (fp.nullable && (raw === undefined || !hasOwn.call(message, fp.localName))) {
        // Explicit presence: unset. (Proto2 defaults live on the prototype, hence hasOwn.)
        value = null;
      } else {
        value = encodeElem(fp.elem, raw);
      }
    }
    setOwn(out, fp.name, value);
  }
  return out;
}

/**
 * Encodes a message into the JSON value sent to HTTP clients: every field under its proto name,
 * in declaration order; `null` for unset explicit-presence scalars, enums and messages; oneof
 * members only when set. Throws for values that have no JSON form here (a Timestamp outside
 * 0001..9999, a google.protobuf.Any).
 */
export function encodeMessage(schema: DescMessage, message: Message): Record<string, unknown> {
  return encodeObject(messagePlan(schema), message as unknown as Record<string, unknown>);
}
