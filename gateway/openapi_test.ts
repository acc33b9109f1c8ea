/**
 * The OpenAPI document: the committed one covers every route the gateway serves (the same route
 * table), each with its success and error statuses and the error body; request schemas leave out
 * what the gateway refuses; and `GET /openapi.json` is cacheable (ETag, 304, HEAD).
 */

import assert from "node:assert/strict";
import document from "../gen/openapi/openapi.json" with { type: "json" };
import { CoreService } from "../gen/registry/core/v1/core_service_pb.ts";
import { OAuthRegistryService } from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { TokenService } from "../gen/registry/token/v1/token_service_pb.ts";
import { describeApi, serveOpenApi } from "./openapi.ts";
import { oauthPaths } from "./oauth.ts";
import { buildRoutes } from "./routes.ts";

// deno-lint-ignore no-explicit-any
const doc = document as any;
const services = [OAuthRegistryService, CoreService, TokenService];

Deno.test("the committed document has every route of the gateway, and each its statuses", () => {
  const routes = buildRoutes(services);
  assert.ok(routes.length >= 25, `${routes.length} routes`);
  for (const route of routes) {
    const op = doc.paths[route.template]?.[route.httpMethod.toLowerCase()];
    assert.ok(op, `${route.httpMethod} ${route.template} is described`);
    const success = route.httpMethod === "DELETE"
      ? "204"
      : route.httpMethod === "POST"
      ? "201"
      : "200";
    assert.ok(op.responses[success], `${route.template}: ${success}`);
    for (const status of ["400", "401", "403", "404", "429", "500", "503", "504"]) {
      assert.ok(op.responses[status], `${route.httpMethod} ${route.template}: ${status}`);
    }
    const keyed = (op.parameters ?? []).some((p: { name: string }) => p.name === "Idempotency-Key");
    assert.equal(keyed, route.httpMethod === "POST", `${route.template}: Idempotency-Key`);
    assert.ok(op.description.length > 10, `${route.template} has its proto comment`);
  }
  for (const path of Object.values(oauthPaths)) assert.ok(doc.paths[path], path);
  for (const path of ["/healthz", "/readyz", "/metrics", "/openapi.json", "/docs"]) {
    assert.deepEqual(
      Object.values(doc.paths[path]).map((op) => (op as { security: [] }).security),
      [
        [],
      ],
    );
  }
  for (const name of ["TooManyRequests", "Unavailable"]) {
    assert.equal(doc.components.responses[name].headers["Retry-After"].required, true);
  }
});

Deno.test("request bodies leave out output-only fields, and PATCH bodies immutable ones", () => {
  const { schemas } = doc.components;
  // status is refused by a create (new clients are active), though a PATCH may set it.
  assert.deepEqual(Object.keys(schemas.ClientInput.properties).sort(), [
    "dpop_bound_access_tokens",
    "etag",
    "javascript_origins",
    "name",
    "redirect_uris",
    "require_pushed_authorization_requests",
    "token_endpoint_auth_method",
    "type",
  ]);
  assert.deepEqual(schemas.ClientInput.properties.token_endpoint_auth_method.enum, [
    "client_secret_basic",
    "client_secret_post",
    "private_key_jwt",
    "none",
  ]);
  // A Struct (a key's JWK) is an object, in requests and in responses; a generated key's
  // private_jwk, a oneof member, is written only when set.
  const keyInput = doc.paths["/v1/projects/{project_id}/clients/{client_id}/keys"].post
    .requestBody.content["application/json"].schema;
  assert.deepEqual(keyInput.properties.jwk.type, ["object", "null"]);
  assert.deepEqual(schemas.ClientKey.properties.jwk.type, ["object", "null"]);
  assert.equal(schemas.ClientKey.properties.private_jwk.type, "object");
  assert.ok(!schemas.ClientKey.required.includes("private_jwk"));
  assert.ok(schemas.ClientPatch.properties.status);
  // The services' limits, read from their rules.
  assert.equal(schemas.ClientInput.properties.name.maxLength, 120);
  assert.equal(schemas.ClientInput.properties.redirect_uris.maxItems, 100);
  assert.equal(schemas.ClientInput.properties.redirect_uris.items.maxLength, 2048);
  assert.equal(schemas.RoleInput.properties.permissions.uniqueItems, true);
  assert.deepEqual(schemas.ClientInput.required, ["name", "type"]);
  assert.equal(schemas.ClientPatch.properties.type, undefined);
  assert.equal(schemas.ClientPatch.required, undefined);
  // Responses: every field, always written; nullable ones may be null.
  assert.deepEqual(schemas.Client.required.length, Object.keys(schemas.Client.properties).length);
  assert.deepEqual(schemas.OAuthConfig.properties.logo_uri.type, ["string", "null"]);
  assert.deepEqual(schemas.Client.properties.type.enum, ["web", "spa", "native"]);
  // A oneof member is written only when set: not required, and never null.
  assert.ok(!schemas.ClientSecret.required.includes("secret"));
  assert.equal(schemas.ClientSecret.properties.secret.type, "string");
  for (const schema of Object.values(schemas) as { additionalProperties?: boolean }[]) {
    if ((schema as { type?: string }).type === "object" && schema !== schemas.OAuthError) {
      assert.equal(schema.additionalProperties, false);
    }
  }
});

Deno.test("the document is built from the descriptors and the comments given", () => {
  const built = describeApi(services, {
    version: "9.9.9",
    comments: (desc) => `About ${desc.name}.`,
  }) as typeof doc;
  assert.equal(built.info.version, "9.9.9");
  assert.equal(built.paths["/v1/installations"].post.summary, "About ConsentInstallation");
  assert.deepEqual(Object.keys(built.paths).sort(), Object.keys(doc.paths).sort());
  assert.deepEqual(
    Object.keys(built.components.schemas).sort(),
    Object.keys(doc.components.schemas).sort(),
  );
});

Deno.test("GET /openapi.json: the document with an ETag; 304 when it matches; HEAD", async () => {
  const serve = serveOpenApi(document);
  const url = new URL("http://gateway/openapi.json");
  const res = (await serve(new Request(url), url))!;
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("content-type"), "application/json");
  assert.deepEqual(await res.json(), document);
  const etag = res.headers.get("etag")!;
  assert.match(etag, /^"[0-9a-f]{32}"$/);
  const again = (await serve(new Request(url, { headers: { "if-none-match": etag } }), url))!;
  assert.equal(again.status, 304);
  assert.equal(await again.text(), "");
  const stale = (await serve(new Request(url, { headers: { "if-none-match": '"x"' } }), url))!;
  assert.equal(stale.status, 200);
  await stale.body?.cancel();
  const head = (await serve(new Request(url, { method: "HEAD" }), url))!;
  assert.equal(head.status, 200);
  assert.equal(await head.text(), "");
  assert.equal(await serve(new Request(url, { method: "POST" }), url), undefined);
  const other = new URL("http://gateway/openapi.yaml");
  assert.equal(await serve(new Request(other), other), undefined);
});
