/**
 * Conditional requests (RFC 9110 13.1, 13.2) on `/v1`: `If-Match` and `If-None-Match` parsed and
 * evaluated against a resource's etag (AIP-154). The transcoder (./transcoder.ts) decides what to
 * compare with: the answer of a GET, the version a write will be conditional on, or nothing (a
 * collection, which has no etag).
 *
 * - `If-Match` uses the strong comparison: a weak tag (`W/"..."`) never matches, `*` matches any
 *   current representation, and a list holds when any of its strong tags is the current etag.
 * - `If-None-Match` uses the weak comparison: it is false when `*` is sent and the resource exists,
 *   or when a listed tag, weak or not, is the current etag.
 *
 * @module
 */

/** One entity tag of a list: its opaque part, and whether it was sent weak (`W/`). */
export interface EntityTag {
  tag: string;
  weak: boolean;
}

/** A parsed `If-Match` or `If-None-Match`: `*`, or the entity tags of its list. */
export type Condition = "*" | EntityTag[];

/**
 * One element of an entity-tag list (RFC 9110 5.6.1, 8.8.3): `W/` or not, then a quoted opaque tag
 * of `etagc` (`%x21 / %x23-7E / obs-text`: a comma is one of them), or nothing (an empty element),
 * then the comma that ends it or the end of the value.
 */
const listElement = /[ \t]*(?:(W\/)?"([\x21\x23-\x7e\x80-\xff]*)")?[ \t]*(?:,|$)/y;

/**
 * The longest `If-Match` or `If-None-Match` taken, in characters (the OpenAPI document's
 * `maxLength`): a few dozen etags, which a client's cache never needs more of.
 */
export const maxConditionLength = 1024;

/**
 * Parses `If-Match = "*" / #entity-tag` (and the same `If-None-Match`); undefined when
 * malformed (a tag without its quotes, `*` among tags, no tag at all, or a value over
 * {@link maxConditionLength}). Empty list elements are skipped (RFC 9110 5.6.1.2). A list is
 * split at the commas between its tags, not at those inside one (`"a,b"` is one tag).
 */
export function parseCondition(value: string): Condition | undefined {
  if (value.length > maxConditionLength) return undefined;
  if (/^[ \t]*\*[ \t]*$/.test(value)) return "*";
  const tags: EntityTag[] = [];
  for (let at = 0; at < value.length;) {
    listElement.lastIndex = at;
    const match = listElement.exec(value);
    if (!match) return undefined;
    if (match[2] !== undefined) tags.push({ tag: match[2], weak: match[1] !== undefined });
    at = listElement.lastIndex;
  }
  return tags.length === 0 ? undefined : tags;
}

/**
 * Whether `If-Match` holds for a resource whose current etag is `etag` (undefined: it has a
 * current representation but no etag, as a collection).
 */
export function matches(condition: Condition, etag: string | undefined): boolean {
  return condition === "*" || condition.some((t) => !t.weak && t.tag === etag);
}

/**
 * Whether `If-None-Match` holds for a resource whose current etag is `etag` (undefined: it has a
 * current representation but no etag).
 */
export function noneMatches(condition: Condition, etag: string | undefined): boolean {
  return condition !== "*" && !condition.some((t) => t.tag === etag);
}

/** The strong tags of an `If-Match` list, the only ones that can match (empty ones name none). */
export function strongTags(condition: EntityTag[]): string[] {
  return [...new Set(condition.filter((t) => !t.weak && t.tag !== "").map((t) => t.tag))];
}
