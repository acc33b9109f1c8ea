/**
 * Consent remembered, asked only when needed, and scopes that say what they mean, end to end (real
 * gateway, oauth-registry and token-service processes on a real Postgres; the browser played by
 * fetch with the `session` cookie): a project's declared scopes (`/v1` config), `invalid_scope`
 * for one it does not declare (authorization endpoint and `client_credentials`), the consent page
 * with the scopes' descriptions, remembered consent (a code at once, no page), `prompt=consent`,
 * `prompt=none` both ways and without a session (`login_required`), incremental consent (the page
 * lists only the new scopes; the installation keeps the union; the code has exactly the scopes
 * asked for), and a revoked installation asking again.
 */

import assert from "node:assert/strict";
import * as oauth from "oauth4webapi";
import { consentFormFields, httpClient, propagated, startStack } from "../lib/testing/mod.ts";

const declared = [
  { name: "photos.read", description: "See the photos in your library", sensitive: false },
  { name: "albums.write", description: "Create and rename your albums", sensitive: false },
  {
    name: "photos.delete",
    description: "Permanently delete photos from your library",
    sensitive: true,
  },
];

Deno.test("remembered and incremental consent, prompt, declared scopes", async (t) => {
  const stack = await startStack();
  const api = httpClient(stack.gatewayUrl);
  const admin = await stack.token({ sub: "admin", projects: ["rc1", "rc2"] });
  const user = await stack.token({ sub: "uma", accountId: "acct-uma", projects: [] });
  const call = (method: string, path: string, json?: unknown, token = admin) =>
    api(method, path, { token, ...(json !== undefined ? { json } : {}) });
  const authorizeUrl = `${stack.gatewayUrl}/oauth2/authorize`;
  const tokenUrl = `${stack.gatewayUrl}/oauth2/token`;
  try {
    const config = await call("PATCH", "/v1/projects/rc1/config", {
      application_name: "Photo Book",
      scopes: declared,
    });
    assert.equal(config.status, 200, config.text);
    // A project that declares nothing: any valid scope, names on the page.
    assert.equal(
      (await call("PATCH", "/v1/projects/rc2/config", { application_name: "Open" }))
        .status,
      200,
    );
    const redirect = "https://app.example.com/cb";
    const newClient = async (project: string) => {
      const res = await call("POST", `/v1/projects/${project}/clients`, {
        name: "web",
        type: "web",
        redirect_uris: [redirect],
      });
      assert.equal(res.status, 201, res.text);
      const id = res.body.id as string;
      const secret = (await call("POST", `/v1/projects/${project}/clients/${id}/secrets`)).body
        .secret as string;
      return { id, secret };
    };
    const web = await newClient("rc1");
    const open = await newClient("rc2");

    const pkce = async () => {
      const verifier = oauth.generateRandomCodeVerifier();
      return { verifier, challenge: await oauth.calculatePKCECodeChallenge(verifier) };
    };
    /** GET /oauth2/authorize for `client` with `scope` (and extras); the raw response. */
    const authorize = async (
      client: string,
      scope: string,
      extra: Record<string, string> = {},
      session = user,
    ) => {
      const { verifier, challenge } = await pkce();
      const params = new URLSearchParams({
        response_type: "code",
        client_id: client,
        redirect_uri: redirect,
        scope,
        state: "st-9",
        code_challenge: challenge,
        code_challenge_method: "S256",
        ...extra,
      });
      const res = await fetch(`${authorizeUrl}?${params}`, {
        redirect: "manual",
        headers: session === "" ? {} : { cookie: `session=${session}` },
      });
      return { res, verifier, body: await res.text() };
    };
    /** Where a redirect answer sends the browser (asserting it is one, to the client). */
    const back = (res: Response, body: string, status = 302) => {
      assert.equal(res.status, status, body);
      const location = new URL(res.headers.get("location")!);
      assert.equal(`${location.origin}${location.pathname}`, redirect);
      assert.equal(location.searchParams.get("state"), "st-9");
      assert.equal(location.searchParams.get("iss"), stack.gatewayUrl);
      return location.searchParams;
    };
    const allow = async (html: string) => {
      const res = await fetch(authorizeUrl, {
        method: "POST",
        redirect: "manual",
        headers: {
          cookie: `session=${user}`,
          "content-type": "application/x-www-form-urlencoded",
        },
        body: new URLSearchParams({ ...consentFormFields(html), decision: "allow" }),
      });
      return back(res, await res.text(), 303);
    };
    const redeem = async (
      client: { id: string; secret: string },
      code: string,
      verifier: string,
    ) => {
      const res = await fetch(tokenUrl, {
        method: "POST",
        headers: {
          authorization: `Basic ${btoa(`${client.id}:${client.secret}`)}`,
          "content-type": "application/x-www-form-urlencoded",
        },
        body: new URLSearchParams({
          grant_type: "authorization_code",
          code,
          redirect_uri: redirect,
          code_verifier: verifier,
        }),
      });
      const body = await res.json();
      assert.equal(res.status, 200, JSON.stringify(body));
      return body as { scope: string; access_token: string };
    };
    const installations = async () => {
      const res = await call("GET", "/v1/installations", undefined, user);
      assert.equal(res.status, 200, res.text);
      return (res.body.data as {
        id: string;
        project_id: string;
        status: string;
        scopes: string[];
        authorized_at: string;
      }[]).filter((i) => i.project_id === "rc1");
    };
    const live = async () => (await installations()).filter((i) => i.status === "active");

    await t.step("the config declares scopes; bad declarations are 400", async () => {
      assert.deepEqual(config.body.scopes, declared);
      const got = await call("GET", "/v1/projects/rc1/config");
      assert.deepEqual(got.body.scopes, declared);
      const bad = [
        [{ name: "a b", description: "x", sensitive: false }],
        [{ name: "a", description: "", sensitive: false }],
        [{ name: "a", description: "x".repeat(201), sensitive: false }],
        [{ name: "a", description: "x", sensitive: false }, {
          name: "a",
          description: "y",
          sensitive: true,
        }],
        Array.from({ length: 101 }, (_, i) => ({ name: `s${i}`, description: "x" })),
      ];
      for (const scopes of bad) {
        const res = await call("PATCH", "/v1/projects/rc1/config", { scopes });
        assert.equal(res.status, 400, `${JSON.stringify(scopes).slice(0, 80)}: ${res.text}`);
      }
      // Unchanged by the refusals.
      assert.deepEqual((await call("GET", "/v1/projects/rc1/config")).body.scopes, declared);
    });

    await t.step("a scope the project does not declare is invalid_scope", async () => {
      const { res, body } = await authorize(web.id, "photos.read photos.write");
      assert.equal(back(res, body).get("error"), "invalid_scope");
      // The same check at the token endpoint, for client_credentials.
      const cc = (scope: string, client = web) =>
        fetch(tokenUrl, {
          method: "POST",
          headers: {
            authorization: `Basic ${btoa(`${client.id}:${client.secret}`)}`,
            "content-type": "application/x-www-form-urlencoded",
          },
          body: new URLSearchParams({ grant_type: "client_credentials", scope }),
        });
      const refused = await cc("photos.write");
      assert.equal(refused.status, 400);
      assert.equal((await refused.json()).error, "invalid_scope");
      const fine = await cc("photos.read");
      assert.equal(fine.status, 200);
      assert.equal((await fine.json()).scope, "photos.read");
      // A project that declares none takes any valid scope.
      const anything = await cc("anything.goes", open);
      assert.equal(anything.status, 200, await anything.clone().text());
      // Nor does the registry take consent to one (an installation is where a token exchange's
      // scopes come from), and the refusal records nothing.
      const consent = await call("POST", "/v1/installations", {
        project_id: "rc1",
        scopes: ["photos.read", "photos.write"],
      }, user);
      assert.equal(consent.status, 400, consent.text);
      assert.deepEqual(consent.body.error.details.map((d: { field: string }) => d.field), [
        "scopes[1]",
      ]);
      assert.deepEqual((await call("GET", "/v1/installations", undefined, user)).body.data, []);
    });

    let firstAuthorizedAt = "";
    await t.step("the first authorization shows the descriptions; Allow gives a code", async () => {
      const { res, body, verifier } = await authorize(web.id, "photos.read albums.write");
      assert.equal(res.status, 200, body);
      assert.match(body, /See the photos in your library/);
      assert.match(body, /Create and rename your albums/);
      assert.doesNotMatch(body, /Permanently delete/);
      assert.doesNotMatch(body, /Already allowed/);
      const params = await allow(body);
      const tokens = await redeem(web, params.get("code")!, verifier);
      assert.equal(tokens.scope, "photos.read albums.write");
      const [installation] = await live();
      assert.deepEqual(installation!.scopes, ["photos.read", "albums.write"]);
      firstAuthorizedAt = installation!.authorized_at;
    });

    await t.step("remembered consent: a code at once, no page, nothing recorded", async () => {
      const { res, body, verifier } = await authorize(web.id, "albums.write photos.read");
      const params = back(res, body);
      assert.equal(params.get("error"), null);
      const tokens = await redeem(web, params.get("code")!, verifier);
      assert.equal(tokens.scope, "albums.write photos.read");
      // Fewer scopes than consented to: remembered too, and the token has exactly those.
      const subset = await authorize(web.id, "photos.read");
      const narrow = await redeem(web, back(subset.res, subset.body).get("code")!, subset.verifier);
      assert.equal(narrow.scope, "photos.read");
      const [installation] = await live();
      assert.equal(installation!.authorized_at, firstAuthorizedAt, "consent not recorded again");
      assert.deepEqual(installation!.scopes, ["photos.read", "albums.write"]);
    });

    await t.step("prompt=consent shows the page anyway", async () => {
      const { res, body } = await authorize(web.id, "photos.read", { prompt: "consent" });
      assert.equal(res.status, 200, body);
      assert.match(body, /See the photos in your library/);
      // login is taken as no prompt: remembered consent.
      const login = await authorize(web.id, "photos.read", { prompt: "login" });
      assert.ok(back(login.res, login.body).get("code"));
    });

    await t.step("prompt=none: the code when remembered, else consent_required", async () => {
      const remembered = await authorize(web.id, "photos.read", { prompt: "none" });
      const code = back(remembered.res, remembered.body).get("code");
      assert.ok(code);
      await redeem(web, code, remembered.verifier);
      const more = await authorize(web.id, "photos.read photos.delete", { prompt: "none" });
      const params = back(more.res, more.body);
      assert.equal(params.get("error"), "consent_required");
      assert.equal(params.get("code"), null);
    });

    await t.step("prompt=none without a session: login_required, to the client", async () => {
      for (const session of ["", "not-a-token"]) {
        const { res, body } = await authorize(web.id, "photos.read", { prompt: "none" }, session);
        const params = back(res, body);
        assert.equal(params.get("error"), "login_required", params.toString());
      }
      // Without prompt=none, the sign-in as before (a page: the stack has no LOGIN_URL).
      const page = await authorize(web.id, "photos.read", {}, "");
      assert.equal(page.res.status, 401, page.body);
      // The redirect URI is still checked first: an unregistered one is never redirected to.
      const evil = await fetch(
        `${authorizeUrl}?${new URLSearchParams({
          response_type: "code",
          client_id: web.id,
          redirect_uri: "https://evil.example/cb",
          prompt: "none",
          state: "st-9",
        })}`,
        { redirect: "manual" },
      );
      assert.equal(evil.status, 400);
      assert.equal(evil.headers.get("location"), null);
      await evil.body?.cancel();
    });

    await t.step("an unknown prompt is invalid_request", async () => {
      for (const prompt of ["select_account", "none consent", "consent consent"]) {
        const { res, body } = await authorize(web.id, "photos.read", { prompt });
        assert.equal(back(res, body).get("error"), "invalid_request", prompt);
      }
    });

    await t.step("incremental consent: only the new scopes asked; the union kept", async () => {
      const { res, body, verifier } = await authorize(web.id, "photos.read photos.delete");
      assert.equal(res.status, 200, body);
      const listed = /<ul class="scopes">(.*?)<\/ul>/s.exec(body)?.[1] ?? "";
      assert.match(listed, /Permanently delete photos from your library/);
      assert.match(listed, /Sensitive/);
      assert.doesNotMatch(listed, /See the photos in your library/);
      assert.match(body, /Already allowed: See the photos in your library\./);
      const tokens = await redeem(web, (await allow(body)).get("code")!, verifier);
      // The code has exactly what was asked for, not the union.
      assert.equal(tokens.scope, "photos.read photos.delete");
      const [installation] = await live();
      assert.deepEqual(installation!.scopes, ["photos.read", "albums.write", "photos.delete"]);
      // Everything is remembered now.
      const all = await authorize(web.id, "albums.write photos.delete", { prompt: "none" });
      assert.ok(back(all.res, all.body).get("code"));
    });

    await t.step("POST /v1/installations adds scopes too (the union)", async () => {
      const res = await call("POST", "/v1/installations", {
        project_id: "rc2",
        scopes: ["a", "b"],
      }, user);
      assert.equal(res.status, 201, res.text);
      const again = await call("POST", "/v1/installations", {
        project_id: "rc2",
        scopes: ["c", "a"],
      }, user);
      assert.equal(again.status, 200, again.text); // updated, not created
      assert.equal(again.body.id, res.body.id);
      assert.deepEqual(again.body.scopes, ["a", "b", "c"]);
      // Undeclared project: the page shows names.
      const { res: page, body } = await authorize(open.id, "a d");
      assert.equal(page.status, 200, body);
      assert.match(body, /<code>d<\/code>/);
      assert.match(body, /Already allowed: a\./);
    });

    await t.step("revoking the installation makes the next authorization ask again", async () => {
      const [installation] = await live();
      const revoked = await call(
        "DELETE",
        `/v1/installations/${installation!.id}`,
        undefined,
        user,
      );
      assert.equal(revoked.status, 204, revoked.text);
      await propagated(); // the token service keeps users' live installations in memory
      const silent = await authorize(web.id, "photos.read", { prompt: "none" });
      assert.equal(back(silent.res, silent.body).get("error"), "consent_required");
      const { res, body, verifier } = await authorize(web.id, "photos.read");
      assert.equal(res.status, 200, body);
      assert.doesNotMatch(body, /Already allowed/);
      const tokens = await redeem(web, (await allow(body)).get("code")!, verifier);
      assert.equal(tokens.scope, "photos.read");
      const now = await live();
      assert.equal(now.length, 1);
      assert.notEqual(now[0]!.id, installation!.id);
      assert.deepEqual(now[0]!.scopes, ["photos.read"]);
    });
  } finally {
    await stack.stop();
  }
});
