/**
 * Serves a process's RPC services on two ports, one implementation behind both:
 *
 * - gRPC over HTTP/2 cleartext (lib/grpc_server.ts on lib/h2/server.ts), for stock gRPC clients
 *   and Kubernetes probes;
 * - the Connect protocol (and gRPC-web) over HTTP/1.1 or h2c with `Deno.serve`, for the gateway,
 *   plus `GET /healthz` (alive) and `GET /readyz` (dependencies answer).
 *
 * Why two: on our machines a Connect call over fetch into `Deno.serve` measured ~10,400-11,400
 * req/s, faster than any gRPC server measured (3,400-8,500 req/s); and `Deno.serve`
 * cannot send the HTTP trailers gRPC needs, so gRPC has a listener of its own.
 *
 * @module
 */

import type { DescService } from "@bufbuild/protobuf";
import { createConnectRouter, type ServiceImpl } from "@connectrpc/connect";
import { createFetchHandler, type UniversalHandler } from "@connectrpc/connect/protocol";
import { Health } from "../gen/grpc/health/v1/health_pb.ts";
import { ServerReflection } from "../gen/grpc/reflection/v1/reflection_pb.ts";
import { ServerReflection as ServerReflectionV1alpha } from "../gen/grpc/reflection/v1alpha/reflection_pb.ts";
import { Code, ConnectError } from "@connectrpc/connect";
import type { MemoryBudget } from "./budget.ts";
import {
  connectError,
  messageCostFactor,
  readBounded,
  serveConnectUnary,
  unaryRoutes,
} from "./connect_unary.ts";
import { connectErrorBody, type GuardConfig, serveGuarded } from "./http_guard.ts";
import { serveGrpc } from "./grpc_server.ts";
import { createHealthImpl } from "./health.ts";
import type { Logger } from "./log.ts";
import type { Metrics } from "./metrics.ts";
import { createReflectionImpls } from "./reflection.ts";

/** A service and its implementation. */
export interface Binding {
  /** The service descriptor. */
  service: DescService;
  /** Its handlers. */
  impl: ServiceImpl<DescService>;
}

/** Binds an implementation to its service, keeping the types checked. */
export function bind<S extends DescService>(service: S, impl: ServiceImpl<S>): Binding {
  return { service, impl: impl as unknown as ServiceImpl<DescService> };
}

/** Options of {@link serve}. */
export interface ServeOptions {
  /** The API services. */
  bindings: Binding[];
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
  /** The process's memory budget: every request's bytes are taken from it before they are read. */
  budget: MemoryBudget;
  /** The Connect listener's connection cap and idle timeout (lib/http_guard.ts). */
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
  const all = [
    ...options.bindings,
    health,
    bind(ServerReflection, reflection.v1),
    bind(ServerReflectionV1alpha, reflection.v1alpha),
  ];

  const grpcServer = serveGrpc(all, {
    port: options.grpcPort,
    hostname: options.hostname,
    maxReceiveMessageBytes: maxMessageBytes,
    budget: options.budget,
    onError: (error) => options.log.warn("grpc connection failed", { error }),
  });

  const router = createConnectRouter({ grpc: false, readMaxBytes: maxMessageBytes });
  for (const b of [...options.bindings, health]) router.service(b.service, b.impl);
  const routes = new Map<string, (req: Request) => Promise<Response>>(
    router.handlers.map((h: UniversalHandler) => [h.requestPath, createFetchHandler(h)]),
  );
  // Binary unary Connect calls (the gateway's) take the lean path; the rest, connect's router.
  const unary = unaryRoutes([...options.bindings, health]);
  const httpServer = serveGuarded({
    port: options.httpPort,
    hostname: options.hostname,
    maxConnections: options.guard.HTTP_MAX_CONNECTIONS,
    idleTimeoutMs: options.guard.HTTP_IDLE_TIMEOUT_MS,
    budget: options.budget,
    errorBody: connectErrorBody,
    // A message over the size limit is answered RESOURCE_EXHAUSTED without being read.
    admit: (length) =>
      length > maxMessageBytes || options.budget.admits(length * messageCostFactor),
  }, async (req) => {
    const path = new URL(req.url).pathname;
    const call = unary.get(path);
    if (call) {
      const response = await serveConnectUnary(call, req, maxMessageBytes, options.budget);
      if (response) return response;
    }
    const route = routes.get(path);
    if (route) return await routeBudgeted(route, req);
    if (path === "/healthz") return Response.json({ status: "ok" });
    if (path === "/metrics" && options.metrics) return await options.metrics.response();
    if (path === "/readyz") {
      return (await ready())
        ? Response.json({ status: "ready" })
        : Response.json({ status: "not ready" }, { status: 503 });
    }
    return new Response(null, { status: 404 });
  });

  /** Hands a call to connect's router with its body read first, within the budget. */
  async function routeBudgeted(
    route: (req: Request) => Promise<Response>,
    req: Request,
  ): Promise<Response> {
    if (!req.body) return await route(req);
    const lease = options.budget.take(0)!;
    try {
      let body: Uint8Array;
      try {
        body = await readBounded(req, maxMessageBytes, lease);
      } catch (e) {
        const error = e instanceof ConnectError
          ? e
          : new ConnectError("the request body could not be read", Code.InvalidArgument);
        const headers: [string, string][] = [];
        const { status, body } = connectError(error, headers);
        return new Response(body as Uint8Array<ArrayBuffer>, { status, headers });
      }
      return await route(
        new Request(req.url, {
          method: req.method,
          headers: req.headers,
          body: body as Uint8Array<ArrayBuffer>,
          signal: req.signal,
        }),
      );
    } finally {
      lease.release();
    }
  }

  return {
    grpcPort: grpcServer.port,
    httpPort: httpServer.addr.port,
    async shutdown(graceMs = 10_000) {
      draining = true;
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
