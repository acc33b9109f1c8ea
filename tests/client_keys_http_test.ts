/**
 * Client keys through the `/v1` gateway: real oauth-registry and gateway processes, a real
 * Postgres, JSON bodies in and out (the JWKs are google.protobuf.Struct fields). Upload, generate,
 * get, list and delete a key; the 400 JSON error of a private JWK; `private_jwk` in the response
 * of a generating create only, and in no log line; the clients' token_endpoint_auth_method and
 * dpop_bound_access_tokens as JSON.
 */

import assert from "node:assert/strict";
import * as jose from "jose";
import { httpClient, type HttpResult, startStack } from "../lib/testing/mod.ts";

const keyFields = [
  "id",
  "client_id",
  "kid",
  "algorithm",
  "jwk",
  "created_at",
  "expires_at",
  "last_used_at",
  "status",
  "etag",
];
const timestamp = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

function assertError(res: HttpResult, status: number, code: string, field?: string): void {
  assert.equal(res.status, status, res.text);
  assert.equal(res.headers.get("content-type"), "application/json");
  assert.deepEqual(Object.keys(res.body), ["error"]);
  assert.equal(res.body.error.code, code);
  assert.equal(typeof res.body.error.message, "string");
  if (field !== undefined) {
    assert.ok(
      res.body.error.details.some((d: { field: string }) => d.field === field),
      `expected a violation of ${field}: ${res.text}`,
    );
  }
}

