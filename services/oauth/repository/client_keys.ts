/**
 * The `oauth.client_keys` table: the public keys with which confidential clients sign their
 * assertions (`private_key_jwt`), with their expiry and when they were last used. Never a private
 * key: the table refuses JWKs with private members (migrations/0006_client_keys.sql).
 *
 * A key is live while its `expires_at` is null or after the time the caller passes (the service's
 * clock), as a secret is (./client_secrets.ts).
 *
 * @module
 */

import {
  changedRowEvent,
  type Fragment,
  ifExpiringMatch,
  type Write,
} from "../../../lib/audit/mod.ts";
import { insertion, type Sql } from "../../../lib/db/mod.ts";
import { ids } from "../ids.ts";
import { uuidTime } from "../../../lib/platform/mod.ts";
import { etagMismatch } from "../../../lib/resource/mod.ts";
import type { PublicJwk } from "../client_keys.ts";
import { lastUsedResolutionSeconds } from "./client_secrets.ts";
import type { ClientRow } from "./clients.ts";

export { lastUsedResolutionSeconds };

/** A row of oauth.client_keys. */
export interface ClientKeyRow {
  id: string;
  client_id: string;
  kid: string;
  algorithm: string;
  /** The public JWK (members as stored: jsonb keeps its own order). */
  jwk: Record<string, unknown>;
  created_at: Date;
  expires_at: Date | null;
  last_used_at: Date | null;
  /** The row's version (lib/resource/etag.ts). */
  etag: string;
}

/** A client with its live keys, oldest first. */
export interface ClientWithKeys extends ClientRow {
  keys: ClientKeyRow[];
}

/** What {@link ClientKeyRepository.create} found. */
export type CreateKeyResult =
  | { kind: "created"; row: ClientKeyRow }
  | { kind: "no_client" }
  | { kind: "public" }
  | { kind: "duplicate" }
  | { kind: "same_key"; kid: string }
  | { kind: "full"; held: "live" | "all" };

/** Options of {@link ClientKeyRepository.create}. */
export interface CreateKeyOptions {
  /** The time now (the service's clock): keys that expired by then are not live. */
  now: Date;
  /** Most live keys the client may hold. */
  maxLive: number;
  /** Most keys, live or expired, the client may hold. */
  maxAll: number;
  /** What the creation records. */
  write: Write;
}

/**
 * What an event shows of a key: its kid, algorithm, public JWK (the table refuses a private part)
 * and expiry; not its ids (in the resource name), timestamps or uses.
 */
export const keyShown = ["kid", "algorithm", "jwk", "expires_at"] as const;

/**
 * The event CTEs of the key `id` of the client `clientId` (stored ids), created or deleted (the
 * rows of the CTE `changed`).
 */
function keyEvent(
  sql: Sql,
  write: Write,
  projectId: string,
  clientId: string,
  id: string,
  deleted: boolean,
): Fragment {
  const client = ids.client.fromUuid(clientId);
  const resource = `projects/${projectId}/clients/${client}/keys/${ids.key.fromUuid(id)}`;
  return changedRowEvent(sql, "oauth", write.audit, keyShown, projectId, resource, deleted);
}

/** The columns of a new key. */
export interface NewClientKey {
  id: string;
  client_id: string;
  kid: string;
  algorithm: string;
  jwk: PublicJwk;
  expires_at: Date | null;
}

/** Reads and writes oauth.client_keys. */
export interface ClientKeyRepository {
  /**
   * Stores a new key for the project's client unless the client is missing or public, already
   * holds a key of that kid or the same public key under another kid (`same_key`, with that kid:
   * one key, one row, so that deleting it leaves no copy that still verifies), or holds `maxLive`
   * live keys or `maxAll` in all. Concurrent calls for one client are serialised by a row lock on
   * the client.
   */
  create(projectId: string, key: NewClientKey, options: CreateKeyOptions): Promise<CreateKeyResult>;
  /** Returns the keys of the project's client in id order, or undefined if there is no client. */
  list(projectId: string, clientId: string): Promise<ClientKeyRow[] | undefined>;
  /** Returns a key of the project's client, or undefined. */
  get(projectId: string, clientId: string, id: string): Promise<ClientKeyRow | undefined>;
  /** Deletes a key of the project's client; returns false when there was none. */
  delete(projectId: string, clientId: string, id: string, write: Write): Promise<boolean>;
  /** Returns a client (of any project) with its keys live at `now`, or undefined. */
  clientWithKeys(clientId: string, now: Date): Promise<ClientWithKeys | undefined>;
  /**
   * Records a use of a key at `now`, as {@link ClientSecretRepository.recordUse} does for a secret:
   * sets its `last_used_at` unless that is within {@link lastUsedResolutionSeconds} of `now` (no
   * query at all when `lastUsedAt`, the value the caller read, is that recent; the update checks
   * again). With `clientId`, only a key of that client. Returns whether it wrote. Notifies nothing
   * (the change feed's trigger fires on insert and delete only).
   */
  recordUse(id: string, lastUsedAt: Date | null, now: Date, clientId?: string): Promise<boolean>;
}

