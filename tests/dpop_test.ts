/**
 * DPoP (RFC 9449) end to end: real gateway, oauth-registry and token-service processes on a real
 * Postgres. A stock client (panva's oauth4webapi, its `DPoP()` handle) gets DPoP-bound tokens by
 * `client_credentials` and by `authorization_code` + `refresh_token` for a public client, and
 * follows the server's nonces; hostile proofs made with jose are refused one by one; and a
 * resource server's check of a bound token ({@link checkDpopRequest}, quoted in the README) is
 * run on what oauth4webapi sends to a resource.
 */

import assert from "node:assert/strict";
import {
  calculateJwkThumbprint,
  CompactSign,
  createRemoteJWKSet,
  EmbeddedJWK,
  exportJWK,
  generateKeyPair,
  type JWK,
  type JWTPayload,
  jwtVerify,
  type JWTVerifyGetKey,
  SignJWT,
} from "jose";
import * as oauth from "oauth4webapi";
import postgres from "postgres";
import { allowOnConsentPage, httpClient, type Stack, startStack } from "../lib/testing/mod.ts";
import { dpopAlgorithms } from "../services/token/dpop.ts";

const insecure = { [oauth.allowInsecureRequests]: true };

/** The server's metadata (RFC 8414), as oauth4webapi reads it. */
async function discover(issuer: URL): Promise<oauth.AuthorizationServer> {
  return await oauth.processDiscoveryResponse(
    issuer,
    await oauth.discoveryRequest(issuer, { algorithm: "oauth2", ...insecure }),
  );
}
const exchangeGrant = "urn:ietf:params:oauth:grant-type:token-exchange";
const accessTokenType = "urn:ietf:params:oauth:token-type:access_token";

// ---------------------------------------------------------------------------------------------
// A resource server's check of a DPoP-bound access token (RFC 9449 4.3 and 7.1).

/** What a resource server knows: the authorization server's keys and its own name. */
export interface ResourceServer {
  /** The authorization server's JWK Set (`jwks_uri`), e.g. jose's createRemoteJWKSet. */
  jwks: JWTVerifyGetKey;
  /** The authorization server's issuer. */
  issuer: string;
  /** This API's audience: the project id. */
  audience: string;
  /** The `jti`s of the proofs seen in the last 5 minutes (share it between replicas). */
  seen: Set<string>;
}

/**
 * Checks a request to a resource that carries a DPoP-bound access token: `Authorization: DPoP
 * <token>` and one `DPoP` proof. The access token must verify with the authorization server's
 * keys (RFC 9068: `typ` `at+jwt`, `iss`, `aud`, `exp`) and have `cnf.jkt`; the proof must be a
 * `dpop+jwt` signed by the public key in its own header, whose thumbprint is that `cnf.jkt`, with
 * `htm` and `htu` those of this request (query and fragment left out), an `iat` of the last 5
 * minutes, `ath` the base64url SHA-256 of the access token, and a `jti` not seen before. Returns
 * the access token's claims; throws otherwise (answer 401 with `WWW-Authenticate: DPoP
 * error="invalid_token"` or `"invalid_dpop_proof"`).
 */
export async function checkDpopRequest(req: Request, rs: ResourceServer): Promise<JWTPayload> {
  const authorization = req.headers.get("authorization") ?? "";
  const [scheme, token] = authorization.split(" ");
  if (scheme?.toLowerCase() !== "dpop" || !token) throw new Error("not a DPoP access token");
  const { payload: claims } = await jwtVerify(token, rs.jwks, {
    issuer: rs.issuer,
    audience: rs.audience,
    typ: "at+jwt",
    algorithms: ["EdDSA"],
  });
  const jkt = (claims.cnf as { jkt?: unknown } | undefined)?.jkt;
  if (typeof jkt !== "string") throw new Error("the access token is not DPoP-bound");
  const proof = req.headers.get("dpop");
  if (proof === null || proof.includes(",")) throw new Error("one DPoP proof is needed");
  const { payload, protectedHeader } = await jwtVerify(proof, EmbeddedJWK, {
    typ: "dpop+jwt",
    algorithms: ["EdDSA", "Ed25519", "ES256"],
    maxTokenAge: "300s",
    clockTolerance: "30s",
  });
  if (await calculateJwkThumbprint(protectedHeader.jwk!, "sha256") !== jkt) {
    throw new Error("the proof's key is not the token's (cnf.jkt)");
  }
  const url = new URL(req.url);
  const htu = typeof payload.htu === "string" ? URL.parse(payload.htu) : null;
  if (
    payload.htm !== req.method || !htu || htu.origin + htu.pathname !== url.origin + url.pathname
  ) {
    throw new Error("the proof is for another request (htm, htu)");
  }
  const hash = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(token));
  if (payload.ath !== new Uint8Array(hash).toBase64({ alphabet: "base64url", omitPadding: true })) {
    throw new Error("the proof is for another access token (ath)");
  }
  if (typeof payload.jti !== "string" || rs.seen.has(payload.jti)) {
    throw new Error("the proof was used before (jti)");
  }
  rs.seen.add(payload.jti);
  return claims;
}

// ---------------------------------------------------------------------------------------------

/** What oauth4webapi sends to a resource with a DPoP-bound token (captured, not sent). */
async function resourceRequest(
  token: string,
  url: string,
  dpop: oauth.DPoPHandle,
  method = "GET",
): Promise<Request> {
  let sent!: Request;
  await oauth.protectedResourceRequest(token, method, new URL(url), new Headers(), null, {
    DPoP: dpop,
    [oauth.customFetch]: (input, init) => {
      sent = new Request(input, init as RequestInit);
      return Promise.resolve(new Response("{}", { status: 200 }));
    },
  });
  return sent;
}

