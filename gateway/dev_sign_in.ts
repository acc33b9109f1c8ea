/**
 * The development sign-in page, `/dev/sign-in`: under `deno task start` only, a browser signs in
 * as an example account (or any account id typed in) without a password, and gets the `session`
 * cookie the authorization endpoint reads (./oauth.ts): a platform token signed with the stack's
 * AUTH_JWT_SECRET, as `deno task token` makes one. `deno task start` points LOGIN_URL here, so the
 * consent flow's "not signed in" leads to it, and back.
 *
 * It is switched on by an option of gateway/main.ts's `startGateway` that only the development
 * entry points pass (tools/embedded.ts, tools/dev_gateway.ts); no setting turns it on. The image
 * holds no tools/ and the manifests run gateway/main.ts (tests/deploy_test.ts checks both), which
 * run as a program has no such page whatever its settings (tests/dev_sign_in_test.ts).
 *
 * - `GET`: the page. `return_to` (where to go after) must be a path on this origin: `/` then no
 *   `/`, printable ASCII only, no backslash anywhere; an absolute URL, `//host`, `/\host` or a
 *   control character is refused (400), never followed. Absent, it is `/`.
 * - `POST` (the page's forms, `account` and `return_to`): the `Origin` header must be this origin
 *   (ISSUER_URL's, or the request's own on a loopback host; a login CSRF, signing the victim in as
 *   the attacker's account, comes from another origin), and `Sec-Fetch-Site`, when sent,
 *   `same-origin`; else 403. Then `Set-Cookie: session=...; Path=/; Max-Age; HttpOnly;
 *   SameSite=Lax` (and `Secure` on HTTPS), and 303 to `return_to`.
 *
 * The page is the consent page's layout (./consent_page.ts): no script, one style sheet by its
 * hash, `form-action 'self'`, not framed, `no-store`; its referrer policy is `same-origin`, so that
 * its forms' POST carries the `Origin` checked above (under `no-referrer` it would be `null`).
 *
 * @module
 */

import { signToken } from "../lib/policy/mod.ts";
import { errorPage, escapeHtml, headOf, htmlPage, pageMethods } from "./consent_page.ts";
import { methodNotAllowed } from "./http_errors.ts";

/** The page's path. */
export const devSignInPath = "/dev/sign-in";

/** The accounts the page offers: any other id can be typed in. */
export const exampleAccounts: ReadonlyArray<{ id: string; name: string }> = [
  { id: "ada@example.com", name: "Ada Lovelace" },
  { id: "grace@example.com", name: "Grace Hopper" },
  { id: "alan@example.com", name: "Alan Turing" },
];

/** How long a development session lasts: the token's lifetime and the cookie's Max-Age. */
export const devSessionSeconds = 8 * 3600;

/** An account id the page takes: what the example ids and most platforms' ids are made of. */
const accountPattern = /^[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}$/;

/** The largest `return_to` kept (an authorization request with a long state fits). */
const maxReturnTo = 4096;

/** The largest form body read. */
const maxFormBytes = 16 * 1024;

/** What the page needs. */
export interface DevSignInOptions {
  /** The HS256 secret the stack verifies tokens with (AUTH_JWT_SECRET). */
  secret: string;
  /** The gateway's public base URL (ISSUER_URL): its origin is accepted as `Origin` too. */
  publicUrl: string;
  /** The `iss` to put in the token, when the stack requires one (AUTH_ISSUER). */
  tokenIssuer?: string | undefined;
  /** The `aud` to put in the token, when the stack requires one (AUTH_AUDIENCE). */
  tokenAudience?: string | undefined;
}

/**
 * `return_to` as a path of this origin, `/` when absent, or undefined when it is anything else
 * (an absolute URL, `//host`, a backslash, a control character or a space, or too long).
 */
export function returnToPath(value: string | null | undefined): string | undefined {
  if (value === null || value === undefined || value === "") return "/";
  if (value.length > maxReturnTo) return undefined;
  // Printable ASCII without the space: a URL parser drops tabs and newlines (`/\t/evil.example`
  // is `//evil.example`) and reads `\` as `/`.
  if (!/^\/(?![/\\])[\x21-\x7e]*$/.test(value) || value.includes("\\")) return undefined;
  // What the browser will make of it, relative to any origin, stays on that origin.
  const base = "http://sign-in.invalid";
  const resolved = new URL(value, base);
  return resolved.origin === base ? value : undefined;
}

