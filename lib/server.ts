/**
 * Serves a process's RPC services on two ports, one implementation behind both:
 *
 * - gRPC over HTTP/2 cleartext (lib/grpc_server.ts on lib/h2/server.ts), for stock gRPC clients
 *   and Kubernetes probes;
 * - the Connect protocol (and gRPC-web) over HTTP/1.1 or h2c with `Deno.serve`, for the gateway,
 *   plus `GET /healthz` (alive) and `GET /readyz` (dependencies answer).
 *
 * Why two: on our machines a Connect call over fetch into `Deno.serve` measured ~10,400-11,400
 * req/s, faster than any gRPC server measured (notes/performance-findings.md); and `Deno.serve`
 * cannot send the HTTP trailers gRPC needs, so gRPC has a listener of its own.
 *
 * @module
 */

import type { DescService } from "@bufbuild/protobuf";
import { createConnectRouter, type ServiceImpl } from "@connectrpc/connect";
import { createFetchHandler, type UniversalHandler } from "@connectrpc/connect/protocol";
import { Health } from "../gen/grpc/health/v1/health_pb.ts";
import { ServerReflection } from "../gen/grpc/reflection/v1/reflection_pb.ts";
import { serveConnectUnary, unaryRoutes } from "./connect_unary.ts";
import { serveGrpc } from "./grpc_server.ts";
import { createHealthImpl } from "./health.ts";
import type { Logger } from "./log.ts";
import type { Metrics } from "./metrics.ts";
import { createReflectionImpl } from "./reflection.ts";

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
  const reflection = bind(
    ServerReflection,
    createReflectionImpl([...options.bindings.map((b) => b.service), Health, ServerReflection]),
  );
  const all = [...options.bindings, health, reflection];

  const grpcServer = serveGrpc(all, {
    port: options.grpcPort,
    hostname: options.hostname,
    maxReceiveMessageBytes: maxMessageBytes,
    onError: (error) => options.log.warn("grpc connection failed", { error }),
  });

  const router = createConnectRouter({ grpc: false, readMaxBytes: maxMessageBytes });
  for (const b of [...options.bindings, health]) router.service(b.service, b.impl);
  const routes = new Map<string, (req: Request) => Promise<Response>>(
    router.handlers.map((h: UniversalHandler) => [h.requestPath, createFetchHandler(h)]),
  );
  // Binary unary Connect calls (the gateway's) take the lean path; the rest, connect's router.
  const unary = unaryRoutes([...options.bindings, health]);
  const httpServer = Deno.serve({
    port: options.httpPort,
    hostname: options.hostname,
    onListen: () => {},
  }, async (req) => {
    const path = new URL(req.url).pathname;
    const call = unary.get(path);
    if (call) {
      const response = await serveConnectUnary(call, req, maxMessageBytes);
      if (response) return response;
    }
    const route = routes.get(path);
    if (route) return await route(req);
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
