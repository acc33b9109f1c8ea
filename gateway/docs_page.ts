/**
 * The API reference page, `GET /docs`: an HTML shell that renders the gateway's own OpenAPI
 * document (`/openapi.json`, same origin) with Redoc (npm `redoc`, MIT), whose standalone bundle is
 * served from here too, under `/docs/`. The page loads nothing from another origin.
 *
 * - The bundle is a text import of the pinned package, so it is in the module graph (installed by
 *   `deno install --entrypoint`, kept by deploy/runtime_imports.ts) and a missing package stops
 *   the gateway at start. Its one request elsewhere, Redocly's logo beside "API docs by Redocly"
 *   at the foot of the menu (shown whatever the options), is replaced by `data:,`: the image fails
 *   to load and Redoc leaves it out. Start-up fails if that string is not found exactly once.
 * - Assets (the bundle, its licence notices, the start script and style sheet) have a strong
 *   `ETag`, answer a matching `If-None-Match` with 304 and may be cached for a day; the page
 *   links them with `?v=` and their hash, so a new gateway's page fetches new ones. The page is
 *   revalidated on every load (`no-cache`). The bundle (1.1 MB) is also sent gzipped (0.33 MB,
 *   made on first demand and kept) to a client that takes gzip, with its own ETag.
 * - The page's Content-Security-Policy lets in scripts and styles from this origin only (styles
 *   also inline: Redoc's styled-components and React set them), Redoc's search worker from a
 *   `blob:` URL, fetches to this origin, and images and fonts from here or `data:`; it may not be
 *   framed. The theme names the system's fonts: Redoc's own, Roboto and Montserrat, are web
 *   fonts it leaves the page to load.
 * - GET and HEAD only: another method on a path of the page is 405, with `Allow` and the JSON
 *   error body, as ./transcoder.ts answers it. Paths under `/docs/` that are not assets are left
 *   to the router (404).
 *
 * @module
 */

import redocBundle from "redoc/bundles/redoc.standalone.js" with { type: "text" };
import redocLicences from "redoc/bundles/redoc.standalone.js.LICENSE.txt" with { type: "text" };
import { methodNotAllowed } from "./http_errors.ts";

/** The page's title. */
export const docsTitle = "OAuth client registry API reference";

/** The page's path. */
export const docsPath = "/docs";

const redocLogo = '"https://cdn.redoc.ly/redoc/logo-mini.svg"';

/** The bundle without its request to Redocly's CDN; throws when that string is not there once. */
export function withoutRemoteLogo(bundle: string): string {
  const at = bundle.indexOf(redocLogo);
  if (at < 0 || bundle.indexOf(redocLogo, at + 1) >= 0) {
    throw new Error(
      `redoc.standalone.js: expected its logo URL ${redocLogo} once; a new version of redoc ` +
        "must be checked for requests to other origins (gateway/docs_page.ts)",
    );
  }
  return bundle.slice(0, at) + '"data:,"' + bundle.slice(at + redocLogo.length);
}

/** Redoc's options (redoc's README, "Redoc options object"). */
const redocOptions = {
  // The page has no fixed header of its own.
  scrollYOffset: 0,
  // The browser's scroll bars, not perfect-scrollbar's: lighter, and usual on a phone.
  nativeScrollbars: true,
  // The descriptions are Markdown from the proto comments; sanitized all the same.
  untrustedSpec: true,
  // The answer of a success shows opened.
  expandResponses: "200,201,204",
  // The paths are relative to this origin (`servers: [{url: "/"}]`): shown without a host.
  hideHostname: true,
  // The search index goes to a `blob:` worker; searching starts at the second character.
  minCharacterLengthToInitSearch: 2,
  theme: {
    typography: {
      fontSize: "15px",
      lineHeight: "1.55em",
      fontFamily: 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif',
      headings: {
        fontFamily: 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif',
        fontWeight: "600",
      },
      code: {
        fontSize: "13px",
        fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace',
        wrap: true,
      },
    },
    colors: { primary: { main: "#1d4ed8" } },
    sidebar: { width: "280px" },
  },
};

/**
 * Starts Redoc on the page. When it has rendered (or failed), `<html>` gets `data-reference`
 * `ready` (or `failed`) for tests and scripts to wait on.
 */
const startScript = `"use strict";
(function () {
  var root = document.getElementById("reference");
  var html = document.documentElement;
  if (typeof Redoc === "undefined") {
    html.dataset.reference = "failed";
    root.textContent = "The reference could not be loaded. The API description is at /openapi.json.";
    return;
  }
  var options = ${JSON.stringify(redocOptions)};
  // On a phone, Redoc's 40px margins each side leave too little room for the text.
  if (window.matchMedia("(max-width: 50rem)").matches) {
    options.theme.spacing = { sectionHorizontal: 16, sectionVertical: 24 };
  }
  Redoc.init("/openapi.json", options, root, function (error) {
    html.dataset.reference = error ? "failed" : "ready";
  });
})();
`;

const styleSheet = `html,body{margin:0;padding:0}
body{background:#fff;color:#1f1f1f;-webkit-text-size-adjust:100%;text-size-adjust:100%}
.fallback{max-width:40rem;margin:2rem auto;padding:0 1rem;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
a{color:#1d4ed8}
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

/** The assets under `/docs/`, by path. */
const assets = new Map<string, Asset>([
  [`${docsPath}/redoc.standalone.js`, await asset(withoutRemoteLogo(redocBundle), javascript)],
  [
    `${docsPath}/redoc.standalone.js.LICENSE.txt`,
    await asset(redocLicences, "text/plain; charset=utf-8"),
  ],
  [`${docsPath}/reference.js`, await asset(startScript, javascript)],
  [`${docsPath}/reference.css`, await asset(styleSheet, "text/css; charset=utf-8")],
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
<link rel="stylesheet" href="${versioned(`${docsPath}/reference.css`)}">
</head>
<body>
<noscript><p class="fallback">This reference needs JavaScript. The API's description is
<a href="/openapi.json">/openapi.json</a> (OpenAPI 3.1).</p></noscript>
<div id="reference"></div>
<script src="${versioned(`${docsPath}/redoc.standalone.js`)}"></script>
<script src="${versioned(`${docsPath}/reference.js`)}"></script>
</body>
</html>
`;

/** The page's Content-Security-Policy. */
export const docsContentSecurityPolicy = [
  "default-src 'none'",
  "script-src 'self'",
  "worker-src blob:",
  "style-src 'self' 'unsafe-inline'",
  "connect-src 'self'",
  "img-src 'self' data:",
  "font-src 'self' data:",
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
