/**
 * The limits of the API against the running stack (README "Limits"): the per-caller rate limit of
 * the gateway (429 with the JSON error body and Retry-After, then recovery), in a stack of its own
 * with a low limit; the request body cap (413) and the list `limit` cap at n and n+1; the limit per
 * client address of the OAuth requests that keep a row (device authorization, PAR).
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import { httpClient, type HttpResult } from "../lib/testing/mod.ts";
import { startStack } from "../lib/testing/mod.ts";

// deno-lint-ignore no-console
const figure = (text: string) => console.log(`limits: ${text}`);

const perSecond = 2;
const burst = 5;

function assertErrorBody(res: HttpResult, status: number, code: string): void {
  assert.equal(res.status, status, res.text);
  assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
  assert.equal(res.body.error.code, code, res.text);
  assert.equal(typeof res.body.error.message, "string");
  assert.ok(Array.isArray(res.body.error.details));
}

Deno.test("limits: rate limit per caller, body size, list limit", async (t) => {
  const stack = await startStack({
    env: { RATE_LIMIT_PER_SECOND: String(perSecond), RATE_LIMIT_BURST: String(burst) },
  });
  const api = httpClient(stack.gatewayUrl);
  try {
    await t.step("after the burst a caller gets 429 with Retry-After, then recovers", async () => {
      const token = await stack.token({ sub: "rl-a" });
      const statuses: number[] = [];
      let limited: HttpResult | undefined;
      // At 2/s, 200 requests would need ~100 s to stay under the limit: the 429 comes first.
      for (let i = 0; i < 200 && !limited; i++) {
        const res = await api("GET", "/v1/installations", { token });
        statuses.push(res.status);
        if (res.status === 429) limited = res;
        else assert.equal(res.status, 200, res.text);
      }
      assert.ok(limited, `no 429 in ${statuses.length} requests`);
      assert.ok(statuses.length > burst, `429 after ${statuses.length - 1} requests`);
      assertErrorBody(limited, 429, "resource_exhausted");
      assert.deepEqual(limited.body.error.details, []);
      const retryAfter = limited.headers.get("retry-after");
      assert.match(retryAfter ?? "", /^[1-9]\d*$/);

      // Another subject has its own bucket; another token of the same subject shares it.
      const other = await stack.token({ sub: "rl-b" });
      assert.equal((await api("GET", "/v1/installations", { token: other })).status, 200);
      const sameSubject = await stack.token({ sub: "rl-a", projects: ["x"] });
      assert.equal((await api("GET", "/v1/installations", { token: sameSubject })).status, 429);
      // Health and metrics are not limited; a bad token is still 401 first.
      assert.equal((await api("GET", "/healthz")).status, 200);
      assert.equal((await api("GET", "/v1/installations", { token: "nope" })).status, 401);

      await new Promise((r) => setTimeout(r, Number(retryAfter) * 1000));
      const recovered = await api("GET", "/v1/installations", { token });
      assert.equal(recovered.status, 200, recovered.text);
      figure(
        `rate ${perSecond}/s burst ${burst}: ${statuses.length - 1} accepted, then 429 ` +
          `(Retry-After ${retryAfter} s), 200 again after waiting it`,
      );
    });

    await t.step("the request body is capped at 1 MiB (413 above)", async () => {
      const token = await stack.token({ sub: "rl-body", space: "s1" });
      const max = 1024 * 1024;
      const json = (size: number) => {
        const shell = '{"name":""}';
        return '{"name":"' + "n".repeat(size - shell.length) + '"}';
      };
      const atMax = await api("POST", "/v1/core/journeys", {
        token,
        raw: json(max),
        headers: { "content-type": "application/json" },
      });
      // Read whole and refused by the service for the name's length, not for the body's size.
      assertErrorBody(atMax, 400, "invalid_argument");
      assert.equal(atMax.body.error.details[0]?.field, "name");
      const over = await api("POST", "/v1/core/journeys", {
        token,
        raw: json(max + 1),
        headers: { "content-type": "application/json" },
      });
      assertErrorBody(over, 413, "resource_exhausted");
      figure(`body of ${max} bytes read (400 for the name), ${max + 1} bytes 413`);
    });

    await t.step("a list's limit is 1..100", async () => {
      const token = await stack.token({ sub: "rl-list", space: "s1" });
      for (const [limit, status] of [[100, 200], [101, 400], [1, 200], [0, 400]] as const) {
        const res = await api("GET", `/v1/core/roles?limit=${limit}`, { token });
        assert.equal(res.status, status, `limit=${limit}: ${res.text}`);
        if (status === 400) {
          assertErrorBody(res, 400, "invalid_argument");
          assert.equal(res.body.error.details[0]?.field, "limit");
        }
      }
    });
  } finally {
    await stack.stop();
  }
});

Deno.test("limits: device authorizations and pushed requests per client address", async () => {
  // Each keeps a row for minutes, and a native client's id is public: per address (an IPv6 one by
  // its /64), 1 a minute here, so that an address's requests meet the limit as it was as long as
  // they are made within a minute of each other, however busy the machine.
  const perMinute = 1;
  const stack = await startStack({
    processEnv: {
      gateway: { OAUTH_KEPT_PER_MINUTE: String(perMinute), CLIENT_ADDRESS_HEADER: "X-Real-IP" },
    },
  });
  const sql = postgres(stack.databaseUrl, { max: 1, onnotice: () => {} });
  try {
    const api = httpClient(stack.gatewayUrl);
    const admin = await stack.token({ sub: "admin", projects: ["kp1"] });
    const config = await api("PATCH", "/v1/projects/kp1/config", {
      token: admin,
      json: { application_name: "TV", support_email: "help@tv.example" },
    });
    assert.equal(config.status, 200, config.text);
    const created = await api("POST", "/v1/projects/kp1/clients", {
      token: admin,
      json: { name: "tv", type: "native", redirect_uris: ["http://127.0.0.1/cb"] },
    });
    assert.equal(created.status, 201, created.text);
    const tv = created.body.id as string;
    const post = (path: string, address: string, form: Record<string, string>) =>
      fetch(`${stack.gatewayUrl}${path}`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded", "x-real-ip": address },
        body: new URLSearchParams({ client_id: tv, ...form }),
      });
    const device = (address: string) => post("/oauth2/device_authorization", address, {});
    const par = (address: string) =>
      post("/oauth2/par", address, {
        response_type: "code",
        redirect_uri: "http://127.0.0.1/cb",
        code_challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
        code_challenge_method: "S256",
      });
    const rows = async () => {
      const [r] = await sql<{ device: number; pushed: number }[]>`
        select (select count(*)::int from token.device_codes) device,
          (select count(*)::int from token.pushed_requests) pushed`;
      return r!;
    };

    // One address: a device code, then both endpoints refuse it; another: a pushed request, then a
    // device code refused (one bucket for both endpoints).
    const a = "203.0.113.7", b = "203.0.113.8";
    assert.equal((await device(a)).status, 200);
    assert.equal((await (await par(b)).json()).expires_in, 60);
    for (const refused of [await device(a), await par(a), await device(b)]) {
      assert.equal(refused.status, 429);
      assert.match(refused.headers.get("retry-after") ?? "", /^[1-9]\d*$/);
      assert.equal(refused.headers.get("cache-control"), "no-store");
      assert.equal((await refused.json()).error, "temporarily_unavailable");
    }
    assert.deepEqual(await rows(), { device: 1, pushed: 1 });
    // A confidential client authenticates, and is not counted: its back end pushes every user's
    // request from one address.
    const web = await api("POST", "/v1/projects/kp1/clients", {
      token: admin,
      json: { name: "web", type: "web", redirect_uris: ["https://app.example/cb"] },
    });
    assert.equal(web.status, 201, web.text);
    const secret = await api("POST", `/v1/projects/kp1/clients/${web.body.id}/secrets`, {
      token: admin,
    });
    assert.equal(secret.status, 201, secret.text);
    for (let i = 0; i <= perMinute; i++) {
      const pushed = await post("/oauth2/par", a, {
        client_id: web.body.id as string,
        client_secret: secret.body.secret as string,
        response_type: "code",
        redirect_uri: "https://app.example/cb",
        code_challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
        code_challenge_method: "S256",
      });
      assert.equal(pushed.status, 201, await pushed.text());
    }
    // Nor are credentials that do not verify, which keep nothing.
    const wrong = await post("/oauth2/par", a, {
      client_id: web.body.id as string,
      client_secret: "not-the-secret",
      response_type: "code",
      redirect_uri: "https://app.example/cb",
    });
    assert.equal(wrong.status, 401, await wrong.text());
    assert.deepEqual(await rows(), { device: 1, pushed: 1 + perMinute + 1 });

    // An IPv6 address is counted by its /64: another address of the network is the same caller.
    for (let i = 1; i <= perMinute; i++) {
      assert.equal((await device(`2001:db8:1:2::${i}`)).status, 200);
    }
    const sameNetwork = await device("2001:db8:1:2:ffff:ffff:ffff:ffff");
    assert.equal(sameNetwork.status, 429, await sameNetwork.text());
    // Another address has its own bucket; the other endpoints are not limited.
    assert.equal((await device("198.51.100.1")).status, 200);
    assert.equal((await post("/oauth2/revoke", a, { token: "x" })).status, 200);
    assert.deepEqual(await rows(), { device: 1 + perMinute + 1, pushed: 1 + perMinute + 1 });
    figure(
      `${perMinute} device authorizations and pushed requests a minute per address, then 429`,
    );
  } finally {
    await sql.end();
    await stack.stop();
  }
});
