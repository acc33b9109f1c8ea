/**
 * Load from h2load (nghttp2's load tool, C++, from Debian's nghttp2-client package): one tool for
 * every path, HTTP/1.1 for the gateway and the reference, HTTP/2 for gRPC, so that the ratios
 * compare servers and not load generators. Percentiles come from its per-request log.
 *
 * @module
 */

import { create, type DescMessage, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import { ensurePackages, packages } from "../tools/debian.ts";

/** What to send, without how much: a {@link LoadSpec} less its load. */
export type LoadTarget = Omit<LoadSpec, "concurrency" | "seconds" | "warmupSeconds">;

/** A unary gRPC call to `address` (host:port) over HTTP/2, the request framed once. */
export function grpcTarget<I extends DescMessage>(
  address: string,
  method: { parent: { typeName: string }; name: string; input: I },
  request: MessageInitShape<I>,
  headers: Record<string, string>,
): LoadTarget {
  const bytes = toBinary(method.input, create(method.input, request));
  const body = new Uint8Array(5 + bytes.length);
  new DataView(body.buffer).setUint32(1, bytes.length);
  body.set(bytes, 5);
  return {
    urls: [`http://${address}/${method.parent.typeName}/${method.name}`],
    method: "POST",
    body,
    headers: { "content-type": "application/grpc", te: "trailers", ...headers },
    h1: false,
  };
}

/** One load run. */
export interface LoadSpec {
  /** Request URLs (same host), used round-robin. */
  urls: string[];
  /** HTTP method. */
  method: string;
  /** Request body, if any. */
  body?: Uint8Array;
  /** Request headers. */
  headers: Record<string, string>;
  /** HTTP/1.1 (true) or HTTP/2 cleartext (false, for gRPC). */
  h1: boolean;
  /** Whether 3xx answers are what is measured (a redirect with a code), not errors. */
  redirects?: boolean;
  /** Concurrent connections, one request in flight on each. */
  concurrency: number;
  /** Measured seconds. */
  seconds: number;
  /** Warm-up seconds before measuring. */
  warmupSeconds: number;
}

/** What one run measured. */
export interface LoadResult {
  /** Requests completed in the measured window. */
  requests: number;
  /** Requests per second. */
  rps: number;
  /** Median latency, ms. */
  p50: number;
  /** 99th percentile latency, ms. */
  p99: number;
  /** Responses that were not 2xx, plus requests that failed or timed out. */
  errors: number;
  /** When there were errors: h2load's own request and status-code counts, to tell them apart. */
  errorDetail?: string | undefined;
  /** CPU ms per request by process (filled in by the caller, which knows the processes). */
  cpu?: Record<string, number>;
}

/** Makes sure h2load is installed (Debian's nghttp2-client), installing it when missing. */
export async function ensureH2load(): Promise<void> {
  await ensurePackages([packages.h2load]);
}

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

/** Runs h2load once: a warm-up, then `spec.seconds` measured. */
export async function h2load(spec: LoadSpec): Promise<LoadResult> {
  const amount = { seconds: spec.seconds, warmupSeconds: spec.warmupSeconds };
  const dir = await Deno.makeTempDir({ prefix: "h2load-" });
  try {
    const args = ["-c", String(spec.concurrency), "-m", "1", "-t", "1", `--log-file=${dir}/log`];
    args.push(
      "-D",
      `${Math.round(amount.seconds * 1000)}ms`,
      `--warm-up-time=${Math.round(amount.warmupSeconds * 1000)}ms`,
    );
    if (spec.h1) args.push("--h1");
    if (spec.method !== "GET" || spec.body) args.push("-H", `:method: ${spec.method}`);
    for (const [k, v] of Object.entries(spec.headers)) args.push("-H", `${k}: ${v}`);
    if (spec.body) {
      await Deno.writeFile(`${dir}/body`, spec.body);
      args.push("-d", `${dir}/body`);
    }
    let urls = spec.urls;
    if (urls.length > 1) {
      await Deno.writeTextFile(`${dir}/urls`, urls.join("\n") + "\n");
      args.push("-i", `${dir}/urls`);
      urls = [];
    }
    const out = await new Deno.Command("h2load", {
      args: [...args, ...urls],
      stdout: "piped",
      stderr: "piped",
      env: { LD_PRELOAD: "" }, // h2load hangs under libfaketime (lib/testing/attacks.ts)
    })
      .output();
    const text = new TextDecoder().decode(out.stdout);
    if (!out.success) {
      throw new Error(`h2load failed: ${text}${new TextDecoder().decode(out.stderr)}`);
    }
    const failed =
      /requests: \d+ total, \d+ started, \d+ done, \d+ succeeded, (\d+) failed, (\d+) errored, (\d+) timeout/
        .exec(text);
    const log = await Deno.readTextFile(`${dir}/log`);
    const lines = log.split("\n").filter((l) => l !== "");
    const latencies = new Float64Array(lines.length);
    lines.forEach((line, i) => {
      const [, , micros] = line.split("\t");
      latencies[i] = Number(micros) / 1000;
    });
    latencies.sort();
    // Statuses from h2load's summary, not from its per-request log: over HTTP/2 a request whose
    // response headers came before the warm-up ended but whose stream closed after it is logged with
    // status 0 (up to one per connection per run, seen on every gRPC run) though it succeeded.
    const statuses = /status codes: \d+ 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx/.exec(text);
    if (!failed || !statuses) throw new Error(`Cannot read h2load's summary: ${text}`);
    const errors = [
      failed[2],
      failed[3],
      spec.redirects ? "0" : statuses[1],
      statuses[2],
      statuses[3],
    ]
      .reduce((n, x) => n + Number(x), 0);
    return {
      requests: lines.length,
      rps: lines.length / amount.seconds,
      p50: percentile(latencies, 0.5),
      p99: percentile(latencies, 0.99),
      errors,
      errorDetail: errors === 0
        ? undefined
        : text.split("\n").filter((l) => /^(requests|status codes|traffic):/.test(l)).join("; "),
    };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}
