/**
 * DPoP proofs (RFC 9449 4.3) against an injected clock and an in-memory stand-in for
 * token.used_jtis: what is accepted, each way a proof is refused, and the nonces of RFC 9449 8.
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { ConnectError } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { calculateJwkThumbprint, exportJWK, generateKeyPair, type JWK, SignJWT } from "jose";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.ts";
import { DpopProofSchema } from "../../gen/registry/token/v1/token_service_pb.ts";
import {
  createDpop,
  deriveDpopNonceKey,
  type Dpop,
  nonceWindowSeconds,
  normalizedHtu,
  proofFutureSeconds,
  proofMaxAgeSeconds,
} from "./dpop.ts";

const htu = "https://as.example.com/oauth2/token";
const t0 = Date.UTC(2030, 0, 1, 12, 0, 0);

/** An in-memory used_jtis: the same rule as the table's (a row counts until it expires). */
function memoryJtis() {
  const rows = new Map<string, number>();
  return {
    rows,
    use(scope: string, jti: string, expiresAt: Date, now: Date) {
      const key = `${scope}\u0000${jti}`;
      const until = rows.get(key);
      if (until !== undefined && until >= now.getTime()) return Promise.resolve(false);
      rows.set(key, expiresAt.getTime());
      return Promise.resolve(true);
    },
  };
}

const ed = await generateKeyPair("EdDSA", { crv: "Ed25519", extractable: true });
const ec = await generateKeyPair("ES256", { extractable: true });
const edJwk = await exportJWK(ed.publicKey);
const ecJwk = await exportJWK(ec.publicKey);

interface ProofOptions {
  alg?: string;
  typ?: string;
  jwk?: JWK;
  key?: Parameters<SignJWT["sign"]>[0];
  claims?: Record<string, unknown>;
}

/** A proof signed with the Ed25519 key (or as told), `iat` from the clock. */
async function proof(clock: { now: number }, options: ProofOptions = {}): Promise<string> {
  return await new SignJWT({
    jti: crypto.randomUUID(),
    htm: "POST",
    htu,
    iat: Math.floor(clock.now / 1000),
    ...options.claims,
  })
    .setProtectedHeader({
      alg: options.alg ?? "EdDSA",
      typ: options.typ ?? "dpop+jwt",
      jwk: options.jwk ?? edJwk,
    })
    .sign(options.key ?? ed.privateKey);
}

/** A JWS made by hand (for what jose will not sign: `none`, odd headers). */
function handMade(header: unknown, claims: unknown, signature = ""): string {
  const part = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64url");
  return `${part(header)}.${part(claims)}.${signature}`;
}

const request = (proof: string, uri = htu, method = "POST") =>
  create(DpopProofSchema, { proof, httpMethod: method, httpUri: uri });

/** Checks a proof and spends it, as the token endpoint does for a confidential client: its jkt. */
async function verified(dpop: Dpop, req: ReturnType<typeof request>): Promise<string> {
  const checked = await dpop.check(req);
  await checked.spend();
  return checked.jkt;
}

/** The OAuth error a verification failed with, and its ErrorInfo's metadata. */
async function refusal(dpop: Dpop, p: string, uri = htu, method = "POST") {
  const error = await verified(dpop, request(p, uri, method)).then(
    () => assert.fail("the proof was accepted"),
    (e) => e,
  );
  assert.ok(error instanceof ConnectError, String(error));
  const info = error.findDetails(ErrorInfoSchema)[0]!;
  return { error: info.reason, description: error.rawMessage, metadata: info.metadata };
}

function setup(nonces = false) {
  const clock = { now: t0 };
  const jtis = memoryJtis();
  const dpop = createDpop({
    usedJtis: jtis,
    nonceKey: nonces ? deriveDpopNonceKey("x".repeat(32)) : undefined,
    now: () => clock.now,
  });
  return { clock, jtis, dpop };
}

