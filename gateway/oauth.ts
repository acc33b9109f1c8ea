/**
 * The OAuth 2 endpoints of the authorization server, on the token service (TokenService over
 * gRPC): what the RFCs define, so that stock OAuth clients work unchanged.
 *
 * - `GET /.well-known/oauth-authorization-server`: metadata (RFC 8414), built here from ISSUER_URL;
 * - `GET /oauth2/authorize` (RFC 6749 4.1.1): the consent page (./consent_page.ts) for the user
 *   signed in with the `session` cookie (the platform token), and `POST /oauth2/authorize`, the
 *   page's form: Allow or Deny, answered with a redirect to the client (303). Without a valid
 *   session, StartAuthorization is asked without a user first: it checks the request (an unknown
 *   client or redirect URI is the error page, another fault goes back to the client) and answers
 *   `login_required` to the client for `prompt=none` (a pushed request's pushed `prompt` counts,
 *   RFC 9126 4); a request that passes is a redirect to LOGIN_URL with `return_to` (a path when
 *   LOGIN_URL is on the issuer's origin, as `deno task start`'s development sign-in page is; else
 *   the whole URL), or a page saying so. A remembered consent is a redirect with the code at once
 *   (302), no page. The token service decides everything (StartAuthorization, DecideAuthorization);
 *   the gateway renders HTML, because a page is not RPC-shaped and the gateway is where HTTP is
 *   spoken;
 * - `POST /oauth2/device_authorization` (RFC 8628 3.1): a device's device code and user code, a form
 *   endpoint as the token endpoint is; `GET /oauth2/device` and its form's POST: the verification
 *   page (./device_page.ts), for the signed-in user as the consent page is;
 * - `GET /oauth2/jwks`: the public signing keys (RFC 7517), asked of the token service; with
 *   DATABASE_URL, held in memory for as long as the token service says a cache may keep them and
 *   no signing key changes (`token_signing_keys`, followed as the introspections' channels are),
 *   each answer's `max-age` what is left of that; it and the metadata may be read from any origin
 *   (CORS `*`);
 * - `POST /oauth2/token` (RFC 6749 3.2), `POST /oauth2/introspect` (RFC 7662) and
 *   `POST /oauth2/revoke` (RFC 7009): `application/x-www-form-urlencoded` in, RFC JSON out, with
 *   `Cache-Control: no-store`. The token and revocation endpoints answer browser apps on their
 *   registered JavaScript origins (CORS, ./cors.ts); introspection, which is for servers, does not.
 *
 * The gateway only reads the form and the client's credentials (HTTP Basic, whose id and secret are
 * form-urlencoded before base64 as RFC 6749 2.3.1 says, or `client_id`/`client_secret` in the
 * form); the token service decides. Its refusals carry the RFC 6749 error code (see
 * proto/registry/token/v1/token_service.proto) and become `{"error", "error_description"}` (the
 * description kept to RFC 6749's characters, and never quoting the request) with the RFC's status: 401 for `invalid_client` (with `WWW-Authenticate` when the client used Basic),
 * 400 for the others, 503 `temporarily_unavailable` when a service cannot answer. The device
 * authorization and PAR endpoints keep a row for each request, and a public client's id is no
 * secret: each client address (its /64 for IPv6) may make `OAUTH_KEPT_PER_MINUTE` of them without
 * client credentials a minute in this replica, beyond which they are 429 `temporarily_unavailable`
 * with `Retry-After` (a confidential client authenticates, and is not counted).
 *
 * DPoP (RFC 9449): the token and PAR endpoints pass the `DPoP` header's proof (more than one
 * header is `invalid_dpop_proof`) with the endpoint's public URL to the token service, and send the
 * nonce it answers in `DPoP-Nonce` (on success, and with `use_dpop_nonce` and
 * `invalid_dpop_proof`); introspection shows a bound token's `cnf.jkt`. The authorization
 * endpoint and PAR take `dpop_jkt` (RFC 9449 10), which binds the code to a key.
 *
 * @module
 */

import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.ts";
import {
  ClientAuthMethod,
  type ClientCredentials,
  type IntrospectTokenResponse,
  TokenService,
} from "../gen/registry/token/v1/token_service_pb.ts";
import {
  type AuthorizationParams,
  consentPage,
  decisionOf,
  errorPage,
  headOf,
  pageMethods,
  serviceFailurePage,
} from "./consent_page.ts";
import type { IntrospectionCache } from "./introspection_cache.ts";
import type { FeedCache } from "../lib/db/mod.ts";
import type { RateLimiter } from "./rate_limit.ts";
import {
  addressKey,
  assertionSigningAlgs,
  dpopSigningAlgs,
  forwardedForHeader,
  forwardedUserAgentHeader,
  type Logger,
  type MemoryBudget,
  oauthDescription,
  oauthPaths,
  smallRequestBytes,
} from "../lib/platform/mod.ts";
import { type ErrorBody, GuardResponse, maxHeadBytes } from "../lib/transport/mod.ts";
import { createCors } from "./cors.ts";
import { methodNotAllowed } from "./http_errors.ts";
import { createDevicePage, devicePageParams } from "./device_page.ts";

export { oauthPaths };

/** The grant types the token service runs. */
const grantTypes = [
  "authorization_code",
  "refresh_token",
  "client_credentials",
  "urn:ietf:params:oauth:grant-type:token-exchange",
  "urn:ietf:params:oauth:grant-type:device_code",
];

/**
 * The parameters of an authorization request (which the consent form sends back), by the field of
 * TokenService's AuthorizationRequest that carries each.
 */
const authorizationParams = {
  response_type: "responseType",
  client_id: "clientId",
  redirect_uri: "redirectUri",
  scope: "scope",
  state: "state",
  code_challenge: "codeChallenge",
  code_challenge_method: "codeChallengeMethod",
  prompt: "prompt",
  request_uri: "requestUri",
  dpop_jkt: "dpopJkt",
  response_mode: "responseMode",
  request: "request",
} as const;

