/**
 * The gateway: `/v1` JSON over HTTP -> Connect RPCs to the services. `GET /healthz` (alive),
 * `GET /readyz` (every backend answers its health check), `GET /metrics`, `GET /openapi.json` (the
 * API's OpenAPI description, gen/openapi/) and `GET /docs` (a reference page of it) need no token.
 * `GET /` is a small page linking `/docs`. Every request gets an `x-request-id` (the caller's, if it
 * is a safe token) and a W3C trace span; both go to the services and into one JSON access log line.
 *
 * Run as its own process, or embedded by `deno task start` through {@link startGateway}. Under
 * `deno task start` only (tools/embedded.ts, tools/dev_gateway.ts) it also serves the development
 * sign-in page (./dev_sign_in.ts): an option of {@link startGateway} and {@link run}, which no
 * setting turns on.
 *
 * @module
 */

import { Code } from "@connectrpc/connect";
import { createOAuthEndpoints, guardErrorBodyFor } from "./oauth.ts";
import { createDevSignIn, devSignInPath } from "./dev_sign_in.ts";
import { createHomePage } from "./home_page.ts";
import openApiDocument from "../gen/openapi/openapi.json" with { type: "json" };
import { docsPage } from "./docs_page.ts";
import { serveOpenApi } from "./openapi.ts";
import * as v from "valibot";
import { Health, HealthCheckResponse_ServingStatus } from "../gen/grpc/health/v1/health_pb.ts";
import { CoreService } from "../gen/registry/core/v1/core_service_pb.ts";
import { OAuthRegistryService } from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { TokenService } from "../gen/registry/token/v1/token_service_pb.ts";
import { authOptions, authSettings, createTokenVerifier } from "../lib/policy/mod.ts";
import { createGrpcTransport } from "../lib/rpc/mod.ts";
import {
  configErrorExitCode,
  defaultIssuer,
  flag,
  issuerUrl,
  logLevel,
  nonNegativeInt,
  port,
  positiveInt,
  readConfig,
  untilTerminated,
} from "../lib/platform/mod.ts";
import { budgetFromConfig, budgetSettings } from "../lib/platform/mod.ts";
import { guardSettings, serveGuarded } from "../lib/transport/mod.ts";
import { createLogger } from "../lib/platform/mod.ts";
import {
  createMetrics,
  type MemoryBudget,
  registerBudgetMetrics,
  registerCacheMetrics,
} from "../lib/platform/mod.ts";
import {
  connect,
  createFeedCache,
  followChanges,
  registryChangesChannel,
  signingKeysChannel,
} from "../lib/db/mod.ts";
import { createIntrospectionCache } from "./introspection_cache.ts";
import { createReadCache, keptReads, readCaches } from "./read_cache.ts";
import { formatTraceparent, requestIdOf, startSpan } from "../lib/platform/mod.ts";
import { errorResponse, methodNotAllowed } from "./http_errors.ts";
import { headOf } from "./consent_page.ts";
import { createRateLimiter } from "./rate_limit.ts";
import { isApiPath } from "./routes.ts";
import {
  type Backend,
  bodyCostFactor,
  createTranscoder,
  defaultMaxBodyBytes,
} from "./transcoder.ts";

const url = (fallback: string) => v.optional(v.pipe(v.string(), v.url("must be a URL")), fallback);

/**
 * The issuer the metadata names: ISSUER_URL, or by default `http://127.0.0.1:<GATEWAY_PORT>`.
 * `unmatched` when that default is not the token service's, which cannot know this port: the
 * tokens' `iss` would then not be the metadata's `issuer` (RFC 8414 3.3) unless ISSUER_URL is set
 * on both.
 */
export function gatewayIssuer(
  config: { ISSUER_URL?: string | undefined; GATEWAY_PORT: number },
): { issuer: string; unmatched: boolean } {
  const issuer = (config.ISSUER_URL ?? `http://127.0.0.1:${config.GATEWAY_PORT}`).replace(
    /\/$/,
    "",
  );
  return { issuer, unmatched: config.ISSUER_URL === undefined && issuer !== defaultIssuer };
}

