/**
 * A service's answer from its Protobuf bytes straight to the gateway's JSON bytes: the same text
 * as `JSON.stringify(encodeMessage(schema, fromBinary(schema, bytes)))` (./json_codec.ts), without
 * the message objects, the JSON value and the strings in between. On a page of 100 clients, about a
 * third of the gateway's CPU went to `fromBinary`, `encodeMessage` and `JSON.stringify`, and about a
 * quarter to V8's collector, which the objects they make keep busy.
 *
 * How: the bytes of a message are scanned once for where each known field occurs (the first and
 * the last time), and its JSON is then written in declaration order from those places. Strings are
 * copied as UTF-8, escaped as `JSON.stringify` escapes them; timestamps, enums, 64-bit integers and
 * bytes are written as ./json_codec.ts writes them.
 *
 * Not every message goes this way. {@link wireJsonSupported} says no, once per message type, for
 * types that hold a map (a JSON object orders integer-like keys first), a well-known type other
 * than Timestamp (the services' answers hold no other but Struct), a closed enum, a group or
 * themselves; and {@link wireToJson} answers `undefined` for bytes whose meaning the scan does not
 * settle alone: a singular field or more than one member of a oneof sent more than once (Protobuf
 * merges messages and reads every string), a string that is not valid UTF-8 (which protobuf-es
 * refuses), a field with a wire type its declaration does not allow, a group, a timestamp outside
 * the years 0001..9999, or a malformed message. The
 * caller then decodes the message and encodes it the usual way, which answers as before, errors
 * included. `wire_json_test.ts` checks the two ways give the same bytes for random messages of
 * every type the services answer with.
 *
 * @module
 */

import { type DescMessage, ScalarType } from "@bufbuild/protobuf";
import { base64Encode } from "@bufbuild/protobuf/wire";
import {
  enumPlan,
  type FieldPlan as JsonFieldPlan,
  isoMillis,
  type MessagePlan as JsonMessagePlan,
  messagePlan as jsonPlan,
  timestampInRange,
} from "./json_codec.ts";

/**
 * The kinds of message this module writes: the services' answers hold no other well-known type
 * than Timestamp and Struct (which is left to ./json_codec.ts, as every other kind).
 */
type Kind = "object" | "timestamp";

const written = new Set<JsonMessagePlan["kind"]>(["object", "timestamp"]);

const encoder = new TextEncoder();
const ascii = (text: string) => encoder.encode(text);

/**
 * One field: how its values are read, and written as ./json_codec.ts's plan of it says (its
 * name, whether it is a list, `null` when absent, its oneof, its enum's names).
 */
interface FieldPlan {
  readonly number: number;
  /** `"name":`, and `,"name":` for every field but the first written. */
  readonly key: Uint8Array;
  readonly commaKey: Uint8Array;
  readonly list: boolean;
  /** Explicit presence (a message, a proto3 `optional`): `null` when absent. */
  readonly nullable: boolean;
  /** The index of its oneof among the message's oneofs, or -1. */
  readonly oneof: number;
  readonly scalar: ScalarType | undefined;
  /** Its enum's values as JSON (`"web"`), by number; 0 is `null`. */
  readonly enumNames: ReadonlyMap<number, Uint8Array> | undefined;
  readonly message: MessagePlan | undefined;
  /** The wire type of one value. */
  readonly wireType: number;
  /** A list of numbers or enums, which may come packed (wire type 2). */
  readonly packable: boolean;
}

interface MessagePlan {
  readonly kind: Kind;
  readonly fields: readonly FieldPlan[];
  /** A field's index by its number (-1: unknown), for numbers below {@link maxIndexedNumber}. */
  readonly indexByNumber: Int16Array;
  /** A field's index by its number, for the larger numbers. */
  readonly byNumber: ReadonlyMap<number, number>;
  readonly oneofs: number;
}

/** Field numbers below this are looked up in an array. */
const maxIndexedNumber = 64;

/** Plans by type; `null` for a type this module does not write. */
const plans = new WeakMap<DescMessage, MessagePlan | null>();
/** The types being planned: a type that holds itself is not written here. */
const planning = new Set<DescMessage>();

/** Whether {@link wireToJson} can write messages of this type (decided once per type). */
export function wireJsonSupported(desc: DescMessage): boolean {
  const plan = planOf(desc);
  return plan !== null && plan.kind === "object";
}

