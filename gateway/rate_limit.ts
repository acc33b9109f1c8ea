/**
 * The gateway's per-caller rate limit: a token bucket per token subject (`sub`), so that minting
 * more tokens for one subject does not buy more requests. A bucket holds at most `burst` requests
 * and refills at `perSecond`; a request that finds it empty is answered 429 with `Retry-After`
 * (whole seconds until one request is available again). The buckets live in this process: with n
 * gateway replicas a caller may make up to n times the rate.
 *
 * Memory is bounded: when more than `maxBuckets` subjects are tracked, buckets that have refilled
 * completely (they hold no information) are dropped; if that is not enough, the oldest are.
 *
 * @module
 */

/** Options of {@link createRateLimiter}. */
export interface RateLimitOptions {
  /** Requests per second a caller may sustain; 0 turns the limit off. */
  perSecond: number;
  /** Requests a caller may make at once after being idle (at least 1). */
  burst: number;
  /** Most subjects tracked at once (default 100,000). */
  maxBuckets?: number;
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

/** Creates a limiter; undefined when the limit is off. */
export function createRateLimiter(options: RateLimitOptions): RateLimiter | undefined {
  if (options.perSecond <= 0) return undefined;
  const { perSecond } = options;
  const burst = Math.max(1, options.burst);
  const maxBuckets = options.maxBuckets ?? 100_000;
  const now = options.now ?? (() => performance.now());
  const buckets = new Map<string, Bucket>();

  function refill(b: Bucket, t: number): void {
    b.tokens = Math.min(burst, b.tokens + ((t - b.at) / 1000) * perSecond);
    b.at = t;
  }

  function sweep(t: number): void {
    for (const [key, b] of buckets) {
      refill(b, t);
      if (b.tokens >= burst) buckets.delete(key);
    }
    // Still too many callers active at once: forget the least recently seen (Map order).
    for (const key of buckets.keys()) {
      if (buckets.size <= maxBuckets * 0.9) break;
      buckets.delete(key);
    }
  }

  const take = (subject: string) => {
    const t = now();
    let b = buckets.get(subject);
    if (b) {
      buckets.delete(subject); // re-insert: Map order = least recently seen first
      refill(b, t);
    } else {
      if (buckets.size >= maxBuckets) sweep(t);
      b = { tokens: burst, at: t };
    }
    buckets.set(subject, b);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return undefined;
    }
    return Math.max(1, Math.ceil((1 - b.tokens) / perSecond));
  };
  return Object.assign(take, { tracked: () => buckets.size });
}
