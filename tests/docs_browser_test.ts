/**
 * The API reference page (`GET /docs`) in a real browser (headless Chromium from Debian, driven by
 * playwright-core), against the real stack: every operation of the gateway's `/openapi.json`
 * rendered with its summary, method and path; no request of the page to another origin, none that
 * fails, no error in the console (a Content-Security-Policy violation among them); Redoc's search,
 * whose worker runs from a `blob:` URL; the page at a phone's width without sideways scrolling;
 * the bundle's ETag (HEAD, 304); and 405 with the JSON error body for a POST. Screenshots at a
 * phone's and a desktop's size go to SCREENSHOT_DIR when it is set.
 */

import assert from "node:assert/strict";
import type { Browser, Page } from "playwright-core";
import { launchChromium, startStack } from "../lib/testing/mod.ts";
import { ensurePackages, packages } from "../tools/debian.ts";

/** One operation of the OpenAPI document. */
interface Operation {
  method: string;
  path: string;
  operationId?: string;
  summary?: string;
}

const methods = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

/** Every operation (every method under every path) of an OpenAPI document. */
function operationsOf(document: { paths?: Record<string, Record<string, unknown>> }): Operation[] {
  return Object.entries(document.paths ?? {}).flatMap(([path, item]) =>
    Object.entries(item)
      .filter(([method]) => methods.includes(method))
      .map(([method, op]) => ({ method, path, ...(op as Omit<Operation, "method" | "path">) }))
  );
}

/** What a page did that it should not: requests elsewhere or failed, console errors. */
interface Watch {
  requested: string[];
  problems: string[];
}

/** Opens `/docs` in a new context and waits until Redoc has rendered it. */
async function openDocs(
  browser: Browser,
  gatewayUrl: string,
  viewport: { width: number; height: number },
  phone = false,
): Promise<{ page: Page; watch: Watch; close(): Promise<void> }> {
  const context = await browser.newContext({ viewport, isMobile: phone, hasTouch: phone });
  const page = await context.newPage();
  const watch: Watch = { requested: [], problems: [] };
  page.on("request", (r) => watch.requested.push(r.url()));
  page.on(
    "requestfailed",
    (r) => watch.problems.push(`failed: ${r.url()} ${r.failure()?.errorText}`),
  );
  page.on("console", (m) => {
    if (m.type() === "error" || /content.security.policy/i.test(m.text())) {
      watch.problems.push(`console ${m.type()}: ${m.text()}`);
    }
  });
  page.on("pageerror", (e) => watch.problems.push(`page error: ${e.message}`));
  // Violations also as the page's own `securitypolicyviolation` events, besides the console.
  await page.addInitScript({
    content: `document.addEventListener("securitypolicyviolation", (e) => {
      (globalThis.cspViolations ??= []).push(e.effectiveDirective + " " + e.blockedURI);
    });`,
  });
  const res = await page.goto(`${gatewayUrl}/docs`);
  assert.equal(res?.status(), 200);
  await page.waitForSelector("html[data-reference]", { timeout: 60_000 });
  assert.equal(await page.getAttribute("html", "data-reference"), "ready", "Redoc rendered");
  await page.waitForLoadState("networkidle");
  return { page, watch, close: () => context.close() };
}

/** Scrolls the first POST operation's heading to the top of the window, for a screenshot. */
async function scrollToOperation(page: Page, operations: Operation[]): Promise<void> {
  const op = operations.find((o) => o.method === "post" && o.operationId)!;
  await page.locator(`[data-section-id="operation/${op.operationId}"] h2`).first().evaluate((e) =>
    (e as unknown as { scrollIntoView(options: object): void }).scrollIntoView({ block: "start" })
  );
}

/** Fails on what the page did wrong: any request to another origin, any failure or error. */
async function assertClean(page: Page, watch: Watch, gatewayUrl: string): Promise<void> {
  const origin = new URL(gatewayUrl).origin;
  // A `blob:` URL's origin is its creator's (Redoc's search worker); `data:` goes nowhere.
  const foreign = watch.requested.filter((u) =>
    !u.startsWith("data:") && new URL(u).origin !== origin
  );
  assert.deepEqual(foreign, [], "requests to another origin");
  const violations = await page.evaluate<string[]>("globalThis.cspViolations ?? []");
  assert.deepEqual(violations, [], "Content-Security-Policy violations");
  assert.deepEqual(watch.problems, []);
}

