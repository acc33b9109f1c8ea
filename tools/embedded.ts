/**
 * The default mode of `deno task start` (no DATABASE_URL): the whole stack in this one process on
 * an embedded PGlite database persisted in the data folder.
 *
 * All database traffic goes through ONE connection: PGlite is single-user, and
 * `@electric-sql/pglite-socket` 0.2.17 with more than one connection failed within seconds here
 * under two postgres.js clients (`portal "" does not exist`: its multiplexer interleaves
 * extended-protocol messages). So this process owns the PGlite instance and its socket server,
 * and the oauth-registry and core services share one postgres.js pool of size 1. Fine for a
 * laptop; use Postgres (DATABASE_URL) for anything else. The gateway has the development sign-in
 * page (gateway/dev_sign_in.ts), as tools/dev_gateway.ts gives it in the other mode.
 *
 * @module
 */

import { PGlite } from "@electric-sql/pglite";
import { PGLiteSocketServer } from "@electric-sql/pglite-socket";
import * as v from "valibot";
import { gatewaySettings, startGateway } from "../gateway/main.ts";
import { readConfig } from "../lib/platform/mod.ts";
import { connect } from "../lib/db/mod.ts";
import { readServiceConfig, startService } from "../lib/service/mod.ts";
import { coreService } from "../services/core/main.ts";
import { oauthRegistryService } from "../services/oauth/main.ts";
import { tokenService } from "../services/token/main.ts";
import { pgliteOptions } from "./pglite_init.ts";

/** Where and how to run. */
export interface EmbeddedOptions {
  /** The folder of the PGlite data files. */
  pgdata: URL;
  /** Settings shared by every component (secrets, HOST, LOG_LEVEL...). */
  env: Record<string, string>;
  /** Ports. */
  ports: {
    gateway: string;
    oauthGrpc: string;
    oauthHttp: string;
    coreGrpc: string;
    coreHttp: string;
    tokenGrpc: string;
    tokenHttp: string;
  };
}

/**
 * Creates the database files in a child process the first time (see tools/pglite_init.ts: the
 * memory initdb takes is never given back by the process that ran it).
 */
async function initialise(pgdata: URL): Promise<void> {
  const exists = await Deno.stat(new URL("PG_VERSION", pgdata)).then(() => true, () => false);
  if (exists) return;
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-read",
      "--allow-write",
      "--allow-env",
      "--allow-sys",
      new URL("./pglite_init.ts", import.meta.url).pathname,
      pgdata.pathname,
    ],
    stdin: "null",
    stdout: "inherit",
    stderr: "inherit",
  }).output();
  if (!out.success) {
    throw new Error(`could not create the embedded database in ${pgdata.pathname}`);
  }
}

/** Starts the stack; resolves once it is migrated and listening. */
export async function runEmbedded(options: EmbeddedOptions): Promise<{ stop(): Promise<void> }> {
  await Deno.mkdir(options.pgdata, { recursive: true });
  await initialise(options.pgdata);
  const db = await PGlite.create({ dataDir: options.pgdata.pathname, ...pgliteOptions });
  const socket = new PGLiteSocketServer({ db, port: 0, host: "127.0.0.1", maxConnections: 1 });
  await socket.start();
  const databaseUrl = `postgres://postgres@${socket.getServerConn()}/postgres`;
  const applicationName = `embedded/${Deno.pid}`;
  const sql = connect(databaseUrl, { max: 1, applicationName });
  const env: Record<string, string> = {
    ...options.env,
    DATABASE_URL: databaseUrl,
    DB_POOL_MAX: "1",
    // One connection for everything, and PGlite's socket was not tried with settings in the
    // start-up message: no statement timeout.
    DB_STATEMENT_TIMEOUT_MS: "0",
  };
  const { ports } = options;
  const oauth = await startService(
    oauthRegistryService,
    readServiceConfig(oauthRegistryService, {
      ...env,
      GRPC_PORT: ports.oauthGrpc,
      HTTP_PORT: ports.oauthHttp,
      // No change feed: a listener would need a second connection to the single-user database.
      CONFIG_CACHE_ENTRIES: "0",
      CLIENT_CACHE_MIB: "0",
    }),
    sql,
    applicationName,
  );
  const core = await startService(
    coreService,
    readServiceConfig(coreService, {
      ...env,
      GRPC_PORT: ports.coreGrpc,
      HTTP_PORT: ports.coreHttp,
      // No change feed, as above.
      UNIT_CACHE_MIB: "0",
    }),
    sql,
    applicationName,
  );
  const host = env.HOST ?? "127.0.0.1";
  const token = await startService(
    tokenService,
    readServiceConfig(tokenService, {
      ...env,
      GRPC_PORT: ports.tokenGrpc,
      HTTP_PORT: ports.tokenHttp,
      OAUTH_REGISTRY_GRPC_URL: `http://${host}:${ports.oauthGrpc}`,
      // No change feed: a listener would need a second connection to the single-user database.
      REGISTRY_CACHE_MIB: "0",
    }),
    sql,
    applicationName,
  );
  await Promise.all([oauth.migrated, core.migrated, token.migrated]);
  // No change feed for the gateway's caches either (the database's one connection is taken).
  const { DATABASE_URL: _, ...gatewayEnv } = env;
  const gateway = startGateway(
    readConfig("gateway", v.object(gatewaySettings), {
      ...gatewayEnv,
      GATEWAY_PORT: ports.gateway,
      OAUTH_REGISTRY_GRPC_URL: `http://${host}:${ports.oauthGrpc}`,
      CORE_GRPC_URL: `http://${host}:${ports.coreGrpc}`,
      TOKEN_SERVICE_GRPC_URL: `http://${host}:${ports.tokenGrpc}`,
    }),
    {},
    { devSignIn: true },
  );
  return {
    async stop() {
      await gateway.shutdown(10_000);
      await Promise.all([
        oauth.server.shutdown(10_000),
        core.server.shutdown(10_000),
        token.server.shutdown(10_000),
      ]);
      await sql.end({ timeout: 5 });
      await socket.stop();
      await db.close();
    },
  };
}