Deno.test("a valid proof gives its key's RFC 7638 thumbprint, with EdDSA, Ed25519 and ES256", async () => {
  const { clock, dpop } = setup();
  const edJkt = await calculateJwkThumbprint(edJwk, "sha256");
  assert.equal(await verified(dpop, request(await proof(clock))), edJkt);
  assert.equal(
    await verified(dpop, request(await proof(clock, { alg: "Ed25519" }))),
    edJkt,
    "RFC 9864's name of the algorithm",
  );
  assert.equal(
    await verified(
      dpop,
      request(await proof(clock, { alg: "ES256", jwk: ecJwk, key: ec.privateKey })),
    ),
    await calculateJwkThumbprint(ecJwk, "sha256"),
  );
  // Members beyond the key's are allowed and left out of the thumbprint.
  assert.equal(
    await verified(dpop, request(await proof(clock, { jwk: { ...edJwk, kid: "k1", use: "sig" } }))),
    edJkt,
  );
  assert.equal(await dpop.nonce(), "", "no nonce unless required");
});

Deno.test("htu is compared without query and fragment, after RFC 3986 normalisation", async () => {
  const { clock, dpop } = setup();
  for (
    const claim of [
      "https://as.example.com/oauth2/token?x=1",
      "https://as.example.com/oauth2/token#f",
      "HTTPS://AS.Example.COM/oauth2/token",
      "https://as.example.com:443/oauth2/token",
      "https://as.example.com/oauth2/%74oken",
      "https://as.example.com/oauth2/x/../token",
    ]
  ) {
    assert.equal(
      typeof await verified(dpop, request(await proof(clock, { claims: { htu: claim } }))),
      "string",
      claim,
    );
  }
  assert.equal(normalizedHtu("http://h.example:80"), "http://h.example/");
  assert.equal(normalizedHtu("http://h.example/a%2fb"), "http://h.example/a%2Fb");
  assert.equal(normalizedHtu("ftp://h.example/"), undefined);
  assert.equal(normalizedHtu("/oauth2/token"), undefined);
  // What the URL parser reads and RFC 3986 does not write.
  for (
    const uri of [
      "http://2130706433:8080/oauth2/token",
      "http://127.1:8080/oauth2/token",
      "http://127.0.0.1:08080/oauth2/token",
      "http://127.0.0.1:8080\\oauth2/token",
      "http://127.0.0.1:8080/oauth2/to\tken",
      "http://127.0.0.1:8080/oauth2/tökén",
      "http://[0:0::1]:8080/oauth2/token",
    ]
  ) assert.equal(normalizedHtu(uri), undefined, uri);
  assert.equal(
    normalizedHtu("http://127.0.0.1:8080/oauth2/token"),
    "http://127.0.0.1:8080/oauth2/token",
  );
  assert.equal(normalizedHtu("http://[::1]:8080/oauth2/token"), "http://[::1]:8080/oauth2/token");
  assert.equal(normalizedHtu("HTTP://H.EXAMPLE:/"), "http://h.example/");
  for (
    const claim of [
      "https://as.example.com/oauth2/revoke",
      "https://as.example.com:8443/oauth2/token",
      "http://as.example.com/oauth2/token",
      "https://other.example.com/oauth2/token",
      "https://as.example.com/oauth2/Token",
      "/oauth2/token",
      "https://user@as.example.com/oauth2/token",
    ]
  ) {
    const r = await refusal(dpop, await proof(clock, { claims: { htu: claim } }));
    assert.equal(r.error, "invalid_dpop_proof", claim);
    assert.match(r.description, /htu/, claim);
  }
  const notString = await refusal(dpop, await proof(clock, { claims: { htu: 1 } }));
  assert.match(notString.description, /htu/);
});

Deno.test("iat: at most 300 s old and 30 s ahead", async () => {
  const { clock, dpop } = setup();
  const iat = (seconds: number) => ({ claims: { iat: Math.floor(t0 / 1000) + seconds } });
  assert.ok(await verified(dpop, request(await proof(clock, iat(-proofMaxAgeSeconds)))));
  assert.ok(await verified(dpop, request(await proof(clock, iat(proofFutureSeconds)))));
  const old = await refusal(dpop, await proof(clock, iat(-proofMaxAgeSeconds - 1)));
  assert.deepEqual([old.error, old.description], [
    "invalid_dpop_proof",
    "The DPoP proof is too old (iat)",
  ]);
  const ahead = await refusal(dpop, await proof(clock, iat(proofFutureSeconds + 1)));
  assert.match(ahead.description, /future/);
  for (const bad of ["1", null, undefined]) {
    const r = await refusal(dpop, await proof(clock, { claims: { iat: bad } }));
    assert.match(r.description, /iat/, String(bad));
  }
});

