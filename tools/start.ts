/**
 * `deno task start`: runs the whole stack on this machine and prints the gateway URL, the gRPC
 * addresses and a development token once it is ready.
 *
 * - Without DATABASE_URL: everything in this process on an embedded PGlite database kept in
 *   `./.data/pgdata` (tools/embedded.ts), so nothing but Deno is needed. Data survives restarts.
 * - With DATABASE_URL: each component as its own process, like production, restarted when one
 *   dies (tools/supervisor.ts).
 *
 * Without AUTH_JWT_SECRET / CLIENT_SECRET_HMAC_KEY, values generated once into the data folder
 * are used. START_DATA_DIR moves the data folder; START_HOST the listen address (127.0.0.1).
 *
 * @module
 */

import { signToken } from "../lib/tokens.ts";
import { parseCommandLine } from "./cli.ts";
import {
  dataDir,
  DataDirError,
  type DevSecrets,
  devSecrets,
  prepareDataDir,
} from "./dev_secrets.ts";
import { runEmbedded } from "./embedded.ts";
import { supervise } from "./supervisor.ts";

const usage = `Usage: deno task start

Runs the whole stack (gateway, oauth-registry, core) on this machine and, once it is ready,
prints the gateway URL, the gRPC addresses and a development token. Ctrl-C stops it.

Without DATABASE_URL everything runs in this one process on an embedded PGlite database kept in
the data folder; with it, each component is its own process, restarted when it dies.

Options:
  -h, --help                 this text

Environment:
  DATABASE_URL               a Postgres server to use (else the embedded database)
  START_DATA_DIR             the data folder: PGlite's files, the generated secrets (./.data)
  START_HOST                 the listen address (127.0.0.1)
  GATEWAY_PORT               the gateway's HTTP port (8080)
  OAUTH_GRPC_PORT, OAUTH_HTTP_PORT   oauth-registry's gRPC and Connect ports (50051, 8081)
  CORE_GRPC_PORT, CORE_HTTP_PORT     core's gRPC and Connect ports (50052, 8082)
  AUTH_JWT_SECRET, CLIENT_SECRET_HMAC_KEY   the secrets (else generated once into the data folder)
  LOG_LEVEL                  debug, info, warn or error (info)`;

parseCommandLine("start", usage, {});

const env = (name: string, fallback: string) => Deno.env.get(name) || fallback;
const host = env("START_HOST", "127.0.0.1");
const ports = {
  gateway: env("GATEWAY_PORT", "8080"),
  oauthGrpc: env("OAUTH_GRPC_PORT", "50051"),
  oauthHttp: env("OAUTH_HTTP_PORT", "8081"),
  coreGrpc: env("CORE_GRPC_PORT", "50052"),
  coreHttp: env("CORE_HTTP_PORT", "8082"),
};
let secrets: DevSecrets;
try {
  await prepareDataDir();
  secrets = await devSecrets();
} catch (error) {
  if (!(error instanceof DataDirError)) throw error;
  // deno-lint-ignore no-console
  console.error(`start: ${error.message}`);
  Deno.exit(1);
}
const databaseUrl = Deno.env.get("DATABASE_URL");
const common: Record<string, string> = {
  ...Deno.env.toObject(),
  ...secrets,
  HOST: host,
};
const gatewayUrl = `http://${host}:${ports.gateway}`;

let stack: { stop(): Promise<void> };
let database: string;
if (databaseUrl) {
  database = "Postgres at DATABASE_URL; one process per component";
  stack = supervise([
    {
      name: "oauth-registry",
      entry: "services/oauth/main.ts",
      env: { ...common, GRPC_PORT: ports.oauthGrpc, HTTP_PORT: ports.oauthHttp },
    },
    {
      name: "core",
      entry: "services/core/main.ts",
      env: { ...common, GRPC_PORT: ports.coreGrpc, HTTP_PORT: ports.coreHttp },
    },
    {
      name: "gateway",
      entry: "gateway/main.ts",
      env: {
        ...common,
        GATEWAY_PORT: ports.gateway,
        OAUTH_REGISTRY_URL: `http://${host}:${ports.oauthHttp}`,
        CORE_URL: `http://${host}:${ports.coreHttp}`,
      },
    },
  ]);
} else {
  const pgdata = new URL("pgdata/", dataDir());
  database = `embedded PGlite in ${pgdata.pathname} (one process, one connection)`;
  stack = await runEmbedded({ pgdata, env: common, ports });
}

let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  await stack.stop();
  Deno.exit(0);
};
Deno.addSignalListener("SIGINT", stop);
Deno.addSignalListener("SIGTERM", stop);

for (let i = 0; i < 600 && !stopping; i++) {
  const ok = await fetch(`${gatewayUrl}/readyz`).then(
    async (r) => (await r.body?.cancel(), r.ok),
    () => false,
  );
  if (ok) break;
  await new Promise((r) => setTimeout(r, 100));
}
const token = await signToken(secrets.AUTH_JWT_SECRET, {
  sub: "dev",
  projects: ["*"],
  space: "dev",
  ttlSeconds: 24 * 3600,
});
// deno-lint-ignore no-console
console.log(`
Stack is up (database: ${database}).
  Gateway (JSON /v1):   ${gatewayUrl}
  oauth-registry gRPC:  ${host}:${ports.oauthGrpc}   (Connect: http://${host}:${ports.oauthHttp})
  core gRPC:            ${host}:${ports.coreGrpc}   (Connect: http://${host}:${ports.coreHttp})
  Dev token (sub "dev", all projects, space "dev", 24 h):
    export TOKEN=${token}
  Try:
    curl -X PATCH ${gatewayUrl}/v1/projects/demo/config -H "Authorization: Bearer $TOKEN" \\
      -H 'Content-Type: application/json' -d '{"application_name":"Demo"}'
`);
