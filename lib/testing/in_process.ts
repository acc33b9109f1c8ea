/**
 * A service's real handlers and real interceptor list, called in this process through connect-es's
 * `createRouterTransport`: no listener and no child process, on a throwaway database migrated with
 * the service's own migrations. For fast tests of a service's logic and policy; what the wire and
 * the processes add is tested by tests/ against the real stack.
 *
 * @module
 */

import { ConnectError, createRouterTransport, type Transport } from "@connectrpc/connect";
import type * as v from "valibot";
import { connect, migrate, readMigrations, type Sql } from "../db/mod.ts";
import { budgetFromConfig, createLogger, createMetrics } from "../platform/mod.ts";
import { authOptions, createTokenVerifier, signToken, type TokenClaims } from "../policy/mod.ts";
import { register } from "../rpc/mod.ts";
import { readServiceConfig, type ServiceDefinition } from "../service/mod.ts";
import { createTestDatabase } from "./database.ts";

/** A service served in this process. */
export interface InProcessService {
  /** A connect-es transport into its router (use with `createClient`). */
  transport: Transport;
  /** Its pool (to look at what a call wrote). */
  sql: Sql;
  /** A caller's `authorization` header, its token signed with the service's key. */
  bearer(claims: TokenClaims): Promise<{ authorization: string }>;
  /** Closes the pool and drops the database. */
  close(): Promise<void>;
}

/** Options of {@link serveInProcess}. */
export interface InProcessOptions {
  /** The service's clock (ms since the epoch; default `Date.now`), for tests that move time. */
  now?: () => number;
}

/**
 * Serves `def` in this process with its own settings from `env` (beyond the database and the token
 * key, which are made here).
 */
export async function serveInProcess<E extends v.ObjectEntries>(
  def: ServiceDefinition<E>,
  env: Record<string, string> = {},
  options: InProcessOptions = {},
): Promise<InProcessService> {
  const db = await createTestDatabase();
  const secret = crypto.randomUUID();
  const config = readServiceConfig(def, {
    DATABASE_URL: db.url,
    AUTH_JWT_SECRET: secret,
    LOG_LEVEL: "warn",
    ...env,
  });
  const sql = connect(db.url, { max: 4, applicationName: `${def.name}/in-process` });
  try {
    await migrate(sql, def.schema, await readMigrations(def.migrations));
  } catch (error) {
    await sql.end();
    await db.drop();
    throw error;
  }
  const { services, interceptors } = def.serve({
    sql,
    config,
    log: createLogger(def.name, "warn"),
    metrics: createMetrics(def.name),
    verify: createTokenVerifier(authOptions(config)),
    notReady: () => undefined,
    migrated: Promise.resolve(),
    budget: budgetFromConfig(config),
    now: options.now ?? Date.now,
  });
  const transport = createRouterTransport((router) => register(router, services), {
    router: { interceptors },
  });
  return {
    transport,
    sql,
    bearer: async (claims) => ({ authorization: `Bearer ${await signToken(secret, claims)}` }),
    async close() {
      await sql.end({ timeout: 5 });
      await db.drop();
    },
  };
}

/** The ConnectError a call failed with; fails the test when the call succeeds or throws another. */
export async function rejection(call: Promise<unknown>): Promise<ConnectError> {
  try {
    await call;
  } catch (error) {
    if (error instanceof ConnectError) return error;
    throw error;
  }
  throw new Error("the call succeeded");
}
