/**
 * Reads of the registry answered from memory, kept honest by Postgres: `GET
 * /v1/projects/{project_id}/clients/{client_id}` (GetClient) is the registry's most frequent read,
 * and its answer changes only when the client does, which the registry notifies. So each gateway
 * replica with `DATABASE_URL` keeps the registry's GetClient answers and gives them again without
 * the call:
 *
 * - **Authorized as the registry authorizes.** On an answer from memory the caller's platform
 *   token has been verified (as for every `/v1` call), and the method's rule of the registry's
 *   policy ({@link keptReads}: GetClient's is `projectAdmin`, and a test checks that it is the
 *   registry's) must pass; when it does not, the call goes to the registry, which refuses it with
 *   its own words. An answer is kept only when the registry gave it (never "not found").
 * - **Dropped by the registry's notifications** (`oauth_registry_changes`, followed as the token
 *   service follows it: lib/db/change_feed.ts). `client:<id>` drops that client's answer (an update,
 *   a deletion, a secret deleted, a key added or deleted); the channel's other kinds
 *   (`installation:`, `config:`, `origins`) change no client; any other payload, or a lost listening
 *   connection, drops everything. Answers come from memory only while the feed is fresh (every
 *   change committed more than 800 ms ago applied), so a change reaches every gateway within a
 *   second; an answer read while a change arrived is not kept.
 * - **Nor just after one.** The registry replica that answers a read keeps clients in memory too
 *   (services/oauth/client_cache.ts), and may apply a change up to 800 ms after this gateway did:
 *   an answer whose call began within 800 ms after a change to that client arrived here (or to
 *   every client: a reset, a payload not known, more changes than it remembers one by one) is not
 *   kept, or it could keep what the change replaced.
 * - **This gateway's own writes at once.** A write to the registry through this gateway (any
 *   method but a read, whether it succeeded or not) drops the client it names when it returns (or
 *   everything, when it names none), and answers read meanwhile or within 800 ms after are not
 *   kept: a caller that changed a client reads its change back from the same gateway without
 *   waiting for the notification.
 * - **Bounded.** At most `maxBytes` (each answer's Protobuf size times three plus 256 bytes), from
 *   the process's memory budget, oldest out first (lib/platform/bounded_cache.ts).
 *
 * @module
 */

import { type DescMethod, type Message, toBinary } from "@bufbuild/protobuf";
import { createContextValues } from "@connectrpc/connect";
import type { Client } from "../gen/registry/oauth/v1/client_pb.ts";
import {
  GetClientResponseSchema,
  OAuthRegistryService,
} from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import {
  type ChangeFeed,
  createFeedCache,
  createSettling,
  dropNamed,
  type FollowOptions,
} from "../lib/db/mod.ts";
import { idKind, type MemoryBudget } from "../lib/platform/mod.ts";
import { type Caller, projectAdmin, type Rule } from "../lib/policy/mod.ts";

/** The registry's reads this gateway keeps, each with the rule of the registry's policy. */
export const keptReads = {
  getClient: projectAdmin,
} as const satisfies Partial<Record<keyof typeof OAuthRegistryService.method, Rule<never>>>;

/** Options of {@link createReadCache}. */
export interface ReadCacheOptions {
  /** Follows the registry's change channel (lib/db/change_feed.ts's followChanges, bound). */
  follow(options: FollowOptions): ChangeFeed;
  /** The most bytes kept (estimated). */
  maxBytes: number;
  /** The process's memory budget, which the kept bytes are taken from. */
  budget?: MemoryBudget | undefined;
  /** Whether the registry's triggers exist (its migration that adds them has run). */
  notifies(): Promise<boolean>;
  /** The monotonic clock (ms) the lag after a change is measured on. */
  monotonic?: () => number;
}

