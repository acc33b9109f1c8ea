/**
 * The start-up every service process shares: read settings, open the pool, apply the schema's
 * migrations, serve the authenticated services on gRPC and Connect, drain on SIGTERM. A service's
 * `main.ts` only names its schema, its settings, its handlers and its interceptor list (a
 * {@link ServiceDefinition}), and exits with what {@link runService} resolves to.
 *
 * The embedded mode of `deno task start` runs several definitions in one process over one shared
 * connection, through {@link startService}.
 *
 * @module
 */

import { Code, type Interceptor } from "@connectrpc/connect";
import * as v from "valibot";
import {
  connect,
  isLockTimeout,
  migrate,
  readMigrations,
  registerPoolMetrics,
  type Sql,
} from "../db/mod.ts";
import {
  budgetFromConfig,
  budgetSettings,
  configErrorExitCode,
  createLogger,
  createMetrics,
  type Logger,
  logLevel,
  type MemoryBudget,
  type Metrics,
  nonNegativeInt,
  port,
  positiveInt,
  readConfig,
  registerBudgetMetrics,
  required,
  toConnectError,
  untilTerminated,
} from "../platform/mod.ts";
import {
  authOptions,
  authSettings,
  createTokenVerifier,
  type TokenVerifier,
} from "../policy/mod.ts";
import { type Binding, type RunningServer, serve } from "../rpc/mod.ts";
import { guardSettings } from "../transport/mod.ts";

/** What a service's parts are built from. */
export interface ServiceDeps<E extends v.ObjectEntries> {
  /** The pool. */
  sql: Sql;
  /** Its settings: its own, and the ones every service reads. */
  config: ServiceConfig<E>;
  /** Its logger. */
  log: Logger;
  /** Its metrics. */
  metrics: Metrics;
  /** Verifies callers' tokens. */
  verify: TokenVerifier;
  /** Why calls cannot be taken now (e.g. the schema is being migrated), or undefined. */
  notReady: () => string | undefined;
  /** Resolves once the schema is migrated (serving starts before: the first queries wait for it). */
  migrated: Promise<void>;
  /** The process's memory budget (a cache takes its bytes from it, in the `cache` share). */
  budget: MemoryBudget;
  /**
   * The clock (ms since the epoch) every rule that depends on time reads: `Date.now`, except in
   * tests that move time (lib/testing's serveInProcess).
   */
  now: () => number;
}

/** What a service is made of. */
export interface ServiceDefinition<E extends v.ObjectEntries> {
  /** Component name, in logs, metrics and the Postgres application_name. */
  name: string;
  /** The Postgres schema the service owns. */
  schema: string;
  /** The folder of its migration files. */
  migrations: URL;
  /** Default ports (overridden by GRPC_PORT and HTTP_PORT). */
  ports: { grpc: number; http: number };
  /** Settings of its own, beyond the common ones. */
  settings: E;
  /**
   * Builds its services' handlers and the one list of interceptors every call goes through, in
   * the order they run (the handler comes after the last).
   */
  serve(deps: ServiceDeps<E>): {
    services: Binding[];
    interceptors: Interceptor[];
    /** Called when the process starts draining (see lib/rpc's `onDrain`). */
    stop?: () => void;
    /**
     * Whether the service's own parts can serve, asked by health and `/readyz` once the schema is
     * migrated and the database answers: resolves when they can, rejects saying why not (the
     * reason is logged). A part that cannot start with the settings given (the token service's
     * signing keys under another encryption key) keeps the pod out of the Service, and a rollout
     * of such pods from replacing working ones.
     */
    ready?: () => Promise<void>;
  };
}

function commonSettings(ports: { grpc: number; http: number }) {
  return {
    DATABASE_URL: required,
    ...authSettings,
    GRPC_PORT: port(ports.grpc),
    HTTP_PORT: port(ports.http),
    HOST: v.optional(v.string(), "0.0.0.0"),
    DB_POOL_MAX: positiveInt(10),
    DB_STATEMENT_TIMEOUT_MS: nonNegativeInt(10_000),
    LOG_LEVEL: logLevel,
    SHUTDOWN_DELAY_MS: v.optional(
      v.pipe(v.string(), v.regex(/^\d{1,6}$/, "must be milliseconds"), v.transform(Number)),
      "0",
    ),
    SHUTDOWN_GRACE_MS: positiveInt(10_000),
    ...budgetSettings,
    ...guardSettings,
  };
}

/** The settings every service reads, after parsing. */
export type CommonConfig = v.InferOutput<
  v.ObjectSchema<ReturnType<typeof commonSettings>, undefined>
>;

/** A definition's full settings, after parsing. */
export type ServiceConfig<E extends v.ObjectEntries> =
  & CommonConfig
  & v.InferOutput<v.ObjectSchema<E, undefined>>;

/** A definition's settings: the ones every service reads, and its own. */
export function serviceSettings<E extends v.ObjectEntries>(def: ServiceDefinition<E>) {
  return { ...commonSettings(def.ports), ...def.settings };
}

/** Reads a definition's settings from the environment (or `env`); throws a ConfigError. */
export function readServiceConfig<E extends v.ObjectEntries>(
  def: ServiceDefinition<E>,
  env?: Record<string, string | undefined>,
): ServiceConfig<E> {
  return readConfig(def.name, v.object(serviceSettings(def)), env) as ServiceConfig<E>;
}

