/**
 * Introspection answered from memory, kept honest by Postgres. A resource server introspects the
 * same access token on every request it serves (RFC 7662 4 lets it cache the answer itself; most
 * do not), and the answer depends on nothing but the token, the caller's credentials, and state
 * whose every change is notified in Postgres. So the gateway keeps the token service's active
 * answers for a short while and gives them again without the call:
 *
 * - **What is kept.** An active answer to a caller that authenticated with a secret, for as long
 *   as the token service says (IntrospectTokenResponse.reusable_until_ms: at most the token's
 *   expiry, the secret's expiry and 30 s), by the gateway's clock; under HMAC-SHA256 digests of the
 *   token and of the caller's credentials (with a key made at start-up and never stored: memory
 *   holds no token and no secret). Never an inactive answer (which anyone can make up tokens for),
 *   a refresh token's, or one to a client assertion (single use).
 * - **Dropped by every change.** The gateway follows the three channels the token service's own
 *   caches follow (lib/db/change_feed.ts): `oauth_registry_changes` (a client suspended or deleted,
 *   a secret deleted, an installation revoked, a config changed), `token_revocations` (a token or
 *   a family revoked) and `token_signing_keys` (a signing key deleted or changed). Any
 *   notification on any of them, and a lost listening connection, drops everything; answers are
 *   given from memory only while every feed is fresh (every change committed more than 800 ms ago
 *   applied), so every change takes effect within a second in every gateway.
 * - **Never kept across a change, nor just after one.** An answer whose call saw a change arrive
 *   is not kept (it may predate the change); nor one whose call began within 800 ms after a change
 *   arrived here, because the token service replica that answered may not have applied it yet (its
 *   own feeds promise only that much), while this gateway has already dropped everything.
 * - **This gateway's own revocations at once.** A token revoked through this gateway is dropped
 *   when the revocation succeeds, and not kept again for 800 ms (another replica may still answer
 *   from before it), without waiting for the notification (the token service takes a token only
 *   in the text it issued, so no other text of it is kept here); a refresh token whose revocation
 *   took access tokens with it (its grant's, RFC 7009 2.1) drops every answer, as a notification
 *   does.
 * - **Bounded.** Entries count in bytes against `maxBytes` and the process's memory budget
 *   (lib/platform/bounded_cache.ts), oldest out first.
 *
 * @module
 */

import {
  type ChangeFeed,
  createFeedCache,
  createSettling,
  type FollowOptions,
  registryChangesChannel,
  revocationsChannel,
  signingKeysChannel,
} from "../lib/db/mod.ts";
import { hmacSha256, type MemoryBudget } from "../lib/platform/mod.ts";

/** The channels whose changes can end an active answer (their owners' triggers notify them). */
export const introspectionChannels = [
  registryChangesChannel,
  revocationsChannel,
  signingKeysChannel,
] as const;

/** How late a token service replica may apply a change (lib/db/change_feed.ts's default). */
const maxLagMs = 800;

/** The most callers kept for one token (a token is introspected by its few resource servers). */
const maxCallersPerToken = 4;

/** Bytes counted per entry besides the body's characters. */
const entryOverhead = 256;

/** The most tokens remembered as just revoked here; past it, a revocation counts for all. */
const maxRecentRevocations = 4096;

/** Options of {@link createIntrospectionCache}. */
export interface IntrospectionCacheOptions {
  /** Follows one channel (lib/db/change_feed.ts's followChanges, bound to a pool). */
  follow(channel: string, options: FollowOptions): ChangeFeed;
  /** The most bytes kept (estimated). */
  maxBytes: number;
  /** The process's memory budget, which the kept bytes are taken from. */
  budget?: MemoryBudget | undefined;
  /**
   * Whether the owners' triggers that notify every channel exist (their migrations have run):
   * until they do, every answer comes from the token service.
   */
  notifies(): Promise<boolean>;
  /** The wall clock (ms since the epoch) that `reusable_until_ms` is compared with. */
  now?: () => number;
  /** The monotonic clock (ms) the lag after a change is measured on. */
  monotonic?: () => number;
}

/** What a call answered: its JSON body, and until when it may be given again (0: never). */
export interface Answer {
  body: string;
  reusableUntil: number;
}

