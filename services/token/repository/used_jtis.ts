/**
 * The token schema's `used_jtis` table (migrations/0005_used_jtis.sql): a JWT that may be used
 * once (a client assertion, a DPoP proof) is recorded on first use under the SHA-256 of its scope
 * and `jti`; a second use, in any replica, finds the row and is refused. Postgres decides, not
 * memory: two replicas that see the same JWT at once cannot both accept it.
 *
 * Uses that arrive while earlier ones are being written are written together, in one INSERT of
 * arrays (at most {@link maxBatch} rows, {@link maxInFlight} statement at a time, one statement
 * text whatever the size, so it is prepared once); under steady load a batch also waits
 * {@link lingerMs} for company. A query costs this process about 160 us of CPU whatever its size
 * (postgres.js over node:net, measured with `select 1`), and Postgres a transaction: batched, a
 * grant's share of both fell from 0.17 to under 0.04 ms of Postgres CPU, and 8 uses went into a
 * write on average at 2,700 grants a second. A lone use is written at once. A batch is one
 * statement, so each row is decided by the primary key exactly as alone; the same key twice in a
 * batch is written once, and its second use is a replay.
 *
 * A write commits without waiting for its WAL to reach the disk (`synchronous_commit` off for
 * that statement's own transaction, nothing else): the row is visible to every replica as soon as
 * it commits, as before, so two uses of one JWT still cannot both pass; what a crash of Postgres
 * itself (not of this service) can lose is the last moments of uses (at most three times
 * `wal_writer_delay`, 0.6 s by default), whose JWTs could then be replayed until they expire.
 * Alone, an 8-row write then commits in about a third of the time (`pgbench`, one connection:
 * 2,287 -> 6,812 a second). With a 32-connection load (`deno task bench`, 12 rounds of 2 s each
 * way), a `private_key_jwt` grant went from 0.64 to 0.75 of the rate of one with a secret, a DPoP
 * grant from 0.60 to 0.69. Longer batches (a 3 ms wait) gave 0.60 and 0.60, two writes at once
 * 0.69 and 0.62.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { createHash } from "node:crypto";
import { deleteBatch, type Sql } from "../../../lib/db/mod.ts";

/** Records single-use JWT ids. */
export interface UsedJtis {
  /**
   * Records `jti` under `scope` (e.g. `assertion:<client_id>`, `dpop:<jkt>`) until `expiresAt`;
   * true when it was new, false when it had been used (a replay). Rows are kept until
   * `expiresAt`, when the JWT itself is no longer accepted; a row past its expiry at `now` (the
   * service's clock) counts as absent.
   */
  use(scope: string, jti: string, expiresAt: Date, now: Date): Promise<boolean>;
  /** Deletes rows past their expiry (at most `limit` per call); returns how many. */
  purge(at: Date, limit?: number): Promise<number>;
}

/** The most rows one INSERT writes. */
export const maxBatch = 200;
/** How long a batch waits for more uses under steady load, in ms. */
export const lingerMs = 1;
/** The most INSERTs at once (each holds a connection of the pool). */
export const maxInFlight = 1;

/** A use waiting to be written. */
interface Pending {
  key: Buffer;
  expiresAt: Date;
  now: Date;
  resolve: (fresh: boolean) => void;
  reject: (error: unknown) => void;
}

/** The repository over a pool. */
export function createUsedJtis(sql: Sql): UsedJtis {
  const queue: Pending[] = [];
  let inFlight = 0;

  /** Writes one batch and answers each of its uses. */
  async function write(batch: Pending[]): Promise<void> {
    // The same key twice: the first is written, the others are replays whatever it finds.
    const first = new Map<string, Pending>();
    const replays: Pending[] = [];
    for (const p of batch) {
      const hex = p.key.toString("hex");
      if (first.has(hex)) replays.push(p);
      else first.set(hex, p);
    }
    const expiries = [...first.values()].map((p) => p.expiresAt.toISOString());
    const now = new Date(Math.max(...batch.map((p) => p.now.getTime())));
    try {
      // A row past its expiry is as good as absent (the purge may not have run yet): it is taken
      // over. The JWT it stood for is no longer accepted by then, so nothing is replayed.
      // One statement text whatever the batch's size (arrays, not a VALUES list per size), so
      // it is prepared once per connection; keys travel as hex.
      const written = await sql<{ key: string }[]>`
        with relaxed as (select set_config('synchronous_commit', 'off', true))
        insert into token.used_jtis (key, expires_at)
        select decode(k, 'hex'), e::timestamptz from relaxed, unnest(${[
        ...first.keys(),
      ]}::text[], ${expiries}::text[]) as t(k, e)
        on conflict (key) do update set expires_at = excluded.expires_at
          where token.used_jtis.expires_at < ${now}
        returning encode(key, 'hex') as key`;
      const fresh = new Set(written.map((r) => r.key));
      for (const [hex, p] of first) p.resolve(fresh.has(hex));
      for (const p of replays) p.resolve(false);
    } catch (error) {
      for (const p of batch) p.reject(error);
    }
  }

  /** When the last write ended (performance.now()). */
  let lastWrite = -Infinity;
  async function drain(): Promise<void> {
    inFlight++;
    try {
      // Under steady load (a write ended moments ago) the batch waits a moment for company: each
      // write costs the same whatever its size, and a lone use is still written at once.
      if (performance.now() - lastWrite < lingerMs * 4) {
        await new Promise((r) => setTimeout(r, lingerMs));
      }
      while (queue.length > 0) await write(queue.splice(0, maxBatch));
    } finally {
      inFlight--;
      lastWrite = performance.now();
    }
  }

  return {
    use(scope, jti, expiresAt, now) {
      const key = createHash("sha256").update(`${scope}\u0000${jti}`).digest();
      return new Promise<boolean>((resolve, reject) => {
        queue.push({ key, expiresAt, now, resolve, reject });
        if (inFlight < maxInFlight) void drain();
      });
    },
    purge(at, limit) {
      return deleteBatch(sql, "token.used_jtis", sql`expires_at < ${at}`, limit);
    },
  };
}
