/**
 * Starts the real processes (each service and the gateway) on free ports against a throwaway
 * database, for end-to-end tests. Every log line they write is kept, so tests can inspect logs.
 *
 * @module
 */

import { componentEnv, componentFlags } from "../platform/mod.ts";
import { signToken, type TokenClaims } from "../policy/mod.ts";
import { createTestDatabase, type TestDatabase } from "./database.ts";

/** A running process and the log lines it wrote. */
export interface Proc {
  /** The child process. */
  child: Deno.ChildProcess;
  /** Every line it wrote to stdout or stderr. */
  lines: string[];
  /** Resolves with the first JSON log line whose `msg` is `serving`. */
  serving: Promise<Record<string, unknown>>;
}

const root = new URL("../../", import.meta.url);

/**
 * Reads a child's output stream to its end, line by line (a pipe left unread would stall the
 * child); the text after the last newline counts as a line.
 */
export async function readLines(
  stream: ReadableStream<Uint8Array>,
  onLine: (line: string) => void,
): Promise<void> {
  let rest = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    rest += chunk;
    let i: number;
    while ((i = rest.indexOf("\n")) >= 0) {
      onLine(rest.slice(0, i));
      rest = rest.slice(i + 1);
    }
  }
  if (rest) onLine(rest);
}

/** Settings for a process: over this process's environment; `undefined` unsets one. */
export type ProcEnv = Record<string, string | undefined>;

/**
 * Spawns a component (`services/oauth/main.ts`, `gateway/main.ts`) with the given environment and,
 * optionally, extra `deno run` flags (e.g. `--cpu-prof`).
 */
export function spawn(
  entry: string,
  env: ProcEnv,
  denoFlags: string[] = [],
  keepLines = Infinity,
): Proc {
  const merged: Record<string, string> = {};
  for (const [k, v] of Object.entries({ ...Deno.env.toObject(), ...componentEnv, ...env })) {
    if (v !== undefined) merged[k] = v;
  }
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", ...componentFlags, ...denoFlags, entry],
    cwd: root,
    clearEnv: true,
    env: merged,
    stdout: "piped",
    stderr: "piped",
    stdin: "null",
  }).spawn();
  const lines: string[] = [];
  let resolveServing!: (v: Record<string, unknown>) => void;
  let rejectServing!: (e: Error) => void;
  const serving = new Promise<Record<string, unknown>>((res, rej) => {
    resolveServing = res;
    rejectServing = rej;
  });
  let served = false;
  const onLine = (line: string) => {
    lines.push(line);
    if (lines.length > keepLines) lines.shift();
    // Read until the line that says it serves: after it, every line would be parsed for nothing
    // (the benchmark's load shares the machine with the access log's reader).
    if (served || !line.includes('"serving"')) return;
    try {
      const parsed = JSON.parse(line);
      if (parsed.msg === "serving") {
        served = true;
        resolveServing(parsed);
      }
    } catch { /* not JSON */ }
  };
  Promise.all([readLines(child.stdout, onLine), readLines(child.stderr, onLine)]).then(() =>
    rejectServing(new Error(`${entry} exited before serving:\n${lines.join("\n")}`))
  );
  serving.catch(() => {}); // awaited by whoever needs it; never an unhandled rejection
  return { child, lines, serving };
}

