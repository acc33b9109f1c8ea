/**
 * The loads a hostile or careless caller can put on the stack, for `tests/attacks_test.ts`: floods
 * of large bodies and tiny flow-control windows driven by h2load (nghttp2's load tool, C++),
 * connections that send half a request and stop, and the resident memory of each process sampled
 * while they run.
 *
 * @module
 */

import { create, type DescMessage, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import { ensurePackages, packages } from "../../tools/debian.ts";
import type { HttpFloodResult, HttpFloodSpec } from "./http_flood.ts";

/** Resident memory of one process: the highest sample, and the kernel's own high-water mark. */
export interface RssPeak {
  /** The highest VmRSS sampled, MiB. */
  sampledMiB: number;
  /** VmHWM at the end (the peak since the process started), MiB. */
  hwmMiB: number;
}

function statusField(pid: number, field: string): number | undefined {
  try {
    const text = Deno.readTextFileSync(`/proc/${pid}/status`);
    const kib = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(text)?.[1];
    return kib === undefined ? undefined : Number(kib) / 1024;
  } catch {
    return undefined; // the process is gone
  }
}

/** Resident memory of a process now, MiB (undefined once it is gone). */
export function rssMiB(pid: number): number | undefined {
  return statusField(pid, "VmRSS");
}

/** Samples the resident memory of each process every `everyMs` until `stop()`. */
export function watchRss(
  pids: Record<string, number>,
  everyMs = 200,
): { stop(): Record<string, RssPeak> } {
  const peaks: Record<string, number> = {};
  const sample = () => {
    for (const [name, pid] of Object.entries(pids)) {
      const rss = rssMiB(pid);
      if (rss !== undefined) peaks[name] = Math.max(peaks[name] ?? 0, rss);
    }
  };
  sample();
  const timer = setInterval(sample, everyMs);
  return {
    stop() {
      clearInterval(timer);
      sample();
      const out: Record<string, RssPeak> = {};
      for (const [name, pid] of Object.entries(pids)) {
        out[name] = {
          sampledMiB: Math.round(peaks[name] ?? 0),
          hwmMiB: Math.round(statusField(pid, "VmHWM") ?? 0),
        };
      }
      return out;
    },
  };
}

/** What an h2load run saw. */
export interface FloodResult {
  /** Requests started. */
  started: number;
  /** Requests with a response. */
  done: number;
  /** Requests that failed (h2load's "failed": a response never came, or came broken). */
  failed: number;
  /** Requests whose connection broke (h2load's "errored"). */
  errored: number;
  /** Requests that timed out in h2load. */
  timeout: number;
  /** Responses by status class. */
  statuses: { "2xx": number; "3xx": number; "4xx": number; "5xx": number };
  /** h2load's summary lines, for the test's output. */
  summary: string;
}

/**
 * The environment of a load tool: without libfaketime, which a test run on a shifted clock
 * (`faketime -f +30d deno task test`) preloads into every child, and under which h2load hangs.
 * The load needs no date; the servers keep theirs.
 */
export const realClock: Record<string, string> = { LD_PRELOAD: "" };

/** One h2load run. */
export interface FloodSpec {
  /** Target URL. */
  url: string;
  /** HTTP method. */
  method: string;
  /** Request headers. */
  headers: Record<string, string>;
  /** The body of every request. */
  body?: Uint8Array;
  /** HTTP/1.1 (true) or HTTP/2 cleartext (false). */
  h1: boolean;
  /** Connections. */
  connections: number;
  /** Concurrent requests per connection (HTTP/2 streams). */
  streams: number;
  /** Seconds to run. */
  seconds: number;
  /** h2load's `-W`/`-w`: stream and connection windows of 2^n - 1 bytes (HTTP/2). */
  windowBits?: number;
}

/** Runs h2load for `seconds` and parses its summary. */
export async function flood(spec: FloodSpec): Promise<FloodResult> {
  await ensurePackages([packages.h2load]);
  const dir = await Deno.makeTempDir({ prefix: "flood-" });
  try {
    const args = [
      "-c",
      String(spec.connections),
      "-m",
      String(spec.streams),
      "-t",
      "1",
      "-D",
      `${spec.seconds}s`,
      "-T",
      "30s", // a connection with no answer for 30 s counts as timed out
    ];
    if (spec.h1) args.push("--h1");
    if (spec.windowBits !== undefined) {
      args.push("-W", String(spec.windowBits), "-w", String(spec.windowBits));
    }
    args.push("-H", `:method: ${spec.method}`);
    for (const [k, v] of Object.entries(spec.headers)) args.push("-H", `${k}: ${v}`);
    if (spec.body) {
      await Deno.writeFile(`${dir}/body`, spec.body);
      args.push("-d", `${dir}/body`);
    }
    // h2load prints its summary when the time is up, but with large bodies on connections the
    // server closed it can then hang (seen with 4 MB bodies): read until the summary, then stop it.
    const child = new Deno.Command("h2load", {
      args: [...args, spec.url],
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      env: realClock,
    }).spawn();
    let text = "";
    const stderr = new Response(child.stderr).text();
    const hardStop = setTimeout(() => child.kill("SIGKILL"), (spec.seconds + 60) * 1000);
    try {
      for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
        text += chunk;
        if (/status codes: .*\n/.test(text) && /traffic: .*\n/.test(text)) break;
      }
    } finally {
      clearTimeout(hardStop);
      try {
        child.kill("SIGKILL");
      } catch { /* exited */ }
      await child.status;
    }
    text += await stderr;
    const requests =
      /requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout/
        .exec(text);
    const codes = /status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx/.exec(text);
    if (!requests || !codes) throw new Error(`Cannot read h2load's summary:\n${text}`);
    return {
      started: Number(requests[2]),
      done: Number(requests[3]),
      failed: Number(requests[5]),
      errored: Number(requests[6]),
      timeout: Number(requests[7]),
      statuses: {
        "2xx": Number(codes[1]),
        "3xx": Number(codes[2]),
        "4xx": Number(codes[3]),
        "5xx": Number(codes[4]),
      },
      summary: text.split("\n").filter((l) => /^(requests|status codes):/.test(l)).join("; "),
    };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** A gRPC request body: one length-prefixed, uncompressed message. */
export function grpcFrame<M extends DescMessage>(
  schema: M,
  message: MessageInitShape<M>,
): Uint8Array {
  const bytes = toBinary(schema, create(schema, message));
  const out = new Uint8Array(5 + bytes.length);
  new DataView(out.buffer).setUint32(1, bytes.length);
  out.set(bytes, 5);
  return out;
}

/** Connections that each sent `prefix` and then nothing, and when each was closed. */
export interface HalfOpen {
  /** Connections opened. */
  opened: number;
  /** Waits until every connection is closed by the server or `ms` pass: the closing times. */
  closed(ms: number): Promise<{ closed: number; open: number; lastClosedMs: number }>;
  /** Closes what is left. */
  release(): void;
}

/** Opens `count` connections to `port`, writes `prefix` on each and stops there. */
export async function halfOpen(port: number, count: number, prefix: Uint8Array): Promise<HalfOpen> {
  const started = performance.now();
  const conns: Deno.Conn[] = [];
  const closedAt: (number | undefined)[] = [];
  for (let i = 0; i < count; i++) {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    await conn.write(prefix);
    conns.push(conn);
    const index = i;
    closedAt.push(undefined);
    (async () => {
      const buffer = new Uint8Array(256);
      try {
        while ((await conn.read(buffer)) !== null) { /* what the server says before closing */ }
      } catch { /* a reset is a close */ }
      closedAt[index] = performance.now() - started;
    })();
  }
  return {
    opened: count,
    async closed(ms) {
      const until = performance.now() + ms;
      while (performance.now() < until && closedAt.some((t) => t === undefined)) {
        await new Promise((r) => setTimeout(r, 100));
      }
      const times = closedAt.filter((t): t is number => t !== undefined);
      return {
        closed: times.length,
        open: count - times.length,
        lastClosedMs: Math.round(Math.max(0, ...times)),
      };
    },
    release() {
      for (const c of conns) {
        try {
          c.close();
        } catch { /* closed by the server */ }
      }
    },
  };
}

/** Calls `probe` every `everyMs` until `stop()`: how many calls succeeded and how many did not. */
export function keepProbing(
  probe: () => Promise<boolean>,
  everyMs = 100,
): { stop(): Promise<{ ok: number; failed: number }> } {
  let running = true;
  let ok = 0;
  let failed = 0;
  const loop = (async () => {
    while (running) {
      const good = await probe().catch(() => false);
      if (good) ok++;
      else failed++;
      await new Promise((r) => setTimeout(r, everyMs));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return { ok, failed };
    },
  };
}

/** Floods `url` with large HTTP/1.1 bodies from lib/testing/http_flood.ts, in its own process. */
export async function httpFlood(
  spec: Omit<HttpFloodSpec, "bodyFile"> & { body: Uint8Array },
): Promise<HttpFloodResult> {
  const dir = await Deno.makeTempDir({ prefix: "flood-" });
  try {
    const bodyFile = `${dir}/body`;
    await Deno.writeFile(bodyFile, spec.body);
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-net",
        "--allow-read",
        new URL("./http_flood_main.ts", import.meta.url).pathname,
      ],
      stdin: "piped",
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    const { body: _, ...rest } = spec;
    const writer = child.stdin.getWriter();
    await writer.write(new TextEncoder().encode(JSON.stringify({ ...rest, bodyFile })));
    await writer.close();
    const out = await child.output();
    if (!out.success) {
      throw new Error(
        `lib/testing/http_flood_main.ts failed (exit code ${out.code}, signal ${out.signal})`,
      );
    }
    return JSON.parse(new TextDecoder().decode(out.stdout));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}
