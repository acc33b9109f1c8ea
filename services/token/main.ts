/**
 * The token service process (schema `token`; gRPC 50053, Connect 8083 by default): the OAuth 2
 * authorization server on the registry. Its handlers, and the interceptors every call goes through,
 * in the order they run. Callers are OAuth clients, authenticated by their credentials in the
 * request (./client_auth.ts) instead of a platform token.
 *
 * @module
 */

import * as v from "valibot";
import { TokenService } from "../../gen/registry/token/v1/token_service_pb.ts";
import {
  defaultIssuer,
  flag,
  issuerUrl,
  nonNegativeInt,
  oauthPaths,
  optionalString,
  positiveInt,
  registerCacheMetrics,
  secretKey,
  secretKeyList,
} from "../../lib/platform/mod.ts";
import { availability, bind, deadline, logging, metering, tracing } from "../../lib/rpc/mod.ts";
import { defineService, runService } from "../../lib/service/mod.ts";
import { clientAuthentication, clientRules } from "./client_auth.ts";
import { createAssertionVerifier } from "./client_assertion.ts";
import { createKeyRing } from "./keys.ts";
import { createRegistry } from "./registry.ts";
import { cacheRegistry } from "./registry_cache.ts";
import { createRevocations, uncachedRevocations } from "./revocations.ts";
import {
  followChanges,
  inBatches,
  registryChangesChannel,
  revocationsChannel,
  signingKeysChannel,
} from "../../lib/db/mod.ts";
import { createAccessTokens } from "./access_tokens.ts";
import { deriveCsrfKey } from "./authorization.ts";
import { createDpop, deriveDpopNonceKey } from "./dpop.ts";
import { createGrantRepository } from "./repository/grants.ts";
import { createDeviceCodeRepository } from "./repository/device_codes.ts";
import { guessLimit } from "./device.ts";
import { createUsedJtis } from "./repository/used_jtis.ts";
import { createPushedRequests } from "./repository/pushed_requests.ts";
import { createPushed } from "./pushed.ts";
import { createTokenService } from "./service.ts";
import { auditSettings, startAudit } from "../../lib/audit/mod.ts";
import { createAuthFailures, failureWindowMs } from "./auth_failures.ts";
import { eventSchema } from "./security_events.ts";

const url = (fallback: string) => v.optional(v.pipe(v.string(), v.url("must be a URL")), fallback);

/**
 * How often each replica makes sure the next signing key exists (one is made once the current one
 * starts signing) and deletes what has expired. Changes to the keys reach it sooner, through
 * Postgres (./keys.ts).
 */
const refreshEveryMs = 60_000;

/** Batches of 1,000 rows of each kind a purge deletes at most (200,000 rows: 3,333 a second). */
const maxPurgeBatches = 200;

