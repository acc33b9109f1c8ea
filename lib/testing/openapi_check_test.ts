/**
 * The response check the tests run on the gateway: each kind of mismatch with the committed
 * document is caught (an undocumented status, a field that is not described, a missing required
 * field, a wrong type, a wrong media type, a missing or bad header), and a response that matches
 * passes.
 */

import assert from "node:assert/strict";
import document from "../../gen/openapi/openapi.json" with { type: "json" };
import { createOpenApiChecker } from "./openapi_check.ts";

const checker = createOpenApiChecker(document);
const json: Record<string, string> = { "content-type": "application/json" };

const client = {
  id: "cli_01jdqk2v3c4x5y6z7a8b9c0d1e",
  project_id: "p1",
  name: "Photo book",
  type: "web",
  redirect_uris: ["https://app.example/cb"],
  javascript_origins: [],
  status: "active",
  created_at: "2026-01-02T03:04:05.678Z",
  updated_at: "2026-01-02T03:04:05.678Z",
  token_endpoint_auth_method: "client_secret_basic",
  dpop_bound_access_tokens: false,
  require_pushed_authorization_requests: false,
  etag: "1234",
};

function check(method: string, path: string, status: number, body: unknown, headers = json) {
  return checker.check(method, path, {
    status,
    headers: new Headers(headers),
    body: body === undefined ? "" : JSON.stringify(body),
  });
}

function problem(outcome: ReturnType<typeof check>): string {
  assert.equal(typeof outcome, "object", `expected a violation, got ${String(outcome)}`);
  return (outcome as { problem: string }).problem;
}

Deno.test("a response that matches the document passes", () => {
  assert.equal(check("GET", "/v1/projects/p1/clients/cli_1", 200, client), "checked");
  assert.equal(check("POST", "/v1/projects/p1/clients", 201, client), "checked");
  assert.equal(check("DELETE", "/v1/projects/p1/clients/cli_1", 204, undefined, {}), "checked");
  const error = { error: { code: "not_found", message: "No such client", details: [] } };
  assert.equal(check("GET", "/v1/projects/p1/clients/cli_1", 404, error), "checked");
  const limited = { ...json, "retry-after": "1" };
  const exhausted = { error: { code: "resource_exhausted", message: "Slow down", details: [] } };
  assert.equal(check("GET", "/v1/installations", 429, exhausted, limited), "checked");
});

Deno.test("each kind of mismatch is a violation", () => {
  const path = "/v1/projects/p1/clients/cli_1";
  assert.match(problem(check("GET", path, 418, client)), /undocumented status 418/);
  assert.match(problem(check("GET", path, 200, { ...client, extra: 1 })), /additional/);
  const { status: _, ...withoutStatus } = client;
  assert.match(problem(check("GET", path, 200, withoutStatus)), /required/);
  assert.match(problem(check("GET", path, 200, { ...client, name: 7 })), /must be string/);
  assert.match(problem(check("GET", path, 200, { ...client, type: "WEB" })), /allowed values/);
  assert.match(
    problem(check("GET", path, 200, { ...client, created_at: "yesterday" })),
    /format/,
  );
  assert.match(problem(check("GET", path, 200, client, { "content-type": "text/plain" })), /type/);
  assert.match(problem(check("DELETE", path, 204, { deleted: true })), /a body where none/);
  const error = { error: { code: "resource_exhausted", message: "Slow down", details: [] } };
  assert.match(problem(check("GET", path, 429, error)), /missing header Retry-After/);
  assert.match(
    problem(check("POST", "/v1/projects/p1/clients", 201, client, {
      ...json,
      "idempotent-replayed": "yes",
    })),
    /header Idempotent-Replayed/,
  );
  assert.match(problem(check("GET", path, 404, { error: { code: "nope" } })), /body/);
});

Deno.test("requests outside the document: only their error body is checked", () => {
  const error = { error: { code: "not_found", message: "No route", details: [] } };
  assert.equal(check("GET", "/v2/nothing", 404, error), "outside");
  assert.equal(
    check("PUT", "/v1/installations", 405, { ...error, error: { ...error.error } }),
    "outside",
  );
  assert.equal(check("GET", "/v1/installations", 400, undefined, {}), "outside");
  assert.match(problem(check("GET", "/v2/nothing", 404, { message: "No route" })), /error body/);
});

