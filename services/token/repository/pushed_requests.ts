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
}

/** Reads and writes pushed requests. */
export interface PushedRequests {
  /** Stores a request. */
  create(hash: Uint8Array, row: Omit<PushedRow, "decided_at">): Promise<void>;
  /** The request of a hash, decided or not; undefined when unknown. Changes nothing. */
  find(hash: Uint8Array): Promise<PushedRow | undefined>;
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
        insertion(sql, { request_uri_hash: hash, ...row, decided_at: null })
      }`;
    },
    async find(hash) {
      const [row] = await sql<PushedRow[]>`
        select client_id, request, expires_at, decided_at from token.pushed_requests
        where request_uri_hash = ${hash}`;
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
