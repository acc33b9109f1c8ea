/**
 * A cache that Postgres keeps honest: answers read from Postgres (or from the service that owns
 * them) kept in memory, served only while the owner's change feed (./change_feed.ts) is fresh,
 * dropped by its notifications, and bounded in bytes taken from the process's memory budget. The
 * services' caches (the registry's answers in the token service, project configs in the
 * registry) are this, with what each notification names.
 *
 * - **Served only while fresh.** While the feed is not fresh (a heartbeat late, the listening
 *   connection lost) every read goes to the source, as without the cache.
 * - **Dropped by notifications.** Each notification counts as a change; the owner says what it
 *   drops ({@link FeedCacheOptions.onChange}); a lost listening connection drops everything.
 * - **Never kept across a change.** An answer read while any notification arrived may predate it,
 *   and is not kept ({@link FeedCache.generation}).
 * - **Bounded.** Its regions are a bounded cache's (lib/platform/bounded_cache.ts): counted in
 *   bytes against `maxBytes` and the memory budget, oldest out first, exactly.
 *
 * @module
 */

import { createBoundedCache, type MemoryBudget, type Region } from "../platform/mod.ts";
import type { ChangeFeed, FollowOptions } from "./change_feed.ts";

/** Options of {@link createFeedCache}. */
export interface FeedCacheOptions {
  /** Follows the owner's change channel (./change_feed.ts's followChanges, bound). */
  follow(options: FollowOptions): ChangeFeed;
  /**
   * Applies one notification: drops what it names from the regions. False when the payload is
   * not one the cache knows: then everything is dropped.
   */
  onChange(payload: string): boolean;
  /** The most bytes kept (estimated). */
  maxBytes: number;
  /** The most entries kept, across the regions (default: no limit but the bytes). */
  maxEntries?: number | undefined;
  /** The process's memory budget, which the kept bytes are taken from. */
  budget?: MemoryBudget | undefined;
  /**
   * Whether the owner's schema notifies its changes (the migration that adds its triggers has
   * run): until it says yes, nothing is served from memory. Asked at start, then on use at most
   * every 250 ms until it says yes. Default: it does.
   */
  notifies?: () => Promise<boolean>;
}

/** What a read through a feed cache asks of an answer besides its key (all optional). */
export interface ReadRules<T> {
  /** Whether a kept answer, or a shared load's, may answer this read (else it loads its own). */
  serves?(value: T): boolean;
  /** Whether an answer just loaded may be kept. */
  keeps?(value: T): boolean;
  /** The key under which loads under way are shared (default: the key). */
  loadKey?: string;
}

/** The cache. */
export interface FeedCache {
  /** A new region: a kind of answer with its own keys. */
  region<T>(): Region<T>;
  /** Whether answers may come from memory now (ready, and the feed fresh). */
  usable(): boolean;
  /** Counts the changes applied: an answer read across a change (it moved) is not kept. */
  readonly generation: number;
  /** Notes that this process made a change itself: reads under way are not kept. */
  changed(): void;
  /**
   * The answer for `key`: from `region` when usable, else from `load`; a defined answer loaded
   * while nothing changed is kept, counted as `size(value)` bytes. An undefined key always loads.
   * Reads of a key not kept share the load under way ({@link SharedLoads}). `rules` say what else
   * an answer must be to answer this read, or to be kept.
   */
  through<T>(
    region: Region<T>,
    key: string | undefined,
    load: () => Promise<T | undefined>,
    size: (value: T) => number,
    rules?: ReadRules<T>,
  ): Promise<T | undefined>;
  /** Counts one answer that did not go through {@link through}. */
  count(how: "hits" | "misses" | "bypassed"): void;
  /** Entries and bytes kept now, and how reads were answered so far. */
  stats(): { entries: number; bytes: number; hits: number; misses: number; bypassed: number };
  /** Stops following the feed, forgets everything and gives its bytes back to the budget. */
  close(): Promise<void>;
}

