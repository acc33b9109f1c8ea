/**
 * What the hostile-input suites (tests/hostile_input_test.ts over HTTP, and
 * tests/hostile_input_grpc_test.ts over gRPC) share: a digest of every row the services store (to
 * prove that rejected input wrote nothing), liveness checks of the processes, and fast-check
 * generators of values one past each documented limit (spec section 8 and the core area's
 * decisions in the README), otherwise valid so that only the limit is broken.
 *
 * @module
 */

import fc from "fast-check";
import postgres from "postgres";
import { numberEvents } from "../audit/mod.ts";
import type { Stack } from "./stack.ts";

/** A postgres.js client of the stack's database. */
export type Sql = ReturnType<typeof postgres>;

/** Opens a small client on the stack's database. */
export function openDatabase(stack: Stack): Sql {
  return postgres(stack.databaseUrl, { max: 2, onnotice: () => {} });
}

/**
 * A digest of every row of every table in the services' schemas (`oauth`, `core`): row counts and
 * an md5 of the rows' text per table. Equal digests mean nothing was inserted, updated or deleted.
 * What has committed is numbered first (lib/audit's numberEvents: upkeep that the services also
 * run in the background, not a write of a request), so that numbering never tells two digests
 * apart.
 */
export async function dbDigest(sql: Sql): Promise<string> {
  for (const schema of ["oauth", "core"]) await numberEvents(sql, schema);
  const tables = await sql<{ schema: string; name: string }[]>`
    select table_schema as schema, table_name as name from information_schema.tables
    where table_schema in ('oauth', 'core') and table_type = 'BASE TABLE'
    order by 1, 2`;
  if (tables.length === 0) throw new Error("no tables in the oauth and core schemas");
  const parts = tables.map(({ schema, name }) => {
    return `select '${schema}.${name}' as t, count(*)::int as n,
      coalesce(md5(string_agg(r::text, '|' order by r::text)), '') as h from "${schema}"."${name}" r`;
  });
  const rows = await sql.unsafe<{ t: string; n: number; h: string }[]>(parts.join(" union all "));
  return rows.map((r) => `${r.t}:${r.n}:${r.h}`).sort().join("\n");
}

/** Whether a child process is still running (its status has not settled). */
export async function isRunning(child: Deno.ChildProcess): Promise<boolean> {
  // A timer, not a resolved promise: a status that has settled must win the race.
  let timer: ReturnType<typeof setTimeout> | undefined;
  const exited = await Promise.race([
    child.status.then(() => true),
    new Promise<boolean>((r) => timer = setTimeout(() => r(false), 10)),
  ]);
  clearTimeout(timer);
  return !exited;
}

/** Asserts that every process of the stack runs and that the gateway's `/readyz` answers 200. */
export async function assertStackAlive(stack: Stack): Promise<void> {
  for (const [name, proc] of Object.entries(stack.procs)) {
    if (!(await isRunning(proc.child))) {
      throw new Error(`${name} exited:\n${proc.lines.slice(-20).join("\n")}`);
    }
  }
  const res = await fetch(`${stack.gatewayUrl}/readyz`);
  const text = await res.text();
  if (res.status !== 200) throw new Error(`/readyz answered ${res.status}: ${text}`);
}

