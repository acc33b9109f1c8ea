/**
 * `deno task start`: runs the whole stack on this machine and prints the gateway URL, the gRPC
 * addresses and a development token once every component answers its readiness check.
 *
 * - Without DATABASE_URL: everything in this process on an embedded PGlite database kept in
 *   `./.data/pgdata` (tools/embedded.ts), so nothing but Deno is needed. Data survives restarts;
 *   one process at a time uses a data folder (a lock file in it).
 * - With DATABASE_URL: each component as its own process, like production, restarted when one
 *   dies (tools/supervisor.ts).
 *
 * In both, the gateway has the development sign-in page (gateway/dev_sign_in.ts, `/dev/sign-in`),
 * and LOGIN_URL points to it unless set: a browser without a session is sent there by the consent
 * flow, signs in as an example account and comes back. Only these tools switch it on.
 *
 * Before starting anything it checks that the data folder can be created and that every port is
 * free, and says so in one line if not. When the stack is not ready within START_READY_TIMEOUT_S
 * seconds it says which component is not and why, and keeps waiting.
 *
 * The task installs only the npm packages of this module graph (33 packages, 84 MB) before it
 * runs: with nodeModulesDir "auto", `deno task` installed every package of deno.lock first (246
 * packages, 396 MB, the tests' testcontainers and kubernetes-models included), so nodeModulesDir
 * is "manual" and each task installs what it needs (`deno install --entrypoint` here, everything
 * for the tests). `deno task footprint` measures both, and this process's memory at rest. The
 * install is quiet; tools/install_notice.ts says first when it will take long (the first run).
 * Its settings, their defaults and --help's lines for them are lib/platform/settings.ts's.
 *
 * @module
 */

import { devSignInPath } from "../gateway/dev_sign_in.ts";
import { signToken } from "../lib/policy/mod.ts";
import { startEnvironmentHelp, startSetting, type StartSettingName } from "../lib/platform/mod.ts";
import { parseCommandLine } from "./cli.ts";
import { DataDirError, dataDirError, devSecrets, prepareDataDir } from "./dev_secrets.ts";
import { runEmbedded } from "./embedded.ts";
import { lockFolder, portProblem } from "./preflight.ts";
import { checkAll, explain, type Probe } from "./readiness.ts";
import { supervise } from "./supervisor.ts";

const usage = `Usage: deno task start

Runs the whole stack (gateway, oauth-registry, core, token-service) on this machine and, once
every component is ready, prints the gateway URL, the gRPC addresses and a development token.
Ctrl-C stops it.

Without DATABASE_URL everything runs in this one process on an embedded PGlite database kept in
the data folder; with it, each component is its own process, restarted when it dies.

Options:
  -h, --help                 this text

Environment:
${startEnvironmentHelp()}
Unset or empty is the default (in parentheses). Every variable is passed on to the components:
README.md's Configuration lists them all.`;

parseCommandLine("start", usage, {});

// deno-lint-ignore no-console
const fail = (message: string): never => (console.error(`start: ${message}`), Deno.exit(1));

// Unset or empty: the default lib/platform/settings.ts declares (which --help shows).
const env = (name: StartSettingName): string => startSetting(name) ?? "";
const host = env("START_HOST");
const readyTimeout = env("START_READY_TIMEOUT_S");
const readyTimeoutS = Number(readyTimeout);
if (!(readyTimeoutS > 0)) {
  fail(`START_READY_TIMEOUT_S is "${readyTimeout}", not a number of seconds`);
}
const ports = {
  gateway: env("GATEWAY_PORT"),
  oauthGrpc: env("OAUTH_GRPC_PORT"),
  oauthHttp: env("OAUTH_HTTP_PORT"),
  coreGrpc: env("CORE_GRPC_PORT"),
  coreHttp: env("CORE_HTTP_PORT"),
  tokenGrpc: env("TOKEN_GRPC_PORT"),
  tokenHttp: env("TOKEN_HTTP_PORT"),
};
const databaseUrl = startSetting("DATABASE_URL");

let dataDir: URL;
let secrets: Awaited<ReturnType<typeof devSecrets>>;
let lock: { release(): void } | undefined;
try {
  dataDir = await prepareDataDir();
  if (!databaseUrl) {
    const taken = await lockFolder(dataDir).catch((error) => {
      throw dataDirError("cannot be written", error);
    });
    if ("heldBy" in taken) {
      const by = taken.heldBy ? `process ${taken.heldBy}` : "another process";
      fail(
        `the data folder ${dataDir.pathname} is in use by ${by} (another "deno task start"?); ` +
          "stop it, or set START_DATA_DIR to another folder",
      );
    } else lock = taken;
  }
  const problem = portProblem(host, {
    GATEWAY_PORT: ports.gateway,
    OAUTH_GRPC_PORT: ports.oauthGrpc,
    OAUTH_HTTP_PORT: ports.oauthHttp,
    CORE_GRPC_PORT: ports.coreGrpc,
    CORE_HTTP_PORT: ports.coreHttp,
    TOKEN_GRPC_PORT: ports.tokenGrpc,
    TOKEN_HTTP_PORT: ports.tokenHttp,
  });
  if (problem) fail(problem);
  secrets = await devSecrets();
} catch (error) {
  if (!(error instanceof DataDirError)) throw error;
  fail(error.message);
}

