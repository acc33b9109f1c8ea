/**
 * The API reference page without a browser: its headers (the Content-Security-Policy above all),
 * the assets it links and their validators (304, HEAD, gzip), 405 for other methods, the paths it
 * leaves to the router, and Swagger UI's one request elsewhere (the validator badge) switched off.
 */

import assert from "node:assert/strict";
import {
  acceptsGzip,
  docsContentSecurityPolicy,
  docsPage,
  docsTitle,
  swaggerUiOptions,
} from "./docs_page.ts";

const base = "http://gateway.test";

async function request(path: string, init: RequestInit = {}): Promise<Response | undefined> {
  const req = new Request(`${base}${path}`, init);
  return await docsPage(req, new URL(req.url));
}

async function answer(path: string, init: RequestInit = {}): Promise<Response> {
  const res = await request(path, init);
  assert.ok(res, `${path} is answered`);
  return res;
}

/** The paths of the page's scripts and style sheets (their `?v=` is part of the URL). */
async function linkedAssets(): Promise<string[]> {
  const html = await (await answer("/docs")).text();
  return [...html.matchAll(/(?:src|href)="(\/docs\/[^"]+)"/g)].map((m) => m[1]!);
}

Deno.test("GET /docs: the HTML shell with a strict Content-Security-Policy", async () => {
  const res = await answer("/docs");
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("content-type"), "text/html; charset=utf-8");
  const csp = res.headers.get("content-security-policy");
  assert.equal(csp, docsContentSecurityPolicy);
  const directives = new Map(
    csp!.split(";").map((d) => d.trim().split(/\s+/)).map(([name, ...v]) => [name!, v]),
  );
  assert.deepEqual(directives.get("default-src"), ["'none'"]);
  assert.deepEqual(directives.get("script-src"), ["'self'"]);
  assert.deepEqual(directives.get("connect-src"), ["'self'"]);
  assert.deepEqual(directives.get("frame-ancestors"), ["'none'"]);
  // Nothing but this origin and `data:`: no host, no other scheme, no inline script or style.
  for (const [name, sources] of directives) {
    for (const s of sources) {
      assert.match(s, /^('self'|'none'|data:)$/, `${name} ${s}`);
    }
  }
  assert.equal(res.headers.get("x-content-type-options"), "nosniff");
  assert.equal(res.headers.get("referrer-policy"), "no-referrer");
  assert.equal(res.headers.get("x-frame-options"), "DENY");
  assert.equal(res.headers.get("cache-control"), "no-cache");
  const html = await res.text();
  assert.match(html, new RegExp(`<title>${docsTitle}</title>`));
  assert.equal(docsTitle, "OAuth client registry API reference");
  // Every URL in the page is of this origin.
  for (const [, url] of html.matchAll(/(?:src|href)="([^"]*)"/g)) {
    assert.match(url!, /^(\/|data:)/, String(url));
  }
});

Deno.test("the assets the page links are served, typed, cacheable and nosniff", async () => {
  const linked = await linkedAssets();
  assert.deepEqual(
    linked.map((u) => u.replace(/\?v=[0-9a-f]{12}$/, "")),
    [
      "/docs/swagger-ui.css",
      "/docs/reference.css",
      "/docs/swagger-ui-bundle.js",
      "/docs/reference.js",
    ],
  );
  for (const url of linked) {
    const res = await answer(url);
    assert.equal(res.status, 200, url);
    assert.match(res.headers.get("content-type")!, /^text\/(css|javascript); charset=utf-8$/);
    assert.equal(res.headers.get("cache-control"), "public, max-age=86400");
    assert.equal(res.headers.get("x-content-type-options"), "nosniff");
    const body = new Uint8Array(await res.arrayBuffer());
    assert.equal(res.headers.get("content-length"), String(body.byteLength));
    // The version in the URL is the start of the ETag: a new build's page asks for new copies.
    assert.equal(url.split("?v=")[1], res.headers.get("etag")!.slice(1, 13));
  }
  // Swagger UI's licence and notices, and those of what its bundle holds (React among them).
  const licences = await answer("/docs/licences.txt");
  assert.equal(licences.status, 200);
  assert.equal(licences.headers.get("content-type"), "text/plain; charset=utf-8");
  const text = await licences.text();
  assert.match(text, /Apache License\s+Version 2\.0/);
  assert.match(text, /SmartBear Software/);
  assert.match(text, /@license React/);
});

Deno.test("strong ETags: If-None-Match is 304, HEAD has the headers and no body", async () => {
  for (const path of ["/docs", "/docs/swagger-ui-bundle.js", "/docs/reference.js"]) {
    const full = await answer(path);
    const etag = full.headers.get("etag")!;
    assert.match(etag, /^"[0-9a-f]{32}"$/, `${path}: a strong ETag`);
    const length = (await full.arrayBuffer()).byteLength;

    for (const ifNoneMatch of [etag, `W/${etag}`, `"other", ${etag}`, "*"]) {
      const res = await answer(path, { headers: { "if-none-match": ifNoneMatch } });
      assert.equal(res.status, 304, `${path} If-None-Match: ${ifNoneMatch}`);
      assert.equal(res.headers.get("etag"), etag);
      assert.equal(res.body, null);
    }
    const changed = await answer(path, { headers: { "if-none-match": '"0123"' } });
    assert.equal(changed.status, 200);
    await changed.body?.cancel();

    const head = await answer(path, { method: "HEAD" });
    assert.equal(head.status, 200);
    assert.equal(head.body, null);
    assert.equal(head.headers.get("etag"), etag);
    assert.equal(head.headers.get("content-length"), String(length));
    const headMatch = await answer(path, { method: "HEAD", headers: { "if-none-match": etag } });
    assert.equal(headMatch.status, 304);
  }
});

