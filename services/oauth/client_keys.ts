/**
 * Client keys (`private_key_jwt`, RFC 7523 2.2): the checks of an uploaded public JWK, the key
 * pairs the registry generates, and RFC 7638 thumbprints. No database, no clock: the handlers
 * (./service.ts) call these and store what they return.
 *
 * An uploaded JWK (RFC 7517) is accepted when it is one of:
 *
 * - `kty` `OKP`, `crv` `Ed25519`, `x` 32 bytes: algorithm `EdDSA` (`alg` may also say `Ed25519`,
 *   RFC 9864; the key's algorithm stays `EdDSA`);
 * - `kty` `EC`, `crv` `P-256`, `x` and `y` 32 bytes each: `ES256`;
 * - `kty` `RSA`, `n` of 2048 to 8192 bits, `e` an odd number from 3 to 2^32 - 1: `RS256`.
 *
 * Key members are unpadded base64url in their canonical form (the thumbprint is computed over the
 * text, so one key must have one spelling). The point of an `OKP` or `EC` key must be on its curve
 * (and an Ed25519 point must not be of small order): WebCrypto's import is run too, but Deno's
 * accepts any 32 bytes for Ed25519 and defers the check of an EC point to the first use.
 *
 * Optional members: `kid` (1 to 128 printable ASCII characters; the thumbprint when absent),
 * `alg` (the key type's algorithm), `use` (`sig`), `key_ops` (`["verify"]`: RFC 7517 4.3 forbids
 * a repeated operation, and an empty list is a key meant for no operation), `ext` (a boolean,
 * as WebCrypto exports it). A JWK with a private member (`d`, `p`, `q`, `dp`, `dq`, `qi`, `oth`,
 * `k`) is refused whatever else it holds, with a message that names the members and never their
 * values. Other members (`x5c`, `x5t`, application members...) are dropped, as RFC 7517 4 asks of
 * members an implementation does not understand: the registry keeps no certificate and checks
 * none. What is stored is only `kty`, `crv`, `x`, `y` or `n`, `e`, with `kid`, `alg` and `use`.
 *
 * @module
 */

import {
  base64url,
  bigEndian,
  type FieldViolation,
  fromBase64url,
  invalidArgument,
  onP256,
  validEd25519,
} from "../../lib/platform/mod.ts";

// The checks of base64url and of points are lib/platform's (./public_keys.ts there), which the
// token service runs on the keys of DPoP proofs too.

/** The JWS algorithms of client keys. */
export type KeyAlgorithm = "EdDSA" | "ES256" | "RS256";

/** The algorithms of the key pairs the registry generates. */
export const generatedAlgorithms = ["EdDSA", "ES256"] as const;

/** An algorithm the registry generates key pairs of. */
export type GeneratedAlgorithm = (typeof generatedAlgorithms)[number];

/** The members of a JWK that hold private key material (RFC 7518 6.2.2, 6.3.2, 6.4.1; RFC 8037). */
export const privateMembers = ["d", "p", "q", "dp", "dq", "qi", "oth", "k"] as const;

/** A stored public key: its public members, with `kid`, `alg` and `use`, in this order. */
export interface PublicJwk {
  kty: "OKP" | "EC" | "RSA";
  crv?: string;
  x?: string;
  y?: string;
  n?: string;
  e?: string;
  kid: string;
  alg: KeyAlgorithm;
  use: "sig";
}

/** A checked (or generated) key, ready to store. */
export interface CheckedKey {
  /** The JWK's `kid`, or its thumbprint. */
  kid: string;
  algorithm: KeyAlgorithm;
  /** The public JWK to store and show. */
  jwk: PublicJwk;
}

/** A generated key: the checked public part, and the whole pair, to return once. */
export interface GeneratedKey extends CheckedKey {
  /** The private JWK (public members, `d`, `kid`, `alg`, `use`): never stored, never logged. */
  privateJwk: Record<string, string>;
}

