/**
 * The API reference page (`GET /docs`) in a real browser (headless Chromium from Debian, driven by
 * playwright-core), against the real stack: every operation of the gateway's `/openapi.json`
 * rendered by Swagger UI with its summary, method and path; no request of the page to another
 * origin, none that fails, no error in the console (a Content-Security-Policy violation among
 * them); the filter by tag; an operation tried from the page ("Try it out", "Execute": a fetch to
 * this origin that the policy lets through); the page at a phone's width without sideways
 * scrolling; the bundle's ETag (HEAD, 304); and 405 with the JSON error body for a POST.
 * Screenshots at a phone's and a desktop's size go to SCREENSHOT_DIR when it is set.
 */

import assert from "node:assert/strict";
import type { Browser, Page, Request } from "playwright-core";
import { launchChromium, startStack } from "../lib/testing/mod.ts";
import { ensurePackages, packages } from "../tools/debian.ts";

/** One operation of the OpenAPI document. */
interface Operation {
  method: string;
  path: string;
  operationId?: string;
  summary?: string;
  tags?: string[];
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

/** Opens `/docs` in a new context and waits until Swagger UI has rendered it. */
async function openDocs(
  browser: Browser,
  gatewayUrl: string,
  viewport: { width: number; height: number },
  phone = false,
): Promise<{ page: Page; watch: Watch; close(): Promise<void> }> {
  const context = await browser.newContext({ viewport, isMobile: phone, hasTouch: phone });
  const page = await context.newPage();
  const watch: Watch = { requested: [], problems: [] };
  // The page's requests still under way: Playwright's "networkidle" state waits for 500 ms without
  // any, and says nothing of which one kept it busy when it times out.
  const pending = new Set<Request>();
  page.on("request", (r) => {
    watch.requested.push(r.url());
    pending.add(r);
  });
  page.on("requestfinished", (r) => pending.delete(r));
  page.on("requestfailed", (r) => {
    pending.delete(r);
    watch.problems.push(`failed: ${r.url()} ${r.failure()?.errorText}`);
  });
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
  assert.equal(await page.getAttribute("html", "data-reference"), "ready", "Swagger UI rendered");
  await page.waitForLoadState("load");
  for (let waited = 0; pending.size > 0; waited += 50) {
    assert.ok(
      waited < 60_000,
      `requests of the page still open after 60 s: ${[...pending].map((r) => r.url()).join(", ")}`,
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return { page, watch, close: () => context.close() };
}

/** Swagger UI's block of an operation: its method's class and its path. */
function operationBlock(page: Page, op: Operation) {
  return page.locator(`.opblock.opblock-${op.method}`).filter({
    has: page.locator(`.opblock-summary-path[data-path="${op.path}"]`),
  });
}

/** Opens the first POST operation and scrolls it to the top of the window, for a screenshot. */
async function scrollToOperation(page: Page, operations: Operation[]): Promise<void> {
  const block = operationBlock(page, operations.find((o) => o.method === "post")!);
  await block.locator(".opblock-summary-control").click();
  await block.locator(".opblock-body").waitFor();
  await block.evaluate((e) =>
    (e as unknown as { scrollIntoView(options: object): void }).scrollIntoView({ block: "start" })
  );
}

/** Fails on what the page did wrong: any request to another origin, any failure or error. */
async function assertClean(page: Page, watch: Watch, gatewayUrl: string): Promise<void> {
  const origin = new URL(gatewayUrl).origin;
  // A `blob:` URL's origin is its creator's; `data:` goes nowhere.
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
        const block = operationBlock(page, op);
        if ((await block.count()) !== 1) {
          missing.push(`${name}: ${await block.count()} blocks`);
          continue;
        }
        const verb = (await block.locator(".opblock-summary-method").innerText()).trim();
        if (verb !== op.method.toUpperCase()) missing.push(`${name}: method ${verb}`);
        const shown = (await block.locator(".opblock-summary-path").innerText()).replace(/\s/g, "");
        if (shown !== op.path) missing.push(`${name}: path shown as ${JSON.stringify(shown)}`);
        if (op.summary !== undefined) {
          const summary = (await block.locator(".opblock-summary-description").innerText()).trim();
          if (summary !== op.summary) missing.push(`${name}: summary ${JSON.stringify(summary)}`);
        }
      }
      assert.deepEqual(missing, [], "operations of /openapi.json not rendered");

      // The filter by tag: only the operations of the tag typed stay.
      const tag = operations.find((op) => op.tags?.[0] === "OAuth 2")!.tags![0]!;
      const filter = page.locator("input.operation-filter-input");
      await filter.fill(tag);
      const tagged = operations.filter((op) => op.tags?.includes(tag)).length;
      await page.waitForFunction(
        (n) =>
          (globalThis as unknown as {
            document: { querySelectorAll(s: string): { length: number } };
          }).document.querySelectorAll(".opblock").length === n,
        tagged,
      );
      await filter.fill("");
      await page.waitForFunction(
        (n) =>
          (globalThis as unknown as {
            document: { querySelectorAll(s: string): { length: number } };
          }).document.querySelectorAll(".opblock").length === n,
        operations.length,
      );

      // An operation tried from the page: the request goes to this origin and its answer shows.
      const healthz = operationBlock(page, operations.find((op) => op.path === "/healthz")!);
      await healthz.locator(".opblock-summary-control").click();
      await healthz.getByRole("button", { name: "Try it out" }).click();
      await healthz.getByRole("button", { name: "Execute" }).click();
      await healthz.locator(".live-responses-table .response-col_status", { hasText: "200" })
        .waitFor();
      await healthz.locator(".opblock-summary-control").click();

      if (shots) {
        await page.screenshot({ path: `${shots}/docs-desktop.png` });
        await scrollToOperation(page, operations);
        await page.screenshot({ path: `${shots}/docs-desktop-operation.png` });
      }
      await assertClean(page, watch, stack.gatewayUrl);
      for (
        const path of [
          "/docs",
          "/docs/swagger-ui-bundle.js",
          "/docs/swagger-ui.css",
          "/docs/reference.js",
          "/openapi.json",
          "/healthz",
        ]
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
      const src = /<script src="(\/docs\/swagger-ui-bundle\.js[^"]*)"/.exec(html)?.[1];
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
