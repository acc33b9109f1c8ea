/**
 * The authorization endpoint's rules (RFC 6749 4.1.1-4.1.2, RFC 7636, RFC 9700 2.1, RFC 9207),
 * as a list of small checks run in order for StartAuthorization and again for DecideAuthorization:
 *
 * 1. the client: known and active ({@link checkClient});
 * 2. the redirect URI: registered for the client, the same string ({@link redirectMatches});
 *    a failure of 1 or 2 is shown to the user and never redirected (RFC 6749 4.1.2.1);
 * 2a. a parameter given twice (`repeated_parameter`, as the gateway saw it): `invalid_request`,
 *    redirected as 3;
 * 2b. a request not pushed (no `request_uri`) when the server (REQUIRE_PAR) or the client
 *    (`require_pushed_authorization_requests`) requires PAR: `invalid_request`, redirected as 3;
 * 3. the response type (`code`), the state (no control character), the PKCE challenge (S256,
 *    ./pkce.ts) and the scope:
 *    a failure is sent back to the client's redirect URI with the error, `state` and `iss`, once
 *    the user has signed in (RFC 9700 4.11.2: no redirect for a browser nobody signed in to,
 *    but that of `prompt=none`, which asks for no sign-in);
 * 4. the scopes are ones the project declares, when it declares any (./scope.ts), `prompt`
 *    (OpenID Connect Core 3.1.2.1) is well formed, and so is `dpop_jkt` (RFC 9449 10: the code is
 *    then bound to that DPoP key);
 * 5. the user is signed in (without a session only `prompt=none` is answered:
 *    `login_required`), and the project accepts the user (an `internal` audience takes only its
 *    own users).
 *
 * Then the consent. Remembered consent first: when the user's live installation of the project
 * already holds every scope asked for, StartAuthorization answers at once with the code Allow
 * would give, and records nothing (unless `prompt=consent`, which shows the page anyway);
 * `prompt=none` never shows a page (`consent_required` when consent is not remembered).
 * Otherwise the page lists the scopes the installation does not hold yet. On the page: its CSRF
 * token (bound to the user's session and to the request); Allow adds the scopes to the
 * installation (the registry keeps the union) and gives the code (single use, 60 seconds, bound
 * to the client, the redirect URI, the challenge and the installation, for exactly the scopes
 * asked for: never the union, as Google does without `include_granted_scopes`).
 *
 * The user's choice on the page is a security event (./security_events.ts): `allowed` once the
 * registry recorded the consent, in the statement that writes the code it gives, `denied` for
 * Deny, each about the client, with the scopes (and the installation that holds an Allow).
 * Remembered consent records nothing: nobody decided.
 *
 * A pushed request (RFC 9126, ./pushed.ts) is checked by the same list up to the user's step
 * ({@link checkPushed}), its faults thrown as the RFC 6749 5.2 error to the client that pushed it.
 *
 * @module
 */

import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { type Client, ClientStatus, ClientType } from "../../gen/registry/oauth/v1/client_pb.ts";
import {
  Audience,
  type OAuthConfig,
  PublishingStatus,
} from "../../gen/registry/oauth/v1/config_pb.ts";
import {
  type AuthorizationRequest,
  ConsentScopeSchema,
  type ConsentScreen,
  Decision,
} from "../../gen/registry/token/v1/token_service_pb.ts";
import { oauthDescription, sha256 } from "../../lib/platform/mod.ts";
import { type AuditContext, auditContextOf } from "../../lib/audit/mod.ts";
import { administers, callerOf } from "../../lib/policy/mod.ts";
import { checkDeclared, describeScopes, parsePrompt, parseScope } from "./scope.ts";
import type { Installation } from "../../gen/registry/oauth/v1/installation_pb.ts";
import { oauthError, type OAuthErrorCode } from "./oauth_errors.ts";
import { challengeProblem } from "./pkce.ts";
import type { Registry } from "./registry.ts";
import { deriveFromSecret } from "./keys.ts";
import type { GrantRepository } from "./repository/grants.ts";
import { csrfExpiry, csrfToken, csrfValid } from "./csrf.ts";
import type { UsedJtis } from "./repository/used_jtis.ts";
import { randomToken } from "./opaque_tokens.ts";
import { clientResource, type SecurityEvent } from "./security_events.ts";

