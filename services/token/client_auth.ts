/**
 * Client authentication (RFC 6749 2.3): the token service's callers are OAuth clients, and this
 * interceptor stands where a platform service has `authentication` and `authorization`. Each method
 * has one rule in {@link clientRules}: `client` methods need the credentials in the request's
 * `client` field to verify through the registry's VerifyClientSecret (else UNAUTHENTICATED,
 * `invalid_client`), and the handler finds the verified client with {@link clientOf}; `public`
 * methods need none. The interceptor refuses to build when a method has no rule.
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
import type { Client } from "../../gen/registry/oauth/v1/client_pb.ts";
import type { TokenService } from "../../gen/registry/token/v1/token_service_pb.ts";
import type { ClientCredentials } from "../../gen/registry/token/v1/token_service_pb.ts";
import { oauthError } from "./oauth_errors.ts";
import type { Registry } from "./registry.ts";

/** Who may call a method: an authenticated OAuth client, or anyone. */
export type ClientRule = "client" | "public";

/** The rule of each TokenService method. */
export const clientRules: Record<keyof typeof TokenService.method, ClientRule> = {
  issueToken: "client",
  introspectToken: "client",
  revokeToken: "client",
  getJwks: "public",
};

const clientKey = createContextKey<Client | undefined>(undefined, { description: "oauth client" });

/** The verified client of a call whose rule is `client`. */
export function clientOf(ctx: HandlerContext | { values: ContextValues }): Client {
  const client = ctx.values.get(clientKey);
  if (!client) throw new ConnectError("No authenticated client", Code.Internal);
  return client;
}

/** The interceptor; `rules` must name every method of `service`. */
export function clientAuthentication(
  registry: Registry,
  service: DescService,
  rules: Record<string, ClientRule>,
): Interceptor {
  for (const method of service.methods) {
    if (!rules[method.localName]) {
      throw new Error(`No client rule for ${service.typeName}/${method.name}`);
    }
  }
  return (next) => async (req) => {
    const rule = req.method.parent === service ? rules[req.method.localName] : undefined;
    if (rule === "public") return await next(req);
    if (rule !== "client" || req.stream) {
      throw new ConnectError(`${req.method.name} has no client rule`, Code.PermissionDenied);
    }
    const credentials = (req.message as { client?: ClientCredentials }).client;
    req.contextValues.set(clientKey, await authenticate(registry, credentials));
    return await next(req);
  };
}

async function authenticate(
  registry: Registry,
  credentials: ClientCredentials | undefined,
): Promise<Client> {
  if (!credentials || credentials.clientId === "") {
    throw oauthError("invalid_client", "Client authentication is required");
  }
  if (credentials.clientSecret === "") {
    throw oauthError(
      "invalid_client",
      "This endpoint needs a confidential client's secret (client_secret_basic or client_secret_post)",
    );
  }
  const client = await registry.verifySecret(credentials.clientId, credentials.clientSecret);
  if (!client) throw oauthError("invalid_client", "Client authentication failed");
  return client;
}
