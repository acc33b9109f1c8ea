/**
 * The device authorization grant (RFC 8628) end to end: real gateway, oauth-registry and
 * token-service processes on a real Postgres, the device played by a stock OAuth client
 * (oauth4webapi) through discovery, the user's browser by fetch with the `session` cookie (the
 * verification page's forms; tests/device_browser_test.ts plays it in Chromium). The token service
 * runs on a clock the test moves (lib/testing/clock.ts), so polling intervals, the 600-second
 * lifetime and the guessing limit's minute and cool-down are tested without sleeping.
 */

import assert from "node:assert/strict";
import * as oauth from "oauth4webapi";
import {
  consentFormFields,
  httpClient,
  type MovableClock,
  movableClock,
  propagated,
  type Stack,
  startStack,
} from "../lib/testing/mod.ts";

const insecure = { [oauth.allowInsecureRequests]: true };
const deviceGrant = "urn:ietf:params:oauth:grant-type:device_code";
const loginUrl = "https://login.example.com/sign-in";

Deno.test("the device flow (RFC 8628) with a stock OAuth client, on a moved clock", async (t) => {
  let clock: MovableClock | undefined;
  let stack: Stack | undefined;
  try {
    clock = await movableClock();
    stack = await startStack({
      processEnv: {
        token: clock.env,
        // As behind the Ingress: the client's address in X-Real-IP, else the peer's.
        gateway: { LOGIN_URL: loginUrl, CLIENT_ADDRESS_HEADER: "X-Real-IP" },
      },
    });
    const tokenClock = clock;
    const gatewayUrl = stack.gatewayUrl;
    const api = httpClient(gatewayUrl);
    const day = 24 * 3600;
    const admin = await stack.token({ sub: "admin", projects: ["dp1"], ttlSeconds: day });
    const user = await stack.token({
      sub: "u-1",
      accountId: "acct-1",
      projects: [],
      ttlSeconds: day,
    });
    const newClient = async (json: Record<string, unknown>) => {
      const res = await api("POST", "/v1/projects/dp1/clients", { token: admin, json });
      assert.equal(res.status, 201, res.text);
      return res.body.id as string;
    };
    const config = await api("PATCH", "/v1/projects/dp1/config", {
      token: admin,
      json: { application_name: "Living Room TV", support_email: "help@tv.example" },
    });
    assert.equal(config.status, 200, config.text);
    const tv = await newClient({
      name: "tv",
      type: "native",
      redirect_uris: ["http://127.0.0.1/cb"],
    });
    const otherTv = await newClient({
      name: "other tv",
      type: "native",
      redirect_uris: ["http://127.0.0.1/cb"],
    });
    const spa = await newClient({
      name: "spa",
      type: "spa",
      redirect_uris: ["https://s.example/cb"],
    });
    const web = await newClient({
      name: "web",
      type: "web",
      redirect_uris: ["https://w.example/cb"],
    });
    const webSecret = (await api("POST", `/v1/projects/dp1/clients/${web}/secrets`, {
      token: admin,
    })).body.secret as string;

    const issuer = new URL(gatewayUrl);
    const as = await oauth.processDiscoveryResponse(
      issuer,
      await oauth.discoveryRequest(issuer, { algorithm: "oauth2", ...insecure }),
    );

    /** A device asks for codes (a public client by its client_id alone). */
    const start = async (
      clientId = tv,
      auth: oauth.ClientAuth = oauth.None(),
      scope = "tv.watch profile",
    ) =>
      await oauth.processDeviceAuthorizationResponse(
        as,
        { client_id: clientId },
        await oauth.deviceAuthorizationRequest(
          as,
          { client_id: clientId },
          auth,
          { scope },
          insecure,
        ),
      );
    /** One poll: the tokens, or the error code the token endpoint answered. */
    const poll = async (
      deviceCode: string,
      clientId = tv,
      auth: oauth.ClientAuth = oauth.None(),
    ): Promise<oauth.TokenEndpointResponse | string> => {
      try {
        return await oauth.processDeviceCodeResponse(
          as,
          { client_id: clientId },
          await oauth.deviceCodeGrantRequest(
            as,
            { client_id: clientId },
            auth,
            deviceCode,
            insecure,
          ),
        );
      } catch (error) {
        if (error instanceof oauth.ResponseBodyError) {
          assert.equal(error.status, error.error === "invalid_client" ? 401 : 400);
          return error.error;
        }
        throw error;
      }
    };
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
    /** The browser's part: the verification page as the user, raw. */
    const page = (
      method: "GET" | "POST",
      form?: Record<string, string>,
      query = "",
      session = user,
      address?: string,
    ) =>
      fetch(`${gatewayUrl}/oauth2/device${query}`, {
        method,
        redirect: "manual",
        headers: {
          ...(session === "" ? {} : { cookie: `session=${session}` }),
          ...(address ? { "x-real-ip": address } : {}),
          ...(form ? { "content-type": "application/x-www-form-urlencoded" } : {}),
        },
        ...(form ? { body: new URLSearchParams(form) } : {}),
      });
    /** The code form's fields, from GET. */
    const codeForm = async (session = user, query = "") => {
      const res = await page("GET", undefined, query, session);
      const html = await res.text();
      assert.equal(res.status, 200, html);
      return { html, fields: consentFormFields(html) };
    };
    /** Types a code and continues: the response. */
    const enter = async (userCode: string, session = user, address?: string) => {
      const { fields } = await codeForm(session);
      return await page("POST", { ...fields, user_code: userCode }, "", session, address);
    };
    /** Types the code, continues, and chooses: the last page. */
    const decide = async (userCode: string, decision: "allow" | "deny", session = user) => {
      const consent = await enter(userCode, session);
      const html = await consent.text();
      assert.equal(consent.status, 200, html);
      const done = await page("POST", { ...consentFormFields(html), decision }, "", session);
      const text = await done.text();
      assert.equal(done.status, 200, text);
      assert.match(text, /You can return to your device/);
      return text;
    };

    await t.step("discovery names the device authorization endpoint and the grant", () => {
      assert.equal(as.device_authorization_endpoint, `${gatewayUrl}/oauth2/device_authorization`);
      assert.ok(as.grant_types_supported?.includes(deviceGrant));
    });

    await t.step(
      "who may start one: native by client_id, web with its secret, not spa",
      async () => {
        const codes = await start(web, oauth.ClientSecretBasic(webSecret));
        assert.match(codes.user_code, /^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/);
        await assert.rejects(
          start(web),
          (e) => (e as oauth.ResponseBodyError).error === "invalid_client",
        );
        await assert.rejects(
          start(spa),
          (e) => (e as oauth.ResponseBodyError).error === "unauthorized_client",
        );
        await assert.rejects(
          start(tv, oauth.None(), 'bad"scope'),
          (e) => (e as oauth.ResponseBodyError).error === "invalid_scope",
        );
      },
    );

    let codes!: oauth.DeviceAuthorizationResponse;
    await t.step(
      "the codes: opaque device code, XXXX-XXXX, the verification URIs, 600 s, 5 s",
      async () => {
        codes = await start();
        assert.match(codes.device_code, /^odc_[A-Za-z0-9_-]{43}$/);
        assert.match(codes.user_code, /^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/);
        assert.equal(codes.verification_uri, `${gatewayUrl}/oauth2/device`);
        assert.equal(
          codes.verification_uri_complete,
          `${gatewayUrl}/oauth2/device?user_code=${codes.user_code}`,
        );
        assert.equal(codes.expires_in, 600);
        assert.equal(codes.interval, 5);
        // The verification page answers a HEAD as its GET (RFC 9110 9.3.2), without the body.
        const page = (method: string) =>
          fetch(codes.verification_uri_complete!, { method, redirect: "manual" });
        const [get, head] = [await page("GET"), await page("HEAD")];
        const getBody = await get.text();
        assert.equal(head.status, get.status);
        assert.equal(head.headers.get("location"), get.headers.get("location"));
        assert.equal(head.headers.get("content-length"), String(getBody.length));
        assert.equal(await head.text(), "");
        const again = await start();
        assert.notEqual(again.user_code, codes.user_code);
        assert.notEqual(again.device_code, codes.device_code);
      },
    );

    await t.step(
      "slow_down before the interval, and the interval grows by 5 s each time",
      async () => {
        // At once: sooner than 5 s after the issue.
        assert.equal(await poll(codes.device_code), "slow_down");
        // 6 s later: the old interval (5) has passed, the new one (10) has not.
        await tokenClock.advance(6);
        assert.equal(await poll(codes.device_code), "slow_down");
        // Now 15 s: 15 s after the last poll, the user has not decided.
        await tokenClock.advance(15);
        assert.equal(await poll(codes.device_code), "authorization_pending");
      },
    );

    await t.step("another client's device code is invalid_grant, and changes nothing", async () => {
      await tokenClock.advance(15);
      assert.equal(await poll(codes.device_code, otherTv), "invalid_grant");
      assert.equal(await poll(codes.device_code), "authorization_pending");
    });

    await t.step(
      "the verification page: sign-in first, then the pre-filled code form",
      async () => {
        const query = `?user_code=${codes.user_code}`;
        const anonymous = await page("GET", undefined, query, "");
        assert.equal(anonymous.status, 302);
        const login = new URL(anonymous.headers.get("location")!);
        assert.equal(login.origin + login.pathname, loginUrl);
        assert.equal(login.searchParams.get("return_to"), `${gatewayUrl}/oauth2/device${query}`);
        const { html } = await codeForm(user, query);
        assert.match(html, /<label for="user_code">[^<]*\bcode\b[^<]*<\/label>/i);
        assert.ok(html.includes(`value="${codes.user_code}"`), "pre-filled");
        assert.ok(html.includes(">Continue</button>"));
        const res = await page("GET", undefined, query);
        const csp = res.headers.get("content-security-policy") ?? "";
        await res.body?.cancel();
        assert.match(csp, /default-src 'none'/);
        assert.match(csp, /frame-ancestors 'none'/);
        assert.match(csp, /form-action 'self'(;|$)/);
        assert.equal(res.headers.get("x-frame-options"), "DENY");
        assert.equal(res.headers.get("cache-control"), "no-store");
      },
    );

    await t.step("the form needs its CSRF token, bound to the session and the code", async () => {
      const noCsrf = await page("POST", { user_code: codes.user_code });
      assert.equal(noCsrf.status, 400);
      assert.match(await noCsrf.text(), /This page expired/);
      const otherUser = await stack!.token({ sub: "u-9", accountId: "acct-9", projects: [] });
      const { fields } = await codeForm(otherUser);
      const stolen = await page("POST", { ...fields, user_code: codes.user_code });
      assert.equal(stolen.status, 400);
      await stolen.body?.cancel();
      // The consent form's token is for its own code only.
      const other = await start();
      const consent = await (await enter(other.user_code)).text();
      const swapped = await page("POST", {
        ...consentFormFields(consent),
        user_code: codes.user_code,
        decision: "allow",
      });
      assert.equal(swapped.status, 400);
      await swapped.body?.cancel();
    });

    let tokens!: oauth.TokenEndpointResponse;
    await t.step("Allow: the consent page, then the device's next poll gets tokens", async () => {
      // Lower case, without the hyphen: the same code.
      const consent = await enter(codes.user_code.replace("-", "").toLowerCase());
      const html = await consent.text();
      assert.equal(consent.status, 200, html);
      for (
        const shown of [
          "Living Room TV",
          "acct-1",
          "tv.watch",
          "profile",
          codes.user_code,
          ">Allow</button>",
          ">Deny</button>",
        ]
      ) {
        assert.ok(html.includes(shown), `the page shows ${shown}`);
      }
      assert.match(consent.headers.get("content-security-policy") ?? "", /form-action 'self'(;|$)/);
      const form = consentFormFields(html);
      const done = await page("POST", { ...form, decision: "allow" });
      assert.equal(done.status, 200);
      assert.match(await done.text(), /You can return to your device/);
      // The same form again (a double click, Back, then Deny): the first answer stands, and the
      // page says so, not that the code is wrong.
      for (const decision of ["allow", "deny"]) {
        const again = await page("POST", { ...form, decision });
        const text = await again.text();
        assert.equal(again.status, 400, decision);
        assert.match(text, /This code was answered already/, decision);
        assert.doesNotMatch(text, /not valid/, decision);
      }
      await tokenClock.advance(15);
      const answer = await poll(codes.device_code);
      assert.equal(typeof answer, "object", String(answer));
      tokens = answer as oauth.TokenEndpointResponse;
      assert.equal(tokens.scope, "tv.watch profile");
      assert.match(tokens.refresh_token ?? "", /^ort_/);
      const claims = await introspect(tokens.access_token);
      assert.equal(claims.active, true);
      assert.equal(claims.client_id, tv);
      assert.equal(claims.account_id, "acct-1");
      assert.ok(claims.installation_id);
      // The consent is the registry's installation, as for the authorization code.
      const installation = await api("GET", "/v1/installations", { token: user });
      assert.equal(installation.status, 200, installation.text);
      assert.ok(installation.text.includes(claims.installation_id as string), installation.text);
    });

    await t.step(
      "single use: a second redemption is invalid_grant and revokes the first's tokens",
      async () => {
        await tokenClock.advance(15);
        assert.equal(await poll(codes.device_code), "invalid_grant");
        // The gateway answered the token active from memory before; the revocation made at the
        // token endpoint reaches it through Postgres, within the promised time.
        await propagated();
        assert.equal((await introspect(tokens.access_token)).active, false);
        // A decided code is no longer one to enter.
        const late = await enter(codes.user_code);
        assert.equal(late.status, 400);
        assert.match(await late.text(), /That code is not valid/);
      },
    );

    await t.step("Deny: access_denied, however soon the device polls", async () => {
      const denied = await start();
      await decide(denied.user_code, "deny");
      // Sooner than the interval: no longer pending, so not slow_down (RFC 8628 3.5).
      assert.equal(await poll(denied.device_code), "access_denied");
      assert.equal(await poll(denied.device_code), "access_denied");
      await tokenClock.advance(5);
      assert.equal(await poll(denied.device_code), "access_denied");
    });

    await t.step("expired: expired_token after 600 s, and the page refuses its code", async () => {
      const late = await start();
      await tokenClock.advance(599);
      assert.equal(await poll(late.device_code), "authorization_pending");
      await tokenClock.advance(2);
      assert.equal(await poll(late.device_code), "expired_token");
      const res = await enter(late.user_code);
      assert.equal(res.status, 400);
      await res.body?.cancel();
    });

    await t.step("a confidential client's device flow, with its secret", async () => {
      const webCodes = await start(web, oauth.ClientSecretBasic(webSecret), "reports");
      await decide(webCodes.user_code, "allow");
      await tokenClock.advance(5);
      const answer = await poll(webCodes.device_code, web, oauth.ClientSecretBasic(webSecret));
      assert.equal(typeof answer, "object", String(answer));
      assert.equal((answer as oauth.TokenEndpointResponse).scope, "reports");
    });

    await t.step(
      "guessing: after 20 wrong codes in a minute (from a user, or an address) every code is refused 5 minutes",
      async () => {
        // Past the minute of any earlier wrong code.
        await tokenClock.advance(61);
        const target = await start();
        const wrong = (i: number) => {
          // Consonant codes that were never issued (a collision has odds of 1 in 10^10).
          const letters = "BCDFGHJKLMNPQRSTVWXZ";
          const a = letters[i % 20]!;
          return `ZZZZ-ZZ${a}${letters[(i * 7) % 20]}`;
        };
        for (let i = 0; i < 19; i++) {
          const res = await enter(wrong(i));
          assert.equal(res.status, 400, `wrong code ${i + 1}`);
          await res.body?.cancel();
        }
        // 19 wrong codes: the right one still works.
        const right = await enter(target.user_code);
        assert.equal(right.status, 200);
        await right.body?.cancel();
        // The 20th wrong one: from now on every code, right or wrong, is refused.
        const twentieth = await enter(wrong(19));
        assert.equal(twentieth.status, 400);
        await twentieth.body?.cancel();
        const refused = await enter(target.user_code);
        assert.equal(refused.status, 429);
        assert.equal(refused.headers.get("retry-after"), "300");
        assert.match(await refused.text(), /Too many wrong codes/);
        // Another session from the same address: refused too (the address counts).
        const other = await stack!.token({
          sub: "u-2",
          accountId: "acct-2",
          projects: [],
          ttlSeconds: day,
        });
        const fromOther = await enter(target.user_code, other);
        assert.equal(fromOther.status, 429);
        await fromOther.body?.cancel();
        // From another address (the proxy's header): the other session may; this one may not.
        const elsewhere = await enter(target.user_code, other, "203.0.113.7");
        assert.equal(elsewhere.status, 200);
        await elsewhere.body?.cancel();
        const sameSession = await enter(target.user_code, user, "203.0.113.7");
        assert.equal(sameSession.status, 429);
        await sameSession.body?.cancel();
        // Nor may the same user with another session (a new sign-in), from another address.
        const again = await stack!.token({
          sub: "u-1",
          accountId: "acct-1",
          projects: [],
          ttlSeconds: day - 60,
        });
        assert.notEqual(again, user);
        const newSession = await enter(target.user_code, again, "203.0.113.9");
        assert.equal(newSession.status, 429);
        await newSession.body?.cancel();
        // Still within the cool-down at 4 minutes 59 seconds, over after 5 minutes.
        await tokenClock.advance(299);
        const still = await enter(target.user_code);
        assert.equal(still.status, 429);
        await still.body?.cancel();
        await tokenClock.advance(2);
        const after = await enter(target.user_code);
        assert.equal(after.status, 200);
        await after.body?.cancel();
        // An IPv6 address counts by its /64: 20 wrong codes from one of a network's addresses,
        // each by another user, and the network's other addresses are refused too.
        for (let i = 0; i < 20; i++) {
          const guesser = await stack!.token({
            sub: `g-${i}`,
            accountId: `acct-g-${i}`,
            projects: [],
            ttlSeconds: day,
          });
          const res = await enter(wrong(i), guesser, `2001:db8:1:2::${(i + 1).toString(16)}`);
          assert.equal(res.status, 400, `wrong code ${i + 1} from the /64`);
          await res.body?.cancel();
        }
        const sameNetwork = await enter(target.user_code, other, "2001:db8:1:2:ffff::1");
        assert.equal(sameNetwork.status, 429);
        await sameNetwork.body?.cancel();
        const otherNetwork = await enter(target.user_code, other, "2001:db8:1:3::1");
        assert.equal(otherNetwork.status, 200);
        await otherNetwork.body?.cancel();
      },
    );
  } finally {
    await stack?.stop();
    await clock?.close();
  }
});
