/**
 * DPoP (RFC 9449) at the token endpoint: checks a proof (RFC 9449 4.3) and names the key it was
 * made with (its RFC 7638 thumbprint, `jkt`), to which the grants bind what they issue (the access
 * token's `cnf.jkt`, a public client's refresh token).
 *
 * A proof is accepted when it is exactly one compact JWS (a comma, of DPoP headers joined, refuses
 * it) whose header and claims are UTF-8 JSON objects (./jws.ts), whose header has `typ` `dpop+jwt`
 * (in any case, `application/` before it or not: RFC 7515 4.1.9), `alg` `EdDSA` (`Ed25519`, RFC
 * 9864's name for the same) or `ES256` (never `none`, HS* or RS*), no `crit`, and a public `jwk` of
 * that algorithm's key type (any private member refuses it) that is a valid key, checked as the
 * registry checks client keys (lib/platform's public_keys.ts: members in canonical unpadded
 * base64url, so that one key has one `jkt`; a P-256 point on the curve; an Ed25519 point canonical
 * and not of small order, under which anyone could make a signature that verifies), that the `jwk`
 * verifies, and whose claims have a `jti` of 1..256 characters, the request's method in `htm`, the
 * request's URL in `htu` (query and fragment left out, both sides normalised as RFC 3986 6.2.2 and
 * 6.2.3 say: scheme and host case, default port, empty path, percent-encoding), and an `iat` at
 * most {@link proofMaxAgeSeconds} old and at most {@link proofFutureSeconds} ahead of this
 * service's clock. Those checks are stateless ({@link Dpop.check}); its `jti` is then used once,
 * when the caller spends it ({@link CheckedProof.spend}: token.used_jtis under `dpop:<jkt>`, until
 * the proof could no longer be accepted): a replay fails in every replica (RFC 9449 11.1). Every
 * failure is `invalid_dpop_proof`.
 *
 * Checking and spending are two steps because anyone can make a proof that passes the checks (a
 * key of one's own signs it): a request that has shown nothing else, a public client's with a
 * made-up refresh token, must leave no row behind. The token endpoint spends a proof at once for a
 * confidential client that authenticated, and for a public client's grant once the grant has found
 * its code or token good (./service.ts, ./grants/context.ts).
 *
 * Nonces (RFC 9449 8), when the server requires them (setting DPOP_NONCE_REQUIRED): stateless, so
 * that every replica makes and accepts the same ones without talking to another. A nonce is the
 * base64url of a window's number (8 bytes, big-endian; a window is {@link nonceWindowSeconds}
 * long) and the HMAC-SHA256 of it, under a key derived from TOKEN_KEY_ENCRYPTION_KEY; the current
 * window's and the previous one's are accepted, so a nonce lives between one and two windows. A
 * proof without one of them is `use_dpop_nonce`, with the current nonce (ErrorInfo metadata
 * `dpop_nonce`), which every successful token response carries as well.
 *
 * Speed: a proof costs one signature check (./jws.ts: 37 us for Ed25519 here, about 560 us for
 * P-256) and one row of a Postgres insert (../repository/used_jtis.ts batches them); the check of
 * a key seen for the first time adds 110 to 130 us for Ed25519, 6 us for P-256. The checked and imported
 * public keys are kept (a client signs many proofs with one key: at most 512 KiB of them, each
 * counted as 1 KiB and twice its JWK, in the memory budget), and the nonce of a window is computed
 * once.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { createHash, type KeyObject } from "node:crypto";
import type { ConnectError } from "@connectrpc/connect";
import type { DpopProof } from "../../gen/registry/token/v1/token_service_pb.ts";
import { importPublicJwk, parseJws, typIs, verifyJws } from "./jws.ts";
import { deriveFromSecret } from "./keys.ts";
import {
  createBoundedCache,
  fromBase64url,
  type MemoryBudget,
  onP256,
  validEd25519,
} from "../../lib/platform/mod.ts";
import { oauthError } from "./oauth_errors.ts";
import type { UsedJtis } from "./repository/used_jtis.ts";

/** How old a proof's `iat` may be, in seconds. */
export const proofMaxAgeSeconds = 300;
/** How far ahead of this service's clock a proof's `iat` may be (the client's clock), seconds. */
export const proofFutureSeconds = 30;
/** How long a nonce window lasts, in seconds; a nonce is accepted in its window and the next. */
export const nonceWindowSeconds = 300;
/** The longest proof taken (a proof with an EC key is about 600 characters). */
export const maxProofLength = 4096;