/** The service: run as its own process, or embedded by `deno task start`. */
export const tokenService = defineService({
  name: "token-service",
  schema: "token",
  migrations: new URL("./migrations/", import.meta.url),
  ports: { grpc: 50053, http: 8083 },
  settings: {
    /** The `iss` of every token: the gateway's public base URL. */
    ISSUER_URL: v.optional(issuerUrl, defaultIssuer),
    /** The oauth-registry's gRPC port. */
    OAUTH_REGISTRY_GRPC_URL: url("http://127.0.0.1:50051"),
    /** A platform token to call the registry with, when there is no AUTH_JWT_SECRET to sign one. */
    REGISTRY_TOKEN: optionalString,
    /** The secret the signing keys' private parts are sealed under. */
    TOKEN_KEY_ENCRYPTION_KEY: secretKey,
    TOKEN_KEY_ENCRYPTION_PREVIOUS_KEYS: secretKeyList,
    ACCESS_TOKEN_TTL_SECONDS: positiveInt(900),
    REFRESH_TOKEN_TTL_SECONDS: positiveInt(30 * 24 * 3600),
    SIGNING_KEY_ROTATION_HOURS: positiveInt(720),
    RPC_TIMEOUT_MS: positiveInt(10_000),
    /**
     * The most memory the registry's answers may take (MiB, estimated): clients, verified secrets'
     * digests, installations, configs (./registry_cache.ts). 0 keeps nothing in memory, the list
     * of revoked tokens included, and listens to nothing (the embedded database has one
     * connection, and a listener would need its own): the signing keys are then read again on use
     * once what was read is a second old.
     */
    REGISTRY_CACHE_MIB: nonNegativeInt(4),
    /**
     * Whether every DPoP proof must carry a nonce of this server's (RFC 9449 8): stateless, made
     * from TOKEN_KEY_ENCRYPTION_KEY, so every replica makes and takes the same (./dpop.ts).
     */
    DPOP_NONCE_REQUIRED: flag(false),
    REQUIRE_PAR: flag(false),
    ...auditSettings,
  },
  serve: ({ sql, config, log, metrics, notReady, migrated, verify, budget, now }) => {
    const ttlMs = config.ACCESS_TOKEN_TTL_SECONDS * 1000;
    // What changes in the registry, which tokens are revoked and the signing keys reach every
    // replica through Postgres within a second (lib/db/change_feed.ts).
    const cached = config.REGISTRY_CACHE_MIB > 0;
    const keys = createKeyRing({
      sql,
      encryptionKey: config.TOKEN_KEY_ENCRYPTION_KEY,
      previousEncryptionKeys: config.TOKEN_KEY_ENCRYPTION_PREVIOUS_KEYS,
      onResealed: (kid) =>
        log.info("signing key sealed again under the current TOKEN_KEY_ENCRYPTION_KEY", { kid }),
      rotationMs: config.SIGNING_KEY_ROTATION_HOURS * 3_600_000,
      // Published a minute longer than the last token lives, for clocks that differ.
      tokenLifetimeMs: ttlMs + 60_000,
      now,
      // No listener (the embedded database's one connection): the keys are read again on use.
      follow: cached ? (handlers) => followChanges(sql, signingKeysChannel, handlers) : undefined,
    });
    const remote = createRegistry({
      url: config.OAUTH_REGISTRY_GRPC_URL,
      jwtSecret: config.AUTH_JWT_SECRET,
      token: config.REGISTRY_TOKEN,
      timeoutMs: config.RPC_TIMEOUT_MS,
      now,
    });
    const cache = !cached ? undefined : cacheRegistry(remote, {
      follow: (handlers) => followChanges(sql, registryChangesChannel, handlers),
      maxBytes: config.REGISTRY_CACHE_MIB * 1024 * 1024,
      budget,
      now,
      // The registry's triggers exist (its migration ran): they are named after the channel, and
      // the catalog says so without this service reading the registry's schema.
      notifies: async () => {
        const [row] = await sql<{ n: number }[]>`
          select count(*)::int as n from pg_trigger
          where tgname = ${`${registryChangesChannel}_clients`}`;
        return row?.n === 1;
      },
    });
    if (cache) {
      registerCacheMetrics(metrics, "registry_cache", {
        holds: "Clients, installations, configs and origin answers",
        answers: "the registry's answers",
      }, () => cache.stats());
    }
    const registry = cache ?? remote;
    const revocations = cached
      ? createRevocations(sql, {
        follow: (handlers) => followChanges(sql, revocationsChannel, handlers),
        budget,
        now,
      })
      : uncachedRevocations(sql);
    const grants = createGrantRepository(sql);
    const devices = createDeviceCodeRepository(sql);
    const usedJtis = createUsedJtis(sql);
    const pushedRequests = createPushedRequests(sql);
    let ticking = false;
    const tick = setInterval(async () => {
      if (notReady() !== undefined || ticking) return;
      ticking = true;
      try {
        await keys.refresh();
        // What expired, a batch at a time (lib/db/purge.ts), up to maxPurgeBatches batches of
        // each kind a tick: more than a minute of what this process can issue at full load.
        const at = new Date(now());
        const purge = (batch: (limit: number) => Promise<number>) =>
          inBatches(batch, { maxBatches: maxPurgeBatches });
        await purge((limit) => grants.purge(at, limit));
        await purge((limit) => devices.purge(at, guessLimit, limit));
        await purge((limit) => usedJtis.purge(at, limit));
        await purge((limit) => pushedRequests.purge(at, limit));
        await revocations.reload();
      } catch (error) {
        log.warn("signing keys not refreshed, or expired rows not purged", { error });
      } finally {
        ticking = false;
      }
    }, refreshEveryMs);
    Deno.unrefTimer(tick);
    // Security events (./security_events.ts): kept AUDIT_RETENTION_DAYS, followed by WatchEvents;
    // failed client authentications counted in memory and written as one summary per client a
    // minute (./auth_failures.ts: the bounds of what a flood costs are there), and once more when
    // the process starts draining.
    const audit = startAudit(sql, eventSchema, { config, now, log, migrated });
    const failures = createAuthFailures({
      sql,
      lookupClient: (clientId) => registry.lookupClient(clientId),
      now,
      log,
      budget,
    });
    const summaries = setInterval(() => {
      if (notReady() === undefined) void failures.flush();
    }, failureWindowMs);
    Deno.unrefTimer(summaries);
    const issuer = config.ISSUER_URL.replace(/\/$/, "");
    // The secrets' keys, the current one's first (./csrf.ts, ./dpop.ts): a page or a nonce made
    // before the secret changed is still taken while the old one is a previous one.
    const secrets = [
      config.TOKEN_KEY_ENCRYPTION_KEY,
      ...config.TOKEN_KEY_ENCRYPTION_PREVIOUS_KEYS ?? [],
    ];
    const csrfKeys = secrets.map((secret) => deriveCsrfKey(secret));
    const dpop = createDpop({
      usedJtis,
      nonceKey: config.DPOP_NONCE_REQUIRED
        ? deriveDpopNonceKey(config.TOKEN_KEY_ENCRYPTION_KEY)
        : undefined,
      previousNonceKeys: config.DPOP_NONCE_REQUIRED
        ? secrets.slice(1).map((secret) => deriveDpopNonceKey(secret))
        : undefined,
      now,
      budget,
    });
    return {
      // Ready once the signing keys are open: a replica whose TOKEN_KEY_ENCRYPTION_KEY opens none
      // of them would answer every grant 500 (./keys.ts retries on each ask until they open).
      ready: () => keys.ready(),
      stop() {
        audit.stop();
        clearInterval(summaries);
        void failures.flush();
      },
      services: [
        bind(
          TokenService,
          createTokenService({
            usedJtis,
            sql,
            keys,
            accessTokens: createAccessTokens({
              keys,
              issuer,
              ttlSeconds: config.ACCESS_TOKEN_TTL_SECONDS,
              now,
              budget,
            }),
            registry,
            revocations,
            issuer,
            refreshTokenTtlSeconds: config.REFRESH_TOKEN_TTL_SECONDS,
            // Shorter than the shortest rotation period (an hour), which is how long a key is
            // published before it signs: a verifier's copy of the set has the key that signs.
            jwksMaxAgeSeconds: 300,
            csrfKeys,
            dpop,
            pushed: createPushed({ repository: pushedRequests, now }),
            requirePar: config.REQUIRE_PAR,
            now,
            feed: audit.feed,
          }),
        ),
      ],
      interceptors: [
        tracing(),
        logging(log),
        metering(metrics),
        deadline(),
        availability(notReady),
        clientAuthentication({
          issuer,
          registry,
          assertions: createAssertionVerifier({
            registry,
            usedJtis,
            audiences: [issuer, issuer + oauthPaths.token],
            now,
            onReportError: (error) => log.warn("key use not reported", { error }),
          }),
          verify,
          service: TokenService,
          rules: clientRules,
          now,
          failures,
        }),
      ],
    };
  },
});

if (import.meta.main) Deno.exit(await runService(tokenService));
