/**
 * Client assertions (`private_key_jwt`) against a fake registry and jti store, on an injected
 * clock: each key type verifies, and every hostile assertion (wrong audience, expired, replayed,
 * `alg: none`, HS256 keyed with the public key, another key's signature...) is refused with the
 * same answer.
 */

import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import * as jose from "jose";
import { ConnectError } from "@connectrpc/connect";
import {
  type Client,
  ClientSchema,
  ClientStatus,
  ClientType,
  TokenEndpointAuthMethod,
} from "../../gen/registry/oauth/v1/client_pb.ts";
import { type ClientKey, ClientKeySchema } from "../../gen/registry/oauth/v1/client_key_pb.ts";
import { createAssertionVerifier, reportKeyUsesEveryMs } from "./client_assertion.ts";

const issuer = "https://auth.example";
const tokenUrl = `${issuer}/oauth2/token`;
const clientId = "cli_01jd0000000000000000000000";
const t0 = Date.parse("2026-11-26T00:00:00Z");

async function keyOf(alg: "EdDSA" | "ES256" | "RS256", kid: string, expiresAt?: number) {
  const pair = await jose.generateKeyPair(alg === "EdDSA" ? "Ed25519" : alg, {
    extractable: true,
  });
  const jwk = await jose.exportJWK(pair.publicKey);
  const key: ClientKey = create(ClientKeySchema, {
    id: `key_${kid}`,
    clientId,
    kid,
    algorithm: alg,
    jwk: jwk as Record<string, string>,
    ...(expiresAt === undefined ? {} : { expiresAt: timestampFromMs(expiresAt) }),
  });
  return { key, privateKey: pair.privateKey };
}

function setup(
  keys: ClientKey[],
  client: {
    status?: ClientStatus;
    type?: ClientType;
    tokenEndpointAuthMethod?: TokenEndpointAuthMethod;
  } = {},
) {
  let at = t0;
  const used = new Set<string>();
  const reports: string[] = [];
  const verify = createAssertionVerifier({
    registry: {
      lookupClientKeys: (id) =>
        Promise.resolve(
          id !== clientId ? undefined : {
            client: create(ClientSchema, {
              id: clientId,
              projectId: "p1",
              type: ClientType.WEB,
              status: ClientStatus.ACTIVE,
              tokenEndpointAuthMethod: TokenEndpointAuthMethod.PRIVATE_KEY_JWT,
              ...client,
            }),
            keys,
          },
        ),
      recordKeyUse: (_c, keyId) => {
        reports.push(keyId);
        return Promise.resolve();
      },
    },
    usedJtis: {
      use: (scope, jti) => {
        const key = `${scope} ${jti}`;
        if (used.has(key)) return Promise.resolve(false);
        used.add(key);
        return Promise.resolve(true);
      },
    },
    audiences: [issuer, tokenUrl],
    now: () => at,
  });
  return { verify, reports, tick: (ms: number) => at += ms };
}

let jtis = 0;
/** An assertion valid at t0 unless `claims`/`header` say otherwise. */
async function sign(
  privateKey: Parameters<jose.SignJWT["sign"]>[0],
  header: jose.JWTHeaderParameters,
  claims: Record<string, unknown> = {},
): Promise<string> {
  return await new jose.SignJWT({
    iss: clientId,
    sub: clientId,
    aud: issuer,
    jti: `jti-${++jtis}`,
    iat: t0 / 1000,
    exp: t0 / 1000 + 60,
    ...claims,
  }).setProtectedHeader(header).sign(privateKey);
}

async function refused(
  verify: (a: string, c: string, endpoint?: string) => Promise<Client>,
  assertion: string,
) {
  // Called at the token endpoint.
  const error = await verify(assertion, "", tokenUrl).then(() => undefined, (e: unknown) => e);
  assert.ok(error instanceof ConnectError, "refused");
  // One description for every failure: nothing says which check failed.
  assert.deepEqual(error.rawMessage, "Client authentication failed");
}

