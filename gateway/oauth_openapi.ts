/**
 * The OpenAPI description of the OAuth 2 endpoints of ./oauth.ts, merged into the generated
 * document by ./openapi.ts. These endpoints are not RPC-shaped (form-encoded requests, the RFCs'
 * JSON answers, HTML pages and redirects), so no `google.api.http` annotation describes them: this
 * file does, beside the code, in the RFCs' terms. The parameters the token service reads are those
 * of TokenService's IssueTokenRequest (proto/registry/token/v1/token_service.proto).
 *
 * @module
 */

import { allowedRequestHeaders, exposedResponseHeaders, preflightMaxAgeSeconds } from "./cors.ts";
import { oauthPaths } from "./oauth.ts";

type Json = Record<string, unknown>;

const string = (description: string): Json => ({ type: "string", description });
const strings: Json = { type: "array", items: { type: "string" } };
/** String members without a description of their own. */
const members = (...names: string[]): Record<string, Json> =>
  Object.fromEntries(names.map((name) => [name, { type: "string" }]));

/** RFC 6749 5.2's error body (also RFC 7009's and RFC 7662's). */
const oauthError: Json = {
  type: "object",
  description: "An OAuth error (RFC 6749 5.2).",
  properties: {
    error: {
      type: "string",
      description: "The RFC 6749 error code, e.g. `invalid_request`, `invalid_client`, " +
        "`invalid_grant`, `unauthorized_client`, `unsupported_grant_type`, `invalid_scope`, " +
        "`invalid_target`, `invalid_dpop_proof`, `use_dpop_nonce` (RFC 9449), " +
        "`authorization_pending`, `slow_down`, `access_denied`, `expired_token` (RFC 8628), " +
        "`temporarily_unavailable`, `server_error`.",
    },
    error_description: string("What went wrong, for the developer."),
  },
  required: ["error", "error_description"],
  additionalProperties: false,
};

const noStore = {
  "Cache-Control": { schema: { type: "string", enum: ["no-store"] } },
};

/** What the token and revocation endpoints add for browser apps (CORS, ./cors.ts). */
const corsHeaders: Record<string, Json> = {
  Vary: {
    description: "`Origin` (the answer depends on it).",
    schema: { type: "string", pattern: "\\bOrigin\\b" },
  },
  "Access-Control-Allow-Origin": {
    description: "The request's `Origin`, when it is a registered JavaScript origin of an " +
      "active client of the project of the request's client; absent otherwise. Never `*`.",
    schema: { type: "string", pattern: "^https?://" },
  },
  "Access-Control-Expose-Headers": {
    schema: { type: "string", enum: [exposedResponseHeaders.join(", ")] },
  },
};

/** The CORS preflight of a browser app's request (the Fetch standard). */
function preflight(operationId: string, endpoint: string): Json {
  const header = (name: string, description: string, required = false): Json => ({
    name,
    in: "header",
    required,
    description,
    schema: { type: "string" },
  });
  return {
    operationId,
    tags: ["OAuth 2"],
    summary: `CORS preflight of the ${endpoint}`,
    description: "What a browser asks before a single-page app's `fetch` sends a request with " +
      "headers of its own (`Authorization`, `DPoP`). Allowed, with the headers below, when " +
      "`Origin` is a registered JavaScript origin of an active client of any project (a " +
      "preflight carries no credentials: the answer to the request itself narrows it to the " +
      "client's project); otherwise answered without them, and the browser sends nothing. " +
      "Without `Origin`, a plain OPTIONS: `Allow`.",
    security: [],
    parameters: [
      header("Origin", "The page's origin."),
      header("Access-Control-Request-Method", "`POST`."),
      header("Access-Control-Request-Headers", "The headers the request will carry."),
    ],
    responses: {
      "204": {
        description: "The preflight's answer; no body.",
        headers: {
          Allow: { required: true, schema: { type: "string", enum: ["OPTIONS, POST"] } },
          Vary: corsHeaders.Vary,
          "Access-Control-Allow-Origin": corsHeaders["Access-Control-Allow-Origin"],
          "Access-Control-Allow-Methods": { schema: { type: "string", enum: ["POST"] } },
          "Access-Control-Allow-Headers": {
            schema: { type: "string", enum: [allowedRequestHeaders.join(", ")] },
          },
          "Access-Control-Max-Age": {
            schema: { type: "string", enum: [String(preflightMaxAgeSeconds)] },
          },
        },
      },
    },
  };
}

