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

/** What the project says about its scopes: the OAuthConfig's `scopes` (or nothing). */
export interface DeclaredScopes {
  scopes: readonly { name: string; description: string; sensitive: boolean }[];
}

/**
 * Whether a project's clients may ask for these scopes: any syntactically valid one when the
 * project declares none (its config's `scopes` is empty, or it has no config), else only those it
 * declares; `invalid_scope` for one it does not (not named: it is the client's own input). Every
 * endpoint that takes a new `scope` (the authorization endpoint, `client_credentials`) calls it;
 * the grants that only narrow what was granted need not.
 */
export function checkDeclared(config: DeclaredScopes | undefined, scopes: readonly string[]): void {
  if (!config || config.scopes.length === 0) return;
  const declared = new Set(config.scopes.map((s) => s.name));
  if (scopes.some((s) => !declared.has(s))) {
    throw oauthError("invalid_scope", "A scope asked for is not one the application declares");
  }
}

/** One scope as the consent page shows it. */
export interface ScopeDetail {
  name: string;
  description: string;
  sensitive: boolean;
}

/**
 * The consent page's view of scopes: each with the project's description and sensitive flag, or,
 * when the project declares none (or not this one), its name as the description, not sensitive.
 */
export function describeScopes(
  config: DeclaredScopes | undefined,
  scopes: readonly string[],
): ScopeDetail[] {
  const byName = new Map((config?.scopes ?? []).map((s) => [s.name, s]));
  return scopes.map((name) => {
    const declared = byName.get(name);
    return declared
      ? { name, description: declared.description, sensitive: declared.sensitive }
      : { name, description: name, sensitive: false };
  });
}

/**
 * The prompt parameter (OpenID Connect Core 3.1.2.1): its values, space-separated, each of
 * `none`, `login`, `consent` (`select_account` is not offered: a session is one account), once;
 * `none` alone. Returns undefined for a bad one.
 */
export function parsePrompt(prompt: string): Set<"none" | "login" | "consent"> | undefined {
  const out = new Set<"none" | "login" | "consent">();
  if (prompt === "") return out;
  for (const value of prompt.split(" ")) {
    if (value !== "none" && value !== "login" && value !== "consent") return undefined;
    if (out.has(value)) return undefined;
    out.add(value);
  }
  if (out.has("none") && out.size > 1) return undefined;
  return out;
}