/** A key pair and its public JWK, for proofs made with jose. */
async function joseKey(alg: "EdDSA" | "ES256" = "EdDSA") {
  const pair = await generateKeyPair(alg, { extractable: true });
  const jwk = await exportJWK(pair.publicKey);
  return { ...pair, alg, jwk, jkt: await calculateJwkThumbprint(jwk, "sha256") };
}
type JoseKey = Awaited<ReturnType<typeof joseKey>>;

/** A proof made with jose: valid for `htu` unless told otherwise. */
async function joseProof(
  key: JoseKey,
  htu: string,
  options: {
    claims?: Record<string, unknown>;
    header?: Record<string, unknown>;
    signWith?: JoseKey;
  } = {},
): Promise<string> {
  return await new SignJWT({
    jti: crypto.randomUUID(),
    htm: "POST",
    htu,
    iat: Math.floor(Date.now() / 1000),
    ...options.claims,
  })
    .setProtectedHeader({ alg: key.alg, typ: "dpop+jwt", jwk: key.jwk, ...options.header })
    .sign((options.signWith ?? key).privateKey);
}

/** A JWS put together by hand, for what jose will not sign. */
function handMade(header: unknown, claims: unknown, signature: string): string {
  const part = (v: unknown) =>
    new TextEncoder().encode(JSON.stringify(v)).toBase64({
      alphabet: "base64url",
      omitPadding: true,
    });
  return `${part(header)}.${part(claims)}.${signature}`;
}

/** A token request made by hand: its status, body and DPoP-Nonce header. */
async function tokenRequest(
  endpoint: string,
  form: Record<string, string>,
  options: { basic?: [string, string]; dpop?: string | string[] } = {},
) {
  const headers = new Headers({ "content-type": "application/x-www-form-urlencoded" });
  if (options.basic) headers.set("authorization", `Basic ${btoa(options.basic.join(":"))}`);
  for (const proof of [options.dpop ?? []].flat()) headers.append("dpop", proof);
  const res = await fetch(endpoint, { method: "POST", headers, body: new URLSearchParams(form) });
  const body = await res.json();
  return { status: res.status, body, nonce: res.headers.get("dpop-nonce") };
}

/** A project with a config, and a function making its clients (and a secret for web ones). */
async function project(stack: Pick<Stack, "gatewayUrl" | "token">, id: string) {
  const api = httpClient(stack.gatewayUrl);
  const admin = await stack.token({ sub: "admin", projects: [id] });
  const config = await api("PATCH", `/v1/projects/${id}/config`, {
    token: admin,
    json: { application_name: "DPoP app", audience: "external" },
  });
  assert.equal(config.status, 200, config.text);
  return async (json: Record<string, unknown>) => {
    const client = await api("POST", `/v1/projects/${id}/clients`, { token: admin, json });
    assert.equal(client.status, 201, client.text);
    if (json.type !== "web") return { id: client.body.id as string, secret: "", body: client.body };
    const secret = await api("POST", `/v1/projects/${id}/clients/${client.body.id}/secrets`, {
      token: admin,
    });
    assert.equal(secret.status, 201, secret.text);
    return {
      id: client.body.id as string,
      secret: secret.body.secret as string,
      body: client.body,
    };
  };
}