Deno.test("client keys through the gateway: JSON JWKs in and out", async (t) => {
  const stack = await startStack();
  const api = httpClient(stack.gatewayUrl);
  const token = await stack.token({ sub: "admin", projects: ["k1"] });
  /** The `d` of every private JWK the registry returned, to be looked for in the logs. */
  const privateParts: string[] = [];
  let stopped = false;
  try {
    assert.equal(
      (await api("PATCH", "/v1/projects/k1/config", { token, json: { application_name: "K" } }))
        .status,
      200,
    );

    let clientId = "";
    await t.step("clients: token_endpoint_auth_method and dpop_bound_access_tokens", async () => {
      const web = await api("POST", "/v1/projects/k1/clients", {
        token,
        json: { name: "web", type: "web", redirect_uris: ["https://app.example.com/cb"] },
      });
      assert.equal(web.status, 201, web.text);
      assert.equal(web.body.token_endpoint_auth_method, "client_secret_basic");
      assert.equal(web.body.dpop_bound_access_tokens, false);
      const spa = await api("POST", "/v1/projects/k1/clients", {
        token,
        json: { name: "spa", type: "spa", redirect_uris: ["https://app.example.com/cb"] },
      });
      assert.equal(spa.body.token_endpoint_auth_method, "none");
      assertError(
        await api("POST", "/v1/projects/k1/clients", {
          token,
          json: { name: "spa", type: "spa", token_endpoint_auth_method: "private_key_jwt" },
        }),
        400,
        "invalid_argument",
        "token_endpoint_auth_method",
      );
      assertError(
        await api("POST", "/v1/projects/k1/clients", {
          token,
          json: { name: "web", type: "web", token_endpoint_auth_method: "tls_client_auth" },
        }),
        400,
        "invalid_argument",
        "token_endpoint_auth_method",
      );
      const keyed = await api("POST", "/v1/projects/k1/clients", {
        token,
        json: {
          name: "keyed",
          type: "web",
          token_endpoint_auth_method: "private_key_jwt",
          dpop_bound_access_tokens: true,
        },
      });
      assert.equal(keyed.status, 201, keyed.text);
      assert.equal(keyed.body.token_endpoint_auth_method, "private_key_jwt");
      assert.equal(keyed.body.dpop_bound_access_tokens, true);
      clientId = keyed.body.id;
      const patched = await api("PATCH", `/v1/projects/k1/clients/${web.body.id}`, {
        token,
        json: { token_endpoint_auth_method: "client_secret_post" },
      });
      assert.equal(patched.status, 200, patched.text);
      assert.equal(patched.body.token_endpoint_auth_method, "client_secret_post");
      const got = await api("GET", `/v1/projects/k1/clients/${clientId}`, { token });
      assert.equal(got.body.token_endpoint_auth_method, "private_key_jwt");
      assert.equal(got.body.dpop_bound_access_tokens, true);
    });

    const keys = () => `/v1/projects/k1/clients/${clientId}/keys`;
    let uploadedId = "";
    await t.step("POST a public JWK: 201, the stored key; GET it: 200, the same", async () => {
      const pair = await crypto.subtle.generateKey(
        { name: "ECDSA", namedCurve: "P-256" },
        true,
        ["sign", "verify"],
      ) as CryptoKeyPair;
      const jwk = await crypto.subtle.exportKey("jwk", pair.publicKey);
      const res = await api("POST", keys(), {
        token,
        json: { jwk: { ...jwk, kid: "ec-1" }, expires_at: "2999-01-01T00:00:00Z" },
      });
      assert.equal(res.status, 201, res.text);
      assert.deepEqual(Object.keys(res.body), keyFields, "no private_jwk for an upload");
      assert.match(res.body.id, /^key_[0-9a-z]{26}$/);
      assert.equal(res.body.client_id, clientId);
      assert.equal(res.body.kid, "ec-1");
      assert.equal(res.body.algorithm, "ES256");
      assert.deepEqual(res.body.jwk, {
        kty: "EC",
        crv: "P-256",
        x: jwk.x,
        y: jwk.y,
        kid: "ec-1",
        alg: "ES256",
        use: "sig",
      });
      assert.match(res.body.created_at, timestamp);
      assert.equal(res.body.expires_at, "2999-01-01T00:00:00.000Z");
      assert.equal(res.body.last_used_at, null);
      assert.equal(res.body.status, "active");
      uploadedId = res.body.id;
      const got = await api("GET", `${keys()}/${uploadedId}`, { token });
      assert.equal(got.status, 200, got.text);
      assert.deepEqual(got.body, res.body);
      // An Ed25519 key without a kid: its thumbprint.
      const ed = { kty: "OKP", crv: "Ed25519", x: "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo" };
      const okp = await api("POST", keys(), { token, json: { jwk: ed } });
      assert.equal(okp.status, 201, okp.text);
      assert.equal(okp.body.kid, await jose.calculateJwkThumbprint(ed));
      assert.equal(okp.body.algorithm, "EdDSA");
    });

    let generatedId = "";
    await t.step("POST generate: 201 with private_jwk, once; never in GET or list", async () => {
      const res = await api("POST", keys(), { token, json: { generate: "EdDSA" } });
      assert.equal(res.status, 201, res.text);
      assert.deepEqual(Object.keys(res.body), [...keyFields.slice(0, -1), "private_jwk", "etag"]);
      assert.equal(
        res.headers.get("cache-control"),
        "no-store",
        "the private key is cached nowhere",
      );
      const priv = res.body.private_jwk;
      assert.deepEqual(Object.keys(priv), ["kty", "crv", "x", "d", "kid", "alg", "use"]);
      assert.equal(priv.kid, res.body.kid);
      assert.equal("d" in res.body.jwk, false);
      generatedId = res.body.id;
      privateParts.push(priv.d);
      // The private JWK signs what the public one verifies.
      const jws = await new jose.CompactSign(new TextEncoder().encode("hi"))
        .setProtectedHeader({ alg: "EdDSA", kid: priv.kid })
        .sign(await jose.importJWK(priv, "EdDSA"));
      const got = await api("GET", `${keys()}/${generatedId}`, { token });
      assert.equal(got.status, 200);
      assert.equal(got.headers.get("cache-control"), null, "a public key may be cached");
      assert.deepEqual(Object.keys(got.body), keyFields);
      assert.ok(!got.text.includes(priv.d));
      await jose.compactVerify(jws, await jose.importJWK(got.body.jwk, "EdDSA"));
      const list = await api("GET", keys(), { token });
      assert.equal(list.status, 200, list.text);
      assert.deepEqual(Object.keys(list.body), ["data", "has_more"]);
      assert.equal(list.body.has_more, false);
      assert.equal(list.body.data.length, 3);
      assert.deepEqual(list.body.data[0].id, uploadedId, "oldest first");
      for (const key of list.body.data) assert.deepEqual(Object.keys(key), keyFields);
      assert.ok(!list.text.includes(priv.d));
      // A replay under the same idempotency key: the same key, no private_jwk.
      const headers = { "idempotency-key": "gen-es256" };
      const first = await api("POST", keys(), { token, headers, json: { generate: "ES256" } });
      assert.equal(first.status, 201);
      assert.ok("private_jwk" in first.body);
      privateParts.push(first.body.private_jwk.d);
      const replay = await api("POST", keys(), { token, headers, json: { generate: "ES256" } });
      assert.equal(replay.status, 201, replay.text);
      assert.equal(replay.headers.get("idempotent-replayed"), "true");
      assert.equal(replay.body.id, first.body.id);
      assert.deepEqual(Object.keys(replay.body), keyFields);
    });

    await t.step("a private JWK is 400 with the JSON error, and nothing is stored", async () => {
      const pair = await crypto.subtle.generateKey({ name: "Ed25519" }, true, [
        "sign",
        "verify",
      ]) as CryptoKeyPair;
      const priv = await crypto.subtle.exportKey("jwk", pair.privateKey);
      const before = (await api("GET", keys(), { token })).body.data.length;
      const res = await api("POST", keys(), { token, json: { jwk: priv } });
      assertError(res, 400, "invalid_argument", "jwk");
      assert.match(res.body.error.message, /private members \(d\).*only the public key/);
      assert.ok(!res.text.includes(priv.d!), "the private value is not echoed");
      assert.equal((await api("GET", keys(), { token })).body.data.length, before);
      // Other refusals, as JSON errors naming the field.
      assertError(
        await api("POST", keys(), { token, json: { jwk: [priv.x] } }),
        400,
        "invalid_argument",
        "jwk",
      );
      assertError(
        await api("POST", keys(), {
          token,
          json: { jwk: { kty: priv.kty, crv: priv.crv, x: priv.x }, generate: "ES256" },
        }),
        400,
        "invalid_argument",
        "generate",
      );
      assertError(
        await api("POST", keys(), { token, json: { generate: "RS256" } }),
        400,
        "invalid_argument",
        "generate",
      );
      assertError(
        await api("POST", keys(), { token, json: { jwk: { kty: "RSA", n: "AQAB", e: "AQAB" } } }),
        400,
        "invalid_argument",
        "jwk.n",
      );
      assertError(
        await api("POST", keys(), {
          token,
          json: { jwk: { kty: priv.kty, crv: priv.crv, x: priv.x, kid: "ec-1" } },
        }),
        409,
        "already_exists",
      );
    });

    await t.step("DELETE: 204, then GET and DELETE are 404", async () => {
      const del = await api("DELETE", `${keys()}/${generatedId}`, { token });
      assert.equal(del.status, 204, del.text);
      assert.equal(del.text, "");
      assertError(await api("GET", `${keys()}/${generatedId}`, { token }), 404, "not_found");
      assertError(await api("DELETE", `${keys()}/${generatedId}`, { token }), 404, "not_found");
      assertError(await api("GET", `${keys()}/key_nonsense`, { token }), 404, "not_found");
      const list = await api("GET", keys(), { token });
      assert.ok(list.body.data.every((k: { id: string }) => k.id !== generatedId));
    });

    await t.step("a public client holds no key: 409 failed_precondition", async () => {
      const spa = await api("POST", "/v1/projects/k1/clients", {
        token,
        json: { name: "spa2", type: "spa", redirect_uris: ["https://app.example.com/cb"] },
      });
      assertError(
        await api("POST", `/v1/projects/k1/clients/${spa.body.id}/keys`, {
          token,
          json: { generate: "EdDSA" },
        }),
        409,
        "failed_precondition",
      );
    });

    // Every line every process wrote, once they have exited: no private part in any.
    await stack.stop();
    stopped = true;
    await new Promise((r) => setTimeout(r, 100));
    const lines = Object.values(stack.procs).flatMap((p) => p.lines);
    assert.ok(lines.some((l) => l.includes("CreateClientKey")), "the registry logged the RPCs");
    assert.equal(privateParts.length, 2);
    for (const d of privateParts) {
      assert.deepEqual(lines.filter((l) => l.includes(d)), [], "a private key in a log line");
    }
  } finally {
    if (!stopped) await stack.stop();
  }
});
