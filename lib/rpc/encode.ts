/**
 * Protobuf binary encoding of the services' answers and calls: the bytes of
 * `toBinary(schema, create(schema, value))`, for a message or for the plain initializer a handler
 * returns, written straight into one process-wide buffer.
 *
 * Why not protobuf-es's `create` and `toBinary`: connect-es makes a message of every handler's
 * answer (`create`, a copy of each object), and `toBinary` writes each string into an array of its
 * own and each nested message into a buffer of its own (`fork`/`join`), each a backing store
 * outside V8's heap in Deno (a `new Uint8Array(16)` took 0.4 to 1.2 us in a loop here). On a page
 * of 100 clients they were about a fifth of the oauth-registry's CPU, not counting the collector.
 * Here a message's fields are written in field-number order, as protobuf-es writes them, strings
 * with `encodeInto` (ASCII byte by byte), and a nested message's length is written in front of it
 * once it is known (moving its bytes when the length takes more than one byte).
 *
 * What is left to protobuf-es, once per message type: types with a map, a group, a field of
 * google.protobuf.Struct, Value, ListValue or a wrapper type (some of which its messages hold in a
 * form of their own), a type that holds itself; and, per value, anything this encoder does not expect (an
 * integer out of range, a 64-bit integer given as a string, a value of the wrong type): protobuf-es
 * then encodes it or refuses it with its own error. `encode_test.ts` checks the bytes are
 * protobuf-es's for random messages and initializers of every type the services use.
 *
 * Encoding is synchronous, so one buffer serves every call; each result is a copy of its bytes.
 *
 * @module
 */

import {
  create,
  type DescField,
  type DescMessage,
  type MessageInitShape,
  type MessageShape,
  ScalarType,
  toBinary,
} from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import { writeU32 } from "../transport/mod.ts";

/** Thrown inside when a value is left to protobuf-es; never escapes this module. */
const unusual = new Error("encoded by protobuf-es");

/** Writes one field of a message (or nothing, when it is unset). */
type FieldWriter = (message: Record<string, unknown>) => void;

interface Plan {
  readonly typeName: string;
  /** In field-number order. */
  readonly fields: FieldWriter[];
}

/** Plans by type; `null` for a type left to protobuf-es. */
const plans = new WeakMap<DescMessage, Plan | null>();
const planning = new Set<DescMessage>();

/** The types whose fields protobuf-es's messages hold in a form of their own. */
const ownForm = new Set([
  "google.protobuf.Struct",
  "google.protobuf.Value",
  "google.protobuf.ListValue",
  "google.protobuf.DoubleValue",
  "google.protobuf.FloatValue",
  "google.protobuf.Int64Value",
  "google.protobuf.UInt64Value",
  "google.protobuf.Int32Value",
  "google.protobuf.UInt32Value",
  "google.protobuf.BoolValue",
  "google.protobuf.StringValue",
  "google.protobuf.BytesValue",
]);

function planOf(desc: DescMessage): Plan | null {
  const known = plans.get(desc);
  if (known !== undefined) return known;
  if (planning.has(desc) || ownForm.has(desc.typeName)) return null;
  planning.add(desc);
  let plan: Plan | null = null;
  try {
    const fields = desc.fields.toSorted((a, b) => a.number - b.number).map(fieldWriter);
    if (fields.every((f) => f !== null)) plan = { typeName: desc.typeName, fields };
  } finally {
    planning.delete(desc);
  }
  plans.set(desc, plan);
  return plan;
}

// ---------------------------------------------------------------------------------------------
// The buffer.

const keptBytes = 1024 * 1024;
/** The buffer (a property, not a module `let`: V8 checks those for initialisation on each use). */
const w = { buf: new Uint8Array(64 * 1024), at: 0 };

function reserve(n: number): void {
  if (w.at + n <= w.buf.length) return;
  const grown = new Uint8Array(Math.max(w.buf.length * 2, w.at + n));
  grown.set(w.buf.subarray(0, w.at));
  w.buf = grown;
}

/** An unsigned 32-bit varint. */
function varint32(v: number): void {
  reserve(5);
  while (v > 0x7f) {
    w.buf[w.at++] = (v & 0x7f) | 0x80;
    v >>>= 7;
  }
  w.buf[w.at++] = v;
}

