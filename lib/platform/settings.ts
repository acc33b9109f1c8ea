/**
 * Every setting (environment variable) any component or `deno task start` reads, declared once:
 * who reads it, its default and what it means. From this list come the README's configuration
 * table (`deno task docs` writes it, tests/settings_test.ts fails when it differs) and the
 * environment part of `deno task start --help`; `deno task start` takes its own defaults from it,
 * and {@link assertDeclared} keeps a component from reading a setting that is not here.
 *
 * The components parse their settings with valibot schemas next to the code that uses them
 * (gateway/main.ts, lib/service/service.ts and each service's main.ts); tests/settings_test.ts
 * checks that each schema reads exactly the settings declared for its component, and that each
 * schema's default is the one written here.
 *
 * This module imports nothing: the components' config code and the tools both read it.
 *
 * @module
 */

/** Who reads a setting: a component's process, or `deno task start` itself (tools/start.ts). */
export type Reader = "oauth-registry" | "core" | "token-service" | "gateway" | "start";

/** The components, in the order the README names them. */
export const components = ["oauth-registry", "core", "token-service", "gateway"] as const;

/** The three services (the components but the gateway). */
const services = ["oauth-registry", "core", "token-service"] as const;

/** One setting. Texts are Markdown, as the README shows them; no `|` in any. */
export interface Setting {
  /** Who reads it ("start": `deno task start` itself; it passes every variable on as well). */
  readonly usedBy: readonly Reader[];
  /** Its default, in words when it is not one value (the README's Default column). */
  readonly default: string;
  /** What it is (the README's Meaning column). */
  readonly meaning: string;
  /** Its line in `deno task start --help`; settings without one are not listed there. */
  readonly help?: string;
  /** What `deno task start` uses when it is unset or empty (only for settings it reads). */
  readonly startDefault?: string;
}

const all = [...components] as const;
const secretDefault = "generated into the data folder (`./.data`) by `deno task start`";