function planOf(desc: DescMessage): MessagePlan | null {
  const known = plans.get(desc);
  if (known !== undefined) return known;
  if (planning.has(desc)) return null;
  const json = jsonPlan(desc);
  let plan: MessagePlan | null = null;
  if (written.has(json.kind)) {
    planning.add(desc);
    try {
      const oneofs = [...new Set(json.fields.flatMap((f) => f.oneof ?? []))];
      const fields = json.fields.map((f) => fieldPlan(f, f.oneof ? oneofs.indexOf(f.oneof) : -1));
      if (fields.every((f) => f !== null)) {
        const indexByNumber = new Int16Array(maxIndexedNumber).fill(-1);
        fields.forEach((f, i) => {
          if (f.number < maxIndexedNumber) indexByNumber[f.number] = i;
        });
        plan = {
          kind: json.kind as Kind,
          fields,
          indexByNumber,
          byNumber: new Map(fields.map((f, i) => [f.number, i])),
          oneofs: oneofs.length,
        };
      }
    } finally {
      planning.delete(desc);
    }
  }
  plans.set(desc, plan);
  return plan;
}

function fieldPlan(json: JsonFieldPlan, oneof: number): FieldPlan | null {
  const { field, elem } = json;
  if (json.shape === "map") return null;
  if ((field as { delimitedEncoding?: boolean }).delimitedEncoding === true) return null;
  // A proto2 default other than the zero value (none in proto3).
  const withDefault = field as { getDefaultValue?: () => unknown };
  if (
    typeof withDefault.getDefaultValue === "function" && withDefault.getDefaultValue() !== undefined
  ) {
    return null;
  }
  let message: MessagePlan | undefined;
  let enumNames: Map<number, Uint8Array> | undefined;
  let scalar: ScalarType | undefined;
  if (elem.kind === "message") {
    const nested = planOf(elem.desc);
    if (nested === null) return null;
    message = nested;
  } else if (elem.kind === "enum") {
    if (!elem.desc.open) return null;
    enumNames = new Map(
      [...enumPlan(elem.desc).byNumber].map(([n, name]) => [n, ascii(JSON.stringify(name))]),
    );
  } else {
    scalar = elem.scalar;
  }
  return {
    number: field.number,
    key: ascii(`${JSON.stringify(json.name)}:`),
    commaKey: ascii(`,${JSON.stringify(json.name)}:`),
    list: json.shape === "list",
    nullable: json.nullable,
    oneof,
    scalar,
    enumNames,
    message,
    wireType: message !== undefined ? 2 : enumNames !== undefined ? 0 : wireTypeOf(scalar!),
    packable: json.shape === "list" && message === undefined &&
      scalar !== ScalarType.STRING && scalar !== ScalarType.BYTES,
  };
}

// ---------------------------------------------------------------------------------------------

/** Thrown inside when the bytes are to be decoded the usual way; never escapes this module. */
const usual = new Error("decode the usual way");

/** The output, grown as needed; one page's JSON is copied out of it at the end. */
let out = new Uint8Array(64 * 1024);
let at = 0;
/** The output kept between calls at most (a larger one is let go after its call). */
const keptOutputBytes = 1024 * 1024;

function reserve(n: number): void {
  if (at + n <= out.length) return;
  const grown = new Uint8Array(Math.max(out.length * 2, at + n));
  grown.set(out.subarray(0, at));
  out = grown;
}

function put(bytes: Uint8Array): void {
  const n = bytes.length;
  reserve(n);
  // Keys and names are short: a loop is cheaper than `set` for them.
  if (n > 32) out.set(bytes, at);
  else for (let i = 0; i < n; i++) out[at + i] = bytes[i]!;
  at += n;
}

function putByte(b: number): void {
  reserve(1);
  out[at++] = b;
}

/** ASCII text (numbers, timestamps, base64). */
function putAscii(text: string): void {
  reserve(text.length);
  for (let i = 0; i < text.length; i++) out[at++] = text.charCodeAt(i);
}

const nullBytes = ascii("null");
const trueBytes = ascii("true");
const falseBytes = ascii("false");
const emptyString = ascii('""');
const zero = ascii("0");
const hex = "0123456789abcdef";
/** `JSON.stringify`'s short escapes of control characters. */
const shortEscapes: Record<number, number> = { 8: 0x62, 9: 0x74, 10: 0x6e, 12: 0x66, 13: 0x72 };

