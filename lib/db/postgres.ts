/**
 * Postgres access shared by the services: one postgres.js pool per process, and forward-only
 * schema migrations applied at start-up.
 *
 * Migrations are files `NNNN_name.sql` (numbered from 0001 with no gaps) in the service's
 * `migrations/` folder. Each is applied in its own transaction that first takes a transaction-level
 * advisory lock named after the schema, so replicas starting together apply each file once. The
 * schema's `schema_migrations` table records every applied file with a checksum; a file changed
 * after it was applied stops the start-up.
 *
 * @module
 */

import { Socket } from "node:net";
import postgres from "postgres";
import { Gauge, type Registry } from "prom-client";
import { isConnectionLost } from "../platform/mod.ts";
import { parseTimestamptz } from "./timestamps.ts";

/** A postgres.js connection pool. */
export type Sql = postgres.Sql;

/** Options of {@link connect}. */
export interface ConnectOptions {
  /** Maximum connections in the pool (default 10). */
  max?: number;
  /** The `application_name` the server sees. */
  applicationName: string;
  /** Milliseconds on a monotonic clock (default `performance.now`); tests set their own. */
  now?: () => number;
  /**
   * Milliseconds after which Postgres ends a statement still running (SQLSTATE 57014) or a
   * session left idle inside a transaction (25P03, its locks released); 0 or unset: never.
   */
  statementTimeoutMs?: number;
}

/**
 * postgres.js 3.4.9 runs an array-types query on each new connection and drops that query's
 * promise (porsager/postgres#1192, #1223): when the connection is lost during it (a database
 * restart, a cut network), the rejection is unhandled, and Deno ends the process on an unhandled
 * rejection. The caller's own query fails or succeeds on its own, and the next connection fetches
 * the types again, so that rejection, and only that one, is dropped: it is recognised by the query
 * postgres.js attaches to the error. Installed once per process, by the first {@link connect}.
 */
function dropLostTypeQueries(): void {
  if (droppingLostTypeQueries) return;
  droppingLostTypeQueries = true;
  globalThis.addEventListener("unhandledrejection", (event) => {
    const query = (event.reason as { query?: unknown } | null)?.query;
    if (typeof query === "string" && /pg_catalog\.pg_type[\s\S]*typarray/.test(query)) {
      event.preventDefault();
    }
  });
}
let droppingLostTypeQueries = false;

/** Opens a pool. Connections are made lazily, on the first query. */
export function connect(url: string, options: ConnectOptions): Sql {
  dropLostTypeQueries();
  const settings = {
    idle_timeout: 60,
    connect_timeout: 5,
    max_lifetime: 30 * 60,
    onnotice: () => {},
    // Sent in the start-up message, so they hold from a connection's first statement: a query
    // whose caller is long gone, or a transaction whose process stopped between two statements,
    // cannot hold a connection or a row lock for longer.
    connection: {
      application_name: options.applicationName,
      ...(options.statementTimeoutMs
        ? {
          statement_timeout: options.statementTimeoutMs,
          idle_in_transaction_session_timeout: options.statementTimeoutMs,
        }
        : {}),
    },
    // Seconds before a closed connection is opened again (each waiting query gets its own attempt,
    // which fails at once while the database is down): postgres.js's default grows to 20 s, which
    // would keep a service unready long after its database is back.
    backoff: () => 0.05 + Math.random() * 0.05,
    // `timestamptz` (and its arrays) is read by a parser of Postgres' own output: postgres.js's
    // `new Date(text)` reads the years 0001 to 0099 as other dates (./timestamps.ts). It is sent
    // as postgres.js sends it. The schemas have no `timestamp` or `date` columns, which keep
    // postgres.js's parser.
    types: {
      timestamptz: {
        to: 1184,
        from: [1184],
        serialize: (x: Date | string | number) =>
          (x instanceof Date ? x : new Date(x)).toISOString(),
        parse: parseTimestamptz,
      },
    },
  };
  let first: Sql | undefined;
  // The other lanes take the first's parsed options, as the connections of one postgres.js pool
  // share theirs: the array types that a connection fetches (to send and read arrays) are then
  // every lane's, as soon as one has them. Each pool opens its sockets itself, to say when one
  // of them is lost.
  return lanes(
    options.max ?? 10,
    (onLost) => {
      // (`socket` is documented by postgres.js but missing from its type definitions.)
      const own = { socket: socketOpener(onLost) };
      if (first === undefined) return first = postgres(url, { ...settings, ...own, max: 1 });
      return postgres({ ...first.options, ...own } as never);
    },
    options.now ?? (() => performance.now()),
  );
}