const common: Record<string, string> = {
  ...Deno.env.toObject(),
  ...secrets!,
  HOST: host,
};
// What this process connects to: the listen address, or this machine for a wildcard one.
const reachable = host === "0.0.0.0" ? "127.0.0.1" : host === "::" ? "::1" : host;
const urlHost = reachable.includes(":") ? `[${reachable}]` : reachable;
const gatewayUrl = `http://${urlHost}:${ports.gateway}`;
const oauthUrl = `http://${urlHost}:${ports.oauthHttp}`;
const coreUrl = `http://${urlHost}:${ports.coreHttp}`;
const tokenUrl = `http://${urlHost}:${ports.tokenHttp}`;
common.ISSUER_URL ||= gatewayUrl;
// The consent flow's "not signed in" goes to the development sign-in page on the gateway.
const signInUrl = `${common.ISSUER_URL.replace(/\/$/, "")}${devSignInPath}`;
common.LOGIN_URL ||= signInUrl;

/** Stops the stack; resolves to whether every component stopped on its own. */
let stack: { stop(): Promise<boolean> };
let database: string;
let probes: Probe[];
if (databaseUrl) {
  database = "Postgres at DATABASE_URL; one process per component";
  const supervisor = supervise([
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
      name: "token-service",
      entry: "services/token/main.ts",
      env: {
        ...common,
        GRPC_PORT: ports.tokenGrpc,
        HTTP_PORT: ports.tokenHttp,
        OAUTH_REGISTRY_GRPC_URL: `http://${urlHost}:${ports.oauthGrpc}`,
      },
    },
    {
      name: "gateway",
      // gateway/main.ts with the development sign-in page.
      entry: "tools/dev_gateway.ts",
      env: {
        ...common,
        GATEWAY_PORT: ports.gateway,
        OAUTH_REGISTRY_GRPC_URL: `http://${urlHost}:${ports.oauthGrpc}`,
        CORE_GRPC_URL: `http://${urlHost}:${ports.coreGrpc}`,
        TOKEN_SERVICE_GRPC_URL: `http://${urlHost}:${ports.tokenGrpc}`,
      },
    },
  ]);
  // A component drains for up to SHUTDOWN_GRACE_MS, then closes its pool in up to 5 s.
  const killAfterMs = (Number(common.SHUTDOWN_GRACE_MS) || 10_000) + 10_000;
  stack = { stop: async () => (await supervisor.stop(killAfterMs)).length === 0 };
  probes = [
    { name: "oauth-registry", url: oauthUrl, databaseUrl },
    { name: "core", url: coreUrl, databaseUrl },
    { name: "token-service", url: tokenUrl, databaseUrl },
    { name: "gateway", url: gatewayUrl, dependsOn: ["oauth-registry", "core", "token-service"] },
  ].map((p) => ({ ...p, state: () => supervisor.state(p.name) }));
} else {
  const pgdata = new URL("pgdata/", dataDir!);
  database = `embedded PGlite in ${pgdata.pathname} (one process, one connection)`;
  try {
    const embedded = await runEmbedded({ pgdata, env: common, ports });
    stack = { stop: () => embedded.stop().then(() => true) };
  } catch (error) {
    fail(`the embedded stack did not start: ${(error as Error)?.message ?? error}`);
  }
  probes = [
    { name: "oauth-registry", url: oauthUrl },
    { name: "core", url: coreUrl },
    { name: "token-service", url: tokenUrl },
    { name: "gateway", url: gatewayUrl, dependsOn: ["oauth-registry", "core", "token-service"] },
  ];
}

let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  // deno-lint-ignore no-console
  console.error("start: stopping...");
  const clean = await stack.stop();
  lock?.release();
  // deno-lint-ignore no-console
  console.error("start: stopped");
  Deno.exit(clean ? 0 : 1);
};
Deno.addSignalListener("SIGINT", stop);
Deno.addSignalListener("SIGTERM", stop);

const deadline = Date.now() + readyTimeoutS * 1000;
let reported = false;
while (!stopping) {
  const checks = await checkAll(probes);
  if (checks.every((c) => c.ready)) break;
  if (!reported && Date.now() >= deadline) {
    reported = true;
    const why = await explain(checks);
    // deno-lint-ignore no-console
    console.error(
      `start: not ready after ${readyTimeoutS} s: ${why}\n` +
        "start: still waiting; the stack is reported up when it is (Ctrl-C stops it)",
    );
  }
  await new Promise((r) => setTimeout(r, reported ? 1000 : 100));
}
if (!stopping) {
  const token = await signToken(secrets!.AUTH_JWT_SECRET, {
    sub: "dev",
    projects: ["*"],
    space: "dev",
    ttlSeconds: 24 * 3600,
  });
  // deno-lint-ignore no-console
  console.log(`
Stack is up (database: ${database}).
  Gateway (JSON /v1):   ${gatewayUrl}
  oauth-registry gRPC:  ${urlHost}:${ports.oauthGrpc}   (Connect: ${oauthUrl})
  core gRPC:            ${urlHost}:${ports.coreGrpc}   (Connect: ${coreUrl})
  token-service gRPC:   ${urlHost}:${ports.tokenGrpc}   (Connect: ${tokenUrl})
  OAuth issuer:         ${common.ISSUER_URL}   (metadata: /.well-known/oauth-authorization-server)
  Sign in (browser):    ${signInUrl}   (development only: any account, no password)
  Dev token (sub "dev", all projects, space "dev", 24 h):
    export TOKEN=${token}
  Try:
    curl -X PATCH ${gatewayUrl}/v1/projects/demo/config -H "Authorization: Bearer $TOKEN" \\
      -H 'Content-Type: application/json' -d '{"application_name":"Demo"}'
`);
}