function errors(statuses: string[], extraHeaders: Record<string, Json> = {}): Record<string, Json> {
  const described: Record<string, string> = {
    "400": "The request is malformed or refused (`error` says why).",
    "401": "`invalid_client`: the client could not be authenticated. `WWW-Authenticate` is set " +
      "when it used HTTP Basic.",
    "405": "Not POST (`Allow: POST`).",
    "413": "The form exceeds 16 KiB.",
    "429": "`temporarily_unavailable`: this client address has made `OAUTH_KEPT_PER_MINUTE` " +
      "requests that keep a row (device authorizations, pushed requests) within the last " +
      "minute; retry after `Retry-After` seconds.",
    "500": "`server_error`.",
    "503": "`temporarily_unavailable`: retry after `Retry-After` seconds.",
  };
  return Object.fromEntries(statuses.map((status) => [status, {
    description: described[status],
    headers: {
      ...noStore,
      ...extraHeaders,
      ...(status === "503" || status === "429"
        ? { "Retry-After": { required: true, schema: { type: "string", pattern: "^[0-9]+$" } } }
        : {}),
      ...(status === "401"
        ? { "WWW-Authenticate": { schema: { type: "string" } } }
        : status === "405"
        ? { Allow: { required: true, schema: { type: "string" } } }
        : {}),
    },
    content: { "application/json": { schema: { $ref: "#/components/schemas/OAuthError" } } },
  }]));
}

const formErrors = ["400", "401", "405", "413", "500", "503"];
/** The errors of a form endpoint whose every request keeps a row: limited per client address. */
const keptFormErrors = [...formErrors, "429"];

/** RFC 9449 8: the nonce a client's next DPoP proof must carry. */
const dpopNonce: Record<string, Json> = {
  "DPoP-Nonce": {
    description: "When the server requires DPoP nonces (DPOP_NONCE_REQUIRED): the nonce to put " +
      "in the next DPoP proof (on every success, and with `use_dpop_nonce` and " +
      "`invalid_dpop_proof`).",
    schema: { type: "string", pattern: "^[A-Za-z0-9_-]+$" },
  },
};

/**
 * The client's credentials in the form: `client_secret_post`, a client assertion
 * (`private_key_jwt`), or `client_id` alone for a public client (`none`).
 */
const clientFields: Record<string, Json> = {
  client_id: string(
    "The client's id, when it does not authenticate with HTTP Basic (optional with a client " +
      "assertion, whose `sub` names the client).",
  ),
  client_secret: string("The client's secret, with `client_secret_post`."),
  client_assertion_type: {
    type: "string",
    enum: ["urn:ietf:params:oauth:client-assertion-type:jwt-bearer"],
    description: "With `private_key_jwt` (RFC 7523 2.2).",
  },
  client_assertion: string(
    "`private_key_jwt`: a JWT signed with one of the client's keys; `iss` and `sub` the " +
      "client_id, `aud` the issuer (or this endpoint's URL), `exp` at most 5 minutes ahead, a " +
      "`jti` used once.",
  ),
};

function form(properties: Record<string, Json>, required: string[]): Json {
  return {
    required: true,
    content: {
      "application/x-www-form-urlencoded": {
        schema: { type: "object", properties: { ...properties, ...clientFields }, required },
      },
    },
  };
}

/**
 * HTTP Basic, or the form's `client_id` and `client_secret` (`client_secret_post`, which OpenAPI
 * has no scheme for: the form's fields describe it).
 */
/** The form of introspection and revocation (RFC 7662 2.1, RFC 7009 2.1). */
const tokenForm = form({
  token: string("The token."),
  token_type_hint: string("`access_token` or `refresh_token`."),
}, ["token"]);

const clientAuth = [{ clientBasic: [] }, {}];

const html = (description: string, extra: Json = {}): Json => ({
  description,
  ...extra,
  content: { "text/html": { schema: { type: "string" } } },
});

const redirect = (description: string): Json => ({
  description,
  headers: { Location: { required: true, schema: { type: "string", format: "uri" } } },
});

