/**
 * A throwaway Postgres database for a test file: created in the server named by DATABASE_URL and
 * dropped afterwards; without DATABASE_URL, a Postgres container through testcontainers when a
 * Docker engine answers (the image `POSTGRES_IMAGE`, by default `postgres:16-alpine`); otherwise
 * the tests stop with a one-line message naming the two options.
 *
 * @module
 */

import postgres from "postgres";
import { heartbeatPrefix, propagationMs, type Sql } from "../db/mod.ts";
import { dockerProblem, postgresImage } from "./containers.ts";
import { until } from "./http.ts";

/** A database that exists until `drop()`. */
export interface TestDatabase {
  /** Its connection URL. */
  url: string;
  /** Drops it (and stops its container, if any). */
  drop(): Promise<void>;
}

const noDatabase = "No Postgres for the tests: set DATABASE_URL " +
  "(e.g. postgres://postgres@127.0.0.1:5432/postgres) or start a Docker engine for testcontainers";

/**
 * Why no test database can be made here, in one line, or undefined when one can: DATABASE_URL
 * answers, or (without it) a Docker engine does. Checked once before a whole run, so that a
 * machine without Postgres gets one line instead of every database test failing.
 */
export async function databaseProblem(): Promise<string | undefined> {
  const base = Deno.env.get("DATABASE_URL");
  if (!base) {
    const docker = await dockerProblem();
    return docker === undefined ? undefined : `${noDatabase} (${docker})`;
  }
  const sql = postgres(base, { max: 1, connect_timeout: 5, onnotice: () => {} });
  try {
    await sql`select 1`;
    return undefined;
  } catch (error) {
    return `${noDatabase} (DATABASE_URL did not answer: ${(error as Error).message})`;
  } finally {
    await sql.end({ timeout: 1 });
  }
}

/** Creates a fresh, empty database. */
export async function createTestDatabase(): Promise<TestDatabase> {
  const base = Deno.env.get("DATABASE_URL");
  if (base) return await createIn(base, async () => {});
  let container: { getConnectionUri(): string; stop(): Promise<unknown> };
  try {
    const { PostgreSqlContainer } = await import("@testcontainers/postgresql");
    container = await new PostgreSqlContainer(postgresImage).start();
  } catch (error) {
    throw new Error(noDatabase, { cause: error });
  }
  return await createIn(container.getConnectionUri(), async () => {
    await container.stop();
  });
}

async function createIn(base: string, after: () => Promise<void>): Promise<TestDatabase> {
  const name = `test_${crypto.randomUUID().replaceAll("-", "").slice(0, 16)}`;
  const admin = postgres(base, { max: 1, onnotice: () => {} });
  try {
    await admin`create database ${admin(name)}`;
  } catch (error) {
    await admin.end();
    throw new Error(`${noDatabase} (DATABASE_URL did not answer: ${(error as Error).message})`);
  }
  const url = new URL(base);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      await admin`drop database if exists ${admin(name)} with (force)`;
      await admin.end();
      await after();
    },
  };
}

/**
 * Resolves once a change committed before the call has reached every replica's caches (the change
 * feeds' promise, lib/db/change_feed.ts): what a test waits for between changing something in the
 * registry and expecting the token service to act on it. Not a guess at timing: a cache that has
 * not applied a change by then does not serve at all.
 */
export function propagated(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, propagationMs));
}

/** What a test hears on a Postgres channel (see {@link listenTo}). */
export interface Heard {
  /**
   * The payloads heard since the last flush (change feeds' heartbeats left out), once a marker
   * this sends on the channel has come back: Postgres delivers notifications in commit order, so
   * every one sent by a transaction committed before the call is among them. Not a wait of a
   * guessed length.
   */
  flush(): Promise<string[]>;
  /** Stops listening. */
  close(): Promise<void>;
}

/** Listens to `channel` on `sql` (its own connection), to check what a change notified. */
export async function listenTo(sql: postgres.Sql, channel: string): Promise<Heard> {
  let heard: string[] = [];
  const markers = new Map<string, () => void>();
  const prefix = `~test-marker:${crypto.randomUUID()}:`;
  const listener = await sql.listen(channel, (payload) => {
    if (payload.startsWith(prefix)) markers.get(payload)?.();
    // A change feed's follower (lib/db/change_feed.ts) on the channel sends heartbeats, every
    // 200 ms: its own, not a change's.
    else if (!payload.startsWith(heartbeatPrefix)) heard.push(payload);
  });
  let n = 0;
  const heardSoFar = {
    async flush() {
      const marker = `${prefix}${n++}`;
      const back = new Promise<void>((resolve) => markers.set(marker, resolve));
      await sql`select pg_notify(${channel}, ${marker})`;
      await back;
      markers.delete(marker);
      const out = heard;
      heard = [];
      return out;
    },
    close: () => listener.unlisten(),
  };
  // A new listener starts reading Postgres' notification queue at a point other listeners have
  // reached, which may lie before notifications of transactions that committed before its LISTEN
  // (async.c: "we might get a few more"): a change made just before listening would be heard as
  // if made after. Such notifications come before this first marker, and are dropped.
  await heardSoFar.flush();
  return heardSoFar;
}

/** Whether at least `sessions` sessions of `sql`'s database wait for a lock. */
async function someoneWaitsForLock(sql: Sql, sessions = 1): Promise<boolean> {
  const [row] = await sql<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity
    where datname = current_database() and wait_event_type = 'Lock'`;
  return row!.n >= sessions;
}

/**
 * Resolves once `sessions` (default one) sessions of `sql`'s database wait for a lock: calls the
 * test started have queued behind a row or table the test holds. Bounded (30 s) only so that a
 * call that never queues fails the test; a busy machine waits.
 */
export async function untilWaitingForLock(sql: Sql, what: string, sessions = 1): Promise<void> {
  await until(() => someoneWaitsForLock(sql, sessions), 30_000, what);
}

/**
 * Whether `call` queues behind a lock (as {@link untilWaitingForLock} sees it) or is answered
 * without waiting: whichever happens first, polled, so neither outcome rests on timing.
 */
export async function queuedOrAnswered(
  sql: Sql,
  call: Promise<unknown>,
  what: string,
): Promise<"queued" | "answered"> {
  let answered = false;
  void call.finally(() => (answered = true)).catch(() => {});
  let queued = false;
  await until(async () => (queued = await someoneWaitsForLock(sql)) || answered, 30_000, what);
  return queued ? "queued" : "answered";
}