/** What the lanes use of a postgres.js query, which its type definitions leave out. */
interface RoutedQuery {
  handler: ((query: RoutedQuery) => void) & { debug?: unknown };
  /** The statement's text: a tagged template's strings, or an unsafe query's text. */
  strings: readonly string[] | string;
}

/** How many plain reads a lane may hold in flight while another lane is idle. */
const readDepth = 2;
/**
 * How long (ms) a lane's current query may have run for a read to be sent behind it: a read by id
 * takes tenths of a millisecond, but a page of 100 or a cache's reload more, and a read behind
 * one would wait for all of it.
 */
const readBehindMs = 1;

const plainReads = new WeakMap<readonly string[], boolean>();
const locking = /\bfor\s+(?:no\s+key\s+)?(?:update|share|key\s+share)\b/i;
const reading = (text: string) => /^\s*select\b/i.test(text);

/**
 * Whether a query is a plain read: a `select` that locks no rows, as far as its own text says (a
 * fragment could add a lock; the cost of missing one is only that a read may wait behind it). A
 * tagged template's answer is kept for its strings, which are one array per call site.
 */
function isPlainRead(query: RoutedQuery): boolean {
  const strings = query.strings;
  if (typeof strings === "string") return reading(strings) && !locking.test(strings);
  let known = plainReads.get(strings);
  if (known === undefined) {
    known = reading(strings[0] ?? "") && !strings.some((s) => locking.test(s));
    plainReads.set(strings, known);
  }
  return known;
}

/**
 * A pool of `n` connections made of `n` postgres.js pools of one connection each (lanes), behind
 * one `Sql`.
 *
 * Why: postgres.js 3.4.9 keeps its connections in queues (idle, busy, ...) whose `shift` clears
 * the queue's array only when it empties, while `push` appends, and each query moves its
 * connection between two of them, which first looks for it in the one it leaves (`indexOf`, a scan
 * of the whole array). A queue that never empties grows by a slot a query, and every query scans
 * it: the idle queue while a pool has more connections than queries in flight (a service under a
 * steady load below its pool), the busy one while every connection is busy. Through postgres.js's
 * pool of 10, `select 1` cost 36 us of CPU in the first 50,000 queries and 159 us in the eighth
 * 50,000 (`bench/pool_drift.ts`), and the array holds 8 bytes a query that it never gives back. A
 * pool of one connection never has two in a queue, so each of its queues empties at every shift.
 *
 * A query is sent, when it runs, to the lane with the fewest queries in flight, as postgres.js's
 * pool takes an idle connection first and pipelines on a busy one only when none is idle; among
 * equals, to the first, so that under a light load a few connections do the work and the others
 * are closed after a minute idle (postgres.js's pool took its idle connections in turn, which kept
 * them all open). A plain read (`isPlainRead`) is the exception: it goes to the first lane that
 * holds only reads, fewer than `readDepth`, the current one begun less than `readBehindMs` ago, so
 * that a backend finishing one read finds the next waiting instead of sleeping and being woken for
 * it. A wakeup costs Postgres more than a read by id: GETs of a client through the gateway, whose reads reach the registry one by one, took 0.80
 * to 0.83 backend wakeups and 0.067 to 0.094 ms of Postgres CPU a read, against 0.54 to 0.57 and
 * 0.043 to 0.061 over gRPC; with reads two deep, 0.58 to 0.62 and 0.063 to 0.082
 * (`bench/pg_wakeups.ts`). Anything else waits for its commit to reach the disk, and a query
 * behind it would wait too: with every query sent two deep, creates lost 12%. A lane with an open
 * transaction (or a reserved connection) is chosen only when every lane has one, as its connection answers nothing else until the transaction
 * ends: a query sent there would wait for it, and for good if the transaction waits for that
 * query. Queries are made by the first lane's `Sql` and handed to the chosen lane's handler
 * (`query.handler`, which postgres.js calls when the query runs); helpers that make no query
 * (`json`, identifiers, row lists) are the first lane's, and so are `listen`, which opens a
 * connection of its own, and `options` (whose `max` is 1).
 */
