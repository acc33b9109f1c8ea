/**
 * Who calls the token service: OAuth clients (RFC 6749 2.3), or, for the authorization endpoint,
 * the signed-in user. This interceptor stands where a platform service has `authentication` and
 * `authorization`. Each method has one rule in {@link clientRules}:
 *
 * - `client`: a confidential client, whose credentials in the request's `client` field verify
 *   through the registry's VerifyClientSecret and whose secret has not expired by this service's
 *   clock (else UNAUTHENTICATED, `invalid_client`);
 * - `client_or_public`: the same, or a public client (`spa`, `native`, which has no secret)
 *   presenting its client_id alone, looked up through the registry's LookupClient; a confidential
 *   client without its secret is `invalid_client`;
 * - `user`: the user's platform token in the `authorization` metadata, verified as every service
 *   verifies it (lib/policy);
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
import { type Client, ClientStatus, ClientType } from "../../gen/registry/oauth/v1/client_pb.ts";
import { authentication, type TokenVerifier } from "../../lib/policy/mod.ts";
import type { TokenService } from "../../gen/registry/token/v1/token_service_pb.ts";
import type { ClientCredentials } from "../../gen/registry/token/v1/token_service_pb.ts";
import { oauthError } from "./oauth_errors.ts";
import { expired, type Registry } from "./registry.ts";

/** Who may call a method (see the module's header). */
export type ClientRule = "client" | "client_or_public" | "user" | "public";

/** The rule of each TokenService method. */
export const clientRules: Record<keyof typeof TokenService.method, ClientRule> = {
  issueToken: "client_or_public",
  introspectToken: "client",
  revokeToken: "client_or_public",
  getJwks: "public",
  checkCorsOrigin: "public",
  startAuthorization: "user",
  decideAuthorization: "user",
};

const clientKey = createContextKey<Client | undefined>(undefined, { description: "oauth client" });

/** The verified client of a call whose rule is `client`. */
export function clientOf(ctx: HandlerContext | { values: ContextValues }): Client {
  const client = ctx.values.get(clientKey);
  if (!client) throw new ConnectError("No authenticated client", Code.Internal);
  return client;
}

/**
 * The interceptor; `rules` must name every method of `service`. A secret is refused from its
 * expiry on by `now` (ms since the epoch), the token service's clock.
 */
export function clientAuthentication(
  registry: Registry,
  verify: TokenVerifier,
  service: DescService,
  rules: Record<string, ClientRule>,
  now: () => number,
): Interceptor {
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
    const credentials = (req.message as { client?: ClientCredentials }).client;
    req.contextValues.set(
      clientKey,
      await authenticate(registry, credentials, rule === "client_or_public", now),
    );
    return await next(req);
  };
}

/** Whether a client is public (RFC 6749 2.1): it cannot keep a secret. */
export function isPublic(client: Client): boolean {
  return client.type !== ClientType.WEB;
}

async function authenticate(
  registry: Registry,
  credentials: ClientCredentials | undefined,
  publicAllowed: boolean,
  now: () => number,
): Promise<Client> {
  if (!credentials || credentials.clientId === "") {
    throw oauthError("invalid_client", "Client authentication is required");
  }
  if (credentials.clientSecret !== "") {
    const verified = await registry.verifySecret(credentials.clientId, credentials.clientSecret);
    // An expired secret fails as a wrong one does, whether the answer is new or remembered.
    if (!verified || expired(verified, now())) {
      throw oauthError("invalid_client", "Client authentication failed");
    }
    return verified.client;
  }
  if (!publicAllowed) {
    throw oauthError(
      "invalid_client",
      "This endpoint needs a confidential client's secret (client_secret_basic or client_secret_post)",
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
      "A confidential client authenticates with its secret (client_secret_basic or client_secret_post)",
    );
  }
  return client;
}