Deno.test("DPoP with a stock client: bound tokens, refresh, introspection, hostile proofs", async (t) => {
  const stack = await startStack();
  const issuer = new URL(stack.gatewayUrl);
  const userToken = await stack.token({ sub: "user-1", accountId: "acct-1", projects: [] });
  try {
    const newClient = await project(stack, "dp1");
    const web = await newClient({
      name: "web",
      type: "web",
      redirect_uris: ["https://w.example/cb"],
    });
    const spa = await newClient({
      name: "spa",
      type: "spa",
      redirect_uris: ["https://s.example/cb"],
    });
    const as = await discover(issuer);
    const endpoint = as.token_endpoint!;
    const webAuth = oauth.ClientSecretBasic(web.secret);
    const introspect = async (token: string) =>
      await oauth.processIntrospectionResponse(
        as,
        { client_id: web.id },
        await oauth.introspectionRequest(as, { client_id: web.id }, webAuth, token, insecure),
      );
    /** oauth4webapi redeems a code of the spa client with a proof of `dpop`'s key. */
    const redeemWith = async (
      callback: URLSearchParams,
      redirect: string,
      verifier: string,
      dpop: oauth.DPoPHandle,
    ) =>
      await oauth.processAuthorizationCodeResponse(
        as,
        { client_id: spa.id },
        await oauth.authorizationCodeGrantRequest(
          as,
          { client_id: spa.id },
          oauth.None(),
          callback,
          redirect,
          verifier,
          { DPoP: dpop, ...insecure },
        ),
      );
    const rs: ResourceServer = {
      jwks: createRemoteJWKSet(new URL(as.jwks_uri!)),
      issuer: as.issuer,
      audience: "dp1",
      seen: new Set(),
    };

    await t.step("discovery names the DPoP algorithms", () => {
      assert.deepEqual(as.dpop_signing_alg_values_supported, ["EdDSA", "Ed25519", "ES256"]);
      assert.deepEqual(
        as.dpop_signing_alg_values_supported,
        dpopAlgorithms,
        "what the service takes",
      );
    });

    let bound = { token: "", jkt: "", dpop: undefined as unknown as oauth.DPoPHandle };
    await t.step(
      "client_credentials with a DPoP proof: a DPoP-bound token (ES256 and EdDSA)",
      async () => {
        for (const alg of ["ES256", "EdDSA"]) {
          const dpop = oauth.DPoP({}, await oauth.generateKeyPair(alg));
          const res = await oauth.clientCredentialsGrantRequest(
            as,
            { client_id: web.id },
            webAuth,
            new URLSearchParams({ scope: "read" }),
            { DPoP: dpop, ...insecure },
          );
          assert.equal(res.headers.get("dpop-nonce"), null, "nonces are off");
          const body = await oauth.processClientCredentialsResponse(as, { client_id: web.id }, res);
          assert.equal(body.token_type, "dpop", alg);
          const jkt = await dpop.calculateThumbprint();
          const info = await introspect(body.access_token);
          assert.equal(info.active, true);
          assert.equal(info.token_type, "DPoP");
          assert.deepEqual(info.cnf, { jkt }, alg);
          bound = { token: body.access_token, jkt, dpop };
        }
        // Without a proof: a bearer token, no cnf.
        const plain = await oauth.processClientCredentialsResponse(
          as,
          { client_id: web.id },
          await oauth.clientCredentialsGrantRequest(
            as,
            { client_id: web.id },
            webAuth,
            {},
            insecure,
          ),
        );
        assert.equal(plain.token_type, "bearer");
        const info = await introspect(plain.access_token);
        assert.equal(info.token_type, "Bearer");
        assert.equal(info.cnf, undefined);
      },
    );

    await t.step("a resource server's check of a bound token (checkDpopRequest)", async () => {
      const api = "https://api.example.com/photos?page=2";
      const req = await resourceRequest(bound.token, api, bound.dpop);
      assert.match(req.headers.get("authorization")!, /^DPoP /);
      const claims = await checkDpopRequest(req, rs);
      assert.equal(claims.client_id, web.id);
      assert.deepEqual(claims.cnf, { jkt: bound.jkt });
      // The stock library's own resource-server check agrees.
      const again = await resourceRequest(bound.token, api, bound.dpop);
      const stock = await oauth.validateJwtAccessToken(as, again, "dp1", {
        requireDPoP: true,
        ...insecure,
      });
      assert.deepEqual(stock.cnf, { jkt: bound.jkt });
      // What it refuses.
      const refused = async (what: string, req: Request, message: RegExp) => {
        await assert.rejects(checkDpopRequest(req, rs), message, what);
      };
      await refused("the same request again", req, /used before/);
      const stranger = oauth.DPoP({}, await oauth.generateKeyPair("EdDSA"));
      await refused(
        "a proof of another key",
        await resourceRequest(bound.token, api, stranger),
        /cnf\.jkt/,
      );
      const other = await oauth.processClientCredentialsResponse(
        as,
        { client_id: web.id },
        await oauth.clientCredentialsGrantRequest(as, { client_id: web.id }, webAuth, {}, {
          DPoP: bound.dpop,
          ...insecure,
        }),
      );
      const swapped = await resourceRequest(other.access_token, api, bound.dpop);
      swapped.headers.set("authorization", `DPoP ${bound.token}`);
      await refused("a proof made for another token", swapped, /ath/);
      const post = await resourceRequest(bound.token, api, bound.dpop, "POST");
      await refused(
        "a proof of another method",
        new Request(api, { method: "GET", headers: post.headers }),
        /htm, htu/,
      );
      const elsewhere = await resourceRequest(
        bound.token,
        "https://api.example.com/other",
        bound.dpop,
      );
      await refused(
        "a proof of another URL",
        new Request(api, { headers: elsewhere.headers }),
        /htu/,
      );
      const asBearer = await resourceRequest(bound.token, api, bound.dpop);
      asBearer.headers.set("authorization", `Bearer ${bound.token}`);
      await refused("the bound token as a bearer token", asBearer, /not a DPoP access token/);
      const bearerToken = await oauth.processClientCredentialsResponse(
        as,
        { client_id: web.id },
        await oauth.clientCredentialsGrantRequest(as, { client_id: web.id }, webAuth, {}, insecure),
      );
      await refused(
        "an unbound token with a proof",
        await resourceRequest(bearerToken.access_token, api, bound.dpop),
        /not DPoP-bound/,
      );
    });

    let spaRefresh = "";
    let spaDpop!: oauth.DPoPHandle;
    let installationId = "";
    await t.step(
      "authorization_code + refresh_token for a public client, bound to its key",
      async () => {
        spaDpop = oauth.DPoP({}, await oauth.generateKeyPair("ES256"));
        const jkt = await spaDpop.calculateThumbprint();
        const verifier = oauth.generateRandomCodeVerifier();
        const params = {
          response_type: "code",
          client_id: spa.id,
          redirect_uri: "https://s.example/cb",
          scope: "photos.read",
          state: "st",
          code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
          code_challenge_method: "S256",
          // The page every time, even when the user's consent is remembered.
          prompt: "consent",
        };
        const callback = oauth.validateAuthResponse(
          as,
          { client_id: spa.id },
          await allowOnConsentPage(as.authorization_endpoint!, params, userToken),
          "st",
        );
        const tokens = await redeemWith(callback, "https://s.example/cb", verifier, spaDpop);
        assert.equal(tokens.token_type, "dpop");
        const info = await introspect(tokens.access_token);
        assert.deepEqual([info.token_type, info.cnf], ["DPoP", { jkt }]);
        installationId = info.installation_id as string;
        assert.ok(installationId);
        // Refreshed with a proof of the same key: a new bound token and a new refresh token.
        const refreshed = await oauth.processRefreshTokenResponse(
          as,
          { client_id: spa.id },
          await oauth.refreshTokenGrantRequest(
            as,
            { client_id: spa.id },
            oauth.None(),
            tokens.refresh_token!,
            { DPoP: spaDpop, ...insecure },
          ),
        );
        assert.equal(refreshed.token_type, "dpop");
        assert.notEqual(refreshed.refresh_token, tokens.refresh_token);
        assert.deepEqual((await introspect(refreshed.access_token)).cnf, { jkt });
        assert.deepEqual(
          (await introspect(refreshed.refresh_token!)).cnf,
          { jkt },
          "and its refresh token",
        );
        spaRefresh = refreshed.refresh_token!;
      },
    );

    await t.step(
      "a code is bound to the key of its pushed request's proof (RFC 9449 10.1) or of dpop_jkt",
      async () => {
        const redirect = "https://s.example/cb";
        const pkce = async () => {
          const verifier = oauth.generateRandomCodeVerifier();
          return { verifier, challenge: await oauth.calculatePKCECodeChallenge(verifier) };
        };
        const request = (challenge: string) => ({
          response_type: "code",
          redirect_uri: redirect,
          scope: "photos.read",
          state: "bound",
          code_challenge: challenge,
          code_challenge_method: "S256",
          prompt: "consent",
        });
        /** The browser: the consent page of `query`, then Allow; the code. */
        const allow = async (query: Record<string, string>) =>
          oauth.validateAuthResponse(
            as,
            { client_id: spa.id },
            await allowOnConsentPage(as.authorization_endpoint!, query, userToken),
            "bound",
          );
        /** What the token endpoint answers the code with `dpop` (a proof or none). */
        const redeem = (code: URLSearchParams, verifier: string, dpop?: string) =>
          tokenRequest(endpoint, {
            grant_type: "authorization_code",
            client_id: spa.id,
            code: code.get("code")!,
            redirect_uri: redirect,
            code_verifier: verifier,
          }, dpop === undefined ? {} : { dpop });
        const stranger = await joseKey();
        const par = as.pushed_authorization_request_endpoint!;

        // A stock client's PAR with DPoP: the code needs a proof of that key.
        const key = oauth.DPoP({}, await oauth.generateKeyPair("EdDSA"));
        const pushedPkce = await pkce();
        const pushed = await oauth.processPushedAuthorizationResponse(
          as,
          { client_id: spa.id },
          await oauth.pushedAuthorizationRequest(
            as,
            { client_id: spa.id },
            oauth.None(),
            request(pushedPkce.challenge),
            { DPoP: key, ...insecure },
          ),
        );
        const code = await allow({ client_id: spa.id, request_uri: pushed.request_uri });
        const none = await redeem(code, pushedPkce.verifier);
        assert.deepEqual([none.status, none.body.error], [400, "invalid_grant"], "no proof");
        const other = await redeem(code, pushedPkce.verifier, await joseProof(stranger, endpoint));
        assert.deepEqual([other.status, other.body.error], [400, "invalid_grant"], "another key");
        // Neither spent it: the key's holder redeems it.
        const tokens = await redeemWith(code, redirect, pushedPkce.verifier, key);
        assert.equal(tokens.token_type, "dpop");
        assert.deepEqual((await introspect(tokens.access_token)).cnf, {
          jkt: await key.calculateThumbprint(),
        });

        // A bad proof at PAR is refused as at the token endpoint, and nothing is kept.
        const pushByHand = async (form: Record<string, string>, dpop?: string) => {
          const res = await fetch(par, {
            method: "POST",
            headers: {
              "content-type": "application/x-www-form-urlencoded",
              ...(dpop === undefined ? {} : { dpop }),
            },
            body: new URLSearchParams({ client_id: spa.id, ...form }),
          });
          return { status: res.status, body: await res.json() };
        };
        const { verifier, challenge } = await pkce();
        const badProofs: [string, string][] = [
          ["htm GET", await joseProof(stranger, par, { claims: { htm: "GET" } })],
          ["htu the token endpoint", await joseProof(stranger, endpoint)],
          ["not a JWT", "not-a-jwt"],
        ];
        for (const [what, proof] of badProofs) {
          const res = await pushByHand(request(challenge), proof);
          assert.deepEqual([res.status, res.body.error], [400, "invalid_dpop_proof"], what);
          assert.equal(res.body.request_uri, undefined, what);
        }
        // dpop_jkt: well formed, and the proof's key's when both are given.
        const refused = [
          ["a dpop_jkt of another key than the proof's", { dpop_jkt: stranger.jkt }, true],
          ["a dpop_jkt too short", { dpop_jkt: stranger.jkt.slice(1) }, false],
          ["a dpop_jkt not base64url", { dpop_jkt: `${stranger.jkt.slice(1)}=` }, false],
        ] as const;
        for (const [what, extra, withProof] of refused) {
          const proof = withProof ? await joseProof(await joseKey(), par) : undefined;
          const res = await pushByHand({ ...request(challenge), ...extra }, proof);
          assert.deepEqual([res.status, res.body.error], [400, "invalid_request"], what);
        }
        // dpop_jkt alone at PAR binds the code the same way.
        const byJkt = await pushByHand({ ...request(challenge), dpop_jkt: stranger.jkt });
        assert.equal(byJkt.status, 201, JSON.stringify(byJkt.body));
        const jktCode = await allow({ client_id: spa.id, request_uri: byJkt.body.request_uri });
        const wrong = await redeem(jktCode, verifier, await joseProof(await joseKey(), endpoint));
        assert.deepEqual([wrong.status, wrong.body.error], [400, "invalid_grant"]);
        const right = await redeem(jktCode, verifier, await joseProof(stranger, endpoint));
        assert.deepEqual([right.status, right.body.token_type], [200, "DPoP"]);

        // dpop_jkt on a front-channel authorization request (RFC 9449 10).
        const front = await pkce();
        const frontCode = await allow({
          client_id: spa.id,
          ...request(front.challenge),
          dpop_jkt: stranger.jkt,
        });
        const bare = await redeem(frontCode, front.verifier);
        assert.deepEqual([bare.status, bare.body.error], [400, "invalid_grant"]);
        const good = await redeem(frontCode, front.verifier, await joseProof(stranger, endpoint));
        assert.deepEqual([good.status, good.body.token_type], [200, "DPoP"]);
        const malformed = await fetch(
          `${as.authorization_endpoint}?${new URLSearchParams({
            client_id: spa.id,
            ...request(front.challenge),
            dpop_jkt: "short",
          })}`,
          { redirect: "manual", headers: { cookie: `session=${userToken}` } },
        );
        await malformed.body?.cancel();
        assert.equal(malformed.status, 302);
        const location = new URL(malformed.headers.get("location")!);
        assert.equal(location.origin + location.pathname, redirect);
        assert.deepEqual(
          [location.searchParams.get("error"), location.searchParams.get("state")],
          ["invalid_request", "bound"],
        );
        assert.equal(location.searchParams.get("iss"), as.issuer);
      },
    );

    await t.step(
      "a bound refresh token: refused without a proof, or with another key's",
      async () => {
        const form = { grant_type: "refresh_token", refresh_token: spaRefresh, client_id: spa.id };
        const none = await tokenRequest(endpoint, form);
        assert.deepEqual([none.status, none.body.error], [400, "invalid_dpop_proof"]);
        const stranger = await joseKey("ES256");
        const other = await tokenRequest(endpoint, form, {
          dpop: await joseProof(stranger, endpoint),
        });
        assert.deepEqual([other.status, other.body.error], [400, "invalid_grant"]);
        // Neither spent it: its key's holder refreshes.
        const res = await oauth.processRefreshTokenResponse(
          as,
          { client_id: spa.id },
          await oauth.refreshTokenGrantRequest(
            as,
            { client_id: spa.id },
            oauth.None(),
            spaRefresh,
            {
              DPoP: spaDpop,
              ...insecure,
            },
          ),
        );
        assert.equal(res.token_type, "dpop");
      },
    );

    await t.step("token exchange keeps the binding, and needs the same key", async () => {
      const key = await joseKey();
      const subject = await tokenRequest(endpoint, { grant_type: "client_credentials" }, {
        basic: [web.id, web.secret],
        dpop: await joseProof(key, endpoint),
      });
      assert.equal(subject.status, 200, JSON.stringify(subject.body));
      assert.equal(subject.body.token_type, "DPoP");
      const form = {
        grant_type: exchangeGrant,
        subject_token: subject.body.access_token,
        subject_token_type: accessTokenType,
        audience: installationId,
      };
      const basic: [string, string] = [web.id, web.secret];
      const none = await tokenRequest(endpoint, form, { basic });
      assert.deepEqual([none.status, none.body.error], [400, "invalid_dpop_proof"]);
      const other = await tokenRequest(endpoint, form, {
        basic,
        dpop: await joseProof(await joseKey(), endpoint),
      });
      assert.deepEqual([other.status, other.body.error], [400, "invalid_request"]);
      const same = await tokenRequest(endpoint, form, {
        basic,
        dpop: await joseProof(key, endpoint),
      });
      assert.equal(same.status, 200, JSON.stringify(same.body));
      assert.equal(same.body.token_type, "DPoP");
      const info = await introspect(same.body.access_token);
      assert.deepEqual(info.cnf, { jkt: key.jkt });
      assert.deepEqual(info.act, { sub: web.id });
    });

    await t.step("hostile proofs are each refused with invalid_dpop_proof", async () => {
      const key = await joseKey();
      const form = { grant_type: "client_credentials" };
      const basic: [string, string] = [web.id, web.secret];
      const now = Math.floor(Date.now() / 1000);
      const send = (dpop: string | string[]) => tokenRequest(endpoint, form, { basic, dpop });
      // The control: the same construction, unaltered, is accepted.
      const control = await send(await joseProof(key, endpoint));
      assert.equal(control.status, 200, JSON.stringify(control.body));
      const replayed = await joseProof(key, endpoint);
      assert.equal((await send(replayed)).status, 200);
      // typ is a media type: any case, and application/ before it or not (RFC 7515 4.1.9).
      for (const typ of ["DPoP+JWT", "application/dpop+jwt"]) {
        const res = await send(await joseProof(key, endpoint, { header: { typ } }));
        assert.deepEqual([res.status, res.body.token_type], [200, "DPoP"], typ);
      }
      const other = await joseKey();
      const privateJwk = await exportJWK(key.privateKey) as JWK;
      // A "key" of small order, the neutral element (y = 1): R = (0, 1) and S = 0 would verify
      // every message under it, without any private key.
      const identity = new Uint8Array(32);
      identity[0] = 1;
      const b64u = (bytes: Uint8Array) =>
        bytes.toBase64({ alphabet: "base64url", omitPadding: true });
      const forged = handMade(
        { typ: "dpop+jwt", alg: "EdDSA", jwk: { kty: "OKP", crv: "Ed25519", x: b64u(identity) } },
        { jti: crypto.randomUUID(), htm: "POST", htu: endpoint, iat: now },
        b64u(Uint8Array.from([...identity, ...new Uint8Array(32)])),
      );
      // The key's x spelled another way: the last character's two unused bits set.
      const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
      const x = key.jwk.x!;
      const respelled = x.slice(0, -1) + alphabet[alphabet.indexOf(x.at(-1)!) ^ 1];
      // Claims whose jti holds 0xFF, which is not UTF-8, signed with the key.
      const claimBytes = new TextEncoder().encode(
        JSON.stringify({ jti: `${crypto.randomUUID()}@`, htm: "POST", htu: endpoint, iat: now }),
      );
      claimBytes[claimBytes.indexOf(0x40)] = 0xff;
      const notUtf8 = await new CompactSign(claimBytes)
        .setProtectedHeader({ alg: key.alg, typ: "dpop+jwt", jwk: key.jwk })
        .sign(key.privateKey);
      const cases: [string, string | string[]][] = [
        ["another URL (htu)", await joseProof(key, `${stack.gatewayUrl}/oauth2/revoke`)],
        ["another origin (htu)", await joseProof(key, "https://evil.example/oauth2/token")],
        ["another method (htm)", await joseProof(key, endpoint, { claims: { htm: "GET" } })],
        ["a stale iat", await joseProof(key, endpoint, { claims: { iat: now - 400 } })],
        ["an iat in the future", await joseProof(key, endpoint, { claims: { iat: now + 120 } })],
        ["a replayed jti", replayed],
        [
          "alg none",
          handMade({ alg: "none", typ: "dpop+jwt", jwk: key.jwk }, {
            jti: crypto.randomUUID(),
            htm: "POST",
            htu: endpoint,
            iat: now,
          }, ""),
        ],
        [
          "HS256",
          await new SignJWT({ jti: crypto.randomUUID(), htm: "POST", htu: endpoint, iat: now })
            .setProtectedHeader({ alg: "HS256", typ: "dpop+jwt", jwk: key.jwk })
            .sign(new Uint8Array(32)),
        ],
        ["a private jwk", await joseProof(key, endpoint, { header: { jwk: privateJwk } })],
        ["typ JWT", await joseProof(key, endpoint, { header: { typ: "JWT" } })],
        [
          "typ application/jwt",
          await joseProof(key, endpoint, { header: { typ: "application/jwt" } }),
        ],
        ["a jwk of small order, and a signature made without a key", forged],
        [
          "a jwk spelled another way (one key, two jkt)",
          await joseProof(key, endpoint, { header: { jwk: { ...key.jwk, x: respelled } } }),
        ],
        ["claims that are not UTF-8", notUtf8],
        ["signed by another key than its jwk", await joseProof(key, endpoint, { signWith: other })],
        ["two DPoP headers", [await joseProof(key, endpoint), await joseProof(key, endpoint)]],
        ["not a JWT", "not-a-jwt"],
      ];
      for (const [what, proof] of cases) {
        const res = await send(proof);
        assert.deepEqual([res.status, res.body.error], [400, "invalid_dpop_proof"], what);
        assert.equal(typeof res.body.error_description, "string", what);
      }
    });

    await t.step("a client registered with dpop_bound_access_tokens needs a proof", async () => {
      const strict = await newClient({
        name: "strict",
        type: "web",
        redirect_uris: ["https://x.example/cb"],
        dpop_bound_access_tokens: true,
      });
      assert.equal(strict.body.dpop_bound_access_tokens, true, JSON.stringify(strict.body));
      const basic: [string, string] = [strict.id, strict.secret];
      const none = await tokenRequest(endpoint, { grant_type: "client_credentials" }, { basic });
      assert.deepEqual([none.status, none.body.error], [400, "invalid_dpop_proof"]);
      const key = await joseKey("ES256");
      const ok = await tokenRequest(endpoint, { grant_type: "client_credentials" }, {
        basic,
        dpop: await joseProof(key, endpoint),
      });
      assert.deepEqual([ok.status, ok.body.token_type], [200, "DPoP"]);
    });
  } finally {
    await stack.stop();
  }
});