/** The cache. */
export interface ReadCache {
  /** Whether `method`'s answers are kept. */
  keeps(method: DescMethod): boolean;
  /**
   * The answer to `input` for `caller`: from memory when kept and the rule lets the caller read
   * it, else `load`'s, which is kept when the rules above allow.
   */
  through(
    method: DescMethod,
    input: Message,
    caller: Caller,
    load: () => Promise<Message>,
  ): Promise<Message>;
  /** A write (`method`, not a read) through this gateway returned: drops what it may have changed. */
  wrote(method: DescMethod, input: Message): void;
  /** Entries and bytes kept now, and how reads were answered so far. */
  stats(): { entries: number; bytes: number; hits: number; misses: number; bypassed: number };
  /** Stops following the feed and forgets everything. */
  close(): Promise<void>;
}

/** A kept GetClient answer, with the project it was read in. */
interface Kept {
  projectId: string;
  answer: Message;
}

const clientIds = idKind("cli");
/** The channel's payloads that change no client. */
const otherKinds = ["installation", "config", "origins"];
const entryOverhead = 256;
const getClient = OAuthRegistryService.method.getClient;
/** How late a registry replica may apply a change to its own memory (lib/db/change_feed.ts). */
const maxLagMs = 800;
/** The most clients remembered as changed lately; past it, a change counts for all. */
const maxRecentChanges = 4096;

/** Creates the cache (see the module's header). */
export function createReadCache(options: ReadCacheOptions): ReadCache {
  // The registry replica that answers keeps clients in memory too, and may apply a change later.
  const monotonic = options.monotonic ?? (() => performance.now());
  const settling = createSettling({ lagMs: maxLagMs, maxKeys: maxRecentChanges, monotonic });
  const cache = createFeedCache({
    follow: (handlers) =>
      options.follow({
        ...handlers,
        onReset() {
          settling.changed();
          handlers.onReset();
        },
      }),
    maxBytes: options.maxBytes,
    budget: options.budget,
    notifies: options.notifies,
    onChange(payload) {
      const known = dropNamed(payload, "client", otherKinds, (key) => {
        clients.delete(key);
        settling.changed(key);
      });
      if (!known) settling.changed();
      return known;
    },
  });
  const clients = cache.region<Kept>();
  const values = createContextValues();

  return {
    keeps: (method) => method === getClient,
    async through(method, input, caller, load) {
      const { projectId, clientId } = input as unknown as { projectId: string; clientId: string };
      const key = method === getClient ? clientIds.toUuid(clientId) : undefined;
      if (key === undefined || !cache.usable()) {
        cache.count("bypassed");
        return await load();
      }
      const held = clients.get(key);
      if (held !== undefined && held.projectId === projectId && allowed(input, caller)) {
        cache.count("hits");
        return held.answer;
      }
      cache.count("misses");
      const before = cache.generation;
      const startedAt = monotonic();
      const answer = await load();
      const client = (answer as { client?: Client }).client;
      if (
        client !== undefined && cache.generation === before &&
        settling.settled(key, startedAt) &&
        cache.usable()
      ) {
        const bytes = toBinary(GetClientResponseSchema, answer as never).length * 3 +
          entryOverhead;
        clients.set(key, { projectId, answer }, bytes);
      }
      return answer;
    },
    wrote(method, input) {
      if (method.parent !== OAuthRegistryService) return;
      cache.changed();
      // A new client changes no kept one.
      if (method === OAuthRegistryService.method.createClient) return;
      const clientId = (input as { clientId?: unknown }).clientId;
      const key = typeof clientId === "string" ? clientIds.toUuid(clientId) : undefined;
      if (key === undefined) clients.clear();
      else clients.delete(key);
      // Another registry replica may answer the next read before it has seen this change.
      settling.changed(key);
    },
    stats: () => cache.stats(),
    close: () => cache.close(),
  };

  /** Whether the registry's rule lets `caller` make this call (it throws to refuse). */
  function allowed(input: Message, caller: Caller): boolean {
    try {
      const checked = keptReads.getClient(input as never, caller, values);
      return checked === undefined;
    } catch {
      return false;
    }
  }
}
