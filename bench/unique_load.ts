/**
 * Load of requests that may each be sent once: a client assertion's `jti` and a DPoP proof's `jti`
 * are single use, and a patch repeated changes nothing after its first, so h2load, which repeats
 * one request, cannot carry them. This sends HTTP/1.1
 * requests made in advance (signing is not part of what is measured), `concurrency` connections
 * with one request in flight on each, as h2load does with `-m 1`; the operations measured with it
 * are compared with a baseline measured with it too, never with h2load's figures.
 *
 * @module
 */

import type { LoadResult } from "./h2load.ts";

/** One run of {@link uniqueLoad}. */
export interface UniqueLoadSpec {
  /** The URL every request goes to, unless the request names another path on its host. */
  url: string;
  /** The requests' method (default POST). */
  method?: string;
  /** Their body's media type (default application/x-www-form-urlencoded). */
  contentType?: string;
  /**
   * Makes the next request's body, extra headers and, if not the URL's, path (called before the
   * run, not during it).
   */
  request(i: number): Promise<{ body: string; headers: Record<string, string>; path?: string }>;
  /** How many requests to make in advance: more than the run can send. */
  prepared: number;
  /** The status every answer should have (default: any 2xx). */
  expectStatus?: number;
  /** Concurrent connections, one request in flight on each. */
  concurrency: number;
  /** Measured seconds. */
  seconds: number;
  /** Warm-up seconds before measuring. */
  warmupSeconds: number;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Reads one HTTP/1.1 response off `conn`; returns its status. */
async function readResponse(conn: Deno.Conn, buffer: { data: Uint8Array }): Promise<number> {
  const chunk = new Uint8Array(16 * 1024);
  for (;;) {
    const text = decoder.decode(buffer.data);
    const end = text.indexOf("\r\n\r\n");
    if (end >= 0) {
      const head = text.slice(0, end);
      const status = Number(head.slice(9, 12));
      const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? "0");
      // Heads and bodies here are ASCII: characters are bytes.
      const total = end + 4 + length;
      while (buffer.data.length < total) {
        const n = await conn.read(chunk);
        if (n === null) throw new Error("connection closed mid-response");
        buffer.data = concat(buffer.data, chunk.subarray(0, n));
      }
      buffer.data = buffer.data.slice(total);
      return status;
    }
    const n = await conn.read(chunk);
    if (n === null) throw new Error("connection closed");
    buffer.data = concat(buffer.data, chunk.subarray(0, n));
  }
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

/** Runs the load: a warm-up, then `spec.seconds` measured. */
export async function uniqueLoad(spec: UniqueLoadSpec): Promise<LoadResult> {
  const url = new URL(spec.url);
  const requests: Uint8Array[] = [];
  for (let i = 0; i < spec.prepared; i++) {
    const { body, headers, path } = await spec.request(i);
    const head = [
      `${spec.method ?? "POST"} ${path ?? url.pathname} HTTP/1.1`,
      `host: ${url.host}`,
      `content-type: ${spec.contentType ?? "application/x-www-form-urlencoded"}`,
      `content-length: ${encoder.encode(body).length}`,
      ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
    ].join("\r\n");
    requests.push(encoder.encode(`${head}\r\n\r\n${body}`));
  }
  const turn = await takeTurn();
  try {
    return await send(spec, requests);
  } finally {
    await turn?.end();
  }
}

/**
 * Under `deno task bench:compare`, waits for this side's turn to load the machine, as its runs of
 * h2load do (./compare.ts): the `h2load` first on the PATH is then its turn keeper, which with
 * `--hold` takes the turn, says so and keeps it until its input closes. Otherwise returns at once.
 */
async function takeTurn(): Promise<{ end(): Promise<void> } | undefined> {
  if (!Deno.env.get("BENCH_TURN_DIR")) return undefined;
  const keeper = new Deno.Command("h2load", {
    args: ["--hold"],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = keeper.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const said = await reader.read();
  if (said.value?.trim() !== "held") {
    throw new Error(
      `the turn keeper said ${JSON.stringify(said.value)}, not that it held the turn`,
    );
  }
  return {
    async end() {
      await keeper.stdin.close();
      await reader.cancel();
      await keeper.status;
    },
  };
}

/** Sends `requests` as `spec` says: a warm-up, then `spec.seconds` measured. */
async function send(spec: UniqueLoadSpec, requests: Uint8Array[]): Promise<LoadResult> {
  const url = new URL(spec.url);
  let next = 0;
  const started = performance.now();
  const measureFrom = started + spec.warmupSeconds * 1000;
  const stopAt = measureFrom + spec.seconds * 1000;
  const latencies: number[] = [];
  let errors = 0;
  let exhausted = false;
  await Promise.all(Array.from({ length: spec.concurrency }, async () => {
    const conn = await Deno.connect({ hostname: url.hostname, port: Number(url.port) });
    const buffer = { data: new Uint8Array(0) };
    try {
      for (;;) {
        const at = performance.now();
        if (at >= stopAt) return;
        const request = requests[next++];
        if (!request) {
          exhausted = true;
          return;
        }
        let status = 0;
        try {
          await conn.write(request);
          status = await readResponse(conn, buffer);
        } catch {
          errors++;
          return;
        }
        const done = performance.now();
        if (at >= measureFrom && done <= stopAt) {
          latencies.push(done - at);
          const expected = spec.expectStatus === undefined
            ? status >= 200 && status <= 299
            : status === spec.expectStatus;
          if (!expected) errors++;
        }
      }
    } finally {
      conn.close();
    }
  }));
  if (exhausted) {
    throw new Error(`uniqueLoad: all ${spec.prepared} prepared requests were sent; prepare more`);
  }
  latencies.sort((a, b) => a - b);
  return {
    requests: latencies.length,
    rps: latencies.length / spec.seconds,
    p50: percentile(latencies, 0.5),
    p99: percentile(latencies, 0.99),
    errors,
  };
}
