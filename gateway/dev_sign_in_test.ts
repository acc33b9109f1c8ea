/**
 * The development sign-in page (./dev_sign_in.ts) on its own: the page, the cookie and the token
 * in it, where it sends the browser back to (a path of this origin, nothing else), and the CSRF
 * checks of its form.
 */

import assert from "node:assert/strict";
import { jwtVerify } from "jose";
import {
  createDevSignIn,
  devSessionSeconds,
  devSignInPath,
  exampleAccounts,
  returnToPath,
} from "./dev_sign_in.ts";

const secret = "s".repeat(40);
const base = "http://127.0.0.1:8080";
const signIn = createDevSignIn({ secret, publicUrl: base });

async function answer(req: Request, handler = signIn): Promise<Response> {
  const res = await handler(req, new URL(req.url));
  assert.ok(res, "the page answers");
  return res;
}

function post(
  fields: Record<string, string>,
  headers: Record<string, string> = { origin: base, "sec-fetch-site": "same-origin" },
  url = `${base}${devSignInPath}`,
): Request {
  return new Request(url, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
    body: new URLSearchParams(fields).toString(),
  });
}

const authorize = "/oauth2/authorize?response_type=code&client_id=cli_x&state=a%20b";

Deno.test("the page: the example accounts, a field for another, the return path, development only", async () => {
  const res = await answer(
    new Request(`${base}${devSignInPath}?return_to=${encodeURIComponent(authorize)}`),
  );
  assert.equal(res.status, 200);
  const html = await res.text();
  for (const a of exampleAccounts) {
    assert.ok(html.includes(`name="account" value="${a.id}"`), a.id);
  }
  assert.match(html, /<input type="text" id="account" name="account"/);
  assert.match(html, /For development only/);
  assert.match(html, /exists only under <code>deno task start<\/code>/);
  // return_to in both forms, escaped.
  const escaped = authorize.replaceAll("&", "&amp;");
  assert.equal(html.split(`name="return_to" value="${escaped}"`).length, 3);
  const csp = res.headers.get("content-security-policy") ?? "";
  for (
    const directive of [
      "default-src 'none'",
      "img-src 'none'",
      "form-action 'self'",
      "frame-ancestors 'none'",
      "base-uri 'none'",
    ]
  ) assert.ok(csp.includes(directive), directive);
  assert.match(csp, /style-src 'sha256-[A-Za-z0-9+/=]+'/);
  assert.doesNotMatch(csp, /script-src|unsafe/);
  assert.equal(res.headers.get("x-frame-options"), "DENY");
  assert.equal(res.headers.get("cache-control"), "no-store");
  // Its forms' POST must carry their Origin: not `no-referrer`, which would make it `null`.
  assert.equal(res.headers.get("referrer-policy"), "same-origin");
  assert.match(html, /<meta name="referrer" content="same-origin">/);
});

Deno.test("the page escapes what it shows", async () => {
  const res = await answer(
    new Request(`${base}${devSignInPath}?return_to=${encodeURIComponent('/x?"><script>')}`),
  );
  assert.equal(res.status, 200);
  const html = await res.text();
  assert.ok(!html.includes("<script>"));
  assert.ok(html.includes("/x?&quot;&gt;&lt;script&gt;"));
  const typed = await answer(post({ account: '<b a="1">', return_to: "/" }));
  assert.equal(typed.status, 400);
  const again = await typed.text();
  assert.ok(!again.includes('<b a="1">'));
  assert.ok(again.includes('value="&lt;b a=&quot;1&quot;&gt;"'));
});

Deno.test("signing in: an HttpOnly, SameSite=Lax session cookie with a platform token, and back", async () => {
  const res = await answer(post({ account: "ada@example.com", return_to: authorize }));
  assert.equal(res.status, 303);
  assert.equal(res.headers.get("location"), authorize);
  assert.equal(res.headers.get("cache-control"), "no-store");
  const cookie = res.headers.get("set-cookie") ?? "";
  const [pair, ...attributes] = cookie.split("; ");
  assert.match(pair!, /^session=[\w-]+\.[\w-]+\.[\w-]+$/);
  assert.deepEqual(attributes.sort(), [
    "HttpOnly",
    `Max-Age=${devSessionSeconds}`,
    "Path=/",
    "SameSite=Lax",
  ]);
  const { payload, protectedHeader } = await jwtVerify(
    pair!.slice("session=".length),
    new TextEncoder().encode(secret),
  );
  assert.equal(protectedHeader.alg, "HS256");
  assert.equal(payload.sub, "ada@example.com");
  assert.equal(payload.account_id, "ada@example.com");
  assert.deepEqual(payload.projects, []);
  assert.equal(payload.exp! - payload.iat!, devSessionSeconds);
  // A typed id, without return_to: back to `/`.
  const typed = await answer(post({ account: "  dev-user.2  " }));
  assert.equal(typed.status, 303);
  assert.equal(typed.headers.get("location"), "/");
  const token = /^session=([^;]+)/.exec(typed.headers.get("set-cookie")!)![1]!;
  assert.equal(
    (await jwtVerify(token, new TextEncoder().encode(secret))).payload.sub,
    "dev-user.2",
  );
});

