/**
 * The oauth-registry process (schema `oauth`; gRPC 50051, Connect 8081 by default): its handlers,
 * and the interceptors every call goes through, in the order they run.
 *
 * @module
 */

import {
  type CreateClientKeyResponse,
  type CreateClientSecretResponse,
  OAuthRegistryService,
} from "../../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { auditSettings, startAudit } from "../../lib/audit/mod.ts";
import { createIdempotencyStore, followChanges, registryChangesChannel } from "../../lib/db/mod.ts";
import {
  type Logger,
  nonNegativeInt,
  positiveInt,
  registerCacheMetrics,
  secretKey,
  secretKeyList,
} from "../../lib/platform/mod.ts";
import {
  authentication,
  authorization,
  idempotency,
  idempotencySettings,
  policyOf,
} from "../../lib/policy/mod.ts";
import { availability, bind, deadline, logging, metering, tracing } from "../../lib/rpc/mod.ts";
import { defineService, runService } from "../../lib/service/mod.ts";
import { cacheClients } from "./client_cache.ts";
import { cacheConfigs } from "./config_cache.ts";
import { createClientRepository } from "./repository/clients.ts";
import { createOAuthPolicy } from "./policy.ts";
import { createConfigRepository } from "./repository/configs.ts";
import {
  type ClientSecretRepository,
  createClientSecretRepository,
} from "./repository/client_secrets.ts";
import { createSecretHasher, type SecretHasher, secretsByKey } from "./secrets.ts";
import { createOAuthRegistry, oauthRecoveries } from "./service.ts";

/** The service: run as its own process, or embedded by `deno task start`. */
export const oauthRegistryService = defineService({
  name: "oauth-registry",
  schema: "oauth",
  migrations: new URL("./migrations/", import.meta.url),
  ports: { grpc: 50051, http: 8081 },
  settings: {
    CLIENT_SECRET_HMAC_KEY: secretKey,
    CLIENT_SECRET_HMAC_PREVIOUS_KEYS: secretKeyList,
    MAX_SECRETS_PER_CLIENT: positiveInt(10),
    MAX_KEYS_PER_CLIENT: positiveInt(10),
    CONFIG_CACHE_ENTRIES: nonNegativeInt(1000),
    CLIENT_CACHE_MIB: nonNegativeInt(4),
    ...idempotencySettings,
    ...auditSettings,
  },
  serve: ({ sql, config, log, metrics, verify, notReady, migrated, now, budget }) => {
    const audit = startAudit(sql, "oauth", { config, now, log, migrated });
    const configs = createConfigRepository(sql);
    const hasher = createSecretHasher(
      config.CLIENT_SECRET_HMAC_KEY,
      config.CLIENT_SECRET_HMAC_PREVIOUS_KEYS,
    );
    void migrated.then(() => reportSecretKeys(createClientSecretRepository(sql), hasher, log));
    // What consent reads of a project's config, kept in memory; changes reach every replica
    // through Postgres within a second (lib/db/change_feed.ts).
    const cache = config.CONFIG_CACHE_ENTRIES === 0
      ? undefined
      : cacheConfigs((projectId) => configs.get(projectId), {
        follow: (handlers) => followChanges(sql, registryChangesChannel, handlers),
        maxEntries: config.CONFIG_CACHE_ENTRIES,
        budget,
      });
    // What GetClient reads, kept the same way (./client_cache.ts).
    const clients = config.CLIENT_CACHE_MIB === 0
      ? undefined
      : cacheClients(createClientRepository(sql), {
        follow: (handlers) => followChanges(sql, registryChangesChannel, handlers),
        maxBytes: config.CLIENT_CACHE_MIB * 1024 * 1024,
        budget,
      });
    if (clients) {
      registerCacheMetrics(metrics, "client_cache", {
        holds: "Clients",
        answers: "clients",
      }, () => clients.stats());
    }
    return {
      stop() {
        audit.stop();
        void cache?.close();
        void clients?.close();
      },
      services: [
        bind(
          OAuthRegistryService,
          createOAuthRegistry({
            sql,
            hasher,
            maxSecretsPerClient: config.MAX_SECRETS_PER_CLIENT,
            maxKeysPerClient: config.MAX_KEYS_PER_CLIENT,
            now,
            log,
            feed: audit.feed,
            onConfigChanged: (projectId) => cache?.changed(projectId),
            clients,
          }),
        ),
      ],
      interceptors: [
        tracing(),
        logging(log),
        metering(metrics),
        deadline(),
        availability(notReady),
        authentication(verify),
        authorization([
          policyOf(OAuthRegistryService, createOAuthPolicy(cache ?? configs)),
        ]),
        idempotency(
          createIdempotencyStore(sql, {
            schema: "oauth",
            ttlSeconds: config.IDEMPOTENCY_TTL_SECONDS,
            log,
          }),
          [OAuthRegistryService],
          // The plaintext of a secret, and the private part of a generated key, are never stored: a
          // replay has none (each is shown once only).
          [
            [OAuthRegistryService.method.createClientSecret, withoutPlaintext],
            [OAuthRegistryService.method.createClientKey, withoutPrivateKey],
          ],
          // A create whose change committed but whose outcome was lost answers the record as it
          // is, through the same redactions.
          oauthRecoveries(sql, now),
        ),
      ],
    };
  },
});

/**
 * Logs how many client secrets each key made, once at start (the schema migrated): the count of those under a previous
 * key tells when it may go, and secrets under no configured key (a wrong key deployed) are a
 * warning, since they never verify.
 */
function reportSecretKeys(
  secrets: Pick<ClientSecretRepository, "countByKey">,
  hasher: SecretHasher,
  log: Logger,
): void {
  secrets.countByKey().then((counts) => {
    const by = secretsByKey(hasher, counts);
    const fields = { key_id: hasher.keyId, previous_key_ids: hasher.previousKeyIds, ...by };
    if (by.unverifiable > 0) {
      log.warn(
        "client secrets by hash key: some under a key that is not configured, which never verify",
        fields,
      );
    } else log.info("client secrets by hash key", fields);
  }).catch((error) => log.warn("client secrets were not counted by hash key", { error }));
}

function withoutPlaintext<T>(res: T): T {
  const secret = (res as CreateClientSecretResponse).clientSecret;
  if (secret) secret.plaintext = { case: undefined };
  return res;
}

function withoutPrivateKey<T>(res: T): T {
  const key = (res as CreateClientKeyResponse).clientKey;
  if (key) key.privateKey = { case: undefined };
  return res;
}

if (import.meta.main) Deno.exit(await runService(oauthRegistryService));
