/**
 * The authorization server's edges, probed as an attacker would, end to end: real gateway,
 * oauth-registry and token-service processes on a real Postgres, a stock OAuth client
 * (oauth4webapi) where it sends what is tested, raw HTTP where it would not.
 *
 * - CORS: which browser origins may read the token and revocation endpoints' answers (the
 *   browser's own view: tests/spa_browser_test.ts);
 * - a native app's loopback redirect URI: only the port may differ from the registered one;
 * - a refused refresh or code redemption spends nothing;
 * - `error_description` stays within RFC 6749's characters and never quotes the request;
 * - branding is what it says: a plain support address, https links without userinfo.
 */

import assert from "node:assert/strict";
import * as oauth from "oauth4webapi";
import postgres from "postgres";
import { consentFormFields, httpClient, propagated, startStack } from "../lib/testing/mod.ts";

const insecure = { [oauth.allowInsecureRequests]: true };

/** RFC 6749 4.1.2.1 and 5.2: the characters an error_description may hold. */
const descriptionChars = /^[\x20\x21\x23-\x5B\x5D-\x7E]*$/;

Deno.test("the token service's edges: CORS, loopback redirects, refusals that spend nothing, error text, branding", async (t) => {
  const stack = await startStack();
  const api = httpClient(stack.gatewayUrl);
  const adminToken = await stack.token({ sub: "admin", projects: ["ep1", "ep2"] });
  const userToken = await stack.token({ sub: "user-e", accountId: "acct-e", projects: [] });
  const call = (method: string, path: string, json?: unknown) =>
    api(method, path, { token: adminToken, ...(json !== undefined ? { json } : {}) });
  const gateway = stack.gatewayUrl;
  try {
    for (const project of ["ep1", "ep2"]) {
      const res = await call("PATCH", `/v1/projects/${project}/config`, {
        application_name: `App ${project}`,
        audience: "external",
      });
      assert.equal(res.status, 200, res.text);
    }
    const newClient = async (project: string, json: Record<string, unknown>) => {
      const res = await call("POST", `/v1/projects/${project}/clients`, json);
      assert.equal(res.status, 201, res.text);
      return res.body.id as string;
    };
    const withSecret = async (project: string, name: string) => {
      const id = await newClient(project, {
        name,
        type: "web",
        redirect_uris: ["https://web.example/cb"],
      });
      const created = await call("POST", `/v1/projects/${project}/clients/${id}/secrets`);
      assert.equal(created.status, 201, created.text);
      const secret = created.body.secret as string;
      return { id, secret, auth: oauth.ClientSecretBasic(secret) };
    };
    const native = await newClient("ep1", {
      name: "native",
      type: "native",
      redirect_uris: ["http://127.0.0.1/cb", "http://[::1]/cb", "http://127.0.0.1:8080/fixed"],
    });
    const spa = await newClient("ep1", {
      name: "spa",
      type: "spa",
      redirect_uris: ["http://localhost:5173/cb"],
      javascript_origins: ["http://localhost:5173", "https://App.Example.com:443"],
    });
    const spaTwo = await newClient("ep1", {
      name: "spa two",
      type: "spa",
      redirect_uris: ["https://two.example/cb"],
    });
    const far = await newClient("ep2", {
      name: "far spa",
      type: "spa",
      redirect_uris: ["https://far.example/cb"],
      javascript_origins: ["https://far.example"],
    });
    const web = await withSecret("ep1", "web");
    const farWeb = await withSecret("ep2", "far web");

    const as = await oauth.processDiscoveryResponse(
      new URL(gateway),
      await oauth.discoveryRequest(new URL(gateway), { algorithm: "oauth2", ...insecure }),
    );
    const authorizeGet = (params: Record<string, string>) =>
      fetch(`${as.authorization_endpoint}?${new URLSearchParams(params)}`, {
        redirect: "manual",
        headers: { cookie: `session=${userToken}` },
      });
    const request = (client: string, redirect: string, challenge: string, scope = "a b") => ({
      response_type: "code",
      client_id: client,
      redirect_uri: redirect,
      scope,
      state: "st-e",
      code_challenge: challenge,
      code_challenge_method: "S256",
      // The page every time, even when the user's consent is remembered.
      prompt: "consent",
    });
    /** The page and Allow; the URL the browser is sent back to, and the verifier. */
    const allow = async (client: string, redirect: string, scope = "a b") => {
      const verifier = oauth.generateRandomCodeVerifier();
      const challenge = await oauth.calculatePKCECodeChallenge(verifier);
      const page = await authorizeGet(request(client, redirect, challenge, scope));
      const html = await page.text();
      assert.equal(page.status, 200, html);
      const back = await fetch(as.authorization_endpoint!, {
        method: "POST",
        redirect: "manual",
        headers: {
          cookie: `session=${userToken}`,
          "content-type": "application/x-www-form-urlencoded",
        },
        body: new URLSearchParams({ ...consentFormFields(html), decision: "allow" }),
      });
      assert.equal(back.status, 303, await back.text());
      const location = new URL(back.headers.get("location")!);
      return {
        location,
        verifier,
        params: oauth.validateAuthResponse(as, { client_id: client }, location, "st-e"),
      };
    };
    const redeem = (
      client: string,
      auth: oauth.ClientAuth,
      granted: { params: URLSearchParams; verifier: string },
      redirect: string,
    ) =>
      oauth.authorizationCodeGrantRequest(
        as,
        { client_id: client },
        auth,
        granted.params,
        redirect,
        granted.verifier,
        insecure,
      );
    const refresh = (client: string, auth: oauth.ClientAuth, token: string, scope?: string) =>
      oauth.refreshTokenGrantRequest(as, { client_id: client }, auth, token, {
        ...insecure,
        ...(scope !== undefined ? { additionalParameters: { scope } } : {}),
      });
    const introspect = async (token: string) =>
      await oauth.processIntrospectionResponse(
        as,
        { client_id: web.id },
        await oauth.introspectionRequest(as, { client_id: web.id }, web.auth, token, insecure),
      );
    /** `status error`, and the description checked against RFC 6749's characters. */
    const oauthError = async (res: Response) => {
      const body = await res.json();
      assert.match(body.error_description, descriptionChars, JSON.stringify(body));
      return `${res.status} ${body.error}`;
    };

    await t.step(
      "a native app's loopback redirect URI differs from the registered one only in its port",
      async () => {
        const challenge = await oauth.calculatePKCECodeChallenge(
          oauth.generateRandomCodeVerifier(),
        );
        for (
          const accepted of [
            "http://127.0.0.1:53123/cb",
            "http://127.0.0.1/cb",
            "http://127.0.0.1:1/cb",
            "http://127.0.0.1:65535/cb",
            "http://[::1]:53123/cb",
            "http://127.0.0.1:9/fixed",
            "http://127.0.0.1:8080/fixed",
            "http://127.0.0.1/fixed",
          ]
        ) {
          const res = await authorizeGet(request(native, accepted, challenge));
          assert.equal(res.status, 200, `${accepted}: ${await res.text()}`);
        }
        for (
          const refused of [
            "http://evil@127.0.0.1:53123/cb",
            "http://user:pass@127.0.0.1:53123/cb",
            "http://127.1:53123/cb",
            "http://2130706433:53123/cb",
            "http://0x7f.0.0.1:53123/cb",
            "http://127.0.0.01:53123/cb",
            "http://127.0.0.1:53123/x/../cb",
            "http://127.0.0.1:53123/./cb",
            "http://127.0.0.1:53123/cb?",
            "http://127.0.0.1:53123/cb#",
            "http://127.0.0.1:53123/cb/",
            "http://127.0.0.1:53123/CB",
            "http://127.0.0.1:53123/%63b",
            "http://127.0.0.1:53123//cb",
            "http://127.0.0.1:/cb",
            "http://127.0.0.1:0/cb",
            "http://127.0.0.1:65536/cb",
            "http://127.0.0.1:123456/cb",
            "http://127.0.0.1:1:2/cb",
            "HTTP://127.0.0.1:53123/cb",
            "https://127.0.0.1:53123/cb",
            "http://localhost:53123/cb",
            "http://[::1]:53123/cb?",
            "http://[0:0:0:0:0:0:0:1]:53123/cb",
            "http://[::ffff:127.0.0.1]:53123/cb",
            "http://[::1]:53123/cb#",
          ]
        ) {
          const res = await authorizeGet(request(native, refused, challenge));
          assert.equal(res.status, 400, refused);
          assert.equal(res.headers.get("location"), null, refused);
          assert.match(await res.text(), /cannot be completed/, refused);
        }
        // The answer goes to the port asked for, and the code redeems only with that exact URI.
        const granted = await allow(native, "http://[::1]:53123/cb");
        assert.equal(granted.location.origin + granted.location.pathname, "http://[::1]:53123/cb");
        const otherPort = await redeem(native, oauth.None(), granted, "http://[::1]:53124/cb");
        assert.equal(await oauthError(otherPort), "400 invalid_grant");
        const tokens = await oauth.processAuthorizationCodeResponse(
          as,
          { client_id: native },
          await redeem(native, oauth.None(), granted, "http://[::1]:53123/cb"),
        );
        assert.ok(tokens.access_token);
      },
    );

    await t.step("a refused refresh leaves the refresh token exactly as it was", async () => {
      const granted = await allow(spa, "http://localhost:5173/cb");
      const tokens = await oauth.processAuthorizationCodeResponse(
        as,
        { client_id: spa },
        await redeem(spa, oauth.None(), granted, "http://localhost:5173/cb"),
      );
      const token = tokens.refresh_token!;
      for (
        const [what, attempt, expected] of [
          [
            "another client of the project",
            () => refresh(web.id, web.auth, token),
            "400 invalid_grant",
          ],
          [
            "a client of another project",
            () => refresh(farWeb.id, farWeb.auth, token),
            "400 invalid_grant",
          ],
          [
            "another public client",
            () => refresh(spaTwo, oauth.None(), token),
            "400 invalid_grant",
          ],
          [
            "its own client, a wider scope",
            () => refresh(spa, oauth.None(), token, "a c"),
            "400 invalid_scope",
          ],
          [
            "its own client, a malformed scope",
            () => refresh(spa, oauth.None(), token, "a  b"),
            "400 invalid_scope",
          ],
        ] as const
      ) {
        assert.equal(await oauthError(await attempt()), expected, what);
        const seen = await introspect(token);
        assert.equal(seen.active, true, `${what}: the refresh token is still live`);
        assert.equal(
          (await introspect(tokens.access_token)).active,
          true,
          `${what}: nothing revoked`,
        );
      }
      // The owner's refresh works, narrowed as asked, and rotates.
      const rotated = await oauth.processRefreshTokenResponse(
        as,
        { client_id: spa },
        await refresh(spa, oauth.None(), token, "a"),
      );
      assert.equal(rotated.scope, "a");
      assert.notEqual(rotated.refresh_token, token);
      // Only the access token is narrowed: the new refresh token keeps the grant's scopes (RFC
      // 6749 6), so a later refresh can ask for all of them again.
      assert.notEqual(tokens.scope, "a");
      assert.equal((await introspect(rotated.refresh_token!)).scope, tokens.scope);
      assert.equal((await introspect(tokens.access_token)).active, true);
      // Another client presenting the spent one revokes nothing; its own client doing so does.
      assert.equal(await oauthError(await refresh(web.id, web.auth, token)), "400 invalid_grant");
      assert.equal((await introspect(rotated.access_token)).active, true);
      assert.equal(await oauthError(await refresh(spa, oauth.None(), token)), "400 invalid_grant");
      // The gateway answered the rotated access token active from memory above; a revocation made
      // at the token endpoint reaches it through Postgres, within the promised time.
      await propagated();
      assert.equal((await introspect(rotated.access_token)).active, false);
      assert.equal((await introspect(rotated.refresh_token!)).active, false);
    });

    await t.step(
      "an expired refresh token, revoked or presented again, ends nothing of its live grant",
      async () => {
        const granted = await allow(spa, "http://localhost:5173/cb");
        const tokens = await oauth.processAuthorizationCodeResponse(
          as,
          { client_id: spa },
          await redeem(spa, oauth.None(), granted, "http://localhost:5173/cb"),
        );
        const first = tokens.refresh_token!;
        const rotated = await oauth.processRefreshTokenResponse(
          as,
          { client_id: spa },
          await refresh(spa, oauth.None(), first),
        );
        // The spent one reaches its own expiry (30 days after it was issued) while the grant goes
        // on, renewed by each refresh: its row says so, as a month of refreshes would leave it.
        const sql = postgres(stack.databaseUrl, { max: 1, onnotice: () => {} });
        try {
          const expired = await sql`
            update token.refresh_tokens set expires_at = now() - interval '1 day'
            where token_hash = sha256(convert_to(${first}, 'UTF8'))`;
          assert.equal(expired.count, 1);
        } finally {
          await sql.end();
        }
        const revoked = await oauth.revocationRequest(
          as,
          { client_id: spa },
          oauth.None(),
          first,
          insecure,
        );
        await oauth.processRevocationResponse(revoked);
        assert.equal((await introspect(rotated.access_token)).active, true);
        assert.equal((await introspect(rotated.refresh_token!)).active, true);
        // Presented at the token endpoint, it is expired, not reused: the grant lives on.
        assert.equal(
          await oauthError(await refresh(spa, oauth.None(), first)),
          "400 invalid_grant",
        );
        assert.equal((await introspect(rotated.access_token)).active, true);
        assert.equal((await introspect(rotated.refresh_token!)).active, true);
      },
    );

    await t.step("a refused code redemption leaves the code redeemable by its client", async () => {
      const granted = await allow(spa, "http://localhost:5173/cb");
      const wrongVerifier = { ...granted, verifier: oauth.generateRandomCodeVerifier() };
      for (
        const [what, attempt] of [
          [
            "another client",
            () => redeem(spaTwo, oauth.None(), granted, "http://localhost:5173/cb"),
          ],
          [
            "a client of another project",
            () => redeem(farWeb.id, farWeb.auth, granted, "http://localhost:5173/cb"),
          ],
          [
            "another verifier",
            () => redeem(spa, oauth.None(), wrongVerifier, "http://localhost:5173/cb"),
          ],
          [
            "another redirect URI",
            () => redeem(spa, oauth.None(), granted, "http://localhost:5174/cb"),
          ],
        ] as const
      ) {
        assert.equal(await oauthError(await attempt()), "400 invalid_grant", what);
      }
      const tokens = await oauth.processAuthorizationCodeResponse(
        as,
        { client_id: spa },
        await redeem(spa, oauth.None(), granted, "http://localhost:5173/cb"),
      );
      assert.equal((await introspect(tokens.access_token)).active, true);
      // Replayed by another client: refused, nothing revoked; by its own: everything revoked.
      const byOther = await redeem(spaTwo, oauth.None(), granted, "http://localhost:5173/cb");
      assert.equal(await oauthError(byOther), "400 invalid_grant");
      assert.equal((await introspect(tokens.access_token)).active, true);
      const byOwn = await redeem(spa, oauth.None(), granted, "http://localhost:5173/cb");
      assert.equal(await oauthError(byOwn), "400 invalid_grant");
      // The gateway answered the access token active from memory above; the revocation reaches
      // it through Postgres, within the promised time.
      await propagated();
      assert.equal((await introspect(tokens.access_token)).active, false);
    });

    await t.step(
      "error_description keeps to RFC 6749's characters and quotes no input",
      async () => {
        const post = (path: string, body: string, headers: Record<string, string> = {}) =>
          fetch(`${gateway}${path}`, {
            method: "POST",
            headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
            body,
          });
        const basic = `Basic ${btoa(`${web.id}:${web.secret}`)}`;
        for (
          const [what, res, description] of [
            [
              "a repeated unknown parameter (ignored: the request fails for want of a client)",
              await post(
                "/oauth2/token",
                "x%22%C3%A9%5C=1&x%22%C3%A9%5C=2&grant_type=client_credentials",
              ),
              "Client authentication is required",
            ],
            [
              "a repeated NUL (ignored)",
              await post("/oauth2/token", "%00=1&%00=2"),
              undefined,
            ],
            [
              "a repeated emoji (ignored)",
              await post("/oauth2/revoke", "%F0%9F%98%80=1&%F0%9F%98%80=2&token=t"),
              undefined,
            ],
            [
              "a repeated known parameter",
              await post("/oauth2/token", "grant_type=client_credentials&grant_type=refresh_token"),
              "The parameter grant_type is given more than once",
            ],
            [
              "a hostile grant_type",
              await post(
                "/oauth2/token",
                `client_id=${spa}&grant_type=%22%C3%A9%5C%00%F0%9F%98%80`,
              ),
              undefined,
            ],
            [
              "a hostile scope",
              await post("/oauth2/token", "grant_type=client_credentials&scope=%22%C3%A9%5C%00", {
                authorization: basic,
              }),
              undefined,
            ],
            [
              "a repeated introspection parameter",
              await post("/oauth2/introspect", "token=a&x%22=2&token=b"),
              "The parameter token is given more than once",
            ],
          ] as const
        ) {
          const body = await res.json();
          assert.ok(res.status >= 400 && res.status < 500, `${what}: ${res.status}`);
          assert.match(
            body.error_description,
            descriptionChars,
            `${what}: ${body.error_description}`,
          );
          if (description) assert.equal(body.error_description, description, what);
        }
        // Resource indicators (RFC 8707 2) and a token exchange's audiences (RFC 8693 2.1) may
        // come more than once: a client_credentials grant ignores its resources; an exchange
        // names one installation, so two audiences are a target it cannot issue for.
        const resources = await post(
          "/oauth2/token",
          "grant_type=client_credentials&resource=https%3A%2F%2Fa.example&resource=https%3A%2F%2Fb.example",
          { authorization: basic },
        );
        assert.equal(resources.status, 200, await resources.clone().text());
        await resources.body?.cancel();
        const audiences = await post(
          "/oauth2/token",
          `grant_type=${
            encodeURIComponent("urn:ietf:params:oauth:grant-type:token-exchange")
          }&audience=ins_a&audience=ins_b&subject_token=x`,
          { authorization: basic },
        );
        assert.equal(audiences.status, 400);
        assert.equal((await audiences.json()).error, "invalid_target");
        // A scope that was not granted is refused without being quoted.
        const granted = await allow(spa, "http://localhost:5173/cb");
        const tokens = await oauth.processAuthorizationCodeResponse(
          as,
          { client_id: spa },
          await redeem(spa, oauth.None(), granted, "http://localhost:5173/cb"),
        );
        const wider = await refresh(spa, oauth.None(), tokens.refresh_token!, "a zz-not-granted");
        const body = await wider.json();
        assert.equal(body.error, "invalid_scope");
        assert.ok(!body.error_description.includes("zz-not-granted"), body.error_description);
        // The authorization endpoint's error redirects keep to the same characters.
        const challenge = await oauth.calculatePKCECodeChallenge(
          oauth.generateRandomCodeVerifier(),
        );
        for (
          const params of [
            { ...request(spa, "http://localhost:5173/cb", challenge), scope: 'a"\u00e9\\' },
            {
              ...request(spa, "http://localhost:5173/cb", challenge),
              response_type: 'token"\u00e9',
            },
            {
              ...request(spa, "http://localhost:5173/cb", challenge),
              code_challenge_method: "plain",
            },
          ]
        ) {
          const res = await authorizeGet(params);
          assert.equal(res.status, 302);
          const to = new URL(res.headers.get("location")!);
          assert.ok(to.searchParams.get("error"));
          assert.match(to.searchParams.get("error_description") ?? "", descriptionChars);
        }
        // A repeated state leaves unknown what to answer with: the error page, which names the
        // repeated parameter it knows, and quotes nothing else.
        const twice = await fetch(
          `${as.authorization_endpoint}?x%22%C3%A9=1&x%22%C3%A9=2&state=a&state=b`,
          { headers: { cookie: `session=${userToken}` } },
        );
        assert.equal(twice.status, 400);
        const page = await twice.text();
        assert.match(page, /The parameter state is given more than once/);
        assert.ok(!page.includes("x&quot;") && !page.includes("\u00e9"));
        // Any other goes back to the client, with its state (RFC 6749 4.1.2.1).
        const spaRequest = new URLSearchParams(request(spa, "http://localhost:5173/cb", challenge));
        const rescoped = await fetch(`${as.authorization_endpoint}?${spaRequest}&scope=c`, {
          redirect: "manual",
          headers: { cookie: `session=${userToken}` },
        });
        assert.equal(rescoped.status, 302, await rescoped.clone().text());
        const back = new URL(rescoped.headers.get("location")!);
        assert.equal(back.origin + back.pathname, "http://localhost:5173/cb");
        assert.equal(back.searchParams.get("error"), "invalid_request");
        assert.equal(
          back.searchParams.get("error_description"),
          "The parameter scope is given more than once",
        );
        assert.equal(back.searchParams.get("state"), spaRequest.get("state"));
        // One sent without a value is as if omitted (RFC 6749 3.1): no repeat, in either order.
        for (const query of [`${spaRequest}&state=`, `state=&${spaRequest}`]) {
          const res = await fetch(`${as.authorization_endpoint}?${query}`, {
            redirect: "manual",
            headers: { cookie: `session=${userToken}` },
          });
          const text = await res.text();
          assert.ok(res.status === 200 || res.status === 302, `${res.status} ${query}`);
          assert.ok(!text.includes("given more than once"), query);
        }
        // A repeated parameter no endpoint knows is ignored (RFC 6749 3.2): the grant is made.
        const ignored = await post(
          "/oauth2/token",
          "grant_type=client_credentials&foo=1&foo=2&x%22%C3%A9=1&x%22%C3%A9=2",
          { authorization: basic },
        );
        assert.equal(ignored.status, 200, await ignored.clone().text());
        assert.ok((await ignored.json()).access_token);
      },
    );

    await t.step(
      "the public port's own refusals on a form endpoint answer in RFC 6749's JSON too",
      async () => {
        // Raw TCP: fetch sends no chunked body, and no head this large.
        const { hostname, port } = new URL(gateway);
        const answer = async (head: string) => {
          const conn = await Deno.connect({ hostname, port: Number(port) });
          try {
            await conn.write(new TextEncoder().encode(head));
            let text = "";
            const buffer = new Uint8Array(4096);
            for (;;) {
              const n = await conn.read(buffer).catch(() => null);
              if (n === null) break;
              text += new TextDecoder().decode(buffer.subarray(0, n));
            }
            return {
              status: Number(text.slice(9, 12)),
              head: text.slice(0, text.indexOf("\r\n\r\n")).toLowerCase(),
              body: JSON.parse(text.slice(text.indexOf("\r\n\r\n") + 4)),
            };
          } finally {
            conn.close();
          }
        };
        const chunked = (target: string) =>
          `POST ${target} HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n` +
          "content-type: application/x-www-form-urlencoded\r\n\r\n5\r\nscope\r\n0\r\n\r\n";
        for (
          const path of ["/oauth2/token", "/oauth2/revoke?x=1", `${gateway}/oauth2/introspect`]
        ) {
          const res = await answer(chunked(path));
          assert.equal(res.status, 411, path);
          // Every answer of these endpoints, the port's own included (RFC 6749 5.1's rule).
          assert.match(res.head, /\r\ncache-control: no-store\r\n/, path);
          assert.equal(res.body.error, "invalid_request", path);
          assert.match(res.body.error_description, descriptionChars);
          assert.match(res.body.error_description, /Content-Length/);
        }
        const large = await answer(
          `POST /oauth2/par HTTP/1.1\r\nhost: x\r\nx-filler: ${"a".repeat(70_000)}\r\n\r\n`,
        );
        assert.equal(large.status, 431);
        assert.equal(large.body.error, "invalid_request");
        // Elsewhere the gateway's own shape, as before.
        const api = await answer(chunked("/v1/projects/ep1/clients"));
        assert.equal(api.status, 411);
        assert.equal(api.body.error.code, "invalid_argument");
      },
    );

    await t.step(
      "branding is a plain support address and https links without userinfo",
      async () => {
        const before = (await call("GET", "/v1/projects/ep1/config")).body;
        for (
          const [field, value] of [
            ["support_email", "help?cc=x%40evil.example@example.com"],
            ["support_email", "help?bcc=x@example.com"],
            ["support_email", "help%40evil.example@example.com"],
            ["support_email", "mailto:help@example.com"],
            ["support_email", "help@example.com?cc=x@evil.example"],
            ["logo_uri", "javascript:alert(1)"],
            ["logo_uri", "http://cdn.example/logo.png"],
            ["homepage_uri", "data:text/html,<b>hi</b>"],
            ["homepage_uri", "JavaScript:alert(1)"],
            ["privacy_policy_uri", "https://photobook.example@evil.example/privacy"],
            ["terms_of_service_uri", "https://user:pass@evil.example/terms"],
            ["terms_of_service_uri", "https:\\\\evil.example/terms"],
          ] as const
        ) {
          const res = await call("PATCH", "/v1/projects/ep1/config", { [field]: value });
          assert.equal(res.status, 400, `${field} ${value}: ${res.text}`);
          assert.ok(
            JSON.stringify(res.body).includes(field),
            `${field} ${value}: the error names the field: ${res.text}`,
          );
        }
        assert.deepEqual((await call("GET", "/v1/projects/ep1/config")).body, before);
        const plain = await call("PATCH", "/v1/projects/ep1/config", {
          support_email: "o'brien+help@example.com",
        });
        assert.equal(plain.status, 200, plain.text);
      },
    );

    await t.step(
      "CORS: the token and revocation endpoints answer registered origins only",
      async () => {
        const preflight = (path: string, origin: string, method = "POST") =>
          fetch(`${gateway}${path}`, {
            method: "OPTIONS",
            headers: {
              origin,
              "access-control-request-method": method,
              "access-control-request-headers": "authorization, dpop",
            },
          });
        for (const path of ["/oauth2/token", "/oauth2/revoke"]) {
          for (
            const origin of [
              "http://localhost:5173",
              "https://app.example.com",
              "https://far.example",
            ]
          ) {
            const res = await preflight(path, origin);
            assert.equal(res.status, 204, `${path} ${origin}`);
            assert.equal(
              res.headers.get("access-control-allow-origin"),
              origin,
              `${path} ${origin}`,
            );
            assert.match(res.headers.get("access-control-allow-methods") ?? "", /\bPOST\b/);
            const allowed = (res.headers.get("access-control-allow-headers") ?? "").toLowerCase();
            assert.ok(allowed.includes("authorization") && allowed.includes("dpop"), allowed);
            assert.match(res.headers.get("vary") ?? "", /\bOrigin\b/);
            assert.equal(res.headers.get("access-control-allow-credentials"), null);
          }
          for (
            const [origin, method] of [
              ["https://evil.example", "POST"],
              ["https://app.example.com:8443", "POST"],
              ["http://app.example.com", "POST"],
              ["null", "POST"],
              ["http://localhost:5173", "DELETE"],
            ]
          ) {
            const res = await preflight(path, origin!, method);
            assert.equal(res.headers.get("access-control-allow-origin"), null, `${path} ${origin}`);
          }
        }
        const introspection = await preflight("/oauth2/introspect", "http://localhost:5173");
        assert.equal(introspection.headers.get("access-control-allow-origin"), null);
        await introspection.body?.cancel();

        /** A token request as a browser on `origin` sends it. */
        const fromOrigin = (path: string, origin: string, form: Record<string, string>) =>
          fetch(`${gateway}${path}`, {
            method: "POST",
            headers: { origin, "content-type": "application/x-www-form-urlencoded" },
            body: new URLSearchParams(form),
          });
        const granted = await allow(spa, "http://localhost:5173/cb");
        const redeemed = await fromOrigin("/oauth2/token", "http://localhost:5173", {
          grant_type: "authorization_code",
          client_id: spa,
          code: granted.params.get("code")!,
          redirect_uri: "http://localhost:5173/cb",
          code_verifier: granted.verifier,
        });
        assert.equal(redeemed.status, 200);
        assert.equal(redeemed.headers.get("access-control-allow-origin"), "http://localhost:5173");
        assert.match(redeemed.headers.get("vary") ?? "", /\bOrigin\b/);
        assert.match(
          redeemed.headers.get("access-control-expose-headers") ?? "",
          /WWW-Authenticate/,
        );
        const tokens = await redeemed.json();
        // An error is readable too, so the app can tell why.
        const refused = await fromOrigin("/oauth2/token", "https://app.example.com", {
          grant_type: "refresh_token",
          client_id: spa,
          refresh_token: "ort_" + "a".repeat(43),
        });
        assert.equal(refused.status, 400);
        assert.equal(refused.headers.get("access-control-allow-origin"), "https://app.example.com");
        await refused.body?.cancel();
        // An origin another client of the project registers: readable; of another project: not.
        for (
          const [client, origin, expected] of [
            [spaTwo, "http://localhost:5173", "http://localhost:5173"],
            [spa, "https://far.example", null],
            [far, "http://localhost:5173", null],
            [spa, "https://evil.example", null],
          ] as const
        ) {
          const res = await fromOrigin("/oauth2/token", origin, {
            grant_type: "refresh_token",
            client_id: client,
            refresh_token: "ort_" + "b".repeat(43),
          });
          assert.equal(res.status, 400);
          assert.equal(
            res.headers.get("access-control-allow-origin"),
            expected,
            `${client} ${origin}`,
          );
          await res.body?.cancel();
        }
        // Revocation answers the app; introspection, for servers, does not.
        const revoked = await fromOrigin("/oauth2/revoke", "http://localhost:5173", {
          client_id: spa,
          token: tokens.refresh_token,
        });
        assert.equal(revoked.status, 200);
        assert.equal(revoked.headers.get("access-control-allow-origin"), "http://localhost:5173");
        await revoked.body?.cancel();
        const introspected = await fetch(`${gateway}/oauth2/introspect`, {
          method: "POST",
          headers: {
            origin: "http://localhost:5173",
            "content-type": "application/x-www-form-urlencoded",
          },
          body: new URLSearchParams({ token: tokens.access_token }),
        });
        assert.equal(introspected.headers.get("access-control-allow-origin"), null);
        await introspected.body?.cancel();
        // A suspended client's origins count no more.
        const suspend = await call("PATCH", `/v1/projects/ep1/clients/${spa}`, {
          status: "suspended",
        });
        assert.equal(suspend.status, 200, suspend.text);
        await propagated(); // the token service keeps its answers about origins in memory
        const afterSuspend = await preflight("/oauth2/token", "http://localhost:5173");
        assert.equal(afterSuspend.headers.get("access-control-allow-origin"), null);
        await call("PATCH", `/v1/projects/ep1/clients/${spa}`, { status: "active" });
        // Without an Origin, nothing but Vary.
        const plain = await fetch(`${gateway}/oauth2/token`, {
          method: "POST",
          headers: { "content-type": "application/x-www-form-urlencoded" },
          body: "grant_type=client_credentials",
        });
        assert.match(plain.headers.get("vary") ?? "", /\bOrigin\b/);
        assert.equal(plain.headers.get("access-control-allow-origin"), null);
        await plain.body?.cancel();
      },
    );
  } finally {
    await stack.stop();
  }
});