function lanes(n: number, open: (onLost: () => void) => Sql, now: () => number): Sql {
  // Each lane's handler, from a query made and never run.
  const handlerOf = (pool: Sql) => (pool`select 1` as unknown as RoutedQuery).handler;
  /**
   * A new pool for lane `i`. When the server or the network ends its connection, the lane gets
   * another, before postgres.js has seen the loss: postgres.js 3.4.9 reuses a lost connection's
   * object for the next, with what it left behind, and a query sent on it as the loss comes in
   * (a write waiting for the next tick, which the close cancels without forgetting it) kept every
   * later start-up message from being sent, so that each query on that lane failed after
   * connect_timeout, for good: under load, after a database restart, every lane. What the old pool
   * still has in flight fails or ends there; it is then closed (the first lane's stays open, as
   * the maker of queries and the `listen` connection's owner).
   */
  const lane = (i: number): Sql => {
    const pool: Sql = open(() => {
      if (pools[i] !== pool) return;
      pools[i] = lane(i);
      handlers[i] = handlerOf(pools[i]!);
      if (pool !== first) void pool.end({ timeout: 5 }).catch(() => {});
      else firstReplaced = true;
    });
    return pool;
  };
  const pools: Sql[] = [];
  let firstReplaced = false;
  for (let i = 0; i < n; i++) pools.push(lane(i));
  const first = pools[0]!;
  const handlers = pools.map(handlerOf);
  const inFlight = new Array<number>(n).fill(0);
  // Queries in flight that are not plain reads, by lane.
  const writing = new Array<number>(n).fill(0);
  /** The first idle lane, else the least busy. */
  const pick = (): number => {
    let best = 0;
    for (let i = 1; i < n && inFlight[best]! > 0; i++) {
      if (inFlight[i]! < inFlight[best]!) best = i;
    }
    return best;
  };
  // When each lane's current query started: when it was sent to an idle lane, or when the one
  // before it on that connection was answered.
  const since = new Array<number>(n).fill(0);
  /**
   * For a plain read: the first lane that is idle, or holds only reads, fewer than `readDepth`,
   * the current one started less than `readBehindMs` ago.
   */
  const pickForRead = (): number => {
    const t = now();
    for (let i = 0; i < n; i++) {
      const queries = inFlight[i]!;
      if (queries === 0) return i;
      if (queries < readDepth && writing[i] === 0 && t - since[i]! < readBehindMs) return i;
    }
    return pick();
  };
  const dispatch = (query: RoutedQuery) => {
    const read = isPlainRead(query);
    const i = read ? pickForRead() : pick();
    const w = read ? 0 : 1;
    if (inFlight[i]!++ === 0) since[i] = now();
    writing[i]! += w;
    const done = () => {
      if (--inFlight[i]! > 0) since[i] = now();
      writing[i]! -= w;
    };
    // The base `then`: the query's own runs it, and it is running already.
    Promise.prototype.then.call(query, done, done);
    handlers[i]!(query);
  };
  dispatch.debug = handlers[0]!.debug;
  const route = <T>(made: T): T => {
    if (made instanceof Promise) (made as unknown as RoutedQuery).handler = dispatch;
    return made;
  };
  // A lane whose connection a transaction holds answers nothing else until it ends: it weighs as
  // more queries than any lane can have in flight.
  const holding = 1 << 20;
  const held = async <T>(use: (pool: Sql) => Promise<T>): Promise<T> => {
    const i = pick();
    inFlight[i]! += holding;
    try {
      return await use(pools[i]!);
    } finally {
      inFlight[i]! -= holding;
    }
  };
  // deno-lint-ignore no-explicit-any
  const sql: any = (...args: unknown[]) => route((first as any)(...args));
  Object.assign(sql, {
    types: first.types,
    typed: first.typed,
    array: first.array,
    json: first.json,
    CLOSE: first.CLOSE,
    END: first.END,
    PostgresError: first.PostgresError,
    options: first.options,
    subscribe: first.subscribe,
    largeObject: first.largeObject,
    listen: first.listen,
    // deno-lint-ignore no-explicit-any
    unsafe: (...args: unknown[]) => route((first.unsafe as any)(...args)),
    // deno-lint-ignore no-explicit-any
    file: (...args: unknown[]) => route((first.file as any)(...args)),
    notify: async (channel: string, payload: string) =>
      await sql`select pg_notify(${channel}, ${"" + payload})`,
    begin: (...args: unknown[]) => held((pool) => begin(pool, args)),
    reserve: async () => {
      const i = pick();
      inFlight[i]! += holding;
      try {
        const reserved = await pools[i]!.reserve();
        const release = reserved.release;
        let released = false;
        reserved.release = () => {
          if (!released) inFlight[i]! -= holding;
          released = true;
          release();
        };
        return reserved;
      } catch (error) {
        inFlight[i]! -= holding;
        throw error;
      }
    },
    end: async (options?: Parameters<Sql["end"]>[0]) => {
      // A lost connection's object may still hold the query it lost, which a graceful end would
      // wait for: the first pool, when it no longer serves a lane, is given a second.
      const stale = { ...options, timeout: options?.timeout ?? 1 };
      await Promise.all([
        first.end(firstReplaced ? stale : options),
        ...pools.filter((pool) => pool !== first).map((pool) => pool.end(options)),
      ]);
    },
  });
  Object.defineProperty(sql, "parameters", { get: () => first.parameters });
  return sql as Sql;
}