Deno.test("the API reference in Chromium: every operation, this origin only, 304, 405", async (t) => {
  await ensurePackages([packages.chromium]);
  const stack = await startStack();
  const browser = await launchChromium();
  const shots = Deno.env.get("SCREENSHOT_DIR");
  if (shots) await Deno.mkdir(shots, { recursive: true });
  try {
    const documentRes = await fetch(`${stack.gatewayUrl}/openapi.json`);
    assert.equal(documentRes.status, 200);
    const operations = operationsOf(await documentRes.json());
    assert.ok(operations.length > 10, `${operations.length} operations in /openapi.json`);

    await t.step("desktop: every operation rendered, nothing from another origin", async () => {
      const { page, watch, close } = await openDocs(browser, stack.gatewayUrl, {
        width: 1440,
        height: 900,
      });
      assert.equal(await page.title(), "OAuth client registry API reference");
      const missing: string[] = [];
      for (const op of operations) {
        const name = `${op.method.toUpperCase()} ${op.path}`;
        const heading = op.summary ?? op.operationId ?? name;
        // Redoc gives each operation a section named after its operationId.
        const section = op.operationId === undefined
          ? page.locator("[data-section-id]").filter({
            has: page.getByRole("heading", { level: 2, name: heading, exact: true }),
          }).last()
          : page.locator(`[data-section-id="operation/${op.operationId}"]`);
        if ((await section.count()) !== 1) {
          missing.push(`${name}: no section`);
          continue;
        }
        const text = await section.innerText();
        const shown = (await section.locator("h2").first().innerText()).trim();
        const verb = (await section.locator(".http-verb").first().innerText()).trim();
        if (shown !== heading) missing.push(`${name}: heading ${JSON.stringify(shown)}`);
        if (verb !== op.method.toUpperCase()) missing.push(`${name}: method ${verb}`);
        if (!text.includes(op.path)) missing.push(`${name}: path not shown`);
      }
      assert.deepEqual(missing, [], "operations of /openapi.json not rendered");

      // The search index is built in a worker from a blob: URL (worker-src blob:).
      const first = operations.find((op) => op.summary)!;
      const search = page.getByRole("search").locator("input");
      await search.fill(first.summary!);
      const results = page.locator('[data-role="search:results"]');
      await results.getByText(first.summary!, { exact: true }).first().waitFor();
      await search.fill("");

      if (shots) {
        await page.screenshot({ path: `${shots}/docs-desktop.png` });
        await scrollToOperation(page, operations);
        await page.screenshot({ path: `${shots}/docs-desktop-operation.png` });
      }
      await assertClean(page, watch, stack.gatewayUrl);
      for (
        const path of ["/docs", "/docs/redoc.standalone.js", "/docs/reference.js", "/openapi.json"]
      ) {
        assert.ok(
          watch.requested.some((u) => new URL(u).pathname === path),
          `the page requested ${path}`,
        );
      }
      await close();
    });

    await t.step("phone: no sideways scrolling, nothing from another origin", async () => {
      const { page, watch, close } = await openDocs(browser, stack.gatewayUrl, {
        width: 390,
        height: 844,
      }, true);
      const width = await page.evaluate<number>("document.documentElement.scrollWidth");
      assert.ok(width <= 390, `the page is ${width}px wide`);
      if (shots) {
        await page.screenshot({ path: `${shots}/docs-phone.png` });
        await scrollToOperation(page, operations);
        await page.screenshot({ path: `${shots}/docs-phone-operation.png` });
      }
      await assertClean(page, watch, stack.gatewayUrl);
      await close();
    });

    await t.step("the bundle: strong ETag, HEAD, If-None-Match answered 304", async () => {
      const html = await (await fetch(`${stack.gatewayUrl}/docs`)).text();
      const src = /<script src="(\/docs\/redoc\.standalone\.js[^"]*)"/.exec(html)?.[1];
      assert.ok(src, "the page links the bundle");
      const url = `${stack.gatewayUrl}${src}`;
      const full = await fetch(url, { headers: { "accept-encoding": "identity" } });
      assert.equal(full.status, 200);
      const etag = full.headers.get("etag")!;
      assert.match(etag, /^"[0-9a-f]{32}"$/);
      assert.match(full.headers.get("cache-control")!, /^public, max-age=\d+$/);
      const length = (await full.arrayBuffer()).byteLength;

      const head = await fetch(url, { method: "HEAD", headers: { "accept-encoding": "identity" } });
      assert.equal(head.status, 200);
      assert.equal(head.headers.get("etag"), etag);
      assert.equal(head.headers.get("content-length"), String(length));
      assert.equal(await head.text(), "");

      const again = await fetch(url, {
        headers: { "accept-encoding": "identity", "if-none-match": etag },
      });
      assert.equal(again.status, 304);
      assert.equal(again.headers.get("etag"), etag);
      assert.equal(await again.text(), "");
    });

    await t.step("POST /docs: 405 with Allow and the JSON error body", async () => {
      const res = await fetch(`${stack.gatewayUrl}/docs`, { method: "POST", body: "x" });
      assert.equal(res.status, 405);
      assert.equal(res.headers.get("allow"), "GET, HEAD");
      assert.match(res.headers.get("content-type")!, /^application\/json/);
      assert.deepEqual(await res.json(), {
        error: {
          code: "unimplemented",
          message: "POST is not allowed here; use GET, HEAD",
          details: [],
        },
      });
    });
  } finally {
    await browser.close();
    await stack.stop();
  }
});