/** The cache. */
export interface IntrospectionCache {
  /**
   * The body for `token` introspected by `caller` (the caller's credentials, as one string): from
   * memory when kept, else `load`'s, which is kept when the rules above allow.
   */
  through(caller: string, token: string, load: () => Promise<Answer>): Promise<string>;
  /**
   * A token revoked through this gateway: dropped, and not kept again for a while. `withOthers`:
   * other tokens went with it (a refresh token's grant's access tokens), which no digest here
   * names: every answer is dropped, and none kept for a while, as at a notification.
   */
  revoked(token: string, withOthers?: boolean): void;
  /** Entries and bytes kept now, and how answers were given so far. */
  stats(): { entries: number; bytes: number; hits: number; misses: number; bypassed: number };
  /** Stops following the feeds and forgets everything. */
  close(): Promise<void>;
}

/** A token's kept answers, by the digest of the caller's credentials. */
type Kept = Map<string, Answer>;

/** Creates the cache (see the module's header). */
export function createIntrospectionCache(options: IntrospectionCacheOptions): IntrospectionCache {
  const now = options.now ?? Date.now;
  const monotonic = options.monotonic ?? (() => performance.now());
  const mac = hmacSha256(crypto.getRandomValues(new Uint8Array(32)));
  // The token service replica that answers keeps what it checks in memory too, and may apply a
  // change later; every change is to every token, a revocation here to its own.
  const settling = createSettling({
    lagMs: maxLagMs,
    maxKeys: maxRecentRevocations,
    monotonic,
    budget: options.budget,
  });

  const cache = createFeedCache({
    follow(handlers) {
      const noted: FollowOptions = {
        onChange(payload) {
          settling.changed();
          handlers.onChange(payload);
        },
        onReset() {
          settling.changed();
          handlers.onReset();
        },
      };
      const feeds = introspectionChannels.map((channel) => options.follow(channel, noted));
      return {
        fresh: () => feeds.every((feed) => feed.fresh()),
        close: async () => void await Promise.all(feeds.map((feed) => feed.close())),
      };
    },
    // Every change may end any answer: drop all.
    onChange: () => false,
    maxBytes: options.maxBytes,
    budget: options.budget,
    notifies: options.notifies,
  });
  const tokens = cache.region<Kept>();

  return {
    async through(caller, token, load) {
      if (!cache.usable()) {
        cache.count("bypassed");
        return (await load()).body;
      }
      const tokenKey = mac.base64(token);
      const callerKey = mac.base64(caller);
      const kept = tokens.get(tokenKey);
      const held = kept?.get(callerKey);
      if (held !== undefined) {
        if (held.reusableUntil > now()) {
          cache.count("hits");
          return held.body;
        }
        kept!.delete(callerKey);
        tokens.resize(tokenKey, -bytesOf(callerKey, held));
      }
      cache.count("misses");
      const before = cache.generation;
      const startedAt = monotonic();
      const answer = await load();
      const keep = answer.reusableUntil > now() && cache.generation === before &&
        settling.settled(tokenKey, startedAt) && cache.usable();
      if (keep) {
        const bytes = bytesOf(callerKey, answer);
        const current = tokens.get(tokenKey);
        if (current === undefined) {
          tokens.set(tokenKey, new Map([[callerKey, answer]]), bytes + tokenKey.length * 2);
        } else if (
          current.size < maxCallersPerToken && !current.has(callerKey) &&
          tokens.resize(tokenKey, bytes)
        ) {
          current.set(callerKey, answer);
        }
      }
      return answer.body;
    },
    revoked(token, withOthers = false) {
      if (withOthers) {
        tokens.clear();
        settling.changed();
        return;
      }
      const tokenKey = mac.base64(token);
      tokens.delete(tokenKey);
      settling.changed(tokenKey);
    },
    stats: () => cache.stats(),
    close: () => cache.close(),
  };
}

/** The bytes counted for one kept answer (UTF-16 characters, and the objects around them). */
function bytesOf(callerKey: string, answer: Answer): number {
  return (callerKey.length + answer.body.length) * 2 + entryOverhead;
}
