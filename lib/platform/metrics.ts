/**
 * Prometheus metrics: one registry per process (prom-client), served as `GET /metrics` on the
 * process's HTTP port. The process's default metrics (CPU, memory, event loop lag, GC) are
 * included.
 *
 * @module
 */

import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import type { MemoryBudget } from "./budget.ts";

/** Latency buckets in seconds, from 0.5 ms to 10 s. */
const latencyBuckets = [
  0.0005,
  0.001,
  0.0025,
  0.005,
  0.01,
  0.025,
  0.05,
  0.1,
  0.25,
  0.5,
  1,
  2.5,
  10,
];

/** The metrics of one process. */
export interface Metrics {
  /** The registry, for custom collectors. */
  registry: Registry;
  /** RPCs handled, by rpc, protocol and code (services). */
  rpcs: Counter<"rpc" | "protocol" | "code">;
  /** RPC latency (services). */
  rpcSeconds: Histogram<"rpc" | "protocol" | "code">;
  /** HTTP requests handled, by method, route template and status (gateway). */
  requests: Counter<"method" | "route" | "status">;
  /** HTTP request latency (gateway). */
  requestSeconds: Histogram<"method" | "route" | "status">;
  /** HTTP requests in flight (gateway). */
  inFlight: Gauge;
  /** The Prometheus text exposition. */
  response(): Promise<Response>;
}

const memoryGauges = [
  ["process_resident_memory_bytes", "VmRSS"],
  ["process_virtual_memory_bytes", "VmSize"],
  ["process_heap_bytes", "VmData"],
] as const;

/** The `kB` fields of /proc/self/status, in bytes (none where there is no /proc). */
function readProcStatus(): Record<string, number> {
  const out: Record<string, number> = {};
  try {
    for (
      const [, key, kb] of Deno.readTextFileSync("/proc/self/status").matchAll(
        /^(\w+):\s+(\d+) kB$/gm,
      )
    ) {
      out[key!] = Number(kb) * 1024;
    }
  } catch {
    // not Linux, or no permission: the resident set comes from Deno.memoryUsage()
  }
  return out;
}

/** How often the event loop's delay is sampled (ms). */
const eventLoopSampleMs = 100;

/** Creates the metrics of a process; `component` becomes a constant label. */
export function createMetrics(component: string): Metrics {
  const registry = new Registry();
  registry.setDefaultLabels({ component });
  // The event loop's delay is sampled every 100 ms, not prom-client's 10: under Deno its monitor is
  // a JavaScript timer, and at 10 ms it alone cost an idle process about 4 ms of CPU a second.
  collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: eventLoopSampleMs });
  const registers = [registry];
  // prom-client reads these three from /proc/self/status with node:fs, which gets nothing from
  // /proc under Deno, so they stayed 0; read it with Deno's own file API.
  for (const [name] of memoryGauges) registry.removeSingleMetric(name);
  // The first of them (registered, so collected, first) reads the file once per scrape for all.
  const gauges: Gauge[] = memoryGauges.map(([name, field], i) =>
    new Gauge({
      name,
      help: `${field} of /proc/self/status, in bytes.`,
      registers,
      ...(i === 0
        ? {
          collect() {
            const status = readProcStatus();
            status.VmRSS ??= Deno.memoryUsage().rss;
            memoryGauges.forEach(([, f], j) => {
              if (status[f] !== undefined) gauges[j]!.set(status[f]);
            });
          },
        }
        : {}),
    })
  );
  return {
    registry,
    rpcs: new Counter({
      name: "rpc_requests_total",
      help: "RPCs handled, by method, protocol and status code.",
      labelNames: ["rpc", "protocol", "code"],
      registers,
    }),
    rpcSeconds: new Histogram({
      name: "rpc_duration_seconds",
      help: "Time to handle an RPC.",
      labelNames: ["rpc", "protocol", "code"],
      buckets: latencyBuckets,
      registers,
    }),
    requests: new Counter({
      name: "http_requests_total",
      help: "HTTP requests handled, by method, route template and status.",
      labelNames: ["method", "route", "status"],
      registers,
    }),
    requestSeconds: new Histogram({
      name: "http_request_duration_seconds",
      help: "Time to answer an HTTP request.",
      labelNames: ["method", "route", "status"],
      buckets: latencyBuckets,
      registers,
    }),
    inFlight: new Gauge({
      name: "http_requests_in_flight",
      help: "HTTP requests being answered.",
      registers,
    }),
    async response() {
      return new Response(await registry.metrics(), {
        headers: { "content-type": registry.contentType },
      });
    },
  };
}

/**
 * Exposes a memory budget (lib/platform/budget.ts):
 * `memory_budget_bytes{state="limit"|"held"|"peak"|"reserve"|"reserve_held"}` and
 * `memory_budget_refusals_total`.
 */
export function registerBudgetMetrics(metrics: Metrics, budget: MemoryBudget): void {
  const registers = [metrics.registry];
  new Gauge({
    name: "memory_budget_bytes",
    help: "Bytes of requests this process may hold (limit), holds now (held), held at most " +
      "(peak); kept beyond it for small requests (reserve), and held of that (reserve_held).",
    labelNames: ["state"],
    registers,
    collect() {
      this.set({ state: "limit" }, budget.limit);
      this.set({ state: "held" }, budget.held);
      this.set({ state: "peak" }, budget.peak);
      this.set({ state: "reserve" }, budget.reserve);
      this.set({ state: "reserve_held" }, budget.reserveHeld);
    },
  });
  let counted = 0;
  new Counter({
    name: "memory_budget_refusals_total",
    help: "Requests refused because they did not fit in the memory budget.",
    registers,
    collect() {
      this.inc(budget.refusals - counted);
      counted = budget.refusals;
    },
  });
}

/** What a cache that Postgres keeps honest reports (lib/db/feed_cache.ts's stats). */
export interface CacheStats {
  entries: number;
  bytes: number;
  hits: number;
  misses: number;
  bypassed: number;
}

/**
 * Exposes a cache: `<name>_bytes`, `<name>_entries` and `<name>_answers_total{result="hits"|
 * "misses"|"bypassed"}`; `holds` says what its entries are, `answers` what it answers about.
 */
export function registerCacheMetrics(
  metrics: Metrics,
  name: string,
  what: { holds: string; answers: string },
  stats: () => CacheStats,
): void {
  const registers = [metrics.registry];
  new Gauge({
    name: `${name}_bytes`,
    help: `Estimated bytes of ${what.answers} held in memory (in the memory budget).`,
    registers,
    collect() {
      this.set(stats().bytes);
    },
  });
  new Gauge({
    name: `${name}_entries`,
    help: `${what.holds} held in memory.`,
    registers,
    collect() {
      this.set(stats().entries);
    },
  });
  const counted = { hits: 0, misses: 0, bypassed: 0 };
  new Counter({
    name: `${name}_answers_total`,
    help: `Answers about ${what.answers}, by where they came from: memory (hit), the source when ` +
      "not held (miss), the source while the change feed was not fresh (bypassed).",
    labelNames: ["result"],
    registers,
    collect() {
      const now = stats();
      for (const k of ["hits", "misses", "bypassed"] as const) {
        this.inc({ result: k }, now[k] - counted[k]);
        counted[k] = now[k];
      }
    },
  });
}
