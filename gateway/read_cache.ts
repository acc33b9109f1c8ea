/**
 * Reads answered from memory, kept honest by Postgres: the services' most frequent reads are a Get
 * of one resource (`GET /v1/projects/{project_id}/clients/{client_id}`, GetClient;
 * `GET /v1/core/units/{unit_id}`, GetUnit), and an answer changes only when the resource does,
 * which its owner notifies. So each gateway replica with `DATABASE_URL` keeps those answers
 * ({@link keptReads}, one cache per owner) and gives them again without the call:
 *
 * - **Authorized as the owner authorizes.** On an answer from memory the caller's platform token
 *   has been verified (as for every `/v1` call), and the method's rule of the owner's policy
 *   (GetClient's is `projectAdmin`, GetUnit's `inSpace`; a test checks that they are the owners')
 *   must pass; when it does not, the call goes to the owner, which refuses it with its own words.
 *   An answer is given again only in the tenancy it was read in (the path's project, the caller's
 *   space), and is kept only when the owner gave it (never "not found").
 * - **Dropped by the owner's notifications** (`oauth_registry_changes`, `core_changes`, followed as
 *   the token service follows the first: lib/db/change_feed.ts). `client:<id>` drops that client's
 *   answer (an update, a deletion, a secret deleted, a key added or deleted), `unit:<id>` that
 *   unit's (an update, a deletion); the registry's other kinds (`installation:`, `config:`,
 *   `origins`) change no client; any other payload, or a lost listening connection, drops
 *   everything of that owner. Answers come from memory only while the feed is fresh (every change
 *   committed more than 800 ms ago applied), so a change reaches every gateway within a second; an
 *   answer read while a change arrived is not kept.
 * - **Nor just after one.** The owner's replica that answers a read keeps the resource in memory
 *   too (services/oauth/client_cache.ts, services/core/unit_cache.ts), and may apply a change up
 *   to 800 ms after this gateway did: an answer whose call began within 800 ms after a change to
 *   that resource arrived here (or to every one: a reset, a payload not known, more changes than
 *   it remembers one by one) is not kept, or it could keep what the change replaced.
 * - **This gateway's own writes at once.** A write to the owner through this gateway (any method
 *   but a read, whether it succeeded or not) drops the resource it names when it returns (or every
 *   one, when it names none; a create drops nothing), and answers read meanwhile or within 800 ms
 *   after are not kept: a caller that changed a resource reads its change back from the same
 *   gateway without waiting for the notification.
 * - **One call for reads at once.** Reads of an answer not kept, made while a call for it is under
 *   way (begun since the last change, in the same tenancy), wait for that call's answer instead of
 *   making their own, each when the owner's rule lets it read it; when that call fails, each makes
 *   its own.
 * - **Bounded.** At most `maxBytes` per owner (each answer's Protobuf size times three plus 256
 *   bytes), from the process's memory budget, oldest out first (lib/platform/bounded_cache.ts).
 *
 * @module
 */

import { type DescMethod, type DescService, type Message, toBinary } from "@bufbuild/protobuf";
import { createContextValues } from "@connectrpc/connect";
import { CoreService } from "../gen/registry/core/v1/core_service_pb.ts";
import { OAuthRegistryService } from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import {
  type ChangeFeed,
  coreChangesChannel,
  createFeedCache,
  createSettling,
  dropNamed,
  type FollowOptions,
  registryChangesChannel,
} from "../lib/db/mod.ts";
import { idKind, type MemoryBudget } from "../lib/platform/mod.ts";
import { type Caller, inSpace, projectAdmin, type Rule } from "../lib/policy/mod.ts";

/** A read this gateway keeps: an owner's Get of one resource, and how the resource is named. */
export interface KeptRead {
  /** The owner: its writes through this gateway drop what they name. */
  service: DescService;
  /** The read kept. */
  method: DescMethod;
  /** The method's rule in the owner's policy. */
  rule: Rule<never>;
  /** The channel the owner's triggers notify (lib/db/change_feed.ts). */
  channel: string;
  /** The trigger whose presence says the owner notifies (its migration has run). */
  trigger: string;
  /** The notification kind (`<kind>:<uuid>`) that names one resource. */
  kind: string;
  /** The channel's other kinds: they change nothing kept. */
  others: readonly string[];
  /** The owner's method that creates one: a new resource changes none kept. */
  create: DescMethod;
  /** The stored id of the resource a request (a read's or a write's) names, or undefined. */
  key(input: Record<string, unknown>): string | undefined;
  /** Where an answer is read: it is given again only there. */
  scope(input: Record<string, unknown>, caller: Caller): string | undefined;
}

/** The stored id of the TypeID in `input[field]`, or undefined. */
function idIn(kind: ReturnType<typeof idKind>, field: string) {
  return (input: Record<string, unknown>) => {
    const id = input[field];
    return typeof id === "string" ? kind.toUuid(id) : undefined;
  };
}

