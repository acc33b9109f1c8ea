/**
 * The one spelling of a proto enum value outside protobuf: its name without the enum's shared
 * prefix, in lower case (`CLIENT_TYPE_WEB` -> `web`). The JSON API and the database both use it.
 *
 * @module
 */

import type { DescEnum } from "@bufbuild/protobuf";

/** Returns the lower-case short name of an enum value (`web`), or undefined for an unknown number. */
export function enumName(desc: DescEnum, value: number): string | undefined {
  return desc.value[value]?.localName.toLowerCase();
}

/** Returns the number of the enum value with the given lower-case short name, or undefined. */
export function enumNumber(desc: DescEnum, name: string): number | undefined {
  for (const value of desc.values) {
    if (value.localName.toLowerCase() === name) return value.number;
  }
  return undefined;
}
