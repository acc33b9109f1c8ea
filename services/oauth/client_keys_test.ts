/**
 * The checks of uploaded JWKs, generated key pairs and thumbprints (./client_keys.ts), without a
 * database.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Code, ConnectError } from "@connectrpc/connect";
import * as jose from "jose";
import {
  base64url,
  fieldViolations,
  fromBase64url,
  onP256,
  validEd25519,
} from "../../lib/platform/mod.ts";
import {
  checkUploadedJwk,
  generateClientKey,
  jwkThumbprint,
  orderedJwk,
  privateMembers,
} from "./client_keys.ts";

type Jwk = Record<string, unknown>;

/** RFC 8037 A.2's Ed25519 public key, and its thumbprint (A.3). */
const rfc8037 = { kty: "OKP", crv: "Ed25519", x: "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo" };
const rfc8037Thumbprint = "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k";

/** RFC 7638 3.1's RSA key (2048 bits), and its thumbprint. */
const rfc7638 = {
  kty: "RSA",
  n: "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPeb" +
    "WKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQ" +
    "MicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2Nc" +
    "Rwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw",
  e: "AQAB",
};
const rfc7638Thumbprint = "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs";

/** A public JWK of a new key pair, as WebCrypto exports it (with key_ops and ext). */
async function publicJwk(params: Algorithm | EcKeyGenParams | RsaHashedKeyGenParams) {
  const pair = await crypto.subtle.generateKey(params, true, ["sign", "verify"]) as CryptoKeyPair;
  return await crypto.subtle.exportKey("jwk", pair.publicKey) as Jwk;
}
const rsa = (modulusLength: number): RsaHashedKeyGenParams => ({
  name: "RSASSA-PKCS1-v1_5",
  modulusLength,
  publicExponent: new Uint8Array([1, 0, 1]),
  hash: "SHA-256",
});
const p256: EcKeyGenParams = { name: "ECDSA", namedCurve: "P-256" };

/** The INVALID_ARGUMENT a check throws. */
async function refusal(jwk: unknown): Promise<ConnectError> {
  try {
    await checkUploadedJwk(jwk);
  } catch (error) {
    assert.ok(error instanceof ConnectError, String(error));
    assert.equal(error.code, Code.InvalidArgument);
    return error;
  }
  throw new Error(`accepted: ${JSON.stringify(jwk)}`);
}
async function violations(jwk: unknown): Promise<[string, string][]> {
  return fieldViolations(await refusal(jwk)).map((v) => [v.field, v.description]);
}
const fields = async (jwk: unknown) => (await violations(jwk)).map(([field]) => field);

/** 32 bytes, little-endian y (Ed25519's encoding), as base64url. */
function edY(y: bigint, sign = false): string {
  const bytes = new Uint8Array(32);
  for (let i = 0; i < 32; i++) bytes[i] = Number((y >> BigInt(8 * i)) & 0xffn);
  if (sign) bytes[31]! |= 0x80;
  return base64url(bytes);
}

Deno.test("base64url: canonical and unpadded only", () => {
  assert.deepEqual(fromBase64url("AQAB"), new Uint8Array([1, 0, 1]));
  assert.deepEqual(fromBase64url("_-8"), new Uint8Array([0xff, 0xef]));
  assert.deepEqual(fromBase64url(""), new Uint8Array());
  for (const bad of ["AQAB=", "AQ==", "A", "AQ+B", "AQ/B", "AQ B", "AR", "_-9"]) {
    assert.equal(fromBase64url(bad), undefined, bad);
  }
});

Deno.test("thumbprints are RFC 7638's, as jose computes them", async () => {
  assert.equal(await jwkThumbprint(rfc7638), rfc7638Thumbprint);
  assert.equal(await jwkThumbprint(rfc8037), rfc8037Thumbprint);
  for (const jwk of [await publicJwk({ name: "Ed25519" }), await publicJwk(p256)]) {
    assert.equal(
      await jwkThumbprint(jwk as { kty: string }),
      await jose.calculateJwkThumbprint(jwk as jose.JWK, "sha256"),
    );
  }
});