const extraStyle = `
.dev{margin:1.25rem 0;padding:.75rem 1rem;border:2px solid #b45309;border-radius:8px;background:#fffbeb;color:#78350f}
.dev strong{display:block}
.dev p{margin:.25rem 0 0}
.choices{display:grid;gap:.5rem;margin:0}
.choice{display:flex;flex-direction:column;align-items:flex-start;width:100%;background:#fff;color:#1f1f1f;border:1px solid #6b7280;text-align:left;font-weight:400}
.choice strong{font-weight:600}
.choice span{color:#4b5563;font-size:.9375rem}
.choice:hover{border-color:#1d4ed8;background:#eff6ff}
label{display:block;font-weight:600;margin:0 0 .25rem}
.field{display:flex;gap:.5rem;flex-wrap:wrap}
input[type=text]{flex:1 1 12rem;min-height:2.75rem;padding:.5rem .75rem;font:inherit;border:1px solid #6b7280;border-radius:8px}
input[type=text]:focus-visible,button:focus-visible{outline:3px solid #1d4ed8;outline-offset:2px}
.field button{flex:0 0 auto}
.hint{margin:.25rem 0 0;color:#4b5563;font-size:.875rem}
.error{margin:0 0 1rem;padding:.75rem 1rem;border:2px solid #b91c1c;border-radius:8px;background:#fef2f2;color:#7f1d1d}
`.trim();

/** The page, with `problem` said above the forms (the typed id refused). */
async function signInPage(
  returnTo: string,
  problem?: { status: number; message: string; account: string },
): Promise<Response> {
  const hiddenReturn = `<input type="hidden" name="return_to" value="${escapeHtml(returnTo)}">`;
  const choices = exampleAccounts.map((a) =>
    `<button type="submit" name="account" value="${escapeHtml(a.id)}" class="choice">` +
    `<strong>${escapeHtml(a.name)}</strong><span>${escapeHtml(a.id)}</span></button>`
  ).join("\n");
  // The path only: the query (an authorization request) is long, and the form carries it anyway.
  const goingTo = new URL(returnTo, "http://sign-in.invalid").pathname;
  const body = `<header>
<h1>Sign in</h1>
<p class="account">${
    goingTo === "/oauth2/authorize"
      ? "An application asks to access your account: sign in to continue."
      : "Choose who you are on this development stack."
  }</p>
</header>
<section class="dev" role="note" aria-labelledby="dev-only">
<strong id="dev-only">For development only</strong>
<p>This page exists only under <code>deno task start</code>. It signs you in as any account, without a password. A deployed gateway has no such page.</p>
</section>
${problem ? `<p class="error" role="alert">${escapeHtml(problem.message)}</p>` : ""}
<section aria-labelledby="examples">
<h2 id="examples">Continue as an example account</h2>
<form method="post" action="${devSignInPath}">
${hiddenReturn}
<div class="choices">
${choices}
</div>
</form>
</section>
<section aria-labelledby="other">
<h2 id="other">Or another account</h2>
<form method="post" action="${devSignInPath}">
${hiddenReturn}
<label for="account">Account id</label>
<div class="field">
<input type="text" id="account" name="account" required maxlength="100" autocomplete="off" spellcheck="false" aria-describedby="account-hint"${
    problem ? ` value="${escapeHtml(problem.account)}" aria-invalid="true"` : ""
  }>
<button type="submit" class="allow">Sign in</button>
</div>
<p class="hint" id="account-hint">Letters, digits and <code>. _ @ + -</code>, at most 100.</p>
</form>
</section>
<p class="target">You get the <code>session</code> cookie for ${
    devSessionSeconds / 3600
  } hours, then go back to <code>${escapeHtml(goingTo)}</code>.</p>`;
  return await htmlPage("Sign in (development)", body, {
    status: problem?.status ?? 200,
    extraStyle,
    referrer: "same-origin",
  });
}

