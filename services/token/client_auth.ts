/**
 * Who calls the token service: OAuth clients (RFC 6749 2.3), or, for the authorization endpoint,
 * the signed-in user. This interceptor stands where a platform service has `authentication` and
 * `authorization`. Each method has one rule in {@link clientRules}:
 *
 * - `client`: a confidential client, whose credentials in the request's `client` field verify:
 *   a secret through the registry's VerifyClientSecret, not expired by this service's clock, of a
 *   client registered for a secret; or a client assertion (`private_key_jwt`,
 *   ./client_assertion.ts) of a client registered for it. Else UNAUTHENTICATED, `invalid_client`;
 * - `client_or_public`: the same, or a public client (`spa`, `native`, which has no secret)
 *   presenting its client_id alone, looked up through the registry's LookupClient; a confidential
 *   client without its secret is `invalid_client`;
 * - `user`: the user's platform token in the `authorization` metadata, verified as every service
 *   verifies it (lib/policy);
 * - `user_or_anonymous`: the same when the call carries `authorization`, else nobody (the handler
 *   then answers only what needs no user: StartAuthorization's `login_required`);
 * - `public`: nobody in particular;
 * - `project_admin` (ListEvents, WatchEvents: internal, no HTTP route): a platform token, verified
 *   as `user`, of a caller that administers the request's project (its `projects` claim lists it,
 *   or is `*`), as lib/policy's `projectAdmin` rule decides for the other services; the project
 *   `-` (./security_events.ts: the failures of no project) only for `*`. The only rule a
 *   server-streaming method may have: its one request message is read and checked first.
 *
 * The handler finds the verified client with {@link clientOf} and the user with lib/policy's
 * `callerOf`. The interceptor refuses to build when a method has no rule.
 *
 * Every failed client authentication (`invalid_client`) is counted, by the client_id presented
 * (or the `sub` of the client assertion), for the minute's summary of ./auth_failures.ts.
 *
 * @module
 */

import type { DescService } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  type ContextValues,
  createContextKey,
  type HandlerContext,
  type Interceptor,
} from "@connectrpc/connect";
import { createAsyncIterable } from "@connectrpc/connect/protocol";
import {
  type Client,
  ClientStatus,
  ClientType,
  TokenEndpointAuthMethod,
} from "../../gen/registry/oauth/v1/client_pb.ts";
import {
  authentication,
  type Caller,
  callerOf,
  requireProject,
  type TokenVerifier,
} from "../../lib/policy/mod.ts";
import type { TokenService } from "../../gen/registry/token/v1/token_service_pb.ts";
import { oauthPaths } from "../../lib/platform/mod.ts";
import type { ClientCredentials } from "../../gen/registry/token/v1/token_service_pb.ts";
import { type AssertionVerifier, jwtBearerAssertionType } from "./client_assertion.ts";
import { parseJws } from "./jws.ts";
import { oauthError } from "./oauth_errors.ts";
import { expired, type Registry } from "./registry.ts";
import type { AuthFailures } from "./auth_failures.ts";
import { noProject } from "./security_events.ts";

/** Who may call a method (see the module's header). */
export type ClientRule =
  | "client"
  | "client_or_public"
  | "user"
  | "user_or_anonymous"
  | "public"
  | "project_admin";

/** The rule of each TokenService method. */
export const clientRules: Record<keyof typeof TokenService.method, ClientRule> = {
  issueToken: "client_or_public",
  introspectToken: "client",
  revokeToken: "client_or_public",
  getJwks: "public",
  checkCorsOrigin: "public",
  startAuthorization: "user_or_anonymous",
  decideAuthorization: "user",
  startDeviceAuthorization: "client_or_public",
  startDeviceVerification: "user",
  lookupDeviceCode: "user",
  decideDeviceCode: "user",
  pushAuthorizationRequest: "client_or_public",
  listEvents: "project_admin",
  watchEvents: "project_admin",
};

const clientKey = createContextKey<Client | undefined>(undefined, { description: "oauth client" });

const secretUntilKey = createContextKey<number | undefined>(undefined, {
  description: "when the secret the client authenticated with expires",
});

/** The verified client of a call whose rule is `client`. */
export function clientOf(ctx: HandlerContext | { values: ContextValues }): Client {
  const client = ctx.values.get(clientKey);
  if (!client) throw new ConnectError("No authenticated client", Code.Internal);
  return client;
}