/**
 * `pool.begin(...args)`, with no statement sent on a transaction's connection once it is lost.
 * postgres.js 3.4.9 settles `begin()` with CONNECTION_CLOSED as soon as the connection closes,
 * but then still sends its ROLLBACK (when the callback fails) or COMMIT (when it ends), and the
 * callback's own later statements, on that connection object: when the write comes after the
 * close, a TypeError thrown from a timer ends the process (porsager/postgres#1154, #1208); when it
 * comes just before, it stays queued, and the connection's next start-up message waits behind
 * it, so every later query on that connection fails after connect_timeout (seen with
 * pg_terminate_backend during a transaction: lib/db/postgres_test.ts). Here the callback's
 * statements throw once the connection is lost, and a callback that ends after that, or fails
 * because of it, never hands back to postgres.js: its transaction is gone with the session
 * anyway, and the caller has its error from `begin()`.
 */
function begin(pool: Sql, args: unknown[]): Promise<unknown> {
  const fn = args.at(-1) as (tx: Sql) => unknown;
  let lost = false;
  const never = new Promise<never>(() => {});
  const guard = <F extends (...a: never[]) => unknown>(f: F): F =>
    ((...a: never[]) => {
      if (lost) {
        throw Object.assign(new Error("The transaction's database connection was lost"), {
          code: "CONNECTION_CLOSED",
        });
      }
      return f(...a);
    }) as F;
  // deno-lint-ignore no-explicit-any
  const begun = (pool.begin as any)(...args.slice(0, -1), async (tx: Sql) => {
    const guarded = new Proxy(tx, {
      apply: (target, self, a) => guard(() => Reflect.apply(target, self, a))(),
      get: (target, key) => {
        const value = Reflect.get(target, key);
        return key === "unsafe" || key === "file" || key === "savepoint"
          ? guard((value as (...a: never[]) => unknown).bind(target))
          : value;
      },
    });
    let result: unknown;
    try {
      result = await fn(guarded);
    } catch (error) {
      if (lost || isConnectionLost(error)) return await never;
      throw error;
    }
    if (lost) return await never;
    return result;
  }) as Promise<unknown>;
  return begun.catch((error) => {
    lost = true;
    throw error;
  });
}

/** What postgres.js passes to its `socket` option (the parsed connection settings). */
interface SocketTarget {
  host: string[];
  port: number[];
  path: string | false;
  connect_timeout: number;
}

