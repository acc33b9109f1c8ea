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
 * - **Bounded.** Every entry is counted in bytes (its owner's estimate), against `maxBytes` and
 *   the memory budget's `cache` share, taken as the cache fills and given back as it empties; when
 *   either is full, the oldest entries of the region holding the most go first, and when the budget
 *   has no room (requests hold it) nothing more is kept. An entry replaced (two reads of one key at
 *   once both answered) gives its bytes back, so the count is exact.
 *
 * @module
 */

import type { Lease, MemoryBudget } from "../platform/mod.ts";
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
  /** Whether the cache may serve at all now, besides the feed being fresh (default: yes). */
  ready?: () => boolean;
}

/** One kind of answer, by key. */
export interface Region<T> {
  /** The kept answer, or undefined (not counted as a hit or a miss). */
  get(key: string): T | undefined;
  /**
   * Keeps `value` under `key`, counted as `bytes`, replacing what was kept there; false when it
   * does not fit (nothing is kept then).
   */
  set(key: string, value: T, bytes: number): boolean;
  /**
   * Counts `bytes` more (`value` grew in place): false when they do not fit, or nothing is kept
   * under `key`. Negative `bytes` gives some back.
   */
  resize(key: string, bytes: number): boolean;
  /** Forgets `key`. */
  delete(key: string): void;
  /** Forgets everything of this region. */
  clear(): void;
  /** How many entries it keeps. */
  readonly size: number;
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
   */
  through<T>(
    region: Region<T>,
    key: string | undefined,
    load: () => Promise<T | undefined>,
    size: (value: T) => number,
  ): Promise<T | undefined>;
  /** Counts one answer that did not go through {@link through}. */
  count(how: "hits" | "misses" | "bypassed"): void;
  /** Entries and bytes kept now, and how reads were answered so far. */
  stats(): { entries: number; bytes: number; hits: number; misses: number; bypassed: number };
  /** Stops following the feed, forgets everything and gives its bytes back to the budget. */
  close(): Promise<void>;
}

interface Entry<T> {
  value: T;
  bytes: number;
}

/** Creates a cache following `options.follow`'s feed (see the module's header). */
export function createFeedCache(options: FeedCacheOptions): FeedCache {
  const { maxBytes } = options;
  const maxEntries = options.maxEntries ?? Infinity;
  const ready = options.ready ?? (() => true);
  /** Maps keep insertion order: the first key of each is its oldest. */
  const maps: Map<string, Entry<unknown>>[] = [];
  let bytes = 0;
  let entries = 0;
  let lease: Lease | undefined = options.budget?.take(0, ["cache"]);
  let generation = 0;
  const counts = { hits: 0, misses: 0, bypassed: 0 };

  function remove(map: Map<string, Entry<unknown>>, key: string): void {
    const entry = map.get(key);
    if (!entry) return;
    map.delete(key);
    entries--;
    give(entry.bytes);
  }
  function give(size: number): void {
    bytes -= size;
    lease?.shrink(size);
  }
  function clearAll(): void {
    for (const map of maps) {
      entries -= map.size;
      map.clear();
    }
    lease?.shrink(bytes);
    bytes = 0;
  }
  /**
   * Makes room for `size` bytes and `more` entries, oldest first from the fullest region, and
   * takes the bytes from the budget; false when they do not fit.
   */
  function admit(size: number, more: number): boolean {
    if (size > maxBytes || more > maxEntries) return false;
    while (bytes + size > maxBytes || entries + more > maxEntries) {
      const fullest = maps.reduce((a, b) => (b.size > a.size ? b : a));
      const oldest = fullest.keys().next();
      if (oldest.done) return false; // nothing left to drop: cannot happen while counts are exact
      remove(fullest, oldest.value);
    }
    if (lease && !lease.grow(size)) return false;
    bytes += size;
    return true;
  }

  const feed = options.follow({
    onChange(payload) {
      generation++;
      if (!options.onChange(payload)) clearAll();
    },
    onReset() {
      generation++;
      clearAll();
    },
  });
  const usable = () => ready() && feed.fresh();

  return {
    region<T>(): Region<T> {
      const map = new Map<string, Entry<T>>();
      const untyped = map as Map<string, Entry<unknown>>;
      maps.push(untyped);
      return {
        get: (key) => map.get(key)?.value,
        set(key, value, size) {
          remove(untyped, key);
          if (!admit(size, 1)) return false;
          map.set(key, { value, bytes: size });
          entries++;
          return true;
        },
        resize(key, more) {
          if (!map.has(key)) return false;
          if (more > 0 && !admit(more, 0)) return false;
          // Making room may have dropped this very entry (it was the oldest).
          const entry = map.get(key);
          if (!entry) {
            give(more);
            return false;
          }
          if (more < 0) give(-more);
          entry.bytes += more;
          return true;
        },
        delete: (key) => remove(untyped, key),
        clear() {
          for (const key of [...map.keys()]) remove(untyped, key);
        },
        get size() {
          return map.size;
        },
      };
    },
    usable,
    get generation() {
      return generation;
    },
    changed() {
      generation++;
    },
    async through(region, key, load, size) {
      if (key === undefined || !usable()) {
        counts.bypassed++;
        return await load();
      }
      const held = region.get(key);
      if (held !== undefined) {
        counts.hits++;
        return held;
      }
      counts.misses++;
      const before = generation;
      const value = await load();
      if (value !== undefined && generation === before && usable()) {
        region.set(key, value, size(value));
      }
      return value;
    },
    count(how) {
      counts[how]++;
    },
    stats: () => ({ entries, bytes, ...counts }),
    async close() {
      await feed.close();
      clearAll();
      lease?.release();
      lease = undefined;
    },
  };
}
