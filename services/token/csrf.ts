/**
 * CSRF tokens of the pages the token service answers for (the consent page, the device
 * verification pages): `<until>.<mac>`, where `mac` is the HMAC-SHA256, under the CSRF key
 * (./authorization.ts's deriveCsrfKey), of what the token is bound to (the values of the form it
 * protects), the user's session (the SHA-256 of the call's `authorization`) and `until`, its
 * expiry, {@link csrfTtlMs} after it was made. It is valid only for that session, those values,
 * until then; compared in constant time.
 *
 * @module
 */

import { sha256 } from "../../lib/platform/mod.ts";
import type { HandlerContext } from "@connectrpc/connect";
import { base64Encode } from "@bufbuild/protobuf/wire";

/** How long a page's CSRF token stays valid. */
export const csrfTtlMs = 10 * 60_000;

/** The keys and the clock tokens are made and checked with. */
export interface CsrfDeps {
  /**
   * The HMAC keys: tokens are made with the first, and checked with each (the others are those of
   * TOKEN_KEY_ENCRYPTION_PREVIOUS_KEYS, so that a page made before the key changed still posts).
   */
  csrfKeys: readonly Promise<CryptoKey>[];
  /** The clock (ms since the epoch). */
  now: () => number;
}

async function mac(key: Promise<CryptoKey>, ctx: HandlerContext, bound: string[], until: string) {
  const session = base64Encode(sha256(ctx.requestHeader.get("authorization") ?? ""), "url");
  const input = new TextEncoder().encode([session, ...bound, until].join("\n"));
  return base64Encode(new Uint8Array(await crypto.subtle.sign("HMAC", await key, input)), "url");
}

/** A token for the caller's session and `bound`, valid {@link csrfTtlMs}. */
export async function csrfToken(
  deps: CsrfDeps,
  ctx: HandlerContext,
  bound: string[],
): Promise<string> {
  const until = String(deps.now() + csrfTtlMs);
  return `${until}.${await mac(deps.csrfKeys[0]!, ctx, bound, until)}`;
}

/** When a token (one {@link csrfValid} accepted) expires. */
export function csrfExpiry(token: string): Date {
  return new Date(Number(token.slice(0, token.indexOf("."))));
}

/** Whether `token` was made for the caller's session and `bound`, and has not expired. */
export async function csrfValid(
  deps: CsrfDeps,
  ctx: HandlerContext,
  token: string,
  bound: string[],
): Promise<boolean> {
  const match = /^(\d{1,15})\.([A-Za-z0-9_-]{43})$/.exec(token);
  if (!match || Number(match[1]) < deps.now()) return false;
  let valid = false;
  for (const key of deps.csrfKeys) {
    const expected = await mac(key, ctx, bound, match[1]!);
    let diff = 0;
    for (let i = 0; i < expected.length; i++) {
      diff |= expected.charCodeAt(i) ^ match[2]!.charCodeAt(i);
    }
    valid ||= diff === 0;
  }
  return valid;
}