/**
 * The key type each algorithm needs: its JWK's members (each 32 bytes), and whether their bytes
 * are a valid public key.
 */
interface ProofAlgorithm {
  kty: string;
  crv: string;
  members: string[];
  valid: (members: Uint8Array[]) => boolean;
}
const ed25519: ProofAlgorithm = {
  kty: "OKP",
  crv: "Ed25519",
  members: ["x"],
  valid: ([x]) => validEd25519(x!),
};
const algorithms: Record<string, ProofAlgorithm> = {
  EdDSA: ed25519,
  Ed25519: ed25519,
  ES256: { kty: "EC", crv: "P-256", members: ["x", "y"], valid: ([x, y]) => onP256(x!, y!) },
};

/**
 * The algorithms a proof may use, which the gateway's metadata names in
 * dpop_signing_alg_values_supported (tests/dpop_test.ts checks that they agree).
 */
export const dpopAlgorithms: readonly string[] = Object.keys(algorithms);

/** JWK members of a private (or symmetric) key (RFC 7518 6.2.2, 6.3.2, 6.4; RFC 8037 2). */
const privateMembers = ["d", "p", "q", "dp", "dq", "qi", "oth", "k"];

/** A proof that passed every check but the one use of its `jti`. */
export interface CheckedProof {
  /** The thumbprint (RFC 7638) of its key. */
  jkt: string;
  /**
   * Records its `jti` as used; throws `invalid_dpop_proof` when it was (a replay). Called again,
   * it answers as the first time and records nothing more.
   */
  spend(): Promise<void>;
}

/** What checks proofs. */
export interface Dpop {
  /**
   * Checks a proof of the request it came with, writing nothing: its key's thumbprint and the step
   * that spends its `jti`, which the proof is not accepted without. Throws `invalid_dpop_proof`,
   * or `use_dpop_nonce` when nonces are required and it has no valid one.
   */
  check(proof: DpopProof): Promise<CheckedProof>;
  /** The nonce a client should put in its next proof; empty when nonces are not required. */
  nonce(): Promise<string>;
  /** An error of DPoP: with the current nonce in its metadata when nonces are required. */
  error(code: "invalid_dpop_proof" | "use_dpop_nonce", description: string): Promise<ConnectError>;
}

/** Options of {@link createDpop}. */
export interface DpopOptions {
  /** Where a proof's `jti` is recorded. */
  usedJtis: Pick<UsedJtis, "use">;
  /** The nonces' HMAC key ({@link deriveDpopNonceKey}); unset: nonces are not required. */
  nonceKey?: Promise<CryptoKey> | undefined;
  /**
   * Keys of nonces made before the key changed (of TOKEN_KEY_ENCRYPTION_PREVIOUS_KEYS), which
   * are still taken within their windows; no nonce is made with them.
   */
  previousNonceKeys?: readonly Promise<CryptoKey>[] | undefined;
  /** The clock (ms since the epoch). */
  now: () => number;
  /** The process's memory budget, which the imported keys are counted in. */
  budget?: MemoryBudget | undefined;
}

/** The HMAC key of the nonces, derived from TOKEN_KEY_ENCRYPTION_KEY. */
export function deriveDpopNonceKey(secret: string): Promise<CryptoKey> {
  return deriveFromSecret(secret, {
    info: "registry token dpop nonce v1",
    key: { name: "HMAC", hash: "SHA-256", length: 256 },
    usages: ["sign"],
  });
}

/** How many bytes of imported public keys to keep. */
const keyCacheBytes = 512 * 1024;