Deno.test("DPoP nonces (DPOP_NONCE_REQUIRED): use_dpop_nonce, then a retry with the nonce", async (t) => {
  const stack = await startStack({ processEnv: { token: { DPOP_NONCE_REQUIRED: "true" } } });
  const issuer = new URL(stack.gatewayUrl);
  try {
    const web = await (await project(stack, "dn1"))({
      name: "web",
      type: "web",
      redirect_uris: ["https://w.example/cb"],
    });
    const as = await discover(issuer);
    const endpoint = as.token_endpoint!;
    const webAuth = oauth.ClientSecretBasic(web.secret);

    await t.step(
      "oauth4webapi: the first attempt gets use_dpop_nonce, its retry succeeds",
      async () => {
        const dpop = oauth.DPoP({}, await oauth.generateKeyPair("EdDSA"));
        const attempt = async () =>
          await oauth.processClientCredentialsResponse(
            as,
            { client_id: web.id },
            await oauth.clientCredentialsGrantRequest(as, { client_id: web.id }, webAuth, {}, {
              DPoP: dpop,
              ...insecure,
            }),
          );
        const first = await attempt().then(() => undefined, (e) => e);
        assert.ok(oauth.isDPoPNonceError(first), String(first));
        const body = await attempt();
        assert.equal(body.token_type, "dpop");
        // The nonce it was given stays good: the next request needs no retry.
        assert.equal((await attempt()).token_type, "dpop");
      },
    );

    await t.step("PAR with DPoP: use_dpop_nonce, then the stock client's retry", async () => {
      const dpop = oauth.DPoP({}, await oauth.generateKeyPair("EdDSA"));
      const verifier = oauth.generateRandomCodeVerifier();
      const attempt = async () =>
        await oauth.processPushedAuthorizationResponse(
          as,
          { client_id: web.id },
          await oauth.pushedAuthorizationRequest(
            as,
            { client_id: web.id },
            webAuth,
            {
              response_type: "code",
              redirect_uri: "https://w.example/cb",
              code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
              code_challenge_method: "S256",
            },
            { DPoP: dpop, ...insecure },
          ),
        );
      const first = await attempt().then(() => undefined, (e) => e);
      assert.ok(oauth.isDPoPNonceError(first), String(first));
      const pushed = await attempt();
      assert.match(pushed.request_uri, /^urn:ietf:params:oauth:request_uri:/);
    });

    await t.step("by hand: the nonce in DPoP-Nonce, on errors and successes", async () => {
      const key = await joseKey();
      const basic: [string, string] = [web.id, web.secret];
      const form = { grant_type: "client_credentials" };
      const without = await tokenRequest(endpoint, form, {
        basic,
        dpop: await joseProof(key, endpoint),
      });
      assert.deepEqual([without.status, without.body.error], [400, "use_dpop_nonce"]);
      assert.match(without.nonce ?? "", /^[A-Za-z0-9_-]{54}$/);
      const madeUp = await tokenRequest(endpoint, form, {
        basic,
        dpop: await joseProof(key, endpoint, { claims: { nonce: "AAAA" } }),
      });
      assert.deepEqual([madeUp.status, madeUp.body.error], [400, "use_dpop_nonce"]);
      const ok = await tokenRequest(endpoint, form, {
        basic,
        dpop: await joseProof(key, endpoint, { claims: { nonce: without.nonce } }),
      });
      assert.deepEqual([ok.status, ok.body.token_type], [200, "DPoP"]);
      assert.equal(ok.nonce, without.nonce, "the same nonce within its window");
      // The bound token exchanged without a proof: refused by the grant, and told the nonce too,
      // as every invalid_dpop_proof is.
      const unproven = await tokenRequest(endpoint, {
        grant_type: exchangeGrant,
        subject_token: ok.body.access_token,
        subject_token_type: accessTokenType,
        audience: "ins_any",
      }, { basic });
      assert.deepEqual([unproven.status, unproven.body.error, unproven.nonce], [
        400,
        "invalid_dpop_proof",
        without.nonce,
      ]);
      const bad = await tokenRequest(endpoint, form, {
        basic,
        dpop: await joseProof(key, endpoint, { claims: { nonce: without.nonce, htm: "GET" } }),
      });
      assert.deepEqual([bad.status, bad.body.error, bad.nonce], [
        400,
        "invalid_dpop_proof",
        without.nonce,
      ]);
      // Two DPoP headers are refused with the nonce as well.
      const two = await tokenRequest(endpoint, form, {
        basic,
        dpop: [
          await joseProof(key, endpoint, { claims: { nonce: without.nonce } }),
          await joseProof(key, endpoint, { claims: { nonce: without.nonce } }),
        ],
      });
      assert.deepEqual([two.status, two.body.error, two.nonce], [
        400,
        "invalid_dpop_proof",
        without.nonce,
      ]);
      // A bearer token request needs no proof, and is told the nonce too.
      const bearer = await tokenRequest(endpoint, form, { basic });
      assert.deepEqual([bearer.status, bearer.body.token_type], [200, "Bearer"]);
      assert.equal(bearer.nonce, without.nonce);
    });

    await t.step("a browser app may send DPoP and read DPoP-Nonce (CORS)", async () => {
      const origin = "https://spa.example";
      const spa = await (await project(stack, "dn2"))({
        name: "spa",
        type: "spa",
        redirect_uris: [`${origin}/cb`],
        javascript_origins: [origin],
      });
      const preflight = await fetch(endpoint, {
        method: "OPTIONS",
        headers: {
          origin,
          "access-control-request-method": "POST",
          "access-control-request-headers": "content-type, dpop",
        },
      });
      await preflight.body?.cancel();
      assert.equal(preflight.headers.get("access-control-allow-origin"), origin);
      assert.match(preflight.headers.get("access-control-allow-headers") ?? "", /\bDPoP\b/);
      const key = await joseKey();
      const res = await fetch(endpoint, {
        method: "POST",
        headers: {
          origin,
          "content-type": "application/x-www-form-urlencoded",
          dpop: await joseProof(key, endpoint),
        },
        body: new URLSearchParams({
          grant_type: "refresh_token",
          refresh_token: "ort_unknown",
          client_id: spa.id,
        }),
      });
      assert.deepEqual([res.status, (await res.json()).error], [400, "use_dpop_nonce"]);
      assert.match(res.headers.get("dpop-nonce") ?? "", /^[A-Za-z0-9_-]{54}$/);
      assert.equal(res.headers.get("access-control-allow-origin"), origin);
      assert.match(res.headers.get("access-control-expose-headers") ?? "", /\bDPoP-Nonce\b/);
    });
  } finally {
    await stack.stop();
  }
});