Deno.test("the token has the iss and aud the stack requires, and the cookie is Secure on HTTPS", async () => {
  const handler = createDevSignIn({
    secret,
    publicUrl: "https://registry.example.com",
    tokenIssuer: "https://issuer.example",
    tokenAudience: "registry",
  });
  const res = await answer(
    post(
      { account: "ada@example.com" },
      { origin: "https://registry.example.com" },
      `https://registry.example.com${devSignInPath}`,
    ),
    handler,
  );
  assert.equal(res.status, 303);
  const cookie = res.headers.get("set-cookie")!;
  assert.match(cookie, /; Secure(;|$)/);
  const { payload } = await jwtVerify(
    /^session=([^;]+)/.exec(cookie)![1]!,
    new TextEncoder().encode(secret),
    { issuer: "https://issuer.example", audience: "registry" },
  );
  assert.equal(payload.sub, "ada@example.com");
});

Deno.test("return_to: a path of this origin only", async () => {
  for (const ok of ["/", authorize, "/docs#x", "/a/../b", "/%2F%2Fevil.example"]) {
    assert.equal(returnToPath(ok), ok, ok);
  }
  assert.equal(returnToPath(null), "/");
  assert.equal(returnToPath(""), "/");
  const refused = [
    "https://evil.example/",
    "http://127.0.0.1:8080/oauth2/authorize",
    "//evil.example",
    "///evil.example",
    "/\\evil.example",
    "\\\\evil.example",
    "/a\\b",
    "/\t/evil.example",
    "/\n/evil.example",
    "/ /evil.example",
    "javascript:alert(1)",
    "evil.example",
    "oauth2/authorize",
    "/é",
    `/${"a".repeat(5000)}`,
  ];
  for (const bad of refused) {
    assert.equal(returnToPath(bad), undefined, JSON.stringify(bad));
    const page = await answer(
      new Request(`${base}${devSignInPath}?return_to=${encodeURIComponent(bad)}`),
    );
    assert.equal(page.status, 400, JSON.stringify(bad));
    assert.match(await page.text(), /not a path on this site/);
    const res = await answer(post({ account: "ada@example.com", return_to: bad }));
    assert.equal(res.status, 400, JSON.stringify(bad));
    assert.equal(res.headers.get("location"), null);
    assert.equal(res.headers.get("set-cookie"), null);
    await res.body?.cancel();
  }
});

Deno.test("the form's CSRF checks: Origin this site's, Sec-Fetch-Site same-origin when sent", async () => {
  const cases: [string, Record<string, string>][] = [
    ["no Origin", {}],
    ["another origin", { origin: "https://evil.example" }],
    ["a look-alike", { origin: "http://127.0.0.1:8081" }],
    ["Origin null", { origin: "null" }],
    ["cross-site", { origin: base, "sec-fetch-site": "cross-site" }],
    ["same-site", { origin: base, "sec-fetch-site": "same-site" }],
  ];
  for (const [what, headers] of cases) {
    const res = await answer(post({ account: "ada@example.com", return_to: "/" }, headers));
    assert.equal(res.status, 403, what);
    assert.equal(res.headers.get("set-cookie"), null, what);
    assert.equal(res.headers.get("location"), null, what);
    assert.match(await res.text(), /was not sent from the sign-in page of this site/, what);
  }
  // The request's own origin counts as well as the public URL's (a browser on `localhost`).
  const local = await answer(
    post(
      { account: "ada@example.com" },
      { origin: "http://localhost:8080" },
      `http://localhost:8080${devSignInPath}`,
    ),
  );
  assert.equal(local.status, 303);
  // But not on any other name: one that an attacker's DNS points at this machine (DNS
  // rebinding) makes Origin and Host agree.
  for (const host of ["evil.example:8080", "127.0.0.1.nip.io:8080", "localhost.evil.example"]) {
    const rebound = await answer(
      post(
        { account: "ada@example.com" },
        { origin: `http://${host}`, "sec-fetch-site": "same-origin" },
        `http://${host}${devSignInPath}`,
      ),
    );
    assert.equal(rebound.status, 403, host);
    assert.equal(rebound.headers.get("set-cookie"), null, host);
  }
  // Without Sec-Fetch-Site (older browsers), Origin alone.
  const plain = await answer(post({ account: "ada@example.com" }, { origin: base }));
  assert.equal(plain.status, 303);
});

Deno.test("the form: an account id is required and well-formed; only a form body; GET, HEAD, POST", async () => {
  for (const account of ["", " ", "a b", "-x", "a".repeat(101), "ada\u0000"]) {
    const res = await answer(post({ account, return_to: authorize }));
    assert.equal(res.status, 400, JSON.stringify(account));
    assert.equal(res.headers.get("set-cookie"), null);
    const html = await res.text();
    assert.match(html, /role="alert"/);
    // The page again, with the same return path.
    assert.ok(html.includes(`value="${authorize.replaceAll("&", "&amp;")}"`));
  }
  const json = await answer(
    new Request(`${base}${devSignInPath}`, {
      method: "POST",
      headers: { origin: base, "content-type": "application/json" },
      body: '{"account":"ada@example.com"}',
    }),
  );
  assert.equal(json.status, 415);
  assert.equal(json.headers.get("set-cookie"), null);
  await json.body?.cancel();
  const big = await answer(post({ account: "ada@example.com", pad: "x".repeat(20_000) }));
  assert.equal(big.status, 413);
  await big.body?.cancel();
  const put = await answer(new Request(`${base}${devSignInPath}`, { method: "PUT" }));
  assert.equal(put.status, 405);
  assert.equal(put.headers.get("allow"), "GET, HEAD, POST");
  assert.equal((await put.json()).error.code, "unimplemented");
  const head = await answer(new Request(`${base}${devSignInPath}`, { method: "HEAD" }));
  assert.equal(head.status, 200);
  assert.equal(head.body, null);
  assert.equal(
    await signIn(new Request(`${base}/dev/sign-in/x`), new URL(`${base}/dev/sign-in/x`)),
    undefined,
  );
});