/** The settings, in the README's order. */
export const settings = {
  DATABASE_URL: {
    usedBy: [...all, "start"],
    default: "embedded PGlite (start); required (services); unset (gateway)",
    meaning: "Postgres URL; each service owns one schema (`oauth`, `core`, `token`) and reads no " +
      "other; the gateway reads no table, and only listens to the registry's, the core's and the " +
      "token service's change notifications, for its introspection and read caches (unset: none)",
    help: "a Postgres server to use (else the embedded database, one process)",
  },
  AUTH_JWT_SECRET: {
    usedBy: [...all, "start"],
    default: secretDefault,
    meaning: "HS256 secret of the platform tokens, at least 32 characters; to change it, move " +
      "the old one to `AUTH_JWT_PREVIOUS_SECRETS` (see Changing the server's own keys)",
    help: "the platform tokens' secret (else generated into the data folder)",
  },
  AUTH_JWT_PREVIOUS_SECRETS: {
    usedBy: all,
    default: "unset",
    meaning: "earlier `AUTH_JWT_SECRET`s, separated by commas: a token signed with one still " +
      "verifies (tokens are signed with `AUTH_JWT_SECRET` only)",
  },
  AUTH_JWKS_URL: {
    usedBy: all,
    default: "unset",
    meaning: "JWKS URL for RS/PS/ES/EdDSA tokens (instead of `AUTH_JWT_SECRET`)",
  },
  AUTH_ISSUER: {
    usedBy: all,
    default: "unset",
    meaning: "required `iss` of the platform tokens when set",
  },
  AUTH_AUDIENCE: {
    usedBy: all,
    default: "unset",
    meaning: "required `aud` of the platform tokens when set",
  },
  CLIENT_SECRET_HMAC_KEY: {
    usedBy: ["oauth-registry", "start"],
    default: secretDefault,
    meaning: "key of the client-secret hashes, at least 32 characters; to change it, move the " +
      "old one to `CLIENT_SECRET_HMAC_PREVIOUS_KEYS` (see Changing the server's own keys)",
    help: "the client-secret hash key (else generated into the data folder)",
  },
  CLIENT_SECRET_HMAC_PREVIOUS_KEYS: {
    usedBy: ["oauth-registry"],
    default: "unset",
    meaning: "earlier `CLIENT_SECRET_HMAC_KEY`s, separated by commas: a secret hashed under one " +
      "still verifies, and is hashed again under the current key when it does",
  },
  TOKEN_KEY_ENCRYPTION_KEY: {
    usedBy: ["token-service", "start"],
    default: secretDefault,
    meaning: "seals the signing keys' private parts, at least 32 characters; to change it, move " +
      "the old one to `TOKEN_KEY_ENCRYPTION_PREVIOUS_KEYS` (see Changing the server's own keys)",
    help: "the signing keys' sealing key (else generated into the data folder)",
  },
  TOKEN_KEY_ENCRYPTION_PREVIOUS_KEYS: {
    usedBy: ["token-service"],
    default: "unset",
    meaning: "earlier `TOKEN_KEY_ENCRYPTION_KEY`s, separated by commas: a signing key sealed " +
      "under one still opens, and is sealed again under the current one; consent pages and DPoP " +
      "nonces made with one are still taken",
  },
  MAX_SECRETS_PER_CLIENT: {
    usedBy: ["oauth-registry"],
    default: "`10`",
    meaning: "live secrets one client may have at once (twice as many in all, expired ones " +
      "included); creating one more answers 409 `failed_precondition`",
  },
  CLIENT_CACHE_MIB: {
    usedBy: ["oauth-registry"],
    default: "`4` (`0` in the embedded stack)",
    meaning: "memory for the clients GetClient reads, from the memory budget; " +
      "changes reach every replica within a second (the registry's change feed); `0` keeps none",
  },
  UNIT_CACHE_MIB: {
    usedBy: ["core"],
    default: "`4` (`0` in the embedded stack)",
    meaning: "memory for the units GetUnit reads, from the memory budget; changes reach every " +
      "replica within a second (the core area's change feed); `0` keeps none",
  },
  CONFIG_CACHE_ENTRIES: {
    usedBy: ["oauth-registry"],
    default: "`1000` (`0` in the embedded stack)",
    meaning: "project configs kept in memory for consent (its audience rule and application " +
      "name), each counted in the memory budget; `0` keeps none and listens to nothing",
  },
  MAX_KEYS_PER_CLIENT: {
    usedBy: ["oauth-registry"],
    default: "`10`",
    meaning: "live keys (`private_key_jwt`) one client may have at once (twice as many in all, " +
      "expired ones included); adding one more answers 409 `failed_precondition`",
  },
  GRPC_PORT: {
    usedBy: services,
    default: "`50051` oauth-registry, `50052` core, `50053` token-service",
    meaning: "gRPC port",
  },
  HTTP_PORT: {
    usedBy: services,
    default: "`8081` oauth-registry, `8082` core, `8083` token-service",
    meaning: "Connect + `/healthz` `/readyz` `/metrics` port",
  },
  GATEWAY_PORT: {
    usedBy: ["gateway", "start"],
    default: "`8080`",
    meaning: "gateway HTTP port",
    help: "the gateway's HTTP port",
    startDefault: "8080",
  },
  OAUTH_GRPC_PORT: {
    usedBy: ["start"],
    default: "`50051`",
    meaning: "oauth-registry's `GRPC_PORT` under `deno task start`",
    help: "oauth-registry's gRPC port",
    startDefault: "50051",
  },
  OAUTH_HTTP_PORT: {
    usedBy: ["start"],
    default: "`8081`",
    meaning: "oauth-registry's `HTTP_PORT` under `deno task start`",
    help: "oauth-registry's Connect port",
    startDefault: "8081",
  },
  CORE_GRPC_PORT: {
    usedBy: ["start"],
    default: "`50052`",
    meaning: "core's `GRPC_PORT` under `deno task start`",
    help: "core's gRPC port",
    startDefault: "50052",
  },
  CORE_HTTP_PORT: {
    usedBy: ["start"],
    default: "`8082`",
    meaning: "core's `HTTP_PORT` under `deno task start`",
    help: "core's Connect port",
    startDefault: "8082",
  },
  TOKEN_GRPC_PORT: {
    usedBy: ["start"],
    default: "`50053`",
    meaning: "token-service's `GRPC_PORT` under `deno task start`",
    help: "token-service's gRPC port",
    startDefault: "50053",
  },
  TOKEN_HTTP_PORT: {
    usedBy: ["start"],
    default: "`8083`",
    meaning: "token-service's `HTTP_PORT` under `deno task start`",
    help: "token-service's Connect port",
    startDefault: "8083",
  },
  OAUTH_REGISTRY_GRPC_URL: {
    usedBy: ["token-service", "gateway"],
    default: "`http://127.0.0.1:50051`",
    meaning: "oauth-registry's gRPC port (h2c), which the gateway and the token service call",
  },
  CORE_GRPC_URL: {
    usedBy: ["gateway"],
    default: "`http://127.0.0.1:50052`",
    meaning: "core's gRPC port (h2c)",
  },
  TOKEN_SERVICE_GRPC_URL: {
    usedBy: ["gateway"],
    default: "`http://127.0.0.1:50053`",
    meaning: "token-service's gRPC port (h2c)",
  },
  ISSUER_URL: {
    usedBy: ["token-service", "gateway", "start"],
    default: "`http://127.0.0.1:<GATEWAY_PORT>` (gateway, start); `http://127.0.0.1:8080` " +
      "(token-service)",
    meaning: "the authorization server's issuer: the gateway's public base URL, an http(s) " +
      "origin (no path, query or fragment: the metadata is served at its root, RFC 8414 3); " +
      "the same on the gateway and the token service (a gateway on another port than 8080 " +
      "without it warns at start: the token service's default would differ)",
    help: "the authorization server's issuer (the gateway's URL)",
  },
  LOGIN_URL: {
    usedBy: ["gateway", "start"],
    default: "unset; `deno task start`: its development sign-in page (`<ISSUER_URL>/dev/sign-in`)",
    meaning: "where the authorization endpoint sends a user without a session (with `return_to`)",
    help: "where a user who is not signed in is sent (the dev sign-in page)",
  },
  CLIENT_ADDRESS_HEADER: {
    usedBy: ["gateway"],
    default: "unset: the connection's peer address; the manifests: `X-Real-IP`",
    meaning: "the header a trusted proxy names the client's address in, for the device page's " +
      "guessing limit (only a proxy that overwrites it may stand in front)",
    help: "the proxy's header with the client's address",
  },
  HOST: {
    usedBy: all,
    default: "`0.0.0.0`",
    meaning: "listen address (`deno task start` sets it to `START_HOST`)",
  },
  START_HOST: {
    usedBy: ["start"],
    default: "`127.0.0.1`",
    meaning: "the listen address of every component under `deno task start`",
    help: "the listen address",
    startDefault: "127.0.0.1",
  },
  START_DATA_DIR: {
    usedBy: ["start"],
    default: "`./.data`",
    meaning: "where `deno task start` keeps PGlite and the development secrets (a relative path " +
      "is taken from the folder `deno task` is run in)",
    help: "the data folder: PGlite's files, the generated secrets",
    startDefault: "./.data",
  },
  START_READY_TIMEOUT_S: {
    usedBy: ["start"],
    default: "`60`",
    meaning: "how long `deno task start` waits before saying which component is not ready, and why",
    help: "seconds to wait for readiness before saying what is not ready",
    startDefault: "60",
  },
  RPC_TIMEOUT_MS: {
    usedBy: ["token-service", "gateway"],
    default: "`10000`",
    meaning: "deadline of every RPC the gateway makes, and of the token service's calls to " +
      "oauth-registry",
  },
  IDEMPOTENCY_TTL_SECONDS: {
    usedBy: ["oauth-registry", "core"],
    default: "`86400` (24 h)",
    meaning: "how long an `Idempotency-Key` is remembered (see Idempotency)",
  },
  AUDIT_RETENTION_DAYS: {
    usedBy: ["oauth-registry", "core", "token-service"],
    default: "`400`",
    meaning: "how long audit events are kept (pruned in the background, 1,000 at a time)",
  },
  AUDIT_MAX_WATCHERS: {
    usedBy: ["oauth-registry", "core", "token-service"],
    default: "`100`",
    meaning: "most `WatchEvents` streams at once per process, a quarter of them for one " +
      "project or space (RESOURCE_EXHAUSTED beyond)",
  },
  RATE_LIMIT_PER_SECOND: {
    usedBy: ["gateway"],
    default: "`100`",
    meaning: "requests per second per caller (`sub`) and replica; `0` turns it off",
  },
  RATE_LIMIT_BURST: {
    usedBy: ["gateway"],
    default: "`200`",
    meaning: "requests a caller may make at once (token bucket size)",
  },
  OAUTH_KEPT_PER_MINUTE: {
    usedBy: ["gateway"],
    default: "`60`",
    meaning:
      "device authorization and PAR requests without client credentials (each keeps a row for " +
      "minutes) per minute per client address (an IPv6 one by its /64) and replica, at most " +
      "that many at once; beyond, 429 `temporarily_unavailable`; `0` turns it off",
  },
  DB_POOL_MAX: {
    usedBy: services,
    default: "`10` (`1` in the embedded stack)",
    meaning: "connections per process",
  },
  DB_STATEMENT_TIMEOUT_MS: {
    usedBy: services,
    default: "`10000` (`0` in the embedded stack)",
    meaning: "Postgres ends a statement running, or a transaction left idle, this long " +
      "(the call answers 504 DEADLINE_EXCEEDED; migrations are not bounded); `0`: never",
  },
  SHUTDOWN_DELAY_MS: {
    usedBy: all,
    default: "`0` (`5000` in Kubernetes)",
    meaning: "on SIGTERM, keep serving, reported not ready, this long before closing the listeners",
  },
  SHUTDOWN_GRACE_MS: {
    usedBy: [...all, "start"],
    default: "`10000`",
    meaning: "the whole drain (delay included) is bounded by this; then the pool closes (up to " +
      "5 s); start kills a component still running 10 s after that",
    help: "a component's drain on Ctrl-C; one still running 10 s later is killed",
  },
  LOG_LEVEL: {
    usedBy: all,
    default: "`info`",
    meaning:
      "`debug`, `info`, `warn`, `error`; logs are JSON lines on stderr, info and debug lines " +
      "written together every 5 ms (warnings and errors at once)",
    help: "debug, info, warn or error (info)",
  },
  MEMORY_BUDGET_MIB: {
    usedBy: all,
    default: "`24`",
    meaning: "bytes of requests and responses a process holds at once (weighted); past it: 503",
  },
  MEMORY_BUDGET_SHARE_PERCENT: {
    usedBy: all,
    default: "`50`",
    meaning:
      "the most of the budget one holder (a connection, a client address, a caller) may hold",
  },
  HTTP_MAX_CONNECTIONS: {
    usedBy: all,
    default: "`4096`",
    meaning: "connections at once per HTTP/1.1 listener; past it the longest-idle one is closed " +
      "(none: 503)",
  },
  HTTP_MAX_CONNECTIONS_PER_ADDRESS: {
    usedBy: all,
    default: "half of `HTTP_MAX_CONNECTIONS` (`2048`)",
    meaning: "connections at once from one client address; past it that address's longest-idle " +
      "one goes",
  },
  HTTP_IDLE_TIMEOUT_MS: {
    usedBy: all,
    default: "`75000`",
    meaning: "an idle keep-alive connection is closed after this (longer than a load balancer's " +
      "60 s)",
  },
  ACCESS_TOKEN_TTL_SECONDS: {
    usedBy: ["token-service"],
    default: "`900`",
    meaning: "access token lifetime",
  },
  SIGNING_KEY_ROTATION_HOURS: {
    usedBy: ["token-service"],
    default: "`720` (30 days)",
    meaning: "how long each signing key signs",
  },
  REFRESH_TOKEN_TTL_SECONDS: {
    usedBy: ["token-service"],
    default: "`2592000` (30 days)",
    meaning: "how long a refresh token may be used (each use gives a new one)",
  },
  REGISTRY_TOKEN: {
    usedBy: ["token-service"],
    default: "unset",
    meaning: "platform token to call the registry with when there is no `AUTH_JWT_SECRET`",
  },
  REGISTRY_CACHE_MIB: {
    usedBy: ["token-service"],
    default: "`4` (`0` in the embedded stack)",
    meaning: "memory for the registry's answers (clients, verified secrets' digests, " +
      "installations, configs), from the memory budget; `0` keeps nothing in memory and listens " +
      "to nothing",
  },
  INTROSPECTION_CACHE_MIB: {
    usedBy: ["gateway"],
    default: "`4`",
    meaning: "memory for active introspections answered again without the token service (with " +
      "`DATABASE_URL`), from the memory budget; `0` keeps nothing and listens to nothing",
  },
  READ_CACHE_MIB: {
    usedBy: ["gateway"],
    default: "`4`",
    meaning: "memory for the answers to `GET` of a client and of a unit, given again without the " +
      "call (with `DATABASE_URL`), for each of the two, from the memory budget; `0` keeps nothing " +
      "and listens to nothing",
  },
  DPOP_NONCE_REQUIRED: {
    usedBy: ["token-service"],
    default: "`false`",
    meaning: "`true`: a DPoP proof must carry a server nonce (RFC 9449 8), else `use_dpop_nonce` " +
      "and a `DPoP-Nonce` header; stateless, valid 5 to 10 minutes",
  },
  REQUIRE_PAR: {
    usedBy: ["token-service", "gateway"],
    default: "`false`",
    meaning: "`true`: every client must push its authorization requests (RFC 9126) and send " +
      "`request_uri` to the authorization endpoint; the metadata says so " +
      "(`require_pushed_authorization_requests`)",
  },
} as const satisfies Record<string, Setting>;

