/**
 * End to end through the gateway: real oauth-registry and gateway processes, a real Postgres,
 * HTTP/JSON in and out. Covers every operation of spec 4.1-4.5 and the HTTP contract.
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import { httpClient, type HttpResult } from "../lib/testing/mod.ts";
import { propagated, startStack } from "../lib/testing/mod.ts";

const configKeys = [
  "project_id",
  "application_name",
  "support_email",
  "logo_uri",
  "homepage_uri",
  "privacy_policy_uri",
  "terms_of_service_uri",
  "authorized_domains",
  "audience",
  "publishing_status",
  "created_at",
  "updated_at",
  "secret_max_lifetime_seconds",
  "scopes",
  "etag",
];
const clientKeys = [
  "id",
  "project_id",
  "name",
  "type",
  "redirect_uris",
  "javascript_origins",
  "status",
  "created_at",
  "updated_at",
  "token_endpoint_auth_method",
  "dpop_bound_access_tokens",
  "require_pushed_authorization_requests",
  "etag",
];
const installationKeys = [
  "id",
  "project_id",
  "account_id",
  "principal_id",
  "application_name",
  "scopes",
  "status",
  "authorized_by_id",
  "authorized_at",
  "created_at",
  "revoked_at",
  "etag",
];
const timestamp = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

function assertError(res: HttpResult, status: number, code: string, field?: string): void {
  assert.equal(res.status, status, res.text);
  assert.equal(res.headers.get("content-type"), "application/json");
  assert.deepEqual(Object.keys(res.body), ["error"]);
  assert.deepEqual(Object.keys(res.body.error), ["code", "message", "details"]);
  assert.equal(res.body.error.code, code);
  assert.equal(typeof res.body.error.message, "string");
  assert.ok(res.body.error.message.length > 0);
  if (field !== undefined) {
    assert.ok(
      res.body.error.details.some((d: { field: string }) => d.field === field),
      `expected a violation of ${field}: ${res.text}`,
    );
    for (const d of res.body.error.details) {
      assert.deepEqual(Object.keys(d), ["field", "description"]);
    }
  }
}

Deno.test("the gateway serves the OAuth area end to end", async (t) => {
  const stack = await startStack();
  const api = httpClient(stack.gatewayUrl);
  const admin = await stack.token({ sub: "admin-1", projects: ["p1", "p2"], accountId: "acc-1" });
  const other = await stack.token({ sub: "user-2", projects: ["p9"], accountId: "acc-2" });
  const sql = postgres(stack.databaseUrl, { max: 1, onnotice: () => {} });
  try {
    await t.step("GET /healthz and /readyz answer without a token", async () => {
      assert.equal((await api("GET", "/healthz")).status, 200);
      const ready = await api("GET", "/readyz");
      assert.equal(ready.status, 200);
      assert.equal(ready.body.status, "ready");
    });

    await t.step("a call without a token is 401 with the JSON error body", async () => {
      const res = await api("GET", "/v1/projects/p1/config");
      assertError(res, 401, "unauthenticated");
      // No token, no error to report (RFC 6750 3.1); a token that does not verify is invalid_token.
      assert.equal(res.headers.get("www-authenticate"), "Bearer");
      const bad = await api("GET", "/v1/projects/p1/config", { token: "not.a.jwt" });
      assertError(bad, 401, "unauthenticated");
      assert.equal(bad.headers.get("www-authenticate"), 'Bearer error="invalid_token"');
      const expired = await stack.token({ sub: "admin-1", projects: ["p1"], ttlSeconds: -10 });
      assertError(
        await api("GET", "/v1/projects/p1/config", { token: expired }),
        401,
        "unauthenticated",
      );
    });

    await t.step("a project the token does not list is 403", async () => {
      assertError(
        await api("GET", "/v1/projects/p1/config", { token: other }),
        403,
        "permission_denied",
      );
      assertError(
        await api("POST", "/v1/projects/p1/clients", {
          token: other,
          json: { name: "x", type: "web" },
        }),
        403,
        "permission_denied",
      );
    });

    await t.step("unknown paths are 404 and wrong methods 405, as JSON", async () => {
      assertError(await api("GET", "/v1/nothing", { token: admin }), 404, "not_found");
      assertError(await api("GET", "/v1/projects/p1/config/", { token: admin }), 404, "not_found");
      // An unreserved character percent-encoded is the same URI (RFC 3986 2.3, RFC 9110 4.2.3), in
      // a literal segment as in a variable; an encoded slash is not a separator.
      for (const path of ["/v1/projects/p1/c%6Fnfig", "/%761/projects/p%31/%63onfig"]) {
        // Routed to the config's PATCH, which needs an application_name to create it.
        const res = await api("PATCH", path, { token: admin, json: {} });
        assertError(res, 400, "invalid_argument", "application_name");
      }
      assertError(
        await api("GET", "/v1/projects/p1/config%2F", { token: admin }),
        404,
        "not_found",
      );
      assertError(await api("GET", "/v1/projects%2Fp1/config", { token: admin }), 404, "not_found");
      const res = await api("PUT", "/v1/projects/p1/config", { token: admin, json: {} });
      assertError(res, 405, "unimplemented");
      assert.equal(res.headers.get("allow"), "GET, HEAD, PATCH");
      assertError(
        await api("GET", "/v1/projects/%E0%A4%A/config", { token: admin }),
        400,
        "invalid_argument",
      );
    });

    await t.step(
      "config: a conditional PATCH never creates it; If-None-Match: * creates it only once",
      async () => {
        const owner = await stack.token({ sub: "admin-1", projects: ["cond"] });
        const path = "/v1/projects/cond/config";
        const events = async () =>
          (await sql<{ n: number }[]>`
            select count(*)::int as n from oauth.events where parent = 'cond'`)[0]!.n;
        // No config: If-Match (any value, `*` too) and a body etag are false, so 412 (RFC 9110
        // 13.1.1), and nothing is created.
        for (
          const [headers, json] of [
            [{ "if-match": "*" }, { application_name: "A" }],
            [{ "if-match": '"12345"' }, { application_name: "A" }],
            [{ "if-match": '"1", "2"' }, { application_name: "A" }],
            [{}, { application_name: "A", etag: "12345" }],
            [{ "if-none-match": '"1"', "if-match": "*" }, { application_name: "A" }],
          ] as const
        ) {
          assertError(await api("PATCH", path, { token: owner, headers, json }), 412, "aborted");
        }
        assertError(await api("GET", path, { token: owner }), 404, "not_found");
        assert.equal(await events(), 0, "no event");

        // "Only if absent", twice at once: one creates it, the other is 412 (not overwritten).
        const racers = await Promise.all(["first", "second"].map((name) =>
          api("PATCH", path, {
            token: owner,
            headers: { "if-none-match": "*" },
            json: { application_name: name },
          })
        ));
        assert.deepEqual(racers.map((r) => r.status).sort(), [200, 412], racers[0]!.text);
        assertError(racers.find((r) => r.status === 412)!, 412, "aborted");
        const winner = racers.find((r) => r.status === 200)!;
        const current = await api("GET", path, { token: owner });
        assert.equal(current.body.application_name, winner.body.application_name);
        assert.equal(current.headers.get("etag"), winner.headers.get("etag"));
        assert.equal(await events(), 1, "one event: the creation");

        // Now it exists: `*`, or a tag naming its version (weak comparison), is false.
        const etag = current.headers.get("etag")!;
        for (const tags of ["*", etag, `W/${etag}`, `"stale", ${etag}`]) {
          assertError(
            await api("PATCH", path, {
              token: owner,
              headers: { "if-none-match": tags },
              json: { application_name: "Changed" },
            }),
            412,
            "aborted",
          );
        }
        assert.equal((await api("GET", path, { token: owner })).headers.get("etag"), etag);
        assert.equal(await events(), 1);
        // A tag that is not its version: true, the change is made.
        const changed = await api("PATCH", path, {
          token: owner,
          headers: { "if-none-match": '"stale"' },
          json: { application_name: "Changed" },
        });
        assert.equal(changed.status, 200, changed.text);
        assert.equal(changed.body.application_name, "Changed");
        assert.equal(await events(), 2);
        // If-Match: * holds for whatever version is there, also one that changes meanwhile: the
        // write decides it, not a read before it. Each of these PATCHes is a 200.
        const anyVersion = await Promise.all(
          ["Any 1", "Any 2", "Any 3"].map((name) =>
            api("PATCH", path, {
              token: owner,
              headers: { "if-match": "*" },
              json: { application_name: name },
            })
          ),
        );
        assert.deepEqual(anyVersion.map((r) => r.status), [200, 200, 200], anyVersion[0]!.text);
        assert.equal(await events(), 5);
        // A quoted `"*"` is an entity tag (RFC 9110 8.8.3), never the wildcard; a tag longer than
        // any etag, or with a comma in it (etagc allows one), is as well-formed and as false.
        const before = (await api("GET", path, { token: owner })).headers.get("etag");
        for (const tags of ['"*"', `"${"a".repeat(65)}"`, '"a,b"', '"a,b", W/"*"']) {
          assertError(
            await api("PATCH", path, {
              token: owner,
              headers: { "if-match": tags },
              json: { application_name: "Quoted" },
            }),
            412,
            "aborted",
          );
        }
        assert.equal((await api("GET", path, { token: owner })).headers.get("etag"), before);
        assert.equal(await events(), 5);
        // In If-None-Match a tag with a comma is one tag, not two halves of a malformed list.
        const commaTag = await api("PATCH", path, {
          token: owner,
          headers: { "if-none-match": '"a,b"' },
          json: { application_name: "Comma" },
        });
        assert.equal(commaTag.status, 200, commaTag.text);
        assert.equal(await events(), 6);
      },
    );

    await t.step("config: GET before creation is 404; PATCH creates it with defaults", async () => {
      assertError(await api("GET", "/v1/projects/p1/config", { token: admin }), 404, "not_found");
      assertError(
        await api("PATCH", "/v1/projects/p1/config", {
          token: admin,
          json: { audience: "internal" },
        }),
        400,
        "invalid_argument",
        "application_name",
      );
      const res = await api("PATCH", "/v1/projects/p1/config", {
        token: admin,
        json: { application_name: "Demo" },
      });
      assert.equal(res.status, 200, res.text);
      assert.deepEqual(Object.keys(res.body), configKeys);
      assert.match(res.body.etag, /^[0-9a-f]{16}$/);
      assert.equal(res.headers.get("etag"), `"${res.body.etag}"`, "the ETag is the body's etag");
      assert.deepEqual(
        { ...res.body, created_at: undefined, updated_at: undefined, etag: undefined },
        {
          etag: undefined,
          project_id: "p1",
          application_name: "Demo",
          support_email: null,
          logo_uri: null,
          homepage_uri: null,
          privacy_policy_uri: null,
          terms_of_service_uri: null,
          authorized_domains: [],
          audience: "external",
          publishing_status: "testing",
          created_at: undefined,
          updated_at: undefined,
          secret_max_lifetime_seconds: 0,
          scopes: [],
        },
      );
      assert.match(res.body.created_at, timestamp);
      const get = await api("GET", "/v1/projects/p1/config", { token: admin });
      assert.equal(get.status, 200);
      assert.deepEqual(get.body, res.body);
    });

    await t.step("config: PATCH changes only the fields it names, and null clears", async () => {
      const set = await api("PATCH", "/v1/projects/p1/config", {
        token: admin,
        json: {
          support_email: "help@example.com",
          logo_uri: "https://example.com/logo.png",
          authorized_domains: ["example.com"],
          audience: "internal",
        },
      });
      assert.equal(set.status, 200, set.text);
      assert.equal(set.body.application_name, "Demo");
      assert.equal(set.body.support_email, "help@example.com");
      assert.equal(set.body.audience, "internal");
      assert.ok(set.body.updated_at >= set.body.created_at);
      const cleared = await api("PATCH", "/v1/projects/p1/config", {
        token: admin,
        json: { support_email: null, audience: "external" },
      });
      assert.equal(cleared.body.support_email, null);
      assert.equal(cleared.body.logo_uri, "https://example.com/logo.png");
      assert.deepEqual(cleared.body.authorized_domains, ["example.com"]);
    });

    await t.step(
      "config: PATCH rejects fields it does not accept and changes nothing",
      async () => {
        const before = (await api("GET", "/v1/projects/p1/config", { token: admin })).body;
        for (
          const [json, field] of [
            [{ publishing_status: "production" }, "publishing_status"],
            [{ project_id: "p2" }, "project_id"],
            [{ created_at: "2026-01-01T00:00:00.000Z" }, "created_at"],
            [{ updated_at: "2026-01-01T00:00:00.000Z" }, "updated_at"],
            [{ colour: "blue" }, "colour"],
            [{ application_name: "New", audience: "everyone" }, "audience"],
            [{ application_name: null }, "application_name"],
            [{ logo_uri: "http://example.com/logo.png" }, "logo_uri"],
            [{ support_email: ".a@example.com" }, "support_email"],
            [{ authorized_domains: ["example.com", "EXAMPLE.com"] }, "authorized_domains"],
          ] as const
        ) {
          assertError(
            await api("PATCH", "/v1/projects/p1/config", { token: admin, json }),
            400,
            "invalid_argument",
            field,
          );
        }
        assert.deepEqual(
          (await api("GET", "/v1/projects/p1/config", { token: admin })).body,
          before,
        );
      },
    );

    await t.step("bodies: malformed JSON, non-objects, wrong content type, oversize", async () => {
      const path = "/v1/projects/p1/config";
      const headers = { "content-type": "application/json" };
      assertError(
        await api("PATCH", path, { token: admin, raw: "{", headers }),
        400,
        "invalid_argument",
      );
      // A member twice, each value good alone: which one a reader takes is up to it (RFC 8259 4),
      // so the body is refused, naming the member, and nothing changes.
      const unchanged = (await api("GET", path, { token: admin })).body;
      assertError(
        await api("PATCH", path, {
          token: admin,
          raw: '{"application_name":"First","application_name":"Second"}',
          headers,
        }),
        400,
        "invalid_argument",
        "application_name",
      );
      assert.deepEqual((await api("GET", path, { token: admin })).body, unchanged);
      assertError(await api("PATCH", path, { token: admin, json: [] }), 400, "invalid_argument");
      assertError(await api("PATCH", path, { token: admin, json: "x" }), 400, "invalid_argument");
      assertError(
        await api("PATCH", path, { token: admin, raw: "null", headers }),
        400,
        "invalid_argument",
      );
      const plain = await api("PATCH", path, {
        token: admin,
        raw: '{"application_name":"x"}',
        headers: { "content-type": "application/merge-patch+json" },
      });
      assertError(plain, 415, "invalid_argument");
      // What was wanted: RFC 9110 15.5.16, and a PATCH's RFC 5789 2.2.
      assert.equal(plain.headers.get("accept"), "application/json");
      assert.equal(plain.headers.get("accept-patch"), "application/json");
      const big = JSON.stringify({ application_name: "x".repeat(1024 * 1024) });
      assertError(
        await api("PATCH", path, { token: admin, raw: big, headers }),
        413,
        "resource_exhausted",
      );
      assertError(
        await api("PATCH", path, {
          token: admin,
          raw: new Uint8Array([0x7b, 0xff, 0x7d]),
          headers,
        }),
        400,
        "invalid_argument",
      );
      // A content-coded body is refused, never read as identity (RFC 9110 15.5.16).
      const before = (await api("GET", path, { token: admin })).headers.get("etag");
      // The name it has: the steps after this one read it.
      const json = new TextEncoder().encode('{"application_name":"Demo"}');
      const gzip = new Uint8Array(
        await new Response(new Blob([json]).stream().pipeThrough(new CompressionStream("gzip")))
          .arrayBuffer(),
      );
      for (
        const [coding, raw] of [["gzip", gzip], ["gzip", json], ["identity, br", json]] as const
      ) {
        const res = await api("PATCH", path, {
          token: admin,
          raw,
          headers: { ...headers, "content-encoding": coding },
        });
        assertError(res, 415, "invalid_argument");
        assert.equal(res.headers.get("accept-encoding"), "identity");
      }
      assert.equal((await api("GET", path, { token: admin })).headers.get("etag"), before);
      const identity = await api("PATCH", path, {
        token: admin,
        raw: json,
        headers: { ...headers, "content-encoding": "identity" },
      });
      assert.equal(identity.status, 200, identity.text);
      assert.equal(identity.body.application_name, "Demo");
      // JSON is UTF-8 (RFC 8259 8.1): another charset is refused, not read as UTF-8 regardless;
      // utf-8 itself in any case and quoted is taken.
      for (
        const type of [
          "application/json; charset=utf-16",
          "application/json;charset=latin1",
          "application/json; charset=utf-8; charset=latin1",
        ]
      ) {
        const res = await api("PATCH", path, {
          token: admin,
          raw: json,
          headers: { "content-type": type },
        });
        assertError(res, 415, "invalid_argument");
        assert.match(res.body.error.message, /UTF-8/);
      }
      for (const type of ['application/json; charset="UTF-8"', "application/json;charset=utf-8"]) {
        const res = await api("PATCH", path, {
          token: admin,
          raw: json,
          headers: { "content-type": type },
        });
        assert.equal(res.status, 200, res.text);
      }
    });

    await t.step("HEAD is GET without the body, on every resource and list", async () => {
      for (const path of ["/v1/projects/p1/config", "/v1/projects/p1/clients"]) {
        const get = await api("GET", path, { token: admin });
        const head = await api("HEAD", path, { token: admin });
        assert.equal(head.status, 200, path);
        assert.equal(head.text, "");
        for (const name of ["etag", "content-type", "content-length"]) {
          assert.equal(head.headers.get(name), get.headers.get(name), `${path}: ${name}`);
        }
        assert.equal(Number(head.headers.get("content-length")), get.text.length);
      }
      const etag = (await api("GET", "/v1/projects/p1/config", { token: admin })).headers
        .get("etag")!;
      const notModified = await api("HEAD", "/v1/projects/p1/config", {
        token: admin,
        headers: { "if-none-match": etag },
      });
      assert.equal(notModified.status, 304);
      assert.equal(notModified.headers.get("etag"), etag);
      const missing = await api("HEAD", "/v1/projects/p2/clients/cli_01h00000000000000000000000", {
        token: admin,
      });
      assert.equal(missing.status, 404);
      assert.equal(missing.text, "");
      const wrong = await api("PUT", "/v1/projects/p1/clients", { token: admin, json: {} });
      assertError(wrong, 405, "unimplemented");
      assert.equal(wrong.headers.get("allow"), "POST, GET, HEAD");
      // The gateway's own documents and endpoints too: a HEAD's Content-Length is the GET's.
      for (const path of ["/", "/openapi.json", "/healthz", "/readyz"]) {
        const get = await fetch(`${stack.gatewayUrl}${path}`);
        const body = new Uint8Array(await get.arrayBuffer());
        const head = await fetch(`${stack.gatewayUrl}${path}`, { method: "HEAD" });
        assert.equal(head.status, get.status, path);
        assert.equal(await head.text(), "");
        assert.equal(head.headers.get("content-length"), String(body.byteLength), path);
      }
      // A method no resource takes: 501, on a resource's path as on any other.
      for (const path of ["/v1/projects/p1/clients", "/", "/oauth2/token"]) {
        assertError(await api("BREW", path, { token: admin }), 501, "unimplemented");
      }
      const posted = await api("POST", "/healthz", { token: admin, json: {} });
      assertError(posted, 405, "unimplemented");
      assert.equal(posted.headers.get("allow"), "GET, HEAD");
    });

    await t.step("If-Match on GET and POST: evaluated, 412 when false", async () => {
      const path = "/v1/projects/p1/config";
      const got = await api("GET", path, { token: admin });
      const etag = got.headers.get("etag")!;
      for (const tags of ['"stale"', `W/${etag}`, '""']) {
        assertError(
          await api("GET", path, { token: admin, headers: { "if-match": tags } }),
          412,
          "aborted",
        );
      }
      for (const tags of ["*", etag, `"stale", ${etag}`]) {
        const res = await api("GET", path, { token: admin, headers: { "if-match": tags } });
        assert.equal(res.status, 200, tags);
        assert.deepEqual(res.body, got.body);
      }
      assertError(
        await api("GET", path, { token: admin, headers: { "if-match": "not-quoted" } }),
        400,
        "invalid_argument",
      );
      // A list has no etag: a tag never matches it, `*` does; If-None-Match: * is 304 for it.
      const list = "/v1/projects/p1/clients";
      assertError(
        await api("GET", list, { token: admin, headers: { "if-match": etag } }),
        412,
        "aborted",
      );
      assert.equal(
        (await api("GET", list, { token: admin, headers: { "if-match": "*" } })).status,
        200,
      );
      assert.equal(
        (await api("GET", list, { token: admin, headers: { "if-none-match": "*" } })).status,
        304,
      );
      // POST to a collection (no etag): a tag in If-Match, or If-None-Match: *, is 412 and
      // creates nothing; `*` and a tag in If-None-Match hold.
      const count = async () =>
        (await api("GET", `${list}?limit=100`, { token: admin })).body.data.length;
      const before = await count();
      const json = { name: "Conditional", type: "web", redirect_uris: ["https://a.example/cb"] };
      for (const headers of [{ "if-match": '"stale"' }, { "if-none-match": "*" }]) {
        assertError(await api("POST", list, { token: admin, json, headers }), 412, "aborted");
      }
      assert.equal(await count(), before);
      // What the POST would be answered without its condition comes first (RFC 9110 13.2.1): a
      // project not in the token is 403, a client that is not there 404, never 412.
      for (const headers of [{ "if-match": '"stale"' }, { "if-none-match": "*" }]) {
        assertError(
          await api("POST", list, { token: other, json, headers }),
          403,
          "permission_denied",
        );
        assertError(
          await api("POST", `${list}/cli_01h00000000000000000000000/secrets`, {
            token: admin,
            json: {},
            headers,
          }),
          404,
          "not_found",
        );
      }
      for (const headers of [{ "if-match": "*" }, { "if-none-match": '"x"' }]) {
        const res = await api("POST", list, { token: admin, json, headers });
        assert.equal(res.status, 201, res.text);
        assert.equal(
          (await api("DELETE", `${list}/${res.body.id}`, { token: admin })).status,
          204,
        );
      }
    });

    await t.step("hostile input is a 4xx with the JSON error body, never a 5xx", async () => {
      const headers = { "content-type": "application/json" };
      const path = "/v1/projects/p1/config";
      for (
        const raw of [
          '{"application_name":"\\ud800"}',
          '{"application_name":"a\\u0000b"}',
          '{"__proto__":{"admin":true}}',
          "[".repeat(5000) + "]".repeat(5000),
          '{"authorized_domains":' + "[".repeat(100) + "]".repeat(100) + "}",
          '{"application_name":1e309}',
          '{"application_name":"x","application_name":5}',
        ]
      ) {
        const res = await api("PATCH", path, { token: admin, raw, headers });
        assertError(res, 400, "invalid_argument");
      }
      for (
        const p of ["/v1/projects/a%00b/config", "/v1/projects/%ZZ/config", "/v1/installations/%ff"]
      ) {
        const res = await api("GET", p, { token: admin });
        assert.ok(res.status >= 400 && res.status < 500, `${p}: ${res.status}`);
        assert.ok(res.body.error.code);
      }
    });

    let clientId = "";
    await t.step("clients: create needs the project's config", async () => {
      assertError(
        await api("POST", "/v1/projects/p2/clients", {
          token: admin,
          json: { name: "x", type: "web" },
        }),
        404,
        "not_found",
      );
    });

    await t.step("clients: create is 201 with exactly the spec's fields", async () => {
      const res = await api("POST", "/v1/projects/p1/clients", {
        token: admin,
        json: {
          name: "Web app",
          type: "web",
          redirect_uris: ["https://app.example.com/callback", "http://localhost:3000/cb"],
          javascript_origins: ["https://app.example.com"],
        },
      });
      assert.equal(res.status, 201, res.text);
      assert.deepEqual(Object.keys(res.body), clientKeys);
      assert.match(res.body.id, /^cli_[0-9a-z]{26}$/);
      assert.equal(res.body.project_id, "p1");
      assert.equal(res.body.type, "web");
      assert.equal(res.body.status, "active");
      assert.match(res.body.created_at, timestamp);
      // Location: where the created client is read.
      assert.equal(res.headers.get("location"), `/v1/projects/p1/clients/${res.body.id}`);
      const read = await api("GET", res.headers.get("location")!, { token: admin });
      assert.equal(read.body.id, res.body.id);
      clientId = res.body.id;
      const minimal = await api("POST", "/v1/projects/p1/clients", {
        token: admin,
        json: { name: "Native", type: "native" },
      });
      assert.equal(minimal.status, 201);
      assert.deepEqual(minimal.body.redirect_uris, []);
      assert.deepEqual(minimal.body.javascript_origins, []);
    });

    await t.step("clients: create rejects bad input with one violation per field", async () => {
      const res = await api("POST", "/v1/projects/p1/clients", {
        token: admin,
        json: {
          name: "",
          type: "web",
          redirect_uris: ["https://ok.example.com/cb", "https://x.example.com/cb#frag"],
        },
      });
      assertError(res, 400, "invalid_argument", "name");
      assertError(res, 400, "invalid_argument", "redirect_uris[1]");
      assert.equal(res.body.error.details.length, 2);
      const shape = await api("POST", "/v1/projects/p1/clients", {
        token: admin,
        json: { name: 5, type: "server" },
      });
      assertError(shape, 400, "invalid_argument", "name");
      assertError(shape, 400, "invalid_argument", "type");
      for (
        const [json, field] of [
          [
            { name: "x", type: "web", redirect_uris: ["http://example.com/cb"] },
            "redirect_uris[0]",
          ],
          [
            { name: "x", type: "spa", redirect_uris: ["https://*.example.com/cb"] },
            "redirect_uris[0]",
          ],
          [{ name: "x", type: "web", redirect_uris: ["com.example.app:/cb"] }, "redirect_uris[0]"],
          [
            { name: "x", type: "web", javascript_origins: ["https://example.com/path"] },
            "javascript_origins[0]",
          ],
          [
            { name: "x", type: "native", javascript_origins: ["https://example.com"] },
            "javascript_origins",
          ],
          [{ name: "x", type: "web", status: "suspended" }, "status"],
          [{ name: "x", type: "web", id: "cli_x" }, "id"],
          [{ name: "x", type: "web", project_id: "p2" }, "project_id"],
          [{ name: "x" }, "type"],
          [{ type: "web" }, "name"],
          [{ name: 5, type: "web" }, "name"],
          // A name users are shown must look like what it is (on the consent page).
          [{ name: " \u3000 ", type: "web" }, "name"],
          // Hangul fillers, a soft hyphen, a variation selector, the blank Braille pattern: each
          // is drawn as nothing.
          [{ name: "\u3164\u115f\u1160\uffa0", type: "web" }, "name"],
          [{ name: "\u00ad\ufe0f \u2800", type: "web" }, "name"],
          [{ name: "Pay\u202egnp.exe", type: "web" }, "name"],
          [{ name: "\ufeffBank", type: "web" }, "name"],
          [{ name: "B\u200bank", type: "web" }, "name"],
          [
            { name: "x", type: "web", redirect_uris: ["https://example.com/cb?a[]=1"] },
            "redirect_uris[0]",
          ],
        ] as const
      ) {
        assertError(
          await api("POST", "/v1/projects/p1/clients", { token: admin, json }),
          400,
          "invalid_argument",
          field,
        );
      }
      const native = await api("POST", "/v1/projects/p1/clients", {
        token: admin,
        json: {
          name: "x",
          type: "native",
          redirect_uris: ["com.example.app:/oauth2redirect", "http://127.0.0.1/cb"],
        },
      });
      assert.equal(native.status, 201, native.text);
      // What scripts and emoji need stays: ZWJ in a family emoji, RLM beside Hebrew.
      const joined = await api("POST", "/v1/projects/p1/clients", {
        token: admin,
        json: {
          name: "\u{1F468}\u200d\u{1F469}\u200d\u{1F467} \u05e9\u05dc\u05d5\u05dd\u200f",
          type: "web",
        },
      });
      assert.equal(joined.status, 201, joined.text);
    });

    await t.step("clients: GET, PATCH (status, name) and the immutable type", async () => {
      const get = await api("GET", `/v1/projects/p1/clients/${clientId}`, { token: admin });
      assert.equal(get.status, 200);
      assert.equal(get.body.name, "Web app");
      const patched = await api("PATCH", `/v1/projects/p1/clients/${clientId}`, {
        token: admin,
        json: { name: "Renamed", status: "suspended" },
      });
      assert.equal(patched.status, 200, patched.text);
      assert.equal(patched.body.name, "Renamed");
      assert.equal(patched.body.status, "suspended");
      assert.deepEqual(patched.body.redirect_uris, get.body.redirect_uris);
      assertError(
        await api("PATCH", `/v1/projects/p1/clients/${clientId}`, {
          token: admin,
          json: { type: "spa" },
        }),
        400,
        "invalid_argument",
        "type",
      );
      assertError(
        await api("PATCH", `/v1/projects/p1/clients/${clientId}`, {
          token: admin,
          json: { redirect_uris: ["http://evil.example.com/cb"] },
        }),
        400,
        "invalid_argument",
        "redirect_uris[0]",
      );
      const back = await api("PATCH", `/v1/projects/p1/clients/${clientId}`, {
        token: admin,
        json: { status: "active" },
      });
      assert.equal(back.body.status, "active");
      assert.equal(back.body.name, "Renamed");
    });

    await t.step("clients: unknown, malformed and foreign ids are 404", async () => {
      assertError(
        await api("GET", "/v1/projects/p1/clients/cli_nope", { token: admin }),
        404,
        "not_found",
      );
      assertError(
        await api("GET", "/v1/projects/p1/clients/cli_00000000000000000000000000", {
          token: admin,
        }),
        404,
        "not_found",
      );
      await api("PATCH", "/v1/projects/p2/config", {
        token: admin,
        json: { application_name: "Two" },
      });
      assertError(
        await api("GET", `/v1/projects/p2/clients/${clientId}`, { token: admin }),
        404,
        "not_found",
      );
      assertError(
        await api("DELETE", `/v1/projects/p2/clients/${clientId}`, { token: admin }),
        404,
        "not_found",
      );
      // A PATCH of fields whose rules need the client's type reads it first; one of the others
      // (a rename) does not: both find no client of p2.
      for (const json of [{ name: "x" }, { status: "suspended" }, { redirect_uris: [] }]) {
        assertError(
          await api("PATCH", `/v1/projects/p2/clients/${clientId}`, { token: admin, json }),
          404,
          "not_found",
        );
      }
      assert.equal(
        (await api("GET", `/v1/projects/p1/clients/${clientId}`, { token: admin })).body.name,
        "Renamed",
        "p1's client is unchanged",
      );
    });

    await t.step("clients: list pages oldest first with limit, after and has_more", async () => {
      await api("PATCH", "/v1/projects/p2/config", {
        token: admin,
        json: { application_name: "Two" },
      });
      const created: string[] = [];
      for (let i = 0; i < 5; i++) {
        const res = await api("POST", "/v1/projects/p2/clients", {
          token: admin,
          json: { name: `c${i}`, type: "spa" },
        });
        created.push(res.body.id);
      }
      const all = await api("GET", "/v1/projects/p2/clients", { token: admin });
      assert.equal(all.status, 200);
      assert.deepEqual(Object.keys(all.body), ["data", "has_more"]);
      assert.deepEqual(all.body.data.map((c: { id: string }) => c.id), created);
      assert.equal(all.body.has_more, false);
      const seen: string[] = [];
      let after = "";
      for (;;) {
        const page = await api(
          "GET",
          `/v1/projects/p2/clients?limit=2${after ? `&after=${after}` : ""}`,
          { token: admin },
        );
        assert.equal(page.status, 200, page.text);
        seen.push(...page.body.data.map((c: { id: string }) => c.id));
        assert.equal(page.body.has_more, seen.length < 5);
        if (!page.body.has_more) break;
        after = page.body.data.at(-1).id;
      }
      assert.deepEqual(seen, created);
      // A cursor naming a deleted client still works.
      assert.equal(
        (await api("DELETE", `/v1/projects/p2/clients/${created[1]}`, { token: admin })).status,
        204,
      );
      const rest = await api("GET", `/v1/projects/p2/clients?after=${created[1]}`, {
        token: admin,
      });
      assert.deepEqual(rest.body.data.map((c: { id: string }) => c.id), created.slice(2));
    });

    await t.step("clients: bad list queries are 400", async () => {
      for (
        const [query, field] of [
          ["limit=0", "limit"],
          ["limit=101", "limit"],
          ["limit=abc", "limit"],
          ["limit=1.5", "limit"],
          ["after=cli_00000000000000000000000000", "after"],
          [`after=${clientId}`, "after"], // a client of another project's list
          ["after=nonsense", "after"],
          ["sort=name", "sort"],
          ["limit=1&limit=2", "limit"],
        ]
      ) {
        assertError(
          await api("GET", `/v1/projects/p2/clients?${query}`, { token: admin }),
          400,
          "invalid_argument",
          field,
        );
      }
      // Each parameter is named once, however often it came.
      const many = await api(
        "GET",
        "/v1/projects/p2/clients?sort=a&sort=b&limit=1&limit=2&limit=3",
        {
          token: admin,
        },
      );
      assert.equal(many.status, 400);
      assert.deepEqual(
        many.body.error.details,
        [
          { field: "sort", description: "unknown query parameter" },
          { field: "limit", description: "must be given at most once" },
        ],
      );
      const hundred = await api("GET", "/v1/projects/p2/clients?limit=100", { token: admin });
      assert.equal(hundred.status, 200);
      const one = await api("GET", "/v1/projects/p2/clients?limit=1", { token: admin });
      assert.equal(one.body.data.length, 1);
      assert.equal(one.body.has_more, true);
    });

    let secret = "";
    let secretId = "";
    await t.step("secrets: create returns the plaintext once; list never does", async () => {
      const res = await api("POST", `/v1/projects/p1/clients/${clientId}/secrets`, {
        token: admin,
      });
      assert.equal(res.status, 201, res.text);
      assert.deepEqual(Object.keys(res.body), [
        "id",
        "client_id",
        "secret_hint",
        "created_at",
        "expires_at",
        "last_used_at",
        "status",
        "secret",
        "etag",
      ]);
      assert.match(res.body.secret, /^ocs_[A-Za-z0-9_-]{43}$/);
      assert.equal(res.headers.get("cache-control"), "no-store", "the plaintext is cached nowhere");
      assert.equal(res.body.client_id, clientId);
      // A bodiless create: no expiry (the project sets no maximum), never used, active.
      assert.equal(res.body.expires_at, null);
      assert.equal(res.body.last_used_at, null);
      assert.equal(res.body.status, "active");
      assert.equal(res.body.secret_hint, `ocs_****${res.body.secret.slice(-4)}`);
      secret = res.body.secret;
      secretId = res.body.id;
      const list = await api("GET", `/v1/projects/p1/clients/${clientId}/secrets`, {
        token: admin,
      });
      assert.equal(list.status, 200);
      assert.equal(list.headers.get("cache-control"), null);
      assert.deepEqual(Object.keys(list.body), ["data", "has_more"]);
      assert.equal(list.body.has_more, false);
      assert.deepEqual(Object.keys(list.body.data[0]), [
        "id",
        "client_id",
        "secret_hint",
        "created_at",
        "expires_at",
        "last_used_at",
        "status",
        "etag",
      ]);
      assert.ok(!list.text.includes(secret));
      assertError(
        await api("GET", `/v1/projects/p1/clients/${clientId}/secrets?limit=5`, { token: admin }),
        400,
        "invalid_argument",
        "limit",
      );
      assertError(
        await api("POST", `/v1/projects/p1/clients/${clientId}/secrets`, {
          token: admin,
          json: { secret: "mine" },
        }),
        400,
        "invalid_argument",
      );
    });

    await t.step("secrets: DELETE evaluates If-Match lists and If-None-Match", async () => {
      // A secret has no GET of its own: the gateway reads its version from the client's list.
      const path = `/v1/projects/p1/clients/${clientId}/secrets`;
      const made = await api("POST", path, { token: admin });
      assert.equal(made.status, 201, made.text);
      const etag = made.headers.get("etag")!;
      const item = `${path}/${made.body.id}`;
      for (
        const headers of [
          { "if-match": `"stale", W/${etag}` },
          { "if-none-match": etag },
          { "if-none-match": `"stale", W/${etag}` },
          { "if-none-match": "*" },
          { "if-match": etag, "if-none-match": etag },
        ]
      ) {
        assertError(await api("DELETE", item, { token: admin, headers }), 412, "aborted");
      }
      const listed = async () =>
        (await api("GET", path, { token: admin })).body.data.some((s: { id: string }) =>
          s.id === made.body.id
        );
      assert.ok(await listed(), "still there");
      const deleted = await api("DELETE", item, {
        token: admin,
        headers: { "if-match": `"stale", ${etag}`, "if-none-match": '"other"' },
      });
      assert.equal(deleted.status, 204, deleted.text);
      assert.ok(!(await listed()));
      // Gone: the precondition is not evaluated, the DELETE is 404 as without it.
      assertError(
        await api("DELETE", item, { token: admin, headers: { "if-none-match": "*" } }),
        404,
        "not_found",
      );
    });

    await t.step(
      "secrets: an expiry, as a time or a lifetime; never both, never past",
      async () => {
        const path = `/v1/projects/p1/clients/${clientId}/secrets`;
        const create = (json: unknown) => api("POST", path, { token: admin, json });
        const timed = await create({ lifetime_seconds: 3600 });
        assert.equal(timed.status, 201, timed.text);
        const lifetime = Date.parse(timed.body.expires_at) - Date.parse(timed.body.created_at);
        assert.ok(Math.abs(lifetime - 3_600_000) < 60_000, timed.text);
        assert.match(timed.body.expires_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
        const dated = await create({ expires_at: "2999-01-01T00:00:00+02:00" });
        assert.equal(dated.status, 201, dated.text);
        assert.equal(dated.body.expires_at, "2998-12-31T22:00:00.000Z");
        assert.equal(dated.body.status, "active");
        assertError(
          await create({ expires_at: "2001-01-01T00:00:00Z" }),
          400,
          "invalid_argument",
          "expires_at",
        );
        assertError(await create({ expires_at: "soon" }), 400, "invalid_argument", "expires_at");
        assertError(
          await create({ expires_at: "2999-01-01T00:00:00Z", lifetime_seconds: 60 }),
          400,
          "invalid_argument",
          "lifetime_seconds",
        );
        assertError(
          await create({ lifetime_seconds: 0 }),
          400,
          "invalid_argument",
          "lifetime_seconds",
        );
        assertError(await create({ status: "expired" }), 400, "invalid_argument", "status");
        for (const id of [timed.body.id, dated.body.id]) {
          assert.equal((await api("DELETE", `${path}/${id}`, { token: admin })).status, 204);
        }
      },
    );

    await t.step(
      "secrets: the plaintext is stored nowhere: not in the database, not in a log",
      async () => {
        const dump = await new Deno.Command("pg_dump", {
          args: ["--data-only", stack.databaseUrl],
          stdout: "piped",
        })
          .output();
        assert.equal(dump.code, 0);
        const text = new TextDecoder().decode(dump.stdout);
        assert.ok(text.includes(`ocs_****${secret.slice(-4)}`), "the dump holds the secret's row");
        assert.ok(!text.includes(secret), "the plaintext is in pg_dump");
        assert.ok(!text.includes(secret.slice(4)), "the plaintext body is in pg_dump");
        for (const proc of Object.values(stack.procs)) {
          assert.ok(proc.lines.length > 0);
          assert.ok(
            !proc.lines.some((l) => l.includes(secret.slice(4))),
            "the plaintext is in a log",
          );
        }
      },
    );

    await t.step("secrets: a client holds at most 10; delete frees a place", async () => {
      for (let i = 1; i < 10; i++) {
        assert.equal(
          (await api("POST", `/v1/projects/p1/clients/${clientId}/secrets`, { token: admin }))
            .status,
          201,
        );
      }
      assertError(
        await api("POST", `/v1/projects/p1/clients/${clientId}/secrets`, { token: admin }),
        409,
        "failed_precondition",
      );
      const del = await api("DELETE", `/v1/projects/p1/clients/${clientId}/secrets/${secretId}`, {
        token: admin,
      });
      assert.equal(del.status, 204);
      assert.equal(del.text, "");
      assertError(
        await api("DELETE", `/v1/projects/p1/clients/${clientId}/secrets/${secretId}`, {
          token: admin,
        }),
        404,
        "not_found",
      );
      assert.equal(
        (await api("POST", `/v1/projects/p1/clients/${clientId}/secrets`, { token: admin })).status,
        201,
      );
    });

    await t.step("clients: DELETE is 204 with no body and takes the secrets with it", async () => {
      // A DELETE sent with a body, `{}` included, is refused and deletes nothing.
      for (const json of [{}, { etag: "x" }]) {
        assertError(
          await api("DELETE", `/v1/projects/p1/clients/${clientId}`, { token: admin, json }),
          400,
          "invalid_argument",
        );
      }
      // Whatever its media type: a 415 would ask for JSON (`Accept`), which is refused too.
      for (const type of ["text/plain", "application/x-www-form-urlencoded"]) {
        const res = await api("DELETE", `/v1/projects/p1/clients/${clientId}`, {
          token: admin,
          raw: "x=1",
          headers: { "content-type": type },
        });
        assertError(res, 400, "invalid_argument");
        assert.equal(res.headers.get("accept"), null);
      }
      assert.equal(
        (await api("GET", `/v1/projects/p1/clients/${clientId}`, { token: admin })).status,
        200,
      );
      const del = await api("DELETE", `/v1/projects/p1/clients/${clientId}`, { token: admin });
      assert.equal(del.status, 204);
      assert.equal(del.text, "");
      assertError(
        await api("GET", `/v1/projects/p1/clients/${clientId}`, { token: admin }),
        404,
        "not_found",
      );
      assertError(
        await api("GET", `/v1/projects/p1/clients/${clientId}/secrets`, { token: admin }),
        404,
        "not_found",
      );
      const [row] = await sql`select count(*)::int as n from oauth.client_secrets`;
      assert.equal(row!.n, 0);
    });

    let installationId = "";
    await t.step(
      "installations: consent needs a config; creates an active installation",
      async () => {
        const user = await stack.token({ sub: "user-7", accountId: "acc-7" });
        assertError(
          await api("POST", "/v1/installations", { token: user, json: { project_id: "p404" } }),
          404,
          "not_found",
        );
        assertError(
          await api("POST", "/v1/installations", { token: user, json: {} }),
          400,
          "invalid_argument",
          "project_id",
        );
        const res = await api("POST", "/v1/installations", {
          token: user,
          json: { project_id: "p1", scopes: ["openid", "email"] },
        });
        assert.equal(res.status, 201, res.text);
        assert.deepEqual(Object.keys(res.body), installationKeys);
        assert.match(res.body.id, /^ins_[0-9a-z]{26}$/);
        assert.equal(res.headers.get("location"), `/v1/installations/${res.body.id}`);
        assert.equal(res.body.account_id, "acc-7");
        assert.equal(res.body.authorized_by_id, "user-7");
        assert.equal(res.body.application_name, "Demo");
        assert.equal(res.body.status, "active");
        assert.match(res.body.principal_id, /^prn_[0-9a-z]{26}$/);
        assert.equal(res.body.revoked_at, null);
        assert.match(res.body.authorized_at, timestamp);
        installationId = res.body.id;

        const again = await api("POST", "/v1/installations", {
          token: user,
          json: { project_id: "p1", scopes: ["openid"] },
        });
        // The live installation updated, none created: 200, no Location.
        assert.equal(again.status, 200, again.text);
        assert.equal(again.headers.get("location"), null);
        assert.equal(again.body.id, installationId);
        assert.equal(again.body.principal_id, res.body.principal_id);
        // Consenting again adds to the scopes it holds (the union); it takes none away.
        assert.deepEqual(again.body.scopes, ["openid", "email"]);
      },
    );

    await t.step("installations: visible only to their account; list pages", async () => {
      const user = await stack.token({ sub: "user-7", accountId: "acc-7" });
      const stranger = await stack.token({ sub: "user-8", accountId: "acc-8", projects: ["*"] });
      assert.equal(
        (await api("GET", `/v1/installations/${installationId}`, { token: user })).status,
        200,
      );
      assertError(
        await api("GET", `/v1/installations/${installationId}`, { token: stranger }),
        404,
        "not_found",
      );
      assertError(
        await api("DELETE", `/v1/installations/${installationId}`, { token: stranger }),
        404,
        "not_found",
      );
      const mine = await api("GET", "/v1/installations", { token: user });
      assert.deepEqual(mine.body.data.map((i: { id: string }) => i.id), [installationId]);
      assert.equal(mine.body.has_more, false);
      const theirs = await api("GET", "/v1/installations", { token: stranger });
      assert.deepEqual(theirs.body, { data: [], has_more: false });
      assertError(
        await api("GET", `/v1/installations?after=${installationId}`, { token: stranger }),
        400,
        "invalid_argument",
        "after",
      );

      // project_id keeps one project's installations of the account.
      const other = await stack.token({ sub: "user-9", accountId: "acc-9" });
      const ids: Record<string, string> = {};
      for (const project of ["p1", "p2"]) {
        const res = await api("POST", "/v1/installations", {
          token: other,
          json: { project_id: project },
        });
        assert.equal(res.status, 201);
        ids[project] = res.body.id;
      }
      const listed = async (query: string) =>
        (await api("GET", `/v1/installations${query}`, { token: other })).body.data
          .map((i: { id: string }) => i.id);
      assert.deepEqual(await listed(""), [ids.p1, ids.p2]);
      assert.deepEqual(await listed("?project_id=p2"), [ids.p2]);
      assert.deepEqual(await listed("?project_id=p1&limit=1"), [ids.p1]);
      assert.deepEqual(await listed("?project_id=nowhere"), []);
      // A position in one project's list is none in another's (AIP-158).
      assertError(
        await api("GET", `/v1/installations?project_id=p1&after=${ids.p2}`, { token: other }),
        400,
        "invalid_argument",
        "after",
      );
      assert.deepEqual(await listed(`?after=${ids.p1}`), [ids.p2]);
      assertError(
        await api("GET", "/v1/installations?project_id=Not%20a%20project", { token: other }),
        400,
        "invalid_argument",
        "project_id",
      );
    });

    await t.step(
      "installations: an internal project accepts consent only from its admins",
      async () => {
        // A consent while it is external: the registry keeps the config it read, until the
        // change below reaches it (the config's trigger, then the feed).
        const earlier = await stack.token({ sub: "user-8", accountId: "acc-8" });
        assert.equal(
          (await api("POST", "/v1/installations", { token: earlier, json: { project_id: "p2" } }))
            .status,
          201,
        );
        await api("PATCH", "/v1/projects/p2/config", {
          token: admin,
          json: { audience: "internal" },
        });
        await propagated();
        const user = await stack.token({ sub: "user-7", accountId: "acc-7" });
        assertError(
          await api("POST", "/v1/installations", { token: user, json: { project_id: "p2" } }),
          403,
          "permission_denied",
        );
        assert.equal(
          (await api("POST", "/v1/installations", { token: admin, json: { project_id: "p2" } }))
            .status,
          201,
        );
      },
    );

    await t.step("installations: revoke keeps the record; revoking again is a no-op", async () => {
      const user = await stack.token({ sub: "user-7", accountId: "acc-7" });
      const res = await api("DELETE", `/v1/installations/${installationId}`, { token: user });
      assert.equal(res.status, 204);
      assert.equal(res.text, "");
      const get = await api("GET", `/v1/installations/${installationId}`, { token: user });
      assert.equal(get.body.status, "revoked");
      assert.match(get.body.revoked_at, timestamp);
      // Revoking again changes nothing, but its conditions are still checked (RFC 9110 13.1).
      for (const headers of [{ "if-match": '"stale"' }, { "if-none-match": "*" }]) {
        const refused = await api("DELETE", `/v1/installations/${installationId}`, {
          token: user,
          headers,
        });
        assert.equal(refused.status, 412, JSON.stringify(headers));
      }
      const again = await api("DELETE", `/v1/installations/${installationId}`, {
        token: user,
        headers: { "if-match": get.headers.get("etag")! },
      });
      assert.equal(again.status, 204);
      assert.equal(
        (await api("GET", `/v1/installations/${installationId}`, { token: user })).body.revoked_at,
        get.body.revoked_at,
      );
      const fresh = await api("POST", "/v1/installations", {
        token: user,
        json: { project_id: "p1" },
      });
      assert.equal(fresh.status, 201);
      assert.notEqual(fresh.body.id, installationId);
      assert.notEqual(fresh.body.principal_id, get.body.principal_id);
    });
  } finally {
    await sql.end();
    await stack.stop();
  }
});