/**
 * An authorization request's fields from its parameters (absent: empty), and the name of one it
 * gave more than once (empty: none).
 */
function requestOf(params: Map<string, string>, repeatedParameter = "") {
  const fields = Object.fromEntries(
    Object.entries(authorizationParams).map(([name, field]) => [field, params.get(name) ?? ""]),
  ) as Record<(typeof authorizationParams)[keyof typeof authorizationParams], string>;
  return { ...fields, repeatedParameter };
}

/**
 * The parameters whose repeat leaves unknown which client, where or with what state to answer: the
 * request gets the error page, never a redirect (RFC 6749 4.1.2.1). A repeat of any other the
 * endpoint knows goes back to the client as `invalid_request`, once they are checked.
 */
const unanswerableRepeats = new Set([
  "client_id",
  "redirect_uri",
  "request_uri",
  "state",
  "decision",
  "csrf_token",
]);

/** The parameters of a token request, by the field of TokenService's IssueTokenRequest. */
const tokenParams = {
  grant_type: "grantType",
  scope: "scope",
  code: "code",
  redirect_uri: "redirectUri",
  code_verifier: "codeVerifier",
  refresh_token: "refreshToken",
  subject_token: "subjectToken",
  subject_token_type: "subjectTokenType",
  audience: "audience",
  requested_token_type: "requestedTokenType",
  actor_token: "actorToken",
  resource: "resource",
  device_code: "deviceCode",
} as const;

/** How clients authenticate (RFC 8414 `*_endpoint_auth_methods_supported`). */
const authMethods = ["client_secret_basic", "client_secret_post", "private_key_jwt", "none"];

/**
 * The parameters each form of the endpoints knows: each may come once; any other is ignored
 * however often it comes (RFC 6749 3.1, 3.2), and never named in an error.
 */
const clientParams = ["client_id", "client_secret", "client_assertion", "client_assertion_type"];
const knownParams = {
  token: new Set([...Object.keys(tokenParams), ...clientParams]),
  tokenForm: new Set(["token", "token_type_hint", ...clientParams]),
  par: new Set([...Object.keys(authorizationParams), ...clientParams]),
  authorize: new Set([...Object.keys(authorizationParams), "decision", "csrf_token"]),
  deviceAuthorization: new Set(["scope", ...clientParams]),
};

/** The cookie that carries the signed-in user's platform token. */
export const sessionCookie = "session";

/** The largest form accepted: every parameter of every grant fits in far less. */
export const maxFormBytes = 16 * 1024;

/**
 * The largest consent form accepted (`POST /oauth2/authorize`). The page posts the authorization
 * request back as a browser encodes a form, at most three bytes for each byte of the query it came
 * in (`!` is `%21`), and a request line is at most {@link maxHeadBytes}; then the page's CSRF token
 * and decision. Any smaller and a request whose page was shown could not be decided: Allow was 413.
 */
export const maxConsentFormBytes = 3 * maxHeadBytes + 1024;

/** The JWK Set's JSON, and until when (ms since the epoch) it may be given. */
interface Jwks {
  body: string;
  until: number;
}

/** Options of {@link createOAuthEndpoints}. */
export interface OAuthOptions {
  /** The token service. */
  transport: Transport;
  /** The issuer: the gateway's public base URL, without a trailing slash. */
  issuer: string;
  /** Deadline of each call to the token service. */
  rpcTimeoutMs: number;
  /** The process's memory budget. */
  budget: MemoryBudget;
  /** Log of failures of the token service. */
  log: Logger;
  /** Where to send a user who is not signed in (with `return_to`); unset: a page says so. */
  loginUrl?: string | undefined;
  /** Whether every client must push its authorization requests (REQUIRE_PAR, RFC 9126). */
  requirePar?: boolean | undefined;
  /** Active introspections answered from memory (./introspection_cache.ts); unset: none. */
  introspections?: IntrospectionCache | undefined;
  /**
   * Where the JWK Set is kept, following the signing keys' notifications (lib/db/feed_cache.ts);
   * unset: every request asks the token service.
   */
  jwks?: FeedCache | undefined;
  /**
   * The limit on requests that make the token service keep a row (device authorizations, pushed
   * requests), by the client's address ({@link addressKey}); unset: none.
   */
  keptPerAddress?: RateLimiter | undefined;
}

/** The endpoints' handler: a response for an OAuth path, or undefined for any other path. */
export type OAuthEndpoints = (
  req: Request,
  url: URL,
  correlation: { requestId: string; traceparent: string; clientAddress?: string },
) => Promise<{ response: Response; route: string } | undefined>;

/** RFC 6749 5.2 and RFC 7009 error answers. */
class OAuthHttpError extends Error {
  constructor(
    readonly status: number,
    readonly error: string,
    readonly description: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(description);
  }
}

const noStore = { "cache-control": "no-store", pragma: "no-cache" };

function json(body: unknown, status = 200, headers: Record<string, string> = {}): Response {
  return GuardResponse.json(body, { status, headers: { ...noStore, ...headers } });
}

/** A JSON body already serialized, answered as {@link json} answers. */
const jsonTextHeaders = { "content-type": "application/json", ...noStore };

function errorAnswer(e: OAuthHttpError): Response {
  return json(
    { error: e.error, error_description: oauthDescription(e.description) },
    e.status,
    e.headers,
  );
}

/** The endpoints that take a form and answer in RFC 6749's JSON (5.2). */
const formPaths: ReadonlySet<string> = new Set([
  oauthPaths.token,
  oauthPaths.introspect,
  oauthPaths.revoke,
  oauthPaths.deviceAuthorization,
  oauthPaths.par,
]);

/**
 * The body of the answers the public port's guard gives itself (a chunked body 411, a malformed
 * head 400, a head over its limit 431, a body past the memory budget 503) when the request is one
 * to a form endpoint: RFC 6749's `{"error", "error_description"}`, `invalid_request` or
 * `temporarily_unavailable`, so that an OAuth client reads every answer of its endpoint alike.
 */
