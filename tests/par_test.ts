/**
 * Pushed authorization requests (RFC 9126) end to end: real gateway, oauth-registry and token
 * service over a real Postgres, driven by a stock client (oauth4webapi's pushedAuthorizationRequest,
 * through discovery) and the consent page's form played by fetch. The authorization endpoint works
 * on the pushed request whatever else the URL says; a request_uri is good once, for its own client
 * only, and spent only by the user's decision; a pushed request is checked whole when it is pushed;
 * a client (or the server, with REQUIRE_PAR) that requires PAR gets `invalid_request` at its
 * redirect URI without one.
 */

import assert from "node:assert/strict";
import * as oauth from "oauth4webapi";
import {
  consentFormFields,
  httpClient,
  movableClock,
  propagated,
  startStack,
} from "../lib/testing/mod.ts";
import type { MovableClock, Stack } from "../lib/testing/mod.ts";

const insecure = { [oauth.allowInsecureRequests]: true };

Deno.test("PAR with a stock client: pushed, authorized once, checked whole, required when asked", async (t) => {
  const stack = await startStack();
  const api = httpClient(stack.gatewayUrl);
  const admin = await stack.token({ sub: "admin", projects: ["par1"] });
  const issuer = new URL(stack.gatewayUrl);
  let users = 0;
  /** A user of their own for each flow (consent is remembered per user). */
  const newUser = () => stack.token({ sub: `par-user-${++users}`, projects: [] });
  try {
    await api("PATCH", "/v1/projects/par1/config", {
      token: admin,
      json: { application_name: "Pushed", audience: "external" },
    });
    const redirect = "https://app.example.com/cb";
    const newClient = async (json: Record<string, unknown>) => {
      const res = await api("POST", "/v1/projects/par1/clients", {
        token: admin,
        json: { name: "par", redirect_uris: [redirect], ...json },
      });
      assert.equal(res.status, 201, res.text);
      return res.body.id as string;
    };
    const web = await newClient({ type: "web" });
    const secret = (await api("POST", `/v1/projects/par1/clients/${web}/secrets`, {
      token: admin,
    })).body.secret as string;
    const spa = await newClient({ type: "spa" });
    const auth = oauth.ClientSecretBasic(secret);

    const as = await oauth.processDiscoveryResponse(
      issuer,
      await oauth.discoveryRequest(issuer, { algorithm: "oauth2", ...insecure }),
    );
    await t.step("discovery names the PAR endpoint; PAR is not required by default", () => {
      assert.equal(as.pushed_authorization_request_endpoint, `${stack.gatewayUrl}/oauth2/par`);
      assert.equal(as.require_pushed_authorization_requests, false);
    });

    const pkce = async () => {
      const verifier = oauth.generateRandomCodeVerifier();
      return { verifier, challenge: await oauth.calculatePKCECodeChallenge(verifier) };
    };
    /** Pushes a request for `client`; the request_uri. */
    const push = async (client: string, clientAuth: oauth.ClientAuth, challenge: string) => {
      const res = await oauth.pushedAuthorizationRequest(
        as,
        { client_id: client },
        clientAuth,
        {
          response_type: "code",
          redirect_uri: redirect,
          scope: "read",
          state: "pushed-state",
          code_challenge: challenge,
          code_challenge_method: "S256",
        },
        insecure,
      );
      const body = await oauth.processPushedAuthorizationResponse(as, { client_id: client }, res);
      assert.ok(body.request_uri.startsWith("urn:ietf:params:oauth:request_uri:"));
      assert.ok(body.expires_in > 0 && body.expires_in <= 60, String(body.expires_in));
      return body.request_uri;
    };
    const authorizeGet = (params: Record<string, string>, session: string) =>
      fetch(`${as.authorization_endpoint}?${new URLSearchParams(params)}`, {
        redirect: "manual",
        headers: { cookie: `session=${session}` },
      });
    /** The consent form's POST of `fields`, as is. */
    const post = (fields: Record<string, string>, session: string) =>
      fetch(as.authorization_endpoint!, {
        method: "POST",
        redirect: "manual",
        headers: {
          cookie: `session=${session}`,
          "content-type": "application/x-www-form-urlencoded",
        },
        body: new URLSearchParams(fields),
      });
    const decide = (fields: Record<string, string>, session: string) =>
      post({ ...fields, decision: "allow" }, session);

    await t.step(
      "the pushed request is the one authorized, whatever else the URL says",
      async () => {
        const { verifier, challenge } = await pkce();
        const requestUri = await push(web, auth, challenge);
        const user = await newUser();
        // RFC 9126 4: parameters beside client_id and request_uri are ignored.
        // Given twice, they are still ignored (RFC 6749 3.1's repeat is of a parameter it reads).
        const beside = new URLSearchParams({
          client_id: web,
          request_uri: requestUri,
          redirect_uri: "https://elsewhere.example/cb",
          state: "not-the-pushed-state",
          scope: "admin",
        });
        const page = await fetch(
          `${as.authorization_endpoint}?${beside}&state=again&scope=again`,
          { redirect: "manual", headers: { cookie: `session=${user}` } },
        );
        const html = await page.text();
        assert.equal(page.status, 200, html);
        assert.doesNotMatch(html, /elsewhere\.example|not-the-pushed-state|again/);
        const fields = consentFormFields(html);
        assert.equal(fields.request_uri, requestUri);
        const back = await decide(fields, user);
        assert.equal(back.status, 303, await back.clone().text());
        const location = new URL(back.headers.get("location")!);
        assert.equal(location.origin + location.pathname, redirect);
        const params = oauth.validateAuthResponse(as, { client_id: web }, location, "pushed-state");
        const tokens = await oauth.processAuthorizationCodeResponse(
          as,
          { client_id: web },
          await oauth.authorizationCodeGrantRequest(
            as,
            { client_id: web },
            auth,
            params,
            redirect,
            verifier,
            insecure,
          ),
        );
        assert.equal(tokens.scope, "read");

        // Good for one decision: the same request_uri again is refused, and not redirected.
        const again = await authorizeGet({ client_id: web, request_uri: requestUri }, user);
        assert.equal(again.status, 400);
        assert.match(await again.text(), /unknown, expired or already used/);
      },
    );

    await t.step("a request_uri works only with the client that pushed it", async () => {
      const { challenge } = await pkce();
      const requestUri = await push(spa, oauth.None(), challenge);
      const res = await authorizeGet({ client_id: web, request_uri: requestUri }, await newUser());
      assert.equal(res.status, 400);
      await res.body?.cancel();
      const unknown = await authorizeGet(
        { client_id: web, request_uri: "urn:ietf:params:oauth:request_uri:nothing" },
        await newUser(),
      );
      assert.equal(unknown.status, 400);
      await unknown.body?.cancel();
    });

    await t.step(
      "a page's form decides its own request_uri only, not another pushed request's",
      async () => {
        // Two pushes of the very same parameters: two requests, each with its own page.
        const { challenge } = await pkce();
        const shownUri = await push(web, auth, challenge);
        const otherUri = await push(web, auth, challenge);
        const user = await newUser();
        const page = await authorizeGet({ client_id: web, request_uri: shownUri }, user);
        const html = await page.text();
        assert.equal(page.status, 200, html);
        const fields = consentFormFields(html);
        const swapped = await decide({ ...fields, request_uri: otherUri }, user);
        assert.equal(swapped.status, 400, "the form of one request decides no other");
        assert.equal(swapped.headers.get("location"), null);
        assert.match(await swapped.text(), /expired or was not shown to this session/);
        // The other request is not spent, and the form decides its own.
        const other = await authorizeGet({ client_id: web, request_uri: otherUri }, user);
        assert.equal(other.status, 200);
        await other.body?.cancel();
        const back = await decide(fields, user);
        assert.equal(back.status, 303, await back.clone().text());
        assert.ok(new URL(back.headers.get("location")!).searchParams.get("code"));
      },
    );

    await t.step(
      "a consent POST that is refused spends nothing; the user's decision does",
      async () => {
        const { challenge } = await pkce();
        const requestUri = await push(web, auth, challenge);
        const user = await newUser();
        const page = await authorizeGet({ client_id: web, request_uri: requestUri }, user);
        const html = await page.text();
        assert.equal(page.status, 200, html);
        const fields = consentFormFields(html);
        const refused: [string, Record<string, string>, string][] = [
          [
            "someone else, signed in, who saw the URL",
            { client_id: web, request_uri: requestUri, decision: "deny" },
            await newUser(),
          ],
          ["the user's form with a stale CSRF token", {
            ...fields,
            csrf_token: `${Date.now() - 1}.${"A".repeat(43)}`,
            decision: "deny",
          }, user],
          ["no decision", fields, user],
        ];
        for (const [what, form, session] of refused) {
          const res = await post(form, session);
          assert.equal(res.status, 400, what);
          await res.body?.cancel();
        }
        const back = await decide(fields, user);
        assert.equal(back.status, 303, await back.text());
        const location = new URL(back.headers.get("location")!);
        assert.ok(location.searchParams.get("code"), location.href);
        const again = await decide(fields, user);
        assert.equal(again.status, 400, "one decision");
        await again.body?.cancel();
      },
    );

    await t.step(
      "the pushed prompt decides: prompt=none without a session is login_required",
      async () => {
        const { challenge } = await pkce();
        const res = await oauth.pushedAuthorizationRequest(
          as,
          { client_id: web },
          auth,
          {
            response_type: "code",
            redirect_uri: redirect,
            state: "silent",
            code_challenge: challenge,
            code_challenge_method: "S256",
            prompt: "none",
          },
          insecure,
        );
        const { request_uri } = await oauth.processPushedAuthorizationResponse(
          as,
          { client_id: web },
          res,
        );
        const url = `${as.authorization_endpoint}?${new URLSearchParams({
          client_id: web,
          request_uri,
        })}`;
        const silent = await fetch(url, { redirect: "manual" });
        await silent.body?.cancel();
        assert.equal(silent.status, 302);
        const location = new URL(silent.headers.get("location")!);
        assert.equal(location.origin + location.pathname, redirect);
        assert.deepEqual(
          [location.searchParams.get("error"), location.searchParams.get("state")],
          ["login_required", "silent"],
        );
        assert.equal(location.searchParams.get("iss"), as.issuer);
        // A prompt beside request_uri is not the pushed request's: the user is asked to sign in.
        const loud = await push(web, auth, challenge);
        const beside = await fetch(
          `${as.authorization_endpoint}?${new URLSearchParams({
            client_id: web,
            request_uri: loud,
            prompt: "none",
          })}`,
          { redirect: "manual" },
        );
        await beside.body?.cancel();
        assert.equal(beside.status, 401, "the page saying to sign in (no LOGIN_URL here)");
      },
    );

    /** A raw PAR request with the web client's Basic credentials. */
    const rawPush = async (form: Record<string, string>) => {
      const res = await fetch(as.pushed_authorization_request_endpoint!, {
        method: "POST",
        headers: {
          "content-type": "application/x-www-form-urlencoded",
          authorization: `Basic ${btoa(`${web}:${secret}`)}`,
        },
        body: new URLSearchParams(form),
      });
      return { status: res.status, body: await res.json() };
    };
    await t.step(
      "a pushed request is checked whole when it is pushed (RFC 6749 5.2 errors)",
      async () => {
        const { challenge } = await pkce();
        const good = {
          client_id: web,
          response_type: "code",
          redirect_uri: redirect,
          code_challenge: challenge,
          code_challenge_method: "S256",
        };
        assert.equal((await rawPush(good)).status, 201);
        // RFC 9126 2.1: client_id is as required as in any authorization request, even when the
        // client authenticated with Basic.
        const { client_id: _, ...anonymous } = good;
        const cases: [string, Record<string, string>, string][] = [
          [
            "an unregistered redirect_uri",
            { ...good, redirect_uri: "https://x.example/cb" },
            "invalid_request",
          ],
          [
            "no PKCE",
            { ...good, code_challenge: "", code_challenge_method: "" },
            "invalid_request",
          ],
          ["plain PKCE", { ...good, code_challenge_method: "plain" }, "invalid_request"],
          [
            "another response_type",
            { ...good, response_type: "token" },
            "unsupported_response_type",
          ],
          [
            "a request_uri inside",
            { ...good, request_uri: "urn:ietf:params:oauth:request_uri:x" },
            "invalid_request",
          ],
          ["another client's client_id", { ...good, client_id: spa }, "invalid_request"],
          ["no client_id", anonymous, "invalid_request"],
          // The authorization endpoint's limits on state, refused when pushed, not at its use.
          ["a line break in state", { ...good, state: "a\nb" }, "invalid_request"],
          ["a tab in state", { ...good, state: "a\tb" }, "invalid_request"],
          ["a state too long", { ...good, state: "s".repeat(2049) }, "invalid_request"],
          ["a request object", { ...good, request: "e30.e30." }, "request_not_supported"],
        ];
        for (const [name, form, error] of cases) {
          const res = await rawPush(form);
          assert.equal(res.status, 400, `${name}: ${JSON.stringify(res.body)}`);
          assert.equal(res.body.error, error, name);
        }
        const wrong = await fetch(as.pushed_authorization_request_endpoint!, {
          method: "POST",
          headers: { "content-type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams({ ...good, client_id: web, client_secret: "ocs_wrong" }),
        });
        assert.equal(wrong.status, 401);
        await wrong.body?.cancel();
      },
    );

    await t.step(
      "a client that requires PAR gets invalid_request at its redirect URI without it",
      async () => {
        const created = await api("POST", "/v1/projects/par1/clients", {
          token: admin,
          json: {
            name: "par only",
            type: "spa",
            redirect_uris: [redirect],
            require_pushed_authorization_requests: true,
          },
        });
        assert.equal(created.status, 201, created.text);
        assert.equal(created.body.require_pushed_authorization_requests, true);
        const parOnly = created.body.id as string;
        const { challenge } = await pkce();
        const plain = {
          response_type: "code",
          client_id: parOnly,
          redirect_uri: redirect,
          state: "not-pushed",
          code_challenge: challenge,
          code_challenge_method: "S256",
        };
        // RFC 9126 4: invalid_request, sent back to the client (as node-oidc-provider does).
        const res = await authorizeGet(plain, await newUser());
        await res.body?.cancel();
        assert.equal(res.status, 302);
        const location = new URL(res.headers.get("location")!);
        assert.equal(location.origin + location.pathname, redirect);
        assert.deepEqual(Object.fromEntries(location.searchParams), {
          error: "invalid_request",
          error_description: "Pushed Authorization Request must be used",
          state: "not-pushed",
          iss: as.issuer,
        });
        // A redirect URI that is not the client's is still never redirected to.
        const elsewhere = await authorizeGet(
          { ...plain, redirect_uri: "https://elsewhere.example/cb" },
          await newUser(),
        );
        assert.equal(elsewhere.status, 400);
        await elsewhere.body?.cancel();
        const requestUri = await push(parOnly, oauth.None(), challenge);
        const page = await authorizeGet(
          { client_id: parOnly, request_uri: requestUri },
          await newUser(),
        );
        assert.equal(page.status, 200);
        await page.body?.cancel();
      },
    );

    await t.step(
      "a request that fails its checks at the decision is answered once, and spent",
      async () => {
        // A project of its own: its audience becomes internal between the page and its POST.
        const owner = await stack.token({ sub: "admin", projects: ["par4"] });
        await api("PATCH", "/v1/projects/par4/config", {
          token: owner,
          json: { application_name: "Pushed", audience: "external" },
        });
        const created = await api("POST", "/v1/projects/par4/clients", {
          token: owner,
          json: { name: "spa", type: "spa", redirect_uris: [redirect] },
        });
        assert.equal(created.status, 201, created.text);
        const client = created.body.id as string;
        const { challenge } = await pkce();
        const requestUri = await push(client, oauth.None(), challenge);
        const user = await newUser();
        const page = await authorizeGet({ client_id: client, request_uri: requestUri }, user);
        const html = await page.text();
        assert.equal(page.status, 200, html);
        const fields = consentFormFields(html);
        await api("PATCH", "/v1/projects/par4/config", {
          token: owner,
          json: { audience: "internal" },
        });
        await propagated();
        const refused = await decide(fields, user);
        await refused.body?.cancel();
        assert.equal(refused.status, 303);
        const location = new URL(refused.headers.get("location")!);
        assert.deepEqual(
          [location.searchParams.get("error"), location.searchParams.get("state")],
          ["access_denied", "pushed-state"],
        );
        // That answer was the request's one: the client is never answered again for it.
        const again = await decide(fields, user);
        assert.equal(again.status, 400, again.headers.get("location") ?? "");
        assert.match(await again.text(), /unknown, expired or already used/);
      },
    );
  } finally {
    await stack.stop();
  }
});

Deno.test("REQUIRE_PAR: the metadata says so, and every client must push", async () => {
  const stack = await startStack({ env: { REQUIRE_PAR: "true" } });
  try {
    const issuer = new URL(stack.gatewayUrl);
    const as = await oauth.processDiscoveryResponse(
      issuer,
      await oauth.discoveryRequest(issuer, { algorithm: "oauth2", ...insecure }),
    );
    assert.equal(as.require_pushed_authorization_requests, true);
    const api = httpClient(stack.gatewayUrl);
    const admin = await stack.token({ sub: "admin", projects: ["par2"] });
    await api("PATCH", "/v1/projects/par2/config", {
      token: admin,
      json: { application_name: "Pushed", audience: "external" },
    });
    const client = (await api("POST", "/v1/projects/par2/clients", {
      token: admin,
      json: { name: "spa", type: "spa", redirect_uris: ["https://app.example.com/cb"] },
    })).body.id as string;
    const challenge = await oauth.calculatePKCECodeChallenge(oauth.generateRandomCodeVerifier());
    const res = await fetch(
      `${as.authorization_endpoint}?${new URLSearchParams({
        response_type: "code",
        client_id: client,
        code_challenge: challenge,
        code_challenge_method: "S256",
      })}`,
      {
        redirect: "manual",
        headers: { cookie: `session=${await stack.token({ sub: "u", projects: [] })}` },
      },
    );
    await res.body?.cancel();
    assert.equal(res.status, 302);
    const location = new URL(res.headers.get("location")!);
    assert.equal(location.origin + location.pathname, "https://app.example.com/cb");
    assert.equal(location.searchParams.get("error"), "invalid_request");
    assert.equal(location.searchParams.get("iss"), as.issuer);
  } finally {
    await stack.stop();
  }
});

Deno.test("a request_uri has 60 s to arrive, then 10 minutes for the sign-in and the decision", async (t) => {
  const loginUrl = "https://login.example.com/sign-in";
  let clock: MovableClock | undefined;
  let stack: Stack | undefined;
  try {
    clock = await movableClock();
    stack = await startStack({
      processEnv: { token: clock.env, gateway: { LOGIN_URL: loginUrl } },
    });
    const tokenClock = clock;
    const api = httpClient(stack.gatewayUrl);
    const day = 24 * 3600;
    const admin = await stack.token({ sub: "admin", projects: ["par3"], ttlSeconds: day });
    await api("PATCH", "/v1/projects/par3/config", {
      token: admin,
      json: { application_name: "Pushed", audience: "external" },
    });
    const redirect = "https://app.example.com/cb";
    const created = await api("POST", "/v1/projects/par3/clients", {
      token: admin,
      json: { name: "spa", type: "spa", redirect_uris: [redirect] },
    });
    assert.equal(created.status, 201, created.text);
    const client = created.body.id as string;
    let users = 0;
    const newUser = () =>
      stack!.token({ sub: `par-slow-${++users}`, projects: [], ttlSeconds: day });
    const authorize = `${stack.gatewayUrl}/oauth2/authorize`;
    const push = async () => {
      const res = await fetch(`${stack!.gatewayUrl}/oauth2/par`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({
          client_id: client,
          response_type: "code",
          redirect_uri: redirect,
          state: "slow",
          code_challenge: await oauth.calculatePKCECodeChallenge(
            oauth.generateRandomCodeVerifier(),
          ),
          code_challenge_method: "S256",
        }),
      });
      const body = await res.json();
      assert.equal(res.status, 201, JSON.stringify(body));
      return `${authorize}?${new URLSearchParams({
        client_id: client,
        request_uri: body.request_uri,
      })}`;
    };
    const get = (url: string, session?: string) =>
      fetch(url, {
        redirect: "manual",
        headers: session === undefined ? {} : { cookie: `session=${session}` },
      });
    /** The consent page's fields, shown to `session`. */
    const page = async (url: string, session: string) => {
      const res = await get(url, session);
      const html = await res.text();
      assert.equal(res.status, 200, html);
      return consentFormFields(html);
    };
    const allow = async (fields: Record<string, string>, session: string) => {
      const res = await fetch(authorize, {
        method: "POST",
        redirect: "manual",
        headers: {
          cookie: `session=${session}`,
          "content-type": "application/x-www-form-urlencoded",
        },
        body: new URLSearchParams({ ...fields, decision: "allow" }),
      });
      const text = await res.text();
      return { status: res.status, text, location: res.headers.get("location") };
    };

    await t.step("not arrived within 60 s: gone", async () => {
      const url = await push();
      await tokenClock.advance(61);
      const res = await get(url, await newUser());
      assert.equal(res.status, 400);
      assert.match(await res.text(), /unknown, expired or already used/);
    });

    await t.step("sent to sign in, back 5 minutes later, Allow 4 minutes after that", async () => {
      const url = await push();
      const login = await get(url);
      await login.body?.cancel();
      assert.equal(login.status, 302);
      assert.equal(new URL(login.headers.get("location")!).origin, new URL(loginUrl).origin);
      await tokenClock.advance(300);
      const user = await newUser();
      const fields = await page(url, user);
      await tokenClock.advance(240);
      const res = await allow(fields, user);
      assert.equal(res.status, 303, res.text);
      const back = new URL(res.location!);
      assert.ok(back.searchParams.get("code"), back.href);
      assert.equal(back.searchParams.get("state"), "slow");
    });

    await t.step("10 minutes from its arrival, however often the page is reloaded", async () => {
      const url = await push();
      const user = await newUser();
      await page(url, user);
      await tokenClock.advance(540);
      // A reload 9 minutes on shows the page (with a fresh CSRF token), and lengthens nothing.
      const fields = await page(url, user);
      await tokenClock.advance(61);
      const res = await allow(fields, user);
      assert.equal(res.status, 400);
      assert.match(res.text, /unknown, expired or already used/);
    });
  } finally {
    await stack?.stop();
    await clock?.close();
  }
});
