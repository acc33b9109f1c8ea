/**
 * `private_key_jwt` (RFC 7523 2.2 and 3, RFC 7521 4.2): a confidential client registered for it
 * authenticates with a JWT it signed with one of its keys (the registry's ClientKeys), instead of
 * a secret. What is checked, in order of cost, each failure the same `invalid_client` with the
 * same description, so that an answer tells an attacker nothing about which check failed:
 *
 * - the JWS: compact, three base64url parts, a header without `crit`, `alg` one of
 *   {@link assertionSigningAlgs} (never `none` or HS*: a client has no shared key here), and
 *   `typ`, when present, `JWT` or `client-authentication+jwt` (draft-ietf-oauth-rfc7523bis):
 *   a JWT typed as another kind (`dpop+jwt`, `at+jwt`, a request object's
 *   `oauth-authz-req+jwt`...) is not a client assertion, even signed by a client key with the
 *   claims of one, which is what explicit typing is for (RFC 8725 3.11);
 * - the claims: `iss` and `sub` the client_id (and the request's client_id, when it names one);
 *   `aud` the issuer, the token endpoint's URL or the URL of the endpoint called (a string, or an
 *   array of only those: RFC 9126 2 asks the PAR endpoint to take its own URL, and clients of
 *   node-oidc-provider send the URL they post to, introspection and revocation too). Stricter than
 *   RFC 7523 3, which takes any audience that contains this server: an array that also names
 *   another audience is refused, as draft-ietf-oauth-rfc7523bis (work in progress) asks after the
 *   audience-injection attacks, where an assertion made for one server was replayed at another;
 *   `exp` present, not past and at most {@link maxAssertionLifetimeSeconds} ahead; `iat` and
 *   `nbf`, when present, not in the future; `jti` present, 1..256 characters (RFC 7523 3 makes it
 *   optional; OpenID Connect Core 9 requires it, and without it no replay could be refused);
 *   {@link clockSkewSeconds} of skew each way;
 * - the client: active, `web`, registered for `private_key_jwt`;
 * - the signature, by a live key of the client (its `expires_at` by this service's clock) whose
 *   algorithm is `alg` (an EdDSA key also under the name `Ed25519`, RFC 9864) and, when the header
 *   names a `kid`, of that `kid`;
 * - last, `jti` single use: recorded in Postgres (./repository/used_jtis.ts) until `exp` plus the
 *   skew, so a replay fails in every replica.
 *
 * A key that verified is reported to the registry (its `last_used_at`) at most once a minute per
 * key, in the background. Imported keys (./jws.ts, node:crypto) are kept beside the key lists the
 * registry cache holds (a WeakMap, so they go with them).
 *
 * @module
 */

import type { KeyObject } from "node:crypto";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import {
  type Client,
  ClientStatus,
  ClientType,
  TokenEndpointAuthMethod,
} from "../../gen/registry/oauth/v1/client_pb.ts";
import type { ClientKey } from "../../gen/registry/oauth/v1/client_key_pb.ts";
import { assertionSigningAlgs } from "../../lib/platform/mod.ts";
import { importPublicJwk, type KeyFamily, parseJws, typIs, verifyJws } from "./jws.ts";
import { oauthError } from "./oauth_errors.ts";
import type { Registry } from "./registry.ts";
import type { UsedJtis } from "./repository/used_jtis.ts";

/** RFC 7523 2.2's `client_assertion_type`. */
export const jwtBearerAssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/** How far ahead an assertion's `exp` may be. */
export const maxAssertionLifetimeSeconds = 300;

/** The clock skew allowed each way. */
export const clockSkewSeconds = 30;

/** How often, at most, a key's use is reported to the registry. */
export const reportKeyUsesEveryMs = 60_000;

/** Key uses remembered for throttling, at most (the oldest forgotten first). */
const maxRemembered = 10_000;

/** The one description of every failure. */
const failed = "Client authentication failed";

/** Options of {@link createAssertionVerifier}. */
export interface AssertionVerifierOptions {
  /** The registry (cached or not). */
  registry: Pick<Registry, "lookupClientKeys" | "recordKeyUse">;
  /** Where a `jti` is recorded once. */
  usedJtis: Pick<UsedJtis, "use">;
  /** The values `aud` may take: the issuer and the token endpoint's URL. */
  audiences: readonly string[];
  /** The clock (ms since the epoch). */
  now: () => number;
  /** Where a failed report of a key's use goes (it never fails the caller). */
  onReportError?: (error: unknown) => void;
}

/**
 * Checks a client assertion; returns the client it authenticates. `clientId` is the request's own
 * client_id, or "" when it has none (the assertion's `sub` names the client); `endpoint` the URL
 * of the endpoint called, which `aud` may name too.
 */
export type AssertionVerifier = (
  assertion: string,
  clientId: string,
  endpoint?: string,
) => Promise<Client>;