export function guardErrorBodyFor(path: string): ErrorBody | undefined {
  return formPaths.has(path) ? oauthGuardBody : undefined;
}

const oauthGuardBody: ErrorBody = (code, message) =>
  JSON.stringify({
    error: code === "unavailable"
      ? "temporarily_unavailable"
      : code === "internal"
      ? "server_error"
      : "invalid_request",
    error_description: oauthDescription(message),
  });

/**
 * The metadata and the JWK Set are public documents that a browser app reads first (oauth4webapi's
 * discovery): any origin may read them, as node-oidc-provider and Keycloak allow. No credentials
 * are involved, so `*` is exactly right.
 */
const publicDocument = { "access-control-allow-origin": "*" };

/** Creates the endpoints. */
export function createOAuthEndpoints(options: OAuthOptions): OAuthEndpoints {
  const tokens = createClient(TokenService, options.transport);
  const { issuer } = options;
  const metadata = JSON.stringify({
    issuer,
    authorization_endpoint: issuer + oauthPaths.authorize,
    token_endpoint: issuer + oauthPaths.token,
    jwks_uri: issuer + oauthPaths.jwks,
    introspection_endpoint: issuer + oauthPaths.introspect,
    revocation_endpoint: issuer + oauthPaths.revoke,
    grant_types_supported: grantTypes,
    response_types_supported: ["code"],
    response_modes_supported: ["query"],
    code_challenge_methods_supported: ["S256"],
    token_endpoint_auth_methods_supported: authMethods,
    token_endpoint_auth_signing_alg_values_supported: assertionSigningAlgs,
    introspection_endpoint_auth_methods_supported: authMethods.filter((m) => m !== "none"),
    introspection_endpoint_auth_signing_alg_values_supported: assertionSigningAlgs,
    revocation_endpoint_auth_methods_supported: authMethods,
    revocation_endpoint_auth_signing_alg_values_supported: assertionSigningAlgs,
    authorization_response_iss_parameter_supported: true,
    device_authorization_endpoint: issuer + oauthPaths.deviceAuthorization,
    pushed_authorization_request_endpoint: issuer + oauthPaths.par,
    require_pushed_authorization_requests: options.requirePar ?? false,
    // No request objects (RFC 9101) by value or by reference: said, since OpenID Discovery's
    // default for `request_uri_parameter_supported` is true. A `request_uri` from the PAR endpoint
    // is taken whatever these say (RFC 9126 5).
    request_parameter_supported: false,
    request_uri_parameter_supported: false,
    dpop_signing_alg_values_supported: dpopSigningAlgs,
  });
  /** The JWK Set through the cache that follows the signing keys, or undefined without one. */
  const keptJwks = (() => {
    const cache = options.jwks;
    if (cache === undefined) return undefined;
    const region = cache.region<Jwks>();
    return (load: () => Promise<Jwks>) =>
      cache.through(region, "jwks", load, (v) => v.body.length * 2 + 256, {
        serves: (v) => v.until > Date.now(),
      }) as Promise<Jwks>;
  })();

  /**
   * A call's metadata: the request id and trace, and who called from where, which the token
   * service's security events record (and pass on to the registry's, for a consent), as the
   * services' events of `/v1` calls do.
   */
  const headersOf = (
    c: { requestId: string; traceparent: string; clientAddress?: string; userAgent?: string },
  ) => ({
    "x-request-id": c.requestId,
    traceparent: c.traceparent,
    ...(c.clientAddress ? { [forwardedForHeader]: c.clientAddress } : {}),
    ...(c.userAgent !== undefined ? { [forwardedUserAgentHeader]: c.userAgent } : {}),
  });

  /** Whether a browser on `origin` may read the answer; a failure to ask is a no. */
  async function checkOrigin(
    origin: string,
    clientId: string,
    c: { requestId: string; traceparent: string },
  ): Promise<boolean> {
    try {
      const res = await tokens.checkCorsOrigin({ origin, clientId }, {
        timeoutMs: options.rpcTimeoutMs,
        headers: headersOf(c),
      });
      return res.allowed;
    } catch (error) {
      options.log.warn("CORS check failed", { request_id: c.requestId, error });
      return false;
    }
  }
  const cors = createCors(issuer);
  /** RFC 8628 3.3: the verification page (./device_page.ts). */
  const devicePage = createDevicePage({
    tokens,
    rpcTimeoutMs: options.rpcTimeoutMs,
    log: options.log,
    readForm: (req) => readForm(req, options.budget, devicePageParams),
    notSignedIn: (req, url) => notSignedIn(req, url),
    session: (req) => {
      const session = cookieValue(req.headers.get("cookie"), sessionCookie);
      return session !== undefined && /^[A-Za-z0-9_.~+/=-]{1,8192}$/.test(session)
        ? session
        : undefined;
    },
  });
  /** The form endpoints: what each knows, and which answer browser apps (CORS). */
  const endpoints = {
    token: { route: oauthPaths.token, known: knownParams.token, browsers: true },
    introspect: { route: oauthPaths.introspect, known: knownParams.tokenForm, browsers: false },
    revoke: { route: oauthPaths.revoke, known: knownParams.tokenForm, browsers: true },
    deviceAuthorization: {
      route: oauthPaths.deviceAuthorization,
      known: knownParams.deviceAuthorization,
      browsers: false,
      keeps: true,
    },
    par: { route: oauthPaths.par, known: knownParams.par, browsers: false, keeps: true },
  };

  /**
   * A form endpoint: POST with `application/x-www-form-urlencoded`; `browsers` adds CORS (./cors.ts)
   * for single-page apps. `keeps`: each request may make the token service keep a row (a device
   * code, a pushed request), for anyone who knows a public client's id, so one without client
   * credentials takes one from its address's bucket of {@link OAuthOptions.keptPerAddress} (429
   * when empty).
   */
  async function form(
    req: Request,
    endpoint: { route: string; known: ReadonlySet<string>; browsers: boolean; keeps?: boolean },
    c: { requestId: string; traceparent: string; clientAddress?: string },
    answer: (params: Form, client: ClientCredentials) => Promise<Response>,
  ): Promise<{ response: Response; route: string }> {
    const { route } = endpoint;
    if (req.method === "OPTIONS" && endpoint.browsers) {
      return { response: await cors.preflight(req, (origin) => checkOrigin(origin, "", c)), route };
    }
    if (req.method !== "POST") {
      const allow = endpoint.browsers ? "OPTIONS, POST" : "POST";
      const response = errorAnswer(
        new OAuthHttpError(405, "invalid_request", `${route} takes POST`, { allow }),
      );
      return {
        response: endpoint.browsers
          ? await cors.decorate(response, undefined, undefined)
          : response,
        route,
      };
    }
    const origin = endpoint.browsers ? cors.crossOrigin(req) : undefined;
    let allowed: Promise<boolean> | undefined;
    let response: Response;
    let basic = false;
    try {
      const params = await readForm(req, options.budget, endpoint.known);
      const client = clientCredentials(req.headers.get("authorization"), params);
      basic = client.method === ClientAuthMethod.CLIENT_SECRET_BASIC;
      // Only a request without credentials counts: a confidential client's back end pushes every
      // user's request from one address, and credentials that do not verify keep nothing.
      const wait = endpoint.keeps && client.method === ClientAuthMethod.NONE && c.clientAddress
        ? options.keptPerAddress?.(addressKey(c.clientAddress))
        : undefined;
      if (wait !== undefined) {
        throw new OAuthHttpError(
          429,
          "temporarily_unavailable",
          "Too many requests from this address; retry later",
          { "retry-after": String(wait) },
        );
      }
      // Asked beside the request itself, so that a browser's request waits for no extra hop.
      if (origin !== undefined) allowed = checkOrigin(origin, client.clientId, c);
      response = await answer(params, client);
    } catch (error) {
      response = errorAnswer(
        error instanceof OAuthHttpError ? error : fromRpc(error, basic, options.log, c.requestId),
      );
    }
    if (!endpoint.browsers) return { response, route };
    if (origin !== undefined && allowed === undefined) allowed = checkOrigin(origin, "", c);
    return { response: await cors.decorate(response, origin, allowed), route };
  }

  /**
   * The user is not signed in: to LOGIN_URL with `return_to` (a GET), or a page saying so.
   * `return_to` is this page's address, as a path when the sign-in page is on the issuer's own
   * origin (it then takes nothing else: gateway/dev_sign_in.ts), else as a URL.
   */
  async function notSignedIn(req: Request, url: URL): Promise<Response> {
    if (options.loginUrl && (req.method === "GET" || req.method === "HEAD")) {
      const login = new URL(options.loginUrl);
      const here = `${url.pathname}${url.search}`;
      login.searchParams.set(
        "return_to",
        login.origin === new URL(issuer).origin ? here : `${issuer}${here}`,
      );
      return new Response(null, {
        status: 302,
        headers: { location: login.href, "cache-control": "no-store" },
      });
    }
    return await errorPage(
      401,
      "Sign in first",
      "You need to be signed in to this platform to let an application access your account.",
      options.loginUrl ? { href: options.loginUrl, text: "Sign in" } : undefined,
    );
  }

  /**
   * The page for a failed call of the authorization endpoint: an OAuth refusal (invalid_client
   * included) is the request's, shown and never redirected; UNAUTHENTICATED without one is the
   * user's session (`unauthenticated` answers it); anything else is the service's.
   */
  async function authorizationFailure(
    err: ConnectError,
    c: { requestId: string },
    unauthenticated: () => Promise<Response>,
  ): Promise<Response> {
    if (err.findDetails(ErrorInfoSchema).some((d) => d.domain === "oauth2")) {
      return await errorPage(
        400,
        "This sign-in request cannot be completed",
        "The application that sent you here asked for something this sign-in service cannot " +
          "do, so you were not sent back to it. You can close this page.",
        undefined,
        err.rawMessage,
      );
    }
    if (err.code === Code.Unauthenticated) return await unauthenticated();
    return await serviceFailurePage(err, options.log, "authorization", c.requestId);
  }

  /**
   * `GET /oauth2/authorize` without a (valid) session: StartAuthorization asked with no user,
   * which checks the request as for a user (an unknown client or redirect URI: the error page; any
   * other fault: back to the client's redirect URI), answers `login_required` there for
   * `prompt=none`, and UNAUTHENTICATED otherwise: the user is sent to sign in.
   */
  async function withoutSession(
    req: Request,
    url: URL,
    request: ReturnType<typeof requestOf>,
    c: { requestId: string; traceparent: string },
  ): Promise<Response> {
    try {
      const res = await tokens.startAuthorization({ request }, {
        timeoutMs: options.rpcTimeoutMs,
        headers: headersOf(c),
      });
      if (res.outcome.case === "redirectTo") {
        return new Response(null, {
          status: 302,
          headers: { location: res.outcome.value, "cache-control": "no-store" },
        });
      }
      return await notSignedIn(req, url);
    } catch (error) {
      return await authorizationFailure(ConnectError.from(error), c, () => notSignedIn(req, url));
    }
  }

  /** `GET /oauth2/authorize` (the consent page) and `POST /oauth2/authorize` (the choice). */
  async function authorize(
    req: Request,
    url: URL,
    c: { requestId: string; traceparent: string },
  ): Promise<Response> {
    // A HEAD is answered as the GET would be (RFC 9110 9.3.2), its body left out by the caller.
    const get = req.method === "GET" || req.method === "HEAD";
    if (!get && req.method !== "POST") return methodNotAllowed(req.method, pageMethods);
    let params: Map<string, string>;
    /** The known parameters the query gave more than once, in order (their first values kept). */
    let repeats: string[] = [];
    if (get) {
      params = new Map();
      for (const [name, value] of url.searchParams) {
        // RFC 6749 3.1: a parameter sent twice makes the request invalid. One this endpoint does
        // not know is ignored, however often it comes ("MUST ignore unrecognized request
        // parameters"), and one sent without a value is as if omitted, so it repeats nothing.
        if (value === "") continue;
        if (params.has(name) && knownParams.authorize.has(name)) {
          repeats.push(name);
          continue;
        }
        params.set(name, value);
      }
    } else {
      try {
        params = await readForm(req, options.budget, knownParams.authorize, maxConsentFormBytes);
      } catch (error) {
        const e = error as OAuthHttpError;
        return await errorPage(e.status ?? 400, "This request cannot be completed", e.message);
      }
    }
    // A pushed request (RFC 9126 4) is its client_id and request_uri: anything else beside them
    // is ignored (a `prompt` too), and not carried on to the page's form either.
    const pushed = params.has("request_uri");
    if (pushed) {
      for (const name of Object.keys(authorizationParams)) {
        if (name !== "client_id" && name !== "request_uri") params.delete(name);
      }
      // A repeat of a parameter ignored beside request_uri is ignored as the parameter is.
      repeats = repeats.filter((name) => name === "client_id" || name === "request_uri");
    }
    const unanswerable = repeats.find((name) => unanswerableRepeats.has(name));
    if (unanswerable !== undefined) {
      return await errorPage(
        400,
        "This sign-in request cannot be completed",
        `The parameter ${unanswerable} is given more than once.`,
      );
    }
    const request = requestOf(params, repeats[0]);
    const session = cookieValue(req.headers.get("cookie"), sessionCookie);
    // Without a session, the request is checked before the user is asked to sign in: the token
    // service is asked without a user, so that an unknown client or a redirect URI not registered
    // is an error page at once (never a sign-in that leads to one); any other fault goes back to
    // the client only after the sign-in (RFC 9700 4.11.2), but for prompt=none (OpenID Connect
    // Core 3.1.2.1), which never shows a page, the sign-in page included, and is answered at once
    // (`login_required`, or the request's fault). A pushed request's prompt is the pushed one,
    // which only the token service knows, and asking starts the request's time for the sign-in
    // (./services/token/pushed.ts). UNAUTHENTICATED from it sends the user to sign in. The form's
    // POST needs a session of its own.
    const askWithoutUser = get;
    if (session === undefined || !/^[A-Za-z0-9_.~+/=-]{1,8192}$/.test(session)) {
      if (askWithoutUser) return await withoutSession(req, url, request, c);
      return await notSignedIn(req, url);
    }
    const shown = Object.fromEntries(
      Object.keys(authorizationParams).map((name) => [name, params.get(name) ?? ""]),
    ) as AuthorizationParams;
    const call = {
      timeoutMs: options.rpcTimeoutMs,
      headers: { ...headersOf(c), authorization: `Bearer ${session}` },
    };
    const redirect = (location: string, status: number) =>
      new Response(null, { status, headers: { location, "cache-control": "no-store" } });
    try {
      if (get) {
        const res = await tokens.startAuthorization({ request }, call);
        if (res.outcome.case === "redirectTo") return redirect(res.outcome.value, 302);
        if (res.outcome.case !== "consent") throw new ConnectError("no outcome", Code.Internal);
        return await consentPage(res.outcome.value, shown, oauthPaths.authorize);
      }
      const choice = params.get("decision");
      const res = await tokens.decideAuthorization({
        request,
        decision: decisionOf(choice),
        csrfToken: params.get("csrf_token") ?? "",
      }, call);
      // 303: the browser follows with a GET, as the client's redirect URI expects.
      return redirect(res.redirectTo, 303);
    } catch (error) {
      // A session that no longer verifies is no session.
      return await authorizationFailure(
        ConnectError.from(error),
        c,
        () => askWithoutUser ? withoutSession(req, url, request, c) : notSignedIn(req, url),
      );
    }
  }

  return async (req, url, correlation) => {
    const agent = req.headers.get("user-agent");
    const c = agent === null ? correlation : { ...correlation, userAgent: agent };
    switch (url.pathname) {
      case oauthPaths.metadata:
        if (req.method !== "GET" && req.method !== "HEAD") {
          return { response: methodNotAllowed(req.method, ["GET", "HEAD"]), route: url.pathname };
        }
        return {
          response: new Response(metadata, {
            headers: {
              "content-type": "application/json",
              "cache-control": "max-age=300",
              ...publicDocument,
            },
          }),
          route: oauthPaths.metadata,
        };
      case oauthPaths.jwks: {
        if (req.method !== "GET" && req.method !== "HEAD") {
          return { response: methodNotAllowed(req.method, ["GET", "HEAD"]), route: url.pathname };
        }
        const load = async (): Promise<Jwks> => {
          const res = await tokens.getJwks({}, {
            timeoutMs: options.rpcTimeoutMs,
            headers: headersOf(c),
          });
          return { body: res.jwksJson, until: Date.now() + Number(res.maxAgeSeconds) * 1000 };
        };
        let jwks: Jwks;
        try {
          jwks = await (keptJwks ? keptJwks(load) : load());
        } catch (error) {
          const e = fromRpc(error, false, options.log, c.requestId);
          return { response: errorAnswer(e), route: oauthPaths.jwks };
        }
        const maxAge = Math.max(0, Math.floor((jwks.until - Date.now()) / 1000));
        return {
          response: new Response(jwks.body, {
            headers: {
              "content-type": "application/jwk-set+json",
              "cache-control": `max-age=${maxAge}`,
              ...publicDocument,
            },
          }),
          route: oauthPaths.jwks,
        };
      }
      case oauthPaths.authorize: {
        const response = await authorize(req, url, c);
        return {
          response: req.method === "HEAD" ? await headOf(response) : response,
          route: oauthPaths.authorize,
        };
      }
      case oauthPaths.token:
        return await form(req, endpoints.token, c, async (params, client) => {
          // This server takes one audience, an installation (RFC 8693 2.2.2: a target it cannot
          // issue for is invalid_target).
          if (
            params.repeated.has("audience") &&
            params.get("grant_type") === "urn:ietf:params:oauth:grant-type:token-exchange"
          ) {
            throw new OAuthHttpError(400, "invalid_target", "Name one installation in audience");
          }
          const fields = Object.fromEntries(
            Object.entries(tokenParams).map(([name, field]) => [field, params.get(name) ?? ""]),
          ) as Record<(typeof tokenParams)[keyof typeof tokenParams], string>;
          const proof = dpopHeader(req.headers);
          const dpop = proof === undefined
            ? {}
            : { dpop: { proof, httpMethod: "POST", httpUri: issuer + oauthPaths.token } };
          const res = await tokens.issueToken({ client, ...fields, ...dpop }, {
            timeoutMs: options.rpcTimeoutMs,
            headers: headersOf(c),
          });
          const body: Record<string, unknown> = {
            access_token: res.accessToken,
            token_type: res.tokenType,
            expires_in: Number(res.expiresIn),
          };
          if (res.scope !== "") body.scope = res.scope;
          if (res.refreshToken !== "") body.refresh_token = res.refreshToken;
          if (res.issuedTokenType !== "") body.issued_token_type = res.issuedTokenType;
          return json(body, 200, res.dpopNonce === "" ? {} : { "dpop-nonce": res.dpopNonce });
        });
      case oauthPaths.introspect:
        return await form(req, endpoints.introspect, c, async (params, client) => {
          // Without `token`, the token service answers invalid_request once the client is
          // authenticated (bad credentials are invalid_client whatever the form lacks).
          const token = params.get("token") ?? "";
          const tokenTypeHint = params.get("token_type_hint") ?? "";
          const load = async () => {
            const res = await tokens.introspectToken({ client, token, tokenTypeHint }, {
              timeoutMs: options.rpcTimeoutMs,
              headers: headersOf(c),
            });
            return { body: introspectionBody(res), reusableUntil: Number(res.reusableUntilMs) };
          };
          const cache = options.introspections;
          // Only a caller with a secret: a client assertion is single use (./introspection_cache.ts).
          const body = cache !== undefined && client.clientSecret !== "" &&
              client.clientAssertion === ""
            ? await cache.through(
              // One string for the credentials, unambiguous whatever characters they hold.
              JSON.stringify([client.method, client.clientId, client.clientSecret, tokenTypeHint]),
              token,
              load,
            )
            : (await load()).body;
          return new GuardResponse(body, { headers: jsonTextHeaders });
        });
      case oauthPaths.par:
        // RFC 9126 2: the authorization request's parameters, with the client's credentials.
        // RFC 9449 10.1: a DPoP proof is checked as at the token endpoint, for this endpoint.
        return await form(req, endpoints.par, c, async (params, client) => {
          const proof = dpopHeader(req.headers);
          const dpop = proof === undefined
            ? {}
            : { dpop: { proof, httpMethod: "POST", httpUri: issuer + oauthPaths.par } };
          const res = await tokens.pushAuthorizationRequest(
            { client, request: requestOf(params), ...dpop },
            {
              timeoutMs: options.rpcTimeoutMs,
              headers: headersOf(c),
            },
          );
          return json(
            { request_uri: res.requestUri, expires_in: Number(res.expiresIn) },
            201,
            res.dpopNonce === "" ? {} : { "dpop-nonce": res.dpopNonce },
          );
        });
      case oauthPaths.deviceAuthorization:
        // RFC 8628 3.1, 3.2: a device asks for a device code and a user code.
        return await form(req, endpoints.deviceAuthorization, c, async (params, client) => {
          const res = await tokens.startDeviceAuthorization(
            { client, scope: params.get("scope") ?? "" },
            { timeoutMs: options.rpcTimeoutMs, headers: headersOf(c) },
          );
          return json({
            device_code: res.deviceCode,
            user_code: res.userCode,
            verification_uri: res.verificationUri,
            verification_uri_complete: res.verificationUriComplete,
            expires_in: Number(res.expiresIn),
            interval: Number(res.interval),
          });
        });
      case oauthPaths.device: {
        const response = await devicePage(req, url, c);
        return {
          response: req.method === "HEAD" ? await headOf(response) : response,
          route: oauthPaths.device,
        };
      }
      case oauthPaths.revoke:
        return await form(req, endpoints.revoke, c, async (params, client) => {
          // Without `token`: invalid_request from the token service, after the client's
          // credentials (RFC 7009 2.1: they are validated first).
          const token = params.get("token") ?? "";
          const res = await tokens.revokeToken({
            client,
            token,
            tokenTypeHint: params.get("token_type_hint") ?? "",
          }, { timeoutMs: options.rpcTimeoutMs, headers: headersOf(c) });
          // Not answered from this gateway's memory again, even before the notification is here;
          // nor are the access tokens of a refresh token's grant, which went with it.
          options.introspections?.revoked(token, res.revokedAccessTokens > 0n);
          return new Response(null, { status: 200, headers: noStore });
        });
      default:
        return undefined;
    }
  };
}

