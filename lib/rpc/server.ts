/**
 * Serves a process's RPC services on two ports, one router definition behind both:
 *
 * - gRPC over HTTP/2 cleartext (lib/rpc/grpc_server.ts on lib/transport's HTTP/2 server), for stock
 *   gRPC clients, the gateway and Kubernetes probes;
 * - the Connect protocol (and gRPC-web) over HTTP/1.1 with `Deno.serve` (lib/rpc/connect_server.ts
 *   behind lib/transport's guard), for curl and browsers, plus `GET /healthz` (alive),
 *   `GET /readyz` (dependencies answer) and `GET /metrics`.
 *
 * `Deno.serve` cannot send the HTTP trailers gRPC needs, so gRPC has a listener of its own. Health
 * and reflection are served without the interceptors (they need no caller).
 *
 * @module
 */

import type { Interceptor } from "@connectrpc/connect";
import { Health } from "../../gen/grpc/health/v1/health_pb.ts";
import { ServerReflection } from "../../gen/grpc/reflection/v1/reflection_pb.ts";
import { ServerReflection as ServerReflectionV1alpha } from "../../gen/grpc/reflection/v1alpha/reflection_pb.ts";
import type { Logger, MemoryBudget, Metrics } from "../platform/mod.ts";
import { connectErrorBody, type GuardConfig, serveGuarded } from "../transport/mod.ts";
import { connectRoutes } from "./connect_server.ts";
import { serveGrpcRoutes } from "./grpc_server.ts";
import { createHealthImpl } from "./health.ts";
import { createReflectionImpls } from "./reflection.ts";
import { bind, type Binding, createRouter, messageCostFactor, type Routes } from "./router.ts";

/** Options of {@link serve}. */
export interface ServeOptions {
  /** The API services. */
  bindings: Binding[];
  /** Every API call's interceptors, outermost first (the process's one list). */
  interceptors: Interceptor[];
  /** Port for gRPC (0 = any free port). */
  grpcPort: number;
  /** Port for Connect and the HTTP health endpoints (0 = any free port). */
  httpPort: number;
  /** Address to listen on. */
  hostname: string;
  /** Whether the process can serve now (checked by health and /readyz). */
  ready: () => Promise<boolean>;
  /** Logger. */
  log: Logger;
  /** Largest request message accepted, in bytes. */
  maxMessageBytes?: number;
  /** Served as `GET /metrics` on the HTTP port. */
  metrics?: Metrics;
  /** How long to keep serving, reported not ready, before closing the listeners (default 0). */
  shutdownDelayMs?: number;
  /**
   * Called once when the server starts draining: end long-lived streams (a change feed's
   * watchers, told to watch again elsewhere) and stop background work.
   */
  onDrain?: () => void;
  /** The process's memory budget: every request's bytes are taken from it before they are read. */
  budget: MemoryBudget;
  /** The Connect listener's connection cap and idle timeout (lib/transport's guard). */
  guard: GuardConfig;
}

/** A running server. */
export interface RunningServer {
  /** The bound gRPC port. */
  grpcPort: number;
  /** The bound HTTP port. */
  httpPort: number;
  /**
   * Reports not ready, waits the shutdown delay (so load balancers stop sending), stops accepting
   * calls and lets calls in flight finish, for at most `graceMs` (default 10 s) in all.
   */
  shutdown(graceMs?: number): Promise<void>;
}

/** Resolves to the promise's value, or to false if it rejects or takes longer than `ms`. */
export function withTimeout(promise: Promise<boolean>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    promise.catch(() => false),
    new Promise<boolean>((resolve) => timer = setTimeout(() => resolve(false), ms)),
  ]).finally(() => clearTimeout(timer));
}

/** Starts both servers. */
export function serve(options: ServeOptions): RunningServer {
  const maxMessageBytes = options.maxMessageBytes ?? 4 * 1024 * 1024;
  let draining = false;
  const ready = async () => !draining && await withTimeout(options.ready(), 2000);
  const health = bind(
    Health,
    createHealthImpl({ services: options.bindings.map((b) => b.service.typeName), ready }),
  );
  // Reflection under both names: v1, and v1alpha for the clients that know only the older one.
  const reflection = createReflectionImpls([
    ...options.bindings.map((b) => b.service),
    Health,
    ServerReflection,
    ServerReflectionV1alpha,
  ]);
  const open = [
    health,
    bind(ServerReflection, reflection.v1),
    bind(ServerReflectionV1alpha, reflection.v1alpha),
  ];
  const routers = (protocols: "grpc" | "http"): Routes => {
    const api = createRouter(options.bindings, {
      interceptors: options.interceptors,
      maxMessageBytes,
      protocols,
    });
    const rest = createRouter(open, { interceptors: [], maxMessageBytes, protocols });
    return {
      handlers: [...api.handlers, ...rest.handlers],
      unary: new Map([...api.unary, ...rest.unary]),
    };
  };

  const grpcServer = serveGrpcRoutes(routers("grpc"), {
    port: options.grpcPort,
    hostname: options.hostname,
    maxReceiveMessageBytes: maxMessageBytes,
    budget: options.budget,
    onError: (error) => options.log.warn("grpc connection failed", { error }),
  });

  const routes = connectRoutes(routers("http"), { maxMessageBytes, budget: options.budget });
  const httpServer = serveGuarded({
    port: options.httpPort,
    hostname: options.hostname,
    maxConnections: options.guard.HTTP_MAX_CONNECTIONS,
    maxConnectionsPerAddress: options.guard.HTTP_MAX_CONNECTIONS_PER_ADDRESS,
    idleTimeoutMs: options.guard.HTTP_IDLE_TIMEOUT_MS,
    budget: options.budget,
    errorBody: connectErrorBody,
    // A message over the size limit is answered RESOURCE_EXHAUSTED without being read.
    maxBodyBytes: maxMessageBytes,
    admit: (length) => options.budget.admits(length * messageCostFactor),
  }, async (req, info) => {
    const path = new URL(req.url).pathname;
    const route = routes.get(path);
    if (route) return await route(req, (info.remoteAddr as Deno.NetAddr).hostname);
    if (path === "/healthz") return Response.json({ status: "ok" });
    if (path === "/metrics" && options.metrics) return await options.metrics.response();
    if (path === "/readyz") {
      return (await ready())
        ? Response.json({ status: "ready" })
        : Response.json({ status: "not ready" }, { status: 503 });
    }
    return new Response(null, { status: 404 });
  });

  return {
    grpcPort: grpcServer.port,
    httpPort: httpServer.addr.port,
    async shutdown(graceMs = 10_000) {
      draining = true;
      options.onDrain?.();
      const deadline = Date.now() + graceMs;
      await new Promise((r) => setTimeout(r, Math.min(options.shutdownDelayMs ?? 0, graceMs)));
      const remaining = Math.max(0, deadline - Date.now());
      let timer: ReturnType<typeof setTimeout> | undefined;
      const expired = new Promise<void>((resolve) => timer = setTimeout(resolve, remaining));
      await Promise.all([
        grpcServer.close(remaining),
        Promise.race([httpServer.shutdown(), expired]),
      ]);
      clearTimeout(timer);
    },
  };
}