Deno.test("a request is refused where the document refuses it, and only there", () => {
  const verdict = (method: string, path: string, body?: unknown, headers = json) =>
    checker.checkRequest({
      method,
      url: new URL(`http://gateway${path}`),
      headers: new Headers(headers),
      body: body === undefined ? "" : typeof body === "string" ? body : JSON.stringify(body),
    });
  const refused = (outcome: ReturnType<typeof verdict>) => {
    assert.notEqual(outcome, "unchecked");
    return (outcome as { refused: string | undefined }).refused;
  };
  const create = "/v1/projects/p1/clients";
  const ok = { name: "App", type: "web", redirect_uris: ["https://app.example/cb"] };
  assert.equal(refused(verdict("POST", create, ok)), undefined);
  assert.equal(refused(verdict("GET", `${create}?limit=5&after=cli_1`)), undefined);
  assert.match(refused(verdict("POST", create, { ...ok, id: "cli_1" }))!, /additional/);
  assert.match(refused(verdict("POST", create, { ...ok, status: "active" }))!, /additional/);
  assert.match(refused(verdict("POST", create, { type: "web" }))!, /required/);
  assert.match(refused(verdict("POST", create, { ...ok, name: "x".repeat(121) }))!, /more than/);
  assert.match(refused(verdict("GET", `${create}?limit=0`))!, /query limit/);
  assert.match(refused(verdict("GET", `${create}?limit=5&limit=`))!, /query limit is repeated/);
  // At the OAuth endpoints a parameter without a value is omitted (RFC 6749 3.1): no repeat.
  const authorize = "/oauth2/authorize?response_type=code&client_id=cli_1&state=s";
  assert.equal(refused(verdict("GET", `${authorize}&state=`)), undefined);
  assert.match(refused(verdict("GET", `${authorize}&state=t`))!, /query state is repeated/);
  // Beside a pushed request's request_uri, only client_id is read (RFC 9126 4).
  const pushed = "/oauth2/authorize?client_id=cli_1&request_uri=urn:x&scope=a&scope=b";
  assert.equal(refused(verdict("GET", pushed)), undefined);
  assert.match(
    refused(verdict("GET", `${pushed}&client_id=cli_2`))!,
    /query client_id is repeated/,
  );
  assert.match(refused(verdict("GET", `${create}?limit=ten`))!, /not a integer/);
  assert.match(refused(verdict("GET", `${create}?order=asc`))!, /order is not described/);
  assert.match(refused(verdict("GET", `${create}?limit=1&limit=2`))!, /repeated/);
  assert.match(refused(verdict("GET", "/v1/projects/-bad/clients"))!, /path project_id/);
  assert.match(refused(verdict("POST", create, "{"))!, /not JSON/);
  assert.match(
    refused(verdict("POST", create, ok, { ...json, "idempotency-key": "" }))!,
    /Idempotency-Key/,
  );
  const form = { "content-type": "application/x-www-form-urlencoded" };
  assert.equal(
    refused(verdict("POST", "/oauth2/token", "grant_type=client_credentials", form)),
    undefined,
  );
  assert.match(refused(verdict("POST", "/oauth2/token", "scope=a", form))!, /grant_type/);
  // A field the form describes comes once; one it does not is ignored however often it comes.
  const twice = "grant_type=client_credentials&scope=a&scope=b";
  assert.match(refused(verdict("POST", "/oauth2/token", twice, form))!, /form scope is repeated/);
  const unknown = "grant_type=client_credentials&foo=1&foo=2";
  assert.equal(refused(verdict("POST", "/oauth2/token", unknown, form)), undefined);
  // An array field is its field repeated (resource indicators, RFC 8707).
  const resources = "grant_type=client_credentials&resource=a&resource=b";
  assert.equal(refused(verdict("POST", "/oauth2/token", resources, form)), undefined);
  assert.equal(verdict("GET", "/v2/nothing"), "unchecked");
});