/** A 64-bit varint from its halves (protobuf-es's `varint64write`). */
function varint64(lo: number, hi: number): void {
  reserve(10);
  for (let i = 0; i < 28; i += 7) {
    const shift = lo >>> i;
    const more = !(shift >>> 7 === 0 && hi === 0);
    w.buf[w.at++] = (more ? shift | 0x80 : shift) & 0xff;
    if (!more) return;
  }
  const split = ((lo >>> 28) & 0x0f) | ((hi & 0x07) << 4);
  const more = !(hi >> 3 === 0);
  w.buf[w.at++] = (more ? split | 0x80 : split) & 0xff;
  if (!more) return;
  for (let i = 3; i < 31; i += 7) {
    const shift = hi >>> i;
    const next = !(shift >>> 7 === 0);
    w.buf[w.at++] = (next ? shift | 0x80 : shift) & 0xff;
    if (!next) return;
  }
  w.buf[w.at++] = (hi >>> 31) & 0x01;
}

function fixed32(v: number): void {
  reserve(4);
  w.buf[w.at++] = v & 0xff;
  w.buf[w.at++] = (v >>> 8) & 0xff;
  w.buf[w.at++] = (v >>> 16) & 0xff;
  w.buf[w.at++] = (v >>> 24) & 0xff;
}

const floats = new DataView(new ArrayBuffer(8));
const encoder = new TextEncoder();

function string(value: unknown): void {
  if (typeof value !== "string") throw unusual;
  const n = value.length;
  const start = w.at;
  // ASCII, the usual case: its length is its byte length.
  varint32(n);
  reserve(n);
  const b = w.buf;
  let p = w.at;
  let i = 0;
  for (; i < n; i++) {
    const c = value.charCodeAt(i);
    if (c >= 0x80) break;
    b[p++] = c;
  }
  if (i === n) {
    w.at = p;
    return;
  }
  // Otherwise encoded after room for the longest length, then moved up to the length it takes.
  w.at = start;
  reserve(5 + n * 3);
  const { written } = encoder.encodeInto(value, w.buf.subarray(w.at + 5));
  const prefix = varintSize(written);
  w.buf.copyWithin(w.at + prefix, w.at + 5, w.at + 5 + written);
  varint32(written);
  w.at += written;
}

function bytes(value: unknown): void {
  const data = Array.isArray(value) ? new Uint8Array(value) : value;
  if (!(data instanceof Uint8Array)) throw unusual;
  varint32(data.length);
  reserve(data.length);
  w.buf.set(data, w.at);
  w.at += data.length;
}

function varintSize(v: number): number {
  return v < 0x80 ? 1 : v < 0x4000 ? 2 : v < 0x200000 ? 3 : v < 0x10000000 ? 4 : 5;
}

/** Leaves a byte for a length to come; returns where what it measures starts. */
function beginDelimited(): number {
  reserve(1);
  return ++w.at;
}

/** Writes the length of what was written since `start` in front of it. */
function endDelimited(start: number): void {
  const length = w.at - start;
  if (length < 0x80) {
    w.buf[start - 1] = length;
    return;
  }
  const extra = varintSize(length) - 1;
  reserve(extra);
  w.buf.copyWithin(start + extra, start, w.at);
  const end = w.at + extra;
  w.at = start - 1;
  varint32(length);
  w.at = end;
}

// ---------------------------------------------------------------------------------------------
// Scalars, checked as protobuf-es checks them (a value it would refuse is left to it).

const int32Max = 0x7fffffff;
const int32Min = -0x80000000;
const uint32Max = 0xffffffff;
const float32Max = 3.4028234663852886e38;
const int64Min = -(2n ** 63n);
const int64Max = 2n ** 63n - 1n;
const uint64Max = 2n ** 64n - 1n;

function int32Of(v: unknown): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v > int32Max || v < int32Min) throw unusual;
  return v;
}

function uint32Of(v: unknown): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v > uint32Max || v < 0) throw unusual;
  return v;
}

