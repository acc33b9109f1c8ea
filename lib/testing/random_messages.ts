/**
 * Random Protobuf messages of the services' types, for the tests of the hand-written codecs
 * (lib/rpc/encode.ts, gateway/wire_json.ts), which must give the bytes protobuf-es gives. A seeded
 * generator, so that a failure can be replayed.
 *
 * @module
 */

import { create, type DescField, type DescMessage, ScalarType } from "@bufbuild/protobuf";
import { CoreService } from "../../gen/registry/core/v1/core_service_pb.ts";
import { OAuthRegistryService } from "../../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { TokenService } from "../../gen/registry/token/v1/token_service_pb.ts";

/** A small deterministic generator of numbers in [0, 1) (mulberry32). */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Every message type the services take and answer with, and the types they hold. */
export function serviceMessageTypes(): DescMessage[] {
  const found = new Set<DescMessage>();
  const visit = (desc: DescMessage) => {
    if (found.has(desc)) return;
    found.add(desc);
    for (const field of desc.fields) if (field.message) visit(field.message);
  };
  for (const service of [OAuthRegistryService, CoreService, TokenService]) {
    for (const method of service.methods) {
      visit(method.input);
      visit(method.output);
    }
  }
  return [...found];
}

/** Pieces of strings: JSON escapes, multi-byte and astral characters, a lone surrogate. */
const pieces = [
  "a",
  "Z",
  " ",
  '"',
  "\\",
  "\n",
  "\t",
  "\u0000",
  "\u001f",
  "\u007f",
  "é",
  "€",
  "\u2028",
  "😀",
  "\ud800",
  "/",
  "<",
];

/** Options of {@link randomMessage}. */
export interface RandomOptions {
  /**
   * An initializer as handlers write them (fields left out or `null`, 64-bit integers as numbers,
   * bytes as arrays, nested messages as plain objects) rather than a message.
   */
  init?: boolean;
  /** Long strings now and then (past 64 KiB). */
  long?: boolean;
}

/** A random message (or initializer) of a type; map fields are left empty. */
export function randomMessage(
  schema: DescMessage,
  rnd: () => number,
  options: RandomOptions = {},
  depth = 0,
): Record<string, unknown> {
  const init: Record<string, unknown> = {};
  for (const field of schema.fields) {
    if (rnd() < 0.25) {
      if (options.init && rnd() < 0.3 && field.oneof === undefined) init[field.localName] = null;
      continue;
    }
    if (field.fieldKind === "map") continue;
    const one = () => valueOf(field, rnd, options, depth);
    if (field.oneof !== undefined) {
      if (rnd() < 0.5) continue;
      const value = one();
      if (value !== undefined) init[field.oneof.localName] = { case: field.localName, value };
      continue;
    }
    const value = field.fieldKind === "list"
      ? Array.from({ length: Math.floor(rnd() * 4) }, one).filter((v) => v !== undefined)
      : one();
    if (value !== undefined) init[field.localName] = value;
  }
  return options.init && rnd() < 0.5 ? init : create(schema, init) as Record<string, unknown>;
}

function valueOf(
  field: DescField,
  rnd: () => number,
  options: RandomOptions,
  depth: number,
): unknown {
  if (field.message !== undefined) {
    if (field.message.typeName === "google.protobuf.Timestamp") {
      const seconds = rnd() < 0.02 ? Math.floor(rnd() * 1e13) : Math.floor(rnd() * 4e9);
      const nanos = Math.floor(rnd() * 1e9);
      return options.init && rnd() < 0.5
        ? { seconds: BigInt(seconds), nanos }
        : create(field.message, { seconds: BigInt(seconds), nanos });
    }
    if (field.message.typeName === "google.protobuf.Struct") return { a: 1, b: ["x", null] };
    if (depth > 3) return undefined;
    return randomMessage(field.message, rnd, options, depth + 1);
  }
  if (field.enum !== undefined) {
    const values = field.enum.values;
    return rnd() < 0.1
      ? Math.floor(rnd() * 100)
      : values[Math.floor(rnd() * values.length)]!.number;
  }
  switch (field.scalar) {
    case ScalarType.STRING:
      if (options.long && rnd() < 0.01) return "x".repeat(70_000);
      return Array.from(
        { length: Math.floor(rnd() * 12) },
        () => pieces[Math.floor(rnd() * pieces.length)],
      ).join("");
    case ScalarType.BYTES: {
      const bytes = Array.from({ length: Math.floor(rnd() * 9) }, () => Math.floor(rnd() * 256));
      return options.init && rnd() < 0.3 ? bytes : Uint8Array.from(bytes);
    }
    case ScalarType.BOOL:
      return rnd() < 0.5;
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64: {
      const small = Math.floor(rnd() * 2 ** 53) * (rnd() < 0.3 ? -1 : 1);
      if (options.init && rnd() < 0.3) return small;
      return BigInt(small) * (rnd() < 0.3 ? 1024n : 1n);
    }
    case ScalarType.UINT64:
    case ScalarType.FIXED64: {
      const small = Math.floor(rnd() * 2 ** 53);
      if (options.init && rnd() < 0.3) return small;
      return BigInt(small) * (rnd() < 0.3 ? 2048n : 1n);
    }
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return rnd() < 0.05 ? NaN : rnd() < 0.05 ? -0 : (rnd() - 0.5) * 10 ** Math.floor(rnd() * 30);
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return Math.floor(rnd() * 2 ** 32);
    default:
      return Math.floor((rnd() - 0.5) * 2 ** 32);
  }
}