/** Smallest and largest RSA modulus accepted, in bits. */
export const minRsaBits = 2048;
export const maxRsaBits = 8192;

/** Longest `kid`. */
export const maxKidLength = 128;

function bitLength(bytes: Uint8Array): number {
  const first = bytes[0] ?? 0;
  return first === 0 ? 0 : (bytes.length - 1) * 8 + (32 - Math.clz32(first));
}

// ---------------------------------------------------------------------------------------------
// Thumbprints.

/**
 * The RFC 7638 JWK thumbprint (SHA-256, base64url) of a public key: its required members in
 * lexicographic order, as JSON without whitespace.
 */
export async function jwkThumbprint(
  jwk: { kty: string; crv?: string; x?: string; y?: string; n?: string; e?: string },
): Promise<string> {
  let members: Record<string, string | undefined>;
  switch (jwk.kty) {
    case "OKP":
      members = { crv: jwk.crv, kty: jwk.kty, x: jwk.x };
      break;
    case "EC":
      members = { crv: jwk.crv, kty: jwk.kty, x: jwk.x, y: jwk.y };
      break;
    case "RSA":
      members = { e: jwk.e, kty: jwk.kty, n: jwk.n };
      break;
    default:
      throw new Error(`Cannot compute the thumbprint of a ${jwk.kty} key`);
  }
  for (const [name, value] of Object.entries(members)) {
    if (typeof value !== "string") throw new Error(`Cannot compute a thumbprint without ${name}`);
  }
  const json = JSON.stringify(members);
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(json));
  return base64url(new Uint8Array(digest));
}

// ---------------------------------------------------------------------------------------------
// Uploaded JWKs.

/** The members each key type has, and what they are checked against. */
const keyTypes = {
  OKP: { algorithm: "EdDSA", members: ["crv", "x"], names: ["EdDSA", "Ed25519"] },
  EC: { algorithm: "ES256", members: ["crv", "x", "y"], names: ["ES256"] },
  RSA: { algorithm: "RS256", members: ["n", "e"], names: ["RS256"] },
} as const satisfies Record<
  string,
  { algorithm: KeyAlgorithm; members: readonly string[]; names: readonly string[] }
>;

/** Every key member of any type (those of another type are refused). */
const keyMembers = new Set(["crv", "x", "y", "n", "e"]);

const printableAscii = /^[\x20-\x7e]+$/;

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** The names of the private members a JWK holds (empty for a public key). */
export function privateMembersOf(jwk: Record<string, unknown>): string[] {
  return privateMembers.filter((name) => Object.hasOwn(jwk, name));
}

/** INVALID_ARGUMENT for a JWK with private members; names the members, never their values. */
function privateKeyRefused(field: string, members: readonly string[]): never {
  const description = `holds private members (${members.join(", ")}): upload only the public ` +
    "key (a JWK without them); the private key never leaves its owner";
  throw invalidArgument(
    [{ field, description }],
    `Invalid ${field}: the JWK holds private members (${members.join(", ")}); only the public ` +
      "key is uploaded, never the private one",
  );
}

/**
 * Checks an uploaded JWK (a plain object, as a google.protobuf.Struct field holds it) and returns
 * what to store: its kid (its thumbprint when it has none), its algorithm, and its public JWK.
 * Throws INVALID_ARGUMENT with one violation per bad member (`<field>.<member>`), or a single one
 * of `field` when the JWK holds a private member. See the module's documentation for the rules.
 */
