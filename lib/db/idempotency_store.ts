/**
 * The idempotency keys' table of a service (`<schema>.idempotency_keys`), the store behind
 * lib/policy's idempotency interceptor.
 *
 * @module
 */

import type { IdempotencyOptions, IdempotencyStore, StoredError } from "../policy/mod.ts";
import { plainName, type Sql } from "./postgres.ts";
import { deleteBatch, inBatches } from "./purge.ts";

/** Creates the store of a service's `<schema>.idempotency_keys` table. */
export function createIdempotencyStore(sql: Sql, options: IdempotencyOptions): IdempotencyStore {
  const name = `${plainName(options.schema)}.idempotency_keys`;
  const table = sql(name);
  const ttl = options.ttlSeconds;
  const lock = options.lockSeconds ?? 60;
  return {
    options,
    async claim(caller, rpc, key, hash) {
      const owner = crypto.randomUUID();
      // A new key, an expired one, or one whose request died with the same body before its
      // change committed (no effect marked): take it. One whose change committed is never run
      // again; the caller answers from its effect.
      const [taken] = await sql<{ owner: string }[]>`
        insert into ${table} as k (caller, rpc, key, request_hash, owner)
        values (${caller}, ${rpc}, ${key}, ${hash}, ${owner})
        on conflict (caller, rpc, key) do update
          set request_hash = excluded.request_hash, owner = excluded.owner, response = null,
              error = null, effect = null, created_at = now(), completed_at = null
          where k.created_at <= now() - make_interval(secs => ${ttl})
             or (k.completed_at is null and k.effect is null
                 and k.request_hash = excluded.request_hash
                 and k.created_at <= now() - make_interval(secs => ${lock}))
        returning k.owner`;
      if (taken?.owner === owner) return { kind: "owner", owner };
      const [row] = await sql<
        {
          request_hash: Uint8Array;
          response: Uint8Array | null;
          error: StoredError | null;
          completed: boolean;
          effect: string | null;
        }[]
      >`
        select request_hash, response, error, completed_at is not null as completed, effect
        from ${table} where caller = ${caller} and rpc = ${rpc} and key = ${key}`;
      if (!row) return { kind: "gone" };
      return {
        kind: "existing",
        hash: row.request_hash,
        response: row.response,
        error: row.error,
        completed: row.completed,
        effect: row.effect,
      };
    },
    async complete(caller, rpc, key, owner, outcome) {
      const response = "response" in outcome ? outcome.response : null;
      const error = "error" in outcome ? outcome.error : null;
      await sql`
        update ${table} set response = ${response}, error = ${
        error ? sql.json(error as never) : null
      },
          completed_at = now(), owner = null
        where caller = ${caller} and rpc = ${rpc} and key = ${key} and owner = ${owner}`;
    },
    async release(caller, rpc, key, owner) {
      // Not one whose change committed (its effect marked) before the call failed, as a lost
      // connection can fail it after the commit: a retry answers from its effect.
      await sql`
        delete from ${table}
        where caller = ${caller} and rpc = ${rpc} and key = ${key} and owner = ${owner}
          and effect is null`;
    },
    purge() {
      // A batch at a time, as many as the keys that expired (a minute of them, at 100 batches,
      // is 1,666 idempotent requests a second).
      return inBatches((limit) =>
        deleteBatch(sql, name, sql`created_at <= now() - make_interval(secs => ${ttl})`, limit)
      );
    },
  };
}