/** The reads this gateway keeps, each with the rule of its owner's policy. */
export const keptReads = {
  client: {
    service: OAuthRegistryService,
    method: OAuthRegistryService.method.getClient,
    rule: projectAdmin,
    channel: registryChangesChannel,
    trigger: `${registryChangesChannel}_clients`,
    kind: "client",
    others: ["installation", "config", "origins"],
    create: OAuthRegistryService.method.createClient,
    key: idIn(idKind("cli"), "clientId"),
    scope: (input) => typeof input.projectId === "string" ? input.projectId : undefined,
  },
  unit: {
    service: CoreService,
    method: CoreService.method.getUnit,
    rule: inSpace,
    channel: coreChangesChannel,
    trigger: `${coreChangesChannel}_units`,
    kind: "unit",
    others: [],
    create: CoreService.method.createUnit,
    key: idIn(idKind("unit"), "unitId"),
    scope: (_input, caller) => caller.space,
  },
} as const satisfies Record<string, KeptRead>;

/** Options of {@link createReadCache}. */
export interface ReadCacheOptions {
  /** The read kept. */
  kept: KeptRead;
  /** Follows the owner's change channel (lib/db/change_feed.ts's followChanges, bound). */
  follow(options: FollowOptions): ChangeFeed;
  /** The most bytes kept (estimated). */
  maxBytes: number;
  /** The process's memory budget, which the kept bytes are taken from. */
  budget?: MemoryBudget | undefined;
  /** Whether the owner's triggers exist (its migration that adds them has run). */
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

/** An answer, with where it was read and whether it may be kept. */
interface Kept {
  scope: string;
  answer: Message;
  /** It holds the resource, and its call began after the owner had applied every change to it. */
  keep: boolean;
}

const entryOverhead = 256;
/** How late an owner's replica may apply a change to its own memory (lib/db/change_feed.ts). */
const maxLagMs = 800;
/** The most resources remembered as changed lately; past it, a change counts for all. */
const maxRecentChanges = 4096;

/** Creates the cache of one kept read (see the module's header). */
export function createReadCache(options: ReadCacheOptions): ReadCache {
  const { kept } = options;
  // The owner's replica that answers keeps the resource in memory too, and may apply a change
  // later.
  const monotonic = options.monotonic ?? (() => performance.now());
  const settling = createSettling({
    lagMs: maxLagMs,
    maxKeys: maxRecentChanges,
    monotonic,
    budget: options.budget,
  });
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
      const known = dropNamed(payload, kept.kind, kept.others, (key) => {
        answers.delete(key);
        settling.changed(key);
      });
      if (!known) settling.changed();
      return known;
    },
  });
  const answers = cache.region<Kept>();
  const values = createContextValues();

  return {
    keeps: (method) => method === kept.method,
    async through(method, input, caller, load) {
      const fields = input as unknown as Record<string, unknown>;
      const key = method === kept.method ? kept.key(fields) : undefined;
      const scope = kept.scope(fields, caller);
      if (key === undefined || scope === undefined) {
        cache.count("bypassed");
        return await load();
      }
      // Kept by the resource's id, with where it was read; reads of it under way in the same
      // tenancy share one call (lib/db/feed_cache.ts), each answered only when the owner's rule
      // lets its caller read it.
      const read = await cache.through(
        answers,
        key,
        async () => {
          const startedAt = monotonic();
          const answer = await load();
          return { scope, answer, keep: holds(kept, answer) && settling.settled(key, startedAt) };
        },
        (k) => toBinary(kept.method.output, k.answer as never).length * 3 + entryOverhead,
        {
          serves: (k) => k.scope === scope && allowed(input, caller),
          keeps: (k) => k.keep,
          loadKey: `${scope}\u0000${key}`,
        },
      );
      return read!.answer;
    },
    wrote(method, input) {
      if (method.parent !== kept.service) return;
      cache.changed();
      // A new resource changes no kept one.
      if (method === kept.create) return;
      const key = kept.key(input as unknown as Record<string, unknown>);
      if (key === undefined) answers.clear();
      else answers.delete(key);
      // Another replica of the owner may answer the next read before it has seen this change.
      settling.changed(key);
    },
    stats: () => cache.stats(),
    close: () => cache.close(),
  };

  /** Whether the owner's rule lets `caller` make this call (it throws to refuse). */
  function allowed(input: Message, caller: Caller): boolean {
    try {
      const checked = kept.rule(input as never, caller, values);
      return checked === undefined;
    } catch {
      return false;
    }
  }
}

/** Whether an answer holds the resource (a Get's response has it in its one field). */
function holds(kept: KeptRead, answer: Message): boolean {
  const field = kept.method.output.fields[0]!.localName;
  return (answer as unknown as Record<string, unknown>)[field] !== undefined;
}

/** One cache per kept read, seen as one (what the transcoder calls). */
export function readCaches(caches: readonly ReadCache[]): ReadCache {
  const of = (method: DescMethod) => caches.find((cache) => cache.keeps(method));
  return {
    keeps: (method) => of(method) !== undefined,
    through: (method, input, caller, load) =>
      of(method)?.through(method, input, caller, load) ?? load(),
    wrote(method, input) {
      for (const cache of caches) cache.wrote(method, input);
    },
    stats() {
      const all = caches.map((cache) => cache.stats());
      const sum = (field: keyof (typeof all)[number]) => all.reduce((n, s) => n + s[field], 0);
      return {
        entries: sum("entries"),
        bytes: sum("bytes"),
        hits: sum("hits"),
        misses: sum("misses"),
        bypassed: sum("bypassed"),
      };
    },
    async close() {
      await Promise.all(caches.map((cache) => cache.close()));
    },
  };
}