export async function checkUploadedJwk(value: unknown, field = "jwk"): Promise<CheckedKey> {
  if (!isObject(value)) throw invalidArgument([{ field, description: "must be a JSON object" }]);
  const found = privateMembersOf(value);
  if (found.length > 0) privateKeyRefused(field, found);

  const violations: FieldViolation[] = [];
  const bad = (member: string, description: string) =>
    violations.push({ field: `${field}.${member}`, description });

  const kty = value.kty;
  const type = typeof kty === "string" && Object.hasOwn(keyTypes, kty)
    ? keyTypes[kty as keyof typeof keyTypes]
    : undefined;
  if (kty === undefined) bad("kty", 'is required: "OKP" (Ed25519), "EC" (P-256) or "RSA"');
  else if (type === undefined) {
    bad("kty", 'must be "OKP" (Ed25519), "EC" (P-256) or "RSA"');
  }

  // Optional members.
  const kid = value.kid;
  if (kid !== undefined) {
    if (typeof kid !== "string" || kid.length === 0 || kid.length > maxKidLength) {
      bad("kid", `must be a string of 1 to ${maxKidLength} characters`);
    } else if (!printableAscii.test(kid)) {
      bad("kid", "must hold only printable ASCII characters");
    }
  }
  const alg = value.alg;
  if (alg !== undefined && type !== undefined) {
    if (typeof alg !== "string" || !(type.names as readonly string[]).includes(alg)) {
      bad("alg", `must be ${type.names.map((n) => `"${n}"`).join(" or ")} for a ${kty} key`);
    }
  } else if (alg !== undefined && typeof alg !== "string") bad("alg", "must be a string");
  if (value.use !== undefined && value.use !== "sig") {
    bad("use", 'must be "sig": a client key only signs');
  }
  // RFC 7517 4.3: the operations the key is meant for, each once; an empty list is meant for none.
  const ops = value.key_ops;
  if (
    ops !== undefined && (!Array.isArray(ops) || ops.length !== 1 || ops[0] !== "verify")
  ) {
    bad(
      "key_ops",
      'must be ["verify"]: the registry keeps a key that verifies, each operation once',
    );
  }
  if (value.ext !== undefined && typeof value.ext !== "boolean") bad("ext", "must be a boolean");

  if (type === undefined) throw invalidArgument(violations);

  // Members of another key type.
  for (const name of Object.keys(value)) {
    if (keyMembers.has(name) && !(type.members as readonly string[]).includes(name)) {
      bad(name, `is not a member of a ${kty} key`);
    }
  }

  /** The bytes of a required base64url member, or undefined after reporting it. */
  const bytesOf = (name: string): Uint8Array | undefined => {
    const text = value[name];
    if (text === undefined) {
      bad(name, "is required");
      return undefined;
    }
    const bytes = typeof text === "string" ? fromBase64url(text) : undefined;
    if (bytes === undefined) bad(name, "must be unpadded base64url");
    return bytes;
  };
  const curve = (expected: string, others: string) => {
    if (value.crv === undefined) bad("crv", `is required: "${expected}"`);
    else if (value.crv !== expected) bad("crv", `must be "${expected}" (${others} not accepted)`);
  };

  let jwk: PublicJwk;
  let importAlgorithm: EcKeyImportParams | RsaHashedImportParams | Algorithm;
  switch (kty as keyof typeof keyTypes) {
    case "OKP": {
      curve("Ed25519", "X25519, Ed448 and X448 are");
      const x = bytesOf("x");
      if (x !== undefined) {
        if (x.length !== 32) bad("x", "must be 32 bytes (an Ed25519 public key)");
        else if (!validEd25519(x)) bad("x", "is not a valid Ed25519 public key");
      }
      jwk = { kty: "OKP", crv: "Ed25519", x: value.x as string, kid: "", alg: "EdDSA", use: "sig" };
      importAlgorithm = { name: "Ed25519" };
      break;
    }
    case "EC": {
      curve("P-256", "P-384, P-521 and secp256k1 are");
      const x = bytesOf("x");
      const y = bytesOf("y");
      if (x !== undefined && x.length !== 32) bad("x", "must be 32 bytes (a P-256 coordinate)");
      if (y !== undefined && y.length !== 32) bad("y", "must be 32 bytes (a P-256 coordinate)");
      if (x?.length === 32 && y?.length === 32 && !onP256(x, y)) {
        violations.push({ field, description: "is not a point of the curve P-256" });
      }
      jwk = {
        kty: "EC",
        crv: "P-256",
        x: value.x as string,
        y: value.y as string,
        kid: "",
        alg: "ES256",
        use: "sig",
      };
      importAlgorithm = { name: "ECDSA", namedCurve: "P-256" };
      break;
    }
    case "RSA": {
      const n = bytesOf("n");
      const e = bytesOf("e");
      if (n !== undefined) {
        const bits = bitLength(n);
        if (n[0] === 0) bad("n", "must have no leading zero bytes");
        else if (bits < minRsaBits || bits > maxRsaBits) {
          bad("n", `must be a modulus of ${minRsaBits} to ${maxRsaBits} bits, not ${bits}`);
        } else if ((n[n.length - 1]! & 1) === 0) bad("n", "must be odd");
      }
      if (e !== undefined) {
        const exponent = e.length === 0 || e.length > 4 || e[0] === 0 ? 0n : bigEndian(e);
        if (exponent < 3n || (exponent & 1n) === 0n) {
          bad("e", "must be an odd exponent from 3 to 2^32 - 1, without leading zero bytes");
        }
      }
      jwk = {
        kty: "RSA",
        n: value.n as string,
        e: value.e as string,
        kid: "",
        alg: "RS256",
        use: "sig",
      };
      importAlgorithm = { name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" };
      break;
    }
  }
  if (violations.length > 0) throw invalidArgument(violations);

  const { kid: _kid, alg: _alg, use: _use, ...material } = jwk;
  try {
    await crypto.subtle.importKey("jwk", material, importAlgorithm, true, ["verify"]);
  } catch {
    throw invalidArgument([{ field, description: `is not a valid ${kty} public key` }]);
  }
  jwk.kid = typeof kid === "string" ? kid : await jwkThumbprint(jwk);
  return { kid: jwk.kid, algorithm: type.algorithm, jwk };
}

// ---------------------------------------------------------------------------------------------
// Generated key pairs.

/**
 * Generates a key pair of the algorithm (`EdDSA` or `ES256`; INVALID_ARGUMENT at `field`
 * otherwise). The private JWK is returned, never kept: the caller returns it once and drops it.
 */
export async function generateClientKey(
  algorithm: string,
  field = "generate",
): Promise<GeneratedKey> {
  let params: EcKeyGenParams | Algorithm;
  if (algorithm === "EdDSA") params = { name: "Ed25519" };
  else if (algorithm === "ES256") params = { name: "ECDSA", namedCurve: "P-256" };
  else {
    throw invalidArgument([{
      field,
      description: `must be ${generatedAlgorithms.map((a) => `"${a}"`).join(" or ")}`,
    }]);
  }
  const pair = await crypto.subtle.generateKey(params, true, ["sign", "verify"]) as CryptoKeyPair;
  const exported = await crypto.subtle.exportKey("jwk", pair.privateKey);
  const jwk: PublicJwk = algorithm === "EdDSA"
    ? { kty: "OKP", crv: "Ed25519", x: exported.x!, kid: "", alg: "EdDSA", use: "sig" }
    : {
      kty: "EC",
      crv: "P-256",
      x: exported.x!,
      y: exported.y!,
      kid: "",
      alg: "ES256",
      use: "sig",
    };
  jwk.kid = await jwkThumbprint(jwk);
  const { kid, alg, use, ...material } = jwk;
  const privateJwk: Record<string, string> = {
    ...(material as Record<string, string>),
    d: exported.d!,
    kid,
    alg,
    use,
  };
  return { kid, algorithm: jwk.alg, jwk, privateJwk };
}

/**
 * A stored JWK in its members' order (`kty`, `crv`, `x`, `y`, `n`, `e`, `kid`, `alg`, `use`): a
 * jsonb column gives them back in its own order. Only those members are copied.
 */
export function orderedJwk(stored: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of ["kty", "crv", "x", "y", "n", "e", "kid", "alg", "use"]) {
    const value = stored[name];
    if (typeof value === "string") out[name] = value;
  }
  return out;
}
