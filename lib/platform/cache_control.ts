/**
 * A request's `Cache-Control` (HTTP header, or gRPC metadata of the same name): the `no-cache`
 * directive (RFC 9111 5.2.1.4) asks that the answer come from the source, not from a copy kept in
 * memory. The gateway's reads, the registry's and the core's honour it (gateway/read_cache.ts,
 * services/oauth/client_cache.ts, services/core/unit_cache.ts): a caller that must see a change
 * made a moment ago through another replica asks for it.
 *
 * @module
 */

/** The header's name (and the metadata's). */
export const cacheControlHeader = "cache-control";

/** Whether `headers` carry `Cache-Control` with the `no-cache` directive. */
export function noCache(headers: Headers): boolean {
  const value = headers.get(cacheControlHeader);
  if (value === null) return false;
  return value.split(",").some((d) => /^\s*no-cache\s*(=|$)/i.test(d));
}
