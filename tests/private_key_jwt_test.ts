/**
 * `private_key_jwt` end to end: real gateway, oauth-registry and token-service processes (two
 * replicas of it) over a real Postgres. A stock client (oauth4webapi's PrivateKeyJwt, through
 * discovery) gets, introspects and revokes tokens with a key the registry generated and with one
 * uploaded; hostile assertions made with jose (wrong audience, expired, replayed in the other
 * replica, `alg: none`, HS256 keyed with the public key) are refused alike; a client registered
 * for a key cannot use a secret, nor the other way round; a key's use shows in its
 * `last_used_at`, and a deleted key stops verifying.
 */

import assert from "node:assert/strict";
import * as jose from "jose";
import * as oauth from "oauth4webapi";
import { TokenService } from "../gen/registry/token/v1/token_service_pb.ts";
import {
  freePort,
  grpcTestClient,
  httpClient,
  spawn,
  startStack,
  until,
  waitReady,
} from "../lib/testing/mod.ts";

const insecure = { [oauth.allowInsecureRequests]: true };
const jwtBearer = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

Deno.test("private_key_jwt with a stock client, and every hostile assertion refused", async (t) => {
  const stack = await startStack();
  const grpcPort = freePort();
  const httpPort = freePort();
  const replica = spawn("services/token/main.ts", {
    ...stack.envOf("token"),
    GRPC_PORT: `${grpcPort}`,
    HTTP_PORT: `${httpPort}`,
  });
  const api = httpClient(stack.gatewayUrl);
  const adminToken = await stack.token({ sub: "admin", projects: ["kp1"] });
  const admin = (method: string, path: string, json?: unknown) =>
    api(method, path, { token: adminToken, ...(json === undefined ? {} : { json }) });
  const issuer = new URL(stack.gatewayUrl);
  try {
    await waitReady(`http://127.0.0.1:${httpPort}`);
    await admin("PATCH", "/v1/projects/kp1/config", {
      application_name: "Keys",
      audience: "external",
    });
    const newClient = async (json: Record<string, unknown>) => {
      const res = await admin("POST", "/v1/projects/kp1/clients", {
        name: "k",
        type: "web",
        ...json,
      });
      assert.equal(res.status, 201, res.text);
      return res.body as { id: string; token_endpoint_auth_method: string };
    };
    const keyed = await newClient({ token_endpoint_auth_method: "private_key_jwt" });
    assert.equal(keyed.token_endpoint_auth_method, "private_key_jwt");
    const secretClient = await newClient({});
    assert.equal(secretClient.token_endpoint_auth_method, "client_secret_basic");
    const secret = await admin("POST", `/v1/projects/kp1/clients/${secretClient.id}/secrets`);
    assert.equal(secret.status, 201, secret.text);

    // A key the registry generates (its private part returned once) and one uploaded.
    const generated = await admin("POST", `/v1/projects/kp1/clients/${keyed.id}/keys`, {
      generate: "EdDSA",
    });
    assert.equal(generated.status, 201, generated.text);
    assert.ok(generated.body.private_jwk?.d, "the generated key's private part, once");
    const edKey = await jose.importJWK(generated.body.private_jwk, "EdDSA") as CryptoKey;
    const es = await jose.generateKeyPair("ES256", { extractable: true });
    const uploaded = await admin("POST", `/v1/projects/kp1/clients/${keyed.id}/keys`, {
      jwk: await jose.exportJWK(es.publicKey),
    });
    assert.equal(uploaded.status, 201, uploaded.text);
    assert.equal(
      uploaded.body.kid,
      await jose.calculateJwkThumbprint(await jose.exportJWK(es.publicKey)),
    );

    let as!: oauth.AuthorizationServer;
    const client: oauth.Client = { client_id: keyed.id };
    await t.step("discovery lists private_key_jwt and its algorithms", async () => {
      as = await oauth.processDiscoveryResponse(
        issuer,
        await oauth.discoveryRequest(issuer, { algorithm: "oauth2", ...insecure }),
      );
      for (const endpoint of ["token", "introspection", "revocation"] as const) {
        assert.ok(as[`${endpoint}_endpoint_auth_methods_supported`]?.includes("private_key_jwt"));
        assert.deepEqual(as[`${endpoint}_endpoint_auth_signing_alg_values_supported`], [
          "EdDSA",
          "Ed25519",
          "ES256",
          "RS256",
        ]);
      }
    });

    const grant = async (auth: oauth.ClientAuth) =>
      await oauth.processClientCredentialsResponse(
        as,
        client,
        await oauth.clientCredentialsGrantRequest(
          as,
          client,
          auth,
          new URLSearchParams(),
          insecure,
        ),
      );

    let token = "";
    await t.step(
      "oauth4webapi's PrivateKeyJwt: a grant, introspection and revocation",
      async () => {
        // oauth4webapi signs an Ed25519 key as `Ed25519` (RFC 9864), a P-256 key as ES256.
        for (
          const key of [{ key: edKey, kid: generated.body.kid }, {
            key: es.privateKey as CryptoKey,
          }]
        ) {
          const body = await grant(oauth.PrivateKeyJwt(key));
          assert.equal(body.token_type, "bearer");
          token = body.access_token;
        }
        const auth = oauth.PrivateKeyJwt({ key: edKey });
        const introspection = await oauth.processIntrospectionResponse(
          as,
          client,
          await oauth.introspectionRequest(as, client, auth, token, insecure),
        );
        assert.equal(introspection.active, true);
        assert.equal(introspection.client_id, keyed.id);
        await oauth.processRevocationResponse(
          await oauth.revocationRequest(as, client, auth, token, insecure),
        );
        const after = await oauth.processIntrospectionResponse(
          as,
          client,
          await oauth.introspectionRequest(as, client, auth, token, insecure),
        );
        assert.equal(after.active, false);
      },
    );

    const post = (form: Record<string, string>, headers: Record<string, string> = {}) =>
      fetch(as.token_endpoint!, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
        body: new URLSearchParams({ grant_type: "client_credentials", ...form }),
      }).then(async (res) => ({ status: res.status, body: await res.json() }));
    let jtis = 0;
    const now = () => Math.floor(Date.now() / 1000);
    const assertion = (
      claims: Record<string, unknown> = {},
      header: jose.JWTHeaderParameters = { alg: "EdDSA" },
      key: Parameters<jose.SignJWT["sign"]>[0] = edKey,
    ) =>
      new jose.SignJWT({
        iss: keyed.id,
        sub: keyed.id,
        aud: stack.gatewayUrl,
        jti: `t-${++jtis}-${crypto.randomUUID()}`,
        iat: now(),
        exp: now() + 60,
        ...claims,
      }).setProtectedHeader(header).sign(key);
    const withAssertion = async (a: string | Promise<string>) =>
      await post({ client_assertion_type: jwtBearer, client_assertion: await a });

    await t.step(
      "hostile assertions: each 401 invalid_client, all with one description",
      async () => {
        const wrongSecret = await post({ client_id: secretClient.id, client_secret: "ocs_wrong" });
        assert.equal(wrongSecret.status, 401);
        const description = wrongSecret.body.error_description;
        const other = await jose.generateKeyPair("EdDSA");
        const cases: Record<string, Promise<string>> = {
          "wrong aud": assertion({ aud: "https://elsewhere.example" }),
          "expired": assertion({ exp: now() - 120, iat: now() - 180 }),
          "exp too far ahead": assertion({ exp: now() + 3600 }),
          "no jti": assertion({ jti: undefined }),
          "another key": assertion({}, { alg: "EdDSA" }, other.privateKey),
          "another client's sub": assertion({ sub: secretClient.id, iss: secretClient.id }),
          "alg none": Promise.resolve(
            new jose.UnsecuredJWT({
              iss: keyed.id,
              sub: keyed.id,
              aud: stack.gatewayUrl,
              jti: "n",
              exp: now() + 60,
            })
              .encode(),
          ),
          "HS256 keyed with the public key": assertion(
            {},
            { alg: "HS256" },
            new TextEncoder().encode(JSON.stringify(generated.body.jwk)),
          ),
        };
        for (const [name, a] of Object.entries(cases)) {
          const res = await withAssertion(a);
          assert.equal(res.status, 401, `${name}: ${JSON.stringify(res.body)}`);
          assert.equal(res.body.error, "invalid_client", name);
          assert.equal(res.body.error_description, description, name);
        }
        // A good one passes, so the refusals above are the checks' doing.
        assert.equal((await withAssertion(assertion())).status, 200);
      },
    );

    await t.step(
      "claims that are not UTF-8 are refused like any malformed assertion (RFC 7519 7.2)",
      async () => {
        const signed = (byte: number) => {
          const claims = new TextEncoder().encode(JSON.stringify({
            iss: keyed.id,
            sub: keyed.id,
            aud: stack.gatewayUrl,
            jti: `utf8-${crypto.randomUUID()}-@`,
            iat: now(),
            exp: now() + 60,
          }));
          claims[claims.indexOf(0x40)] = byte;
          return new jose.CompactSign(claims).setProtectedHeader({ alg: "EdDSA" }).sign(edKey);
        };
        // The control: the same construction, with an ASCII byte there.
        assert.equal((await withAssertion(signed(0x41))).status, 200);
        for (const byte of [0xff, 0xfe]) {
          const res = await withAssertion(signed(byte));
          assert.deepEqual([res.status, res.body.error], [401, "invalid_client"], `${byte}`);
          assert.equal(res.body.error_description, "Client authentication failed");
        }
      },
    );

    await t.step(
      "an unsupported client_assertion_type is 401 invalid_client, without a challenge",
      async () => {
        const endpoints = {
          token: { grant_type: "client_credentials" },
          introspect: { token: "x" },
          revoke: { token: "x" },
        };
        for (const [path, form] of Object.entries(endpoints)) {
          for (
            const type of [
              "urn:ietf:params:oauth:client-assertion-type:saml2-bearer",
              "private_key_jwt",
            ]
          ) {
            const res = await fetch(`${stack.gatewayUrl}/oauth2/${path}`, {
              method: "POST",
              headers: { "content-type": "application/x-www-form-urlencoded" },
              body: new URLSearchParams({
                ...form,
                client_assertion_type: type,
                client_assertion: await assertion(),
              }),
            });
            const body = await res.json();
            const what = `${path}, ${type}: ${JSON.stringify(body)}`;
            assert.deepEqual([res.status, body.error], [401, "invalid_client"], what);
            assert.equal(typeof body.error_description, "string", what);
            // The client used no Authorization header: no scheme for a challenge to name.
            assert.equal(res.headers.get("www-authenticate"), null, what);
            assert.equal(res.headers.get("cache-control"), "no-store", what);
          }
        }
        // An assertion without its type is a request that lacks a parameter.
        const untyped = await post({ client_assertion: await assertion() });
        assert.deepEqual([untyped.status, untyped.body.error], [400, "invalid_request"]);
      },
    );

    await t.step(
      "aud may be the URL of the endpoint called (RFC 9126 2 for PAR), not another's",
      async () => {
        const patched = await admin("PATCH", `/v1/projects/kp1/clients/${keyed.id}`, {
          redirect_uris: ["https://keys.example/cb"],
        });
        assert.equal(patched.status, 200, patched.text);
        const at = (path: string, form: Record<string, string>, aud: string) =>
          assertion({ aud }).then((a) =>
            fetch(`${stack.gatewayUrl}${path}`, {
              method: "POST",
              headers: { "content-type": "application/x-www-form-urlencoded" },
              body: new URLSearchParams({
                ...form,
                client_assertion_type: jwtBearer,
                client_assertion: a,
              }),
            })
          ).then(async (res) => ({ status: res.status, body: await res.json() }));
        const par = {
          response_type: "code",
          client_id: keyed.id,
          redirect_uri: "https://keys.example/cb",
          scope: "read",
          code_challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
          code_challenge_method: "S256",
        };
        const pushed = await at("/oauth2/par", par, `${stack.gatewayUrl}/oauth2/par`);
        assert.equal(pushed.status, 201, JSON.stringify(pushed.body));
        assert.match(pushed.body.request_uri, /^urn:ietf:params:oauth:request_uri:/);
        const introspect = `${stack.gatewayUrl}/oauth2/introspect`;
        const introspected = await at("/oauth2/introspect", { token: "x" }, introspect);
        assert.equal(introspected.status, 200, JSON.stringify(introspected.body));
        assert.equal(introspected.body.active, false);
        // Another endpoint's URL is no audience of this one.
        const elsewhere = await at(
          "/oauth2/token",
          { grant_type: "client_credentials" },
          introspect,
        );
        assert.equal(elsewhere.status, 401, JSON.stringify(elsewhere.body));
        assert.equal(elsewhere.body.error, "invalid_client");
      },
    );

    await t.step("a jti is used once, across replicas (Postgres decides)", async () => {
      const a = await assertion();
      const replicas = [grpcTestClient(stack.tokenGrpc), grpcTestClient(`127.0.0.1:${grpcPort}`)];
      const issue = (i: number) =>
        replicas[i]!.call(TokenService.method.issueToken, {
          client: { clientAssertionType: jwtBearer, clientAssertion: a },
          grantType: "client_credentials",
        }).then(() => "issued", (e: Error) => e.message);
      assert.equal(await issue(0), "issued");
      assert.match(await issue(1), /Client authentication failed/);
      assert.match(await issue(0), /Client authentication failed/);
      for (const r of replicas) r.close();
    });

    await t.step(
      "a client registered for a key cannot use a secret, nor the other way round",
      async () => {
        // The keyed client's secret (secrets may exist; they do not verify).
        const switched = await admin("PATCH", `/v1/projects/kp1/clients/${keyed.id}`, {
          token_endpoint_auth_method: "client_secret_post",
        });
        assert.equal(switched.status, 200, switched.text);
        const s = await admin("POST", `/v1/projects/kp1/clients/${keyed.id}/secrets`);
        assert.equal(s.status, 201, s.text);
        const back = await admin("PATCH", `/v1/projects/kp1/clients/${keyed.id}`, {
          token_endpoint_auth_method: "private_key_jwt",
        });
        assert.equal(back.status, 200, back.text);
        const bySecret = await post({ client_id: keyed.id, client_secret: s.body.secret });
        assert.equal(bySecret.status, 401, JSON.stringify(bySecret.body));
        // A secret client signing an assertion with a key it does not have registered: refused.
        const asOther = await withAssertion(
          assertion({ iss: secretClient.id, sub: secretClient.id }),
        );
        assert.equal(asOther.status, 401);
        // Both ways at once is a malformed request.
        const both = await post({
          client_id: secretClient.id,
          client_secret: secret.body.secret,
          client_assertion_type: jwtBearer,
          client_assertion: await assertion(),
        });
        assert.equal(both.status, 400);
        assert.equal(both.body.error, "invalid_request");
      },
    );

    await t.step("last_used_at shows the key's use; a deleted key stops verifying", async () => {
      const read = await admin(
        "GET",
        `/v1/projects/kp1/clients/${keyed.id}/keys/${generated.body.id}`,
      );
      assert.equal(read.status, 200, read.text);
      assert.ok(read.body.last_used_at, "the generated key was used");
      assert.equal(read.body.private_jwk, undefined);
      const deleted = await admin(
        "DELETE",
        `/v1/projects/kp1/clients/${keyed.id}/keys/${generated.body.id}`,
      );
      assert.equal(deleted.status, 204);
      // Every replica drops the key within the promised second; polled, with room for a busy
      // machine.
      await until(
        async () => (await withAssertion(assertion())).status === 401,
        10_000,
        "the deleted key to stop verifying",
      );
      // The uploaded key still works.
      assert.equal(
        (await withAssertion(assertion({}, { alg: "ES256" }, es.privateKey))).status,
        200,
      );
    });
  } finally {
    replica.child.kill("SIGTERM");
    await replica.child.status;
    await stack.stop();
  }
});