/** The name of a declared setting. */
export type SettingName = keyof typeof settings;

/** The settings `deno task start` reads itself. */
export type StartSettingName = {
  [K in SettingName]: "start" extends (typeof settings)[K]["usedBy"][number] ? K : never;
}[SettingName];

const declared: Readonly<Record<string, Setting>> = settings;

/** Whether `name` is a declared setting. */
export function isDeclared(name: string): name is SettingName {
  return Object.hasOwn(declared, name);
}

/**
 * Throws when a schema of `component` reads a setting that is not declared here: a programming
 * error, which the first test that starts the component shows.
 */
export function assertDeclared(component: string, names: Iterable<string>): void {
  const missing = [...names].filter((name) => !isDeclared(name));
  if (missing.length > 0) {
    throw new Error(
      `${component} reads ${missing.join(", ")}, not declared in lib/platform/settings.ts`,
    );
  }
}

/**
 * What `deno task start` uses for one of its settings: the environment's value, unless unset or
 * empty, else its `startDefault` (undefined when it has none).
 */
export function startSetting(
  name: StartSettingName,
  env: Record<string, string | undefined> = Deno.env.toObject(),
): string | undefined {
  const setting: Setting = settings[name];
  return env[name] || setting.startDefault;
}

/** "oauth-registry, core" for a list of readers: "all" for the four components, "services". */
export function readersText(usedBy: readonly Reader[]): string {
  const has = (r: Reader) => usedBy.includes(r);
  const parts: string[] = [];
  if (components.every(has)) parts.push("all");
  else if (services.every(has)) parts.push("services", ...(has("gateway") ? ["gateway"] : []));
  else parts.push(...components.filter(has));
  if (has("start")) parts.push("start");
  return parts.join(", ");
}