const noBytes = new Uint8Array(0);

// Reading. `pos` is the read position in `wire`; both are set per call.
let wire: Uint8Array = new Uint8Array(0);
let pos = 0;
/** The high 32 bits of the last varint read by {@link varint} (the low are returned). */
let high = 0;

/** Reads a varint: returns its low 32 bits (unsigned) and leaves the high in {@link high}. */
function varint(): number {
  let lo = 0;
  let hi = 0;
  let shift = 0;
  for (; shift < 28; shift += 7) {
    const b = wire[pos++];
    if (b === undefined) throw usual;
    lo |= (b & 0x7f) << shift;
    if (b < 0x80) {
      high = 0;
      return lo >>> 0;
    }
  }
  const middle = wire[pos++];
  if (middle === undefined) throw usual;
  lo |= (middle & 0x0f) << 28;
  hi = (middle & 0x7f) >> 4;
  if (middle < 0x80) {
    high = hi;
    return lo >>> 0;
  }
  for (shift = 3; shift <= 31; shift += 7) {
    const b = wire[pos++];
    if (b === undefined) throw usual;
    hi |= (b & 0x7f) << shift;
    if (b < 0x80) {
      high = hi >>> 0;
      return lo >>> 0;
    }
  }
  throw usual;
}

function fixed32(): number {
  if (pos + 4 > wire.length) throw usual;
  const v = (wire[pos]! | wire[pos + 1]! << 8 | wire[pos + 2]! << 16 | wire[pos + 3]! << 24) >>> 0;
  pos += 4;
  return v;
}

/** Skips a value of a wire type; throws for groups and unknown types. */
function skip(wireType: number): void {
  switch (wireType) {
    case 0:
      varint();
      return;
    case 1:
      pos += 8;
      break;
    case 2: {
      const n = varint();
      if (high !== 0) throw usual;
      pos += n;
      break;
    }
    case 5:
      pos += 4;
      break;
    default:
      throw usual;
  }
  if (pos > wire.length) throw usual;
}

const maxSafe = BigInt(Number.MAX_SAFE_INTEGER);
const two32 = 4_294_967_296;

/** A 64-bit integer as ./json_codec.ts writes it: a number while safe, else a string. */
function put64(value: bigint): void {
  putAscii(value >= -maxSafe && value <= maxSafe ? `${value}` : `"${value}"`);
}

function bigOf(lo: number, hi: number): bigint {
  return (BigInt(hi >>> 0) << 32n) | BigInt(lo >>> 0);
}

/** A 64-bit integer from its halves, two's complement when `signed`. */
function put64Bits(lo: number, hi: number, signed: boolean): void {
  if (hi <= 0x1fffff) putAscii(`${hi * two32 + lo}`);
  else {
    const big = bigOf(lo, hi);
    put64(signed ? BigInt.asIntN(64, big) : big);
  }
}

function putNumber(n: number): void {
  if (Number.isFinite(n)) putAscii(`${n}`);
  else putAscii(Number.isNaN(n) ? '"NaN"' : n > 0 ? '"Infinity"' : '"-Infinity"');
}

const float64 = new DataView(new ArrayBuffer(8));

