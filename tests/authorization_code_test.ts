/**
 * The authorization code grant with PKCE, refresh tokens and token exchange, end to end: real
 * gateway, oauth-registry and token-service processes on a real Postgres, driven by a stock OAuth
 * client (panva's oauth4webapi) through discovery. The browser's part (the consent page and its
 * form) is played here by fetch, with the user's `session` cookie; tests/consent_browser_test.ts
 * plays it in Chromium.
 */

import assert from "node:assert/strict";
import * as oauth from "oauth4webapi";
import { consentFormFields, httpClient, propagated, startStack } from "../lib/testing/mod.ts";

const insecure = { [oauth.allowInsecureRequests]: true };
const exchangeGrant = "urn:ietf:params:oauth:grant-type:token-exchange";
const accessTokenType = "urn:ietf:params:oauth:token-type:access_token";

Deno.test("authorization code + PKCE, refresh and token exchange with a stock OAuth client", async (t) => {
  const stack = await startStack();
  const api = httpClient(stack.gatewayUrl);
  const adminToken = await stack.token({ sub: "admin", projects: ["ap1", "ap2"] });
  const userToken = await stack.token({ sub: "user-1", accountId: "acct-1", projects: [] });
  const otherUserToken = await stack.token({ sub: "user-2", accountId: "acct-2", projects: [] });
  const issuer = new URL(stack.gatewayUrl);
  const call = (method: string, path: string, json?: unknown, token = adminToken) =>
    api(method, path, { token, ...(json !== undefined ? { json } : {}) });
  try {
    await call("PATCH", "/v1/projects/ap1/config", {
      application_name: "Photo Book",
      support_email: "help@photobook.example",
      logo_uri: "https://cdn.photobook.example/logo.png",
      homepage_uri: "https://photobook.example",
      privacy_policy_uri: "https://photobook.example/privacy",
      terms_of_service_uri: "https://photobook.example/terms",
    });
    await call("PATCH", "/v1/projects/ap2/config", {
      application_name: "Internal Tool",
      audience: "internal",
    });
    const newClient = async (project: string, json: Record<string, unknown>) => {
      const res = await call("POST", `/v1/projects/${project}/clients`, json);
      assert.equal(res.status, 201, res.text);
      return res.body.id as string;
    };
    const web = await newClient("ap1", {
      name: "web",
      type: "web",
      redirect_uris: ["https://app.example.com/cb", "https://app.example.com/other?x=1"],
    });
    const webSecret = (await call("POST", `/v1/projects/ap1/clients/${web}/secrets`)).body
      .secret as string;
    const spa = await newClient("ap1", {
      name: "spa",
      type: "spa",
      redirect_uris: ["https://spa.example.com/cb"],
    });
    const native = await newClient("ap1", {
      name: "native",
      type: "native",
      redirect_uris: ["http://127.0.0.1/callback", "com.example.app:/cb"],
    });
    const internal = await newClient("ap2", {
      name: "internal",
      type: "spa",
      redirect_uris: ["https://internal.example.com/cb"],
    });

    const as = await oauth.processDiscoveryResponse(
      issuer,
      await oauth.discoveryRequest(issuer, { algorithm: "oauth2", ...insecure }),
    );

    /** GET /oauth2/authorize as the user; the raw response. */
    const authorizeGet = (params: Record<string, string>, cookie = userToken) =>
      fetch(`${as.authorization_endpoint}?${new URLSearchParams(params)}`, {
        redirect: "manual",
        headers: cookie === "" ? {} : { cookie: `theme=dark; session=${cookie}` },
      });
    /** Submits the consent page's form with a decision; the raw response. */
    const decide = (
      fields: Record<string, string>,
      decision: string,
      cookie = userToken,
    ) =>
      fetch(as.authorization_endpoint!, {
        method: "POST",
        redirect: "manual",
        headers: {
          cookie: `session=${cookie}`,
          "content-type": "application/x-www-form-urlencoded",
        },
        body: new URLSearchParams({ ...fields, decision }),
      });
    /** The whole browser part: page, Allow; the URL the browser is sent back to. */
    const consent = async (params: Record<string, string>, cookie = userToken) => {
      const page = await authorizeGet(params, cookie);
      const html = await page.text();
      assert.equal(page.status, 200, html);
      const back = await decide(consentFormFields(html), "allow", cookie);
      assert.equal(back.status, 303, await back.clone().text());
      return new URL(back.headers.get("location")!);
    };
    /** The whole flow for a client: PKCE, the page, Allow, and the code redeemed. */
    const codeFlow = async (client: string, auth: oauth.ClientAuth, redirect: string) => {
      const { verifier, challenge } = await pkce();
      const location = await consent(request(client, redirect, challenge));
      return await oauth.processAuthorizationCodeResponse(
        as,
        { client_id: client },
        await oauth.authorizationCodeGrantRequest(
          as,
          { client_id: client },
          auth,
          oauth.validateAuthResponse(as, { client_id: client }, location, "st-123"),
          redirect,
          verifier,
          insecure,
        ),
      );
    };
    const pkce = async () => {
      const verifier = oauth.generateRandomCodeVerifier();
      return { verifier, challenge: await oauth.calculatePKCECodeChallenge(verifier) };
    };
    const request = (
      client: string,
      redirect: string,
      challenge: string,
      extra: Record<string, string> = {},
    ) => ({
      response_type: "code",
      client_id: client,
      redirect_uri: redirect,
      scope: "photos.read albums.write",
      state: "st-123",
      code_challenge: challenge,
      code_challenge_method: "S256",
      // Every step plays the consent page: the page even when the user's consent is remembered
      // (tests/remembered_consent_test.ts covers the flow without it).
      prompt: "consent",
      ...extra,
    });
    const introspect = async (token: string) =>
      await oauth.processIntrospectionResponse(
        as,
        { client_id: web },
        await oauth.introspectionRequest(
          as,
          { client_id: web },
          oauth.ClientSecretBasic(webSecret),
          token,
          insecure,
        ),
      );
    const tokenError = async (res: Response) => {
      const body = await res.json();
      return `${res.status} ${body.error}`;
    };

    await t.step("discovery names the authorization endpoint, code, S256 and every grant", () => {
      assert.equal(as.authorization_endpoint, `${stack.gatewayUrl}/oauth2/authorize`);
      assert.deepEqual(as.response_types_supported, ["code"]);
      assert.deepEqual(as.code_challenge_methods_supported, ["S256"]);
      assert.deepEqual(as.grant_types_supported, [
        "authorization_code",
        "refresh_token",
        "client_credentials",
        exchangeGrant,
        "urn:ietf:params:oauth:grant-type:device_code",
      ]);
      assert.ok(as.token_endpoint_auth_methods_supported?.includes("none"));
      assert.equal(as.authorization_response_iss_parameter_supported, true);
      // No request objects, by value or by reference (a pushed request's request_uri is taken
      // whatever these say, RFC 9126 5).
      assert.equal(as.request_parameter_supported, false);
      assert.equal(as.request_uri_parameter_supported, false);
    });

    let webTokens!: oauth.TokenEndpointResponse;
    let webCode = "";
    let webParams!: URLSearchParams;
    let webCodeVerifier = "";
    await t.step(
      "a confidential client: consent page, Allow, code, tokens of the installation",
      async () => {
        const { verifier, challenge } = await pkce();
        const page = await authorizeGet(request(web, "https://app.example.com/cb", challenge));
        const html = await page.text();
        assert.equal(page.status, 200, html);
        for (
          const shown of [
            "Photo Book",
            "acct-1",
            "photos.read",
            "albums.write",
            "help@photobook.example",
            'src="https://cdn.photobook.example/logo.png"',
            'href="https://photobook.example/privacy"',
            'href="https://photobook.example/terms"',
            "This app is not verified",
            ">Allow</button>",
            ">Deny</button>",
          ]
        ) assert.ok(html.includes(shown), `the page shows ${shown}`);
        const csp = page.headers.get("content-security-policy") ?? "";
        assert.match(csp, /default-src 'none'/);
        assert.match(csp, /frame-ancestors 'none'/);
        assert.match(csp, /img-src https:\/\/cdn\.photobook\.example\/logo\.png/);
        assert.match(csp, /form-action 'self' https:\/\/app\.example\.com/);
        assert.equal(page.headers.get("x-frame-options"), "DENY");
        assert.equal(page.headers.get("cache-control"), "no-store");

        // HEAD is answered as the GET is, without the page (RFC 9110 9.3.2); PUT names both.
        const query = new URLSearchParams(request(web, "https://app.example.com/cb", challenge));
        const head = await fetch(`${as.authorization_endpoint}?${query}`, {
          method: "HEAD",
          headers: { cookie: `session=${userToken}` },
        });
        assert.equal(head.status, 200);
        assert.equal(await head.text(), "");
        assert.equal(head.headers.get("content-type"), page.headers.get("content-type"));
        assert.ok(Number(head.headers.get("content-length")) > 1000);
        assert.match(head.headers.get("content-security-policy") ?? "", /frame-ancestors 'none'/);
        const put = await fetch(as.authorization_endpoint!, { method: "PUT" });
        assert.equal(put.status, 405);
        assert.equal(put.headers.get("allow"), "GET, HEAD, POST");
        assert.equal((await put.json()).error.code, "unimplemented");

        const back = await decide(consentFormFields(html), "allow");
        assert.equal(back.status, 303);
        const location = new URL(back.headers.get("location")!);
        assert.equal(location.origin + location.pathname, "https://app.example.com/cb");
        assert.equal(location.searchParams.get("state"), "st-123");
        assert.equal(location.searchParams.get("iss"), stack.gatewayUrl);
        const params = oauth.validateAuthResponse(as, { client_id: web }, location, "st-123");
        webParams = params;
        webCode = params.get("code")!;
        webCodeVerifier = verifier;
        assert.match(webCode, /^oac_[A-Za-z0-9_-]{43}$/);
        const res = await oauth.authorizationCodeGrantRequest(
          as,
          { client_id: web },
          oauth.ClientSecretBasic(webSecret),
          params,
          "https://app.example.com/cb",
          verifier,
          insecure,
        );
        assert.equal(res.headers.get("cache-control"), "no-store");
        webTokens = await oauth.processAuthorizationCodeResponse(as, { client_id: web }, res);
        assert.equal(webTokens.token_type, "bearer");
        assert.equal(webTokens.scope, "photos.read albums.write");
        assert.match(webTokens.refresh_token ?? "", /^ort_[A-Za-z0-9_-]{43}$/);

        // The consent is the installation, in the user's account, as POST /v1/installations makes it.
        const installations = await call("GET", "/v1/installations", undefined, userToken);
        const [installation] = installations.body.data;
        assert.equal(installations.body.data.length, 1);
        assert.equal(installation.project_id, "ap1");
        assert.equal(installation.status, "active");
        assert.deepEqual(installation.scopes, ["photos.read", "albums.write"]);
        const claims = await oauth.validateJwtAccessToken(
          as,
          new Request("https://api.example.com/", {
            headers: { authorization: `Bearer ${webTokens.access_token}` },
          }),
          "ap1",
          insecure,
        );
        assert.equal(claims.sub, installation.principal_id);
        assert.equal(claims.client_id, web);
        assert.equal(claims.account_id, "acct-1");
        assert.equal(claims.installation_id, installation.id);
        assert.equal(claims.scope, "photos.read albums.write");
        const seen = await introspect(webTokens.access_token);
        assert.equal(seen.active, true);
        assert.equal(seen.installation_id, installation.id);
        assert.equal(seen.account_id, "acct-1");
      },
    );

    await t.step("a code works once; the second use revokes what the first issued", async () => {
      const again = await oauth.authorizationCodeGrantRequest(
        as,
        { client_id: web },
        oauth.ClientSecretBasic(webSecret),
        webParams,
        "https://app.example.com/cb",
        webCodeVerifier,
        insecure,
      );
      assert.equal(await tokenError(again), "400 invalid_grant");
      // The gateway answered the token active from memory above; the revocation made at the token
      // endpoint reaches it through Postgres, within the promised time.
      await propagated();
      assert.equal((await introspect(webTokens.access_token)).active, false);
      const refresh = await oauth.refreshTokenGrantRequest(
        as,
        { client_id: web },
        oauth.ClientSecretBasic(webSecret),
        webTokens.refresh_token!,
        insecure,
      );
      assert.equal(await tokenError(refresh), "400 invalid_grant");
    });

    await t.step("a code is bound to its client, redirect URI and verifier", async () => {
      for (
        const [what, client, auth, redirect, verifierOf] of [
          ["another client", spa, oauth.None(), "https://app.example.com/cb", (v: string) => v],
          [
            "another redirect URI",
            web,
            oauth.ClientSecretBasic(webSecret),
            "https://app.example.com/other?x=1",
            (v: string) => v,
          ],
          [
            "another verifier",
            web,
            oauth.ClientSecretBasic(webSecret),
            "https://app.example.com/cb",
            () => oauth.generateRandomCodeVerifier(),
          ],
        ] as const
      ) {
        const { verifier, challenge } = await pkce();
        const location = await consent(request(web, "https://app.example.com/cb", challenge));
        const res = await oauth.authorizationCodeGrantRequest(
          as,
          { client_id: client },
          auth,
          oauth.validateAuthResponse(as, { client_id: web }, location, "st-123"),
          redirect,
          verifierOf(verifier),
          insecure,
        );
        assert.equal(await tokenError(res), "400 invalid_grant", what);
      }
    });

    let spaTokens!: oauth.TokenEndpointResponse;
    await t.step("a public client: PKCE without a secret, then refresh with rotation", async () => {
      const { verifier, challenge } = await pkce();
      const location = await consent(request(spa, "https://spa.example.com/cb", challenge, {
        scope: "photos.read",
      }));
      spaTokens = await oauth.processAuthorizationCodeResponse(
        as,
        { client_id: spa },
        await oauth.authorizationCodeGrantRequest(
          as,
          { client_id: spa },
          oauth.None(),
          oauth.validateAuthResponse(as, { client_id: spa }, location, "st-123"),
          "https://spa.example.com/cb",
          verifier,
          insecure,
        ),
      );
      const first = spaTokens.refresh_token!;
      const rotated = await oauth.processRefreshTokenResponse(
        as,
        { client_id: spa },
        await oauth.refreshTokenGrantRequest(as, { client_id: spa }, oauth.None(), first, insecure),
      );
      assert.notEqual(rotated.refresh_token, first);
      assert.equal(rotated.scope, "photos.read");
      assert.equal((await introspect(rotated.access_token)).active, true);
      // The spent one again: the whole family goes, the new tokens included.
      const reuse = await oauth.refreshTokenGrantRequest(
        as,
        { client_id: spa },
        oauth.None(),
        first,
        insecure,
      );
      assert.equal(await tokenError(reuse), "400 invalid_grant");
      await propagated(); // as above: the gateway kept the answer of the line before
      assert.equal((await introspect(rotated.access_token)).active, false);
      const next = await oauth.refreshTokenGrantRequest(
        as,
        { client_id: spa },
        oauth.None(),
        rotated.refresh_token!,
        insecure,
      );
      assert.equal(await tokenError(next), "400 invalid_grant");
    });

    await t.step(
      "a public client cannot use client_credentials; a confidential one needs its secret",
      async () => {
        const res = await oauth.clientCredentialsGrantRequest(
          as,
          { client_id: spa },
          oauth.None(),
          new URLSearchParams(),
          insecure,
        );
        assert.equal(await tokenError(res), "400 unauthorized_client");
        const noSecret = await oauth.refreshTokenGrantRequest(
          as,
          { client_id: web },
          oauth.None(),
          "ort_" + "a".repeat(43),
          insecure,
        );
        assert.equal(await tokenError(noSecret), "401 invalid_client");
      },
    );

    await t.step("a native app's loopback redirect may use any port", async () => {
      const { verifier, challenge } = await pkce();
      const location = await consent(
        request(native, "http://127.0.0.1:51234/callback", challenge),
      );
      assert.equal(location.origin, "http://127.0.0.1:51234");
      const tokens = await oauth.processAuthorizationCodeResponse(
        as,
        { client_id: native },
        await oauth.authorizationCodeGrantRequest(
          as,
          { client_id: native },
          oauth.None(),
          oauth.validateAuthResponse(as, { client_id: native }, location, "st-123"),
          "http://127.0.0.1:51234/callback",
          verifier,
          insecure,
        ),
      );
      assert.ok(tokens.access_token);
      const scheme = await consent(request(native, "com.example.app:/cb", challenge));
      assert.equal(scheme.protocol, "com.example.app:");
      assert.ok(scheme.searchParams.get("code"));
    });

    await t.step(
      "what is wrong before the client is known is shown, never redirected",
      async () => {
        const { challenge } = await pkce();
        for (
          const [what, params] of [
            ["an unregistered redirect URI", request(web, "https://evil.example/cb", challenge)],
            [
              "a redirect URI differing in a letter",
              request(web, "https://app.example.com/cB", challenge),
            ],
            [
              "an unknown client",
              request("cli_00000000000000000000000000", "https://app.example.com/cb", challenge),
            ],
            ["no client_id", {
              ...request(web, "https://app.example.com/cb", challenge),
              client_id: "",
            }],
            ["no redirect_uri for a client with two", { ...request(web, "", challenge) }],
            [
              "a state too long to send back (an error redirect must carry it)",
              { ...request(web, "https://app.example.com/cb", challenge), state: "s".repeat(2049) },
            ],
          ] as const
        ) {
          const res = await authorizeGet(
            Object.fromEntries(Object.entries(params).filter(([, v]) => v !== "")),
          );
          assert.equal(res.status, 400, what);
          assert.equal(res.headers.get("location"), null, what);
          assert.match(await res.text(), /cannot be completed/, what);
        }
        const twice = await fetch(
          `${as.authorization_endpoint}?client_id=${web}&client_id=${spa}&response_type=code`,
          { redirect: "manual", headers: { cookie: `session=${userToken}` } },
        );
        assert.equal(twice.status, 400);
        assert.equal(twice.headers.get("location"), null);
        await twice.body?.cancel();
      },
    );

    await t.step("other faults go back to the client with the error, state and iss", async () => {
      const { challenge } = await pkce();
      const base = request(web, "https://app.example.com/cb", challenge);
      for (
        const [what, params, error] of [
          [
            "no challenge",
            { ...base, code_challenge: "", code_challenge_method: "" },
            "invalid_request",
          ],
          ["plain", { ...base, code_challenge_method: "plain" }, "invalid_request"],
          [
            "a challenge without its method (plain)",
            { ...base, code_challenge_method: "" },
            "invalid_request",
          ],
          ["response_type token", { ...base, response_type: "token" }, "unsupported_response_type"],
          ["response_mode fragment", { ...base, response_mode: "fragment" }, "invalid_request"],
          ["response_mode form_post", { ...base, response_mode: "form_post" }, "invalid_request"],
          [
            "a request object (RFC 9101)",
            { ...base, request: "eyJhbGciOiJub25lIn0.eyJzY29wZSI6IndyaXRlIn0." },
            "request_not_supported",
          ],
          [
            "a challenge S256 cannot make (128 characters)",
            { ...base, code_challenge: "A".repeat(128) },
            "invalid_request",
          ],
          [
            "a challenge S256 cannot make ('~' and '.')",
            { ...base, code_challenge: "~.~." + "A".repeat(39) },
            "invalid_request",
          ],
          ["a bad scope", { ...base, scope: 'a"b' }, "invalid_scope"],
        ] as const
      ) {
        const res = await authorizeGet(
          Object.fromEntries(Object.entries(params).filter(([, v]) => v !== "")),
        );
        assert.equal(res.status, 302, what);
        const to = new URL(res.headers.get("location")!);
        assert.equal(to.origin + to.pathname, "https://app.example.com/cb", what);
        assert.equal(to.searchParams.get("error"), error, what);
        assert.equal(to.searchParams.get("state"), "st-123", what);
        assert.equal(to.searchParams.get("iss"), stack.gatewayUrl, what);
        assert.throws(() => oauth.validateAuthResponse(as, { client_id: web }, to, "st-123"));
      }
      // A control character in state (RFC 6749 A.5: printable characters only), which the consent
      // page's form cannot carry back as it came (a browser posts a line break as CR LF): refused at
      // once, the state sent back as received, never a page whose Allow could not be decided. The
      // C1 controls (NEL, CSI) are control characters too.
      for (const state of ["st\n123", "st\r123", "st\u0000123", "st\u0085123", "st\u009b123"]) {
        const res = await authorizeGet({ ...base, state });
        assert.equal(res.status, 302, JSON.stringify(state));
        const to = new URL(res.headers.get("location")!);
        assert.equal(to.searchParams.get("error"), "invalid_request", JSON.stringify(state));
        assert.equal(to.searchParams.get("state"), state);
        assert.equal(to.searchParams.get("iss"), stack.gatewayUrl);
      }
      // `query`, the one mode there is, may be named.
      const query = await authorizeGet({ ...base, response_mode: "query" });
      assert.equal(query.status, 200);
      assert.match(await query.text(), /<form/);
    });

    await t.step("Deny sends the client access_denied", async () => {
      const { challenge } = await pkce();
      const page = await authorizeGet(request(web, "https://app.example.com/cb", challenge));
      const back = await decide(consentFormFields(await page.text()), "deny");
      assert.equal(back.status, 303);
      const to = new URL(back.headers.get("location")!);
      assert.equal(to.searchParams.get("error"), "access_denied");
      assert.equal(to.searchParams.get("state"), "st-123");
      assert.equal(to.searchParams.get("iss"), stack.gatewayUrl);
      assert.equal(to.searchParams.get("code"), null);
    });

    await t.step("the form is bound to the session that saw the page (CSRF)", async () => {
      const { challenge } = await pkce();
      const page = await authorizeGet(request(web, "https://app.example.com/cb", challenge));
      const fields = consentFormFields(await page.text());
      const forged = await decide({ ...fields, csrf_token: "1.x" }, "allow");
      assert.equal(forged.status, 400);
      assert.equal(forged.headers.get("location"), null);
      await forged.body?.cancel();
      const otherSession = await decide(fields, "allow", otherUserToken);
      assert.equal(otherSession.status, 400);
      await otherSession.body?.cancel();
      const changed = await decide({ ...fields, scope: "photos.read admin" }, "allow");
      assert.equal(changed.status, 400);
      await changed.body?.cancel();
    });

    await t.step(
      "a page sent to the client's one redirect URI is stale once the URI changes",
      async () => {
        const single = await newClient("ap1", {
          name: "single",
          type: "web",
          redirect_uris: ["https://one.example.com/cb"],
        });
        const { challenge } = await pkce();
        // No redirect_uri: the client's one registered URI is the one the page names.
        const { redirect_uri: _, ...params } = request(single, "", challenge);
        const page = await authorizeGet(params);
        const html = await page.text();
        assert.equal(page.status, 200, html);
        assert.match(page.headers.get("content-security-policy")!, /one\.example\.com/);
        const moved = await call("PATCH", `/v1/projects/ap1/clients/${single}`, {
          redirect_uris: ["https://two.example.com/cb"],
        });
        assert.equal(moved.status, 200, moved.text);
        await propagated();
        // The form of the page that named the old URI sends no code to the new one.
        const back = await decide(consentFormFields(html), "allow");
        assert.equal(back.status, 400, await back.clone().text());
        assert.equal(back.headers.get("location"), null);
        await back.body?.cancel();
        // A page of the new registration works.
        const location = await consent(params);
        assert.equal(location.origin, "https://two.example.com");
        assert.ok(location.searchParams.get("code"));
      },
    );

    await t.step("a consent page is answered once: its form replayed gets a page", async () => {
      const { challenge } = await pkce();
      const page = await authorizeGet(request(web, "https://app.example.com/cb", challenge));
      const fields = consentFormFields(await page.text());
      const allowed = await decide(fields, "allow");
      assert.equal(allowed.status, 303);
      assert.ok(new URL(allowed.headers.get("location")!).searchParams.get("code"));
      // The same form again, Allow (a second code) or Deny (Back, then Deny): refused, no redirect.
      for (const decision of ["allow", "deny"] as const) {
        const again = await decide(fields, decision);
        assert.equal(again.status, 400, decision);
        assert.equal(again.headers.get("location"), null, decision);
        assert.match(await again.text(), /answered already/, decision);
      }
      // A page of its own is answered as any other.
      const next = await authorizeGet(request(web, "https://app.example.com/cb", challenge));
      await next.body?.cancel();
      assert.ok(next.status === 200 || next.status === 302, `${next.status}`);
    });

    await t.step("no session: the request is checked, then a page says to sign in", async () => {
      const { challenge } = await pkce();
      const none = await authorizeGet(request(web, "https://app.example.com/cb", challenge), "");
      assert.equal(none.status, 401);
      assert.match(await none.text(), /Sign in first/);
      const bad = await authorizeGet(
        request(web, "https://app.example.com/cb", challenge),
        "not-a-token",
      );
      assert.equal(bad.status, 401);
      await bad.body?.cancel();
      // Checked before anyone signs in: an unregistered redirect URI or an unknown client is the
      // error page, never redirected; a faulty request of a good client goes back to it only once
      // the user has signed in (RFC 9700 4.11.2: no open redirector for anonymous browsers).
      const refusals: [string, string][] = [
        [web, "https://evil.example/cb"],
        ["cli_unknown", "https://app.example.com/cb"],
      ];
      for (const [client, redirect] of refusals) {
        const refused = await authorizeGet(request(client, redirect, challenge), "");
        assert.equal(refused.status, 400, `${client} ${redirect}`);
        assert.equal(refused.headers.get("location"), null);
        assert.match(await refused.text(), /cannot be completed/);
      }
      const implicit = request(web, "https://app.example.com/cb", challenge, {
        response_type: "token",
      });
      const anonymous = await authorizeGet(implicit, "");
      assert.equal(anonymous.status, 401);
      assert.equal(anonymous.headers.get("location"), null);
      assert.match(await anonymous.text(), /Sign in first/);
      const signedIn = await authorizeGet(implicit);
      assert.equal(signedIn.status, 302);
      const back = new URL(signedIn.headers.get("location")!);
      assert.equal(back.origin + back.pathname, "https://app.example.com/cb");
      assert.equal(back.searchParams.get("error"), "unsupported_response_type");
      assert.equal(back.searchParams.get("state"), "st-123");
      // Silent authentication asks for no sign-in: its answer goes back at once.
      const silent = await authorizeGet({ ...implicit, prompt: "none" }, "");
      assert.equal(silent.status, 302);
      const told = new URL(silent.headers.get("location")!);
      assert.equal(told.origin + told.pathname, "https://app.example.com/cb");
      assert.equal(told.searchParams.get("state"), "st-123");
    });

    await t.step("an internal project takes consent only from its own users", async () => {
      const { challenge } = await pkce();
      const res = await authorizeGet(
        request(internal, "https://internal.example.com/cb", challenge),
      );
      assert.equal(res.status, 302);
      const to = new URL(res.headers.get("location")!);
      assert.equal(to.searchParams.get("error"), "access_denied");
      const member = await stack.token({ sub: "user-3", projects: ["ap2"] });
      const location = await consent(
        request(internal, "https://internal.example.com/cb", challenge),
        member,
      );
      assert.ok(location.searchParams.get("code"));
    });

    let exchangeInstallation = "";
    await t.step("token exchange: a client's own token for an installation's", async () => {
      const own = await oauth.processClientCredentialsResponse(
        as,
        { client_id: web },
        await oauth.clientCredentialsGrantRequest(
          as,
          { client_id: web },
          oauth.ClientSecretBasic(webSecret),
          new URLSearchParams(),
          insecure,
        ),
      );
      const installations = await call("GET", "/v1/installations", undefined, userToken);
      const installation = installations.body.data.find((i: { project_id: string }) =>
        i.project_id === "ap1"
      );
      exchangeInstallation = installation.id;
      const res = await oauth.genericTokenEndpointRequest(
        as,
        { client_id: web },
        oauth.ClientSecretBasic(webSecret),
        exchangeGrant,
        {
          subject_token: own.access_token,
          subject_token_type: accessTokenType,
          audience: installation.id,
          scope: "photos.read",
        },
        insecure,
      );
      const body = await res.clone().json();
      assert.equal(res.status, 200, JSON.stringify(body));
      assert.equal(body.issued_token_type, accessTokenType);
      assert.equal(body.refresh_token, undefined);
      const exchanged = await oauth.processGenericTokenEndpointResponse(
        as,
        { client_id: web },
        res,
      );
      const claims = await oauth.validateJwtAccessToken(
        as,
        new Request("https://api.example.com/", {
          headers: { authorization: `Bearer ${exchanged.access_token}` },
        }),
        "ap1",
        insecure,
      );
      assert.equal(claims.sub, installation.principal_id);
      assert.deepEqual(claims.act, { sub: web });
      assert.equal(claims.installation_id, installation.id);
      assert.equal(claims.scope, "photos.read");
      const seen = await introspect(exchanged.access_token);
      assert.deepEqual(seen.act, { sub: web });

      const refused = async (
        params: Record<string, string>,
        auth = oauth.ClientSecretBasic(webSecret),
        client = web,
      ) =>
        await tokenError(
          await oauth.genericTokenEndpointRequest(as, { client_id: client }, auth, exchangeGrant, {
            subject_token: own.access_token,
            subject_token_type: accessTokenType,
            audience: installation.id,
            ...params,
          }, insecure),
        );
      assert.equal(
        await refused({ audience: "ins_00000000000000000000000000" }),
        "400 invalid_target",
      );
      // RFC 8693 2.2.2: an unacceptable subject token is invalid_request (not invalid_grant).
      assert.equal(await refused({ subject_token: exchanged.access_token }), "400 invalid_request");
      assert.equal(await refused({ subject_token: "not-a-token" }), "400 invalid_request");
      assert.equal(await refused({ subject_token_type: "urn:x" }), "400 invalid_request");
      assert.equal(await refused({ scope: "admin" }), "400 invalid_scope");
      assert.equal(await refused({}, oauth.None(), spa), "400 unauthorized_client");
    });

    await t.step(
      "revoking the installation makes its tokens inactive and its refresh fail",
      async () => {
        const tokens = await codeFlow(
          web,
          oauth.ClientSecretBasic(webSecret),
          "https://app.example.com/cb",
        );
        assert.equal((await introspect(tokens.access_token)).active, true);
        const revoked = await call(
          "DELETE",
          `/v1/installations/${exchangeInstallation}`,
          undefined,
          userToken,
        );
        assert.equal(revoked.status, 204, revoked.text);
        await propagated(); // the token service keeps installations in memory
        assert.equal((await introspect(tokens.access_token)).active, false);
        const refresh = await oauth.refreshTokenGrantRequest(
          as,
          { client_id: web },
          oauth.ClientSecretBasic(webSecret),
          tokens.refresh_token!,
          insecure,
        );
        assert.equal(await tokenError(refresh), "400 invalid_grant");
      },
    );

    await t.step("revoking a refresh token (RFC 7009) revokes its grant", async () => {
      const tokens = await codeFlow(spa, oauth.None(), "https://spa.example.com/cb");
      assert.equal((await introspect(tokens.refresh_token!)).active, true);
      await oauth.processRevocationResponse(
        await oauth.revocationRequest(
          as,
          { client_id: spa },
          oauth.None(),
          tokens.refresh_token!,
          insecure,
        ),
      );
      assert.equal((await introspect(tokens.access_token)).active, false);
      assert.equal((await introspect(tokens.refresh_token!)).active, false);
    });

    await t.step("nothing a client or a browser sends makes a 5xx", async () => {
      const basic = `Basic ${btoa(`${web}:${webSecret}`)}`;
      const form = (body: BodyInit, headers: Record<string, string> = {}) => ({
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
        body,
      });
      const big = "x".repeat(10_000);
      const cases: [string, RequestInit][] = [
        ["/oauth2/token", form(new Uint8Array([0x67, 0x3d, 0xff, 0xfe]), { authorization: basic })],
        [
          "/oauth2/token",
          form(`grant_type=authorization_code&code=${big}&code_verifier=${big}`, {
            authorization: basic,
          }),
        ],
        [
          "/oauth2/token",
          form(`grant_type=refresh_token&refresh_token=ort_${big}`, { authorization: basic }),
        ],
        [
          "/oauth2/token",
          form(`grant_type=refresh_token&refresh_token=%00%01`, { authorization: basic }),
        ],
        [
          "/oauth2/token",
          form(
            `grant_type=${exchangeGrant}&subject_token=${big}&subject_token_type=${accessTokenType}&audience=../..`,
            { authorization: basic },
          ),
        ],
        [
          "/oauth2/token",
          form(
            `grant_type=${exchangeGrant}&subject_token=a.b.c&subject_token_type=${accessTokenType}&audience=ins_${
              "0".repeat(26)
            }&actor_token=x`,
            { authorization: basic },
          ),
        ],
        ["/oauth2/token", form("grant_type=client_credentials", { authorization: "Basic !!!" })],
        [
          "/oauth2/token",
          form("grant_type=client_credentials", { authorization: `Basic ${btoa("\xff\xfe:")}` }),
        ],
        [
          "/oauth2/token",
          form(Array.from({ length: 1000 }, (_, i) => `p${i}=${i}`).join("&"), {
            authorization: basic,
          }),
        ],
        ["/oauth2/token", form("x".repeat(20_000), { authorization: basic })],
        ["/oauth2/token", {
          method: "POST",
          headers: { "content-type": "multipart/form-data; boundary=x", authorization: basic },
          body: "--x--",
        }],
        ["/oauth2/introspect", form(`token=${big}`, { authorization: basic })],
        ["/oauth2/introspect", form("token=eyJhbGciOiJub25lIn0.e30.", { authorization: basic })],
        ["/oauth2/revoke", form(`token=ort_${"a".repeat(43)}`, { authorization: basic })],
        ["/oauth2/revoke", form(`token=${big}&token_type_hint=${big}`)],
      ];
      for (const [path, init] of cases) {
        const res = await fetch(`${stack.gatewayUrl}${path}`, init);
        const text = await res.text();
        const where = `${path}: ${res.status} ${text.slice(0, 200)}`;
        assert.ok(res.status < 500, where);
        // Junk to introspect is inactive and junk to revoke is nothing (200); the rest is refused.
        if (res.status >= 400) assert.equal(typeof JSON.parse(text).error, "string", where);
        else assert.ok(path !== "/oauth2/token", where);
      }
      const { challenge } = await pkce();
      const pages: [Record<string, string>, string][] = [
        [request("x".repeat(10_000), "https://app.example.com/cb", challenge), userToken],
        [request(web, "javascript:alert(1)", challenge), userToken],
        [
          request(web, "https://app.example.com/cb", challenge, { state: "\u0000\u2603\ud800" }),
          userToken,
        ],
        [request(web, "https://app.example.com/cb", "\u2603".repeat(50)), userToken],
        [
          request(web, "https://app.example.com/cb", challenge, {
            scope: Array.from({ length: 200 }, (_, i) => `s${i}`).join(" "),
          }),
          userToken,
        ],
        [request(web, "https://app.example.com/cb", challenge), "x".repeat(9000)],
        [request(web, "https://app.example.com/cb", challenge), "eyJhbGciOiJub25lIn0.e30."],
      ];
      for (const [params, cookie] of pages) {
        const res = await authorizeGet(params, cookie);
        await res.body?.cancel();
        assert.ok(res.status < 500, `authorize: ${res.status}`);
      }
      for (
        const body of [
          "decision=allow",
          "decision=allow&csrf_token=" + big,
          `decision=maybe&client_id=${web}&redirect_uri=https://app.example.com/cb`,
          new Uint8Array([0xff, 0x00, 0x3d]),
        ]
      ) {
        const res = await fetch(as.authorization_endpoint!, {
          ...form(body, { cookie: `session=${userToken}` }),
          redirect: "manual",
        });
        await res.body?.cancel();
        assert.ok(res.status < 500, `authorize POST: ${res.status}`);
        // Only to the client's registered URI, when one is named (an error of the request).
        const to = res.headers.get("location");
        if (to !== null) assert.ok(to.startsWith("https://app.example.com/cb?error="), to);
      }
    });

    await t.step(
      "a suspended client's installation tokens are inactive; it cannot refresh",
      async () => {
        const tokens = await codeFlow(native, oauth.None(), "com.example.app:/cb");
        assert.equal((await introspect(tokens.access_token)).active, true);
        const suspended = await call("PATCH", `/v1/projects/ap1/clients/${native}`, {
          status: "suspended",
        });
        assert.equal(suspended.status, 200, suspended.text);
        await propagated();
        assert.equal((await introspect(tokens.access_token)).active, false);
        const refresh = await oauth.refreshTokenGrantRequest(
          as,
          { client_id: native },
          oauth.None(),
          tokens.refresh_token!,
          insecure,
        );
        assert.equal(await tokenError(refresh), "401 invalid_client");
        const { challenge } = await pkce();
        const page = await authorizeGet(request(native, "com.example.app:/cb", challenge));
        assert.equal(page.status, 400);
        assert.equal(page.headers.get("location"), null);
        await page.body?.cancel();
      },
    );
  } finally {
    await stack.stop();
  }
});