/** Creates the checker. */
export function createDpop(options: DpopOptions): Dpop {
  const { usedJtis, nonceKey, now } = options;
  const keys = createBoundedCache({ maxBytes: keyCacheBytes, budget: options.budget })
    .region<KeyObject | null>();
  /** The nonces of the last windows asked for, by window number. */
  const nonces = new Map<number, Promise<string>>();

  function nonceOf(window: number): Promise<string> {
    let nonce = nonces.get(window);
    if (!nonce) {
      nonce = makeNonce(nonceKey!, window);
      nonces.set(window, nonce);
      // The current and the previous window's are all that is asked for.
      for (const w of nonces.keys()) if (w < window - 1) nonces.delete(w);
      nonce.catch(() => nonces.delete(window));
    }
    return nonce;
  }
  const windowAt = (ms: number) => Math.floor(ms / (nonceWindowSeconds * 1000));

  async function currentNonce(): Promise<string> {
    return nonceKey ? await nonceOf(windowAt(now())) : "";
  }

  async function error(code: "invalid_dpop_proof" | "use_dpop_nonce", description: string) {
    const nonce = await currentNonce();
    return oauthError(code, description, nonce === "" ? {} : { dpop_nonce: nonce });
  }
  const invalid = (description: string) => error("invalid_dpop_proof", description);

  /**
   * The public key of a JWK of `alg`'s members (in its RFC 7638 form, `canonical`), checked and
   * imported once; null when it is not a valid key.
   */
  function keyOf(
    canonical: string,
    jwk: Record<string, string>,
    alg: ProofAlgorithm,
  ): KeyObject | null {
    let key = keys.get(canonical);
    if (key !== undefined) return key;
    const bytes = alg.members.map((m) => fromBase64url(jwk[m]!));
    const valid = bytes.every((b) => b?.length === 32) && alg.valid(bytes as Uint8Array[]);
    key = valid ? importPublicJwk(jwk) : null;
    keys.set(canonical, key, canonical.length * 2 + 1024);
    return key;
  }

  /** The endpoint's URL, normalised once: every proof of the token endpoint names the same. */
  let endpoint: { uri: string; normalized: string | undefined } | undefined;
  function endpointHtu(uri: string): string | undefined {
    if (endpoint?.uri !== uri) endpoint = { uri, normalized: normalizedHtu(uri) };
    return endpoint.normalized;
  }

  return {
    nonce: currentNonce,
    error,

    async check({ proof, httpMethod, httpUri }) {
      // RFC 9449 4.3: exactly one DPoP header; more are joined with ", " (never found in a JWS).
      if (proof.includes(",")) throw await invalid("Send one DPoP header, not more");
      const jws = parseJws(proof, maxProofLength);
      if (!jws) throw await invalid("The DPoP proof must be one compact JWS of a JWT");
      const { header, claims } = jws;
      if (!typIs(header.typ, ["dpop+jwt"])) {
        throw await invalid("The DPoP proof's typ must be dpop+jwt");
      }
      const alg = typeof header.alg === "string" && Object.hasOwn(algorithms, header.alg)
        ? algorithms[header.alg]!
        : undefined;
      if (!alg) throw await invalid("The DPoP proof's alg must be EdDSA, Ed25519 or ES256");
      if (header.crit !== undefined) throw await invalid("The DPoP proof's crit is not supported");
      const jwk = header.jwk;
      if (typeof jwk !== "object" || jwk === null || Array.isArray(jwk)) {
        throw await invalid("The DPoP proof's header must have a jwk");
      }
      const key = jwk as Record<string, unknown>;
      if (privateMembers.some((m) => Object.hasOwn(key, m))) {
        throw await invalid("The DPoP proof's jwk must be a public key");
      }
      if (
        key.kty !== alg.kty || key.crv !== alg.crv ||
        !alg.members.every((m) => typeof key[m] === "string" && /^[A-Za-z0-9_-]{43}$/.test(key[m]))
      ) {
        throw await invalid("The DPoP proof's jwk is not a key of its alg");
      }
      // RFC 7638 3.2: the required members, in lexicographic order, no spaces.
      const publicJwk: Record<string, string> = { crv: alg.crv, kty: alg.kty };
      for (const m of alg.members) publicJwk[m] = key[m] as string;
      const canonical = JSON.stringify(publicJwk);
      const publicKey = keyOf(canonical, publicJwk, alg);
      if (publicKey === null) throw await invalid("The DPoP proof's jwk is not a valid public key");
      if (!verifyJws(alg.kty === "OKP" ? "EdDSA" : "ES256", publicKey, jws)) {
        throw await invalid("The DPoP proof's signature does not verify with its jwk");
      }
      const { jti, htm, htu, iat } = claims;
      if (typeof jti !== "string" || jti.length === 0 || jti.length > 256) {
        throw await invalid("The DPoP proof's jti must be a string of 1 to 256 characters");
      }
      if (htm !== httpMethod) {
        throw await invalid("The DPoP proof's htm is not the request's method");
      }
      const expected = endpointHtu(httpUri);
      if (typeof htu !== "string" || expected === undefined || normalizedHtu(htu) !== expected) {
        throw await invalid("The DPoP proof's htu is not the URL of this endpoint");
      }
      const at = now();
      if (typeof iat !== "number" || !Number.isFinite(iat)) {
        throw await invalid("The DPoP proof's iat must be a number");
      }
      if (iat * 1000 < at - proofMaxAgeSeconds * 1000) {
        throw await invalid("The DPoP proof is too old (iat)");
      }
      if (iat * 1000 > at + proofFutureSeconds * 1000) {
        throw await invalid("The DPoP proof's iat is in the future");
      }
      if (nonceKey) {
        const window = windowAt(at);
        const nonce = claims.nonce;
        let fresh = typeof nonce === "string" &&
          (nonce === await nonceOf(window) || nonce === await nonceOf(window - 1));
        for (const key of options.previousNonceKeys ?? []) {
          if (fresh || typeof nonce !== "string") break;
          fresh = nonce === await makeNonce(key, window) ||
            nonce === await makeNonce(key, window - 1);
        }
        if (!fresh) {
          throw await error(
            "use_dpop_nonce",
            nonce === undefined
              ? "A DPoP nonce is required: use the one in the DPoP-Nonce header"
              : "The DPoP nonce is not valid: use the one in the DPoP-Nonce header",
          );
        }
      }
      const jkt = createHash("sha256").update(canonical).digest("base64url");
      // Kept until the proof could no longer be accepted (its iat is at most that old), and a second.
      const until = new Date(Math.ceil(iat + proofMaxAgeSeconds + 1) * 1000);
      let spent: Promise<void> | undefined;
      const spend = async () => {
        if (!(await usedJtis.use(`dpop:${jkt}`, jti, until, new Date(at)))) {
          throw await invalid("The DPoP proof was already used (jti)");
        }
      };
      return { jkt, spend: () => spent ??= spend() };
    },
  };
}