/** What each key algorithm of the registry takes: the `alg` names, and the JWK members. */
const families: Record<string, { names: readonly string[]; members: readonly string[] }> = {
  EdDSA: { names: ["EdDSA", "Ed25519"], members: ["kty", "crv", "x"] },
  ES256: { names: ["ES256"], members: ["kty", "crv", "x", "y"] },
  RS256: { names: ["RS256"], members: ["kty", "n", "e"] },
};

/**
 * The `typ` an assertion may have: `JWT`, or `client-authentication+jwt`
 * (draft-ietf-oauth-rfc7523bis). Absent is fine too: the draft advises servers not to refuse
 * untyped assertions.
 */
const assertionTypes = ["jwt", "client-authentication+jwt"];

/** The longest assertion taken (one signed with an 8192-bit RSA key is about 1,700 characters). */
const maxAssertionLength = 8192;

const isNumber = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);

/** Creates the verifier. */
export function createAssertionVerifier(options: AssertionVerifierOptions): AssertionVerifier {
  const { registry, usedJtis, audiences, now } = options;
  const imported = new WeakMap<ClientKey, KeyObject | null>();
  const reported = new Map<string, number>();

  /** A registry key, imported once (null when it cannot be). */
  function keyObject(key: ClientKey): KeyObject | null {
    let held = imported.get(key);
    if (held === undefined) {
      const family = families[key.algorithm];
      const jwk = key.jwk;
      held = null;
      if (family && jwk) {
        const members: Record<string, unknown> = {};
        for (const name of family.members) members[name] = jwk[name];
        held = importPublicJwk(members);
      }
      imported.set(key, held);
    }
    return held;
  }

  function reportUse(clientId: string, keyId: string, at: number): void {
    const last = reported.get(keyId);
    if (last !== undefined && at - last < reportKeyUsesEveryMs) return;
    reported.delete(keyId);
    if (reported.size >= maxRemembered) reported.delete(reported.keys().next().value!);
    reported.set(keyId, at);
    registry.recordKeyUse(clientId, keyId).catch((error) => options.onReportError?.(error));
  }

  return async (assertion, clientId, endpoint) => {
    const fail = () => oauthError("invalid_client", failed);
    const jws = parseJws(assertion, maxAssertionLength);
    if (!jws || "crit" in jws.header) throw fail();
    const { header, claims } = jws;
    if (header.typ !== undefined && !typIs(header.typ, assertionTypes)) throw fail();
    const alg = header.alg;
    if (typeof alg !== "string" || !assertionSigningAlgs.includes(alg)) {
      throw fail();
    }
    const kid = header.kid;
    if (kid !== undefined && typeof kid !== "string") throw fail();

    const at = now();
    const nowS = at / 1000;
    const { iss, sub, aud, exp, nbf, iat, jti } = claims;
    if (typeof sub !== "string" || sub === "" || iss !== sub) throw fail();
    if (clientId !== "" && clientId !== sub) throw fail();
    const audience = (a: unknown) => audiences.includes(a as string) || a === endpoint;
    const audOk = typeof aud === "string"
      ? audience(aud)
      : Array.isArray(aud) && aud.length > 0 && aud.every(audience);
    if (!audOk) throw fail();
    if (!isNumber(exp) || exp <= nowS - clockSkewSeconds) throw fail();
    if (exp > nowS + maxAssertionLifetimeSeconds + clockSkewSeconds) throw fail();
    if (nbf !== undefined && (!isNumber(nbf) || nbf > nowS + clockSkewSeconds)) throw fail();
    if (iat !== undefined && (!isNumber(iat) || iat > nowS + clockSkewSeconds)) throw fail();
    if (typeof jti !== "string" || jti.length === 0 || jti.length > 256) throw fail();

    const found = await registry.lookupClientKeys(sub);
    const client = found?.client;
    if (
      !found || !client || client.status !== ClientStatus.ACTIVE ||
      client.type !== ClientType.WEB ||
      client.tokenEndpointAuthMethod !== TokenEndpointAuthMethod.PRIVATE_KEY_JWT
    ) throw fail();

    let verified: ClientKey | undefined;
    for (const key of found.keys) {
      if (kid !== undefined && key.kid !== kid) continue;
      if (!families[key.algorithm]?.names.includes(alg)) continue;
      if (key.expiresAt !== undefined && timestampMs(key.expiresAt) <= at) continue;
      const object = keyObject(key);
      if (object && verifyJws(key.algorithm as KeyFamily, object, jws)) {
        verified = key;
        break;
      }
    }
    if (!verified) throw fail();

    const keptUntil = new Date((exp + clockSkewSeconds) * 1000);
    if (!await usedJtis.use(`assertion:${client.id}`, jti, keptUntil, new Date(at))) throw fail();
    reportUse(client.id, verified.id, at);
    return client;
  };
}