/** RFC 7662 2.2's JSON of an introspection's answer. */
function introspectionBody(res: IntrospectTokenResponse): string {
  if (!res.active) return '{"active":false}';
  // A member without a value is left out (RFC 7662 2.2 members are all optional).
  const body: Record<string, unknown> = { active: true };
  if (res.scope !== "") body.scope = res.scope;
  if (res.clientId !== "") body.client_id = res.clientId;
  if (res.tokenType !== "") body.token_type = res.tokenType;
  body.exp = Number(res.exp);
  body.iat = Number(res.iat);
  if (res.sub !== "") body.sub = res.sub;
  if (res.aud !== "") body.aud = res.aud;
  if (res.iss !== "") body.iss = res.iss;
  if (res.jti !== "") body.jti = res.jti;
  if (res.accountId !== "") body.account_id = res.accountId;
  if (res.installationId !== "") body.installation_id = res.installationId;
  if (res.actSub !== "") body.act = { sub: res.actSub };
  // RFC 9449 6.2: the key a DPoP-bound token's proofs must be made with.
  if (res.cnfJkt !== "") body.cnf = { jkt: res.cnfJkt };
  return JSON.stringify(body);
}

/**
 * The `DPoP` header's proof (RFC 9449 4.1), or undefined without one. More than one `DPoP` header
 * is joined by Fetch with `, `, which the token service refuses (`invalid_dpop_proof`, with the
 * nonce when nonces are required).
 */
