/**
 * The AIP resource conventions every service's handlers share: identifiers in paths, list pages,
 * update masks, etags, validation turned into field violations, enum spellings.
 *
 * @module
 */

export { enumName, enumNumber, type EnumSpellings, enumSpellings } from "./enums.ts";
export {
  anyVersion,
  etagField,
  etagMismatch,
  etagMismatchReason,
  expiredEtagSuffix,
  expiringEtag,
  isEtag,
  noVersion,
  preconditionFailed,
  readEtag,
} from "./etag.ts";
export { maxPageBytes, nullable, pageOf, pathUuid, readPage, rowTextSize } from "./pages.ts";
export { type JsonSchemaLimits, jsonSchemaLimits } from "./json_schema.ts";
export {
  maxTimestampMs,
  timestampBefore,
  timestampCeilMs,
  timestampFloorMs,
  timestampOf,
} from "./timestamps.ts";
export { resolveMask } from "./update_mask.ts";
export {
  assertValid,
  checkedString,
  enumValue,
  pageLimit,
  rule,
  text,
  timestamp,
  uniqueList,
  validate,
} from "./validation.ts";
