/**
 * The pages of the authorization endpoint: the consent page (the project's branding, the scopes
 * asked for, the account granting them, Allow and Deny), and the pages that say why a request
 * cannot go on. Plain HTML with one inline style sheet and no script: the page works with a
 * keyboard and a screen reader, loads nothing from elsewhere but the project's logo, and may not
 * be framed.
 *
 * Headers: `Content-Security-Policy` (`default-src 'none'`, the style sheet by its hash, the logo by
 * its URL, `form-action` this origin and the redirect URI's, which Chromium checks against the
 * redirect that follows the form's post), `frame-ancestors 'none'` with `X-Frame-Options: DENY`,
 * `Referrer-Policy: no-referrer` (the page's URL holds the request), `Cache-Control: no-store`.
 * The gateway's other pages (`/`, the development sign-in) use the same layout and headers
 * ({@link htmlPage}).
 *
 * @module
 */

import { Code, type ConnectError } from "@connectrpc/connect";
import { type ConsentScreen, Decision } from "../gen/registry/token/v1/token_service_pb.ts";
import type { Logger } from "../lib/platform/mod.ts";

/** Escapes text for HTML content and attribute values. */
export function escapeHtml(text: string): string {
  return text.replace(
    /[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!,
  );
}

const style = `
*{box-sizing:border-box}
body{margin:0;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f1f1f;background:#f3f4f6}
main{max-width:30rem;margin:2rem auto;padding:2rem;background:#fff;border:1px solid #d1d5db;border-radius:12px}
@media (max-width:32rem){main{margin:0;border:0;border-radius:0;min-height:100vh;padding:1.5rem}}
header{text-align:center}
.logo{width:64px;height:64px;object-fit:contain}
h1{font-size:1.375rem;line-height:1.3;margin:.75rem 0 .25rem}
h2{font-size:1rem;margin:1.25rem 0 .5rem}
.account{margin:0;color:#374151}
.warning{margin:1.25rem 0 0;padding:.75rem 1rem;border:2px solid #b45309;border-radius:8px;background:#fffbeb;color:#78350f}
.warning h2{margin:0 0 .25rem;color:#78350f}
.warning p{margin:0}
ul{margin:0;padding-left:1.25rem}
li{margin:.25rem 0;overflow-wrap:anywhere}
code{font:0.9375rem ui-monospace,SFMono-Regular,Menlo,monospace}
.note{color:#374151;font-size:.9375rem}
.links{display:flex;flex-wrap:wrap;gap:.25rem 1rem;padding:0;list-style:none;font-size:.9375rem}
a{color:#1d4ed8}
.buttons{display:flex;gap:.75rem;margin-top:1.5rem}
button{flex:1;min-height:2.75rem;padding:.625rem 1rem;font:inherit;font-weight:600;border-radius:8px;cursor:pointer}
button:focus-visible,a:focus-visible{outline:3px solid #1d4ed8;outline-offset:2px}
.deny{background:#fff;color:#1f1f1f;border:1px solid #6b7280}
.allow{background:#1d4ed8;color:#fff;border:1px solid #1d4ed8}
.target{margin-top:1.25rem;color:#4b5563;font-size:.875rem;overflow-wrap:anywhere}
.scopes li{margin:.5rem 0}
.sensitive{display:inline-block;margin-left:.25rem;padding:0 .375rem;border:1px solid #b45309;border-radius:4px;background:#fffbeb;color:#78350f;font-size:.75rem;font-weight:600;text-transform:uppercase;letter-spacing:.02em}
.scope-name{display:block;color:#4b5563}
.scope-name code{font-size:.75rem}
`.trim();

const styleHashes = new Map<string, Promise<string>>();

/** A style sheet's CSP hash source. */
function styleSource(css: string): Promise<string> {
  let hash = styleHashes.get(css);
  if (hash === undefined) {
    hash = crypto.subtle.digest("SHA-256", new TextEncoder().encode(css)).then((d) =>
      `'sha256-${btoa(String.fromCharCode(...new Uint8Array(d)))}'`
    );
    styleHashes.set(css, hash);
  }
  return hash;
}

/** A URL as a CSP source expression (characters that would end one are percent-encoded). */
function cspSource(url: string): string {
  return url.replace(/[;,\s']/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/**
 * Options of {@link htmlPage}. Every page of the gateway has the same headers but for these: what
 * it may show and post to, and whom its address is told to.
 */
export interface PageOptions {
  /** The status (200). */
  status?: number;
  /** Rules added to the shared style sheet (which the CSP lets in by its hash). */
  extraStyle?: string;
  /** The one image URL the page may load. */
  img?: string;
  /** Where besides this origin the page's form may post (and be redirected to). */
  formTarget?: string;
  /**
   * `no-referrer` (the default: the consent page's address holds the request); `same-origin`
   * for a page whose form must carry its `Origin` (a POST under `no-referrer` sends `Origin:
   * null`).
   */
  referrer?: "no-referrer" | "same-origin";
}

/**
 * The answer to a `HEAD`: `res`'s status and headers, with the length of the body a `GET` gets as
 * its `Content-Length`, and no body (RFC 9110 9.3.2).
 */
export async function headOf(res: Response): Promise<Response> {
  const headers = new Headers(res.headers);
  headers.set("content-length", String((await res.arrayBuffer()).byteLength));
  return new Response(null, { status: res.status, headers });
}

/** A page of the gateway: HTML in the shared layout, no script, under a strict CSP. */
export async function htmlPage(
  title: string,
  body: string,
  options: PageOptions = {},
): Promise<Response> {
  const css = options.extraStyle ? `${style}\n${options.extraStyle}` : style;
  const referrer = options.referrer ?? "no-referrer";
  const policy = [
    "default-src 'none'",
    `style-src ${await styleSource(css)}`,
    options.img ? `img-src ${cspSource(options.img)}` : "img-src 'none'",
    `form-action 'self'${options.formTarget ? ` ${cspSource(options.formTarget)}` : ""}`,
    "frame-ancestors 'none'",
    "base-uri 'none'",
  ].join("; ");
  const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="${referrer}">
<title>${escapeHtml(title)}</title>
<style>${css}</style>
</head>
<body>
<main>
${body}
</main>
</body>
</html>
`;
  return new Response(html, {
    status: options.status ?? 200,
    headers: {
      "content-type": "text/html; charset=utf-8",
      "content-security-policy": policy,
      "x-frame-options": "DENY",
      "x-content-type-options": "nosniff",
      "referrer-policy": referrer,
      "cache-control": "no-store",
    },
  });
}

/** The authorization request's parameters the form sends back with the choice. */
export type AuthorizationParams = Record<
  | "response_type"
  | "client_id"
  | "redirect_uri"
  | "scope"
  | "state"
  | "code_challenge"
  | "code_challenge_method"
  | "request_uri"
  | "prompt"
  | "dpop_jkt",
  string
>;

function isHttps(url: string): boolean {
  try {
    return new URL(url).protocol === "https:";
  } catch {
    return false;
  }
}

/**
 * A `mailto:` link to exactly one address (RFC 6068): the local part percent-encoded, so that no
 * `?`, `%` or `#` in it could add header fields (a `cc`), decode to another address or cut it.
 */
export function mailto(address: string): string {
  const at = address.lastIndexOf("@");
  if (at < 0) return `mailto:${encodeURIComponent(address)}`;
  return `mailto:${encodeURIComponent(address.slice(0, at))}@${
    encodeURIComponent(address.slice(at + 1))
  }`;
}

/** One scope as the page lists it. */
interface ScopeLine {
  name: string;
  description: string;
  sensitive: boolean;
}

/**
 * A scope's line: its description, marked when sensitive, and its name in small print (only the
 * name, as code, when the project gave no description).
 */
function scopeItem(scope: ScopeLine): string {
  const mark = scope.sensitive ? ` <strong class="sensitive">Sensitive</strong>` : "";
  if (scope.description === scope.name) {
    return `<li><code>${escapeHtml(scope.name)}</code>${mark}</li>`;
  }
  return `<li><span class="scope">${escapeHtml(scope.description)}</span>${mark}` +
    ` <small class="scope-name"><code>${escapeHtml(scope.name)}</code></small></li>`;
}

/** The consent page. */
export async function consentPage(
  screen: ConsentScreen,
  params: AuthorizationParams | { user_code: string },
  formAction: string,
  /** The device flow's page (./device_page.ts): the user code to compare with the device's. */
  device?: { userCode: string },
): Promise<Response> {
  const app = escapeHtml(screen.applicationName);
  const logo = isHttps(screen.logoUri) ? screen.logoUri : "";
  // What the application asks for, in the project's words (the scope's name in small print); a
  // project that declares no scopes has only names to show. A screen without details (an older
  // token service) lists the names.
  const details: ScopeLine[] = screen.scopeDetails.length > 0 || screen.alreadyGranted.length > 0
    ? screen.scopeDetails
    : screen.scopes.map((name) => ({ name, description: name, sensitive: false }));
  const scopes = details.length > 0
    ? `<ul class="scopes">${details.map(scopeItem).join("")}</ul>`
    : `<p>Nothing beyond knowing that you use it: no scopes were asked for.</p>`;
  const granted = screen.alreadyGranted.length > 0
    ? `<p class="note granted">Already allowed: ${
      screen.alreadyGranted.map((s) => escapeHtml(s.description)).join("; ")
    }.</p>`
    : "";
  // The registry accepts only https links and plain addresses; the page links nothing else either.
  const link = (uri: string, text: string) =>
    isHttps(uri) ? `<li><a href="${escapeHtml(uri)}">${text}</a></li>` : "";
  const links = [
    link(screen.homepageUri, "Home page"),
    link(screen.privacyPolicyUri, "Privacy policy"),
    link(screen.termsOfServiceUri, "Terms of service"),
    screen.supportEmail &&
    `<li><a href="${escapeHtml(mailto(screen.supportEmail))}">Support: ${
      escapeHtml(screen.supportEmail)
    }</a></li>`,
  ].join("");
  const hidden = Object.entries({ ...params, csrf_token: screen.csrfToken })
    .map(([name, value]) => `<input type="hidden" name="${name}" value="${escapeHtml(value)}">`)
    .join("\n");
  const body = `<header>
${
    logo
      ? `<img class="logo" src="${escapeHtml(logo)}" alt="${app} logo" width="64" height="64">`
      : ""
  }
<h1>${app} wants to access your account</h1>
<p class="account">Signed in as <strong>${escapeHtml(screen.accountId)}</strong></p>
</header>
${
    screen.unverified
      ? `<section class="warning" role="note" aria-labelledby="unverified">
<h2 id="unverified">This app is not verified</h2>
<p>${app} is still in testing: its developer has not published it yet. Allow it only if you know and trust the developer.</p>
</section>`
      : ""
  }
<section aria-labelledby="access">
<h2 id="access">${app} will be able to:</h2>
${scopes}
${granted}
</section>
<p class="note">Allowing installs ${app} in your account. You can revoke it at any time.</p>
${links ? `<nav aria-label="About ${app}"><ul class="links">${links}</ul></nav>` : ""}
<form method="post" action="${escapeHtml(formAction)}">
${hidden}
<div class="buttons">
<button type="submit" name="decision" value="deny" class="deny">Deny</button>
<button type="submit" name="decision" value="allow" class="allow">Allow</button>
</div>
</form>
${
    device
      ? `<p class="target">Client: ${
        escapeHtml(screen.clientName)
      }. Your device shows the code <strong>${
        escapeHtml(device.userCode)
      }</strong>: allow only if it does, and you started this on that device.</p>`
      : `<p class="target">Client: ${escapeHtml(screen.clientName)}. You will be sent back to ${
        escapeHtml(screen.redirectTarget)
      }.</p>`
  }`;
  return await htmlPage(`${screen.applicationName}: allow access?`, body, {
    ...(logo ? { img: logo } : {}),
    ...(screen.redirectTarget ? { formTarget: screen.redirectTarget } : {}),
  });
}

/** A page saying why the request cannot go on (never a redirect to the client). */
export async function errorPage(
  status: number,
  title: string,
  message: string,
  link?: { href: string; text: string },
  reason?: string,
): Promise<Response> {
  const body = `<h1>${escapeHtml(title)}</h1>
<p>${escapeHtml(message)}</p>
${link ? `<p><a href="${escapeHtml(link.href)}">${escapeHtml(link.text)}</a></p>` : ""}
${reason ? `<p class="note">For the application's developer: ${escapeHtml(reason)}.</p>` : ""}`;
  return await htmlPage(title, body, { status });
}

/** The methods of a page with a form: a HEAD is answered as its GET, without the body. */
export const pageMethods = ["GET", "HEAD", "POST"] as const;

/** A consent form's `decision` (`allow` or `deny`; anything else is unspecified). */
export function decisionOf(choice: string | undefined): Decision {
  return choice === "allow"
    ? Decision.ALLOW
    : choice === "deny"
    ? Decision.DENY
    : Decision.UNSPECIFIED;
}

/**
 * The page for a call to the token service that failed through no fault of the request: 503
 * with `Retry-After` when the service could not answer, else 500, logged as `what` failed.
 */
export async function serviceFailurePage(
  err: ConnectError,
  log: Logger,
  what: string,
  requestId: string,
): Promise<Response> {
  if (
    err.code === Code.Unavailable || err.code === Code.DeadlineExceeded ||
    err.code === Code.ResourceExhausted
  ) {
    const res = await errorPage(
      503,
      "Try again in a moment",
      "The sign-in service is busy or unreachable right now.",
    );
    res.headers.set("retry-after", "1");
    return res;
  }
  log.error(`${what} failed`, { code: Code[err.code], request_id: requestId, error: err });
  return await errorPage(500, "Something went wrong", "The request could not be completed.");
}
