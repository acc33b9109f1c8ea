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
 * - `public`: nobody in particular.
 *
 * The handler finds the verified client with {@link clientOf} and the user with lib/policy's
 * `callerOf`. The interceptor refuses to build when a method has no rule.
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
import {
  type Client,
  ClientStatus,
  ClientType,
  TokenEndpointAuthMethod,
} from "../../gen/registry/oauth/v1/client_pb.ts";
import { authentication, type TokenVerifier } from "../../lib/policy/mod.ts";
import type { TokenService } from "../../gen/registry/token/v1/token_service_pb.ts";
import type { ClientCredentials } from "../../gen/registry/token/v1/token_service_pb.ts";
import { type AssertionVerifier, jwtBearerAssertionType } from "./client_assertion.ts";
import { oauthError } from "./oauth_errors.ts";
import { expired, type Registry } from "./registry.ts";

/** Who may call a method (see the module's header). */
export type ClientRule =
  | "client"
  | "client_or_public"
  | "user"
  | "user_or_anonymous"
  | "public";

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
};

const clientKey = createContextKey<Client | undefined>(undefined, { description: "oauth client" });

/** The verified client of a call whose rule is `client`. */
export function clientOf(ctx: HandlerContext | { values: ContextValues }): Client {
  const client = ctx.values.get(clientKey);
  if (!client) throw new ConnectError("No authenticated client", Code.Internal);
  return client;
}

/** Options of {@link clientAuthentication}. */
export interface ClientAuthOptions {
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
    if (req.stream || rule === undefined) {
      throw new ConnectError(`${req.method.name} has no client rule`, Code.PermissionDenied);
    }
    if (rule === "public") return await next(req);
    if (rule === "user") return await user(next)(req);
    if (rule === "user_or_anonymous") {
      return req.header.get("authorization") === null ? await next(req) : await user(next)(req);
    }
    const credentials = (req.message as { client?: ClientCredentials }).client;
    req.contextValues.set(
      clientKey,
      await authenticate(options, credentials, rule === "client_or_public"),
    );
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

async function authenticate(
  { registry, assertions, now }: ClientAuthOptions,
  credentials: ClientCredentials | undefined,
  publicAllowed: boolean,
): Promise<Client> {
  if (
    credentials && (credentials.clientAssertion !== "" || credentials.clientAssertionType !== "")
  ) {
    if (credentials.clientAssertionType !== jwtBearerAssertionType) {
      throw oauthError(
        "invalid_request",
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
    return await assertions(credentials.clientAssertion, credentials.clientId);
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
    return verified.client;
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
  return client;
}