function dpopHeader(headers: Headers): string | undefined {
  return headers.get("dpop") ?? undefined;
}

/**
 * The parameters that may come more than once: resource indicators (RFC 8707 2) and a token
 * exchange's audiences (RFC 8693 2.1). Each is read as its first value; {@link Form.repeated}
 * says which came more than once.
 */
const repeatable = new Set(["resource", "audience"]);

/** A form's parameters, and which {@link repeatable} ones came more than once. */
type Form = Map<string, string> & { repeated: ReadonlySet<string> };

/**
 * The form's parameters. RFC 6749 3.2: a form body only, of at most `maxBytes`, each parameter at
 * most once (but the {@link repeatable} ones); a parameter sent without a value counts as omitted.
 * An error names a parameter only when it is `known`.
 */
async function readForm(
  req: Request,
  budget: MemoryBudget,
  known: ReadonlySet<string>,
  maxBytes = maxFormBytes,
): Promise<Form> {
  const type = (req.headers.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase();
  if (type !== "application/x-www-form-urlencoded") {
    throw new OAuthHttpError(
      400,
      "invalid_request",
      "The request body must be application/x-www-form-urlencoded",
    );
  }
  const declared = Number(req.headers.get("content-length") ?? "0");
  if (declared > maxBytes) {
    throw new OAuthHttpError(413, "invalid_request", `The form exceeds ${maxBytes} bytes`);
  }
  const cost = Math.max(declared, 1024) * 2;
  const lease = budget.take(0);
  if (!lease?.grow(cost, cost <= smallRequestBytes)) {
    lease?.release();
    throw new OAuthHttpError(
      503,
      "temporarily_unavailable",
      "The gateway is at its memory budget; retry later",
      { "retry-after": "1" },
    );
  }
  try {
    const chunks: Uint8Array[] = [];
    let size = 0;
    try {
      if (req.headers.has("content-length")) {
        // A declared length is what the body is (Deno.serve refuses any other): one read.
        const bytes = await req.bytes();
        chunks.push(bytes);
        size = bytes.length;
      } else {
        for await (const chunk of req.body ?? []) {
          size += chunk.byteLength;
          if (size > maxBytes) {
            throw new OAuthHttpError(
              413,
              "invalid_request",
              `The form exceeds ${maxBytes} bytes`,
            );
          }
          chunks.push(chunk);
        }
      }
    } catch (error) {
      if (error instanceof OAuthHttpError) throw error;
      throw new OAuthHttpError(400, "invalid_request", "The request body could not be read");
    }
    const text = utf8.decode(joined(chunks, size));
    const repeated = new Set<string>();
    const params: Form = Object.assign(new Map<string, string>(), { repeated });
    for (const [name, value] of formPairs(text)) {
      if (value === "") continue;
      if (params.has(name) && repeatable.has(name)) {
        repeated.add(name);
        continue;
      }
      // RFC 6749 3.1 and 3.2: a parameter MUST NOT be sent twice, and one the endpoint does not
      // know MUST be ignored, however often it comes (node-oidc-provider rejects only repeats of
      // the parameters it reads, too).
      if (params.has(name) && known.has(name)) {
        throw new OAuthHttpError(
          400,
          "invalid_request",
          `The parameter ${name} is given more than once`,
        );
      }
      params.set(name, value);
    }
    return params;
  } finally {
    lease.release();
  }
}

/**
 * The name-value pairs of a form body, as URLSearchParams reads them (WHATWG URL's
 * application/x-www-form-urlencoded parsing): split by hand when nothing in it is encoded (no `%`,
 * no `+`, no leading `?`), as a client's token request nearly always is (ids, secrets and tokens
 * are URL-safe), else by URLSearchParams itself.
 */
export function formPairs(text: string): Iterable<[string, string]> {
  if (text.includes("%") || text.includes("+") || text.startsWith("?")) {
    return new URLSearchParams(text);
  }
  const pairs: [string, string][] = [];
  let at = 0;
  while (at <= text.length) {
    let end = text.indexOf("&", at);
    if (end < 0) end = text.length;
    if (end > at) {
      const eq = text.indexOf("=", at);
      pairs.push(
        eq < 0 || eq > end
          ? [text.slice(at, end), ""]
          : [text.slice(at, eq), text.slice(eq + 1, end)],
      );
    }
    at = end + 1;
  }
  return pairs;
}

function joined(chunks: Uint8Array[], size: number): Uint8Array {
  if (chunks.length === 1) return chunks[0]!;
  const out = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return out;
}

/** The value of a cookie in a `Cookie` header (RFC 6265 5.4), or undefined. */
export function cookieValue(header: string | null, name: string): string | undefined {
  if (header === null) return undefined;
  for (const part of header.split(";")) {
    const eq = part.indexOf("=");
    if (eq < 0 || part.slice(0, eq).trim() !== name) continue;
    const value = part.slice(eq + 1).trim();
    return value.startsWith('"') && value.endsWith('"') && value.length >= 2
      ? value.slice(1, -1)
      : value;
  }
  return undefined;
}

/** Decodes one form-urlencoded value (`+` is a space); undefined when malformed. */
function formDecode(value: string): string | undefined {
  try {
    return decodeURIComponent(value.replaceAll("+", " "));
  } catch {
    return undefined;
  }
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });
/**
 * Malformed UTF-8 in a form becomes U+FFFD, as in any form a browser posts; a leading byte order
 * mark is kept, as the WHATWG form parser's "UTF-8 decode without BOM" keeps it (it then belongs
 * to the first name, which is no parameter the endpoint knows).
 */
