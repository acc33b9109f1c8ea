/**
 * A single-page app in a real browser (headless Chromium from Debian, driven by playwright-core):
 * a page on the app's registered JavaScript origin (a server of its own on a loopback port) runs
 * the code flow with PKCE in its own script: it sends the browser to the consent page, and back on its
 * redirect URI it redeems the code, refreshes and revokes with `fetch`, one request with a header
 * of its own so that Chromium asks first (a CORS preflight). The same page on an origin that no
 * client registered reads nothing: Chromium blocks its requests' answers. What the page does is
 * what a browser app does with the token endpoint; no test code stands between them.
 */

import assert from "node:assert/strict";
import { httpClient, launchChromium, startStack } from "../lib/testing/mod.ts";
import { ensurePackages, packages } from "../tools/debian.ts";

/** The app: its script signs in (window.signIn), and on /cb finishes the flow. */
function appPage(gateway: string, clientId: string): string {
  const script = `
const gateway = ${JSON.stringify(gateway)};
const clientId = ${JSON.stringify(clientId)};
const redirectUri = location.origin + "/cb";
const b64url = (bytes) =>
  btoa(String.fromCharCode(...bytes)).replace(/\\+/g, "-").replace(/\\//g, "_").replace(/=+$/, "");
window.signIn = async () => {
  const verifier = b64url(crypto.getRandomValues(new Uint8Array(32)));
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  const state = b64url(crypto.getRandomValues(new Uint8Array(16)));
  sessionStorage.setItem("pkce", JSON.stringify({ verifier, state }));
  const url = new URL(gateway + "/oauth2/authorize");
  url.search = new URLSearchParams({
    response_type: "code", client_id: clientId, redirect_uri: redirectUri, scope: "photos.read",
    state, code_challenge: b64url(new Uint8Array(digest)), code_challenge_method: "S256",
  });
  location.assign(url.href);
};
const post = async (path, form, headers = {}) => {
  try {
    const res = await fetch(gateway + path, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
      body: new URLSearchParams(form),
    });
    const text = await res.text();
    return {
      status: res.status,
      body: text === "" ? null : JSON.parse(text),
      cacheControl: res.headers.get("cache-control"),
    };
  } catch (error) {
    return { blocked: String(error) };
  }
};
window.post = post;
if (location.pathname === "/cb") {
  const params = new URLSearchParams(location.search);
  const saved = JSON.parse(sessionStorage.getItem("pkce"));
  const result = { stateMatches: params.get("state") === saved.state, iss: params.get("iss") };
  result.redeemed = await post("/oauth2/token", {
    grant_type: "authorization_code", client_id: clientId, code: params.get("code"),
    redirect_uri: redirectUri, code_verifier: saved.verifier,
  });
  result.refreshed = await post("/oauth2/token", {
    grant_type: "refresh_token", client_id: clientId,
    refresh_token: result.redeemed.body?.refresh_token,
  });
  // A header of the app's own: Chromium sends a preflight first.
  result.revoked = await post(
    "/oauth2/revoke",
    { client_id: clientId, token: result.refreshed.body?.refresh_token },
    { "x-request-id": "spa-revoke-1" },
  );
  result.afterRevoke = await post("/oauth2/token", {
    grant_type: "refresh_token", client_id: clientId,
    refresh_token: result.refreshed.body?.refresh_token,
  });
  document.getElementById("out").textContent = JSON.stringify(result);
  document.title = "done";
}`;
  return `<!doctype html><meta charset="utf-8"><title>Photo SPA</title>
<h1>Photo SPA</h1><pre id="out"></pre><script type="module">${script}</script>`;
}