Deno.test("a valid assertion authenticates, by each key type, and EdDSA under both names", async () => {
  for (const alg of ["EdDSA", "ES256", "RS256"] as const) {
    const { key, privateKey } = await keyOf(alg, `k-${alg}`);
    const { verify } = setup([key]);
    const names = alg === "EdDSA" ? ["EdDSA", "Ed25519"] : [alg];
    for (const name of names) {
      const client = await verify(await sign(privateKey, { alg: name, kid: key.kid }), "");
      assert.deepEqual(client.id, clientId);
    }
    // Without kid, and with the request's client_id; the token endpoint's URL as aud.
    await verify(await sign(privateKey, { alg: names[0]! }, { aud: tokenUrl }), clientId);
    await verify(await sign(privateKey, { alg: names[0]! }, { aud: [issuer, tokenUrl] }), "");
    // Explicitly typed (draft-ietf-oauth-rfc7523bis; RFC 7515 4.1.9: a media type, any case).
    for (
      const typ of ["client-authentication+jwt", "application/Client-Authentication+JWT", "JWT"]
    ) {
      await verify(await sign(privateKey, { alg: names[0]!, typ }), "");
    }
    // The URL of the endpoint called (RFC 9126 2: the PAR endpoint's own).
    const par = `${issuer}/oauth2/par`;
    await verify(await sign(privateKey, { alg: names[0]! }, { aud: par }), "", par);
  }
});

Deno.test("every bad assertion is invalid_client with the same description", async () => {
  const { key, privateKey } = await keyOf("EdDSA", "k1");
  const other = await keyOf("EdDSA", "k2");
  const { verify } = setup([key]);
  const s = t0 / 1000;
  const header = { alg: "EdDSA", kid: "k1" };
  const cases: [string, Promise<string>][] = [
    ["wrong aud", sign(privateKey, header, { aud: "https://other.example" })],
    ["aud with another value", sign(privateKey, header, { aud: [issuer, "https://x.example"] })],
    [
      "another endpoint's URL as aud (the token endpoint is called)",
      sign(privateKey, header, { aud: `${issuer}/oauth2/introspect` }),
    ],
    ["no exp", sign(privateKey, header, { exp: undefined })],
    ["expired", sign(privateKey, header, { exp: s - 31 })],
    ["exp too far ahead", sign(privateKey, header, { exp: s + 331 })],
    ["nbf in the future", sign(privateKey, header, { nbf: s + 31 })],
    ["iat in the future", sign(privateKey, header, { iat: s + 31 })],
    ["no jti", sign(privateKey, header, { jti: undefined })],
    ["long jti", sign(privateKey, header, { jti: "j".repeat(257) })],
    ["iss differs from sub", sign(privateKey, header, { iss: "someone" })],
    ["sub of another client", sign(privateKey, header, { sub: "cli_01jd0000000000000000000001" })],
    ["signed by another key", sign(other.privateKey, header)],
    ["kid of no key", sign(privateKey, { alg: "EdDSA", kid: "nope" })],
    ["alg of another key type", sign(privateKey, { alg: "ES256", kid: "k1" }).catch(() => "x.y.z")],
    [
      "crit header",
      sign(privateKey, { ...header, crit: ["x"], x: 1 } as jose.JWTHeaderParameters).catch(() =>
        "x.y.z"
      ),
    ],
    ["not a JWS", Promise.resolve("not-a-jwt")],
    // RFC 8725 3.11: a JWT typed as another kind is none of these, whatever its claims.
    ["typ dpop+jwt", sign(privateKey, { ...header, typ: "dpop+jwt" })],
    ["typ at+jwt", sign(privateKey, { ...header, typ: "at+jwt" })],
    ["typ of a request object", sign(privateKey, { ...header, typ: "oauth-authz-req+jwt" })],
    [
      "typ not a string",
      sign(privateKey, { ...header, typ: 1 } as unknown as jose.JWTHeaderParameters),
    ],
  ];
  for (const [name, assertion] of cases) {
    await refused(verify, await assertion).catch((e) => {
      throw new Error(`${name}: ${e.message}`);
    });
  }
  // alg none: an unsecured JWT.
  const none = new jose.UnsecuredJWT({
    iss: clientId,
    sub: clientId,
    aud: issuer,
    jti: "n",
    exp: s + 60,
  })
    .encode();
  await refused(verify, none);
  // HS256 with the public key's bytes as the secret (the classic confusion attack).
  const hs = await sign(new TextEncoder().encode(JSON.stringify(key.jwk)), { alg: "HS256" });
  await refused(verify, hs);
  // The request's client_id must be the assertion's sub.
  const good = await sign(privateKey, header);
  await refused((a) => verify(a, "cli_01jd0000000000000000000001"), good);
});