/** Writes one scalar value read at {@link pos} (its wire type already checked). */
function putScalar(scalar: ScalarType): void {
  switch (scalar) {
    case ScalarType.STRING: {
      const n = length();
      putString(pos, pos + n);
      pos += n;
      return;
    }
    case ScalarType.BYTES: {
      const n = length();
      putByte(0x22);
      putAscii(base64Encode(wire.subarray(pos, pos + n)));
      putByte(0x22);
      pos += n;
      return;
    }
    case ScalarType.BOOL:
      put(varint() !== 0 || high !== 0 ? trueBytes : falseBytes);
      return;
    case ScalarType.INT32:
      putAscii(`${varint() | 0}`);
      return;
    case ScalarType.UINT32:
      putAscii(`${varint()}`);
      return;
    case ScalarType.SINT32: {
      const v = varint();
      putAscii(`${(v >>> 1) ^ -(v & 1)}`);
      return;
    }
    case ScalarType.FIXED32:
      putAscii(`${fixed32()}`);
      return;
    case ScalarType.SFIXED32:
      putAscii(`${fixed32() | 0}`);
      return;
    case ScalarType.FLOAT: {
      const bits = fixed32();
      float64.setUint32(0, bits, true);
      putNumber(float64.getFloat32(0, true));
      return;
    }
    case ScalarType.DOUBLE: {
      const lo = fixed32();
      const hi = fixed32();
      float64.setUint32(0, lo, true);
      float64.setUint32(4, hi, true);
      putNumber(float64.getFloat64(0, true));
      return;
    }
    case ScalarType.UINT64:
    case ScalarType.INT64: {
      const lo = varint();
      put64Bits(lo, high, scalar === ScalarType.INT64);
      return;
    }
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64: {
      const lo = fixed32();
      put64Bits(lo, fixed32(), scalar === ScalarType.SFIXED64);
      return;
    }
    case ScalarType.SINT64: {
      const lo = varint();
      const big = bigOf(lo, high);
      put64((big >> 1n) ^ -(big & 1n));
      return;
    }
  }
}

/** The JSON of a scalar's zero value (an implicit-presence field that is absent). */
function putZero(scalar: ScalarType): void {
  switch (scalar) {
    case ScalarType.STRING:
    case ScalarType.BYTES:
      put(emptyString);
      return;
    case ScalarType.BOOL:
      put(falseBytes);
      return;
    default:
      put(zero);
  }
}

/** The wire type a scalar is sent with, unpacked. */
function wireTypeOf(scalar: ScalarType): number {
  switch (scalar) {
    case ScalarType.STRING:
    case ScalarType.BYTES:
      return 2;
    case ScalarType.DOUBLE:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return 1;
    case ScalarType.FLOAT:
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
      return 5;
    default:
      return 0;
  }
}

/** A length prefix, checked against the end of the bytes. */
function length(): number {
  const n = varint();
  if (high !== 0 || pos + n > wire.length) throw usual;
  return n;
}

/**
 * Copies UTF-8 bytes as a JSON string, escaping what `JSON.stringify` escapes (`"`, `\` and the
 * control characters); bytes that are not valid UTF-8 send the message the usual way.
 */
function putString(start: number, end: number): void {
  reserve((end - start) * 6 + 2);
  const o = out;
  let p = at;
  o[p++] = 0x22;
  let i = start;
  while (i < end) {
    const b = wire[i]!;
    if (b < 0x80) {
      i++;
      if (b >= 0x20 && b !== 0x22 && b !== 0x5c) {
        o[p++] = b;
        continue;
      }
      o[p++] = 0x5c;
      if (b === 0x22 || b === 0x5c) o[p++] = b;
      else if (shortEscapes[b] !== undefined) o[p++] = shortEscapes[b]!;
      else {
        o[p++] = 0x75;
        o[p++] = 0x30;
        o[p++] = 0x30;
        o[p++] = hex.charCodeAt(b >> 4);
        o[p++] = hex.charCodeAt(b & 15);
      }
      continue;
    }
    // A multi-byte sequence, as RFC 3629 4 allows it (no overlongs, surrogates or beyond U+10FFFF).
    let n: number;
    let lo = 0x80;
    let hi = 0xbf;
    if (b >= 0xc2 && b <= 0xdf) n = 1;
    else if (b >= 0xe0 && b <= 0xef) {
      n = 2;
      if (b === 0xe0) lo = 0xa0;
      else if (b === 0xed) hi = 0x9f;
    } else if (b >= 0xf0 && b <= 0xf4) {
      n = 3;
      if (b === 0xf0) lo = 0x90;
      else if (b === 0xf4) hi = 0x8f;
    } else throw usual;
    if (i + n >= end) throw usual;
    const second = wire[i + 1]!;
    if (second < lo || second > hi) throw usual;
    for (let k = 2; k <= n; k++) {
      const c = wire[i + k]!;
      if (c < 0x80 || c > 0xbf) throw usual;
    }
    for (let k = 0; k <= n; k++) o[p++] = wire[i + k]!;
    i += n + 1;
  }
  o[p++] = 0x22;
  at = p;
}

// Where each field of the message being written occurs: for field i of a frame at `base`,
// `places[base + 2i]` is the position of its first tag and `places[base + 2i + 1]` of its last
// (-1: absent). Frames are stacked for nested messages.
let places = new Int32Array(1024);
let top = 0;

