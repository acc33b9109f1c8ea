/**
 * The API reference page, `GET /docs`: an HTML shell that renders the gateway's own OpenAPI
 * document (`/openapi.json`, same origin) with Swagger UI (npm `swagger-ui-dist`, Apache-2.0),
 * whose bundle and style sheet are served from here too, under `/docs/`. The page loads nothing
 * from another origin. Operations can be tried from the page ("Try it out", with a token given
 * under "Authorize"): the requests go to this origin, as `servers: [{url: "/"}]` says.
 *
 * - `swagger-ui-dist` has no dependency of its own but `@scarf/scarf`, a small package whose one
 *   install script (usage analytics) deno.json's `allowScripts` denies. Redoc (npm `redoc`),
 *   which rendered this page before, brought 111 packages and 85 MB into `deno task start`'s
 *   install (React, styled-components, mobx, core-js...) for the one self-contained bundle served
 *   (`deno task footprint` measures what the tasks install).
 * - The bundle and style sheet are text imports of the pinned package, so they are in the module
 *   graph (installed by `deno install --entrypoint`, kept by deploy/runtime_imports.ts) and a
 *   missing package stops the gateway at start. Swagger UI's one request elsewhere, the
 *   validator badge (validator.swagger.io), is switched off (`validatorUrl: null`); its other
 *   URLs are links a person may follow, not loads.
 * - Assets (the bundle, the style sheets, the licence notices, the start script) have a strong
 *   `ETag`, answer a matching `If-None-Match` with 304 and may be cached for a day; the page
 *   links them with `?v=` and their hash, so a new gateway's page fetches new ones. The page is
 *   revalidated on every load (`no-cache`). The bundle (1.7 MB) and style sheet are also sent
 *   gzipped (the bundle 0.5 MB, made on first demand and kept) to a client that takes gzip, with
 *   their own ETag.
 * - The page's Content-Security-Policy lets in scripts and style sheets from this origin only
 *   (no inline script or style: React sets styles through the DOM, which the policy does not
 *   govern), fetches to this origin, and images from here or `data:` (Swagger UI's icons); it may
 *   not be framed, and loads no font (the style sheet names none it would fetch).
 * - GET and HEAD only: another method on a path of the page is 405, with `Allow` and the JSON
 *   error body, as ./transcoder.ts answers it. Paths under `/docs/` that are not assets are left
 *   to the router (404).
 *
 * @module
 */

import swaggerUiBundle from "swagger-ui-dist/swagger-ui-bundle.js" with { type: "text" };
import swaggerUiBundleNotices from "swagger-ui-dist/swagger-ui-bundle.js.LICENSE.txt" with {
  type: "text",
};
import swaggerUiCss from "swagger-ui-dist/swagger-ui.css" with { type: "text" };
import swaggerUiLicence from "swagger-ui-dist/LICENSE" with { type: "text" };
import swaggerUiNotice from "swagger-ui-dist/NOTICE" with { type: "text" };
import { methodNotAllowed } from "./http_errors.ts";

/** The page's title. */
export const docsTitle = "OAuth client registry API reference";

/** The page's path. */
export const docsPath = "/docs";

/**
 * Swagger UI's options (its docs, "Configuration"). The page reads none from its URL
 * (`queryConfigEnabled` stays false, its default).
 */
export const swaggerUiOptions = {
  url: "/openapi.json",
  // Each operation has a URL (`/docs#/OAuth 2/token`), which opens it.
  deepLinking: true,
  // The tags and their operations listed, each operation closed.
  docExpansion: "list",
  // A box that filters the operations by tag.
  filter: true,
  // The schemas at the foot, closed.
  defaultModelsExpandDepth: 0,
  // Its default loads a badge from validator.swagger.io: a request to another origin.
  validatorUrl: null,
  // "Try it out": how long the gateway took.
  displayRequestDuration: true,
  // A token given under "Authorize" is forgotten when the page closes.
  persistAuthorization: false,
};