Deno.test("a public client's proof is spent only once its grant is found good: a made-up one leaves no row", async (t) => {
  const stack = await startStack();
  const issuer = new URL(stack.gatewayUrl);
  const sql = postgres(stack.databaseUrl, { max: 1, onnotice: () => {} });
  const userToken = await stack.token({ sub: "user-1", accountId: "acct-1", projects: [] });
  try {
    const spa = await (await project(stack, "dj1"))({
      name: "spa",
      type: "spa",
      redirect_uris: ["https://s.example/cb"],
    });
    const as = await discover(issuer);
    const endpoint = as.token_endpoint!;
    const rows = async () =>
      (await sql<{ n: number }[]>`select count(*)::int as n from token.used_jtis`)[0]!.n;
    /** What the token endpoint answers `form` of the spa client with `proof`, and the rows it left. */
    const send = async (form: Record<string, string>, proof: string) => {
      const before = await rows();
      const res = await tokenRequest(endpoint, { client_id: spa.id, ...form }, { dpop: proof });
      return { ...res, added: (await rows()) - before };
    };
    const redirect = "https://s.example/cb";
    /** A code of the spa client, through the consent page, and its verifier. */
    const newCode = async () => {
      const verifier = oauth.generateRandomCodeVerifier();
      const callback = oauth.validateAuthResponse(
        as,
        { client_id: spa.id },
        await allowOnConsentPage(as.authorization_endpoint!, {
          response_type: "code",
          client_id: spa.id,
          redirect_uri: redirect,
          scope: "photos.read",
          state: "st",
          code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
          code_challenge_method: "S256",
          prompt: "consent",
        }, userToken),
        "st",
      );
      return {
        grant_type: "authorization_code",
        code: callback.get("code")!,
        redirect_uri: redirect,
        code_verifier: verifier,
      };
    };
    const key = await joseKey();

    await t.step("a made-up refresh token, code or device code with a fresh proof", async () => {
      const madeUp: [string, Record<string, string>][] = [
        ["refresh token", { grant_type: "refresh_token", refresh_token: `ort_${"A".repeat(43)}` }],
        ["code", { ...(await newCode()), code: "made-up" }],
        [
          "device code",
          { grant_type: "urn:ietf:params:oauth:grant-type:device_code", device_code: "odc_x" },
        ],
      ];
      for (const [what, form] of madeUp) {
        const res = await send(form, await joseProof(await joseKey(), endpoint));
        assert.deepEqual([res.status, res.body.error], [400, "invalid_grant"], what);
        assert.equal(res.added, 0, `${what}: no row in token.used_jtis`);
      }
    });

    let refreshToken = "";
    await t.step("a real code: its proof is spent, and a replay of it spends nothing", async () => {
      const proof = await joseProof(key, endpoint);
      const first = await send(await newCode(), proof);
      assert.deepEqual([first.status, first.body.token_type], [200, "DPoP"]);
      assert.equal(first.added, 1, "the proof's jti is recorded");
      const code = await newCode();
      const replay = await send(code, proof);
      assert.deepEqual([replay.status, replay.body.error], [400, "invalid_dpop_proof"]);
      assert.equal(replay.added, 0);
      // The code was not spent by the refused request.
      const redeemed = await send(code, await joseProof(key, endpoint));
      assert.deepEqual([redeemed.status, redeemed.added], [200, 1]);
      refreshToken = redeemed.body.refresh_token;
    });

    await t.step("a real refresh token: the same", async () => {
      const proof = await joseProof(key, endpoint);
      const form = { grant_type: "refresh_token", refresh_token: refreshToken };
      const first = await send(form, proof);
      assert.deepEqual([first.status, first.body.token_type, first.added], [200, "DPoP", 1]);
      const next = { ...form, refresh_token: first.body.refresh_token };
      const replay = await send(next, proof);
      assert.deepEqual([replay.status, replay.body.error], [400, "invalid_dpop_proof"]);
      assert.equal(replay.added, 0);
      const refreshed = await send(next, await joseProof(key, endpoint));
      assert.deepEqual([refreshed.status, refreshed.added], [200, 1], "the token was not spent");
      // The bound token with another key's fresh proof is refused, and leaves no row.
      const stranger = await send(
        { ...form, refresh_token: refreshed.body.refresh_token },
        await joseProof(await joseKey(), endpoint),
      );
      assert.deepEqual([stranger.status, stranger.body.error, stranger.added], [
        400,
        "invalid_grant",
        0,
      ]);
    });

    await t.step("PAR: a public client's proof is spent once its request passes", async () => {
      const par = as.pushed_authorization_request_endpoint!;
      const push = async (redirectUri: string, proof: string) => {
        const before = await rows();
        const res = await fetch(par, {
          method: "POST",
          headers: { "content-type": "application/x-www-form-urlencoded", dpop: proof },
          body: new URLSearchParams({
            client_id: spa.id,
            response_type: "code",
            redirect_uri: redirectUri,
            code_challenge: await oauth.calculatePKCECodeChallenge("v".repeat(43)),
            code_challenge_method: "S256",
          }),
        });
        return { status: res.status, body: await res.json(), added: (await rows()) - before };
      };
      const refused = await push("https://evil.example/cb", await joseProof(key, par));
      assert.deepEqual([refused.status, refused.added], [400, 0], JSON.stringify(refused.body));
      const proof = await joseProof(key, par);
      const kept = await push(redirect, proof);
      assert.deepEqual([kept.status, kept.added], [201, 1], JSON.stringify(kept.body));
      const replay = await push(redirect, proof);
      assert.deepEqual([replay.status, replay.body.error, replay.added], [
        400,
        "invalid_dpop_proof",
        0,
      ]);
    });
  } finally {
    await sql.end();
    await stack.stop();
  }
});