Deno.test("a single-page app in Chromium: code flow with PKCE, refresh and revoke through fetch (CORS)", async (t) => {
  await ensurePackages([packages.chromium]);
  const stack = await startStack();
  const api = httpClient(stack.gatewayUrl);
  const adminToken = await stack.token({ sub: "admin", projects: ["sp1"] });
  const userToken = await stack.token({ sub: "ada", accountId: "ada@example.com", projects: [] });
  const browser = await launchChromium();
  // The app's origin and another one that serves the same page: each a server of its own.
  // (Playwright's page.route cannot stand in for them: a redirect to a routed URL is not routed.)
  let html = "";
  const serve = () =>
    Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen() {} },
      () => new Response(html, { headers: { "content-type": "text/html; charset=utf-8" } }),
    );
  const servers = [serve(), serve()];
  const [registered, unregistered] = servers.map((s) => `http://127.0.0.1:${s.addr.port}`) as [
    string,
    string,
  ];
  try {
    const config = await api("PATCH", "/v1/projects/sp1/config", {
      token: adminToken,
      json: { application_name: "Photo SPA", audience: "external" },
    });
    assert.equal(config.status, 200, config.text);
    const created = await api("POST", "/v1/projects/sp1/clients", {
      token: adminToken,
      json: {
        name: "Photo SPA",
        type: "spa",
        redirect_uris: [`${registered}/cb`],
        javascript_origins: [registered],
      },
    });
    assert.equal(created.status, 201, created.text);
    const clientId = created.body.id as string;

    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    await context.addCookies([{ name: "session", value: userToken, url: stack.gatewayUrl }]);
    html = appPage(stack.gatewayUrl, clientId);
    const page = await context.newPage();

    await t.step("on its registered origin: consent, then redeem, refresh and revoke", async () => {
      await page.goto(`${registered}/`);
      await Promise.all([
        page.waitForURL(`${stack.gatewayUrl}/oauth2/authorize?**`),
        page.evaluate("window.signIn()"),
      ]);
      await Promise.all([
        page.waitForURL(`${registered}/cb?**`),
        page.getByRole("button", { name: "Allow" }).click(),
      ]);
      await page.waitForFunction("document.title === 'done'", undefined, { timeout: 30_000 });
      const result = JSON.parse(await page.locator("#out").innerText());
      assert.equal(result.stateMatches, true);
      assert.equal(result.iss, stack.gatewayUrl);
      assert.equal(result.redeemed.status, 200, JSON.stringify(result.redeemed));
      assert.equal(result.redeemed.cacheControl, "no-store");
      assert.equal(result.redeemed.body.token_type, "Bearer");
      assert.equal(result.redeemed.body.scope, "photos.read");
      assert.match(result.redeemed.body.refresh_token, /^ort_/);
      assert.equal(result.refreshed.status, 200, JSON.stringify(result.refreshed));
      assert.notEqual(result.refreshed.body.refresh_token, result.redeemed.body.refresh_token);
      assert.equal(result.revoked.status, 200, JSON.stringify(result.revoked));
      assert.equal(result.afterRevoke.status, 400);
      assert.equal(result.afterRevoke.body.error, "invalid_grant");
    });

    const bogusRefresh = { grant_type: "refresh_token", client_id: clientId };
    await t.step("the app reads the token endpoint's errors too", async () => {
      await page.goto(`${registered}/`);
      const res = await page.evaluate(
        ([form]) =>
          (window as unknown as { post: (p: string, f: unknown) => unknown }).post(
            "/oauth2/token",
            form,
          ),
        [{ ...bogusRefresh, refresh_token: "ort_" + "a".repeat(43) }],
      ) as { status: number; body: { error: string } };
      assert.equal(res.status, 400);
      assert.equal(res.body.error, "invalid_grant");
    });

    await t.step("the same page on an unregistered origin is blocked by the browser", async () => {
      const said: string[] = [];
      page.on("console", (message) => said.push(message.text()));
      await page.goto(`${unregistered}/`);
      for (const headers of [{}, { "x-request-id": "spa-2" }]) {
        const res = await page.evaluate(
          ([form, extra]) =>
            (window as unknown as { post: (p: string, f: unknown, h: unknown) => unknown })
              .post("/oauth2/token", form, extra),
          [{ ...bogusRefresh, refresh_token: "ort_" + "b".repeat(43) }, headers] as const,
        ) as { blocked?: string; status?: number };
        assert.match(res.blocked ?? "", /TypeError/, JSON.stringify(res));
      }
      // Blocked by CORS, and for no other reason (Chromium says why on the console).
      const cors = said.filter((line) =>
        line.includes("blocked by CORS policy") &&
        line.includes("No 'Access-Control-Allow-Origin' header")
      );
      assert.equal(cors.length, 2, said.join("\n"));
    });
    await context.close();
  } finally {
    await browser.close();
    for (const server of servers) await server.shutdown();
    await stack.stop();
  }
});