/** The RFC 3986 2.3 unreserved characters. */
const unreserved = /^[A-Za-z0-9\-._~]$/;

/** The characters of an RFC 3986 URI (unreserved, reserved, `%`). */
const uriCharacters = /^[A-Za-z0-9._~:/?#[\]@!$&'()*+,;=%-]*$/;
/** The scheme and authority of an absolute URI, as written. */
const schemeAndAuthority = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/([^/?#]*)/;

/**
 * An `htu` (or the endpoint's URL) as compared (RFC 9449 4.3 item 9): an absolute http(s) URI
 * without query and fragment, normalised by RFC 3986 6.2.2 (scheme and host in lower case,
 * percent-encodings in upper case and decoded when they stand for an unreserved character, dot
 * segments removed) and 6.2.3 (no default port, `/` for an empty path); undefined when it is not
 * one. The URL parser does that work, and reads more than RFC 3986 writes (a backslash, a tab, a
 * host written as one number, `2130706433` for 127.0.0.1, a port with leading zeros): only the
 * characters of a URI are taken, and an authority that the parser changed beyond its case and
 * default port is refused.
 */
export function normalizedHtu(uri: string): string | undefined {
  if (!uriCharacters.test(uri)) return undefined;
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    return undefined;
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") return undefined;
  if (url.username !== "" || url.password !== "") return undefined;
  const written = schemeAndAuthority.exec(uri)?.[2]?.toLowerCase();
  const defaultPort = url.protocol === "https:" ? "443" : "80";
  if (
    written !== url.host && written !== `${url.host}:` && written !== `${url.host}:${defaultPort}`
  ) return undefined;
  // The WHATWG parser has lowered the scheme and host, dropped the default port and the dot
  // segments, and made an empty path `/`; percent-encoding is left as written.
  const path = url.pathname.replace(/%([0-9A-Fa-f]{2})/g, (_, hex: string) => {
    const char = String.fromCharCode(parseInt(hex, 16));
    return unreserved.test(char) ? char : `%${hex.toUpperCase()}`;
  });
  return `${url.protocol}//${url.host}${path}`;
}

/** A nonce of a window: base64url(window (8 bytes, big-endian) || HMAC-SHA256(window)). */
async function makeNonce(key: Promise<CryptoKey>, window: number): Promise<string> {
  const number = new Uint8Array(8);
  new DataView(number.buffer).setBigUint64(0, BigInt(window));
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", await key, number));
  const bytes = new Uint8Array(8 + mac.length);
  bytes.set(number);
  bytes.set(mac, 8);
  return Buffer.from(bytes).toString("base64url");
}
