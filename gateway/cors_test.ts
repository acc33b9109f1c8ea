/**
 * The CORS protocol of the token and revocation endpoints, with the token service's answer
 * stubbed: which requests count as cross-origin, what a preflight and an answer carry.
 */

import assert from "node:assert/strict";
import { createCors } from "./cors.ts";

const cors = createCors("https://auth.example.com");
const registered = new Set(["https://app.example.com", "http://localhost:5173"]);
const asked: string[] = [];
const check = (origin: string) => {
  asked.push(origin);
  return Promise.resolve(registered.has(origin));
};

const request = (headers: Record<string, string>, method = "OPTIONS") =>
  new Request("https://auth.example.com/oauth2/token", { method, headers });

Deno.test("crossOrigin() takes an origin of another site, and nothing else", () => {
  for (const origin of ["https://app.example.com", "http://localhost:5173", "http://[::1]:8080"]) {
    assert.equal(cors.crossOrigin(request({ origin })), origin);
  }
  for (
    const origin of [
      "https://auth.example.com",
      "null",
      "",
      "https://app.example.com/",
      "https://app.example.com/path",
      "ftp://app.example.com",
      "https://user@app.example.com",
      "https://app.example.com, https://evil.example",
      `https://${"a".repeat(300)}.example`,
    ]
  ) {
    assert.equal(cors.crossOrigin(request({ origin })), undefined, origin);
  }
  assert.equal(cors.crossOrigin(request({})), undefined);
});

Deno.test("preflight() allows a registered origin's POST, and says nothing to others", async () => {
  const allowed = await cors.preflight(
    request({
      origin: "https://app.example.com",
      "access-control-request-method": "POST",
      "access-control-request-headers": "authorization, dpop",
    }),
    check,
  );
  assert.equal(allowed.status, 204);
  assert.equal(allowed.headers.get("access-control-allow-origin"), "https://app.example.com");
  assert.equal(allowed.headers.get("access-control-allow-methods"), "POST");
  assert.match(allowed.headers.get("access-control-allow-headers")!, /\bAuthorization\b/);
  assert.match(allowed.headers.get("access-control-allow-headers")!, /\bDPoP\b/);
  assert.equal(allowed.headers.get("access-control-max-age"), "600");
  assert.equal(allowed.headers.get("access-control-allow-credentials"), null);
  assert.match(allowed.headers.get("vary")!, /^Origin, /);
  for (
    const headers of [
      { origin: "https://evil.example", "access-control-request-method": "POST" },
      { origin: "https://app.example.com", "access-control-request-method": "DELETE" },
      { origin: "https://app.example.com" },
      { origin: "https://auth.example.com", "access-control-request-method": "POST" },
      {},
    ]
  ) {
    const res = await cors.preflight(request(headers), check);
    assert.equal(res.status, 204, JSON.stringify(headers));
    assert.equal(res.headers.get("access-control-allow-origin"), null, JSON.stringify(headers));
    assert.equal(res.headers.get("allow"), "OPTIONS, POST");
  }
  asked.length = 0;
  await cors.preflight(request({ origin: "null", "access-control-request-method": "POST" }), check);
  assert.deepEqual(asked, [], "an origin that cannot be allowed is not asked about");
});

Deno.test("decorate() adds Vary always, and the origin only when allowed", async () => {
  const plain = await cors.decorate(new Response("{}"), undefined, undefined);
  assert.equal(plain.headers.get("vary"), "Origin");
  assert.equal(plain.headers.get("access-control-allow-origin"), null);
  const refused = await cors.decorate(
    new Response("{}"),
    "https://evil.example",
    Promise.resolve(false),
  );
  assert.equal(refused.headers.get("access-control-allow-origin"), null);
  assert.equal(refused.headers.get("access-control-expose-headers"), null);
  const allowed = await cors.decorate(
    new Response("{}", { headers: { vary: "Accept-Encoding" } }),
    "https://app.example.com",
    Promise.resolve(true),
  );
  assert.equal(allowed.headers.get("access-control-allow-origin"), "https://app.example.com");
  assert.equal(allowed.headers.get("vary"), "Accept-Encoding, Origin");
  assert.match(allowed.headers.get("access-control-expose-headers")!, /WWW-Authenticate/);
});