/** The README's configuration table (Markdown, padded as `deno fmt` pads it). */
export function settingsTable(): string {
  const rows = [
    ["Variable", "Used by", "Default", "Meaning"],
    ...Object.entries(declared).map(([name, s]) => [
      `\`${name}\``,
      readersText(s.usedBy),
      s.default,
      s.meaning,
    ]),
  ];
  for (const cell of rows.flat()) {
    if (cell.includes("|") || cell.includes("\n")) {
      throw new Error(`a cell has | or a line: ${cell}`);
    }
  }
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) =>
    `| ${cells.map((cell, i) => cell.padEnd(widths[i]!)).join(" | ")} |`;
  return [
    line(rows[0]!),
    line(widths.map((w) => "-".repeat(w))),
    ...rows.slice(1).map(line),
  ].join("\n");
}

/** The `Environment:` lines of `deno task start --help`: each setting that has a `help`. */
export function startEnvironmentHelp(): string {
  const listed = Object.entries(declared).filter(([, s]) => s.help !== undefined);
  const width = Math.max(...listed.map(([name]) => name.length)) + 2;
  return listed.map(([name, s]) => {
    const fallback = s.startDefault === undefined ? "" : ` (${s.startDefault})`;
    return `  ${name.padEnd(width)}${s.help}${fallback}`;
  }).join("\n");
}
