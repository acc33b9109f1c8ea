/**
 * The oauth-registry process (schema `oauth`; gRPC 50051, Connect 8081 by default).
 *
 * @module
 */

import { OAuthRegistryService } from "../../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { positiveInt, required } from "../../lib/config.ts";
import { bind } from "../../lib/server.ts";
import { defineService, runService } from "../../lib/service_main.ts";
import { createSecretHasher } from "./secrets.ts";
import { createOAuthRegistry } from "./service.ts";

/** The service: run as its own process, or embedded by `deno task start`. */
export const oauthRegistryService = defineService({
  name: "oauth-registry",
  schema: "oauth",
  migrations: new URL("./migrations/", import.meta.url),
  ports: { grpc: 50051, http: 8081 },
  settings: { CLIENT_SECRET_HMAC_KEY: required, MAX_SECRETS_PER_CLIENT: positiveInt(10) },
  services: ({ sql, config }) => [
    bind(
      OAuthRegistryService,
      createOAuthRegistry({
        sql,
        hasher: createSecretHasher(config.CLIENT_SECRET_HMAC_KEY),
        maxSecretsPerClient: config.MAX_SECRETS_PER_CLIENT,
      }),
    ),
  ],
});

if (import.meta.main) await runService(oauthRegistryService);