/** Log lines of the services that report an RPC answered INTERNAL or UNKNOWN. */
export function serverFaults(stack: Stack): string[] {
  const out: string[] = [];
  for (const name of ["oauth", "core", "gateway"] as const) {
    for (const line of stack.procs[name].lines) {
      let entry: Record<string, unknown>;
      try {
        entry = JSON.parse(line);
      } catch {
        // Not a log line: a crash report or a panic is a fault too.
        if (/panic|uncaught|error/i.test(line)) out.push(`${name}: ${line.slice(0, 2000)}`);
        continue;
      }
      const code = String(entry.code ?? "");
      const status = Number(entry.status ?? 0);
      if (
        code === "internal" || code === "unknown" || code === "Internal" ||
        code === "Unknown" || status >= 500 || entry.level === "error"
      ) {
        out.push(`${name}: ${line.slice(0, 2000)}`);
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Values one past a limit.

/** Characters of a valid name: letters, digits, a space, accents, CJK and an astral emoji. */
const nameAlphabet = ["a", "Z", "7", " ", "-", "é", "中", "😀", "ß", "_"];

/**
 * A string of exactly `n` code points without control characters, made by repeating a random
 * pattern of letters, accents, CJK and emoji (so code points and UTF-16 units differ).
 */
export function codePoints(n: number, alphabet: readonly string[] = nameAlphabet) {
  return fc.array(fc.constantFrom(...alphabet), { minLength: 1, maxLength: 8 }).map((pattern) => {
    // Starts and ends with a letter, so that no trimming rule can apply.
    const out: string[] = ["a"];
    for (let i = 1; i < n; i++) out.push(pattern[i % pattern.length]!);
    if (n > 1) out[n - 1] = "z";
    return out.slice(0, n).join("");
  });
}

/** A multi-line text of exactly `n` code points (line breaks and tabs allowed). */
export function multilineCodePoints(n: number) {
  return codePoints(n, [...nameAlphabet, "\n", "\t", "\r"]);
}

const lower = "abcdefghijklmnopqrstuvwxyz";

/** Random lower-case letters and digits, exactly `n` of them. */
function alnum(n: number) {
  return fc.array(fc.constantFrom(...lower + "0123456789"), { minLength: n, maxLength: n })
    .map((a) => a.join(""));
}

/** An `https` URI of exactly `n` characters. */
export function httpsUri(n: number) {
  const prefix = "https://example.com/";
  return alnum(Math.min(16, n - prefix.length)).map((seed) => {
    const fill = n - prefix.length;
    return prefix + seed.repeat(Math.ceil(fill / seed.length)).slice(0, fill);
  });
}

/** A hostname of exactly `n` characters (labels of at most 63 letters). */
export function hostname(n: number) {
  return fc.constantFrom(...lower).map((c) => {
    const labels: string[] = [];
    let left = n;
    while (left > 0) {
      const size = Math.min(63, left);
      labels.push(c.repeat(size));
      left -= size + 1;
    }
    let host = labels.join(".");
    if (host.length > n) host = host.slice(0, n);
    if (host.endsWith(".")) host = host.slice(0, -1) + c;
    return host;
  });
}

/** An `https` origin of exactly `n` characters. */
export function httpsOrigin(n: number) {
  return hostname(n - "https://".length).map((h) => `https://${h}`);
}

/** An email address of exactly `n` characters. */
export function email(n: number) {
  const domain = "@example.com";
  return alnum(1).map((c) => c.repeat(n - domain.length) + domain);
}

/** A scope of exactly `n` printable ASCII characters (no space, `"` or `\`). */
export function scope(n: number) {
  return fc.constantFrom("openid", "email", "https://example.com/scope", "a:b").map((s) =>
    s.repeat(Math.ceil(n / s.length)).slice(0, n)
  );
}

/** Lower-case dot-separated words of exactly `n` characters (a resource type). */
export function dottedWords(n: number) {
  return alnum(8).map((s) => {
    const word = "r" + s.replace(/[0-9]/g, "x");
    let out = word;
    while (out.length < n) out += "." + word;
    out = out.slice(0, n);
    return out.endsWith(".") ? out.slice(0, -1) + "z" : out;
  });
}

/** `count` distinct values of the generator `make(i)`, as a list. */
export function distinct<T>(count: number, make: (i: number) => T) {
  return fc.nat(1_000_000).map((seed) => Array.from({ length: count }, (_, i) => make(seed + i)));
}

/** One value past a limit: the body field it goes in (proto name), and the value. */
export interface OverLimit {
  /** The field of the request body (proto name), e.g. `redirect_uris`. */
  field: string;
  /** The value, one past the limit. */
  value: fc.Arbitrary<unknown>;
}

/** Values one past every limit of a body field, by body message type name. */
export const overLimits: Record<string, OverLimit[]> = {
  "registry.oauth.v1.OAuthConfig": [
    { field: "application_name", value: codePoints(121) },
    { field: "support_email", value: email(321) },
    { field: "logo_uri", value: httpsUri(2049) },
    { field: "homepage_uri", value: httpsUri(2049) },
    { field: "privacy_policy_uri", value: httpsUri(2049) },
    { field: "terms_of_service_uri", value: httpsUri(2049) },
    { field: "authorized_domains", value: hostname(254).map((h) => [h]) },
    {
      field: "authorized_domains",
      value: distinct(101, (i) => `d${i}.example.com`),
    },
    { field: "secret_max_lifetime_seconds", value: fc.constantFrom(315_360_001, -1) },
    {
      field: "scopes",
      value: fc.constant(
        Array.from({ length: 101 }, (_, i) => ({ name: `s${i}`, description: "d" })),
      ),
    },
    { field: "scopes", value: codePoints(201).map((d) => [{ name: "s", description: d }]) },
  ],
  "registry.oauth.v1.CreateClientSecretRequest": [
    { field: "lifetime_seconds", value: fc.constantFrom(0, -1) },
  ],
  "registry.oauth.v1.Client": [
    { field: "name", value: codePoints(121) },
    { field: "redirect_uris", value: httpsUri(2049).map((u) => [u]) },
    { field: "redirect_uris", value: distinct(101, (i) => `https://example.com/cb${i}`) },
    { field: "javascript_origins", value: httpsOrigin(2049).map((o) => [o]) },
    { field: "javascript_origins", value: distinct(101, (i) => `https://o${i}.example.com`) },
  ],
  "registry.oauth.v1.ConsentInstallationRequest": [
    { field: "scopes", value: distinct(101, (i) => `scope.${i}`) },
    { field: "scopes", value: scope(513).map((s) => [s]) },
  ],
  "registry.core.v1.Role": [
    { field: "name", value: codePoints(201) },
    { field: "description", value: multilineCodePoints(10_001) },
    { field: "resource_type", value: dottedWords(256) },
    { field: "permissions", value: distinct(101, (i) => `units.action${i}`) },
    { field: "permissions", value: dottedWords(256).map((p) => [p]) },
  ],
  "registry.core.v1.Journey": [
    { field: "name", value: codePoints(201) },
    { field: "description", value: multilineCodePoints(10_001) },
    { field: "owner", value: codePoints(256) },
  ],
  "registry.core.v1.Unit": [
    { field: "title", value: codePoints(201) },
    { field: "assignee", value: codePoints(256) },
    { field: "description", value: multilineCodePoints(10_001) },
  ],
};