/**
 * Opens the connections of a pool (postgres.js's `socket` option) so that a lost connection fails
 * its queries (UNAVAILABLE) instead of hanging them. Three gaps of postgres.js 3.4.9 made queries
 * wait forever during a database outage (seen in tests/faults_test.ts):
 *
 * - a server side that closes cleanly (FIN) during start-up, what a proxy or pooler in front of a
 *   Postgres that is down does, left the connection's first query pending and reconnected in a
 *   loop with no delay (porsager/postgres#1193). Here a close this side did not start is an
 *   ECONNRESET error;
 * - a `close` event with `hadError` set does not fail the queries handed to the connection after
 *   its `error` event (the pool still counts it as busy in between). Here `close` always reports
 *   false, the case in which postgres.js fails every query still on the connection;
 * - postgres.js listens only a few ticks after the hand-over, and a refusing proxy closes the
 *   socket within those ticks: such early events are passed on, in order, once it listens; and a
 *   failed connect is handed over as a socket that reports the error (see below).
 *
 * A custom socket must be connected when handed over, and postgres.js times only what follows, so
 * the TCP connect is bounded here by connect_timeout.
 */
function socketOpener(onLost: () => void): (target: SocketTarget) => Promise<Socket> {
  let next = 0;
  return (target) =>
    new Promise((resolve) => {
      const socket = new Socket({ allowHalfOpen: true });
      // A connection that was up and that this side did not end: told once, before postgres.js.
      let up = false;
      const lost = () => {
        if (!up) return;
        up = false;
        onLost();
      };
      const i = next++ % target.host.length;
      // `error` and `close` go to postgres.js in order, once it listens, and never after `close`.
      const emit = socket.emit.bind(socket);
      const held: [string, unknown[]][] = [];
      let closed = false;
      const listening = () => socket.listenerCount("close") > 0;
      const deliver = (event: string, args: unknown[]) => {
        if (closed || socket.listenerCount("error") === 0) return;
        closed = event === "close";
        emit(event, ...args);
      };
      const flush = (tries: number) => {
        if (!listening() && tries < 1000) return void setTimeout(() => flush(tries + 1), 0);
        for (const [event, args] of held.splice(0)) deliver(event, args);
      };
      // Failing to connect is handed over too, as events: a rejected promise would leave the
      // connection in postgres.js's `connecting` queue for good, one pool slot less each time.
      const timer = setTimeout(() => {
        resolve(socket);
        socket.destroy(Object.assign(new Error("Cannot connect to Postgres: timed out"), {
          code: "CONNECT_TIMEOUT",
        }));
      }, (target.connect_timeout || 30) * 1000);
      socket.emit = (event: string | symbol, ...args: unknown[]) => {
        if (event !== "error" && event !== "close") return emit(event, ...args);
        if (!socket.writableEnded) lost();
        if (event === "close") args = [false];
        else {
          clearTimeout(timer);
          resolve(socket);
        }
        if (listening() && held.length === 0) deliver(event, args);
        else if (held.push([event, args]) === 1) setTimeout(() => flush(0), 0);
        return true;
      };
      socket.on("end", () => {
        if (socket.writableEnded) return void socket.destroy(); // this side ended it first
        lost();
        socket.destroy(Object.assign(new Error("Postgres closed the connection"), {
          code: "ECONNRESET",
        }));
      });
      socket.once("connect", () => {
        up = true;
        clearTimeout(timer);
        resolve(socket);
      });
      if (target.path) socket.connect(target.path);
      else socket.connect(target.port[i] ?? 5432, target.host[i] ?? "localhost");
    });
}

/** One migration file. */
export interface Migration {
  /** Its number, from 1. */
  version: number;
  /** Its file name. */
  name: string;
  /** Its SQL text. */
  sql: string;
}

