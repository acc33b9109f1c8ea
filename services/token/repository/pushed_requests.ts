/**
 * The token schema's `pushed_requests` table (migrations/0008_pushed_requests.sql): pushed
 * authorization requests (RFC 9126), by the SHA-256 of their `request_uri`.
 *
 * @module
 */

import { deleteBatch, insertion, type Sql } from "../../../lib/db/mod.ts";

/** A pushed request as stored. */
export interface PushedRow {
  client_id: string;
  /** The AuthorizationRequest, Protobuf binary. */
  request: Uint8Array;
  expires_at: Date;
  decided_at: Date | null;
  /** When the authorization endpoint first resolved it (migrations/0015); null before. */
  arrived_at: Date | null;
}

/** Reads and writes pushed requests. */
export interface PushedRequests {
  /** Stores a request. */
  create(hash: Uint8Array, row: Omit<PushedRow, "decided_at" | "arrived_at">): Promise<void>;
  /** The request of a hash, decided or not; undefined when unknown. Changes nothing. */
  find(hash: Uint8Array): Promise<PushedRow | undefined>;
  /**
   * The request of a hash, of `clientId`, undecided and unexpired at `now`, which has now reached
   * the authorization endpoint: the first time, it is marked arrived and its expiry moved to
   * `until` (once only); undefined when there is no such request.
   */
  arrive(
    hash: Uint8Array,
    clientId: string,
    now: Date,
    until: Date,
  ): Promise<PushedRow | undefined>;
  /**
   * Marks a request decided at `now`, unless it was already (or has expired by `now`); returns
   * whether this call did. Two concurrent decisions cannot both get true.
   */
  decide(hash: Uint8Array, now: Date): Promise<boolean>;
  /** Deletes requests expired before `at` (at most `limit`). */
  purge(at: Date, limit?: number): Promise<number>;
}

/** The repository over a pool. */
export function createPushedRequests(sql: Sql): PushedRequests {
  return {
    async create(hash, row) {
      await sql`insert into token.pushed_requests ${
        insertion(sql, { request_uri_hash: hash, ...row, decided_at: null, arrived_at: null })
      }`;
    },
    async find(hash) {
      const [row] = await sql<PushedRow[]>`
        select client_id, request, expires_at, decided_at, arrived_at from token.pushed_requests
        where request_uri_hash = ${hash}`;
      return row;
    },
    async arrive(hash, clientId, now, until) {
      // The right-hand sides read the row as it was: only the first arrival moves the expiry.
      const [row] = await sql<PushedRow[]>`
        update token.pushed_requests
        set arrived_at = coalesce(arrived_at, ${now}),
          expires_at = case when arrived_at is null then ${until} else expires_at end
        where request_uri_hash = ${hash} and client_id = ${clientId} and decided_at is null
          and expires_at > ${now}
        returning client_id, request, expires_at, decided_at, arrived_at`;
      return row;
    },
    async decide(hash, now) {
      const rows = await sql`
        update token.pushed_requests set decided_at = ${now}
        where request_uri_hash = ${hash} and decided_at is null and expires_at > ${now}
        returning 1`;
      return rows.length === 1;
    },
    purge(at, limit) {
      return deleteBatch(sql, "token.pushed_requests", sql`expires_at < ${at}`, limit);
    },
  };
}