Deno.test("jti: once per key, remembered until the proof could no longer be accepted", async () => {
  const { clock, jtis, dpop } = setup();
  const p = await proof(clock, { claims: { jti: "j1" } });
  await verified(dpop, request(p));
  const replay = await refusal(dpop, p);
  assert.deepEqual([replay.error, replay.description], [
    "invalid_dpop_proof",
    "The DPoP proof was already used (jti)",
  ]);
  // Another key's proof may use the same jti (the scope is the key).
  await verified(
    dpop,
    request(
      await proof(clock, { alg: "ES256", jwk: ecJwk, key: ec.privateKey, claims: { jti: "j1" } }),
    ),
  );
  const [until] = [...jtis.rows.values()];
  assert.equal(until, t0 + (proofMaxAgeSeconds + 1) * 1000);
  // Until then, still a replay, even though the proof is nearly too old.
  clock.now = t0 + proofMaxAgeSeconds * 1000;
  assert.equal((await refusal(dpop, p)).description, "The DPoP proof was already used (jti)");
  clock.now += 1000;
  assert.equal((await refusal(dpop, p)).description, "The DPoP proof is too old (iat)");
  for (const jti of ["", "x".repeat(257), 5]) {
    const clock2 = { now: t0 };
    const r = await refusal(dpop, await proof(clock2, { claims: { jti } }));
    assert.match(r.description, /jti/);
  }
  clock.now = t0;
  assert.ok(
    await verified(dpop, request(await proof(clock, { claims: { jti: "y".repeat(256) } }))),
  );
});

Deno.test("check writes nothing: the jti is used when the proof is spent, once", async () => {
  const { clock, jtis, dpop } = setup();
  const p = await proof(clock, { claims: { jti: "s1" } });
  const checked = await dpop.check(request(p));
  assert.equal(jtis.rows.size, 0, "a checked proof leaves no row");
  // Checked again before it is spent, it still passes: only spending decides.
  const again = await dpop.check(request(p));
  await checked.spend();
  assert.equal(jtis.rows.size, 1);
  await checked.spend();
  assert.equal(jtis.rows.size, 1, "spent again: the first answer, nothing more written");
  const replay = await again.spend().then(() => assert.fail("a replay was spent"), (e) => e);
  assert.ok(replay instanceof ConnectError);
  assert.equal(replay.rawMessage, "The DPoP proof was already used (jti)");
});

Deno.test("htm must be the request's method", async () => {
  const { clock, dpop } = setup();
  const r = await refusal(dpop, await proof(clock, { claims: { htm: "GET" } }));
  assert.match(r.description, /htm/);
  const lower = await refusal(dpop, await proof(clock, { claims: { htm: "post" } }));
  assert.match(lower.description, /htm/);
  const missing = await refusal(dpop, await proof(clock, { claims: { htm: undefined } }));
  assert.match(missing.description, /htm/);
});

