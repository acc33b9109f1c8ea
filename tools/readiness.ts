/**
 * Whether every component of the local stack answers its readiness check (`GET /readyz` 200), and
 * when one does not, why as far as can be told from outside: its process exited, nothing answers
 * on its port, its database does not answer, or the gateway waits for a backend.
 *
 * @module
 */

import postgres from "postgres";
import type { ComponentState } from "./supervisor.ts";

/** One component to check. */
export interface Probe {
  /** Its name, for messages. */
  name: string;
  /** The base URL of its HTTP port, which answers /readyz. */
  url: string;
  /** The database it needs, when it is one the user runs (not the embedded one). */
  databaseUrl?: string;
  /** The components it waits for (the gateway: the services). */
  dependsOn?: string[];
  /** What became of its processes, when they are supervised. */
  state?: () => ComponentState;
}

/** What one check saw. */
export interface Check {
  /** The probe. */
  probe: Probe;
  /** /readyz answered 200. */
  ready: boolean;
  /** Its status, if it answered. */
  status?: number;
  /** Why nothing answered, if nothing did. */
  error?: string;
}

/** Asks each component's /readyz once. */
export async function checkAll(probes: Probe[]): Promise<Check[]> {
  return await Promise.all(probes.map(async (probe): Promise<Check> => {
    try {
      const res = await fetch(`${probe.url}/readyz`, { signal: AbortSignal.timeout(2000) });
      await res.body?.cancel();
      return { probe, ready: res.ok, status: res.status };
    } catch (error) {
      return { probe, ready: false, error: describeFetchError(error) };
    }
  }));
}

function describeFetchError(error: unknown): string {
  if (error instanceof DOMException && error.name === "TimeoutError") return "no answer in 2 s";
  const message = String((error as Error)?.message ?? error);
  // fetch's message is the whole chain: "error sending request for url (...): client error
  // (Connect): tcp connect error: Connection refused (os error 111)".
  return /connection refused/i.test(message) ? "connection refused" : message;
}

/** Where a database URL points, without its credentials: `host:port/name`. */
export function databaseWhere(databaseUrl: string): string {
  try {
    const url = new URL(databaseUrl);
    return `${url.hostname || "localhost"}:${url.port || "5432"}${url.pathname}`;
  } catch {
    return "DATABASE_URL";
  }
}

/**
 * What is wrong with the database, or undefined if it answers `select 1` within a few seconds:
 * `does not answer (connect ECONNREFUSED 127.0.0.1:5432)`, `answers: database "x" does not exist`.
 */
export async function databaseProblem(databaseUrl: string): Promise<string | undefined> {
  let sql: postgres.Sql | undefined;
  try {
    sql = postgres(databaseUrl, { max: 1, connect_timeout: 3, onnotice: () => {} });
    await sql`select 1`;
    return undefined;
  } catch (error) {
    const { message, code } = error as { message?: string; code?: string };
    // A PostgresError (the server answered) has a SQLSTATE code: five characters.
    return code !== undefined && /^[0-9A-Z]{5}$/.test(code)
      ? `answers: ${message}`
      : `does not answer (${message ?? error})`;
  } finally {
    await sql?.end({ timeout: 1 }).catch(() => {});
  }
}

/**
 * One line naming each component that is not ready and why, those with the same reason together:
 * `oauth-registry and core: the database at 127.0.0.1:5432/postgres does not answer (...); gateway:
 * waits for oauth-registry and core`. The database comes first: it is what a service waits for.
 */
export async function explain(checks: Check[]): Promise<string> {
  const notReady = new Set(checks.filter((c) => !c.ready).map((c) => c.probe.name));
  const databases = new Map<string, Promise<string | undefined>>();
  const reasons = await Promise.all(
    checks.filter((c) => !c.ready).map(async (c) => {
      const { probe } = c;
      if (probe.databaseUrl) {
        const url = probe.databaseUrl;
        if (!databases.has(url)) databases.set(url, databaseProblem(url));
        const problem = await databases.get(url);
        if (problem !== undefined) return `the database at ${databaseWhere(url)} ${problem}`;
      }
      const state = probe.state?.();
      if (state && state.exits > 0) {
        return `its process exits (${state.lastExit}) and is restarted (see its output above)`;
      }
      if (c.error !== undefined) return `nothing answers on ${probe.url} (${c.error})`;
      const waitsFor = (probe.dependsOn ?? []).filter((name) => notReady.has(name));
      if (waitsFor.length > 0) return `waits for ${and(waitsFor)}`;
      return `its /readyz answers ${c.status}`;
    }),
  );
  const groups = new Map<string, string[]>();
  checks.filter((c) => !c.ready).forEach((c, i) => {
    const reason = reasons[i]!;
    groups.set(reason, [...(groups.get(reason) ?? []), c.probe.name]);
  });
  return [...groups].map(([reason, names]) => `${and(names)}: ${reason}`).join("; ");
}

function and(names: string[]): string {
  return names.length < 2 ? names.join("") : `${names.slice(0, -1).join(", ")} and ${names.at(-1)}`;
}