/** How long a code lives (RFC 6749 4.1.2 recommends at most 10 minutes; we take 60 seconds). */
export const codeTtlMs = 60_000;
/** The longest `state` echoed back. */
const maxStateLength = 2048;
/** A `dpop_jkt` (RFC 9449 10): an RFC 7638 SHA-256 thumbprint, base64url without padding. */
const jktPattern = /^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$/;

/** What the authorization endpoint needs. */
export interface AuthorizationDeps {
  /** The registry (clients, configs, consent). */
  registry: Registry;
  /** The code table. */
  grants: GrantRepository;
  /** The `iss` of every answer (RFC 9207). */
  issuer: string;
  /** The HMAC keys of CSRF tokens (./csrf.ts): the first makes them, each checks them. */
  csrfKeys: readonly Promise<CryptoKey>[];
  /** The clock (ms since the epoch). */
  now: () => number;
  /** Writes a security event on its own (./security_events.ts's recordEvent). */
  recordEvent(audit: AuditContext, event: SecurityEvent): Promise<void>;
  /** Whether every client must push its authorization requests (REQUIRE_PAR, RFC 9126). */
  requirePar: boolean;
  /** Where a consent page's CSRF token is spent by its one decision. */
  usedJtis: Pick<UsedJtis, "use">;
}

/** A request that passed the checks. */
interface Checked {
  client: Client;
  config: OAuthConfig;
  /** Where the answer goes: the redirect_uri given, or the client's only registered one. */
  redirectUri: string;
  scopes: string[];
  /** The `prompt` values. */
  prompt: Set<"none" | "login" | "consent">;
  /** The user's token (the call's `authorization`). */
  authorization: string;
  /** The account the user's verified token acts for (empty when no user is asked). */
  accountId: string;
}

/** The user is not signed in: the gateway sends the browser to sign in, then back. */
function notSignedIn(): ConnectError {
  return new ConnectError("The user is not signed in", Code.Unauthenticated);
}

/** A refusal shown on the page, never redirected. */
function shown(error: OAuthErrorCode, description: string): ConnectError {
  return oauthError(error, description);
}

/**
 * The answer to send the browser to: `redirect_uri` with the parameters added to its query, the
 * URI kept as it was registered and sent, byte for byte (RFC 6749 3.1.2: its query "MUST be
 * retained"; re-serialising it would turn `%20` into `+` and drop a bare `?flag`'s meaning). A
 * redirect URI has no fragment (the registry refuses one).
 */
export function redirectWith(redirectUri: string, params: [string, string][]): string {
  const added = new URLSearchParams(params).toString();
  const query = redirectUri.indexOf("?");
  if (query < 0) return `${redirectUri}?${added}`;
  const joined = query === redirectUri.length - 1 || redirectUri.endsWith("&");
  return `${redirectUri}${joined ? "" : "&"}${added}`;
}

/**
 * A loopback IP redirect URI with its port taken out, or undefined when it is not one: `http://`,
 * then `127.0.0.1` or `[::1]` exactly as written, an optional port (1 to 65535), and the rest of
 * the string untouched. Nothing is parsed or normalised, so `http://127.1`, `http://0x7f.0.0.1`,
 * userinfo, `/x/../cb`, an empty `?` or `#` and a different case stay what they are: different.
 */