Deno.test("header: typ, alg, a public jwk of the alg, no crit", async () => {
  const { clock, dpop } = setup();
  const cases: [string, Promise<string> | string, RegExp][] = [
    ["typ JWT", proof(clock, { typ: "JWT" }), /typ/],
    ["ES256 alg, Ed25519 key", proof(clock, { alg: "ES256", key: ec.privateKey }), /jwk/],
    ["EdDSA alg, EC key", proof(clock, { jwk: ecJwk }), /jwk/],
    [
      "the private jwk",
      (async () => proof(clock, { jwk: await exportJWK(ed.privateKey) }))(),
      /public/,
    ],
    ["a symmetric jwk", proof(clock, { jwk: { ...edJwk, k: "AAAA" } }), /public/],
    ["no jwk", handMade({ alg: "EdDSA", typ: "dpop+jwt" }, {}, "AAAA"), /jwk/],
    ["alg none", handMade({ alg: "none", typ: "dpop+jwt", jwk: edJwk }, {}, "x"), /alg/],
    [
      "crit",
      handMade({ alg: "EdDSA", typ: "dpop+jwt", jwk: edJwk, crit: ["b64"], b64: true }, {}, "x"),
      /crit/,
    ],
    ["a bad x", proof(clock, { jwk: { ...edJwk, x: "AAAA" } }), /jwk/],
  ];
  for (const [what, p, pattern] of cases) {
    const r = await refusal(dpop, await p);
    assert.equal(r.error, "invalid_dpop_proof", what);
    assert.match(r.description, pattern, what);
  }
  const hmacKey = new Uint8Array(32);
  const hs = await new SignJWT({ jti: "h", htm: "POST", htu, iat: Math.floor(t0 / 1000) })
    .setProtectedHeader({ alg: "HS256", typ: "dpop+jwt", jwk: edJwk })
    .sign(hmacKey);
  assert.match((await refusal(dpop, hs)).description, /alg/);
  const rsa = await generateKeyPair("RS256", { extractable: true });
  const rs = await new SignJWT({ jti: "r", htm: "POST", htu, iat: Math.floor(t0 / 1000) })
    .setProtectedHeader({ alg: "RS256", typ: "dpop+jwt", jwk: await exportJWK(rsa.publicKey) })
    .sign(rsa.privateKey);
  assert.match((await refusal(dpop, rs)).description, /alg/);
});

Deno.test("the signature must verify with the header's jwk", async () => {
  const { clock, dpop } = setup();
  const other = await generateKeyPair("EdDSA", { crv: "Ed25519" });
  const r = await refusal(dpop, await proof(clock, { key: other.privateKey }));
  assert.match(r.description, /signature/);
  const good = await proof(clock);
  const [h, p] = good.split(".");
  const tampered = `${h}.${
    Buffer.from(JSON.stringify({ jti: "z", htm: "POST", htu, iat: Math.floor(t0 / 1000) }))
      .toString("base64url")
  }.${good.split(".")[2]}`;
  assert.match((await refusal(dpop, tampered)).description, /signature/);
  assert.match((await refusal(dpop, `${h}.${p}.`)).description, /one compact JWS/);
  assert.match((await refusal(dpop, `${good}, ${good}`)).description, /one DPoP header/);
  for (const bad of ["", "a.b", `${good}.x`, `${good} `, "x".repeat(5000)]) {
    assert.match((await refusal(dpop, bad)).description, /one compact JWS/, bad.slice(0, 20));
  }
  assert.match((await refusal(dpop, "a.b.c")).description, /compact JWS of a JWT/);
  const ecOther = await generateKeyPair("ES256");
  const ecBad = await proof(clock, { alg: "ES256", jwk: ecJwk, key: ecOther.privateKey });
  assert.match((await refusal(dpop, ecBad)).description, /signature/);
});