/** A 64-bit integer as a bigint (numbers must be safe integers; strings are left to protobuf-es). */
function int64Of(v: unknown, unsigned: boolean): bigint {
  let big: bigint;
  if (typeof v === "bigint") big = v;
  else if (typeof v === "number" && Number.isSafeInteger(v)) big = BigInt(v);
  else throw unusual;
  if (unsigned ? big < 0n || big > uint64Max : big < int64Min || big > int64Max) throw unusual;
  return big;
}

const maxSafe = BigInt(Number.MAX_SAFE_INTEGER);

function varintOf64(big: bigint): void {
  // Timestamps' seconds and most counts: no BigInt arithmetic.
  if (big >= 0n && big <= maxSafe) {
    const n = Number(big);
    varint64(n >>> 0, Math.floor(n / 0x100000000));
    return;
  }
  const u = BigInt.asUintN(64, big);
  varint64(Number(u & 0xffffffffn), Number(u >> 32n));
}

function fixedOf64(big: bigint): void {
  const u = BigInt.asUintN(64, big);
  fixed32(Number(u & 0xffffffffn));
  fixed32(Number(u >> 32n));
}

/** The wire type and the value writer of a scalar type (enums are int32). */
function scalarWriter(scalar: ScalarType): [number, (v: unknown) => void] {
  switch (scalar) {
    case ScalarType.STRING:
      return [2, string];
    case ScalarType.BYTES:
      return [2, bytes];
    case ScalarType.BOOL:
      return [0, (v) => {
        if (typeof v !== "boolean") throw unusual;
        reserve(1);
        w.buf[w.at++] = v ? 1 : 0;
      }];
    case ScalarType.INT32:
      return [0, (v) => {
        const n = int32Of(v);
        if (n >= 0) varint32(n);
        else varint64(n >>> 0, 0xffffffff);
      }];
    case ScalarType.UINT32:
      return [0, (v) => varint32(uint32Of(v))];
    case ScalarType.SINT32:
      return [0, (v) => {
        const n = int32Of(v);
        varint32(((n << 1) ^ (n >> 31)) >>> 0);
      }];
    case ScalarType.FIXED32:
      return [5, (v) => fixed32(uint32Of(v))];
    case ScalarType.SFIXED32:
      return [5, (v) => fixed32(int32Of(v))];
    case ScalarType.FLOAT:
      return [5, (v) => {
        if (typeof v !== "number") throw unusual;
        if (Number.isFinite(v) && (v > float32Max || v < -float32Max)) throw unusual;
        floats.setFloat32(0, v, true);
        fixed32(floats.getUint32(0, true));
      }];
    case ScalarType.DOUBLE:
      return [1, (v) => {
        if (typeof v !== "number") throw unusual;
        floats.setFloat64(0, v, true);
        fixed32(floats.getUint32(0, true));
        fixed32(floats.getUint32(4, true));
      }];
    case ScalarType.INT64:
      return [0, (v) => varintOf64(int64Of(v, false))];
    case ScalarType.UINT64:
      return [0, (v) => varintOf64(int64Of(v, true))];
    case ScalarType.SINT64:
      return [0, (v) => {
        const big = int64Of(v, false);
        varintOf64((big << 1n) ^ (big >> 63n));
      }];
    case ScalarType.FIXED64:
      return [1, (v) => fixedOf64(int64Of(v, true))];
    case ScalarType.SFIXED64:
      return [1, (v) => fixedOf64(int64Of(v, false))];
  }
}

/** Whether an implicit-presence scalar is its zero value (protobuf-es's checks, per type). */
function zeroTest(scalar: ScalarType): (v: unknown) => boolean {
  switch (scalar) {
    case ScalarType.BOOL:
      return (v) => v === false;
    case ScalarType.STRING:
      return (v) => v === "";
    case ScalarType.BYTES:
      return (v) => (v instanceof Uint8Array || Array.isArray(v)) && v.length === 0;
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return (v) => Object.is(v, 0);
    default:
      // Loose, as protobuf-es: 0, 0n and "0".
      return (v) => v == 0;
  }
}

// ---------------------------------------------------------------------------------------------
// Fields.

