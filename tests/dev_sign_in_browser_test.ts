/**
 * The development sign-in page in a real browser (headless Chromium from Debian, driven by
 * playwright-core), under `deno task start` itself, run as a user runs it (with DATABASE_URL: each
 * component a process, the gateway tools/dev_gateway.ts): from an application's authorization URL,
 * without a session, to the sign-in page; an example account, then the consent page signed in as
 * it, and Allow back to the application with a code. A typed account id, submitted with Enter,
 * works too, and `/` links the page. Screenshots go to SCREENSHOT_DIR, or a temporary folder; their
 * paths are printed.
 */

import assert from "node:assert/strict";
import * as oauth from "oauth4webapi";
import {
  createTestDatabase,
  httpClient,
  launchChromium,
  recorder,
  spawnStartTask,
  startTaskPorts,
} from "../lib/testing/mod.ts";
import { ensurePackages, packages } from "../tools/debian.ts";

Deno.test("deno task start: from an app's authorization URL to the dev sign-in page, then consent", async (t) => {
  await ensurePackages([packages.chromium]);
  const db = await createTestDatabase();
  const dir = await Deno.makeTempDir({ prefix: "dev-sign-in-" });
  const shots = Deno.env.get("SCREENSHOT_DIR") ??
    await Deno.makeTempDir({ prefix: "dev-sign-in-shots-" });
  await Deno.mkdir(shots, { recursive: true });
  const saved: string[] = [];
  const ports = startTaskPorts();
  const gatewayUrl = `http://127.0.0.1:${ports.GATEWAY_PORT}`;
  const app = recorder("<!doctype html><title>Notes</title><p>Back at the app</p>");
  const stack = spawnStartTask({
    DATABASE_URL: db.url,
    START_DATA_DIR: dir,
    ...ports,
    LOG_LEVEL: "warn",
    // Whatever the caller's environment says: start sets these.
    LOGIN_URL: "",
    ISSUER_URL: "",
    AUTH_JWT_SECRET: "",
  });
  let banner: string, token: string;
  try {
    ({ banner, token } = await stack.up);
  } catch (error) {
    await stack.stop();
    throw error;
  }
  const browser = await launchChromium();
  try {
    assert.match(banner, new RegExp(`Sign in \\(browser\\): +${gatewayUrl}/dev/sign-in`));
    const api = httpClient(gatewayUrl);
    const config = await api("PATCH", "/v1/projects/demo/config", {
      token,
      json: { application_name: "Notes", support_email: "help@notes.example" },
    });
    assert.equal(config.status, 200, config.text);
    const redirect = `${app.base}/cb`;
    const created = await api("POST", "/v1/projects/demo/clients", {
      token,
      json: { name: "Notes web", type: "web", redirect_uris: [redirect] },
    });
    assert.equal(created.status, 201, created.text);
    const clientId = created.body.id as string;
    const authorizeUrl = async (state: string) => {
      const url = new URL(`${gatewayUrl}/oauth2/authorize`);
      url.search = new URLSearchParams({
        response_type: "code",
        client_id: clientId,
        redirect_uri: redirect,
        scope: "notes.read",
        state,
        code_challenge: await oauth.calculatePKCECodeChallenge(
          oauth.generateRandomCodeVerifier(),
        ),
        code_challenge_method: "S256",
      }).toString();
      return url;
    };
    const shot = async (page: import("playwright-core").Page, name: string) => {
      const path = `${shots}/${name}.png`;
      await page.screenshot({ path, fullPage: true });
      saved.push(path);
    };

    await t.step(
      "no session: the sign-in page, then an example account, then consent",
      async () => {
        const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
        const page = await context.newPage();
        const requested: string[] = [];
        page.on("request", (r) => requested.push(r.url()));
        const url = await authorizeUrl("st-1");
        const res = await page.goto(url.href);
        assert.equal(res?.status(), 200);
        const at = new URL(page.url());
        assert.equal(`${at.origin}${at.pathname}`, `${gatewayUrl}/dev/sign-in`);
        assert.equal(at.searchParams.get("return_to"), `${url.pathname}${url.search}`);
        assert.equal(await page.getByRole("heading", { level: 1 }).textContent(), "Sign in");
        assert.match(
          await page.getByRole("note").innerText(),
          /For development only[^]*only under deno task start/,
        );
        await shot(page, "dev-sign-in-desktop");
        await page.setViewportSize({ width: 390, height: 844 });
        await shot(page, "dev-sign-in-phone");
        await page.setViewportSize({ width: 1280, height: 800 });
        await Promise.all([
          page.waitForURL(`${gatewayUrl}/oauth2/authorize?**`),
          page.getByRole("button", { name: /Grace Hopper/ }).click(),
        ]);
        assert.equal(
          await page.getByRole("heading", { level: 1 }).textContent(),
          "Notes wants to access your account",
        );
        assert.match(await page.locator("main").innerText(), /Signed in as grace@example\.com/);
        assert.ok(await page.getByText("notes.read").isVisible());
        await shot(page, "dev-sign-in-then-consent");
        const [cookie] = await context.cookies(gatewayUrl);
        assert.equal(cookie?.name, "session");
        assert.equal(cookie?.httpOnly, true);
        assert.equal(cookie?.sameSite, "Lax");
        assert.equal(cookie?.path, "/");
        // Nothing was asked of anywhere else.
        assert.deepEqual(requested.filter((u) => !u.startsWith(gatewayUrl)), []);
        // Allow: back at the application with a code.
        await Promise.all([
          page.waitForURL(`${redirect}?**`),
          page.getByRole("button", { name: "Allow" }).click(),
        ]);
        const back = new URL(page.url());
        assert.equal(back.searchParams.get("state"), "st-1");
        assert.match(back.searchParams.get("code") ?? "", /^oac_/);
        await context.close();
      },
    );

    await t.step("a typed account id, with Enter; / links the page", async () => {
      const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
      const page = await context.newPage();
      await page.goto(`${gatewayUrl}/`);
      await shot(page, "home");
      await Promise.all([
        page.waitForURL(`${gatewayUrl}/dev/sign-in**`),
        page.getByRole("link", { name: /Sign in \(development\)/ }).click(),
      ]);
      const url = await authorizeUrl("st-2");
      await page.goto(url.href);
      await page.getByLabel("Account id").fill("dev-user-7");
      await Promise.all([
        page.waitForURL(`${gatewayUrl}/oauth2/authorize?**`),
        page.getByLabel("Account id").press("Enter"),
      ]);
      assert.match(await page.locator("main").innerText(), /Signed in as dev-user-7/);
      await context.close();
    });
  } finally {
    await browser.close();
    await app.server.shutdown();
    const status = await stack.stop();
    await Deno.remove(dir, { recursive: true });
    await db.drop();
    assert.equal(status.code, 0, stack.stderr.join("\n"));
    // deno-lint-ignore no-console
    console.log(`screenshots:\n${saved.map((p) => `  ${p}`).join("\n")}`);
  }
});