/** Waits until `GET <baseUrl>/readyz` answers 200 (at most 30 s). */
export async function waitReady(baseUrl: string): Promise<void> {
  const until = Date.now() + 30_000;
  while (Date.now() < until) {
    const ok = await fetch(`${baseUrl}/readyz`).then(
      async (r) => (await r.body?.cancel(), r.ok),
      () => false,
    );
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${baseUrl} did not become ready`);
}

/** The stack under test. */
export interface Stack {
  /** Base URL of the gateway. */
  gatewayUrl: string;
  /** `host:port` of the oauth-registry gRPC server. */
  oauthGrpc: string;
  /** Base URL of the oauth-registry Connect server. */
  oauthHttp: string;
  /** `host:port` of the core gRPC server. */
  coreGrpc: string;
  /** Base URL of the core Connect server. */
  coreHttp: string;
  /** `host:port` of the token service's gRPC server. */
  tokenGrpc: string;
  /** Base URL of the token service's Connect server. */
  tokenHttp: string;
  /** The database URL (the real one, not a proxy). */
  databaseUrl: string;
  /** The token signing secret. */
  jwtSecret: string;
  /** The processes (replaced by {@link Stack.restart}). */
  procs: { oauth: Proc; core: Proc; token: Proc; gateway: Proc };
  /** Signs a token the stack accepts. */
  token(claims: TokenClaims): Promise<string>;
  /** Kills a process (SIGKILL) and waits for it to exit. */
  kill(name: ProcName): Promise<void>;
  /** Starts a stopped process again with the same settings and ports. */
  respawn(name: ProcName): Proc;
  /** The settings a process was started with (to start another replica of it). */
  envOf(name: ProcName): ProcEnv;
  /** Stops the processes and drops the database. */
  stop(): Promise<void>;
}

/** The processes of a stack. */
export type ProcName = "oauth" | "core" | "token" | "gateway";

/** Options of {@link startStack}. */
export interface StackOptions {
  /** Rewrites the database URL the services get (e.g. to go through a fault-injecting proxy). */
  serviceDatabaseUrl?: (url: string) => string;
  /** Extra settings for every component. */
  env?: Record<string, string>;
  /** Extra settings for one component (over `env`): e.g. a clock of ./clock.ts. */
  processEnv?: Partial<Record<ProcName, ProcEnv>>;
  /** Extra `deno run` flags for every component (the benchmark's `--cpu-prof`). */
  denoFlags?: string[];
  /**
   * How many of each process's last output lines {@link Proc.lines} keeps (default all: tests
   * search them; the benchmark, at LOG_LEVEL info, would otherwise hold millions).
   */
  keepLines?: number;
  /**
   * Checks every exchange of the gateway against the OpenAPI document (./openapi_check.ts);
   * `stop()` then fails on a violation. Default true; the benchmark turns it off.
   */
  checkResponses?: boolean;
}

/**
 * Where the checked gateways of this process write: one file of violations per stack, and its
 * counts beside it. With OPENAPI_REPORT_DIR set (tools/test.ts sets it), the counts are kept
 * there for the run's summary.
 */
async function violationsFile(): Promise<string> {
  const dir = Deno.env.get("OPENAPI_REPORT_DIR");
  if (dir !== undefined) {
    await Deno.mkdir(dir, { recursive: true });
    return await Deno.makeTempFile({ dir, prefix: "stack-", suffix: ".jsonl" });
  }
  return await Deno.makeTempFile({ prefix: "openapi-violations-", suffix: ".jsonl" });
}

/** Throws when a checked gateway wrote a violation to `file`. */
async function assertNoViolations(file: string): Promise<void> {
  const text = await Deno.readTextFile(file).catch(() => "");
  const lines = text.split("\n").filter((l) => l !== "");
  if (lines.length === 0) return;
  throw new Error(
    `${lines.length} gateway answers disagree with gen/openapi/openapi.json:\n` +
      lines.slice(0, 20).join("\n"),
  );
}

function randomSecret(): string {
  return Array.from(
    crypto.getRandomValues(new Uint8Array(24)),
    (b) => b.toString(16).padStart(2, "0"),
  )
    .join("");
}

/** Ports handed out by {@link freePort} in this process. */
const given = new Set<number>();

/**
 * A loopback port free now and not handed out before in this process: the system may offer a
 * port again as soon as it is closed, and two settings given one port fail a start.
 */
export function freePort(): number {
  for (;;) {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const port = (listener.addr as Deno.NetAddr).port;
    listener.close();
    if (given.has(port)) continue;
    given.add(port);
    return port;
  }
}

/** Starts a database, the services and the gateway, each on its own fixed free ports. */
export async function startStack(options: StackOptions = {}): Promise<Stack> {
  // Free ports are found by binding port 0 and closing it; another test process can take one
  // before our component binds it (seen: AddrInUse). Then the start is tried again on new ports.
  for (let attempt = 1;; attempt++) {
    try {
      return await startStackOnce(options);
    } catch (error) {
      if (attempt >= 3 || !String(error).includes("AddrInUse")) throw error;
    }
  }
}

async function startStackOnce(options: StackOptions): Promise<Stack> {
  const db: TestDatabase = await createTestDatabase();
  const jwtSecret = randomSecret();
  const common = {
    AUTH_JWT_SECRET: jwtSecret,
    CLIENT_SECRET_HMAC_KEY: randomSecret(),
    HOST: "127.0.0.1",
    LOG_LEVEL: "debug",
    // The tests push thousands of requests a second with one token: no rate limit unless a test
    // sets one (tests/limits_test.ts).
    RATE_LIMIT_PER_SECOND: "0",
    OAUTH_KEPT_PER_MINUTE: "0",
    ...options.env,
  };
  const serviceDb = options.serviceDatabaseUrl?.(db.url) ?? db.url;
  const checked = options.checkResponses ?? true;
  const violations = checked ? await violationsFile() : "";
  // The checked gateway writes its findings (and nothing else) beside the violations file.
  const gatewayFlags = [
    ...(options.denoFlags ?? []),
    ...(checked ? [`--allow-write=${violations},${violations}.counts`] : []),
  ];
  const ports = {
    oauthGrpc: freePort(),
    oauthHttp: freePort(),
    coreGrpc: freePort(),
    coreHttp: freePort(),
    tokenGrpc: freePort(),
    tokenHttp: freePort(),
    gateway: freePort(),
  };
  const oauthHttp = `http://127.0.0.1:${ports.oauthHttp}`;
  const coreHttp = `http://127.0.0.1:${ports.coreHttp}`;
  const tokenHttp = `http://127.0.0.1:${ports.tokenHttp}`;
  const gatewayUrl = `http://127.0.0.1:${ports.gateway}`;
  const components = {
    oauth: {
      entry: "services/oauth/main.ts",
      env: {
        ...common,
        DATABASE_URL: serviceDb,
        GRPC_PORT: `${ports.oauthGrpc}`,
        HTTP_PORT: `${ports.oauthHttp}`,
        ...options.processEnv?.oauth,
      },
    },
    core: {
      entry: "services/core/main.ts",
      env: {
        ...common,
        DATABASE_URL: serviceDb,
        GRPC_PORT: `${ports.coreGrpc}`,
        HTTP_PORT: `${ports.coreHttp}`,
        ...options.processEnv?.core,
      },
    },
    token: {
      entry: "services/token/main.ts",
      env: {
        ...common,
        DATABASE_URL: serviceDb,
        GRPC_PORT: `${ports.tokenGrpc}`,
        HTTP_PORT: `${ports.tokenHttp}`,
        ISSUER_URL: gatewayUrl,
        OAUTH_REGISTRY_GRPC_URL: `http://127.0.0.1:${ports.oauthGrpc}`,
        TOKEN_KEY_ENCRYPTION_KEY: randomSecret(),
        ...options.processEnv?.token,
      },
    },
    gateway: {
      entry: checked ? "lib/testing/checked_gateway_main.ts" : "gateway/main.ts",
      env: {
        ...common,
        ...(checked ? { OPENAPI_VIOLATIONS_FILE: violations } : {}),
        GATEWAY_PORT: `${ports.gateway}`,
        // Listened on only, for the gateway's caches (gateway/introspection_cache.ts, ...).
        DATABASE_URL: serviceDb,
        OAUTH_REGISTRY_GRPC_URL: `http://127.0.0.1:${ports.oauthGrpc}`,
        CORE_GRPC_URL: `http://127.0.0.1:${ports.coreGrpc}`,
        TOKEN_SERVICE_GRPC_URL: `http://127.0.0.1:${ports.tokenGrpc}`,
        ISSUER_URL: gatewayUrl,
        ...options.processEnv?.gateway,
      },
    },
  };
  const keep = options.keepLines ?? Infinity;
  const procs = {
    oauth: spawn(components.oauth.entry, components.oauth.env, options.denoFlags, keep),
    core: spawn(components.core.entry, components.core.env, options.denoFlags, keep),
    token: spawn(components.token.entry, components.token.env, options.denoFlags, keep),
    gateway: spawn(components.gateway.entry, components.gateway.env, gatewayFlags, keep),
  };
  // Ready, not merely listening (any LOG_LEVEL); a process that exits fails the start at once.
  let started = false;
  const exits = Object.entries(procs).map(([name, p]) =>
    p.child.status.then(() => {
      if (!started) throw new Error(`${name} exited during start-up:\n${p.lines.join("\n")}`);
    })
  );
  for (const exit of exits) exit.catch(() => {});
  const stopProc = async (p: Proc) => {
    try {
      p.child.kill("SIGTERM");
    } catch { /* gone */ }
    await p.child.status;
  };
  try {
    await Promise.race([
      Promise.all([
        waitReady(oauthHttp),
        waitReady(coreHttp),
        waitReady(tokenHttp),
        waitReady(gatewayUrl),
      ]),
      ...exits,
    ]);
  } catch (error) {
    await Promise.all(Object.values(procs).map(stopProc));
    await db.drop();
    throw error;
  }
  started = true;
  return {
    gatewayUrl,
    oauthGrpc: `127.0.0.1:${ports.oauthGrpc}`,
    oauthHttp,
    coreGrpc: `127.0.0.1:${ports.coreGrpc}`,
    coreHttp,
    tokenGrpc: `127.0.0.1:${ports.tokenGrpc}`,
    tokenHttp,
    databaseUrl: db.url,
    jwtSecret,
    procs,
    token: (claims) => signToken(jwtSecret, claims),
    async kill(name) {
      try {
        procs[name].child.kill("SIGKILL");
      } catch { /* gone */ }
      await procs[name].child.status;
    },
    respawn(name) {
      const flags = name === "gateway" ? gatewayFlags : options.denoFlags;
      procs[name] = spawn(components[name].entry, components[name].env, flags, keep);
      return procs[name];
    },
    envOf: (name) => ({ ...components[name].env }),
    async stop() {
      await Promise.all(Object.values(procs).map(stopProc));
      await db.drop();
      if (!checked) return;
      try {
        await assertNoViolations(violations);
      } finally {
        if (Deno.env.get("OPENAPI_REPORT_DIR") === undefined) {
          await Deno.remove(violations).catch(() => {});
          await Deno.remove(`${violations}.counts`).catch(() => {});
        }
      }
    },
  };
}
