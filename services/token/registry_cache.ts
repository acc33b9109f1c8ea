/**
 * The registry, remembered: what the token service asks the oauth-registry on every grant,
 * introspection and authorization (a client and its secret, an installation, a user's live
 * installation of a project, a project's config, a browser origin) almost never changes, so each
 * replica keeps the answers in memory, and Postgres keeps them honest. The registry's triggers
 * notify `oauth_registry_changes` when a client or a config is updated or deleted, an installation
 * deleted or updated in anything but when, by whom and under which application name its consent was
 * last given (installations are kept without those), a secret deleted, a key added or deleted, a
 * secret or a key updated in anything but its use (its expiry), or a client with JavaScript origins
 * created, and `reset` at a TRUNCATE of any of these tables (the registry's migrations that add them
 * name them after the channel); each replica follows the channel (lib/db/change_feed.ts):
 *
 * - a notification drops what it names (a client with its verified secrets and its keys, and every
 *   answer about browser origins, an installation, a config; `origins`: the answers about browser
 *   origins); a payload it does not know and a lost listening connection drop all;
 * - an answer is served from memory only while the feed is fresh (every change committed more than
 *   800 ms ago applied), so suspending or deleting a client, deleting a secret or revoking an
 *   installation takes effect in every replica within a second; while the feed is not fresh every
 *   call goes to the registry, as without the cache;
 * - an answer read while a change arrived is not kept (it may predate the change).
 *
 * What is kept: clients that exist (never "no such client", which an attacker could fill memory
 * with), and for each at most 10 secrets that verified, as HMAC-SHA256 digests under a key made at
 * start-up and never stored (a memory dump shows no secret, and digests that nothing outside this
 * process can check a guess against); a wrong secret always goes to the registry. Installations and
 * configs that exist, and which installation is a user's live one of a project (never that a user
 * has none: a first consent creates one, which notifies nobody); that an origin is registered
 * (never that it is not: anyone sends any Origin, naming any client_id, and each "no" kept would
 * push answers in use out of memory); a client's live public keys (for client assertions,
 * ./client_assertion.ts), each refused from its expiry on by this service's clock, as a secret is.
 *
 * Two things about a secret change with no notification, and are kept with its digest:
 *
 * - its expiry (the registry's answer carries it): an answer from memory carries it too, and the
 *   client authentication refuses it from then on (./client_auth.ts, by this service's clock); an
 *   expired digest is forgotten at its next use;
 * - its use: the registry records a secret's `last_used_at` when it verifies, which a secret
 *   answered from memory never does, so a use answered from memory more than
 *   {@link reportUsesEveryMs} after the last one the registry heard of is reported to it (a
 *   VerifyClientSecret in the background, whose answer and failure are ignored: the caller's
 *   answer neither waits for it nor depends on it). The registry's update of `last_used_at`
 *   notifies nobody, so a report never empties a cache.
 *
 * Bounded: at most `maxBytes` (estimated as three times each answer's Protobuf size, plus 256 bytes
 * per entry), taken from the process's memory budget as it fills, in the budget's `cache` share;
 * when either is full the oldest entries go first. The freshness, the counting and the bounds are
 * lib/db/feed_cache.ts's.
 *
 * @module
 */

import { clone, create, toBinary } from "@bufbuild/protobuf";
import { type Client, ClientSchema, ClientStatus } from "../../gen/registry/oauth/v1/client_pb.ts";
import { LookupClientKeysResponseSchema } from "../../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { type OAuthConfig, OAuthConfigSchema } from "../../gen/registry/oauth/v1/config_pb.ts";
import {
  type Installation,
  InstallationSchema,
  InstallationStatus,
} from "../../gen/registry/oauth/v1/installation_pb.ts";
import { type ChangeFeed, createFeedCache, type FollowOptions } from "../../lib/db/mod.ts";
import { hmacSha256, idKind, type MemoryBudget } from "../../lib/platform/mod.ts";
import { type ClientKeys, expired, type Registry, type VerifiedSecret } from "./registry.ts";

/** Options of {@link cacheRegistry}. */
export interface RegistryCacheOptions {
  /** Follows the registry's change channel (lib/db/change_feed.ts's followChanges, bound). */
  follow(options: FollowOptions): ChangeFeed;
  /** The most bytes the cache may hold (estimated). */
  maxBytes: number;
  /** The process's memory budget, which the cache's bytes are taken from. */
  budget?: MemoryBudget | undefined;
  /**
   * Whether the registry's schema notifies its changes (its migration that adds the triggers has
   * run): until it does, nothing is served from memory. Asked at start, then on use at most every
   * 250 ms until it says yes.
   */
  notifies(): Promise<boolean>;
  /** The clock (ms since the epoch; default `Date.now`): secrets expire, and uses are reported, by it. */
  now?: () => number;
}

