/**
 * Update masks (AIP-134): which fields of a resource an Update call changes.
 *
 * @module
 */

import { type DescMessage, isFieldSet, type Message } from "@bufbuild/protobuf";
import type { FieldMask } from "@bufbuild/protobuf/wkt";
import type { FieldViolation } from "../platform/mod.ts";

/** Which fields of the resource a caller may change, and why the others cannot be named. */
export interface MaskRules {
  /** Proto names of the fields an update may change. */
  updatable: readonly string[];
  /** Proto names of fields that are set once, at creation. */
  immutable?: readonly string[];
}

/** The fields an update changes, as proto names, or the violations of a bad mask. */
export interface MaskResult {
  /** Proto names of the fields to change, in mask order, without duplicates. */
  paths: string[];
  /** One violation per path that names no updatable field. */
  violations: FieldViolation[];
}

/**
 * Resolves the update mask of a request (AIP-134). With a mask, every path must name an updatable
 * field (violations are reported as `<resourceField>.<path>`); `*` alone is every updatable field
 * (full replacement: one left out of the resource is set to its empty value, which validation may
 * refuse). Without one, or with an empty one (over JSON, `""` is the only way to send a mask with
 * no paths, and a change of nothing is never what is meant), the updatable fields that are set in
 * the resource are taken, and output-only fields are ignored (AIP-203).
 */
export function resolveMask(
  desc: DescMessage,
  resource: Message | undefined,
  mask: FieldMask | undefined,
  rules: MaskRules,
  resourceField: string,
): MaskResult {
  const paths: string[] = [];
  const violations: FieldViolation[] = [];
  if (mask !== undefined && mask.paths.length === 1 && mask.paths[0] === "*") {
    return { paths: [...rules.updatable], violations };
  }
  if (mask === undefined || mask.paths.length === 0) {
    for (const name of rules.updatable) {
      const field = desc.fields.find((f) => f.name === name);
      if (field && resource && isFieldSet(resource, field)) paths.push(name);
    }
    return { paths, violations };
  }
  for (const path of mask.paths) {
    if (path === "*") {
      violations.push({ field: "update_mask", description: "* must be the only path" });
      continue;
    }
    // The etag is the update's precondition (AIP-154), never a field it changes.
    if (paths.includes(path) || path === "etag") continue;
    if (rules.updatable.includes(path)) {
      paths.push(path);
      continue;
    }
    const known = desc.fields.some((f) => f.name === path);
    violations.push({
      field: `${resourceField}.${path}`,
      description: !known
        ? "unknown field"
        : rules.immutable?.includes(path)
        ? "cannot be changed after creation"
        : "is output only and cannot be set",
    });
  }
  return { paths, violations };
}