/** The gateway's settings. */
export const gatewaySettings = {
  GATEWAY_PORT: port(8080),
  HOST: v.optional(v.string(), "0.0.0.0"),
  // The services' gRPC ports (h2c): the gateway is one more gRPC caller of each.
  OAUTH_REGISTRY_GRPC_URL: url("http://127.0.0.1:50051"),
  CORE_GRPC_URL: url("http://127.0.0.1:50052"),
  TOKEN_SERVICE_GRPC_URL: url("http://127.0.0.1:50053"),
  // The authorization server's issuer; by default http://127.0.0.1:<GATEWAY_PORT>.
  ISSUER_URL: v.optional(issuerUrl),
  // Where the authorization endpoint sends a user who is not signed in (with return_to).
  LOGIN_URL: v.optional(v.pipe(v.string(), v.url("must be a URL"))),
  // The header that names the client's address when a proxy stands in front (the Ingress's
  // `X-Real-IP`), for the device page's guessing limit; unset: the connection's peer address.
  CLIENT_ADDRESS_HEADER: v.optional(
    v.pipe(v.string(), v.regex(/^[A-Za-z0-9-]+$/, "must be a header name")),
  ),
  // Every client must push its authorization requests (RFC 9126): the metadata says so.
  REQUIRE_PAR: flag(false),
  ...authSettings,
  RPC_TIMEOUT_MS: positiveInt(10_000),
  LOG_LEVEL: logLevel,
  SHUTDOWN_DELAY_MS: v.optional(
    v.pipe(v.string(), v.regex(/^\d{1,6}$/, "must be milliseconds"), v.transform(Number)),
    "0",
  ),
  SHUTDOWN_GRACE_MS: positiveInt(10_000),
  // Only listened on, for the caches of introspections and of client and unit reads
  // (./introspection_cache.ts, ./read_cache.ts); unset: no cache.
  DATABASE_URL: v.optional(v.pipe(v.string(), v.minLength(1, "must not be empty"))),
  INTROSPECTION_CACHE_MIB: nonNegativeInt(4),
  READ_CACHE_MIB: nonNegativeInt(4),
  // Per-caller (token `sub`) token bucket of this replica; 0 = off (gateway/rate_limit.ts).
  RATE_LIMIT_PER_SECOND: nonNegativeInt(100),
  RATE_LIMIT_BURST: positiveInt(200),
  // Per client address, of the requests that keep a row (device authorization, PAR); 0 = off.
  OAUTH_KEPT_PER_MINUTE: nonNegativeInt(60),
  ...budgetSettings,
  ...guardSettings,
};

/** The gateway's settings, parsed. */
export type GatewayConfig = v.InferOutput<v.ObjectSchema<typeof gatewaySettings, undefined>>;

/** A running gateway. */
export interface RunningGateway {
  /** The bound port. */
  port: number;
  /** Reports not ready, waits the shutdown delay, then drains, for at most `graceMs`. */
  shutdown(graceMs: number): Promise<void>;
}

const knownMethods = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]);

/**
 * The `method` label: HTTP allows any token as a method, and each distinct one would be a new
 * series kept for the life of the process.
 */
function methodLabel(method: string): string {
  return knownMethods.has(method) ? method : "other";
}

/** The longest part of a method, and of a path, that a log line keeps. */
const maxLoggedMethod = 32;
const maxLoggedPath = 1024;

/**
 * A method or a path as a log line keeps it: cut, as either can be as long as the request head (64
 * KiB), each request then writing as much to the log.
 */
