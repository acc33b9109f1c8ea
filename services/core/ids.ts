/**
 * Identifier kinds of the core area: the API's TypeIDs (`unit_...`) of the UUIDs stored, for the
 * service and for the repositories' resource names.
 *
 * @module
 */

import { idKind } from "../../lib/platform/mod.ts";

/** Identifier kinds of the core area. */
export const ids = {
  role: idKind("role"),
  journey: idKind("journey"),
  unit: idKind("unit"),
} as const;