function fieldWriter(field: DescField): FieldWriter | null {
  if (field.fieldKind === "map") return null;
  if ((field as { delimitedEncoding?: boolean }).delimitedEncoding === true) return null;
  const name = field.localName;
  let tagWireType: number;
  let write: (v: unknown) => void;
  if (field.message !== undefined) {
    const nested = planOf(field.message);
    if (nested === null) return null;
    tagWireType = 2;
    write = (v) => {
      if (typeof v !== "object" || v === null) throw unusual;
      const start = beginDelimited();
      writeMessage(nested, v as Record<string, unknown>);
      endDelimited(start);
    };
  } else {
    [tagWireType, write] = scalarWriter(field.enum !== undefined ? ScalarType.INT32 : field.scalar);
  }
  const tag = (field.number << 3 | tagWireType) >>> 0;
  const packedTag = (field.number << 3 | 2) >>> 0;

  if (field.fieldKind === "list") {
    const packed = field.packed && field.message === undefined;
    return (message) => {
      const items = message[name];
      if (items == null) return;
      if (!Array.isArray(items)) throw unusual;
      if (packed) {
        if (items.length === 0) return;
        varint32(packedTag);
        const start = beginDelimited();
        for (let i = 0; i < items.length; i++) write(items[i]);
        endDelimited(start);
        return;
      }
      for (let i = 0; i < items.length; i++) {
        varint32(tag);
        write(items[i]);
      }
    };
  }
  if (field.oneof !== undefined) {
    const group = field.oneof.localName;
    return (message) => {
      const oneof = message[group] as { case?: unknown; value?: unknown } | undefined;
      if (oneof == null || oneof.case !== name) return;
      if (oneof.value == null) throw unusual;
      varint32(tag);
      write(oneof.value);
    };
  }
  // Explicit presence (a message, a proto3 `optional`): written when set. Implicit: when not zero.
  const isZero =
    field.fieldKind === "message" || field.presence !== FeatureSet_FieldPresence.IMPLICIT
      ? undefined
      : field.fieldKind === "enum"
      ? ((zero) => (v: unknown) => v === zero)(field.enum.values[0]!.number)
      : zeroTest(field.scalar);
  return (message) => {
    const value = message[name];
    if (value == null || isZero?.(value)) return;
    varint32(tag);
    write(value);
  };
}

interface UnknownField {
  no: number;
  wireType: number;
  data: Uint8Array;
}

function writeMessage(plan: Plan, message: Record<string, unknown>): void {
  const fields = plan.fields;
  for (let i = 0; i < fields.length; i++) fields[i]!(message);
  // A message of this very type (not an initializer) keeps the fields it was read with.
  const unknown = message.$typeName === plan.typeName
    ? message.$unknown as UnknownField[] | undefined
    : undefined;
  if (unknown !== undefined) {
    for (const { no, wireType, data } of unknown) {
      varint32((no << 3 | wireType) >>> 0);
      reserve(data.length);
      w.buf.set(data, w.at);
      w.at += data.length;
    }
  }
}

/**
 * The Protobuf bytes of a message, or of an initializer of one: those of
 * `toBinary(schema, create(schema, message))`. Throws what protobuf-es throws for a value it
 * cannot encode.
 */
export function encodeMessage<Desc extends DescMessage>(
  schema: Desc,
  message: MessageShape<Desc> | MessageInitShape<Desc>,
): Uint8Array<ArrayBuffer> {
  const plan = planOf(schema);
  if (plan !== null) {
    w.at = 0;
    try {
      writeMessage(plan, message as Record<string, unknown>);
      return w.buf.slice(0, w.at);
    } catch (error) {
      if (error !== unusual) throw error;
    } finally {
      if (w.buf.length > keptBytes) w.buf = new Uint8Array(64 * 1024);
    }
  }
  return toBinary(schema, create(schema, message)) as Uint8Array<ArrayBuffer>;
}

/**
 * A gRPC length-prefixed message (PROTOCOL-HTTP2.md): the compressed flag (0), the length as 32
 * bits big-endian, then `message`.
 */
export function lengthPrefixed(message: Uint8Array): Uint8Array<ArrayBuffer> {
  const framed = new Uint8Array(5 + message.length);
  writeU32(framed, 1, message.length);
  framed.set(message, 5);
  return framed;
}