function logged(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}...`;
}

/** What a caller of {@link startGateway} may add: the tests check every exchange. */
export interface GatewayHooks {
  /**
   * Sees each request before it is routed, and returns what sees its response before it is sent.
   * Neither may consume a body (clone it).
   */
  observe?: (req: Request, url: URL) => (res: Response) => void;
}

/** What only the development entry points pass (tools/embedded.ts, tools/dev_gateway.ts). */
export interface DevelopmentOptions {
  /**
   * Serve the development sign-in page (./dev_sign_in.ts), which signs anyone in as any account
   * with AUTH_JWT_SECRET. Never in the image or the manifests: they run gateway/main.ts, whose
   * `run()` passes nothing here.
   */
  devSignIn?: boolean;
}

/** Starts the gateway. */
export function startGateway(
  config: GatewayConfig,
  hooks: GatewayHooks = {},
  development: DevelopmentOptions = {},
): RunningGateway {
  const log = createLogger("gateway", config.LOG_LEVEL);
  const metrics = createMetrics("gateway");
  const budget = budgetFromConfig(config);
  registerBudgetMetrics(metrics, budget);
  const listening = config.DATABASE_URL === undefined ||
      config.INTROSPECTION_CACHE_MIB + config.READ_CACHE_MIB === 0
    ? undefined
    : listenForChanges(config.DATABASE_URL, config, budget);
  if (listening?.introspections) {
    const { introspections } = listening;
    registerCacheMetrics(metrics, "introspection_cache", {
      holds: "Active introspections",
      answers: "introspections",
    }, () => introspections.stats());
  }
  if (listening?.reads) {
    const { reads } = listening;
    registerCacheMetrics(metrics, "read_cache", {
      holds: "Answers of clients and units",
      answers: "reads of clients and units",
    }, () => reads.stats());
  }
  const backends: Backend[] = [
    {
      services: [OAuthRegistryService],
      transport: createGrpcTransport({ baseUrl: config.OAUTH_REGISTRY_GRPC_URL }),
    },
    { services: [CoreService], transport: createGrpcTransport({ baseUrl: config.CORE_GRPC_URL }) },
    // Its /v1 route is the security events'; its OAuth endpoints are served below.
    {
      services: [TokenService],
      transport: createGrpcTransport({ baseUrl: config.TOKEN_SERVICE_GRPC_URL }),
    },
  ];
  const transcode = createTranscoder({
    backends,
    verify: createTokenVerifier({ ...authOptions(config), budget }),
    log,
    rpcTimeoutMs: config.RPC_TIMEOUT_MS,
    rateLimit: createRateLimiter({
      perSecond: config.RATE_LIMIT_PER_SECOND,
      burst: config.RATE_LIMIT_BURST,
      budget,
    }),
    budget,
    reads: listening?.reads,
  });
  const { issuer, unmatched } = gatewayIssuer(config);
  if (unmatched) {
    log.warn("ISSUER_URL is unset: set it on the gateway and the token service alike", {
      issuer,
      token_service_default: defaultIssuer,
    });
  }
  const oauth = createOAuthEndpoints({
    introspections: listening?.introspections,
    jwks: listening?.jwks,
    transport: backends[2]!.transport,
    issuer,
    rpcTimeoutMs: config.RPC_TIMEOUT_MS,
    budget,
    log,
    loginUrl: config.LOGIN_URL,
    requirePar: config.REQUIRE_PAR,
    keptPerAddress: createRateLimiter({
      perSecond: config.OAUTH_KEPT_PER_MINUTE / 60,
      burst: config.OAUTH_KEPT_PER_MINUTE,
      budget,
    }),
  });
  let devSignIn: ReturnType<typeof createDevSignIn> | undefined;
  if (development.devSignIn) {
    if (config.AUTH_JWT_SECRET === undefined) {
      throw new Error("The development sign-in page signs with AUTH_JWT_SECRET, which is not set");
    }
    devSignIn = createDevSignIn({
      secret: config.AUTH_JWT_SECRET,
      publicUrl: issuer,
      tokenIssuer: config.AUTH_ISSUER,
      tokenAudience: config.AUTH_AUDIENCE,
    });
    log.info("development sign-in page", { path: devSignInPath });
  }
  const home = createHomePage({ devSignIn: devSignIn ? devSignInPath : undefined });
  const openApi = serveOpenApi(openApiDocument);
  let draining = false;
  // One label set per method, route and status, made once: prom-client hashes a label object on
  // every update otherwise.
  const seriesByKey = new Map<string, { observe: (seconds: number) => void }>();
  const series = (method: string, route: string, status: number) => {
    const key = `${method} ${route} ${status}`;
    let found = seriesByKey.get(key);
    if (found === undefined) {
      const labels = { method, route, status: String(status) };
      const count = metrics.requests.labels(labels);
      const time = metrics.requestSeconds.labels(labels);
      found = {
        observe: (seconds) => {
          count.inc();
          time.observe(seconds);
        },
      };
      seriesByKey.set(key, found);
    }
    return found;
  };

  async function ready(): Promise<boolean> {
    if (draining) return false;
    const checks = backends.flatMap((b) =>
      b.services.map(async (service) => {
        try {
          const res = await b.transport.unary(Health.method.check, undefined, 2000, undefined, {
            service: service.typeName,
          });
          return res.message.status === HealthCheckResponse_ServingStatus.SERVING;
        } catch {
          return false;
        }
      })
    );
    return (await Promise.all(checks)).every(Boolean);
  }

  /** The gateway's own operational endpoints, by path: their answer to a GET. */
  const operations: Record<string, () => Promise<Response>> = {
    "/healthz": () => Promise.resolve(Response.json({ status: "ok" })),
    "/metrics": () => metrics.response(),
    "/readyz": async () =>
      (await ready())
        ? Response.json({ status: "ready" })
        : Response.json({ status: "not ready" }, { status: 503 }),
  };

  async function route(
    req: Request,
    url: URL,
    requestId: string,
    traceparent: string,
    clientAddress: string,
  ) {
    // A method no resource here takes is 501, not a resource's 405 (RFC 9110 15.6.2, 15.5.6).
    if (!knownMethods.has(req.method)) {
      return {
        response: errorResponse(
          501,
          Code.Unimplemented,
          `The method ${req.method} is not supported`,
        ),
        route: "unmatched",
      };
    }
    if (isApiPath(url.pathname)) {
      return await transcode(req, url, { requestId, traceparent, clientAddress });
    }
    const answered = await oauth(req, url, { requestId, traceparent, clientAddress });
    if (answered) return answered;
    const document = await openApi(req, url);
    if (document) return { response: document, route: "/openapi.json" };
    const docs = await docsPage(req, url);
    if (docs) return { response: docs, route: "/docs" };
    const homePage = await home(req, url);
    if (homePage) return { response: homePage, route: "/" };
    const signIn = await devSignIn?.(req, url);
    if (signIn) return { response: signIn, route: devSignInPath };
    const operation = Object.hasOwn(operations, url.pathname)
      ? operations[url.pathname]!
      : undefined;
    if (operation) {
      // Another method is refused before anything is asked (a readiness check asks every backend).
      if (req.method !== "GET" && req.method !== "HEAD") {
        return { response: methodNotAllowed(req.method, ["GET", "HEAD"]), route: url.pathname };
      }
      const response = await operation();
      return {
        response: req.method === "HEAD" ? await headOf(response) : response,
        route: url.pathname,
      };
    }
    return {
      response: errorResponse(404, Code.NotFound, `No route for ${url.pathname}`),
      route: "unmatched",
    };
  }

  /** The client's address: the proxy's header when one is configured, else the peer's. */
  const clientAddressOf = (req: Request, info: Deno.ServeHandlerInfo) => {
    const header = config.CLIENT_ADDRESS_HEADER;
    const named = header === undefined ? undefined : req.headers.get(header)?.trim();
    return named || (info.remoteAddr as Deno.NetAddr).hostname;
  };
  const server = serveGuarded({
    port: config.GATEWAY_PORT,
    hostname: config.HOST,
    maxConnections: config.HTTP_MAX_CONNECTIONS,
    maxConnectionsPerAddress: config.HTTP_MAX_CONNECTIONS_PER_ADDRESS,
    idleTimeoutMs: config.HTTP_IDLE_TIMEOUT_MS,
    budget,
    // A body over the size limit is answered 413 by the transcoder, without being read.
    maxBodyBytes: defaultMaxBodyBytes,
    admit: (length) => budget.admits(length * bodyCostFactor),
    errorBodyFor: guardErrorBodyFor,
  }, async (req, info) => {
    const started = performance.now();
    const url = new URL(req.url);
    const requestId = requestIdOf(req.headers);
    const span = startSpan(req.headers);
    const observed = hooks.observe?.(req, url);
    metrics.inFlight.inc();
    let result: { response: Response; route: string };
    try {
      result = await route(
        req,
        url,
        requestId,
        formatTraceparent(span),
        clientAddressOf(req, info),
      );
    } catch (error) {
      log.error("request failed", {
        path: logged(url.pathname, maxLoggedPath),
        request_id: requestId,
        error,
      });
      result = {
        response: errorResponse(500, Code.Internal, "Internal error"),
        route: "unmatched",
      };
    } finally {
      metrics.inFlight.dec();
    }
    const { response, route: template } = result;
    response.headers.set("x-request-id", requestId);
    observed?.(response);
    const seconds = (performance.now() - started) / 1000;
    series(methodLabel(req.method), template, response.status).observe(seconds);
    // Every request but the probes and scrapes of the operational endpoints, which come every few
    // seconds and say nothing of a caller: the OAuth endpoints and pages included, where failed
    // client authentications are.
    if (!Object.hasOwn(operations, template) && log.enabled("info")) {
      log.info("request", {
        method: logged(req.method, maxLoggedMethod),
        route: template,
        status: response.status,
        duration_ms: Math.round(seconds * 1e6) / 1e3,
        request_id: requestId,
        trace_id: span.traceId,
        span_id: span.spanId,
      });
    }
    return response;
  });
  log.info("serving", { port: server.addr.port });

  return {
    port: server.addr.port,
    async shutdown(graceMs) {
      draining = true;
      const deadline = Date.now() + graceMs;
      await new Promise((r) => setTimeout(r, Math.min(config.SHUTDOWN_DELAY_MS, graceMs)));
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        server.shutdown(),
        new Promise((r) => timer = setTimeout(r, Math.max(0, deadline - Date.now()))),
      ]);
      clearTimeout(timer);
      await listening?.close();
    },
  };
}

/**
 * The caches that follow the services' changes through Postgres (each unset when its size is 0),
 * and the connection they listen on.
 */
function listenForChanges(url: string, config: GatewayConfig, budget: MemoryBudget) {
  // One connection for the heartbeats, and postgres.js's own one for LISTEN: the gateway reads
  // no table (it may run as a role that can read none).
  const sql = connect(url, { max: 1, applicationName: `gateway/${Deno.pid}` });
  // The owners' migrations that notify have run (the catalog says so).
  const triggers = async (names: string[]) => {
    const [row] = await sql<{ n: number }[]>`
      select count(*)::int as n from pg_trigger where tgname = any(${names})`;
    return row?.n === names.length;
  };
  const mib = 1024 * 1024;
  const introspections = config.INTROSPECTION_CACHE_MIB === 0
    ? undefined
    : createIntrospectionCache({
      follow: (channel, handlers) => followChanges(sql, channel, handlers),
      maxBytes: config.INTROSPECTION_CACHE_MIB * mib,
      budget,
      notifies: () =>
        triggers([
          `${registryChangesChannel}_clients`,
          "revoked_tokens_inserted",
          "signing_keys_changed",
        ]),
    });
  // One cache per kept read (./read_cache.ts), each following its owner's channel.
  const reads = config.READ_CACHE_MIB === 0 ? undefined : readCaches(
    Object.values(keptReads).map((kept) =>
      createReadCache({
        kept,
        follow: (handlers) => followChanges(sql, kept.channel, handlers),
        maxBytes: config.READ_CACHE_MIB * mib,
        budget,
        notifies: () => triggers([kept.trigger]),
      })
    ),
  );
  // The JWK Set, kept while no signing key changes (a few hundred bytes).
  const jwks = createFeedCache({
    follow: (handlers) => followChanges(sql, signingKeysChannel, handlers),
    onChange: () => false,
    maxBytes: 64 * 1024,
    budget,
    notifies: () => triggers(["signing_keys_changed"]),
  });
  return {
    introspections,
    reads,
    jwks,
    async close() {
      await Promise.all([introspections?.close(), reads?.close(), jwks.close()]);
      await sql.end({ timeout: 1 });
    },
  };
}

/**
 * Runs the gateway until SIGTERM; resolves to the exit code (2: unusable settings, printed).
 * `development` is for tools/dev_gateway.ts only; this module run as a program passes none.
 */
export async function run(
  hooks: GatewayHooks = {},
  development: DevelopmentOptions = {},
): Promise<number> {
  let config: GatewayConfig;
  try {
    config = readConfig("gateway", v.object(gatewaySettings));
  } catch (error) {
    return configErrorExitCode(error);
  }
  const gateway = startGateway(config, hooks, development);
  await untilTerminated(
    createLogger("gateway", config.LOG_LEVEL),
    () => gateway.shutdown(config.SHUTDOWN_GRACE_MS),
  );
  return 0;
}

if (import.meta.main) Deno.exit(await run());
