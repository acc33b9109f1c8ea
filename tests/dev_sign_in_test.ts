/**
 * The development sign-in page is `deno task start`'s only: the gateway run as the image and the
 * manifests run it (gateway/main.ts, whatever its settings) has none, and `/` links the reference
 * only; the development entry (tools/dev_gateway.ts, which start runs with DATABASE_URL) has it,
 * and the consent flow's "not signed in" leads to it and back with a session. The gateways run
 * without the services; the token service is a stand-in that answers StartAuthorization as the
 * real one answers a request that passes its checks: UNAUTHENTICATED without a user (the user is
 * sent to sign in), and, with one, UNAVAILABLE (so that a session is seen to be passed on).
 */

import assert from "node:assert/strict";
import { Code, ConnectError } from "@connectrpc/connect";
import { TokenService } from "../gen/registry/token/v1/token_service_pb.ts";
import { bindGrpc, serveGrpc } from "../lib/rpc/mod.ts";
import { freePort, spawn } from "../lib/testing/mod.ts";

const secret = "d".repeat(40);

/** A gateway process on a free port, serving; `env` adds settings (given its base URL). */
async function gateway(entry: string, env: (base: string) => Record<string, string>) {
  const tokenService = serveGrpc([bindGrpc(TokenService, {
    startAuthorization(_req, ctx) {
      if (ctx.requestHeader.get("authorization") === null) {
        throw new ConnectError("The user is not signed in", Code.Unauthenticated);
      }
      throw new ConnectError("The token service is away for this test", Code.Unavailable);
    },
  })], { port: 0, hostname: "127.0.0.1" });
  const port = freePort();
  const base = `http://127.0.0.1:${port}`;
  const proc = spawn(entry, {
    AUTH_JWT_SECRET: secret,
    GATEWAY_PORT: String(port),
    HOST: "127.0.0.1",
    LOG_LEVEL: "info",
    // Nothing listens there: the services are not needed.
    OAUTH_REGISTRY_GRPC_URL: "http://127.0.0.1:1",
    CORE_GRPC_URL: "http://127.0.0.1:1",
    TOKEN_SERVICE_GRPC_URL: `http://127.0.0.1:${tokenService.port}`,
    ISSUER_URL: base,
    ...env(base),
  });
  await proc.serving;
  return {
    base,
    lines: proc.lines,
    async stop() {
      proc.child.kill("SIGTERM");
      await proc.child.status;
      await tokenService.close(0);
    },
  };
}

const authorizePath = "/oauth2/authorize?response_type=code&client_id=cli_x&state=s1";

Deno.test("the gateway as the image runs it has no sign-in page, whatever its settings", async () => {
  // Settings that could be mistaken for a switch: none is one.
  const gw = await gateway("gateway/main.ts", () => ({
    LOGIN_URL: "https://login.example.com/",
    DEV_SIGN_IN: "1",
    DEV: "true",
  }));
  try {
    const home = await fetch(`${gw.base}/`, { headers: { accept: "text/html" } });
    assert.equal(home.status, 200);
    const html = await home.text();
    assert.deepEqual([...html.matchAll(/href="([^"]*)"/g)].map((m) => m[1]), ["/docs"]);
    for (const method of ["GET", "POST"]) {
      const res = await fetch(`${gw.base}/dev/sign-in?return_to=/`, {
        method,
        redirect: "manual",
        headers: {
          origin: gw.base,
          "sec-fetch-site": "same-origin",
          "content-type": "application/x-www-form-urlencoded",
        },
        ...(method === "POST" ? { body: "account=ada%40example.com" } : {}),
      });
      assert.equal(res.status, 404, method);
      assert.equal(res.headers.get("set-cookie"), null);
      assert.equal((await res.json()).error.code, "not_found");
    }
    // Without a session, the consent flow goes to LOGIN_URL, with the whole address to return to.
    const res = await fetch(`${gw.base}${authorizePath}`, { redirect: "manual" });
    assert.equal(res.status, 302);
    const to = new URL(res.headers.get("location")!);
    assert.equal(to.origin, "https://login.example.com");
    assert.equal(to.searchParams.get("return_to"), `${gw.base}${authorizePath}`);
  } finally {
    await gw.stop();
  }
});

Deno.test("the development gateway: / links the sign-in page, and the consent flow goes through it", async () => {
  const gw = await gateway("tools/dev_gateway.ts", (base) => ({
    LOGIN_URL: `${base}/dev/sign-in`,
  }));
  const { base } = gw;
  try {
    const home = await (await fetch(`${base}/`)).text();
    assert.deepEqual([...home.matchAll(/href="([^"]*)"/g)].map((m) => m[1]), [
      "/docs",
      "/dev/sign-in",
    ]);
    // No session: to the sign-in page, with a path to return to.
    const first = await fetch(`${base}${authorizePath}`, { redirect: "manual" });
    assert.equal(first.status, 302);
    const login = new URL(first.headers.get("location")!, base);
    assert.equal(login.origin + login.pathname, `${base}/dev/sign-in`);
    assert.equal(login.searchParams.get("return_to"), authorizePath);
    const page = await fetch(login);
    assert.equal(page.status, 200);
    assert.match(await page.text(), /For development only/);
    // Another site's form is refused.
    const forged = await fetch(`${base}/dev/sign-in`, {
      method: "POST",
      redirect: "manual",
      headers: {
        origin: "https://evil.example",
        "content-type": "application/x-www-form-urlencoded",
      },
      body: new URLSearchParams({ account: "mallory", return_to: "/" }).toString(),
    });
    assert.equal(forged.status, 403);
    assert.equal(forged.headers.get("set-cookie"), null);
    await forged.body?.cancel();
    // The page's own form: a session, and back to the consent page's address.
    const signedIn = await fetch(`${base}/dev/sign-in`, {
      method: "POST",
      redirect: "manual",
      headers: { origin: base, "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        account: "ada@example.com",
        return_to: login.searchParams.get("return_to")!,
      }).toString(),
    });
    assert.equal(signedIn.status, 303);
    assert.equal(signedIn.headers.get("location"), authorizePath);
    const cookie = signedIn.headers.get("set-cookie")!;
    assert.match(cookie, /^session=[\w-]+\.[\w-]+\.[\w-]+; /);
    // With it, the authorization endpoint asks the token service for the user (away: 503), and
    // does not send the user to LOGIN_URL again.
    const again = await fetch(`${base}${authorizePath}`, {
      redirect: "manual",
      headers: { cookie: cookie.split(";")[0]! },
    });
    assert.equal(again.status, 503);
    assert.match(await again.text(), /Try again in a moment/);
    assert.ok(gw.lines.some((l) => l.includes('"development sign-in page"')));
  } finally {
    await gw.stop();
  }
});