/**
 * Starts Swagger UI on the page. When it has rendered the document (or failed to load it or
 * itself), `<html>` gets `data-reference` `ready` (or `failed`) for tests and scripts to wait on.
 */
const startScript = `"use strict";
(function () {
  var root = document.getElementById("reference");
  var html = document.documentElement;
  function failed() {
    html.dataset.reference = "failed";
  }
  if (typeof SwaggerUIBundle === "undefined") {
    failed();
    root.textContent = "The reference could not be loaded. The API description is at /openapi.json.";
    return;
  }
  var options = ${JSON.stringify(swaggerUiOptions)};
  options.domNode = root;
  options.onComplete = function () {
    html.dataset.reference = "ready";
  };
  // The document's download failing (Swagger UI shows why on the page).
  options.plugins = [function () {
    return { statePlugins: { spec: { wrapActions: {
      updateLoadingStatus: function (original) {
        return function (status) {
          if (status === "failed") failed();
          return original(status);
        };
      }
    } } } };
  }];
  window.ui = SwaggerUIBundle(options);
})();
`;

/**
 * The page's own rules, after Swagger UI's style sheet. On a phone a tag's description goes
 * under its name, not in a column beside it a few words wide.
 */
const styleSheet = `html,body{margin:0;padding:0}
body{background:#fff;color:#1f1f1f;-webkit-text-size-adjust:100%;text-size-adjust:100%}
.fallback{max-width:40rem;margin:2rem auto;padding:0 1rem;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
a{color:#1d4ed8}
@media (max-width:50rem){
.swagger-ui .wrapper{padding:0 8px}
.swagger-ui .opblock-tag{flex-wrap:wrap;padding:10px 4px}
.swagger-ui .opblock-tag>a{flex:1}
.swagger-ui .opblock-tag small{flex:1 1 100%;order:1;padding:4px 0 0}
.swagger-ui .servers>label{margin:0;max-width:100%}
.swagger-ui .servers select{max-width:100%;min-width:0}
}
`;

/** Swagger UI's licence and notices: its own (Apache-2.0), then those of what its bundle holds. */
const licences = `Swagger UI (npm swagger-ui-dist), served under /docs/.

${swaggerUiNotice.trim()}

${swaggerUiLicence.trim()}

----
What swagger-ui-bundle.js holds besides Swagger UI, as the package lists it:

${swaggerUiBundleNotices.trim()}
`;

/** One representation of an asset: its bytes and their strong validator. */
interface Representation {
  body: Uint8Array<ArrayBuffer>;
  etag: string;
}

/**
 * A static asset: its type, its bytes, and those bytes gzipped when that is worth it. The gzip
 * copy is made on the first request that takes it (the bundle's took ~30 ms, which every gateway
 * start would pay for a page few open), then kept.
 */
interface Asset {
  type: string;
  identity: Representation;
  gzip: (() => Promise<Representation>) | undefined;
}

/** Gzip saves little below this size. */
const gzipFromBytes = 1024;

async function representation(body: Uint8Array<ArrayBuffer>): Promise<Representation> {
  // The first 16 bytes of the SHA-256, in hex (as ./openapi.ts's ETag).
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", body));
  const hex = Array.from(digest.slice(0, 16), (b) => b.toString(16).padStart(2, "0")).join("");
  return { body, etag: `"${hex}"` };
}

async function asset(text: string, type: string): Promise<Asset> {
  const body = new TextEncoder().encode(text);
  let zipped: Promise<Representation> | undefined;
  const gzip = body.byteLength < gzipFromBytes
    ? undefined
    : () =>
      zipped ??= new Response(new Blob([body]).stream().pipeThrough(new CompressionStream("gzip")))
        .bytes().then(representation);
  return { type, identity: await representation(body), gzip };
}

const javascript = "text/javascript; charset=utf-8";
const css = "text/css; charset=utf-8";