/** Scans a message's bytes for its known fields; returns the frame's base. */
function scan(plan: MessagePlan, start: number, end: number): number {
  const base = top;
  const size = plan.fields.length * 2;
  if (base + size > places.length) {
    const grown = new Int32Array(Math.max(places.length * 2, base + size));
    grown.set(places);
    places = grown;
  }
  places.fill(-1, base, base + size);
  top = base + size;
  pos = start;
  while (pos < end) {
    const tagPos = pos;
    const tag = varint();
    if (high !== 0 || tag >>> 3 === 0) throw usual;
    const number = tag >>> 3;
    const index = number < maxIndexedNumber
      ? plan.indexByNumber[number]!
      : plan.byNumber.get(number) ?? -1;
    skip(tag & 7);
    if (pos > end) throw usual;
    if (index === -1) continue;
    // Protobuf reads a known field as declared, whatever the wire type says: only the declared
    // wire types (and packed lists) are read here.
    const field = plan.fields[index]!;
    if ((tag & 7) !== field.wireType && !((tag & 7) === 2 && field.packable)) throw usual;
    const slot = base + index * 2;
    if (places[slot] === -1) places[slot] = tagPos;
    places[slot + 1] = tagPos;
  }
  return base;
}

/** Moves {@link pos} past the tag at `tagAt`; returns the tag's wire type. */
function tagAt(tagPos: number): number {
  pos = tagPos;
  return varint() & 7;
}

/** Writes one value of a field whose tag is at `tagPos`. */
function putValue(field: FieldPlan, tagPos: number): void {
  const wireType = tagAt(tagPos);
  if (field.message !== undefined) {
    if (wireType !== 2) throw usual;
    const n = length();
    const start = pos;
    putMessage(field.message, start, start + n);
    pos = start + n;
  } else if (field.enumNames !== undefined) {
    if (wireType !== 0) throw usual;
    putEnum(field.enumNames, varint() | 0);
  } else {
    if (wireType !== wireTypeOf(field.scalar!)) throw usual;
    putScalar(field.scalar!);
  }
}

function putEnum(names: ReadonlyMap<number, Uint8Array>, value: number): void {
  const name = names.get(value);
  if (name !== undefined) put(name);
  else if (value === 0) put(nullBytes);
  else putAscii(`${value}`);
}

/** Writes every occurrence of a repeated field, in order, as a JSON array. */
function putList(field: FieldPlan, first: number, end: number): void {
  putByte(0x5b);
  let count = 0;
  if (first !== -1) {
    let next = first;
    while (next < end) {
      pos = next;
      const tag = varint();
      const valueAt = pos;
      const wireType = tag & 7;
      skip(wireType);
      const after = pos;
      if (tag >>> 3 === field.number) {
        if (field.packable && wireType === 2) {
          pos = valueAt;
          const packedEnd = pos + length();
          while (pos < packedEnd) {
            if (count++ > 0) putByte(0x2c);
            if (field.enumNames !== undefined) putEnum(field.enumNames, varint() | 0);
            else putScalar(field.scalar!);
          }
          if (pos !== packedEnd) throw usual;
        } else {
          if (count++ > 0) putByte(0x2c);
          putValue(field, next);
        }
      }
      next = after;
    }
  }
  putByte(0x5d);
}

/** Writes the message whose bytes are `wire[start, end)` as ./json_codec.ts would. */
function putMessage(plan: MessagePlan, start: number, end: number): void {
  if (plan.kind === "timestamp") putTimestamp(start, end);
  else putObject(plan, start, end);
}