Deno.test("an Ed25519 key: EdDSA, its thumbprint as kid, only its public members kept", async () => {
  const key = await checkUploadedJwk({ ...rfc8037, x5t: "ignored", ext: true });
  assert.equal(key.algorithm, "EdDSA");
  assert.equal(key.kid, rfc8037Thumbprint);
  assert.deepEqual(key.jwk, { ...rfc8037, kid: rfc8037Thumbprint, alg: "EdDSA", use: "sig" });
  assert.deepEqual(Object.keys(key.jwk), ["kty", "crv", "x", "kid", "alg", "use"]);
  // alg may name the key as RFC 9864 does; the algorithm stays EdDSA.
  const named = await checkUploadedJwk({ ...rfc8037, alg: "Ed25519", kid: "mine", use: "sig" });
  assert.equal(named.algorithm, "EdDSA");
  assert.equal(named.jwk.alg, "EdDSA");
  assert.equal(named.kid, "mine");
  // As WebCrypto exports one (key_ops, ext).
  const exported = await publicJwk({ name: "Ed25519" });
  assert.deepEqual(exported.key_ops, ["verify"]);
  const checked = await checkUploadedJwk(exported);
  assert.equal(checked.kid, await jose.calculateJwkThumbprint(exported as jose.JWK));
});

Deno.test("a P-256 key: ES256", async () => {
  const jwk = await publicJwk(p256);
  const key = await checkUploadedJwk({ ...jwk, kid: "ec key 1" });
  assert.equal(key.algorithm, "ES256");
  assert.equal(key.kid, "ec key 1");
  assert.deepEqual(key.jwk, {
    kty: "EC",
    crv: "P-256",
    x: jwk.x,
    y: jwk.y,
    kid: "ec key 1",
    alg: "ES256",
    use: "sig",
  });
});

Deno.test("an RSA key of 2048 bits or more: RS256; fewer refused", async () => {
  const key = await checkUploadedJwk(rfc7638);
  assert.equal(key.algorithm, "RS256");
  assert.equal(key.kid, rfc7638Thumbprint);
  assert.deepEqual(Object.keys(key.jwk), ["kty", "n", "e", "kid", "alg", "use"]);
  const big = await publicJwk(rsa(3072));
  assert.equal((await checkUploadedJwk(big)).algorithm, "RS256");
  assert.deepEqual(await violations(await publicJwk(rsa(1024))), [
    ["jwk.n", "must be a modulus of 2048 to 8192 bits, not 1024"],
  ]);
  assert.equal((await checkUploadedJwk({ ...rfc7638, e: "Aw" })).algorithm, "RS256", "e = 3");
  assert.deepEqual(await fields({ ...rfc7638, e: "AAEAAQ" }), ["jwk.e"]);
  assert.deepEqual(await fields({ ...rfc7638, e: "AQ" }), ["jwk.e"]);
  assert.deepEqual(await fields({ ...rfc7638, e: "Ag" }), ["jwk.e"]);
  assert.deepEqual(await fields({ ...rfc7638, n: `AA${rfc7638.n}` }), ["jwk.n"]);
});

Deno.test("a JWK with any private member is refused, naming members, never values", async () => {
  const ed = await generateClientKey("EdDSA");
  const cases: Jwk[] = [
    ed.privateJwk,
    ...privateMembers.map((name) => ({ ...rfc7638, [name]: `VALUE-OF-${name}` })),
    { kty: "oct", k: "c2VjcmV0" },
    { d: "VALUE-OF-d" },
  ];
  for (const jwk of cases) {
    const err = await refusal(jwk);
    assert.match(err.rawMessage, /holds private members/);
    assert.match(err.rawMessage, /only the public key is uploaded/);
    const [violation, ...more] = fieldViolations(err);
    assert.equal(more.length, 0);
    assert.equal(violation!.field, "jwk");
    assert.match(violation!.description, /private members \(.+\): upload only the public key/);
    const text = JSON.stringify([err.rawMessage, violation]);
    for (const [name, value] of Object.entries(jwk)) {
      if ((privateMembers as readonly string[]).includes(name)) {
        assert.ok(text.includes(name), `names ${name}`);
        assert.ok(!text.includes(value as string), `never echoes ${name}'s value`);
      }
    }
  }
  const all = await refusal({ ...rfc7638, p: "1", q: "2", dp: "3", dq: "4", qi: "5", d: "6" });
  assert.match(all.rawMessage, /\(d, p, q, dp, dq, qi\)/);
});