const utf8 = new TextDecoder("utf-8", { ignoreBOM: true });

/**
 * The client's credentials: HTTP Basic (RFC 6749 2.3.1: id and secret form-urlencoded, then
 * base64; a raw id or secret, as curl `-u` sends, decodes to itself unless it holds `%` or `+`),
 * `client_id` and `client_secret` in the form, or a client assertion (`client_assertion_type` and
 * `client_assertion`, RFC 7521 4.2, with `client_id` optional). Using two is refused (RFC 6749
 * 2.3). The token service checks the assertion (its type included).
 *
 * An `Authorization` header is an attempt at HTTP authentication whatever it holds: one that is
 * not Basic credentials of the right shape (`Basic` alone, another scheme) is 401 `invalid_client`
 * with the Basic challenge (RFC 6749 5.2), never ignored in favour of credentials in the form.
 */
export function clientCredentials(
  authorization: string | null,
  params: Map<string, string>,
): ClientCredentials {
  const formId = params.get("client_id");
  const formSecret = params.get("client_secret");
  const assertion = params.get("client_assertion");
  const assertionType = params.get("client_assertion_type");
  const unauthorized = (description: string) =>
    new OAuthHttpError(401, "invalid_client", description, {
      "www-authenticate": 'Basic realm="oauth2", charset="UTF-8"',
    });
  // The reader trims a field's trailing spaces: `Basic ` arrives as `Basic`.
  const basicAuth = authorization !== null && /^basic(?: |$)/i.test(authorization);
  if (authorization !== null && !basicAuth) {
    throw unauthorized("A client authenticates over HTTP with the Basic scheme only");
  }
  if (assertion !== undefined || assertionType !== undefined) {
    if (basicAuth || formSecret !== undefined) {
      throw new OAuthHttpError(
        400,
        "invalid_request",
        "Use one client authentication method: a client assertion, HTTP Basic or client_secret, not two",
      );
    }
    return {
      $typeName: "registry.token.v1.ClientCredentials",
      clientId: formId ?? "",
      clientSecret: "",
      method: ClientAuthMethod.PRIVATE_KEY_JWT,
      clientAssertion: assertion ?? "",
      clientAssertionType: assertionType ?? "",
    };
  }
  if (basicAuth) {
    if (formSecret !== undefined) {
      throw new OAuthHttpError(
        400,
        "invalid_request",
        "Use one client authentication method: HTTP Basic or client_secret in the form, not both",
      );
    }
    let decoded: string;
    try {
      const raw = atob(authorization.slice(5).trim());
      // Printable ASCII (every generated id and secret) is its own UTF-8; anything else is decoded
      // strictly, byte by byte.
      if (/^[ -~]*$/.test(raw)) decoded = raw;
      else {
        const bytes = new Uint8Array(raw.length);
        for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
        decoded = strictUtf8.decode(bytes);
      }
    } catch {
      throw unauthorized("The Basic credentials are not base64 of UTF-8");
    }
    const colon = decoded.indexOf(":");
    const id = colon < 0 ? undefined : formDecode(decoded.slice(0, colon));
    const secret = colon < 0 ? undefined : formDecode(decoded.slice(colon + 1));
    if (id === undefined || secret === undefined || id === "") {
      throw unauthorized("The Basic credentials must be client_id:client_secret");
    }
    if (formId !== undefined && formId !== id) {
      throw new OAuthHttpError(
        400,
        "invalid_request",
        "client_id in the form differs from the Basic credentials",
      );
    }
    return {
      $typeName: "registry.token.v1.ClientCredentials",
      clientId: id,
      clientSecret: secret,
      method: ClientAuthMethod.CLIENT_SECRET_BASIC,
      clientAssertion: "",
      clientAssertionType: "",
    };
  }
  return {
    $typeName: "registry.token.v1.ClientCredentials",
    clientId: formId ?? "",
    clientSecret: formSecret ?? "",
    method: formSecret === undefined ? ClientAuthMethod.NONE : ClientAuthMethod.CLIENT_SECRET_POST,
    clientAssertion: "",
    clientAssertionType: "",
  };
}

