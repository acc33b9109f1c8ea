/**
 * The authorization server end to end: real gateway, oauth-registry and token-service processes
 * over a real Postgres, driven by a stock OAuth client (panva's oauth4webapi) through discovery,
 * by raw HTTP where a stock client would not send what is tested, and by a stock gRPC client
 * (@grpc/grpc-js) on the token service's own port.
 */

import assert from "node:assert/strict";
import { decodeProtectedHeader } from "jose";
import * as oauth from "oauth4webapi";
import { TokenService } from "../gen/registry/token/v1/token_service_pb.ts";
import {
  grpcFailure,
  grpcTestClient,
  httpClient,
  propagated,
  startStack,
} from "../lib/testing/mod.ts";

const insecure = { [oauth.allowInsecureRequests]: true };

Deno.test("client_credentials, introspection and revocation with a stock OAuth client", async (t) => {
  const stack = await startStack();
  const api = httpClient(stack.gatewayUrl);
  const adminToken = await stack.token({ sub: "admin", projects: ["tp1", "tp2"] });
  const admin = {
    patch: (path: string, json: unknown) => api("PATCH", path, { token: adminToken, json }),
    post: (path: string, json: unknown) => api("POST", path, { token: adminToken, json }),
  };
  const issuer = new URL(stack.gatewayUrl);
  try {
    // Two projects, each with a web client and a secret.
    const clients: Record<string, { id: string; secret: string }> = {};
    for (const [name, project] of [["a", "tp1"], ["b", "tp1"], ["other", "tp2"]] as const) {
      await admin.patch(`/v1/projects/${project}/config`, {
        application_name: `App ${project}`,
        audience: "external",
      });
      const client = await admin.post(`/v1/projects/${project}/clients`, {
        name: `client ${name}`,
        type: "web",
        redirect_uris: ["https://app.example.com/cb"],
      });
      assert.equal(client.status, 201, client.text);
      const secret = await api(
        "POST",
        `/v1/projects/${project}/clients/${client.body.id}/secrets`,
        { token: adminToken },
      );
      assert.equal(secret.status, 201, secret.text);
      clients[name] = { id: client.body.id, secret: secret.body.secret };
    }
    const a = clients.a!;

    let as!: oauth.AuthorizationServer;
    await t.step("discovery (RFC 8414) names the endpoints and what they accept", async () => {
      const res = await oauth.discoveryRequest(issuer, { algorithm: "oauth2", ...insecure });
      as = await oauth.processDiscoveryResponse(issuer, res);
      assert.equal(as.issuer, stack.gatewayUrl);
      assert.equal(as.token_endpoint, `${stack.gatewayUrl}/oauth2/token`);
      assert.equal(as.jwks_uri, `${stack.gatewayUrl}/oauth2/jwks`);
      assert.ok(as.grant_types_supported?.includes("client_credentials"));
      assert.deepEqual(as.token_endpoint_auth_methods_supported, [
        "client_secret_basic",
        "client_secret_post",
        "private_key_jwt",
        "none",
      ]);
      assert.deepEqual(as.introspection_endpoint_auth_methods_supported, [
        "client_secret_basic",
        "client_secret_post",
        "private_key_jwt",
      ]);
      assert.equal(as.authorization_response_iss_parameter_supported, true);
      // A browser app discovers from its own origin: the metadata and the JWK Set are readable
      // from any (CORS `*`, no credentials); they take GET and HEAD only.
      for (const path of ["/.well-known/oauth-authorization-server", "/oauth2/jwks"]) {
        const read = await fetch(`${stack.gatewayUrl}${path}`, {
          headers: { origin: "https://spa.example" },
        });
        await read.body?.cancel();
        assert.equal(read.status, 200, path);
        assert.equal(read.headers.get("access-control-allow-origin"), "*", path);
        assert.equal(read.headers.get("access-control-allow-credentials"), null, path);
        const posted = await fetch(`${stack.gatewayUrl}${path}`, { method: "POST" });
        await posted.body?.cancel();
        assert.equal(posted.status, 405, path);
        assert.equal(posted.headers.get("allow"), "GET, HEAD", path);
      }
    });

    await t.step("the JWK Set holds public Ed25519 keys only, each with a kid", async () => {
      const res = await fetch(as.jwks_uri!);
      assert.equal(res.status, 200);
      const { keys } = await res.json();
      assert.ok(keys.length >= 2, "the signing key and the next one are published");
      for (const key of keys) {
        assert.equal(key.kty, "OKP");
        assert.equal(key.crv, "Ed25519");
        assert.equal(key.alg, "EdDSA");
        assert.equal(typeof key.kid, "string");
        assert.equal(key.d, undefined, "no private part");
      }
    });

    let token = "";
    await t.step(
      "client_credentials with client_secret_basic: an RFC 9068 access token",
      async () => {
        const res = await oauth.clientCredentialsGrantRequest(
          as,
          { client_id: a.id },
          oauth.ClientSecretBasic(a.secret),
          new URLSearchParams({ scope: "read write read" }),
          insecure,
        );
        assert.equal(res.headers.get("cache-control"), "no-store");
        const body = await oauth.processClientCredentialsResponse(as, { client_id: a.id }, res);
        assert.equal(body.token_type, "bearer");
        assert.equal(body.expires_in, 900);
        assert.equal(body.scope, "read write");
        assert.equal(body.refresh_token, undefined);
        token = body.access_token;
        const header = decodeProtectedHeader(token);
        assert.equal(header.alg, "EdDSA");
        assert.equal(header.typ, "at+jwt");
        // A resource server's check with the same stock library: signature through jwks_uri,
        // typ, iss, aud, exp and the required claims of RFC 9068.
        const claims = await oauth.validateJwtAccessToken(
          as,
          new Request("https://api.example.com/", {
            headers: { authorization: `Bearer ${token}` },
          }),
          "tp1",
          insecure,
        );
        assert.equal(claims.sub, a.id);
        assert.equal(claims.client_id, a.id);
        assert.equal(claims.scope, "read write");
        assert.equal(claims.exp - claims.iat, 900);
      },
    );

    await t.step("client_credentials with client_secret_post", async () => {
      const res = await oauth.clientCredentialsGrantRequest(
        as,
        { client_id: a.id },
        oauth.ClientSecretPost(a.secret),
        new URLSearchParams(),
        insecure,
      );
      const body = await oauth.processClientCredentialsResponse(as, { client_id: a.id }, res);
      assert.ok(body.access_token.split(".").length === 3);
      assert.equal(body.scope, undefined);
    });

    await t.step("Basic credentials sent raw, as curl -u sends them, work too", async () => {
      const res = await fetch(as.token_endpoint!, {
        method: "POST",
        headers: {
          authorization: `Basic ${btoa(`${a.id}:${a.secret}`)}`,
          "content-type": "application/x-www-form-urlencoded",
        },
        body: "grant_type=client_credentials",
      });
      assert.equal(res.status, 200, await res.clone().text());
      assert.equal(typeof (await res.json()).access_token, "string");
    });

    await t.step("wrong or missing credentials: 401 invalid_client", async () => {
      const wrong = await fetch(as.token_endpoint!, {
        method: "POST",
        headers: {
          authorization: `Basic ${btoa(`${a.id}:nope`)}`,
          "content-type": "application/x-www-form-urlencoded",
        },
        body: "grant_type=client_credentials",
      });
      assert.equal(wrong.status, 401);
      assert.match(wrong.headers.get("www-authenticate") ?? "", /^Basic /);
      assert.equal(wrong.headers.get("cache-control"), "no-store");
      assert.equal((await wrong.json()).error, "invalid_client");
      const post = await fetch(as.token_endpoint!, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: `grant_type=client_credentials&client_id=${a.id}&client_secret=nope`,
      });
      assert.equal(post.status, 401);
      assert.equal(post.headers.get("www-authenticate"), null);
      assert.equal((await post.json()).error, "invalid_client");
      const none = await fetch(as.token_endpoint!, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: "grant_type=client_credentials",
      });
      assert.equal(none.status, 401);
      assert.equal((await none.json()).error, "invalid_client");
      // An Authorization header is an attempt at HTTP authentication whatever it holds (RFC 6749
      // 5.2): `Basic` alone or another scheme is 401 with the Basic challenge; beside a secret in
      // the form, `Basic` alone is two methods (400), and another scheme is still refused, so the
      // form's credentials never pass in its place.
      const tryHeader = (authorization: string, secret: boolean) =>
        fetch(as.token_endpoint!, {
          method: "POST",
          headers: { authorization, "content-type": "application/x-www-form-urlencoded" },
          body: `grant_type=client_credentials&client_id=${a.id}` +
            (secret ? `&client_secret=${a.secret}` : ""),
        });
      for (
        const [authorization, secret] of [
          ["Basic", false],
          ["Basic ", false],
          [
            "Bearer abc",
            false,
          ],
          ["Bearer abc", true],
          [`Digest username="${a.id}"`, true],
        ] as const
      ) {
        const res = await tryHeader(authorization, secret);
        assert.equal(res.status, 401, authorization);
        assert.match(res.headers.get("www-authenticate") ?? "", /^Basic realm=/, authorization);
        assert.equal((await res.json()).error, "invalid_client", authorization);
      }
      const both = await tryHeader("Basic", true);
      assert.equal(both.status, 400);
      assert.equal((await both.json()).error, "invalid_request");
    });

    await t.step("bad requests: RFC 6749 errors, 400", async () => {
      const basic = `Basic ${btoa(`${a.id}:${a.secret}`)}`;
      const cases: [string, Record<string, string>, string][] = [
        [
          "grant_type=client_credentials",
          { "content-type": "application/json" },
          "invalid_request",
        ],
        ["grant_type=password", {}, "unsupported_grant_type"],
        ["grant_type=made_up", {}, "unsupported_grant_type"],
        ["scope=x", {}, "invalid_request"],
        ["grant_type=client_credentials&scope=a%22b", {}, "invalid_scope"],
        ["grant_type=client_credentials&grant_type=client_credentials", {}, "invalid_request"],
        [`grant_type=client_credentials&client_secret=${a.secret}`, {}, "invalid_request"],
        // A leading byte order mark belongs to the first name (WHATWG forms): no grant_type.
        ["\uFEFFgrant_type=client_credentials", {}, "invalid_request"],
      ];
      for (const [body, headers, error] of cases) {
        const res = await fetch(as.token_endpoint!, {
          method: "POST",
          headers: {
            authorization: basic,
            "content-type": "application/x-www-form-urlencoded",
            ...headers,
          },
          body,
        });
        assert.equal(res.status, 400, body);
        assert.equal(res.headers.get("cache-control"), "no-store");
        const answer = await res.json();
        assert.deepEqual(Object.keys(answer), ["error", "error_description"]);
        assert.equal(answer.error, error, body);
      }
    });

    await t.step("introspection (RFC 7662): active with claims, for the project only", async () => {
      const res = await oauth.introspectionRequest(
        as,
        { client_id: clients.b!.id },
        oauth.ClientSecretBasic(clients.b!.secret),
        token,
        insecure,
      );
      const body = await oauth.processIntrospectionResponse(as, { client_id: clients.b!.id }, res);
      assert.equal(body.active, true);
      assert.equal(body.client_id, a.id);
      assert.equal(body.sub, a.id);
      assert.equal(body.scope, "read write");
      assert.equal(body.iss, stack.gatewayUrl);
      const other = await oauth.processIntrospectionResponse(
        as,
        { client_id: clients.other!.id },
        await oauth.introspectionRequest(
          as,
          { client_id: clients.other!.id },
          oauth.ClientSecretPost(clients.other!.secret),
          token,
          insecure,
        ),
      );
      assert.deepEqual(other, { active: false });
      const junk = await oauth.processIntrospectionResponse(
        as,
        { client_id: a.id },
        await oauth.introspectionRequest(
          as,
          { client_id: a.id },
          oauth.ClientSecretBasic(a.secret),
          "not.a.token",
          insecure,
        ),
      );
      assert.deepEqual(junk, { active: false });
    });

    const introspect = async (value: string) => {
      const res = await oauth.introspectionRequest(
        as,
        { client_id: a.id },
        oauth.ClientSecretBasic(a.secret),
        value,
        insecure,
      );
      return (await oauth.processIntrospectionResponse(as, { client_id: a.id }, res)).active;
    };

    await t.step("revocation (RFC 7009) makes the token inactive at once", async () => {
      assert.equal(await introspect(token), true);
      const res = await oauth.revocationRequest(
        as,
        { client_id: a.id },
        oauth.ClientSecretBasic(a.secret),
        token,
        insecure,
      );
      await oauth.processRevocationResponse(res);
      assert.equal(await introspect(token), false);
      // Unknown tokens are a success too, and change nothing.
      const unknown = await oauth.revocationRequest(
        as,
        { client_id: a.id },
        oauth.ClientSecretBasic(a.secret),
        "nonsense",
        insecure,
      );
      await oauth.processRevocationResponse(unknown);
    });

    await t.step(
      "introspection and revocation without a token: the client's credentials first, then invalid_request",
      async () => {
        for (const endpoint of [as.introspection_endpoint!, as.revocation_endpoint!]) {
          const ask = (authorization: string, body = "") =>
            fetch(endpoint, {
              method: "POST",
              headers: { authorization, "content-type": "application/x-www-form-urlencoded" },
              body,
            });
          // RFC 7009 2.1: the credentials are validated first, whatever the form lacks.
          const wrong = await ask(`Basic ${btoa(`${a.id}:nope`)}`);
          assert.equal(wrong.status, 401, endpoint);
          assert.match(wrong.headers.get("www-authenticate") ?? "", /^Basic /, endpoint);
          assert.equal((await wrong.json()).error, "invalid_client", endpoint);
          for (const body of ["", "token=", "token_type_hint=access_token"]) {
            const res = await ask(`Basic ${btoa(`${a.id}:${a.secret}`)}`, body);
            assert.equal(res.status, 400, `${endpoint} ${body}`);
            assert.equal(res.headers.get("cache-control"), "no-store");
            assert.deepEqual(await res.json(), {
              error: "invalid_request",
              error_description: "token is required",
            });
          }
        }
      },
    );

    await t.step("the revocation is a security event at /v1, with its time filters", async () => {
      const path = "/v1/projects/tp1/security-events";
      const listed = await api("GET", `${path}?since=2000-01-01T00:00:00Z`, { token: adminToken });
      assert.equal(listed.status, 200, listed.text);
      assert.equal(listed.body.has_more, false);
      const revoked = listed.body.data.filter((e: { result: string }) => e.result === "revoked");
      assert.equal(revoked.length, 1, "one event: the unknown token revoked nothing");
      assert.equal(revoked[0].resource, `projects/tp1/clients/${a.id}`);
      assert.equal(revoked[0].method, "registry.token.v1.TokenService/RevokeToken");
      assert.equal(revoked[0].actor.client_id, a.id);
      // Who called, from where, as the gateway saw it (it forwards them as for /v1 calls).
      assert.match(revoked[0].user_agent, /oauth4webapi/);
      assert.equal(revoked[0].source_ip, "127.0.0.1");
      assert.match(revoked[0].request_id, /^[0-9a-f-]{8,}$/);
      assert.ok(!JSON.stringify(listed.body).includes(token), "never the token itself");
      const before = await api("GET", `${path}?until=2000-01-01T00:00:00Z`, { token: adminToken });
      assert.equal(before.status, 200, before.text);
      assert.deepEqual(before.body.data, []);
      const bad = await api("GET", `${path}?since=yesterday`, { token: adminToken });
      assert.equal(bad.status, 400, bad.text);
      assert.equal(bad.body.error.details[0].field, "since");
      const other = await api("GET", "/v1/projects/tp3/security-events", { token: adminToken });
      assert.equal(other.status, 403, other.text);
      // `-`: the failures of client_ids no project has, for a caller of every project (the
      // document's path parameter says so too: the stack's response check holds it to that).
      const everyProject = await stack.token({ sub: "ops", projects: ["*"] });
      const none = await api("GET", "/v1/projects/-/security-events", { token: everyProject });
      assert.equal(none.status, 200, none.text);
      const notEvery = await api("GET", "/v1/projects/-/security-events", { token: adminToken });
      assert.equal(notEvery.status, 403, notEvery.text);
    });

    await t.step("a suspended client's tokens are inactive; it gets no new ones", async () => {
      const b = clients.b!;
      const issued = await oauth.processClientCredentialsResponse(
        as,
        { client_id: b.id },
        await oauth.clientCredentialsGrantRequest(
          as,
          { client_id: b.id },
          oauth.ClientSecretBasic(b.secret),
          new URLSearchParams(),
          insecure,
        ),
      );
      assert.equal(await introspect(issued.access_token), true);
      const suspended = await admin.patch(`/v1/projects/tp1/clients/${b.id}`, {
        status: "suspended",
      });
      assert.equal(suspended.status, 200, suspended.text);
      await propagated(); // the token service keeps clients in memory
      assert.equal(await introspect(issued.access_token), false);
      const again = await fetch(as.token_endpoint!, {
        method: "POST",
        headers: {
          authorization: `Basic ${btoa(`${b.id}:${b.secret}`)}`,
          "content-type": "application/x-www-form-urlencoded",
        },
        body: "grant_type=client_credentials",
      });
      assert.equal(again.status, 401);
      assert.equal((await again.json()).error, "invalid_client");
    });

    await t.step("a stock gRPC client calls the token service directly", async () => {
      const grpc = grpcTestClient(stack.tokenGrpc);
      try {
        const jwks = await grpc.call(TokenService.method.getJwks, {});
        assert.ok(JSON.parse(jwks.jwksJson).keys.length >= 2);
        const issued = await grpc.call(TokenService.method.issueToken, {
          client: { clientId: a.id, clientSecret: a.secret },
          grantType: "client_credentials",
        });
        assert.equal(issued.tokenType, "Bearer");
        const failure = await grpcFailure(
          grpc.call(TokenService.method.issueToken, {
            client: { clientId: a.id, clientSecret: "wrong" },
            grantType: "client_credentials",
          }),
        );
        assert.equal(failure.code, 16); // UNAUTHENTICATED: invalid_client
        // `token` is REQUIRED (RFC 7009 2.1, RFC 7662 2.1): an empty one is no success.
        const client = { clientId: a.id, clientSecret: a.secret };
        for (
          const call of [
            grpc.call(TokenService.method.revokeToken, { client }),
            grpc.call(TokenService.method.introspectToken, { client }),
          ]
        ) {
          const refused = await grpcFailure(call);
          assert.equal(refused.code, 3); // INVALID_ARGUMENT: invalid_request
          assert.equal(refused.details, "token is required");
        }
      } finally {
        grpc.close();
      }
    });
  } finally {
    await stack.stop();
  }
});