/** Creates a cache following `options.follow`'s feed (see the module's header). */
export function createFeedCache(options: FeedCacheOptions): FeedCache {
  let notifying = options.notifies === undefined;
  let asking = false;
  let askedAt = -Infinity;
  const ready = () => {
    if (notifying) return true;
    if (!asking && performance.now() - askedAt >= 250) {
      asking = true;
      askedAt = performance.now();
      options.notifies!().then((yes) => notifying = yes, () => {}).finally(() => asking = false);
    }
    return false;
  };
  ready();
  const memory = createBoundedCache(options);
  /** The loads under way of each region. */
  const loads = new WeakMap<Region<unknown>, SharedLoads>();
  let generation = 0;
  const counts = { hits: 0, misses: 0, bypassed: 0 };

  const feed = options.follow({
    onChange(payload) {
      generation++;
      if (!options.onChange(payload)) memory.clear();
    },
    onReset() {
      generation++;
      memory.clear();
    },
  });
  const usable = () => ready() && feed.fresh();

  return {
    region<T>() {
      const region = memory.region<T>();
      loads.set(region as Region<unknown>, new SharedLoads());
      return region;
    },
    usable,
    get generation() {
      return generation;
    },
    changed() {
      generation++;
    },
    async through(region, key, load, size, rules = {}) {
      if (key === undefined || !usable()) {
        counts.bypassed++;
        return await load();
      }
      const serves = rules.serves ?? (() => true);
      const held = region.get(key);
      if (held !== undefined && serves(held)) {
        counts.hits++;
        return held;
      }
      const shared = loads.get(region as Region<unknown>)!;
      return await shared.run(
        rules.loadKey ?? key,
        generation,
        async () => {
          counts.misses++;
          const before = generation;
          const value = await load();
          if (
            value !== undefined && generation === before && usable() &&
            (rules.keeps?.(value) ?? true)
          ) {
            region.set(key, value, size(value));
          }
          return value;
        },
        serves,
        () => counts.hits++,
      );
    },
    count(how) {
      counts[how]++;
    },
    stats: () => ({ ...memory.stats(), ...counts }),
    async close() {
      await feed.close();
      memory.close();
    },
  };
}

/**
 * The loads under way of a region, by key, that a read of the same key joins instead of loading
 * again: when a kept answer is dropped (a change, a write), every read of it misses at once, and
 * without this each would ask the source (a gateway under 32 connections walking the same 1,000
 * clients called the registry 18,430 times in a benchmark round of 6 s, by the end of which it
 * kept 794 of them; its GETs ran at 0.61 of the reference's rate in a full benchmark run). A read
 * joins only a load begun since the last change ({@link FeedCache.generation}), so that it never
 * gets an answer older than its own start plus that load's; when the joined load fails, finds
 * nothing or does not serve it, the read loads on its own. At most one entry per read under way:
 * each is removed when its load ends.
 */
class SharedLoads {
  #pending = new Map<string, { generation: number; value: Promise<unknown> }>();