/** Creates the repository over a pool. */
export function createClientKeyRepository(sql: Sql): ClientKeyRepository {
  /** The rule of a live key, as SQL over `oauth.client_keys` (unqualified columns). */
  const live = (now: Date) => sql`(expires_at is null or expires_at > ${now})`;
  return {
    async create(projectId, key, options) {
      try {
        return await sql.begin(async (tx) => {
          const [client] = await tx<{ type: string }[]>`
            select type from oauth.clients
            where id = ${key.client_id} and project_id = ${projectId}
            for update`;
          if (!client) return { kind: "no_client" } as const;
          if (client.type !== "web") return { kind: "public" } as const;
          // The same key: the same public members (a stored JWK has no others but kid, alg and
          // use, which its type decides), expired keys included, as for a kid.
          const material = Object.fromEntries(
            Object.entries(key.jwk).filter(([name]) => name !== "kid"),
          );
          const [held] = await tx<
            { live: number; total: number; same_kid: boolean; same_key: string | null }[]
          >`
            select count(*) filter (where ${live(options.now)})::int as live,
              count(*)::int as total,
              coalesce(bool_or(kid = ${key.kid}), false) as same_kid,
              min(kid) filter (where jwk - 'kid' = ${sql.json(material)}::jsonb) as same_key
            from oauth.client_keys
            where client_id = ${key.client_id}`;
          if (held!.same_kid) return { kind: "duplicate" } as const;
          if (held!.same_key !== null) return { kind: "same_key", kid: held!.same_key } as const;
          if (held!.live >= options.maxLive) return { kind: "full", held: "live" } as const;
          if (held!.total >= options.maxAll) return { kind: "full", held: "all" } as const;
          const [row] = await tx<ClientKeyRow[]>`
            with changed as (
            insert into oauth.client_keys ${
            insertion(sql, {
              id: key.id,
              client_id: key.client_id,
              kid: key.kid,
              algorithm: key.algorithm,
              jwk: sql.json(key.jwk as unknown as Parameters<typeof sql.json>[0]),
              created_at: uuidTime(key.id),
              expires_at: key.expires_at,
            })
          }
            returning *, oauth.etag(xmin) as etag
            ),
            ${keyEvent(sql, options.write, projectId, key.client_id, key.id, false)}
            select id, client_id, kid, algorithm, jwk, created_at, expires_at, last_used_at, etag
            from changed`;
          return { kind: "created", row: row! } as const;
        });
      } catch (error) {
        // The row lock makes this unreachable but for a kid written around it (by SQL).
        if ((error as { code?: string }).code === "23505") return { kind: "duplicate" };
        throw error;
      }
    },
    async list(projectId, clientId) {
      const rows = await sql<(ClientKeyRow & { id: string | null })[]>`
        select k.id, c.id as client_id, k.kid, k.algorithm, k.jwk, k.created_at, k.expires_at,
          k.last_used_at, oauth.etag(k.xmin) as etag
        from oauth.clients c
        left join oauth.client_keys k on k.client_id = c.id
        where c.id = ${clientId} and c.project_id = ${projectId}
        order by k.id`;
      if (rows.length === 0) return undefined;
      return rows.filter((r) => r.id !== null);
    },
    async get(projectId, clientId, id) {
      const [row] = await sql<ClientKeyRow[]>`
        select k.id, k.client_id, k.kid, k.algorithm, k.jwk, k.created_at, k.expires_at,
          k.last_used_at, oauth.etag(k.xmin) as etag
        from oauth.client_keys k join oauth.clients c on c.id = k.client_id
        where k.id = ${id} and k.client_id = ${clientId} and c.project_id = ${projectId}`;
      return row;
    },
    async delete(projectId, clientId, id, write) {
      const rows = await sql`
        with changed as (
          delete from oauth.client_keys k
          using oauth.clients c
          where k.id = ${id} and k.client_id = ${clientId}
            and c.id = k.client_id and c.project_id = ${projectId}
            ${ifExpiringMatch(sql, "oauth", "k", write)}
          returning k.*
        ),
        ${keyEvent(sql, write, projectId, clientId, id, true)}
        select id from changed`;
      if (
        rows.length === 0 && write.etag !== undefined && await this.get(projectId, clientId, id)
      ) {
        throw etagMismatch("key");
      }
      return rows.length > 0;
    },
    async clientWithKeys(clientId, now) {
      const [row] = await sql<(ClientRow & { keys: ClientKeyRow[] })[]>`
        select c.*, oauth.etag(c.xmin) as etag, coalesce((
          select json_agg(json_build_object(
            'id', k.id, 'client_id', k.client_id, 'kid', k.kid, 'algorithm', k.algorithm,
            'jwk', k.jwk, 'created_at', k.created_at, 'expires_at', k.expires_at,
            'last_used_at', k.last_used_at, 'etag', oauth.etag(k.xmin)
          ) order by k.id)
          from oauth.client_keys k
          where k.client_id = c.id and (k.expires_at is null or k.expires_at > ${now})
        ), '[]') as keys
        from oauth.clients c
        where c.id = ${clientId}`;
      if (row === undefined) return undefined;
      // json_agg gives timestamps as text.
      const date = (value: unknown) => value === null ? null : new Date(value as string);
      row.keys = row.keys.map((k) => ({
        ...k,
        created_at: date(k.created_at)!,
        expires_at: date(k.expires_at),
        last_used_at: date(k.last_used_at),
      }));
      return row;
    },
    async recordUse(id, lastUsedAt, now, clientId) {
      const since = new Date(now.getTime() - lastUsedResolutionSeconds * 1000);
      if (lastUsedAt !== null && lastUsedAt >= since) return false;
      const rows = await sql`
        update oauth.client_keys set last_used_at = ${now}
        where id = ${id} and (last_used_at is null or last_used_at < ${since})
          ${clientId === undefined ? sql`` : sql`and client_id = ${clientId}`}
        returning id`;
      return rows.length > 0;
    },
  };
}
