/** `GET /`: a page linking the reference, and the development sign-in page only when it is on. */

import assert from "node:assert/strict";
import { createHomePage } from "./home_page.ts";

const base = "http://127.0.0.1:8080";

async function answer(
  page: ReturnType<typeof createHomePage>,
  init: RequestInit = {},
): Promise<Response> {
  const req = new Request(`${base}/`, init);
  const res = await page(req, new URL(req.url));
  assert.ok(res, "the page answers");
  return res;
}

const hrefs = (html: string) => [...html.matchAll(/href="([^"]*)"/g)].map((m) => m[1]);

Deno.test("/ without the development sign-in links the reference only", async () => {
  const page = createHomePage();
  const res = await answer(page, { headers: { accept: "text/html,*/*;q=0.8" } });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("content-type"), "text/html; charset=utf-8");
  assert.match(res.headers.get("content-security-policy") ?? "", /default-src 'none'/);
  assert.equal(res.headers.get("vary"), "Accept");
  const html = await res.text();
  assert.deepEqual(hrefs(html), ["/docs"]);
  assert.doesNotMatch(html, /sign-in|Sign in/);
  const json = await answer(page, { headers: { accept: "application/json" } });
  assert.equal(json.headers.get("content-type"), "application/json");
  assert.deepEqual(await json.json(), { docs: "/docs" });
  assert.equal(await page(new Request(`${base}/x`), new URL(`${base}/x`)), undefined);
});

Deno.test("/ with the development sign-in links it too; GET and HEAD only", async () => {
  const page = createHomePage({ devSignIn: "/dev/sign-in" });
  const html = await (await answer(page)).text();
  assert.deepEqual(hrefs(html), ["/docs", "/dev/sign-in"]);
  assert.match(html, /deno task start/);
  const json = await answer(page, { headers: { accept: "application/json" } });
  assert.deepEqual(await json.json(), { docs: "/docs", dev_sign_in: "/dev/sign-in" });
  const head = await answer(page, { method: "HEAD" });
  assert.equal(head.status, 200);
  assert.equal(head.body, null);
  const post = await answer(page, { method: "POST" });
  assert.equal(post.status, 405);
  assert.equal(post.headers.get("allow"), "GET, HEAD");
  await post.body?.cancel();
});
