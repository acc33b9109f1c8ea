/**
 * PKCE (RFC 7636) with the S256 method, the only one this server takes (RFC 9700 2.1.1: `plain`
 * protects nothing against a code that leaks with its request).
 *
 * @module
 */

import { base64Encode } from "@bufbuild/protobuf/wire";

/** RFC 7636 4.1 and 4.2: 43..128 unreserved characters. */
const unreserved = /^[A-Za-z0-9\-._~]{43,128}$/;

/**
 * What an S256 challenge can be: BASE64URL(SHA-256(...)), 32 bytes in 43 characters, the last of
 * which carries 4 bits and two zero bits. Anything else is within RFC 7636 4.2's syntax but no
 * verifier can match it: refused at once, not after the user's consent.
 */
const sha256Base64url = /^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$/;

/** Why a challenge (and its method) is not acceptable, or undefined when it is. */
export function challengeProblem(challenge: string, method: string): string | undefined {
  if (challenge === "") return "code_challenge is required (PKCE, RFC 7636, with S256)";
  if (method === "" || method === "plain") {
    return "code_challenge_method must be S256; plain (the default when it is absent) is not accepted";
  }
  if (method !== "S256") return "code_challenge_method must be S256";
  if (!sha256Base64url.test(challenge)) {
    return "code_challenge must be the base64url SHA-256 of the code_verifier (43 characters)";
  }
  return undefined;
}

/** The S256 challenge of a verifier: BASE64URL(SHA-256(ASCII(verifier))). */
export async function s256(verifier: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  return base64Encode(new Uint8Array(digest), "url");
}

/** Whether a verifier is well-formed and matches the S256 challenge. */
export async function verifierMatches(verifier: string, challenge: string): Promise<boolean> {
  if (!unreserved.test(verifier)) return false;
  const computed = await s256(verifier);
  if (computed.length !== challenge.length) return false;
  let diff = 0;
  for (let i = 0; i < computed.length; i++) {
    diff |= computed.charCodeAt(i) ^ challenge.charCodeAt(i);
  }
  return diff === 0;
}