/**
 * The authorization request's parameters. With `request_uri` (a pushed request, RFC 9126) only
 * `client_id` goes beside it, so none of the others is required by the schema: the token service
 * says which a request lacks.
 */
const authorizationParameters: Json[] = [
  ["response_type", "`code` (the only response type); required without request_uri.", false],
  ["client_id", "The client's id.", true],
  [
    "redirect_uri",
    "One of the client's registered redirect URIs, compared exactly (a native client's " +
    "loopback URI may use any port); may be left out when the client has exactly one.",
    false,
  ],
  ["scope", "Space-separated scopes.", false],
  [
    "state",
    "Returned unchanged with the code; at most 2,048 characters, no control character.",
    false,
  ],
  [
    "code_challenge",
    "PKCE (RFC 7636): BASE64URL(SHA-256(code_verifier)); required without request_uri.",
    false,
  ],
  ["code_challenge_method", "`S256` (plain is refused); required without request_uri.", false],
  [
    "request_uri",
    "A pushed request's `request_uri` (RFC 9126): the request is the one pushed, and every " +
    "parameter but client_id is ignored.",
    false,
  ],
  [
    "prompt",
    "OpenID Connect's `prompt`: `consent` shows the consent page even when the user's consent " +
    "is remembered; `none` never shows a page (the code when consent is remembered, else " +
    "`consent_required`, or `login_required` without a session); `login` is taken as none " +
    "given. Anything else is `invalid_request`.",
    false,
  ],
  [
    "dpop_jkt",
    "RFC 9449 10: the RFC 7638 thumbprint (base64url SHA-256, 43 characters) of the DPoP key " +
    "the code must be redeemed with: the token request then needs a DPoP proof of that key " +
    "(else `invalid_grant`). Anything else is `invalid_request`.",
    false,
  ],
  [
    "response_mode",
    "`query`, the only way this server answers; any other is `invalid_request`.",
    false,
  ],
  [
    "request",
    "A request object (RFC 9101): not taken, `request_not_supported`.",
    false,
  ],
].map(([name, description, required]) => ({
  name,
  in: "query",
  required,
  description,
  schema: { type: "string" },
}));