/** The RFC answer for an error of the token service (or of the call to it). */
function fromRpc(error: unknown, basic: boolean, log: Logger, requestId: string): OAuthHttpError {
  const err = ConnectError.from(error);
  const info = err.findDetails(ErrorInfoSchema).find((d) => d.domain === "oauth2");
  if (info) {
    if (info.reason === "invalid_client") {
      return new OAuthHttpError(
        401,
        "invalid_client",
        err.rawMessage,
        basic ? { "www-authenticate": 'Basic realm="oauth2", charset="UTF-8"' } : {},
      );
    }
    // RFC 9449 8: the nonce to use next (use_dpop_nonce, and any DPoP error when nonces are on).
    const nonce = info.metadata.dpop_nonce;
    return new OAuthHttpError(
      400,
      info.reason,
      err.rawMessage,
      nonce === undefined ? {} : { "dpop-nonce": nonce },
    );
  }
  switch (err.code) {
    case Code.Unavailable:
    case Code.DeadlineExceeded:
    case Code.ResourceExhausted:
      log.error("token service failed", { code: Code[err.code], request_id: requestId, error });
      return new OAuthHttpError(503, "temporarily_unavailable", err.rawMessage, {
        "retry-after": "1",
      });
    case Code.InvalidArgument:
      return new OAuthHttpError(400, "invalid_request", err.rawMessage);
    default:
      log.error("token service failed", { code: Code[err.code], request_id: requestId, error });
      return new OAuthHttpError(500, "server_error", "Internal error");
  }
}