Deno.test("other key types, curves and malformed members are refused, member by member", async () => {
  assert.deepEqual(await violations("x"), [["jwk", "must be a JSON object"]]);
  assert.deepEqual(await violations([]), [["jwk", "must be a JSON object"]]);
  assert.deepEqual(await fields({}), ["jwk.kty"]);
  assert.deepEqual(await fields({ kty: "oct" }), ["jwk.kty"]);
  assert.deepEqual(await fields({ kty: "okp", crv: "Ed25519", x: rfc8037.x }), ["jwk.kty"]);
  assert.deepEqual(await fields({ ...rfc8037, crv: "X25519" }), ["jwk.crv"]);
  assert.deepEqual(await fields({ ...rfc8037, crv: "Ed448" }), ["jwk.crv"]);
  assert.deepEqual(await fields({ kty: "OKP", x: rfc8037.x }), ["jwk.crv"]);
  const ec = await publicJwk(p256);
  const p384 = await publicJwk({ name: "ECDSA", namedCurve: "P-384" });
  assert.equal(p384.alg, "ES384");
  assert.deepEqual(await fields(p384), ["jwk.alg", "jwk.crv", "jwk.x", "jwk.y"]);
  assert.deepEqual(await fields({ ...ec, y: undefined }), ["jwk.y"]);
  assert.deepEqual(await fields({ ...rfc8037, x: `${rfc8037.x}=` }), ["jwk.x"]);
  assert.deepEqual(await fields({ ...rfc8037, x: rfc8037.x.slice(0, -2) }), ["jwk.x"]);
  assert.deepEqual(await fields({ ...rfc8037, x: 7 }), ["jwk.x"]);
  assert.deepEqual(await fields({ ...rfc8037, y: ec.y }), ["jwk.y"]);
  assert.deepEqual(await fields({ ...rfc7638, crv: "P-256" }), ["jwk.crv"]);
  // Optional members.
  assert.deepEqual(await fields({ ...rfc8037, kid: "" }), ["jwk.kid"]);
  assert.deepEqual(await fields({ ...rfc8037, kid: "k".repeat(129) }), ["jwk.kid"]);
  assert.deepEqual(await fields({ ...rfc8037, kid: "é" }), ["jwk.kid"]);
  assert.deepEqual(await fields({ ...rfc8037, kid: "tab\there" }), ["jwk.kid"]);
  assert.deepEqual(await fields({ ...rfc8037, kid: 5 }), ["jwk.kid"]);
  assert.equal((await checkUploadedJwk({ ...rfc8037, kid: "k".repeat(128) })).kid.length, 128);
  assert.equal((await checkUploadedJwk({ ...rfc8037, kid: "a b~!" })).kid, "a b~!");
  assert.deepEqual(await violations({ ...rfc8037, alg: "ES256" }), [
    ["jwk.alg", 'must be "EdDSA" or "Ed25519" for a OKP key'],
  ]);
  assert.deepEqual(await fields({ ...ec, alg: "EdDSA" }), ["jwk.alg"]);
  assert.deepEqual(await fields({ ...rfc7638, alg: "PS256" }), ["jwk.alg"]);
  assert.deepEqual(await fields({ ...rfc8037, use: "enc" }), ["jwk.use"]);
  assert.deepEqual(await fields({ ...rfc8037, key_ops: ["verify", "sign"] }), ["jwk.key_ops"]);
  assert.deepEqual(await fields({ ...rfc8037, key_ops: "verify" }), ["jwk.key_ops"]);
  // RFC 7517 4.3: no operation twice; and a key meant for no operation verifies nothing.
  assert.deepEqual(await fields({ ...rfc8037, key_ops: ["verify", "verify"] }), ["jwk.key_ops"]);
  assert.deepEqual(await fields({ ...rfc8037, key_ops: [] }), ["jwk.key_ops"]);
  assert.equal((await checkUploadedJwk({ ...rfc8037, key_ops: ["verify"] })).algorithm, "EdDSA");
  assert.deepEqual(await fields({ ...rfc8037, ext: "yes" }), ["jwk.ext"]);
  // Several at once.
  assert.deepEqual(await fields({ ...rfc8037, kid: "", use: "enc", x: "!" }), [
    "jwk.kid",
    "jwk.use",
    "jwk.x",
  ]);
});

