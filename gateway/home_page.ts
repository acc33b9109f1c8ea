/**
 * `GET /`: a small page that says what this is and links the API reference (`/docs`), and under
 * `deno task start` the development sign-in page (./dev_sign_in.ts). A client that asks for JSON
 * only (`Accept: application/json` without `text/html`) gets the same links as JSON. GET and HEAD
 * only; another method is 405 with `Allow`, as the other pages answer it.
 *
 * @module
 */

import { escapeHtml, headOf, htmlPage } from "./consent_page.ts";
import { docsPath } from "./docs_page.ts";
import { methodNotAllowed } from "./http_errors.ts";

/** What the page links besides the reference. */
export interface HomeOptions {
  /** The development sign-in page's path, when the gateway has it. */
  devSignIn?: string | undefined;
}

const extraStyle = `
.intro{color:#374151}
.entries{display:grid;gap:.5rem;margin:1rem 0 0;padding:0;list-style:none}
.entries a{display:block;padding:.75rem 1rem;border:1px solid #d1d5db;border-radius:8px;text-decoration:none}
.entries a:hover{border-color:#1d4ed8;background:#eff6ff}
.entries strong{display:block}
.entries span{color:#4b5563;font-size:.9375rem}
.dev-note{margin-top:1.25rem;color:#78350f;font-size:.875rem}
`.trim();

/** Whether the client wants JSON and not a page. */
function wantsJson(accept: string | null): boolean {
  if (accept === null) return false;
  const types = accept.split(",").map((t) => t.split(";")[0]!.trim().toLowerCase());
  return types.includes("application/json") && !types.includes("text/html");
}

/** The page's handler: a response for `/`, undefined for any other path. */
export function createHomePage(
  options: HomeOptions = {},
): (req: Request, url: URL) => Promise<Response | undefined> {
  const links = [
    { href: docsPath, title: "API reference", text: "The /v1 API and the OAuth endpoints." },
    ...(options.devSignIn
      ? [{
        href: options.devSignIn,
        title: "Sign in (development)",
        text: "Sign in as an example account, to try the consent page.",
      }]
      : []),
  ];
  const json = JSON.stringify({
    docs: docsPath,
    ...(options.devSignIn ? { dev_sign_in: options.devSignIn } : {}),
  });
  const body = `<header>
<h1>OAuth client registry</h1>
</header>
<p class="intro">The gateway of the OAuth client registry and its authorization server.</p>
<nav aria-label="Pages">
<ul class="entries">
${
    links.map((l) =>
      `<li><a href="${escapeHtml(l.href)}"><strong>${escapeHtml(l.title)}</strong><span>${
        escapeHtml(l.text)
      }</span></a></li>`
    ).join("\n")
  }
</ul>
</nav>
${
    options.devSignIn
      ? `<p class="dev-note">A development stack (<code>deno task start</code>): a deployed gateway has no sign-in page of its own.</p>`
      : ""
  }`;

  return async (req, url) => {
    if (url.pathname !== "/") return undefined;
    if (req.method !== "GET" && req.method !== "HEAD") {
      return methodNotAllowed(req.method, ["GET", "HEAD"]);
    }
    let res: Response;
    if (wantsJson(req.headers.get("accept"))) {
      res = new Response(json, { headers: { "content-type": "application/json" } });
    } else {
      res = await htmlPage("OAuth client registry", body, { extraStyle });
    }
    res.headers.set("vary", "Accept");
    return req.method === "HEAD" ? await headOf(res) : res;
  };
}