Deno.test("a jti is used once; the replay fails", async () => {
  const { key, privateKey } = await keyOf("ES256", "k1");
  const { verify } = setup([key]);
  const assertion = await sign(privateKey, { alg: "ES256" });
  await verify(assertion, "");
  await refused(verify, assertion);
});

Deno.test("an expired key, and a client not registered for private_key_jwt, authenticate nobody", async () => {
  const { key, privateKey } = await keyOf("EdDSA", "k1", t0 + 1000);
  const { verify, tick } = setup([key]);
  await verify(await sign(privateKey, { alg: "EdDSA" }), "");
  tick(1000);
  await refused(verify, await sign(privateKey, { alg: "EdDSA" }, { iat: (t0 + 1000) / 1000 }));

  const live = await keyOf("EdDSA", "k2");
  for (
    const client of [
      { tokenEndpointAuthMethod: TokenEndpointAuthMethod.CLIENT_SECRET_BASIC },
      { status: ClientStatus.SUSPENDED },
      { type: ClientType.NATIVE },
    ]
  ) {
    const { verify } = setup([live.key], client);
    await refused(verify, await sign(live.privateKey, { alg: "EdDSA" }));
  }
});

Deno.test("a key's use is reported at most once a minute", async () => {
  const { key, privateKey } = await keyOf("EdDSA", "k1");
  const { verify, reports, tick } = setup([key]);
  for (let i = 0; i < 3; i++) await verify(await sign(privateKey, { alg: "EdDSA" }), "");
  assert.deepEqual(reports, [key.id]);
  tick(reportKeyUsesEveryMs);
  await verify(
    await sign(privateKey, { alg: "EdDSA" }, {
      iat: (t0 + reportKeyUsesEveryMs) / 1000,
      exp: (t0 + reportKeyUsesEveryMs) / 1000 + 60,
    }),
    "",
  );
  assert.deepEqual(reports, [key.id, key.id]);
});

Deno.test("claims that are not UTF-8 are refused, as any malformed assertion (RFC 7519 7.2)", async () => {
  const { key, privateKey } = await keyOf("EdDSA", "k1");
  const { verify } = setup([key]);
  const claims = (jti: string) =>
    JSON.stringify({
      iss: clientId,
      sub: clientId,
      aud: issuer,
      jti,
      iat: t0 / 1000,
      exp: t0 / 1000 + 60,
    });
  /** The claims with `bytes` in place of the jti's `@`, signed. */
  const signed = (jti: string, bytes: number[]) => {
    const [before, after] = claims(jti).split("@") as [string, string];
    const enc = new TextEncoder();
    const payload = Uint8Array.from([...enc.encode(before), ...bytes, ...enc.encode(after)]);
    return new jose.CompactSign(payload).setProtectedHeader({ alg: "EdDSA" }).sign(privateKey);
  };
  // The control: the same construction in UTF-8, multi-byte characters included.
  assert.equal(
    (await verify(await signed("utf8-@", [0xc3, 0xa9, 0xf0, 0x9f, 0x94, 0x91]), "")).id,
    clientId,
  );
  // Decoded leniently, 0xFF and 0xFE would both be U+FFFD: two jti values taken as one.
  for (const bytes of [[0xff], [0xfe], [0x80], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xe2, 0x82]]) {
    await refused(verify, await signed(`bad-${bytes.join("-")}-@`, bytes)).catch((e) => {
      throw new Error(`${bytes}: ${e.message}`);
    });
  }
});