Deno.test("points off their curve, and Ed25519 points of small order, are refused", async () => {
  // edwards25519: y = 2 is on no point (checked apart, in Python), y = 3 is.
  assert.equal(validEd25519(fromBase64url(edY(2n))!), false);
  assert.equal(validEd25519(fromBase64url(edY(3n))!), true);
  assert.deepEqual(await violations({ ...rfc8037, x: edY(2n) }), [
    ["jwk.x", "is not a valid Ed25519 public key"],
  ]);
  const p = 2n ** 255n - 19n;
  const smallOrLoose: [string, string][] = [
    ["the neutral element (y = 1)", edY(1n)],
    ["order 2 (y = -1)", edY(p - 1n)],
    ["order 4 (y = 0)", edY(0n)],
    ["order 8", "JuiVj8KyJ7BFw_SJ8u-Y8NXfrAXTxjM5sTgCiG1T_AU"],
    ["order 8, the other", "xxdqcD1N2E-6PAt2DRBnDyogU_osOczGTsf9d5KsA3o"],
    ["y = p, not canonical", edY(p)],
    ["x = 0 with the sign bit set", edY(1n, true)],
  ];
  for (const [label, x] of smallOrLoose) {
    assert.deepEqual(await fields({ ...rfc8037, x }), ["jwk.x"], label);
  }
  // Every key WebCrypto makes is accepted.
  for (let i = 0; i < 50; i++) {
    const jwk = await publicJwk({ name: "Ed25519" });
    assert.ok(validEd25519(fromBase64url(jwk.x as string)!), jwk.x as string);
  }
  // P-256: a point off the curve, and coordinates beyond the field.
  const ec = await publicJwk(p256);
  const x = fromBase64url(ec.x as string)!;
  const y = fromBase64url(ec.y as string)!;
  assert.ok(onP256(x, y));
  const y1 = Uint8Array.from(y);
  y1[31]! ^= 1;
  assert.equal(onP256(x, y1), false);
  assert.deepEqual(await violations({ ...ec, y: base64url(y1) }), [
    ["jwk", "is not a point of the curve P-256"],
  ]);
  const ff = base64url(new Uint8Array(32).fill(0xff));
  assert.deepEqual(await fields({ ...ec, x: ff }), ["jwk"]);
});

Deno.test("generated key pairs: the private JWK signs what the stored public JWK verifies", async () => {
  for (const algorithm of ["EdDSA", "ES256"] as const) {
    const key = await generateClientKey(algorithm);
    assert.equal(key.algorithm, algorithm);
    assert.equal(key.kid, await jose.calculateJwkThumbprint(key.jwk as jose.JWK));
    assert.equal(key.jwk.alg, algorithm);
    assert.equal(key.jwk.use, "sig");
    assert.equal("d" in key.jwk, false, "the stored part has no private member");
    assert.deepEqual(Object.keys(key.privateJwk), [
      ...(algorithm === "EdDSA" ? ["kty", "crv", "x"] : ["kty", "crv", "x", "y"]),
      "d",
      "kid",
      "alg",
      "use",
    ]);
    const jws = await new jose.CompactSign(new TextEncoder().encode("hello"))
      .setProtectedHeader({ alg: algorithm, kid: key.kid })
      .sign(await jose.importJWK(key.privateJwk, algorithm));
    const verified = await jose.compactVerify(jws, await jose.importJWK(key.jwk, algorithm));
    assert.equal(new TextDecoder().decode(verified.payload), "hello");
    // The public part passes the upload checks as it is.
    assert.deepEqual(await checkUploadedJwk(key.jwk), { kid: key.kid, algorithm, jwk: key.jwk });
  }
  const err = await generateClientKey("RS256").then(() => undefined, (e) => e as ConnectError);
  assert.equal(err?.code, Code.InvalidArgument);
  assert.deepEqual(fieldViolations(err!), [
    { field: "generate", description: 'must be "EdDSA" or "ES256"' },
  ]);
});

Deno.test("orderedJwk: a stored JWK's members in their order, nothing else", () => {
  assert.deepEqual(
    Object.entries(
      orderedJwk({ use: "sig", alg: "EdDSA", x: "X", kid: "k", kty: "OKP", crv: "C", z: 1 }),
    ),
    [["kty", "OKP"], ["crv", "C"], ["x", "X"], ["kid", "k"], ["alg", "EdDSA"], ["use", "sig"]],
  );
});