/** The form's fields, or why not: a form body of at most {@link maxFormBytes}. */
async function readForm(req: Request): Promise<URLSearchParams | { status: number }> {
  const type = (req.headers.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase();
  if (type !== "application/x-www-form-urlencoded") return { status: 415 };
  if (Number(req.headers.get("content-length") ?? "0") > maxFormBytes) return { status: 413 };
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for await (const chunk of req.body ?? []) {
      size += chunk.byteLength;
      if (size > maxFormBytes) return { status: 413 };
      chunks.push(chunk);
    }
  } catch {
    return { status: 400 };
  }
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.byteLength;
  }
  return new URLSearchParams(new TextDecoder().decode(bytes));
}

/** Whether a URL's hostname names this machine's loopback interface. */
function isLoopbackHost(hostname: string): boolean {
  return hostname === "localhost" || hostname.endsWith(".localhost") ||
    hostname === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(hostname);
}

/** The page's handler: a response for its path, undefined for any other. */
export type DevSignIn = (req: Request, url: URL) => Promise<Response | undefined>;

/** Creates the page's handler. */
export function createDevSignIn(options: DevSignInOptions): DevSignIn {
  const publicOrigin = new URL(options.publicUrl).origin;
  const secure = new URL(options.publicUrl).protocol === "https:";
  const again = { href: devSignInPath, text: "Back to the sign-in page" };

  async function signIn(req: Request, url: URL): Promise<Response> {
    // A login CSRF comes from another origin; a browser says which in Origin (its forms' POSTs
    // always carry it) and Sec-Fetch-Site. The request's own origin counts only on a loopback
    // host (a browser on `localhost` where ISSUER_URL says 127.0.0.1): a name that an attacker's
    // DNS points at this machine (DNS rebinding) makes Origin and Host agree on the attacker's
    // name, and that is not this site.
    const origin = req.headers.get("origin");
    const site = req.headers.get("sec-fetch-site");
    const ownOrigin = isLoopbackHost(url.hostname) ? url.origin : publicOrigin;
    if (
      origin === null || (origin !== ownOrigin && origin !== publicOrigin) ||
      (site !== null && site !== "same-origin")
    ) {
      return await errorPage(
        403,
        "Sign in from this site's page",
        "This sign-in was not sent from the sign-in page of this site, so it was refused.",
        again,
      );
    }
    const form = await readForm(req);
    if (!(form instanceof URLSearchParams)) {
      return await errorPage(
        form.status,
        "This sign-in cannot be completed",
        "The form is not valid.",
        again,
      );
    }
    const returnTo = returnToPath(form.get("return_to"));
    if (returnTo === undefined) return await badReturnTo();
    const account = (form.get("account") ?? "").trim();
    if (!accountPattern.test(account)) {
      return await signInPage(returnTo, {
        status: 400,
        account: account.slice(0, 100),
        message: account === ""
          ? "Choose an account, or type an account id."
          : "An account id is 1 to 100 letters, digits and . _ @ + - (starting with a letter or digit).",
      });
    }
    const token = await signToken(options.secret, {
      sub: account,
      accountId: account,
      projects: [],
      ttlSeconds: devSessionSeconds,
      ...(options.tokenIssuer !== undefined ? { issuer: options.tokenIssuer } : {}),
      ...(options.tokenAudience !== undefined ? { audience: options.tokenAudience } : {}),
    });
    const cookie = `session=${token}; Path=/; Max-Age=${devSessionSeconds}; HttpOnly; ` +
      `SameSite=Lax${secure || url.protocol === "https:" ? "; Secure" : ""}`;
    // 303: the browser follows with a GET.
    return new Response(null, {
      status: 303,
      headers: { location: returnTo, "set-cookie": cookie, "cache-control": "no-store" },
    });
  }

  async function badReturnTo(): Promise<Response> {
    return await errorPage(
      400,
      "This sign-in link is not valid",
      "Its return_to is not a path on this site (such as /oauth2/authorize?...), so it is not " +
        "followed.",
      { href: devSignInPath, text: "Sign in without it" },
    );
  }

  return async (req, url) => {
    if (url.pathname !== devSignInPath) return undefined;
    if (req.method === "POST") return await signIn(req, url);
    if (req.method !== "GET" && req.method !== "HEAD") {
      return methodNotAllowed(req.method, pageMethods);
    }
    const returnTo = returnToPath(url.searchParams.get("return_to"));
    const res = returnTo === undefined ? await badReturnTo() : await signInPage(returnTo);
    return req.method === "HEAD" ? await headOf(res) : res;
  };
}
