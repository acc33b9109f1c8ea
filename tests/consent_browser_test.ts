/**
 * The consent page in a real browser (headless Chromium from Debian, driven by playwright-core):
 * the signed-in user's `session` cookie, the project's branding (its logo served over HTTPS from
 * its own host, which the page's Content-Security-Policy lets in), Allow with the keyboard, the
 * redirect back to the client with `code`, `state` and `iss`, the code redeemed with its verifier by
 * a stock OAuth client (oauth4webapi), the scopes shown in the project's declared words (the
 * sensitive one marked), a second authorization that shows no page at all (remembered consent),
 * one that asks only for a new scope (incremental consent) and Deny, and an unregistered redirect
 * URI that the browser is never sent to. Screenshots at a phone's and a desktop's size go to
 * SCREENSHOT_DIR when it is set.
 */

import assert from "node:assert/strict";
import * as oauth from "oauth4webapi";
import { httpClient, launchChromium, recorder, startStack } from "../lib/testing/mod.ts";
import { ensurePackages, packages } from "../tools/debian.ts";

const insecure = { [oauth.allowInsecureRequests]: true };

/** The logo's host: HTTPS with a certificate made for the test (the browser ignores its issuer). */
async function logoServer(): Promise<{ port: number; close(): Promise<void> }> {
  const dir = await Deno.makeTempDir({ prefix: "logo-" });
  const made = await new Deno.Command("openssl", {
    args: [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:P-256",
      "-nodes",
      "-days",
      "2",
      "-subj",
      "/CN=cdn.photobook.example",
      "-keyout",
      `${dir}/key.pem`,
      "-out",
      `${dir}/cert.pem`,
    ],
    stdout: "null",
    stderr: "piped",
  }).output();
  assert.ok(made.success, new TextDecoder().decode(made.stderr));
  const logo = `<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64" viewBox="0 0 64 64">
<rect width="64" height="64" rx="14" fill="#0f766e"/><path d="M16 44V20h14a8 8 0 0 1 0 16H22v8z" fill="#fff"/>
</svg>`;
  const server = Deno.serve({
    hostname: "127.0.0.1",
    port: 0,
    cert: await Deno.readTextFile(`${dir}/cert.pem`),
    key: await Deno.readTextFile(`${dir}/key.pem`),
    onListen() {},
  }, () => new Response(logo, { headers: { "content-type": "image/svg+xml" } }));
  return {
    port: server.addr.port,
    async close() {
      await server.shutdown();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

Deno.test("the consent page in Chromium: branding, Allow, Deny, an unregistered redirect URI", async (t) => {
  await ensurePackages([packages.chromium, packages.openssl]);
  const stack = await startStack();
  const app = recorder("<!doctype html><title>Photo Book</title><p>Back at the app</p>");
  const evil = recorder("<!doctype html><title>evil</title>");
  const logo = await logoServer();
  const api = httpClient(stack.gatewayUrl);
  const adminToken = await stack.token({ sub: "admin", projects: ["bp1"] });
  const userToken = await stack.token({ sub: "ada", accountId: "ada@example.com", projects: [] });
  const browser = await launchChromium([
    `--host-resolver-rules=MAP cdn.photobook.example 127.0.0.1:${logo.port}`,
  ]);
  const shots = Deno.env.get("SCREENSHOT_DIR");
  try {
    await api("PATCH", "/v1/projects/bp1/config", {
      token: adminToken,
      json: {
        application_name: "Photo Book",
        support_email: "help@photobook.example",
        logo_uri: "https://cdn.photobook.example/logo.svg",
        homepage_uri: "https://photobook.example",
        privacy_policy_uri: "https://photobook.example/privacy",
        terms_of_service_uri: "https://photobook.example/terms",
        scopes: [
          { name: "photos.read", description: "See the photos in your library", sensitive: false },
          { name: "albums.write", description: "Create and rename your albums", sensitive: false },
          {
            name: "photos.delete",
            description: "Permanently delete photos from your library",
            sensitive: true,
          },
        ],
      },
    });
    const redirect = `${app.base}/cb`;
    const created = await api("POST", "/v1/projects/bp1/clients", {
      token: adminToken,
      json: { name: "Photo Book web", type: "web", redirect_uris: [redirect] },
    });
    assert.equal(created.status, 201, created.text);
    const clientId = created.body.id as string;
    const secret = (await api("POST", `/v1/projects/bp1/clients/${clientId}/secrets`, {
      token: adminToken,
    })).body.secret as string;
    const as = await oauth.processDiscoveryResponse(
      new URL(stack.gatewayUrl),
      await oauth.discoveryRequest(new URL(stack.gatewayUrl), { algorithm: "oauth2", ...insecure }),
    );
    const context = await browser.newContext({
      viewport: { width: 1280, height: 800 },
      ignoreHTTPSErrors: true,
    });
    await context.addCookies([{ name: "session", value: userToken, url: stack.gatewayUrl }]);
    const page = await context.newPage();
    const requested: string[] = [];
    page.on("request", (r) => requested.push(r.url()));
    const failed: string[] = [];
    page.on("requestfailed", (r) => failed.push(`${r.url()}: ${r.failure()?.errorText}`));
    const authorizeUrl = async (
      redirectUri = redirect,
      state = "xyz-1",
      scope = "photos.read albums.write",
    ) => {
      const verifier = oauth.generateRandomCodeVerifier();
      const url = new URL(as.authorization_endpoint!);
      url.search = new URLSearchParams({
        response_type: "code",
        client_id: clientId,
        redirect_uri: redirectUri,
        scope,
        state,
        code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
        code_challenge_method: "S256",
      }).toString();
      return { url: url.href, verifier };
    };

    await t.step(
      "the page shows the branding, the scopes' descriptions, the account and the warning",
      async () => {
        const { url } = await authorizeUrl();
        const res = await page.goto(url);
        assert.equal(res?.status(), 200);
        const heading = page.getByRole("heading", { level: 1 });
        assert.equal(await heading.textContent(), "Photo Book wants to access your account");
        assert.match(await page.locator("main").innerText(), /Signed in as ada@example\.com/);
        // The scopes in the project's words; the names only in small print.
        assert.ok(await page.getByText("See the photos in your library").isVisible());
        assert.ok(await page.getByText("Create and rename your albums").isVisible());
        const nameSize = await page.locator(".scope-name code").first().evaluate((e) =>
          Number.parseFloat(
            (globalThis as unknown as {
              getComputedStyle(e: unknown): { fontSize: string };
            }).getComputedStyle(e).fontSize,
          )
        );
        assert.ok(nameSize <= 12.5, `the scope's name is small print (${nameSize}px)`);
        assert.equal(await page.getByText("Sensitive").count(), 0);
        assert.ok(
          await page.getByRole("heading", { name: "This app is not verified" }).isVisible(),
        );
        for (const name of ["Home page", "Privacy policy", "Terms of service"]) {
          assert.ok(await page.getByRole("link", { name }).isVisible(), name);
        }
        assert.ok(await page.getByRole("link", { name: /help@photobook\.example/ }).isVisible());
        assert.ok(await page.getByRole("button", { name: "Allow" }).isVisible());
        assert.ok(await page.getByRole("button", { name: "Deny" }).isVisible());
        // The logo loaded (the CSP lets in that one URL), and nothing else came from elsewhere.
        // Waited for, not assumed done at the load event: on a busy machine the logo's own HTTPS
        // server may answer late.
        const loaded = await page.waitForFunction(
          () => {
            const shown = (globalThis as unknown as {
              document: { querySelector(s: string): { complete: boolean; naturalWidth: number } };
            }).document.querySelector("img.logo");
            return shown.complete && shown.naturalWidth > 0;
          },
          undefined,
          { timeout: 30_000 },
        ).then(() => true, () => false);
        assert.ok(loaded, `the logo did not load; failed requests: ${failed.join(", ") || "none"}`);
        const foreign = requested.filter((u) =>
          !u.startsWith(stack.gatewayUrl) && u !== "https://cdn.photobook.example/logo.svg"
        );
        assert.deepEqual(foreign, []);
        if (shots) {
          await Deno.mkdir(shots, { recursive: true });
          await page.screenshot({ path: `${shots}/consent-desktop.png`, fullPage: true });
          await page.setViewportSize({ width: 390, height: 844 });
          await page.screenshot({ path: `${shots}/consent-phone.png`, fullPage: true });
          await page.setViewportSize({ width: 1280, height: 800 });
        }
      },
    );

    await t.step(
      "Allow, with the keyboard: back at the client with code, state and iss",
      async () => {
        const { url, verifier } = await authorizeUrl();
        await page.goto(url);
        // Tab through the page to the Allow button, as a keyboard user would.
        let focused = "";
        for (let i = 0; i < 20 && focused !== "Allow"; i++) {
          await page.keyboard.press("Tab");
          focused = await page.evaluate<string>('document.activeElement?.textContent ?? ""');
        }
        assert.equal(focused, "Allow");
        await Promise.all([page.waitForURL(`${redirect}?**`), page.keyboard.press("Enter")]);
        const back = new URL(page.url());
        assert.equal(back.searchParams.get("state"), "xyz-1");
        assert.equal(back.searchParams.get("iss"), stack.gatewayUrl);
        // The redirect reached the client's own server with the code (the browser may ask that
        // server for /favicon.ico after it: the last request is not always the redirect).
        const redirected = app.seen.findLast((u) => u.pathname === "/cb");
        assert.equal(redirected?.searchParams.get("code"), back.searchParams.get("code"));
        const tokens = await oauth.processAuthorizationCodeResponse(
          as,
          { client_id: clientId },
          await oauth.authorizationCodeGrantRequest(
            as,
            { client_id: clientId },
            oauth.ClientSecretBasic(secret),
            oauth.validateAuthResponse(as, { client_id: clientId }, back, "xyz-1"),
            redirect,
            verifier,
            insecure,
          ),
        );
        assert.equal(tokens.scope, "photos.read albums.write");
        assert.ok(tokens.refresh_token);
      },
    );

    await t.step("a second authorization shows no page: back at the client at once", async () => {
      const { url, verifier } = await authorizeUrl(redirect, "xyz-3", "albums.write");
      const pages: string[] = [];
      const seen = (r: { url(): string; status(): number; headers(): Record<string, string> }) =>
        pages.push(`${r.status()} ${r.headers()["content-type"] ?? ""} ${r.url().split("?")[0]}`);
      page.on("response", seen);
      await page.goto(url);
      page.off("response", seen);
      const back = new URL(page.url());
      assert.equal(`${back.origin}${back.pathname}`, redirect);
      assert.equal(back.searchParams.get("state"), "xyz-3");
      // The authorization endpoint answered with a redirect, never a page.
      assert.deepEqual(
        pages.filter((p) => p.includes("/oauth2/authorize")),
        [`302  ${as.authorization_endpoint}`],
      );
      const tokens = await oauth.processAuthorizationCodeResponse(
        as,
        { client_id: clientId },
        await oauth.authorizationCodeGrantRequest(
          as,
          { client_id: clientId },
          oauth.ClientSecretBasic(secret),
          oauth.validateAuthResponse(as, { client_id: clientId }, back, "xyz-3"),
          redirect,
          verifier,
          insecure,
        ),
      );
      assert.equal(tokens.scope, "albums.write");
    });

    await t.step("a new scope: only it is asked for, marked sensitive; Deny", async () => {
      const { url } = await authorizeUrl(redirect, "xyz-2", "photos.read photos.delete");
      const res = await page.goto(url);
      assert.equal(res?.status(), 200);
      const listed = await page.locator("ul.scopes").innerText();
      assert.match(listed, /Permanently delete photos from your library/);
      assert.doesNotMatch(listed, /See the photos/);
      assert.ok(await page.getByText("Sensitive", { exact: true }).isVisible());
      assert.match(
        await page.locator("main").innerText(),
        /Already allowed: See the photos in your library\./,
      );
      if (shots) {
        await page.screenshot({ path: `${shots}/consent-more-desktop.png`, fullPage: true });
        await page.setViewportSize({ width: 390, height: 844 });
        await page.screenshot({ path: `${shots}/consent-more-phone.png`, fullPage: true });
        await page.setViewportSize({ width: 1280, height: 800 });
      }
      await Promise.all([
        page.waitForURL(`${redirect}?**`),
        page.getByRole("button", { name: "Deny" }).click(),
      ]);
      const back = new URL(page.url());
      assert.equal(back.searchParams.get("error"), "access_denied");
      assert.equal(back.searchParams.get("state"), "xyz-2");
      assert.equal(back.searchParams.get("code"), null);
    });

    await t.step("an unregistered redirect URI: an error page, and the browser stays", async () => {
      const { url } = await authorizeUrl(`${evil.base}/cb`);
      const res = await page.goto(url);
      assert.equal(res?.status(), 400);
      assert.ok(page.url().startsWith(stack.gatewayUrl));
      assert.match(await page.locator("main").innerText(), /cannot be completed/);
      assert.match(await page.locator("main").innerText(), /not one of the client's registered/);
      assert.deepEqual(evil.seen, []);
      if (shots) await page.screenshot({ path: `${shots}/consent-error.png`, fullPage: true });
    });
    await context.close();
  } finally {
    await browser.close();
    await logo.close();
    await app.server.shutdown();
    await evil.server.shutdown();
    await stack.stop();
  }
});