/**
 * When the secret the call's client authenticated with expires (ms since the epoch; Infinity:
 * never), or undefined when the client did not authenticate with a secret (a client assertion, a
 * public client's client_id).
 */
export function secretUntilOf(ctx: HandlerContext | { values: ContextValues }): number | undefined {
  return ctx.values.get(secretUntilKey);
}

/** The HTTP endpoint of each method that authenticates clients: a client assertion may name it. */
const endpointPaths: Partial<Record<keyof typeof TokenService.method, string>> = {
  issueToken: oauthPaths.token,
  introspectToken: oauthPaths.introspect,
  revokeToken: oauthPaths.revoke,
  startDeviceAuthorization: oauthPaths.deviceAuthorization,
  pushAuthorizationRequest: oauthPaths.par,
};

/** Options of {@link clientAuthentication}. */
export interface ClientAuthOptions {
  /** The issuer: the endpoints' URLs are under it. */
  issuer: string;
  /** The registry (cached or not). */
  registry: Registry;
  /** Checks client assertions (`private_key_jwt`). */
  assertions: AssertionVerifier;
  /** Verifies users' platform tokens. */
  verify: TokenVerifier;
  /** The service, and the rule of each of its methods (every one must have one). */
  service: DescService;
  rules: Record<string, ClientRule>;
  /** The clock (ms since the epoch): a secret is refused from its expiry on by it. */
  now: () => number;
  /** Where failed client authentications are counted (./auth_failures.ts); none: not counted. */
  failures?: Pick<AuthFailures, "record"> | undefined;
}

/**
 * Refuses a caller that does not administer `projectId` (PERMISSION_DENIED); the project of no
 * project's events (`-`) is for callers that administer every project.
 */
function requireAdmin(caller: Caller, projectId: string): void {
  if (projectId === noProject && caller.projects !== "*") {
    throw new ConnectError(
      "Only a caller that administers every project may read the events of no project",
      Code.PermissionDenied,
    );
  }
  requireProject(caller, projectId);
}

/** The client_id a failed authentication claimed: the request's, else the assertion's `sub`. */
function presentedClientId(credentials: ClientCredentials | undefined): string {
  if (!credentials) return "";
  if (credentials.clientId !== "") return credentials.clientId;
  // Not verified (the assertion failed): only a name to count under, and only when it has the
  // registry's form (./auth_failures.ts).
  const sub = parseJws(credentials.clientAssertion, 8192)?.claims.sub;
  return typeof sub === "string" ? sub : "";
}

/** The interceptor; `rules` must name every method of `service`. */
export function clientAuthentication(options: ClientAuthOptions): Interceptor {
  const { service, rules, verify } = options;
  for (const method of service.methods) {
    if (!rules[method.localName]) {
      throw new Error(`No client rule for ${service.typeName}/${method.name}`);
    }
  }
  const user = authentication(verify);
  return (next) => async (req) => {
    const rule = req.method.parent === service ? rules[req.method.localName] : undefined;
    const streams = req.stream &&
      !(rule === "project_admin" && req.method.methodKind === "server_streaming");
    if (streams || rule === undefined) {
      throw new ConnectError(`${req.method.name} has no client rule`, Code.PermissionDenied);
    }
    if (rule === "public") return await next(req);
    if (rule === "user") return await user(next)(req);
    if (rule === "user_or_anonymous") {
      return req.header.get("authorization") === null ? await next(req) : await user(next)(req);
    }
    if (rule === "project_admin") {
      return await user(async (req) => {
        const caller = callerOf({ values: req.contextValues });
        if (!req.stream) {
          requireAdmin(caller, (req.message as unknown as { projectId: string }).projectId);
          return await next(req);
        }
        // A server-streaming call has one request message: read it, check it, hand it on.
        const first = await req.message[Symbol.asyncIterator]().next();
        if (first.done) throw new ConnectError("the request has no message", Code.InvalidArgument);
        requireAdmin(caller, (first.value as unknown as { projectId: string }).projectId);
        return await next({ ...req, message: createAsyncIterable([first.value]) });
      })(req);
    }
    if (req.stream) {
      throw new ConnectError(`${req.method.name} has no client rule`, Code.PermissionDenied);
    }
    const credentials = (req.message as { client?: ClientCredentials }).client;
    let client: Authenticated;
    try {
      const path = endpointPaths[req.method.localName as keyof typeof TokenService.method];
      const endpoint = path === undefined ? undefined : options.issuer + path;
      client = await authenticate(options, credentials, rule === "client_or_public", endpoint);
    } catch (error) {
      // invalid_client (the only UNAUTHENTICATED answer of the checks): counted, never written
      // here (./auth_failures.ts).
      if (error instanceof ConnectError && error.code === Code.Unauthenticated) {
        options.failures?.record(presentedClientId(credentials), req);
      }
      throw error;
    }
    req.contextValues.set(clientKey, client.client);
    req.contextValues.set(secretUntilKey, client.secretUntil);
    return await next(req);
  };
}