/** The paths of the OAuth endpoints. */
export function oauthOpenApiPaths(): Record<string, Json> {
  return {
    [oauthPaths.metadata]: {
      get: {
        operationId: "getAuthorizationServerMetadata",
        tags: ["OAuth 2"],
        summary: "Authorization server metadata",
        description: "RFC 8414: the endpoints, grant types, PKCE methods and client " +
          "authentication methods of this authorization server. Stock OAuth clients start here.",
        security: [],
        responses: {
          "200": {
            description: "The metadata.",
            content: {
              "application/json": {
                schema: {
                  type: "object",
                  required: [
                    "issuer",
                    "authorization_endpoint",
                    "token_endpoint",
                    "jwks_uri",
                    "response_types_supported",
                  ],
                  properties: {
                    issuer: { type: "string", format: "uri" },
                    authorization_endpoint: { type: "string", format: "uri" },
                    token_endpoint: { type: "string", format: "uri" },
                    jwks_uri: { type: "string", format: "uri" },
                    introspection_endpoint: { type: "string", format: "uri" },
                    revocation_endpoint: { type: "string", format: "uri" },
                    grant_types_supported: strings,
                    response_types_supported: strings,
                    response_modes_supported: strings,
                    code_challenge_methods_supported: strings,
                    token_endpoint_auth_methods_supported: strings,
                    introspection_endpoint_auth_methods_supported: strings,
                    revocation_endpoint_auth_methods_supported: strings,
                    token_endpoint_auth_signing_alg_values_supported: strings,
                    introspection_endpoint_auth_signing_alg_values_supported: strings,
                    revocation_endpoint_auth_signing_alg_values_supported: strings,
                    authorization_response_iss_parameter_supported: { type: "boolean" },
                    device_authorization_endpoint: { type: "string", format: "uri" },
                    pushed_authorization_request_endpoint: { type: "string", format: "uri" },
                    require_pushed_authorization_requests: { type: "boolean" },
                    request_parameter_supported: { type: "boolean" },
                    request_uri_parameter_supported: { type: "boolean" },
                    dpop_signing_alg_values_supported: strings,
                  },
                  additionalProperties: false,
                },
              },
            },
          },
        },
      },
    },
    [oauthPaths.jwks]: {
      get: {
        operationId: "getJwks",
        tags: ["OAuth 2"],
        summary: "Signing keys",
        description: "RFC 7517: the public keys that verify access tokens (EdDSA, Ed25519), " +
          "cacheable for as long as `Cache-Control` says.",
        security: [],
        responses: {
          "200": {
            description: "The key set.",
            content: {
              "application/jwk-set+json": {
                schema: {
                  type: "object",
                  required: ["keys"],
                  properties: {
                    keys: {
                      type: "array",
                      items: {
                        type: "object",
                        required: ["kty", "kid"],
                        properties: members("kty", "kid", "alg", "use", "crv", "x", "y"),
                      },
                    },
                  },
                },
              },
            },
          },
          ...errors(["500", "503"]),
        },
      },
    },
    [oauthPaths.authorize]: {
      get: {
        operationId: "authorize",
        tags: ["OAuth 2"],
        summary: "Authorization endpoint (consent page)",
        description: "RFC 6749 4.1.1 with PKCE: shows the signed-in user (the `session` " +
          "cookie holds the platform token) the consent page for the client. A request that " +
          "names a valid client and redirect URI but is otherwise wrong is sent back to the " +
          "client with `error` (302); one whose client or redirect URI cannot be trusted gets " +
          "an error page and is never redirected. Without a session: a redirect to the " +
          "platform's sign-in page with `return_to` (302), or a page saying to sign in " +
          "(`prompt=none`: back to the client with `login_required`). When the user's live " +
          "installation of the project already holds every scope asked for, no page: back to " +
          "the client with a `code` at once (302), unless `prompt=consent`. Otherwise the page " +
          "lists the scopes not allowed yet, in the project's declared words.",
        security: [{ session: [] }],
        parameters: authorizationParameters,
        responses: {
          "200": html("The consent page (Allow, Deny)."),
          "302": redirect(
            "Back to the client with `code` (remembered consent) or `error`, or to the sign-in " +
              "page.",
          ),
          "400": html("The request cannot be completed (never redirected)."),
          "401": html("The user is not signed in (no sign-in page configured)."),
          "405": html("Not GET or POST.", {
            headers: { Allow: { required: true, schema: { type: "string" } } },
          }),
          "500": html("Something went wrong."),
          "503": html("The sign-in service is busy; retry.", {
            headers: {
              "Retry-After": { required: true, schema: { type: "string", pattern: "^[0-9]+$" } },
            },
          }),
        },
      },
      post: {
        operationId: "decideAuthorization",
        tags: ["OAuth 2"],
        summary: "The consent page's choice",
        description: "The consent page's form: the authorization request's parameters, " +
          "`decision` (`allow` or `deny`) and the page's `csrf_token`. Answered with a " +
          "redirect to the client (303) with `code`, `state` and `iss` (RFC 9207), or `error`.",
        security: [{ session: [] }],
        requestBody: {
          required: true,
          content: {
            "application/x-www-form-urlencoded": {
              schema: {
                type: "object",
                properties: {
                  ...Object.fromEntries(
                    authorizationParameters.map((p) => [p.name as string, { type: "string" }]),
                  ),
                  decision: { type: "string", enum: ["allow", "deny"] },
                  csrf_token: { type: "string" },
                },
                required: ["decision", "csrf_token"],
              },
            },
          },
        },
        responses: {
          "303": redirect("Back to the client."),
          "400": html("The request cannot be completed (never redirected)."),
          "401": html("The user is not signed in."),
          "413": html(
            "The form exceeds 193 KiB (the request it carries back, as a browser encodes it).",
          ),
          "500": html("Something went wrong."),
          "503": html("The sign-in service is busy; retry.", {
            headers: {
              "Retry-After": { required: true, schema: { type: "string", pattern: "^[0-9]+$" } },
            },
          }),
        },
      },
    },
    [oauthPaths.token]: {
      post: {
        operationId: "token",
        tags: ["OAuth 2"],
        summary: "Token endpoint",
        description: "RFC 6749 3.2: `authorization_code` (with `code_verifier`), " +
          "`refresh_token` (rotated: each use returns a new one; reusing an old one revokes the " +
          "family), `client_credentials`, token exchange (RFC 8693) and the device code (RFC " +
          "8628). Confidential clients " +
          "authenticate with HTTP Basic, `client_secret_post` or `private_key_jwt`; public " +
          "clients send `client_id` " +
          "alone. A browser app may call it from a registered JavaScript origin (CORS). With a " +
          "`DPoP` proof (RFC 9449), the access token is bound to the proof's key (`token_type` " +
          "`DPoP`, claim `cnf.jkt`), and so is a public client's refresh token.",
        security: clientAuth,
        parameters: [{
          name: "DPoP",
          in: "header",
          required: false,
          description: "A DPoP proof (RFC 9449 4): a JWT of `typ` `dpop+jwt`, `alg` `EdDSA`, " +
            "`Ed25519` or `ES256`, with the public `jwk` in its header, and claims `jti`, `htm` " +
            "(`POST`), `htu` (this endpoint's URL), `iat` (at most 300 s old, 30 s ahead) and " +
            "`nonce` when the server requires one. Once only.",
          schema: { type: "string" },
        }],
        requestBody: form({
          grant_type: {
            type: "string",
            enum: [
              "authorization_code",
              "refresh_token",
              "client_credentials",
              "urn:ietf:params:oauth:grant-type:token-exchange",
              "urn:ietf:params:oauth:grant-type:device_code",
            ],
          },
          device_code: string(
            "urn:ietf:params:oauth:grant-type:device_code: the device code (RFC 8628 3.4). " +
              "While the user has not decided: `authorization_pending`; polled sooner than the " +
              "interval: `slow_down` (the interval grows by 5 s); `access_denied`, " +
              "`expired_token`.",
          ),
          code: string("authorization_code: the code from the redirect."),
          redirect_uri: string("authorization_code: the redirect URI of the request."),
          code_verifier: string("authorization_code: the PKCE verifier."),
          refresh_token: string("refresh_token: the refresh token."),
          scope: string("Space-separated scopes, at most those granted."),
          subject_token: string("Token exchange: the token to exchange."),
          subject_token_type: string("Token exchange: its type URN."),
          actor_token: string("Token exchange: the acting party's token."),
          // Repeatable (RFC 8693 2.1, RFC 8707 2): an array of a form is its field repeated.
          audience: {
            type: "array",
            items: { type: "string" },
            description: "Token exchange: the installation's id. One only: more is " +
              "`invalid_target`.",
          },
          resource: {
            type: "array",
            items: { type: "string" },
            description: "Resource indicators (RFC 8707): not taken. Ignored, but by a token " +
              "exchange, which refuses them (`invalid_target`).",
          },
          requested_token_type: string("Token exchange: the type wanted."),
        }, ["grant_type"]),
        responses: {
          "200": {
            description: "The token (RFC 6749 5.1).",
            headers: { ...noStore, ...corsHeaders, ...dpopNonce },
            content: {
              "application/json": {
                schema: {
                  type: "object",
                  required: ["access_token", "token_type", "expires_in"],
                  properties: {
                    access_token: string("A JWT signed with EdDSA."),
                    token_type: { type: "string", enum: ["Bearer", "DPoP", "N_A"] },
                    expires_in: { type: "integer", minimum: 0 },
                    scope: { type: "string" },
                    refresh_token: { type: "string" },
                    issued_token_type: { type: "string" },
                  },
                  additionalProperties: false,
                },
              },
            },
          },
          ...errors(formErrors, { ...corsHeaders, ...dpopNonce }),
        },
      },
      options: preflight("tokenPreflight", "token endpoint"),
    },
    [oauthPaths.deviceAuthorization]: {
      post: {
        operationId: "deviceAuthorization",
        tags: ["OAuth 2"],
        summary: "Device authorization endpoint",
        description: "RFC 8628 3.1: a device (a TV, a command-line tool) asks for a device code, " +
          "which it polls the token endpoint with, and a user code, which the user enters on " +
          "the verification page in a browser. `native` clients send `client_id` alone; `web` " +
          "clients authenticate as at the token endpoint; `spa` clients are " +
          "`unauthorized_client`. `scope` is checked as at the authorization endpoint.",
        security: clientAuth,
        requestBody: form({ scope: string("Space-separated scopes.") }, []),
        responses: {
          "200": {
            description: "The codes (RFC 8628 3.2).",
            headers: noStore,
            content: {
              "application/json": {
                schema: {
                  type: "object",
                  required: [
                    "device_code",
                    "user_code",
                    "verification_uri",
                    "verification_uri_complete",
                    "expires_in",
                    "interval",
                  ],
                  properties: {
                    device_code: string("Opaque; the device polls the token endpoint with it."),
                    user_code: {
                      type: "string",
                      pattern: "^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$",
                      description: "What the user enters (RFC 8628 6.1's 20 consonants).",
                    },
                    verification_uri: { type: "string", format: "uri" },
                    verification_uri_complete: { type: "string", format: "uri" },
                    expires_in: { type: "integer", enum: [600] },
                    interval: { type: "integer", enum: [5] },
                  },
                  additionalProperties: false,
                },
              },
            },
          },
          ...errors(keptFormErrors),
        },
      },
    },
    [oauthPaths.device]: {
      get: {
        operationId: "deviceVerificationPage",
        tags: ["OAuth 2"],
        summary: "Device verification page",
        description: "RFC 8628 3.3: for the signed-in user (the `session` cookie), a form with " +
          "one field for the user code (pre-filled from `user_code`) and Continue. Without a " +
          "session: a redirect to the sign-in page (302), or a page saying to sign in.",
        security: [{ session: [] }],
        parameters: [{
          name: "user_code",
          in: "query",
          required: false,
          description: "The user code, from `verification_uri_complete`.",
          schema: { type: "string" },
        }],
        responses: {
          "200": html("The code form."),
          "302": redirect("To the sign-in page."),
          "401": html("The user is not signed in (no sign-in page configured)."),
          "405": html("Not GET or POST.", {
            headers: { Allow: { required: true, schema: { type: "string" } } },
          }),
          "500": html("Something went wrong."),
          "503": html("The sign-in service is busy; retry.", {
            headers: {
              "Retry-After": { required: true, schema: { type: "string", pattern: "^[0-9]+$" } },
            },
          }),
        },
      },
      post: {
        operationId: "deviceVerification",
        tags: ["OAuth 2"],
        summary: "The verification page's forms",
        description: "Without `decision`: the user code and the code form's `csrf_token`; " +
          "answered with the consent page (Allow, Deny), or the form again (400) for a wrong " +
          "code. After 20 wrong codes in a minute from one session or one address, every code " +
          "is refused for 5 minutes (429). With `decision` (`allow` or `deny`): the consent " +
          "page's choice, answered with a page saying to return to the device.",
        security: [{ session: [] }],
        requestBody: {
          required: true,
          content: {
            "application/x-www-form-urlencoded": {
              schema: {
                type: "object",
                properties: {
                  user_code: { type: "string" },
                  csrf_token: { type: "string" },
                  decision: { type: "string", enum: ["allow", "deny"] },
                },
                required: ["csrf_token"],
              },
            },
          },
        },
        responses: {
          "200": html("The consent page, or the page saying to return to the device."),
          "400": html("A wrong or expired code (the form again), or an expired page."),
          "401": html("The user is not signed in."),
          "403": html("The application is only for the users of its project."),
          "413": html("The form exceeds 16 KiB."),
          "429": html("Too many wrong codes: retry after `Retry-After` seconds.", {
            headers: {
              "Retry-After": { required: true, schema: { type: "string", pattern: "^[0-9]+$" } },
            },
          }),
          "500": html("Something went wrong."),
          "503": html("The sign-in service is busy; retry.", {
            headers: {
              "Retry-After": { required: true, schema: { type: "string", pattern: "^[0-9]+$" } },
            },
          }),
        },
      },
    },
    [oauthPaths.introspect]: {
      post: {
        operationId: "introspect",
        tags: ["OAuth 2"],
        summary: "Token introspection",
        description: "RFC 7662, for a confidential client: whether a token is active, and its " +
          "claims. A token that is expired, revoked, of a suspended client or of a revoked " +
          'installation is `{"active": false}`.',
        security: clientAuth,
        requestBody: tokenForm,
        responses: {
          "200": {
            description: "The token's state.",
            headers: noStore,
            content: {
              "application/json": {
                schema: {
                  type: "object",
                  required: ["active"],
                  properties: {
                    active: { type: "boolean" },
                    exp: { type: "integer" },
                    iat: { type: "integer" },
                    ...members(
                      "scope",
                      "client_id",
                      "token_type",
                      "sub",
                      "aud",
                      "iss",
                      "jti",
                      "account_id",
                      "installation_id",
                    ),
                    act: {
                      type: "object",
                      properties: { sub: { type: "string" } },
                      required: ["sub"],
                      additionalProperties: false,
                    },
                    cnf: {
                      type: "object",
                      description: "A DPoP-bound token's key (RFC 9449 6.2): `jkt`, its RFC 7638 " +
                        "thumbprint; `token_type` is then `DPoP`.",
                      properties: { jkt: { type: "string" } },
                      required: ["jkt"],
                      additionalProperties: false,
                    },
                  },
                  additionalProperties: false,
                },
              },
            },
          },
          ...errors(formErrors),
        },
      },
    },
    [oauthPaths.par]: {
      post: {
        operationId: "pushAuthorizationRequest",
        tags: ["OAuth 2"],
        summary: "Pushed authorization request",
        description: "RFC 9126: the client sends its authorization request from its back end, " +
          "authenticated as at the token endpoint (a public client by client_id alone); it is " +
          "checked whole and kept under a `request_uri`, which the authorization endpoint then " +
          "takes with `client_id`, once: it has 60 seconds (`expires_in`) to get there, then " +
          "10 minutes for the user's sign-in and decision. With a `DPoP` proof (RFC 9449 10.1), the " +
          "code it leads to is bound to the proof's key, as with `dpop_jkt`.",
        security: clientAuth,
        parameters: [{
          name: "DPoP",
          in: "header",
          required: false,
          description: "A DPoP proof (RFC 9449 4), checked as at the token endpoint, with `htu` " +
            "this endpoint's URL; a bad one is `invalid_dpop_proof` and nothing is kept. Its " +
            "key's thumbprint is the request's `dpop_jkt` (one given too must be the same, else " +
            "`invalid_request`).",
          schema: { type: "string" },
        }],
        requestBody: form(
          Object.fromEntries(
            authorizationParameters.filter((p) =>
              p.name !== "request_uri" && p.name !== "client_id"
            )
              .map((p) => [p.name as string, string(p.description as string)]),
          ),
          ["response_type", "code_challenge", "code_challenge_method"],
        ),
        responses: {
          "201": {
            description: "The request is kept: its request_uri and lifetime.",
            headers: { ...noStore, ...dpopNonce },
            content: {
              "application/json": {
                schema: {
                  type: "object",
                  required: ["request_uri", "expires_in"],
                  properties: {
                    request_uri: { type: "string" },
                    expires_in: { type: "integer" },
                  },
                  additionalProperties: false,
                },
              },
            },
          },
          ...errors(keptFormErrors, dpopNonce),
        },
      },
    },
    [oauthPaths.revoke]: {
      post: {
        operationId: "revoke",
        tags: ["OAuth 2"],
        summary: "Token revocation",
        description: "RFC 7009: revokes a token of the client (a refresh token with its whole " +
          "family). An unknown or already revoked token is also 200.",
        security: clientAuth,
        requestBody: tokenForm,
        responses: {
          "200": {
            description: "Revoked (or nothing to revoke); no body.",
            headers: { ...noStore, ...corsHeaders },
          },
          ...errors(formErrors, corsHeaders),
        },
      },
      options: preflight("revokePreflight", "revocation endpoint"),
    },
  };
}

/** The schemas and security schemes the OAuth paths refer to. */
export const oauthOpenApiComponents = {
  schemas: { OAuthError: oauthError },
  securitySchemes: {
    clientBasic: {
      type: "http",
      scheme: "basic",
      description: "`client_secret_basic`: the client id and secret, each form-urlencoded, " +
        "then base64 (RFC 6749 2.3.1).",
    },
    session: {
      type: "apiKey",
      in: "cookie",
      name: "session",
      description: "The signed-in user's platform token, set by the platform's sign-in page.",
    },
  },
};
