/**
 * The `scope` parameter (RFC 6749 3.3): scope tokens separated by single spaces.
 *
 * @module
 */

import { oauthError } from "./oauth_errors.ts";

/** RFC 6749 3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ). */
const scopeToken = /^[\x21\x23-\x5B\x5D-\x7E]{1,512}$/;
const maxScopes = 100;

/** The scopes of a `scope` parameter, in order, without duplicates; `invalid_scope` when bad. */
export function parseScope(scope: string): string[] {
  if (scope === "") return [];
  const tokens = scope.split(" ");
  const out = new Set<string>();
  for (const token of tokens) {
    if (!scopeToken.test(token)) {
      throw oauthError(
        "invalid_scope",
        "scope must be scope tokens separated by single spaces, each 1..512 printable ASCII " +
          "characters other than double quote and backslash (RFC 6749 3.3)",
      );
    }
    out.add(token);
  }
  if (out.size > maxScopes) {
    throw oauthError("invalid_scope", `At most ${maxScopes} scopes may be asked for`);
  }
  return [...out];
}

/**
 * The scopes asked for at the token endpoint, which may only narrow those granted (RFC 6749 6):
 * all of them when none are asked for; `invalid_scope` for one that was not granted.
 */
export function narrowScope(asked: string, granted: string[]): string[] {
  const scopes = parseScope(asked);
  if (scopes.length === 0) return granted;
  const allowed = new Set(granted);
  if (scopes.some((s) => !allowed.has(s))) {
    throw oauthError("invalid_scope", "A scope asked for was not granted");
  }
  return scopes;
}