/** Whether a client is public (RFC 6749 2.1): it cannot keep a secret. */
export function isPublic(client: Client): boolean {
  return client.type !== ClientType.WEB;
}

/**
 * Whether a client is registered to authenticate with a secret (either way of sending it; a
 * registry that predates the field says nothing, which meant a secret).
 */
function usesSecret(client: Client): boolean {
  const method = client.tokenEndpointAuthMethod;
  return method !== TokenEndpointAuthMethod.PRIVATE_KEY_JWT &&
    method !== TokenEndpointAuthMethod.NONE;
}

/** A verified client, and when the secret it authenticated with expires (Infinity: never). */
interface Authenticated {
  client: Client;
  secretUntil?: number;
}

async function authenticate(
  { registry, assertions, now }: ClientAuthOptions,
  credentials: ClientCredentials | undefined,
  publicAllowed: boolean,
  endpoint: string | undefined,
): Promise<Authenticated> {
  if (
    credentials && (credentials.clientAssertion !== "" || credentials.clientAssertionType !== "")
  ) {
    if (credentials.clientAssertionType === "") {
      throw oauthError(
        "invalid_request",
        "client_assertion_type is required with client_assertion",
      );
    }
    // Another type of assertion (SAML's, RFC 7522) is a method of authentication this server does
    // not support: invalid_client (RFC 6749 5.2, RFC 7521 4.2.1), as a failed one is.
    if (credentials.clientAssertionType !== jwtBearerAssertionType) {
      throw oauthError(
        "invalid_client",
        `client_assertion_type must be ${jwtBearerAssertionType}`,
      );
    }
    if (credentials.clientAssertion === "") {
      throw oauthError(
        "invalid_request",
        "client_assertion is required with client_assertion_type",
      );
    }
    if (credentials.clientSecret !== "") {
      throw oauthError(
        "invalid_request",
        "Use one client authentication method: a client assertion or a secret, not both",
      );
    }
    return {
      client: await assertions(credentials.clientAssertion, credentials.clientId, endpoint),
    };
  }
  if (!credentials || credentials.clientId === "") {
    throw oauthError("invalid_client", "Client authentication is required");
  }
  if (credentials.clientSecret !== "") {
    const verified = await registry.verifySecret(credentials.clientId, credentials.clientSecret);
    // An expired secret fails as a wrong one does, whether the answer is new or remembered; so
    // does a client registered for another method (the registry refuses it too).
    if (!verified || expired(verified, now()) || !usesSecret(verified.client)) {
      throw oauthError("invalid_client", "Client authentication failed");
    }
    return { client: verified.client, secretUntil: verified.expiresAt ?? Infinity };
  }
  if (!publicAllowed) {
    throw oauthError(
      "invalid_client",
      "This endpoint needs a confidential client's credentials (a secret or a client assertion)",
    );
  }
  // A public client presents its client_id alone (token_endpoint_auth_method `none`).
  const client = await registry.lookupClient(credentials.clientId);
  if (!client || client.status !== ClientStatus.ACTIVE) {
    throw oauthError("invalid_client", "Client authentication failed");
  }
  if (!isPublic(client)) {
    throw oauthError(
      "invalid_client",
      client.tokenEndpointAuthMethod === TokenEndpointAuthMethod.PRIVATE_KEY_JWT
        ? "This client authenticates with a client assertion (private_key_jwt)"
        : "A confidential client authenticates with its secret (client_secret_basic or client_secret_post)",
    );
  }
  return { client };
}