/** Reads the migration files of a folder and checks their numbering. */
export async function readMigrations(dir: URL): Promise<Migration[]> {
  const out: Migration[] = [];
  for await (const entry of Deno.readDir(dir)) {
    if (!entry.isFile || !entry.name.endsWith(".sql")) continue;
    const match = /^(\d{4})_[a-z0-9_]+\.sql$/.exec(entry.name);
    if (!match) throw new Error(`Cannot read migration ${entry.name}: expected NNNN_name.sql`);
    out.push({
      version: Number(match[1]),
      name: entry.name,
      sql: await Deno.readTextFile(new URL(entry.name, dir)),
    });
  }
  out.sort((a, b) => a.version - b.version);
  out.forEach((m, i) => {
    if (m.version !== i + 1) throw new Error(`Cannot migrate: ${m.name} should be number ${i + 1}`);
  });
  return out;
}

async function checksum(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * How long a migration's statement waits for a lock on a table before it gives up (SQLSTATE
 * 55P03, the migration rolled back): a schema change queued behind a long transaction would
 * otherwise hold every later query on that table queued behind itself, so that the running
 * replicas stop answering for as long as that transaction lasts. The start-up tries again
 * (lib/service/service.ts).
 */
export const migrationLockTimeoutMs = 5000;

/** Whether a migration failed only because it waited past {@link migrationLockTimeoutMs}. */
export function isLockTimeout(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === "55P03";
}

/**
 * Applies the migrations that `schema` has not seen yet. Returns the names of those it applied.
 * Each waits as long as it takes for another replica's migrations, and at most `lockTimeoutMs`
 * (default {@link migrationLockTimeoutMs}) for each lock its statements take.
 */
export async function migrate(
  sql: Sql,
  schema: string,
  migrations: Migration[],
  lockTimeoutMs = migrationLockTimeoutMs,
): Promise<string[]> {
  plainName(schema);
  const applied: string[] = [];
  for (const m of migrations) {
    const sum = await checksum(m.sql);
    await sql.begin(async (tx) => {
      // A migration (or the wait for another replica's) may take longer than a request may.
      await tx`set local statement_timeout = 0`;
      await tx`select pg_advisory_xact_lock(hashtext(${"migrate:" + schema}))`;
      // Set once the other replicas' migrations are done: only the statements' own locks wait.
      await tx`select set_config('lock_timeout', ${`${lockTimeoutMs}ms`}, true)`;
      // Create the schema only when missing: with per-service roles (deploy/sql/roles.sql) the
      // schema exists and the role may not create anything in the database itself.
      const [exists] = await tx`select 1 from pg_namespace where nspname = ${schema}`;
      if (!exists) await tx`create schema ${tx(schema)}`;
      await tx`
        create table if not exists ${tx(schema)}.schema_migrations (
          version integer primary key,
          name text not null,
          checksum text not null,
          applied_at timestamptz not null default now()
        )`;
      const [row] = await tx<{ name: string; checksum: string }[]>`
        select name, checksum from ${tx(schema)}.schema_migrations where version = ${m.version}`;
      if (row) {
        if (row.checksum !== sum) {
          throw new Error(`Cannot start: migration ${m.name} changed after it was applied`);
        }
        return;
      }
      await tx.unsafe(m.sql);
      await tx`
        insert into ${tx(schema)}.schema_migrations (version, name, checksum)
        values (${m.version}, ${m.name}, ${sum})`;
      applied.push(m.name);
    });
  }
  return applied;
}

/**
 * Registers `db_pool_connections{state}` (this process's connections as Postgres sees them, by
 * state: active, idle, idle in transaction...) and `db_pool_max`. The process is recognised by its
 * unique application_name. A scrape that cannot reach the database within a second reports no
 * connections.
 */
export function registerPoolMetrics(
  sql: Sql,
  registry: Registry,
  applicationName: string,
  max: number,
): void {
  new Gauge({
    name: "db_pool_max",
    help: "Most connections the pool may open.",
    registers: [registry],
  }).set(max);
  new Gauge({
    name: "db_pool_connections",
    help: "Connections of this process's pool, by state.",
    labelNames: ["state"],
    registers: [registry],
    async collect() {
      this.reset();
      let timer: ReturnType<typeof setTimeout> | undefined;
      const rows = await Promise.race([
        sql<{ state: string | null; n: number }[]>`
          select state, count(*)::int as n from pg_stat_activity
          where application_name = ${applicationName}
          group by state`.catch(() => []),
        new Promise<[]>((resolve) => timer = setTimeout(() => resolve([]), 1000)),
      ]).finally(() => clearTimeout(timer));
      for (const row of rows) this.set({ state: row.state ?? "unknown" }, row.n);
    },
  });
}