/** The assets under `/docs/`, by path. */
const assets = new Map<string, Asset>([
  [`${docsPath}/swagger-ui-bundle.js`, await asset(swaggerUiBundle, javascript)],
  [`${docsPath}/swagger-ui.css`, await asset(swaggerUiCss, css)],
  [`${docsPath}/licences.txt`, await asset(licences, "text/plain; charset=utf-8")],
  [`${docsPath}/reference.js`, await asset(startScript, javascript)],
  [`${docsPath}/reference.css`, await asset(styleSheet, css)],
]);

/** An asset's URL with its version, so that a page of another build does not use a stale copy. */
function versioned(path: string): string {
  return `${path}?v=${assets.get(path)!.identity.etag.slice(1, 13)}`;
}

const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${docsTitle}</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${versioned(`${docsPath}/swagger-ui.css`)}">
<link rel="stylesheet" href="${versioned(`${docsPath}/reference.css`)}">
</head>
<body>
<noscript><p class="fallback">This reference needs JavaScript. The API's description is
<a href="/openapi.json">/openapi.json</a> (OpenAPI 3.1).</p></noscript>
<div id="reference"></div>
<script src="${versioned(`${docsPath}/swagger-ui-bundle.js`)}"></script>
<script src="${versioned(`${docsPath}/reference.js`)}"></script>
</body>
</html>
`;

/** The page's Content-Security-Policy. */
export const docsContentSecurityPolicy = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self' data:",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "form-action 'none'",
].join("; ");

const page = await asset(html, "text/html; charset=utf-8");

const pageHeaders = {
  "content-security-policy": docsContentSecurityPolicy,
  "x-frame-options": "DENY",
  "referrer-policy": "no-referrer",
  "cache-control": "no-cache",
};

const assetHeaders = { "cache-control": "public, max-age=86400" };

/** Whether an `If-None-Match` value matches `etag` (weak comparison, as RFC 9110 says for it). */
function matches(ifNoneMatch: string, etag: string): boolean {
  return ifNoneMatch.split(",").some((t) => {
    const tag = t.trim();
    return tag === "*" || tag === etag || tag === `W/${etag}`;
  });
}

/** Whether `Accept-Encoding` takes gzip (named, with a q above 0). */
export function acceptsGzip(acceptEncoding: string | null): boolean {
  return (acceptEncoding ?? "").split(",").some((part) => {
    const [coding, ...params] = part.split(";").map((p) => p.trim().toLowerCase());
    const q = params.find((p) => p.startsWith("q="));
    return (coding === "gzip" || coding === "x-gzip") &&
      (q === undefined || Number(q.slice(2)) > 0);
  });
}

async function serve(
  req: Request,
  found: Asset,
  extra: Record<string, string>,
): Promise<Response> {
  const gzip = found.gzip !== undefined && acceptsGzip(req.headers.get("accept-encoding"));
  const chosen = gzip ? await found.gzip!() : found.identity;
  const headers: Record<string, string> = {
    "content-type": found.type,
    etag: chosen.etag,
    "x-content-type-options": "nosniff",
    ...extra,
  };
  if (found.gzip !== undefined) headers.vary = "accept-encoding";
  if (gzip) headers["content-encoding"] = "gzip";
  const ifNoneMatch = req.headers.get("if-none-match");
  if (ifNoneMatch !== null && matches(ifNoneMatch, chosen.etag)) {
    return new Response(null, { status: 304, headers });
  }
  headers["content-length"] = String(chosen.body.byteLength);
  return new Response(req.method === "HEAD" ? null : chosen.body, { headers });
}

/**
 * Answers `/docs` and its assets under `/docs/`; undefined for any other path (the router's
 * 404), also for a path under `/docs/` that is not an asset.
 */
export async function docsPage(req: Request, url: URL): Promise<Response | undefined> {
  const found = url.pathname === docsPath ? page : assets.get(url.pathname);
  if (found === undefined) return undefined;
  if (req.method !== "GET" && req.method !== "HEAD") {
    return methodNotAllowed(req.method, ["GET", "HEAD"]);
  }
  return await serve(req, found, found === page ? pageHeaders : assetHeaders);
}
