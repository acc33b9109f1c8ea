/**
 * The core area's input rules, as valibot schemas over the decoded request messages (the single
 * source: gRPC callers and the gateway meet the same rules). Where the specification says "not
 * shown", the decisions are documented in the proto:
 * names and titles 1..200 characters, descriptions up to 10,000, identifiers up to 255,
 * permissions `resource.action`, at most 100 per role.
 *
 * @module
 */

import * as v from "valibot";
import { UnitPriority, UnitStatus } from "../../gen/registry/core/v1/unit_pb.ts";
import { etagField, text, timestamp, uniqueList } from "../../lib/resource/mod.ts";

/** Longest description. */
export const maxDescription = 10_000;

/** An identifier such as an owner or an assignee: 1..255 characters, no control characters. */
export const identifier = text(1, 255);

const description = text(0, maxDescription, { multiline: true });

const resourceType = v.pipe(
  v.string("must be a string"),
  v.maxLength(255, "must be between 1 and 255 characters"),
  v.regex(
    /^[a-z][a-z0-9_-]*(?:\.[a-z][a-z0-9_-]*)*$/,
    "must be lower-case dot-separated words of letters, digits, '_' and '-', each starting with a letter",
  ),
);

const permission = v.pipe(
  v.string("must be a string"),
  v.maxLength(255, "must be between 3 and 255 characters"),
  v.regex(
    /^[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)+$/,
    "must be resource.action: two or more dot-separated lower-case words of letters, digits and '_'",
  ),
);

/** The rules of a Role given in a create or replace request. */
export const roleInput = v.object({
  // Unique per space and resource type, so kept in Unicode NFC: a name whose accents are
  // combining characters is the name written with precomposed ones, not a second role that
  // looks the same in every list (its length is counted once normalised).
  name: v.pipe(v.string("must be a string"), v.transform((s) => s.normalize("NFC")), text(1, 200)),
  description: v.optional(description),
  resourceType,
  permissions: uniqueList(permission, 100),
  // Ignored on creation; a replace's precondition (read by the handler).
  etag: etagField,
}, "is required");

/** The rules of a Journey given in a create or replace request. */
export const journeyInput = v.object({
  owner: v.optional(identifier),
  parent: v.optional(v.pipe(v.string(), v.minLength(1, "must be a journey id"))),
  name: text(1, 200),
  description,
  active: v.optional(v.boolean(), true),
  // Ignored on creation; a replace's precondition (read by the handler).
  etag: etagField,
}, "is required");

/** The rules of a Unit given in a create or replace request. */
export const unitInput = v.object({
  journey: v.pipe(v.string(), v.minLength(1, "is required")),
  title: text(1, 200),
  assignee: v.optional(identifier),
  status: v.pipe(
    v.number(),
    v.transform((n) => n === UnitStatus.UNSPECIFIED ? UnitStatus.TODO : n),
    v.picklist(
      [UnitStatus.TODO, UnitStatus.IN_PROGRESS, UnitStatus.DONE, UnitStatus.CANCELED],
      'must be one of "todo", "in_progress", "done", "canceled"',
    ),
  ),
  priority: v.pipe(
    v.number(),
    v.transform((n) => n === UnitPriority.UNSPECIFIED ? UnitPriority.NONE : n),
    v.picklist(
      [
        UnitPriority.NONE,
        UnitPriority.LOW,
        UnitPriority.MEDIUM,
        UnitPriority.HIGH,
        UnitPriority.URGENT,
      ],
      'must be one of "none", "low", "medium", "high", "urgent"',
    ),
  ),
  description: v.optional(description),
  dueAt: v.optional(timestamp),
  // Ignored on creation; a replace's precondition (read by the handler).
  etag: etagField,
}, "is required");

/** Filters of ListRoles. */
export const roleFilter = v.object({ resourceType: v.optional(resourceType) });

/** Filters of ListUnits (the journey is resolved by the handler). */
export const unitFilter = v.object({
  journey: v.pipe(v.string(), v.minLength(1, "is required")),
  status: v.optional(
    v.picklist(
      [UnitStatus.TODO, UnitStatus.IN_PROGRESS, UnitStatus.DONE, UnitStatus.CANCELED],
      'must be one of "todo", "in_progress", "done", "canceled"',
    ),
  ),
  assignee: v.optional(identifier),
});