function putObject(plan: MessagePlan, start: number, end: number): void {
  const base = scan(plan, start, end);
  // The member of each oneof that is set: the one that came last.
  let chosen: number[] | undefined;
  if (plan.oneofs > 0) {
    chosen = new Array<number>(plan.oneofs).fill(-1);
    const last = new Array<number>(plan.oneofs).fill(-1);
    plan.fields.forEach((f, i) => {
      const at = places[base + i * 2 + 1]!;
      if (f.oneof < 0 || at === -1) return;
      // More than one member sent: the usual way (which reads each).
      if (last[f.oneof] !== -1) throw usual;
      last[f.oneof] = at;
      chosen![f.oneof] = i;
    });
  }
  putByte(0x7b);
  let written = 0;
  const fields = plan.fields;
  for (let i = 0; i < fields.length; i++) {
    const field = fields[i]!;
    const first = places[base + i * 2]!;
    const last = places[base + i * 2 + 1]!;
    if (field.oneof >= 0 && chosen![field.oneof] !== i) continue;
    put(written++ === 0 ? field.key : field.commaKey);
    if (field.list) putList(field, first, end);
    else if (last === -1) {
      if (field.nullable || field.enumNames !== undefined) put(nullBytes);
      else putZero(field.scalar!);
    } else {
      // A field sent more than once (Protobuf merges messages, reads every string): the usual way.
      if (first !== last) throw usual;
      putValue(field, last);
    }
  }
  putByte(0x7d);
  top = base;
}

function putTimestamp(start: number, end: number): void {
  // Seconds (1) and nanos (2), each at most once, read here without a frame: a page of clients
  // has two timestamps a client.
  let seconds = 0;
  let nanos = 0;
  let seen = 0;
  pos = start;
  while (pos < end) {
    const tag = varint();
    if (high !== 0 || tag >>> 3 === 0) throw usual;
    if (tag === 0x08 || tag === 0x10) {
      const bit = tag === 0x08 ? 1 : 2;
      if (seen & bit) throw usual;
      seen |= bit;
      const lo = varint();
      if (tag === 0x10) nanos = lo | 0;
      else if (high <= 0x1fffff) seconds = high * two32 + lo;
      else seconds = Number(BigInt.asIntN(64, bigOf(lo, high)));
    } else if (tag >>> 3 === 1 || tag >>> 3 === 2) throw usual;
    else skip(tag & 7);
  }
  if (pos !== end || !timestampInRange(seconds, nanos)) throw usual;
  putIsoMillis(seconds * 1000 + Math.floor(nanos / 1_000_000));
}

/** The date part (`"2026-01-02T`) of the last day written, and that day's number. */
let isoDay = NaN;
let isoDayPrefix = new Uint8Array(0);

/** `"` + {@link isoMillis}'s text + `"`, its digits written as bytes. */
function putIsoMillis(ms: number): void {
  const day = Math.floor(ms / 86_400_000);
  if (day !== isoDay) {
    isoDay = day;
    isoDayPrefix = ascii(`"${isoMillis(day * 86_400_000).slice(0, 11)}`);
  }
  const inDay = ms - day * 86_400_000;
  put(isoDayPrefix);
  reserve(15);
  const o = out;
  let p = at;
  const h = Math.floor(inDay / 3_600_000);
  const m = Math.floor(inDay / 60_000) % 60;
  const sec = Math.floor(inDay / 1000) % 60;
  const milli = inDay % 1000;
  o[p++] = 0x30 + Math.floor(h / 10);
  o[p++] = 0x30 + h % 10;
  o[p++] = 0x3a;
  o[p++] = 0x30 + Math.floor(m / 10);
  o[p++] = 0x30 + m % 10;
  o[p++] = 0x3a;
  o[p++] = 0x30 + Math.floor(sec / 10);
  o[p++] = 0x30 + sec % 10;
  o[p++] = 0x2e;
  o[p++] = 0x30 + Math.floor(milli / 100);
  o[p++] = 0x30 + Math.floor(milli / 10) % 10;
  o[p++] = 0x30 + milli % 10;
  o[p++] = 0x5a;
  o[p++] = 0x22;
  at = p;
}

/**
 * The JSON, as UTF-8, of the message of type `schema` whose Protobuf encoding is `bytes`; or
 * `undefined` when it is to be decoded and encoded the usual way (see the module's comment).
 * `schema` must be one that {@link wireJsonSupported} accepts.
 */
export function wireToJson(
  schema: DescMessage,
  bytes: Uint8Array,
): Uint8Array<ArrayBuffer> | undefined {
  const plan = planOf(schema);
  if (plan === null || plan.kind !== "object") return undefined;
  wire = bytes;
  at = 0;
  top = 0;
  try {
    putObject(plan, 0, bytes.length);
    return out.slice(0, at);
  } catch (error) {
    if (error === usual) return undefined;
    throw error;
  } finally {
    wire = noBytes;
    if (out.length > keptOutputBytes) out = new Uint8Array(64 * 1024);
  }
}
