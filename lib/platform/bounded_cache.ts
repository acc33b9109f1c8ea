/**
 * Memory a process keeps answers in, bounded and counted: every entry is counted in bytes (its
 * owner's estimate), against the cache's `maxBytes` (and `maxEntries`) and the process's memory
 * budget (./budget.ts), in its `cache` share, taken as the cache fills and given back as it
 * empties. When either bound is full, the oldest entries of the region holding the most go first;
 * when the budget has no room (requests hold it), nothing more is kept. An entry replaced gives its
 * bytes back, so the count is exact.
 *
 * What keeps the answers true is the owner's: lib/db/feed_cache.ts drops them on Postgres'
 * notifications; a memo of a pure check (a verified signature) checks what it depends on at every
 * hit.
 *
 * @module
 */

import type { Lease, MemoryBudget } from "./budget.ts";

/** Options of {@link createBoundedCache}. */
export interface BoundedCacheOptions {
  /** The most bytes kept (estimated). */
  maxBytes: number;
  /** The most entries kept, across the regions (default: no limit but the bytes). */
  maxEntries?: number | undefined;
  /** The process's memory budget, which the kept bytes are taken from. */
  budget?: MemoryBudget | undefined;
}

/** One kind of answer, by key. */
export interface Region<T> {
  /** The kept answer, or undefined. */
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

/** The cache: regions sharing one bound. */
export interface BoundedCache {
  /** A new region: a kind of answer with its own keys. */
  region<T>(): Region<T>;
  /** Entries and bytes kept now. */
  stats(): { entries: number; bytes: number };
  /** Forgets everything. */
  clear(): void;
  /** Forgets everything and gives its share of the budget back; nothing is kept after. */
  close(): void;
}

/**
 * The bytes to count for a memo under `key` of a JSON-like `value` (a verified token's claims):
 * both as UTF-16 strings, and 256 for the entry and the objects around them.
 */
export function memoBytes(key: string, value: unknown): number {
  return (key.length + JSON.stringify(value).length) * 2 + 256;
}

interface Entry<T> {
  value: T;
  bytes: number;
}

/** Creates a cache (see the module's header). */
export function createBoundedCache(options: BoundedCacheOptions): BoundedCache {
  const { maxBytes } = options;
  const maxEntries = options.maxEntries ?? Infinity;
  /** Maps keep insertion order: the first key of each is its oldest. */
  const maps: Map<string, Entry<unknown>>[] = [];
  let bytes = 0;
  let entries = 0;
  let closed = false;
  let lease: Lease | undefined = options.budget?.take(0, ["cache"]);

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
  function clear(): void {
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
    if (closed || size > maxBytes || more > maxEntries) return false;
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
    stats: () => ({ entries, bytes }),
    clear,
    close() {
      clear();
      closed = true;
      lease?.release();
      lease = undefined;
    },
  };
}