Deno.test("nonces: required when set, the current and the previous window's accepted", async () => {
  const { clock, dpop } = setup(true);
  const nonce = await dpop.nonce();
  assert.match(nonce, /^[A-Za-z0-9_-]{54}$/);
  assert.equal(await dpop.nonce(), nonce, "the same within a window");
  const missing = await refusal(dpop, await proof(clock));
  assert.deepEqual([missing.error, missing.metadata.dpop_nonce], ["use_dpop_nonce", nonce]);
  const wrong = await refusal(dpop, await proof(clock, { claims: { nonce: "abc" } }));
  assert.deepEqual([wrong.error, wrong.metadata.dpop_nonce], ["use_dpop_nonce", nonce]);
  // A nonce made with another key (another installation) is not one of ours.
  const foreign = createDpop({
    usedJtis: memoryJtis(),
    nonceKey: deriveDpopNonceKey("y".repeat(32)),
    now: () => clock.now,
  });
  const theirs = await foreign.nonce();
  assert.notEqual(theirs, nonce);
  assert.equal(
    (await refusal(dpop, await proof(clock, { claims: { nonce: theirs } }))).error,
    "use_dpop_nonce",
  );
  // A replica made from the same secret makes and accepts the same nonces.
  const replica = createDpop({
    usedJtis: memoryJtis(),
    nonceKey: deriveDpopNonceKey("x".repeat(32)),
    now: () => clock.now,
  });
  assert.equal(await replica.nonce(), nonce);
  assert.ok(await verified(dpop, request(await proof(clock, { claims: { nonce } }))));
  // After the secret changed, with the old one a previous one: the old key's nonces are still
  // taken, the new key's are given; without it, the old ones are not.
  const changed = createDpop({
    usedJtis: memoryJtis(),
    nonceKey: deriveDpopNonceKey("z".repeat(32)),
    previousNonceKeys: [deriveDpopNonceKey("x".repeat(32))],
    now: () => clock.now,
  });
  assert.notEqual(await changed.nonce(), nonce);
  assert.ok(await verified(changed, request(await proof(clock, { claims: { nonce } }))));
  const fresh = await changed.nonce();
  assert.ok(await verified(changed, request(await proof(clock, { claims: { nonce: fresh } }))));
  const without = createDpop({
    usedJtis: memoryJtis(),
    nonceKey: deriveDpopNonceKey("z".repeat(32)),
    now: () => clock.now,
  });
  assert.equal(
    (await refusal(without, await proof(clock, { claims: { nonce } }))).error,
    "use_dpop_nonce",
  );
  // Next window: the new nonce is given, the old one still taken; the one after, not.
  const start = Math.floor(t0 / (nonceWindowSeconds * 1000)) * nonceWindowSeconds * 1000;
  clock.now = start + nonceWindowSeconds * 1000;
  const next = await dpop.nonce();
  assert.notEqual(next, nonce);
  assert.ok(await verified(dpop, request(await proof(clock, { claims: { nonce } }))));
  assert.ok(await verified(dpop, request(await proof(clock, { claims: { nonce: next } }))));
  clock.now = start + 2 * nonceWindowSeconds * 1000;
  const stale = await refusal(dpop, await proof(clock, { claims: { nonce } }));
  assert.deepEqual([stale.error, stale.metadata.dpop_nonce], [
    "use_dpop_nonce",
    await dpop.nonce(),
  ]);
  // An invalid proof is invalid_dpop_proof, with the nonce too; a nonce does not save it.
  const badTyp = await refusal(dpop, await proof(clock, { typ: "JWT", claims: { nonce: next } }));
  assert.deepEqual([badTyp.error, badTyp.metadata.dpop_nonce], [
    "invalid_dpop_proof",
    await dpop.nonce(),
  ]);
});

Deno.test("a use_dpop_nonce refusal does not spend the proof's jti", async () => {
  const { clock, dpop } = setup(true);
  const p = await proof(clock, { claims: { jti: "n1" } });
  assert.equal((await refusal(dpop, p)).error, "use_dpop_nonce");
  const nonce = await dpop.nonce();
  assert.ok(await verified(dpop, request(await proof(clock, { claims: { jti: "n1", nonce } }))));
});

Deno.test("typ: dpop+jwt in any case, with or without application/ (RFC 7515 4.1.9)", async () => {
  const { clock, dpop } = setup();
  const jkt = await calculateJwkThumbprint(edJwk, "sha256");
  for (
    const typ of [
      "dpop+jwt",
      "DPoP+JWT",
      "DPOP+jwt",
      "application/dpop+jwt",
      "Application/DPoP+JWT",
    ]
  ) {
    assert.equal(await verified(dpop, request(await proof(clock, { typ }))), jkt, typ);
  }
  for (
    const typ of [
      "jwt",
      "application/jwt",
      "dpop",
      "dpop+jwt ",
      " dpop+jwt",
      "application/dpop+jwt; charset=utf-8",
      "text/dpop+jwt",
      "application/application/dpop+jwt",
      "applicationdpop+jwt",
      "/dpop+jwt",
      "app\u0131ication/dpop+jwt", // a dotless i: no ASCII case folding makes it an i
      "dpop+jwt\u0000",
      "",
    ]
  ) {
    const r = await refusal(dpop, await proof(clock, { typ }));
    assert.deepEqual([r.error, r.description], [
      "invalid_dpop_proof",
      "The DPoP proof's typ must be dpop+jwt",
    ], JSON.stringify(typ));
  }
  for (const typ of [["dpop+jwt"], 1, null]) {
    const r = await refusal(dpop, handMade({ alg: "EdDSA", typ, jwk: edJwk }, {}, "AAAA"));
    assert.match(r.description, /typ/, JSON.stringify(typ));
  }
});

