/**
 * The one spelling of a proto enum value outside protobuf: its name without the enum's shared
 * prefix, in lower case (`CLIENT_TYPE_WEB` -> `web`). The JSON API and the database both use it.
 *
 * Both directions are looked up in tables made once per enum type: every row a service reads
 * turns its stored names into numbers, and lowering each value's name on every call made a string
 * per value tried (a page of 100 units allocated 11 KiB for its two enum fields).
 *
 * @module
 */

import type { DescEnum } from "@bufbuild/protobuf";

/** Every value of an enum type in both directions, the number 0 (`UNSPECIFIED`) included. */
export interface EnumSpellings {
  readonly byNumber: ReadonlyMap<number, string>;
  readonly byName: ReadonlyMap<string, number>;
}

const tables = new WeakMap<DescEnum, EnumSpellings>();

/** The spellings of an enum type's values, made on first use and kept with the type. */
export function enumSpellings(desc: DescEnum): EnumSpellings {
  let table = tables.get(desc);
  if (table === undefined) {
    const byNumber = new Map<number, string>();
    const byName = new Map<string, number>();
    for (const value of desc.values) {
      const name = value.localName.toLowerCase();
      if (!byNumber.has(value.number)) byNumber.set(value.number, name);
      if (!byName.has(name)) byName.set(name, value.number);
    }
    tables.set(desc, table = { byNumber, byName });
  }
  return table;
}

/** Returns the lower-case short name of an enum value (`web`), or undefined for an unknown number. */
export function enumName(desc: DescEnum, value: number): string | undefined {
  return enumSpellings(desc).byNumber.get(value);
}

/** Returns the number of the enum value with the given lower-case short name, or undefined. */
export function enumNumber(desc: DescEnum, name: string): number | undefined {
  return enumSpellings(desc).byName.get(name);
}
