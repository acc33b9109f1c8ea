/**
 * An HTTP/1.1 flood of large request bodies from `fetch`, run as its own process
 * (./http_flood_main.ts) by `lib/testing/attacks.ts`: `connections` loops, each sending the same
 * request again as soon as the last one ended, for `seconds`. Why not h2load here: with
 * multi-megabyte bodies on connections the server closes after refusing them, h2load kept running
 * past its duration and never printed its summary.
 *
 * Reads its settings as JSON on stdin: `{url, method, headers, bodyFile, connections, seconds}`;
 * writes `{"statuses": {"<status>": n}, "closed": n, "timeout": n}` on stdout, where `closed` counts
 * requests whose connection was closed before an answer, and `timeout` requests with no answer
 * within 30 s.
 *
 * @module
 */

/** What the flood saw. */
export interface HttpFloodResult {
  /** Answers by HTTP status. */
  statuses: Record<string, number>;
  /** Requests whose connection closed before an answer came. */
  closed: number;
  /** Requests with no answer within 30 s. */
  timeout: number;
}

/** The flood's settings. */
export interface HttpFloodSpec {
  /** Target URL. */
  url: string;
  /** HTTP method. */
  method: string;
  /** Request headers. */
  headers: Record<string, string>;
  /** A file holding the body of every request. */
  bodyFile: string;
  /** Concurrent request loops. */
  connections: number;
  /** Seconds to run. */
  seconds: number;
}

/** Runs the flood, here (the flooding process, ./http_flood_main.ts). */
export async function runHttpFlood(spec: HttpFloodSpec): Promise<HttpFloodResult> {
  const body = await Deno.readFile(spec.bodyFile);
  const result: HttpFloodResult = { statuses: {}, closed: 0, timeout: 0 };
  const until = performance.now() + spec.seconds * 1000;
  await Promise.all(Array.from({ length: spec.connections }, async () => {
    while (performance.now() < until) {
      const signal = AbortSignal.timeout(30_000);
      try {
        const res = await fetch(spec.url, {
          method: spec.method,
          headers: spec.headers,
          body,
          signal,
        });
        await res.arrayBuffer();
        result.statuses[res.status] = (result.statuses[res.status] ?? 0) + 1;
      } catch {
        if (signal.aborted) result.timeout++;
        else result.closed++;
      }
    }
  }));
  return result;
}