function withoutLoopbackPort(uri: string): string | undefined {
  const match = /^http:\/\/(127\.0\.0\.1|\[::1\])(?::([0-9]{1,5}))?(?=[/?#]|$)/.exec(uri);
  const port = match?.[2];
  if (!match || (port !== undefined && (Number(port) < 1 || Number(port) > 65535))) {
    return undefined;
  }
  return `http://${match[1]}${uri.slice(match[0].length)}`;
}

/**
 * Whether a redirect_uri matches a registered one: the same string (RFC 9700 2.1), except that a
 * native app's loopback IP redirect may name any port (RFC 8252 7.3: it listens on an ephemeral
 * one), and only the port: both strings, the port taken out, are compared as sent.
 */
export function redirectMatches(client: Client, requested: string): boolean {
  if (client.redirectUris.includes(requested)) return true;
  if (client.type !== ClientType.NATIVE) return false;
  const asked = withoutLoopbackPort(requested);
  return asked !== undefined &&
    client.redirectUris.some((registered) => withoutLoopbackPort(registered) === asked);
}

/** Checks 1 and 2: the client, and where to answer. Throws what is shown on the page. */
async function checkClient(deps: AuthorizationDeps, req: AuthorizationRequest) {
  if (req.clientId === "") throw shown("invalid_request", "client_id is required");
  const client = await deps.registry.lookupClient(req.clientId);
  if (!client) throw shown("invalid_client", "There is no such client");
  if (client.status !== ClientStatus.ACTIVE) {
    throw shown("invalid_client", "This application's client is suspended");
  }
  let redirectUri: string;
  if (req.redirectUri !== "") {
    if (!redirectMatches(client, req.redirectUri)) {
      throw shown("invalid_request", "redirect_uri is not one of the client's registered URIs");
    }
    redirectUri = req.redirectUri;
  } else if (client.redirectUris.length === 1) {
    redirectUri = client.redirectUris[0]!;
  } else {
    throw shown(
      "invalid_request",
      client.redirectUris.length === 0
        ? "The client has no registered redirect URI"
        : "redirect_uri is required: the client has more than one",
    );
  }
  return { client, redirectUri };
}

/** The outcome of the checks: the request, or the error redirect to answer with. */
type Outcome = { kind: "ok"; checked: Checked } | { kind: "redirect"; to: string };

/** Every check, in order; see the module's header. */
async function check(
  deps: AuthorizationDeps,
  req: AuthorizationRequest,
  ctx: HandlerContext | undefined,
): Promise<Outcome> {
  const { client, redirectUri } = await checkClient(deps, req);
  if (req.state.length > maxStateLength) {
    // Too long to send back, and an error redirect without it could not be matched to its request
    // (RFC 6749 4.1.2.1: the error response carries "the exact value received"): shown to the
    // user (a pushed request: answered to its client), never redirected.
    throw shown("invalid_request", `state may be at most ${maxStateLength} characters`);
  }
  const state = req.state;
  /** The user's token; null without a session (and for a pushed request, which has no user). */
  const authorization = ctx?.requestHeader.get("authorization") ?? null;
  /** Parsed once; a malformed `prompt` is refused below, in its turn. */
  const prompt = parsePrompt(req.prompt);
  const refuse = (error: OAuthErrorCode, description: string): Outcome => {
    // A pushed request (no user yet, no ctx) is answered to the client that pushed it.
    if (!ctx) throw oauthError(error, description);
    // RFC 9700 4.11.2: the user signs in before any redirect, so that an erroneous request (a
    // made-up scope, say) cannot bounce a browser nobody signed in to a registered URI; once
    // signed in, the same request is answered with its error. The exception is silent
    // authentication: `prompt=none` without a session is login_required at once.
    if (authorization === null && !prompt?.has("none")) throw notSignedIn();
    return { kind: "redirect", to: errorRedirect(deps, redirectUri, state, error, description) };
  };
  // RFC 6749 3.1 and 4.1.2.1: a parameter the request gave twice is invalid_request, sent back to
  // the client now that its redirect URI is known. Named when it looks like a parameter's name:
  // the description quotes nothing else a caller sent.
  if (req.repeatedParameter !== "") {
    return refuse(
      "invalid_request",
      /^[a-z_]{1,32}$/.test(req.repeatedParameter)
        ? `The parameter ${req.repeatedParameter} is given more than once`
        : "A parameter is given more than once",
    );
  }
  // RFC 9126 4: a request that should have been pushed is invalid_request, sent back to the
  // client now that its redirect URI is known (as node-oidc-provider does).
  const parRequired = deps.requirePar || client.requirePushedAuthorizationRequests;
  if (ctx && req.requestUri === "" && parRequired) {
    return refuse("invalid_request", "Pushed Authorization Request must be used");
  }
  if (req.responseType === "") return refuse("invalid_request", "response_type is required");
  if (req.responseType !== "code") {
    return refuse("unsupported_response_type", "This server answers response_type=code only");
  }
  // Answered in the query only: a client that asked for another way is told so in the query,
  // never handed its code there unawares.
  if (req.responseMode !== "" && req.responseMode !== "query") {
    return refuse(
      "invalid_request",
      "response_mode must be query, the only one this server answers",
    );
  }
  // A request object (RFC 9101) is not taken: refused, not answered without its parameters.
  if (req.request !== "") {
    return refuse("request_not_supported", "This server does not take request objects (request)");
  }
  // RFC 6749 A.5: state is printable characters. A control character (C0, DEL or C1) is refused,
  // not carried: the consent page's form may not post it back as it came (Chromium posts a line
  // break, CR or LF, as CR LF), and then the page's Allow and Deny were never answered.
  // deno-lint-ignore no-control-regex
  if (/[\x00-\x1F\x7F-\x9F]/.test(state)) {
    return refuse("invalid_request", "state must not hold control characters (RFC 6749 A.5)");
  }
  const pkce = challengeProblem(req.codeChallenge, req.codeChallengeMethod);
  if (pkce) return refuse("invalid_request", pkce);
  let scopes: string[];
  try {
    scopes = parseScope(req.scope);
  } catch (error) {
    return refuse("invalid_scope", (error as ConnectError).rawMessage);
  }
  const config = await deps.registry.getConfig(client.projectId);
  if (!config) throw shown("invalid_client", "The application has no consent screen");
  try {
    checkDeclared(config, scopes);
  } catch (error) {
    return refuse("invalid_scope", (error as ConnectError).rawMessage);
  }
  if (!prompt) {
    return refuse(
      "invalid_request",
      "prompt must be none, or any of login and consent, space-separated, each at most once",
    );
  }
  if (req.dpopJkt !== "" && !jktPattern.test(req.dpopJkt)) {
    return refuse(
      "invalid_request",
      "dpop_jkt must be a JWK SHA-256 thumbprint: 43 base64url characters",
    );
  }
  if (!ctx) {
    return {
      kind: "ok",
      checked: { client, config, redirectUri, scopes, prompt, authorization: "", accountId: "" },
    };
  }
  if (authorization === null) {
    // No session: the gateway checks the request before the user signs in (OpenID Connect Core
    // 3.1.2.6 for prompt=none).
    if (prompt.has("none")) return refuse("login_required", "The user is not signed in");
    throw notSignedIn();
  }
  const caller = callerOf(ctx);
  if (config.audience === Audience.INTERNAL && !administers(caller, client.projectId)) {
    return refuse("access_denied", "This application is only for the users of its project");
  }
  return {
    kind: "ok",
    checked: {
      client,
      config,
      redirectUri,
      scopes,
      prompt,
      authorization,
      accountId: caller.accountId,
    },
  };
}

function errorRedirect(
  deps: AuthorizationDeps,
  redirectUri: string,
  state: string,
  error: OAuthErrorCode,
  description: string,
): string {
  const params: [string, string][] = [
    ["error", error],
    ["error_description", oauthDescription(description)],
  ];
  if (state !== "") params.push(["state", state]);
  params.push(["iss", deps.issuer]);
  return redirectWith(redirectUri, params);
}

/** The origin an answer goes to (a private-use scheme: the scheme), for the page's CSP. */
function targetOf(redirectUri: string): string {
  const url = new URL(redirectUri);
  return url.protocol === "http:" || url.protocol === "https:" ? url.origin : url.protocol;
}

/**
 * What a consent page's CSRF token is bound to: every parameter of the request, a pushed one's
 * `request_uri` too (two pushes of the same parameters are two requests, each decided by its own
 * page only), and what the page showed of the request as resolved: the redirect URI (the client's
 * one registered URI when the request names none) and the scopes. A registration changed between
 * the page and its POST makes the page stale, never sends the code where the page did not say.
 */
function csrfBound(
  req: AuthorizationRequest,
  shown: { redirectUri: string; scopes: readonly string[] },
): string[] {
  return [
    "consent",
    shown.redirectUri,
    shown.scopes.join(" "),
    req.responseType,
    req.clientId,
    req.redirectUri,
    req.scope,
    req.state,
    req.codeChallenge,
    req.codeChallengeMethod,
    req.prompt,
    req.dpopJkt,
    req.requestUri,
    req.responseMode,
    req.request,
  ];
}

/** StartAuthorization: the consent screen, or the error redirect. */
export async function startAuthorization(
  deps: AuthorizationDeps,
  req: AuthorizationRequest | undefined,
  ctx: HandlerContext,
): Promise<{ consent: Omit<ConsentScreen, "$typeName"> } | { redirectTo: string }> {
  if (!req) throw shown("invalid_request", "The authorization request is missing");
  const outcome = await check(deps, req, ctx);
  if (outcome.kind === "redirect") return { redirectTo: outcome.to };
  const { client, config, redirectUri, scopes, prompt, authorization, accountId } = outcome.checked;
  const installation = await deps.registry.liveInstallation(
    authorization,
    accountId,
    client.projectId,
  );
  const held = new Set(installation?.scopes ?? []);
  const toAllow = scopes.filter((s) => !held.has(s));
  if (installation && toAllow.length === 0 && !prompt.has("consent")) {
    // Remembered consent: the code, as Allow would give it; the consent is not recorded again.
    // The installation may be revoked between this read and the code's write: such a code buys
    // nothing, since the grant checks the installation is active before it issues anything
    // (./grants/context.ts's issueInFamily).
    return { redirectTo: await issueCode(deps, outcome.checked, req, installation) };
  }
  if (prompt.has("none")) {
    return {
      redirectTo: errorRedirect(
        deps,
        redirectUri,
        req.state,
        "consent_required",
        "The user has not allowed this application what it asks for",
      ),
    };
  }
  // prompt=consent on a remembered consent: the page asks for every scope again.
  const listed = toAllow.length > 0 ? toAllow : scopes;
  return {
    consent: {
      ...consentBranding(config, client, ctx),
      scopes,
      redirectTarget: targetOf(redirectUri),
      csrfToken: await csrfToken(deps, ctx, csrfBound(req, outcome.checked)),
      scopeDetails: describeScopes(config, listed).map((d) => create(ConsentScopeSchema, d)),
      alreadyGranted: describeScopes(
        config,
        scopes.filter((s) => held.has(s) && !listed.includes(s)),
      ).map((d) => create(ConsentScopeSchema, d)),
    },
  };
}

/**
 * A new code for a checked request (RFC 6749 4.1.2), of the installation that holds the consent:
 * for exactly the scopes asked for. Returns the redirect with `code`, `state` and `iss`.
 */
async function issueCode(
  deps: AuthorizationDeps,
  checked: Checked,
  req: AuthorizationRequest,
  installation: Installation,
  event?: SecurityEvent & { audit: AuditContext },
): Promise<string> {
  const { client, redirectUri, scopes } = checked;
  const code = randomToken("oac_");
  const at = deps.now();
  const familyId = crypto.randomUUID();
  await deps.grants.createCode({
    id: familyId,
    client_id: client.id,
    project_id: client.projectId,
    installation_id: installation.id,
    created_at: new Date(at),
    expires_at: new Date(at + codeTtlMs),
  }, {
    code_hash: sha256(code),
    family_id: familyId,
    client_id: client.id,
    redirect_uri: req.redirectUri,
    code_challenge: req.codeChallenge,
    scopes,
    account_id: installation.accountId,
    principal_id: installation.principalId ?? "",
    expires_at: new Date(at + codeTtlMs),
    dpop_jkt: req.dpopJkt === "" ? null : req.dpopJkt,
  }, event);
  return redirectWith(redirectUri, [
    ["code", code],
    ...(req.state !== "" ? [["state", req.state] as [string, string]] : []),
    ["iss", deps.issuer],
  ]);
}

/**
 * What every consent page shows of the project and the user: the project's branding (its
 * OAuthConfig), the client's name, whether the app is unverified (publishing status `testing`),
 * and the account granting.
 */
export function consentBranding(config: OAuthConfig, client: Client, ctx: HandlerContext) {
  const caller = callerOf(ctx);
  return {
    applicationName: config.applicationName,
    clientName: client.name,
    logoUri: config.logoUri ?? "",
    supportEmail: config.supportEmail ?? "",
    homepageUri: config.homepageUri ?? "",
    privacyPolicyUri: config.privacyPolicyUri ?? "",
    termsOfServiceUri: config.termsOfServiceUri ?? "",
    unverified: config.publishingStatus !== PublishingStatus.PRODUCTION,
    accountId: caller.accountId,
    subject: caller.subject,
  };
}

/**
 * DecideAuthorization: the redirect with a code (Allow) or `access_denied` (Deny). `decided` is
 * called once the choice is known to be the user's (the session and the CSRF token verified, the
 * decision Allow or Deny), before it is acted on: it spends a pushed request's request_uri
 * (./pushed.ts), so a POST that is refused spends nothing. A request that now fails its checks
 * (its project or client changed since the page) is answered with the error redirect, as
 * StartAuthorization answers it, and that answer is its one too: `decided` is called first.
 */
export async function decideAuthorization(
  deps: AuthorizationDeps,
  req: AuthorizationRequest | undefined,
  decision: Decision,
  csrf: string,
  ctx: HandlerContext,
  decided: () => Promise<void>,
): Promise<string> {
  if (!req) throw shown("invalid_request", "The authorization request is missing");
  const outcome = await check(deps, req, ctx);
  if (outcome.kind === "redirect") {
    await decided();
    return outcome.to;
  }
  if (!(await csrfValid(deps, ctx, csrf, csrfBound(req, outcome.checked)))) {
    throw shown(
      "invalid_request",
      "The consent page expired or was not shown to this session; start the sign-in again",
    );
  }
  if (decision !== Decision.DENY && decision !== Decision.ALLOW) {
    throw shown("invalid_request", "decision must be allow or deny");
  }
  // A page is answered once, as node-oidc-provider, Keycloak and Hydra answer theirs: its token
  // is spent (in Postgres, so in every replica) until it would expire anyway. A second POST of the
  // same form (Back and Deny after Allow, a replayed request) gets a page, never a second code or
  // an access_denied that contradicts the consent given.
  if (!(await deps.usedJtis.use("consent", csrf, csrfExpiry(csrf), new Date(deps.now())))) {
    throw shown(
      "invalid_request",
      "This consent page was answered already; start the sign-in again",
    );
  }
  await decided();
  const { client, redirectUri, scopes } = outcome.checked;
  const state = req.state;
  const answer = (params: [string, string][]) =>
    redirectWith(redirectUri, [
      ...params,
      ...(state !== "" ? [["state", state] as [string, string]] : []),
      ["iss", deps.issuer],
    ]);
  const event = (result: "allowed" | "denied", installationId?: string) => ({
    audit: auditContextOf(ctx, deps.now()),
    parent: client.projectId,
    resource: clientResource(client.projectId, client.id),
    result,
    changes: [
      ...(installationId === undefined ? [] : [{ field: "installation_id", new: installationId }]),
      { field: "scopes", new: scopes },
    ],
  });
  if (decision === Decision.DENY) {
    const denied = event("denied");
    await deps.recordEvent(denied.audit, denied);
    return answer([["error", "access_denied"], ["error_description", "The user denied access"]]);
  }

  let installation;
  try {
    // The registry adds the scopes to those the installation holds (the union): a page that
    // listed only the new ones takes none of the others away.
    installation = await deps.registry.consent(ctx.requestHeader, client.projectId, scopes);
  } catch (error) {
    // The registry's refusal (an internal project, since the check above) is said in our words.
    if (error instanceof ConnectError && error.code === Code.PermissionDenied) {
      return answer([
        ["error", "access_denied"],
        ["error_description", "This application is only for the users of its project"],
      ]);
    }
    if (error instanceof ConnectError && error.code === Code.FailedPrecondition) {
      return answer([
        ["error", "invalid_scope"],
        ["error_description", "The installation would hold more than 100 scopes"],
      ]);
    }
    throw error;
  }
  // Written by the statement that writes the code: one round trip, not two.
  return await issueCode(
    deps,
    outcome.checked,
    req,
    installation,
    event("allowed", installation.id),
  );
}

/** The CSRF key, derived from the key the signing keys are sealed under (HKDF-SHA-256). */
export function deriveCsrfKey(secret: string): Promise<CryptoKey> {
  return deriveFromSecret(secret, {
    info: "registry token csrf v1",
    key: { name: "HMAC", hash: "SHA-256", length: 256 },
    usages: ["sign"],
  });
}

/**
 * The checks of a pushed authorization request (RFC 9126 2.1), before any user is known: the
 * client, the redirect URI, the response type, PKCE, the scope and the state. A fault is thrown as
 * the RFC 6749 5.2 error, answered to the client that pushed it.
 */
export async function checkPushed(
  deps: AuthorizationDeps,
  req: AuthorizationRequest,
): Promise<void> {
  await check(deps, req, undefined);
}
