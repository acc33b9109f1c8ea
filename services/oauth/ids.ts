/**
 * Identifier kinds of the OAuth area: the API's TypeIDs (`cli_...`) of the UUIDs stored, for the
 * service and for the repositories' resource names.
 *
 * @module
 */

import { idKind } from "../../lib/platform/mod.ts";

/** Identifier kinds of the OAuth area. */
export const ids = {
  client: idKind("cli"),
  secret: idKind("sec"),
  key: idKind("key"),
  installation: idKind("ins"),
  principal: idKind("prn"),
} as const;