/** The cached registry, with what it holds. */
export interface RegistryCache extends Registry {
  /** Entries and estimated bytes held now, and how calls were answered so far. */
  stats(): { entries: number; bytes: number; hits: number; misses: number; bypassed: number };
  /** Stops following the feed. */
  close(): Promise<void>;
}

const maxVerifiersPerClient = 10;

/** How often, at most, a secret answered from memory has its use reported to the registry. */
export const reportUsesEveryMs = 60_000;
const entryOverhead = 256;
const verifierBytes = 64;

/**
 * Clients and installations are kept under their stored UUID, the form the triggers name them by
 * (an id spelt another way that decodes to the same UUID is the same entry); a text that is not an
 * id of its kind is never kept.
 */
const ids = { client: idKind("cli"), installation: idKind("ins") };

/** A secret that verified, kept by its digest. */
interface Verifier {
  /** When it expires (ms since the epoch); undefined: never. */
  expiresAt: number | undefined;
  /** When the registry last heard of a use of it (ms since the epoch, this service's clock). */
  reportedAt: number;
}

/** A client as kept: with the secrets that verified for it while it was active, by digest. */
interface KeptClient {
  client: Client;
  verifiers: Map<string, Verifier>;
}

/** Wraps `registry` in a cache that Postgres keeps honest (see the module's header). */
export function cacheRegistry(registry: Registry, options: RegistryCacheOptions): RegistryCache {
  const now = options.now ?? Date.now;
  const mac = hmacSha256(crypto.getRandomValues(new Uint8Array(32)));
  const digest = (clientId: string, secret: string) => mac.base64(`${clientId}\n${secret}`);

  const cache = createFeedCache({
    follow: options.follow,
    maxBytes: options.maxBytes,
    budget: options.budget,
    notifies: options.notifies,
    onChange(payload) {
      const colon = payload.indexOf(":");
      const kind = payload.slice(0, colon);
      const key = payload.slice(colon + 1);
      if (kind === "client") {
        clients.delete(key);
        keySets.delete(key);
        origins.clear();
      } else if (kind === "installation") {
        installations.delete(key);
      } else if (kind === "config") {
        configs.delete(key);
      } else if (payload === "origins") {
        origins.clear();
      } else {
        return false; // `reset`, or a payload this version does not know
      }
      return true;
    },
  });
  const clients = cache.region<KeptClient>();
  const installations = cache.region<Installation>();
  const configs = cache.region<OAuthConfig>();
  const origins = cache.region<boolean>();
  const keySets = cache.region<ClientKeys>();
  /**
   * Where a user's live installation of a project is (`account\nproject`: the installation's UUID),
   * for remembered consent: a pointer into `installations`, trusted only while what it points to
   * is held, active, and of that account and project. A notification about the installation drops
   * what it points to; a user with no live installation is never kept.
   */
  const live = cache.region<string>();

  const clientSize = (c: Client) => toBinary(ClientSchema, c).length * 3 + entryOverhead;
  /** Tells the registry of a use answered from memory (see the module's header). */
  const report = (clientId: string, secret: string) => {
    registry.verifySecret(clientId, secret).catch(() => {});
  };

  const installationSize = (i: Installation) =>
    toBinary(InstallationSchema, i).length * 3 + entryOverhead;
  /**
   * An installation as kept: without what a consent that adds no scope changes, which the
   * registry's trigger does not notify (when and by whom it was given, the application's name
   * then, the etag), and which nothing here reads. Served from memory or not, an answer is this.
   */
  const kept = (installation: Installation): Installation => {
    const copy = clone(InstallationSchema, installation);
    copy.applicationName = "";
    copy.authorizedById = "";
    copy.authorizedAt = undefined;
    copy.etag = "";
    return copy;
  };
  const liveKey = (accountId: string, projectId: string) => `${accountId}\n${projectId}`;
  /**
   * Keeps a user's live installation, read when the generation was `before` (not kept when a
   * change arrived meanwhile, as an answer read through the cache).
   */
  function remember(installation: Installation, before: number): void {
    const id = ids.installation.toUuid(installation.id);
    if (id === undefined || cache.generation !== before || !cache.usable()) return;
    const key = liveKey(installation.accountId, installation.projectId);
    live.delete(key);
    if (!installations.set(id, installation, installationSize(installation))) return;
    live.set(key, id, key.length * 2 + id.length * 2 + entryOverhead);
  }

  const lookupClient = async (clientId: string) =>
    (await cache.through(
      clients,
      ids.client.toUuid(clientId),
      async () => {
        const client = await registry.lookupClient(clientId);
        return client && { client, verifiers: new Map() };
      },
      (k) => clientSize(k.client),
    ))?.client;

  return {
    async verifySecret(clientId, secret) {
      const key = ids.client.toUuid(clientId);
      const fresh = key !== undefined && cache.usable();
      const d = digest(key ?? "", secret);
      const entry = fresh ? clients.get(key) : undefined;
      const verifier = entry?.verifiers.get(d);
      if (verifier && entry!.client.status === ClientStatus.ACTIVE) {
        cache.count("hits");
        const answer: VerifiedSecret = { client: entry!.client, expiresAt: verifier.expiresAt };
        const at = now();
        if (expired(answer, at)) {
          // Refused by its expiry (./client_auth.ts), and forgotten: its place is for a live one.
          entry!.verifiers.delete(d);
          clients.resize(key!, -verifierBytes);
        } else if (at - verifier.reportedAt >= reportUsesEveryMs) {
          verifier.reportedAt = at;
          report(clientId, secret);
        }
        return answer;
      }
      cache.count(fresh ? "misses" : "bypassed");
      const before = cache.generation;
      const verified = await registry.verifySecret(clientId, secret);
      if (!verified || key === undefined || cache.generation !== before || !cache.usable()) {
        return verified;
      }
      // The registry recorded this use; an answer already expired here is not worth keeping.
      const at = now();
      if (expired(verified, at)) return verified;
      const verifierOf: Verifier = { expiresAt: verified.expiresAt, reportedAt: at };
      // Keep the client, and the digest of the secret that verified (44 characters).
      const known = clients.get(key);
      if (known) {
        if (known.verifiers.size < maxVerifiersPerClient && clients.resize(key, verifierBytes)) {
          known.verifiers.set(d, verifierOf);
        }
      } else {
        const added: KeptClient = {
          client: verified.client,
          verifiers: new Map([[d, verifierOf]]),
        };
        clients.set(key, added, clientSize(verified.client) + verifierBytes);
      }
      return verified;
    },
    lookupClient,
    lookupClientKeys(clientId) {
      return cache.through(
        keySets,
        ids.client.toUuid(clientId),
        () => registry.lookupClientKeys(clientId),
        (k) =>
          toBinary(LookupClientKeysResponseSchema, create(LookupClientKeysResponseSchema, k))
              .length * 3 + entryOverhead,
      );
    },
    recordKeyUse(clientId, keyId) {
      return registry.recordKeyUse(clientId, keyId);
    },
    async getClient(projectId, clientId) {
      // The same entry as lookupClient's: a client of another project is none of this one.
      const client = await lookupClient(clientId);
      return client?.projectId === projectId ? client : undefined;
    },
    getConfig(projectId) {
      return cache.through(
        configs,
        projectId,
        () => registry.getConfig(projectId),
        (c) => toBinary(OAuthConfigSchema, c).length * 3 + entryOverhead,
      );
    },
    async getInstallation(projectId, installationId) {
      const installation = await cache.through(
        installations,
        ids.installation.toUuid(installationId),
        async () => {
          const found = await registry.getInstallation(projectId, installationId);
          return found && kept(found);
        },
        installationSize,
      );
      return installation?.projectId === projectId ? installation : undefined;
    },
    async consent(call, projectId, scopes) {
      // The installation as the consent left it: what this replica answers next (another
      // replica's older copy holds fewer scopes, which only asks again).
      const before = cache.generation;
      const installation = kept(await registry.consent(call, projectId, scopes));
      remember(installation, before);
      return installation;
    },
    async liveInstallation(authorization, accountId, projectId) {
      if (cache.usable()) {
        const id = live.get(liveKey(accountId, projectId));
        const held = id === undefined ? undefined : installations.get(id);
        if (
          held?.status === InstallationStatus.ACTIVE && held.accountId === accountId &&
          held.projectId === projectId
        ) {
          cache.count("hits");
          return held;
        }
        cache.count("misses");
      } else cache.count("bypassed");
      const before = cache.generation;
      const found = await registry.liveInstallation(authorization, accountId, projectId);
      if (!found) return undefined;
      const installation = kept(found);
      remember(installation, before);
      return installation;
    },
    async registersOrigin(origin, clientId) {
      return (await cache.through(
        origins,
        `${clientId}\n${origin}`,
        () => registry.registersOrigin(origin, clientId),
        () => origin.length * 2 + clientId.length * 2 + entryOverhead,
        // Never "not registered": anyone sends any Origin, naming any client_id.
        { keeps: (registered) => registered },
      ))!;
    },
    stats: () => cache.stats(),
    close: () => cache.close(),
  };
}