/** A running service. */
export interface StartedService {
  /** Its servers. */
  server: RunningServer;
  /** Its logger. */
  log: Logger;
  /** Resolves when its schema is migrated. */
  migrated: Promise<void>;
}

/**
 * Serves the definition over `sql`, and migrates its schema. The servers start at once and report
 * not ready (RPCs answer UNAVAILABLE) until the migrations have run; while the database cannot be
 * reached the migrations are retried with backoff, so a service started before its database comes
 * up when the database does. `applicationName` must be the one `sql` connects with (pool metrics
 * find the pool's connections by it). `budget` is the process's memory budget (one per process:
 * the embedded mode shares one between its components).
 */
export async function startService<E extends v.ObjectEntries>(
  def: ServiceDefinition<E>,
  config: ServiceConfig<E>,
  sql: Sql,
  applicationName: string,
  budget: MemoryBudget = budgetFromConfig(config),
): Promise<StartedService> {
  const log = createLogger(def.name, config.LOG_LEVEL);
  const migrations = await readMigrations(def.migrations);
  let migrated = false;
  // What callers are told until then: the database is named when it is what the service waits for.
  let notReady: string | undefined = "The service is starting (migrating its database); try again";
  const metrics = createMetrics(def.name);
  registerBudgetMetrics(metrics, budget);
  registerPoolMetrics(sql, metrics.registry, applicationName, config.DB_POOL_MAX);
  const verify = createTokenVerifier({ ...authOptions(config), budget });
  let schemaReady!: () => void;
  const schemaMigrated = new Promise<void>((resolve) => schemaReady = resolve);
  const { services, interceptors, stop, ready: partsReady } = def.serve({
    sql,
    config,
    log,
    metrics,
    verify,
    notReady: () => notReady,
    migrated: schemaMigrated,
    budget,
    now: Date.now,
  });
  /** The reason the last "not ready" line gave, and when. */
  let notReadyLogged = { reason: "", at: -Infinity };
  const server = serve({
    bindings: services,
    interceptors,
    grpcPort: config.GRPC_PORT,
    httpPort: config.HTTP_PORT,
    hostname: config.HOST,
    ready: async () => {
      if (!migrated) return false;
      await sql`select 1`;
      if (partsReady === undefined) return true;
      try {
        await partsReady();
        return true;
      } catch (error) {
        // Probes come often (a gateway's, every few hundred ms): a reason is logged when it
        // changes, and again at most once a minute while it holds.
        const reason = error instanceof Error ? error.message : String(error);
        const at = Date.now();
        if (reason !== notReadyLogged.reason || at - notReadyLogged.at >= 60_000) {
          notReadyLogged = { reason, at };
          log.warn("not ready", { error });
        }
        return false;
      }
    },
    log,
    metrics,
    shutdownDelayMs: config.SHUTDOWN_DELAY_MS,
    ...(stop === undefined ? {} : { onDrain: stop }),
    budget,
    guard: config,
  });
  log.info("serving", { grpc_port: server.grpcPort, http_port: server.httpPort });

  const migrating = (async () => {
    for (let attempt = 1, wait = 250;; attempt++, wait = Math.min(wait * 2, 5000)) {
      try {
        const applied = await migrate(sql, def.schema, migrations);
        if (applied.length > 0) log.info("migrated", { applied });
        migrated = true;
        notReady = undefined;
        schemaReady();
        return;
      } catch (error) {
        // A lock timeout: a table the migration changes is held by a long transaction, and the
        // migration rolled back rather than queue every query on that table behind it.
        const locked = isLockTimeout(error);
        if (!locked && toConnectError(error).code !== Code.Unavailable) throw error;
        notReady = locked
          ? "The service is starting: its schema is being changed; try again"
          : "The service is starting: its database does not answer yet; try again";
        log.warn(
          locked
            ? "a migration waited too long for a table lock; retrying"
            : "database unavailable; retrying migrations",
          { attempt, retry_in_ms: wait, error },
        );
        await new Promise((r) => setTimeout(r, wait));
      }
    }
  })();
  return { server, log, migrated: migrating };
}

/**
 * Runs a service as its own process until SIGTERM; resolves to the exit code its `main.ts` exits
 * with: 0 after draining, 2 for unusable settings (printed), 1 when its migrations fail.
 */
export async function runService<E extends v.ObjectEntries>(
  def: ServiceDefinition<E>,
): Promise<number> {
  let config: ServiceConfig<E>;
  try {
    config = readServiceConfig(def);
  } catch (error) {
    return configErrorExitCode(error);
  }
  const applicationName = `${def.name}/${Deno.pid}`;
  const sql = connect(config.DATABASE_URL, {
    max: config.DB_POOL_MAX,
    applicationName,
    statementTimeoutMs: config.DB_STATEMENT_TIMEOUT_MS,
  });
  const { server, log, migrated } = await startService(def, config, sql, applicationName);
  const failed = migrated.then(() => new Promise<number>(() => {}), (error) => {
    log.error("migrations failed", { error });
    return 1;
  });
  const stopped = untilTerminated(log, async () => {
    await server.shutdown(config.SHUTDOWN_GRACE_MS);
    await sql.end({ timeout: 5 });
  }).then(() => 0);
  return await Promise.race([failed, stopped]);
}

/** Declares a service definition, inferring the types of its own settings. */
export function defineService<E extends v.ObjectEntries>(
  def: ServiceDefinition<E>,
): ServiceDefinition<E> {
  return def;
}