/**
 * `name` when it is a plain SQL name (a schema, a table, a column, an alias: lower case letters,
 * digits, underscores), to be written into a statement's text as it is; throws otherwise. For the
 * code's own names, never for a caller's.
 */
export function plainName(name: string): string {
  if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`not a plain SQL name: ${name}`);
  return name;
}

/**
 * A template of statement text around one parameter per column, made once per `kind` and column
 * list (the lists are the code's own, so the map stays as small as the code); `parts` makes the
 * text from the quoted column names.
 */
const templates = new Map<string, TemplateStringsArray>();

function template(
  kind: string,
  columns: readonly string[],
  parts: (quoted: string[]) => string[],
): TemplateStringsArray {
  const key = `${kind} ${columns.join(",")}`;
  let strings = templates.get(key);
  if (!strings) {
    columns.forEach(plainName);
    const text = parts(columns.map((c) => `"${c}"`));
    strings = Object.assign(text, { raw: text }) as unknown as TemplateStringsArray;
    if (templates.size < 256) templates.set(key, strings);
  }
  return strings;
}

/**
 * `"a" = $1, "b" = $2`: an update's assignments of `values`' `columns`, as one fragment. For the
 * statements where postgres.js's own `set ${sql(values, columns)}` would guess wrong: it infers a
 * helper's meaning from the last keyword before it in the statement's text, and a common table
 * expression before the update (`with prior as (... for update)`) misleads it.
 */
export function assignments<T extends object>(
  sql: Sql,
  values: T,
  columns: readonly (keyof T & string)[],
): postgres.PendingQuery<postgres.Row[]> {
  const strings = template(
    "set",
    columns,
    (q) => [`${q[0]} = `, ...q.slice(1).map((c) => `, ${c} = `), ""],
  );
  // deno-lint-ignore no-explicit-any
  return (sql as any)(strings, ...columns.map((c) => (values as Record<string, unknown>)[c]));
}

/**
 * `(t."a" is distinct from $1 or t."b" is distinct from $2)`: whether setting `values`' `columns`
 * would change the row of `alias` (a constant of the code), as one fragment. Each parameter takes
 * its column's type, as in {@link assignments}; null equals null.
 */
export function differences<T extends object>(
  sql: Sql,
  alias: string,
  values: T,
  columns: readonly (keyof T & string)[],
): postgres.PendingQuery<postgres.Row[]> {
  const a = plainName(alias);
  const strings = template(
    `differ ${a}`,
    columns,
    (q) => [
      `(${a}.${q[0]} is distinct from `,
      ...q.slice(1).map((c) => ` or ${a}.${c} is distinct from `),
      ")",
    ],
  );
  // deno-lint-ignore no-explicit-any
  return (sql as any)(strings, ...columns.map((c) => (values as Record<string, unknown>)[c]));
}

/**
 * `("a", "b") values ($1, $2)`: an insert of `values`' own columns, as one fragment (see `form`).
 * Where postgres.js's own `insert into t ${sql(values)}` would do the same, it first finds the
 * helper's meaning by matching eight patterns against all the statement's text before it, and
 * escapes each column again: about 18 to 34 µs of the service's CPU a consent or a client's create
 * (measured call by call against it). Column names are the code's, never a caller's.
 */
export function insertion(
  sql: Sql,
  values: object,
  form: "values" | "select" = "values",
): postgres.PendingQuery<postgres.Row[]> {
  // `select`: `("a", "b") select $1, $2`, for an insert that a `from ... where` after it makes
  // conditional (Postgres gives each parameter its column's type, as in `values`).
  const strings = template(form, Object.keys(values), (q) => [
    `(${q.join(", ")}) ${form === "values" ? "values (" : "select "}`,
    ...q.slice(1).map(() => ", "),
    form === "values" ? ")" : "",
  ]);
  // deno-lint-ignore no-explicit-any
  return (sql as any)(strings, ...Object.values(values));
}
