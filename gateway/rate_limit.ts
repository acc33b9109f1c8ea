/**
 * The gateway's per-caller rate limit: a token bucket per token subject (`sub`), so that minting
 * more tokens for one subject does not buy more requests. A bucket holds at most `burst` requests
 * and refills at `perSecond`; a request that finds it empty is answered 429 with `Retry-After`
 * (whole seconds until one request is available again). The buckets live in this process: with n
 * gateway replicas a caller may make up to n times the rate.
 *
 * Memory is bounded and counted: the buckets are kept in a bounded cache (lib/platform), at most
 * `maxBytes` of them (2 MiB: about 12,000 callers with UUID subjects, each counted as its subject's
 * bytes and a bucket's), in the process's memory budget. The least recently seen go first when it
 * is full: a bucket not seen for a while is the likeliest to have refilled, and one that has holds
 * nothing a new one would not. A subject whose
 * bucket cannot be kept (the budget is full of requests) is not limited for that request: the
 * budget refuses what would not fit anyway.
 *
 * @module
 */

import { createBoundedCache, type MemoryBudget } from "../lib/platform/mod.ts";

/** Options of {@link createRateLimiter}. */
export interface RateLimitOptions {
  /** Requests per second a caller may sustain; 0 turns the limit off. */
  perSecond: number;
  /** Requests a caller may make at once after being idle (at least 1). */
  burst: number;
  /** Most bytes of buckets kept at once (default 2 MiB). */
  maxBytes?: number;
  /** Most subjects tracked at once (default: as many as `maxBytes` holds). */
  maxBuckets?: number;
  /** The process's memory budget, which the buckets are counted in. */
  budget?: MemoryBudget | undefined;
  /** The clock, in milliseconds (tests). */
  now?: () => number;
}

/** Takes one request from a subject's bucket: undefined if allowed, else seconds to wait. */
export interface RateLimiter {
  (subject: string): number | undefined;
  /** How many subjects are tracked now. */
  tracked(): number;
}

interface Bucket {
  tokens: number;
  at: number;
}

/** What a bucket counts besides its subject's characters (two bytes each): object, map entry. */
const bucketBytes = 96;

/** Creates a limiter; undefined when the limit is off. */
export function createRateLimiter(options: RateLimitOptions): RateLimiter | undefined {
  if (options.perSecond <= 0) return undefined;
  const { perSecond } = options;
  const burst = Math.max(1, options.burst);
  const now = options.now ?? (() => performance.now());
  const buckets = createBoundedCache({
    maxBytes: options.maxBytes ?? 2 * 1024 * 1024,
    maxEntries: options.maxBuckets,
    budget: options.budget,
  }).region<Bucket>();

  const take = (subject: string) => {
    const t = now();
    let b = buckets.get(subject);
    if (b) {
      b.tokens = Math.min(burst, b.tokens + ((t - b.at) / 1000) * perSecond);
      b.at = t;
      buckets.delete(subject); // set again below: the cache forgets the least recently set first
    } else {
      b = { tokens: burst, at: t };
    }
    buckets.set(subject, b, subject.length * 2 + bucketBytes);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return undefined;
    }
    return Math.max(1, Math.ceil((1 - b.tokens) / perSecond));
  };
  return Object.assign(take, { tracked: () => buckets.size });
}