const b64u = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64url");

/** 32 bytes of an edwards25519 point by its y (RFC 8032 5.1.2), the sign of x as told. */
function edPoint(y: bigint, negative = false): Uint8Array {
  const bytes = new Uint8Array(32);
  for (let i = 0, v = y; i < 32; i++, v >>= 8n) bytes[i] = Number(v & 0xffn);
  if (negative) bytes[31]! |= 0x80;
  return bytes;
}

/** A proof signed without a private key: `R = (0, 1)`, `S = 0`, with the jwk given. */
function forged(clock: { now: number }, x: Uint8Array): string {
  const signature = Buffer.concat([edPoint(1n), new Uint8Array(32)]).toString("base64url");
  return handMade(
    { typ: "dpop+jwt", alg: "EdDSA", jwk: { kty: "OKP", crv: "Ed25519", x: b64u(x) } },
    { jti: crypto.randomUUID(), htm: "POST", htu, iat: Math.floor(clock.now / 1000) },
    signature,
  );
}

Deno.test("a jwk of small order is refused: a signature without a private key verifies under it", async () => {
  const { clock, dpop } = setup();
  const p = 2n ** 255n - 19n;
  const smallOrder: [string, Uint8Array][] = [
    ["the neutral element (y = 1)", edPoint(1n)],
    ["order 2 (y = -1)", edPoint(p - 1n)],
    ["order 4 (y = 0)", edPoint(0n)],
    ["order 4, x negative", edPoint(0n, true)],
    ["order 8", Buffer.from("JuiVj8KyJ7BFw_SJ8u-Y8NXfrAXTxjM5sTgCiG1T_AU", "base64url")],
    ["order 8, the other", Buffer.from("xxdqcD1N2E-6PAt2DRBnDyogU_osOczGTsf9d5KsA3o", "base64url")],
    ["y = p + 1, the neutral element not canonical", edPoint(p + 1n)],
    ["x = 0 with the sign bit set", edPoint(1n, true)],
  ];
  for (const [what, x] of smallOrder) {
    const r = await refusal(dpop, forged(clock, x));
    assert.deepEqual([r.error, r.description], [
      "invalid_dpop_proof",
      "The DPoP proof's jwk is not a valid public key",
    ], what);
  }
  // Nor is a point off the curve (y = 2 is on none), of either algorithm.
  const off = await refusal(dpop, forged(clock, edPoint(2n)));
  assert.match(off.description, /jwk is not a valid public key/);
  const y = Buffer.from(ecJwk.y!, "base64url");
  y[31]! ^= 1;
  const ecOff = await refusal(
    dpop,
    await proof(clock, {
      alg: "ES256",
      jwk: { ...ecJwk, y: b64u(y) },
      key: ec.privateKey,
    }),
  );
  assert.match(ecOff.description, /jwk is not a valid public key/);
  const ff = b64u(new Uint8Array(32).fill(0xff));
  const ecBeyond = await refusal(
    dpop,
    await proof(clock, { alg: "ES256", jwk: { ...ecJwk, x: ff }, key: ec.privateKey }),
  );
  assert.match(ecBeyond.description, /jwk is not a valid public key/);
  // Keys jose makes still pass.
  for (let i = 0; i < 10; i++) {
    const pair = await generateKeyPair("EdDSA", { crv: "Ed25519" });
    const jwk = await exportJWK(pair.publicKey);
    assert.ok(await verified(dpop, request(await proof(clock, { jwk, key: pair.privateKey }))));
  }
});

