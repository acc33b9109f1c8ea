/**
 * The device flow's verification page in a real browser (headless Chromium from Debian, driven by
 * playwright-core): the signed-in user opens `verification_uri_complete`, finds the code field
 * filled in, clicks Continue, then Allow, and the device, which has been polling all along as
 * RFC 8628 3.5 says (a stock client, oauth4webapi), gets its tokens. Then the same with the code
 * typed with the keyboard, and Deny. Screenshots at a phone's size (390x844) and a desktop's
 * (1280x800) go to SCREENSHOT_DIR, or to a temporary folder that the test names.
 */

import assert from "node:assert/strict";
import * as oauth from "oauth4webapi";
import { httpClient, launchChromium, startStack } from "../lib/testing/mod.ts";
import { ensurePackages, packages } from "../tools/debian.ts";

const insecure = { [oauth.allowInsecureRequests]: true };

Deno.test("the device verification page in Chromium: pre-filled code, Continue, Allow; typed, Deny", async (t) => {
  await ensurePackages([packages.chromium]);
  const stack = await startStack();
  const api = httpClient(stack.gatewayUrl);
  const admin = await stack.token({ sub: "admin", projects: ["db1"] });
  const user = await stack.token({ sub: "ada", accountId: "ada@example.com", projects: [] });
  const browser = await launchChromium();
  const shots = Deno.env.get("SCREENSHOT_DIR") ??
    await Deno.makeTempDir({ prefix: "device-screens-" });
  await Deno.mkdir(shots, { recursive: true });
  // Where they went, for whoever looks at them (the only output of this test).
  await Deno.stderr.write(new TextEncoder().encode(`screenshots: ${shots}\n`));
  try {
    await api("PATCH", "/v1/projects/db1/config", {
      token: admin,
      json: {
        application_name: "Living Room TV",
        support_email: "help@tv.example",
        homepage_uri: "https://tv.example",
        privacy_policy_uri: "https://tv.example/privacy",
      },
    });
    const created = await api("POST", "/v1/projects/db1/clients", {
      token: admin,
      json: { name: "TV app", type: "native", redirect_uris: ["http://127.0.0.1/cb"] },
    });
    assert.equal(created.status, 201, created.text);
    const client = { client_id: created.body.id as string };
    const as = await oauth.processDiscoveryResponse(
      new URL(stack.gatewayUrl),
      await oauth.discoveryRequest(new URL(stack.gatewayUrl), { algorithm: "oauth2", ...insecure }),
    );
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    await context.addCookies([{ name: "session", value: user, url: stack.gatewayUrl }]);
    const page = await context.newPage();
    const requested: string[] = [];
    page.on("request", (r) => requested.push(r.url()));

    /** The device: asks for codes, then polls as RFC 8628 3.5 says until an answer. */
    const device = async () => {
      const codes = await oauth.processDeviceAuthorizationResponse(
        as,
        client,
        await oauth.deviceAuthorizationRequest(as, client, oauth.None(), {
          scope: "tv.watch",
        }, insecure),
      );
      const seen: string[] = [];
      const answer = (async () => {
        let interval = codes.interval!;
        for (;;) {
          await new Promise((r) => setTimeout(r, interval * 1000));
          try {
            return await oauth.processDeviceCodeResponse(
              as,
              client,
              await oauth.deviceCodeGrantRequest(
                as,
                client,
                oauth.None(),
                codes.device_code,
                insecure,
              ),
            );
          } catch (error) {
            if (!(error instanceof oauth.ResponseBodyError)) throw error;
            seen.push(error.error);
            if (error.error === "slow_down") interval += 5;
            else if (error.error !== "authorization_pending") return error.error;
          }
        }
      })();
      return { codes, answer, seen };
    };
    const both = async (name: string) => {
      await page.screenshot({ path: `${shots}/${name}-desktop.png`, fullPage: true });
      await page.setViewportSize({ width: 390, height: 844 });
      await page.screenshot({ path: `${shots}/${name}-phone.png`, fullPage: true });
      await page.setViewportSize({ width: 1280, height: 800 });
    };

    await t.step("verification_uri_complete, Continue, Allow: the device gets tokens", async () => {
      const { codes, answer, seen } = await device();
      const res = await page.goto(codes.verification_uri_complete!);
      assert.equal(res?.status(), 200);
      assert.equal(await page.getByRole("heading", { level: 1 }).textContent(), "Connect a device");
      const field = page.getByLabel(/code/i);
      assert.equal(await field.inputValue(), codes.user_code);
      await both("device-code-form");
      await Promise.all([
        page.waitForURL(`${stack.gatewayUrl}/oauth2/device`),
        page.getByRole("button", { name: "Continue" }).click(),
      ]);
      assert.equal(
        await page.getByRole("heading", { level: 1 }).textContent(),
        "Living Room TV wants to access your account",
      );
      assert.ok(await page.getByText("tv.watch").isVisible());
      assert.ok(await page.getByText(codes.user_code).isVisible());
      assert.ok(await page.getByRole("button", { name: "Deny" }).isVisible());
      await both("device-consent");
      await page.getByRole("button", { name: "Allow" }).click();
      await page.getByRole("heading", { name: "You can return to your device" }).waitFor();
      await both("device-done");
      const tokens = await answer;
      assert.equal(typeof tokens, "object", `the device got ${String(tokens)}`);
      assert.equal((tokens as oauth.TokenEndpointResponse).scope, "tv.watch");
      assert.ok((tokens as oauth.TokenEndpointResponse).refresh_token);
      // It polled while the user decided, and was told to wait (never to slow down).
      assert.ok(!seen.includes("slow_down"), seen.join());
      // Nothing came from anywhere but the gateway.
      assert.deepEqual(requested.filter((u) => !u.startsWith(stack.gatewayUrl)), []);
    });

    await t.step("the code typed with the keyboard, a wrong one first; then Deny", async () => {
      const { codes, answer } = await device();
      await page.goto(codes.verification_uri);
      const field = page.getByLabel(/code/i);
      assert.equal(await field.inputValue(), "");
      // Tab to the field, as a keyboard user would.
      let focused = "";
      for (let i = 0; i < 10 && focused !== "user_code"; i++) {
        await page.keyboard.press("Tab");
        focused = await page.evaluate<string>('document.activeElement?.id ?? ""');
      }
      assert.equal(focused, "user_code");
      await page.keyboard.type("bcdf-bcdf");
      await Promise.all([page.waitForLoadState("load"), page.keyboard.press("Enter")]);
      await page.getByRole("alert").waitFor();
      assert.match(await page.getByRole("alert").innerText(), /That code is not valid/);
      assert.equal(await field.getAttribute("aria-invalid"), "true");
      await both("device-wrong-code");
      await field.fill(codes.user_code.replace("-", "").toLowerCase());
      await page.keyboard.press("Enter");
      await page.getByRole("button", { name: "Deny" }).click();
      await page.getByRole("heading", { name: "You can return to your device" }).waitFor();
      assert.match(await page.locator("main").innerText(), /You denied Living Room TV access/);
      assert.equal(await answer, "access_denied");
    });
    await context.close();
  } finally {
    await browser.close();
    await stack.stop();
  }
});
