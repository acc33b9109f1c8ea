/**
 * Idempotency keys (lib/policy/idempotency.ts, Stripe's semantics) against the running stack, through the
 * gateway (`Idempotency-Key` header) and directly over gRPC (`idempotency-key` metadata): every
 * POST route replays its stored outcome with the same status; a key reused with another request
 * is 422; 50 concurrent duplicates make one record; keys are scoped per caller; an expired key is
 * new again; validation failures are not stored; the plaintext of a secret is never stored.
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { findTrailerError } from "@connectrpc/connect/protocol-grpc";
import postgres from "postgres";
import { ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.ts";
import { CoreService } from "../gen/registry/core/v1/core_service_pb.ts";
import { ClientType } from "../gen/registry/oauth/v1/client_pb.ts";
import { OAuthRegistryService } from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { buildRoutes } from "../gateway/routes.ts";
import { type GrpcFailure, grpcFailure, grpcTestClient } from "../lib/testing/mod.ts";
import { httpClient, type HttpResult } from "../lib/testing/mod.ts";
import { startStack } from "../lib/testing/mod.ts";
import { idKind } from "../lib/platform/mod.ts";

// deno-lint-ignore no-console
const figure = (text: string) => console.log(`idempotency: ${text}`);

function reasons(f: GrpcFailure): string[] {
  const headers = new Headers();
  for (const [k, v] of Object.entries(f.metadata.getMap())) {
    headers.set(k, typeof v === "string" ? v : Buffer.from(v).toString("base64"));
  }
  const error = findTrailerError(headers);
  return error?.findDetails(ErrorInfoSchema).map((d) => d.reason) ?? [];
}

function assertErrorBody(res: HttpResult, status: number, code: string): void {
  assert.equal(res.status, status, res.text);
  assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
  assert.equal(res.body.error.code, code, res.text);
  assert.equal(typeof res.body.error.message, "string");
  assert.ok(Array.isArray(res.body.error.details));
}

let keys = 0;
const newKey = () => `key-${Date.now()}-${++keys}`;

Deno.test("idempotency keys: replay, mismatch, concurrency, scope, expiry", async (t) => {
  const stack = await startStack();
  const api = httpClient(stack.gatewayUrl);
  const sql = postgres(stack.databaseUrl, { max: 2, onnotice: () => {} });
  const oauth = grpcTestClient(stack.oauthGrpc);
  const core = grpcTestClient(stack.coreGrpc);
  const token = await stack.token({ sub: "idem-a", projects: ["idem"], space: "s1" });
  const other = await stack.token({ sub: "idem-b", projects: ["idem"], space: "s1" });
  const post = (path: string, key: string, json?: unknown, as = token) =>
    api("POST", path, {
      token: as,
      ...(json === undefined ? {} : { json }),
      headers: { "idempotency-key": key },
    });
  try {
    const cfg = await api("PATCH", "/v1/projects/idem/config", {
      token,
      json: { application_name: "Idem" },
    });
    assert.equal(cfg.status, 200, cfg.text);
    const client = await api("POST", "/v1/projects/idem/clients", {
      token,
      json: { name: "Base", type: "web", redirect_uris: ["https://a.example/cb"] },
    });
    assert.equal(client.status, 201, client.text);
    const journey = await api("POST", "/v1/core/journeys", { token, json: { name: "Base" } });
    assert.equal(journey.status, 201, journey.text);
    const clientId: string = client.body.id;
    const journeyId: string = journey.body.id;

    // One case per POST route; the table must cover every POST of the annotations.
    const cases: Record<string, { path: string; body?: unknown; other: unknown; count: string }> = {
      "/v1/projects/{project_id}/clients": {
        path: "/v1/projects/idem/clients",
        body: { name: "Replayed", type: "web", redirect_uris: ["https://a.example/cb"] },
        other: { name: "Other", type: "web", redirect_uris: ["https://a.example/cb"] },
        count: "select count(*)::int as n from oauth.clients where name = 'Replayed'",
      },
      "/v1/projects/{project_id}/clients/{client_id}/secrets": {
        path: `/v1/projects/idem/clients/${clientId}/secrets`,
        other: "path",
        count: "select count(*)::int as n from oauth.client_secrets",
      },
      "/v1/projects/{project_id}/clients/{client_id}/keys": {
        path: `/v1/projects/idem/clients/${clientId}/keys`,
        body: { generate: "EdDSA" },
        other: { generate: "ES256" },
        count: "select count(*)::int as n from oauth.client_keys",
      },
      "/v1/installations": {
        path: "/v1/installations",
        body: { project_id: "idem", scopes: ["openid"] },
        other: { project_id: "idem", scopes: ["openid", "email"] },
        count: "select count(*)::int as n from oauth.installations",
      },
      "/v1/core/roles": {
        path: "/v1/core/roles",
        body: { name: "Replayed", resource_type: "project" },
        other: { name: "Other", resource_type: "project" },
        count: "select count(*)::int as n from core.roles where name = 'Replayed'",
      },
      "/v1/core/journeys": {
        path: "/v1/core/journeys",
        body: { name: "Replayed" },
        other: { name: "Other" },
        count: "select count(*)::int as n from core.journeys where name = 'Replayed'",
      },
      "/v1/core/units": {
        path: "/v1/core/units",
        body: { journey: journeyId, title: "Replayed" },
        other: { journey: journeyId, title: "Other" },
        count: "select count(*)::int as n from core.units where title = 'Replayed'",
      },
    };

    await t.step("every POST route: same key and body replays; another body is 422", async () => {
      const posts = buildRoutes([OAuthRegistryService, CoreService])
        .filter((r) => r.httpMethod === "POST")
        .map((r) => r.template)
        .sort();
      assert.deepEqual(posts, Object.keys(cases).sort(), "a POST route without a case");
      let replays = 0;
      for (const template of posts) {
        const c = cases[template]!;
        const key = newKey();
        const first = await post(c.path, key, c.body);
        assert.equal(first.status, 201, `${template}: ${first.text}`);
        assert.equal(first.headers.get("idempotent-replayed"), null);
        const [before] = await sql.unsafe(c.count);
        const again = await post(c.path, key, c.body);
        assert.equal(again.status, 201, `${template}: ${again.text}`);
        assert.equal(again.headers.get("idempotent-replayed"), "true", template);
        assert.equal(again.body.id, first.body.id, template);
        // The headers made of the answer too: where the record is, and its version.
        assert.ok(first.headers.get("location"), template);
        assert.equal(again.headers.get("location"), first.headers.get("location"), template);
        assert.equal(again.headers.get("etag"), first.headers.get("etag"), template);
        if (template.endsWith("/secrets")) {
          // The plaintext is shown once: never stored, so not replayed.
          assert.match(first.body.secret, /^ocs_/);
          assert.equal("secret" in again.body, false);
          const { secret: _, ...rest } = first.body;
          assert.deepEqual(again.body, rest);
          const [stored] = await sql`
            select response from oauth.idempotency_keys where key = ${key}`;
          assert.ok(stored, "the key is stored");
          const text = new TextDecoder().decode(stored.response);
          assert.equal(text.includes(first.body.secret), false, "plaintext secret stored");
          assert.equal(text.includes(first.body.secret.slice(4)), false, "plaintext secret stored");
        } else if (template.endsWith("/keys")) {
          // A generated key's private part is shown once: never stored, so not replayed.
          assert.equal(typeof first.body.private_jwk?.d, "string", first.text);
          assert.equal("private_jwk" in again.body, false, again.text);
          const { private_jwk: privateJwk, ...rest } = first.body;
          assert.deepEqual(again.body, rest);
          const [stored] = await sql`
            select response from oauth.idempotency_keys where key = ${key}`;
          assert.ok(stored, "the key is stored");
          const text = new TextDecoder().decode(stored.response);
          assert.equal(text.includes(privateJwk.d), false, "the private key was stored");
        } else {
          assert.deepEqual(again.body, first.body, template);
        }
        const [after] = await sql.unsafe(c.count);
        assert.equal(after!.n, before!.n, `${template}: the replay wrote a record`);
        replays++;

        const mismatch = c.other === "path"
          ? await post(c.path.replace(clientId, idKind("cli").generate().id), key)
          : await post(c.path, key, c.other);
        // For the secret, another client id in the path is another request.
        assertErrorBody(mismatch, 422, "invalid_argument");
        assert.deepEqual(mismatch.body.error.details, []);
        assert.match(mismatch.body.error.message, /different request/);
      }
      figure(`${posts.length} POST routes, ${replays} replays, ${posts.length} mismatches (422)`);
    });

    await t.step(
      "a stored error is replayed with its status; a validation error is not stored",
      async () => {
        const key = newKey();
        const missing = { journey: idKind("journey").generate().id, title: "Lost" };
        const first = await post("/v1/core/units", key, missing);
        assertErrorBody(first, 404, "not_found");
        const again = await post("/v1/core/units", key, missing);
        assertErrorBody(again, 404, "not_found");
        assert.equal(again.headers.get("idempotent-replayed"), "true");
        assert.deepEqual(again.body, first.body);

        const invalid = { name: "Bad", type: "web", redirect_uris: ["ftp://x.example/cb"] };
        const key2 = newKey();
        const bad = await post("/v1/projects/idem/clients", key2, invalid);
        assertErrorBody(bad, 400, "invalid_argument");
        assert.equal(bad.body.error.details.length, 1, bad.text);
        const [row] = await sql`select 1 from oauth.idempotency_keys where key = ${key2}`;
        assert.equal(row, undefined, "a validation failure was stored");
        const good = await post("/v1/projects/idem/clients", key2, {
          ...invalid,
          redirect_uris: [],
        });
        assert.equal(good.status, 201, good.text);
        assert.equal(good.headers.get("idempotent-replayed"), null);
      },
    );

    await t.step("a malformed key is 400; 255 printable characters are accepted", async () => {
      const body = { name: "Keyed" };
      // "a1, a2" is what two Idempotency-Key lines arrive as: which one was meant?
      for (const bad of ["", "k".repeat(256), "k".repeat(10240), "a\tb", "caf\u00e9", "a1, a2"]) {
        const res = await post("/v1/core/journeys", bad, body);
        assertErrorBody(res, 400, "invalid_argument");
        assert.match(res.body.error.message, /Idempotency-Key/);
      }
      const longest = "~ " + "k".repeat(252) + "!";
      assert.equal(longest.length, 255);
      const ok = await post("/v1/core/journeys", longest, body);
      assert.equal(ok.status, 201, ok.text);
      const f = await grpcFailure(
        core.call(CoreService.method.createJourney, { journey: { name: "x" } }, {
          authorization: `Bearer ${token}`,
          "idempotency-key": "k".repeat(256),
        }),
      );
      assert.equal(f.code, 3);
    });

    await t.step(
      'the Structured Field form ("k", RFC 8941) is the same key as the bare form (k)',
      async () => {
        const key = newKey();
        const body = { name: "Quoted" };
        const bare = await post("/v1/core/journeys", key, body);
        assert.equal(bare.status, 201, bare.text);
        const quoted = await post("/v1/core/journeys", `"${key}"`, body);
        assert.equal(quoted.status, 201, quoted.text);
        assert.equal(quoted.headers.get("idempotent-replayed"), "true");
        assert.equal(quoted.body.id, bare.body.id);
        // An sf-string's escapes are its characters: "a\"b" is the key a"b.
        const first = await post("/v1/core/journeys", '"q\\"-' + key + '"', body);
        assert.equal(first.status, 201, first.text);
        const again = await post("/v1/core/journeys", 'q"-' + key, body);
        assert.equal(again.headers.get("idempotent-replayed"), "true", again.text);
        assert.equal(again.body.id, first.body.id);
        // Over gRPC the metadata is read the same way.
        const md = { authorization: `Bearer ${token}`, "idempotency-key": `"${key}"` };
        const r = await core.call(CoreService.method.createJourney, { journey: body }, md);
        assert.equal(r.journey!.id, bare.body.id);
        // 255 characters are the limit of the key, not of its quoted form.
        const quotedLongest = `"\\"${"q".repeat(253)}!"`;
        const long = await post("/v1/core/journeys", quotedLongest, body);
        assert.equal(long.status, 201, long.text);
        const tooLong = await post("/v1/core/journeys", `"${"q".repeat(256)}"`, body);
        assertErrorBody(tooLong, 400, "invalid_argument");
        // Not one sf-string: an empty one, a bad escape, parameters, a list, an unclosed quote.
        for (const bad of ['""', '"a\\b"', '"abc";p=1', '"a", "b"', '"abc']) {
          const res = await post("/v1/core/journeys", bad, body);
          assertErrorBody(res, 400, "invalid_argument");
          assert.match(res.body.error.message, /Idempotency-Key/);
        }
      },
    );

    await t.step(
      "50 concurrent duplicates make one record (the others 409 or replay)",
      async () => {
        const key = newKey();
        const body = { name: "Concurrent", type: "web", redirect_uris: [] };
        const results = await Promise.all(
          Array.from({ length: 50 }, () => post("/v1/projects/idem/clients", key, body)),
        );
        const created = results.filter((r) => r.status === 201);
        const busy = results.filter((r) => r.status === 409);
        assert.equal(created.length + busy.length, 50, results.map((r) => r.status).join(","));
        assert.ok(created.length >= 1);
        assert.equal(new Set(created.map((r) => r.body.id)).size, 1, "two records were created");
        for (const r of busy) {
          assertErrorBody(r, 409, "aborted");
          assert.match(r.body.error.message, /in progress/);
        }
        const { n } = (await sql<{ n: number }[]>`select count(*)::int as n from oauth.clients
        where name = 'Concurrent'`)[0]!;
        assert.equal(n, 1);
        const { rows } = (await sql<
          { rows: number }[]
        >`select count(*)::int as rows from oauth.idempotency_keys
        where key = ${key}`)[0]!;
        assert.equal(rows, 1);
        const later = await post("/v1/projects/idem/clients", key, body);
        assert.equal(later.status, 201);
        assert.equal(later.body.id, created[0]!.body.id);
        const replayed = created.filter((r) => r.headers.get("idempotent-replayed") === "true");
        figure(
          `gateway: 50 concurrent duplicates -> ${created.length} x 201 (${replayed.length} ` +
            `replayed), ${busy.length} x 409, 1 record`,
        );

        // Directly over gRPC, on core.
        const grpcKey = newKey();
        const md = { authorization: `Bearer ${token}`, "idempotency-key": grpcKey };
        const outcomes = await Promise.allSettled(
          Array.from(
            { length: 50 },
            () => core.call(CoreService.method.createJourney, { journey: { name: "GrpcDup" } }, md),
          ),
        );
        const ok = outcomes.filter((o) => o.status === "fulfilled");
        const failed = outcomes.flatMap((o) =>
          o.status === "rejected" ? [o.reason as GrpcFailure] : []
        );
        assert.ok(ok.length >= 1);
        assert.equal(new Set(ok.map((o) => o.value.journey!.id)).size, 1);
        for (const f of failed) {
          assert.equal(f.code, 10, f.details); // ABORTED
          assert.deepEqual(reasons(f), ["IDEMPOTENCY_KEY_IN_USE"]);
        }
        const { j } = (await sql<{ j: number }[]>`select count(*)::int as j from core.journeys
        where name = 'GrpcDup'`)[0]!;
        assert.equal(j, 1);
        figure(
          `gRPC: 50 concurrent duplicates -> ${ok.length} OK, ${failed.length} ABORTED, 1 record`,
        );
      },
    );

    await t.step(
      "keys are scoped per caller (sub, account, space, client); replay re-authorizes",
      async () => {
        const key = newKey();
        const body = { name: "Scoped", type: "web", redirect_uris: [] };
        const a = await post("/v1/projects/idem/clients", key, body);
        const b = await post("/v1/projects/idem/clients", key, body, other);
        assert.equal(a.status, 201);
        assert.equal(b.status, 201);
        assert.notEqual(b.body.id, a.body.id);
        assert.equal(b.headers.get("idempotent-replayed"), null);
        // Another body under another caller's key is no mismatch either.
        const b2 = await post("/v1/projects/idem/clients", newKey(), body, other);
        assert.equal(b2.status, 201);

        // The same sub in another space is another caller.
        const s2 = await stack.token({ sub: "idem-a", projects: ["idem"], space: "s2" });
        const jKey = newKey();
        const j1 = await post("/v1/core/journeys", jKey, { name: "Spaced" });
        const j2 = await post("/v1/core/journeys", jKey, { name: "Spaced" }, s2);
        assert.equal(j2.status, 201);
        assert.notEqual(j2.body.id, j1.body.id);
        const seen = await api("GET", `/v1/core/journeys/${j2.body.id}`, { token: s2 });
        assert.equal(seen.status, 200);

        // The same sub through another OAuth client (`client_id`) is another caller: an app
        // never gets the answer to another app's request, nor a 422 for the other's key.
        const viaApp = await stack.token({
          sub: "idem-a",
          projects: ["idem"],
          space: "s1",
          clientId: "app-one",
        });
        const viaOtherApp = await stack.token({
          sub: "idem-a",
          projects: ["idem"],
          space: "s1",
          clientId: "app-two",
        });
        const cKey = newKey();
        const c1 = await post("/v1/core/journeys", cKey, { name: "Apps" }, viaApp);
        assert.equal(c1.status, 201, c1.text);
        const c2 = await post("/v1/core/journeys", cKey, { name: "Apps" }, viaOtherApp);
        assert.equal(c2.status, 201, c2.text);
        assert.equal(c2.headers.get("idempotent-replayed"), null);
        assert.notEqual(c2.body.id, c1.body.id);
        const c3 = await post("/v1/core/journeys", cKey, { name: "Apps" }, viaApp);
        assert.equal(c3.headers.get("idempotent-replayed"), "true");
        assert.equal(c3.body.id, c1.body.id);

        // Same caller scope, but the token no longer lists the project: 403, not the record.
        const lost = await stack.token({ sub: "idem-a", projects: [], space: "s1" });
        const denied = await post("/v1/projects/idem/clients", key, body, lost);
        assertErrorBody(denied, 403, "permission_denied");
        assert.equal(denied.text.includes(a.body.id), false);
      },
    );

    await t.step("a key older than the TTL is forgotten: the request runs again", async () => {
      const key = newKey();
      const body = { name: "Expiring" };
      const first = await post("/v1/core/journeys", key, body);
      assert.equal(first.status, 201);
      const aged = await sql`update core.idempotency_keys
        set created_at = now() - interval '24 hours 1 second' where key = ${key}`;
      assert.equal(aged.count, 1);
      const again = await post("/v1/core/journeys", key, body);
      assert.equal(again.status, 201, again.text);
      assert.equal(again.headers.get("idempotent-replayed"), null);
      assert.notEqual(again.body.id, first.body.id);
      // Just inside the TTL it still replays.
      await sql`update core.idempotency_keys
        set created_at = now() - interval '23 hours 59 minutes' where key = ${key}`;
      const inside = await post("/v1/core/journeys", key, body);
      assert.equal(inside.headers.get("idempotent-replayed"), "true");
      assert.equal(inside.body.id, again.body.id);
      // After expiry a different body is a new request, not a mismatch.
      await sql`update core.idempotency_keys
        set created_at = now() - interval '25 hours' where key = ${key}`;
      const changed = await post("/v1/core/journeys", key, { name: "Changed" });
      assert.equal(changed.status, 201, changed.text);
    });

    await t.step("gRPC callers and the gateway share the service's keys", async () => {
      const key = newKey();
      const md = { authorization: `Bearer ${token}`, "idempotency-key": key };
      const request = {
        projectId: "idem",
        client: { name: "Grpc", type: ClientType.WEB, redirectUris: [] },
      };
      const r1 = await oauth.call(OAuthRegistryService.method.createClient, request, md);
      const r2 = await oauth.call(OAuthRegistryService.method.createClient, request, md);
      assert.equal(r2.client!.id, r1.client!.id);
      const viaHttp = await post("/v1/projects/idem/clients", key, {
        name: "Grpc",
        type: "web",
        redirect_uris: [],
      });
      assert.equal(viaHttp.status, 201);
      assert.equal(viaHttp.body.id, r1.client!.id);
      assert.equal(viaHttp.headers.get("idempotent-replayed"), "true");
      const f = await grpcFailure(
        oauth.call(OAuthRegistryService.method.createClient, {
          ...request,
          client: { ...request.client, name: "Different" },
        }, md),
      );
      assert.equal(f.code, 3); // INVALID_ARGUMENT, HTTP 422 through the gateway
      assert.deepEqual(reasons(f), ["IDEMPOTENCY_KEY_REUSED"]);
      // A stored error replays over gRPC too, marked in the trailers.
      const missing = { projectId: "idem", clientId: idKind("cli").generate().id };
      const e1 = await grpcFailure(
        oauth.call(OAuthRegistryService.method.createClientSecret, missing, md),
      );
      assert.equal(e1.code, 5);
      const e2 = await grpcFailure(
        oauth.call(OAuthRegistryService.method.createClientSecret, missing, md),
      );
      assert.equal(e2.code, 5);
      assert.deepEqual(e2.metadata.get("idempotent-replayed"), ["true"]);
      assert.deepEqual(e1.metadata.get("idempotent-replayed"), []);
    });

    await t.step("a key on a GET or DELETE has no effect", async () => {
      const key = newKey();
      const res = await api("GET", "/v1/projects/idem/clients", {
        token,
        headers: { "idempotency-key": key },
      });
      assert.equal(res.status, 200);
      const [row] = await sql`select 1 from oauth.idempotency_keys where key = ${key}`;
      assert.equal(row, undefined);
      const { n } = (await sql<{ n: number }[]>`
        select (select count(*) from oauth.idempotency_keys)::int
             + (select count(*) from core.idempotency_keys)::int as n`)[0]!;
      figure(`${n} keys stored in all`);
    });
  } finally {
    oauth.close();
    core.close();
    await sql.end();
    await stack.stop();
  }
});
