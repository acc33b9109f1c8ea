/**
 * The oauth-registry process (schema `oauth`; gRPC 50051, Connect 8081 by default).
 *
 * @module
 */

import type { Message } from "@bufbuild/protobuf";
import {
  type CreateClientSecretResponse,
  OAuthRegistryService,
} from "../../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { requireProject } from "../../lib/auth.ts";
import { positiveInt, required } from "../../lib/config.ts";
import { createIdempotencyStore, idempotencySettings, idempotent } from "../../lib/idempotency.ts";
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
  settings: {
    CLIENT_SECRET_HMAC_KEY: required,
    MAX_SECRETS_PER_CLIENT: positiveInt(10),
    ...idempotencySettings,
  },
  services: ({ sql, config, log }) => [
    bind(
      OAuthRegistryService,
      idempotent(
        OAuthRegistryService,
        createOAuthRegistry({
          sql,
          hasher: createSecretHasher(config.CLIENT_SECRET_HMAC_KEY),
          maxSecretsPerClient: config.MAX_SECRETS_PER_CLIENT,
        }),
        createIdempotencyStore(sql, {
          schema: "oauth",
          ttlSeconds: config.IDEMPOTENCY_TTL_SECONDS,
          log,
        }),
        // A replay skips the handler: re-check the project first. The plaintext of a secret is
        // never stored, so a replayed CreateClientSecret has no `secret` (shown once only).
        {
          createClient: { authorize: (req, caller) => requireProject(caller, projectOf(req)) },
          createClientSecret: {
            authorize: (req, caller) => requireProject(caller, projectOf(req)),
            redact: (res) => {
              const secret = (res as CreateClientSecretResponse).clientSecret;
              if (secret) secret.plaintext = { case: undefined };
              return res;
            },
          },
        },
      ),
    ),
  ],
});

function projectOf(req: Message): string {
  return (req as Message & { projectId: string }).projectId;
}

if (import.meta.main) await runService(oauthRegistryService);