Deno.test("a jwk's members must be canonical base64url: one key, one jkt", async () => {
  const { clock, dpop } = setup();
  const jkt = await calculateJwkThumbprint(edJwk, "sha256");
  assert.equal(await verified(dpop, request(await proof(clock))), jkt);
  // 43 characters carry 258 bits: the last one's two low bits are not the key's. Set, they spell
  // the same 32 bytes another way, which would make another thumbprint.
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  const respell = (text: string) => {
    const last = alphabet.indexOf(text.at(-1)!);
    return text.slice(0, -1) + alphabet[last ^ 1]!;
  };
  const x = respell(edJwk.x!);
  assert.deepEqual(Buffer.from(x, "base64url"), Buffer.from(edJwk.x!, "base64url"));
  const r = await refusal(dpop, await proof(clock, { jwk: { ...edJwk, x } }));
  assert.deepEqual([r.error, r.description], [
    "invalid_dpop_proof",
    "The DPoP proof's jwk is not a valid public key",
  ]);
  const y = respell(ecJwk.y!);
  assert.deepEqual(Buffer.from(y, "base64url"), Buffer.from(ecJwk.y!, "base64url"));
  const ecR = await refusal(
    dpop,
    await proof(clock, { alg: "ES256", jwk: { ...ecJwk, y }, key: ec.privateKey }),
  );
  assert.match(ecR.description, /jwk is not a valid public key/);
});

/** A proof of raw header and claims bytes, signed with the Ed25519 key. */
async function rawProof(header: Uint8Array, claims: Uint8Array): Promise<string> {
  const input = `${b64u(header)}.${b64u(claims)}`;
  const signature = await crypto.subtle.sign(
    "Ed25519",
    ed.privateKey as unknown as CryptoKey,
    new TextEncoder().encode(input),
  );
  return `${input}.${b64u(new Uint8Array(signature))}`;
}

Deno.test("a header or claims that are not UTF-8 refuse the proof (RFC 7515 5.2, RFC 7519 7.2)", async () => {
  const { clock, dpop } = setup();
  const encode = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));
  const header = encode({ typ: "dpop+jwt", alg: "EdDSA", jwk: edJwk });
  const claims = (jti: string) =>
    encode({ jti, htm: "POST", htu, iat: Math.floor(clock.now / 1000) });
  // The control: the same construction, in UTF-8, with a jti of multi-byte characters.
  assert.ok(await verified(dpop, request(await rawProof(header, claims("caf\u00e9 \u{1f511}")))));
  /** The JSON text with `bytes` put in place of the (ASCII) marker. */
  const splice = (text: Uint8Array, marker: string, bytes: number[]) => {
    const json = new TextDecoder().decode(text);
    const [before, after] = json.split(marker) as [string, string];
    const enc = new TextEncoder();
    return Uint8Array.from([...enc.encode(before), ...bytes, ...enc.encode(after)]);
  };
  for (
    const [what, bytes] of [
      ["0xFF", [0xff]],
      ["a lone continuation byte", [0x80]],
      ["an overlong /", [0xc0, 0xaf]],
      ["a surrogate", [0xed, 0xa0, 0x80]],
      ["a truncated sequence", [0xe2, 0x82]],
    ] as [string, number[]][]
  ) {
    const inClaims = await refusal(dpop, await rawProof(header, splice(claims("j@"), "@", bytes)));
    assert.deepEqual([inClaims.error, inClaims.description], [
      "invalid_dpop_proof",
      "The DPoP proof must be one compact JWS of a JWT",
    ], `claims: ${what}`);
    const inHeader = splice(
      encode({ typ: "dpop+jwt", alg: "EdDSA", jwk: edJwk, note: "@" }),
      "@",
      bytes,
    );
    const r = await refusal(dpop, await rawProof(inHeader, claims(crypto.randomUUID())));
    assert.match(r.description, /one compact JWS/, `header: ${what}`);
  }
});