Deno.test("the bundle gzipped when the client takes it: its own ETag, Vary", async () => {
  const plain = await answer("/docs/swagger-ui-bundle.js");
  const plainBody = new Uint8Array(await plain.arrayBuffer());
  assert.equal(plain.headers.get("vary"), "accept-encoding");
  assert.equal(plain.headers.get("content-encoding"), null);
  const zipped = await answer("/docs/swagger-ui-bundle.js", {
    headers: { "accept-encoding": "gzip, deflate, br" },
  });
  assert.equal(zipped.headers.get("content-encoding"), "gzip");
  assert.equal(zipped.headers.get("vary"), "accept-encoding");
  const etag = zipped.headers.get("etag")!;
  assert.match(etag, /^"[0-9a-f]{32}"$/);
  assert.notEqual(etag, plain.headers.get("etag"));
  const body = new Uint8Array(await zipped.arrayBuffer());
  assert.ok(body.byteLength < plainBody.byteLength / 2, `${body.byteLength} bytes`);
  const unzipped = await new Response(
    new Blob([body]).stream().pipeThrough(new DecompressionStream("gzip")),
  ).bytes();
  assert.deepEqual(unzipped, plainBody);
  const again = await answer("/docs/swagger-ui-bundle.js", {
    headers: { "accept-encoding": "gzip", "if-none-match": etag },
  });
  assert.equal(again.status, 304);
  assert.equal(again.headers.get("content-encoding"), "gzip");

  assert.ok(acceptsGzip("gzip"));
  assert.ok(acceptsGzip("br;q=1.0, GZIP;q=0.5"));
  assert.ok(acceptsGzip("x-gzip"));
  assert.ok(!acceptsGzip(null));
  assert.ok(!acceptsGzip("identity"));
  assert.ok(!acceptsGzip("gzip;q=0, br"));
  assert.ok(!acceptsGzip("gzip;q=0.000"));
  // The page itself is small: never compressed, no Vary.
  const page = await answer("/docs", { headers: { "accept-encoding": "gzip" } });
  assert.equal(page.headers.get("content-encoding"), null);
  assert.equal(page.headers.get("vary"), null);
  await page.body?.cancel();
});

Deno.test("another method on the page's paths is 405 with Allow and the JSON error body", async () => {
  for (const path of ["/docs", "/docs/reference.js", "/docs/swagger-ui-bundle.js"]) {
    for (const method of ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"]) {
      const res = await answer(path, { method });
      assert.equal(res.status, 405, `${method} ${path}`);
      assert.equal(res.headers.get("allow"), "GET, HEAD");
      assert.equal(res.headers.get("content-type"), "application/json");
      assert.deepEqual(await res.json(), {
        error: {
          code: "unimplemented",
          message: `${method} is not allowed here; use GET, HEAD`,
          details: [],
        },
      });
    }
  }
});

Deno.test("paths that are not the page's are left to the router", async () => {
  for (
    const path of [
      "/",
      "/docs/",
      "/docs/x",
      "/docs/swagger-ui-bundle.js.map",
      "/docs/index.html",
      "/docs/swagger-initializer.js",
      "/docs/../openapi.json",
      "/docsx",
      "/DOCS",
      "/openapi.json",
      "/v1/docs",
    ]
  ) {
    for (const method of ["GET", "POST"]) {
      assert.equal(await request(path, { method }), undefined, `${method} ${path}`);
    }
  }
});

Deno.test("Swagger UI makes no request elsewhere: no validator badge, no options from the URL", async () => {
  const bundle = await (await answer("/docs/swagger-ui-bundle.js")).text();
  assert.ok(bundle.length > 1_000_000);
  // The badge's default, which the page's options replace.
  assert.ok(bundle.includes('"https://validator.swagger.io/validator"'));
  assert.equal(swaggerUiOptions.validatorUrl, null);
  assert.equal(swaggerUiOptions.url, "/openapi.json");
  assert.ok(!("queryConfigEnabled" in swaggerUiOptions), "options are never read from the URL");
  const script = await (await answer("/docs/reference.js")).text();
  assert.ok(script.includes(JSON.stringify(swaggerUiOptions)), "the start script has the options");
  // No style sheet of Swagger UI's loads anything but `data:` images.
  const css = await (await answer("/docs/swagger-ui.css")).text();
  for (const [, url] of css.matchAll(/url\(\s*["']?([^"')]*)/g)) {
    assert.match(url!, /^data:/, String(url));
  }
  assert.ok(!/@import|@font-face/.test(css));
});