  /**
   * The answer for `key`: that of a load of it begun at `generation` and under way, when there is
   * one and its answer is defined and `serves` this read (`joined` is called), else `load`'s.
   */
  async run<T>(
    key: string,
    generation: number,
    load: () => Promise<T | undefined>,
    serves: (value: T) => boolean,
    joined: () => void,
  ): Promise<T | undefined> {
    const pending = this.#pending.get(key);
    if (pending !== undefined && pending.generation === generation) {
      try {
        const value = await pending.value as T | undefined;
        // Nothing found is not joined: a load may ask in its caller's terms (an installation in
        // the project the caller named), and what one did not find another may.
        if (value !== undefined && serves(value)) {
          joined();
          return value;
        }
      } catch {
        // The joined load failed (its caller's deadline, say): this read loads on its own.
      }
    }
    const value = load();
    const mine = { generation, value };
    this.#pending.set(key, mine);
    try {
      return await value;
    } finally {
      if (this.#pending.get(key) === mine) this.#pending.delete(key);
    }
  }
}

/**
 * Applies a `<kind>:<key>` notification (the payloads of the registry's channel) for a cache that
 * keeps one kind of thing, as {@link FeedCacheOptions.onChange} wants it: `drop`s the key of a
 * payload of `kind` (true); true for a kind in `others`, which names nothing kept (a payload
 * without a colon is its own kind: `origins`); false for any other, so that everything is dropped.
 */
export function dropNamed(
  payload: string,
  kind: string,
  others: readonly string[],
  drop: (key: string) => void,
): boolean {
  const colon = payload.indexOf(":");
  if (colon < 0) return others.includes(payload);
  const named = payload.slice(0, colon);
  if (named === kind) drop(payload.slice(colon + 1));
  return named === kind || others.includes(named);
}

/** What a service's cache of its own rows (a {@link keptRows}) is given. */
export type RowCacheOptions = Pick<FeedCacheOptions, "follow" | "maxBytes" | "budget">;

/** A repository whose rows are kept ({@link keptRows}), and what the cache holds. */
export type RowCache<Repository> = Repository & Pick<FeedCache, "stats" | "close">;

/** A table's rows kept by id in a region of a feed cache (a service's cache of its own rows). */
export interface KeptRows<R> {
  /** The row `id`: from memory, or read by `find` and kept (a row that is not there never is). */
  get(id: string): Promise<R | undefined>;
  /** Forgets the row `id` (a notification named it). */
  drop(id: string): void;
  /**
   * This replica wrote the row `id`: it is forgotten and reads under way are not kept, so the
   * replica's next read sees the change without waiting for the feed.
   */
  wrote(id: string): void;
  /** Runs this replica's write of the row `id`, and {@link wrote} when it returns or fails. */
  write<T>(id: string, run: () => Promise<T>): Promise<T>;
}

/**
 * Keeps rows read by `find` in `cache`, each counted as its JSON twice (UTF-16) plus 256 bytes.
 */
export function keptRows<R>(
  cache: FeedCache,
  find: (id: string) => Promise<R | undefined>,
): KeptRows<R> {
  const rows = cache.region<R>();
  const size = (row: R) => JSON.stringify(row).length * 2 + 256;
  const wrote = (id: string) => {
    cache.changed();
    rows.delete(id);
  };
  return {
    get: (id) => cache.through(rows, id, () => find(id), size),
    drop: (id) => rows.delete(id),
    wrote,
    async write(id, run) {
      try {
        return await run();
      } finally {
        wrote(id);
      }
    },
  };
}

/** Options of {@link createSettling}. */
export interface SettlingOptions {
  /** How late the source may apply a change that arrived here (lib/db/change_feed.ts: 800 ms). */
  lagMs: number;
  /** The most keys remembered one by one; past it, a change counts for every key. */
  maxKeys: number;
  /** The monotonic clock (ms). */
  monotonic: () => number;
  /** The process's memory budget, which the remembered keys are taken from. */
  budget?: MemoryBudget | undefined;
}

/** What a remembered key holds beside its characters: a Map entry and a number, about. */
const settlingEntryBytes = 64;

/** Which changes arrived lately, for a cache whose source is itself a copy (see below). */
export interface Settling {
  /** A change to `key` (undefined: to every key) arrived now. */
  changed(key?: string): void;
  /** Whether a read of `key` begun at `startedAt` came after the source applied every change. */
  settled(key: string, startedAt: number): boolean;
}

/**
 * For a cache whose source keeps a copy of its own that follows the same feed (another service's
 * memory): the source may apply a change up to `lagMs` after this process did, so an answer read
 * within that time after a change to its key may predate the change, and kept it would outlive
 * it. Such an answer is not kept: {@link Settling.settled} says so. Keys are remembered for
 * `lagMs`, at most `maxKeys` of them, their bytes taken from the memory budget's `cache` share
 * (oldest out first; past either, a change counts for all, and nothing is remembered one by one).
 */
export function createSettling(options: SettlingOptions): Settling {
  const { lagMs, maxKeys, monotonic } = options;
  /** When a change to every key last arrived. */
  let allAt = -Infinity;
  /** Keys changed within the lag, oldest first. */
  const recent = new Map<string, number>();
  const lease = options.budget?.take(0, ["cache"]);
  const bytesOf = (key: string) => key.length * 2 + settlingEntryBytes;
  const forget = (key: string) => {
    recent.delete(key);
    lease?.shrink(bytesOf(key));
  };
  return {
    changed(key) {
      const at = monotonic();
      for (const [k, when] of recent) {
        if (at - when <= lagMs) break;
        forget(k);
      }
      if (key !== undefined && recent.has(key)) forget(key);
      if (
        key === undefined || recent.size >= maxKeys ||
        (options.budget !== undefined && !lease?.grow(bytesOf(key)))
      ) {
        allAt = at;
        recent.clear();
        lease?.shrink(lease.bytes);
      } else {
        recent.set(key, at);
      }
    },
    settled: (key, startedAt) =>
      startedAt - allAt > lagMs && startedAt - (recent.get(key) ?? -Infinity) > lagMs,
  };
}
