/**
 * The `oauth.client_secrets` table: keyed hashes of client secrets, never the plaintext, with
 * their expiry and when they were last used.
 *
 * A secret is live while its `expires_at` is null or after the time the caller passes (the
 * service's clock): `live` below is that rule, written out once more in the verification's query.
 *
 * @module
 */

import {
  type AuditContext,
  changedRowEvent,
  type Fragment,
  ifExpiringMatch,
  type Write,
} from "../../../lib/audit/mod.ts";
import { insertion, type Sql } from "../../../lib/db/mod.ts";
import { ids } from "../ids.ts";
import { uuidTime } from "../../../lib/platform/mod.ts";
import { etagMismatch } from "../../../lib/resource/mod.ts";
import type { ClientRow } from "./clients.ts";

/** A row of oauth.client_secrets, without the hash. */
export interface ClientSecretRow {
  id: string;
  client_id: string;
  secret_hint: string;
  created_at: Date;
  expires_at: Date | null;
  last_used_at: Date | null;
  /** The row's version (lib/resource/etag.ts). */
  etag: string;
}

/** A live secret of a client, for verification. */
export interface LiveSecret {
  id: string;
  /** Its keyed hash, in hex. */
  hash: string;
  /** The id (hex) of the key the hash was made under; null: made before ids were kept. */
  hash_key_id: string | null;
  expires_at: Date | null;
  last_used_at: Date | null;
}

/** A client with its live secrets (in no particular order), for verification. */
export interface ClientWithSecrets extends ClientRow {
  secrets: LiveSecret[];
}

/** What {@link ClientSecretRepository.create} found. */
export type CreateSecretResult =
  | { kind: "created"; row: ClientSecretRow }
  | { kind: "no_client" }
  | { kind: "public" }
  | { kind: "full"; held: "live" | "all" };

/** Options of {@link ClientSecretRepository.create}. */
export interface CreateSecretOptions {
  /** The time now (the service's clock): secrets that expired by then are not live. */
  now: Date;
  /** Most live secrets the client may hold. */
  maxLive: number;
  /** Most secrets, live or expired, the client may hold. */
  maxAll: number;
  /**
   * The new secret's expiry (null: none), given the project's `secret_max_lifetime_seconds` (0:
   * no limit); it may throw to refuse the secret, and then nothing is written.
   */
  expiresAt(maxLifetimeSeconds: number): Date | null;
  /** What the creation records. */
  write: Write;
}

/**
 * What an event shows of a secret: its expiry only. Never its hash, hint or hash key (nothing of a
 * secret's value is ever written to the trail), nor its ids (in the resource name), timestamps or
 * uses.
 */
export const secretShown = ["expires_at"] as const;

/**
 * The event CTEs of the secret `id` of the client `clientId` (stored ids), created or deleted (the
 * row of the CTE `changed`).
 */
function secretEvent(
  sql: Sql,
  audit: AuditContext,
  projectId: string,
  clientId: string,
  id: string,
  deleted: boolean,
): Fragment {
  const client = ids.client.fromUuid(clientId);
  const resource = `projects/${projectId}/clients/${client}/secrets/${ids.secret.fromUuid(id)}`;
  return changedRowEvent(sql, "oauth", audit, secretShown, projectId, resource, deleted);
}

/** Reads and writes oauth.client_secrets. */
export interface ClientSecretRepository {
  /**
   * Stores a new secret for the project's client unless the client is missing or public, or
   * already holds `maxLive` live secrets or `maxAll` in all. Concurrent calls for one client are
   * serialised by a row lock on the client.
   */
  create(
    projectId: string,
    secret: {
      id: string;
      client_id: string;
      secret_hash: Uint8Array;
      hash_key_id: Uint8Array;
      secret_hint: string;
    },
    options: CreateSecretOptions,
  ): Promise<CreateSecretResult>;
  /** Returns the secrets of the project's client in id order, or undefined if there is no client. */
  list(projectId: string, clientId: string): Promise<ClientSecretRow[] | undefined>;
  /** Deletes a secret of the project's client; returns false when there was none. */
  delete(projectId: string, clientId: string, id: string, write: Write): Promise<boolean>;
  /** Returns a client (of any project) with its secrets live at `now`, or undefined. */
  clientWithSecrets(clientId: string, now: Date): Promise<ClientWithSecrets | undefined>;
  /**
   * Records a use of a secret at `now`: sets its `last_used_at` unless that is within
   * {@link lastUsedResolutionSeconds} of `now`. `lastUsedAt` is the value the caller read: when it
   * is recent enough, no query runs; otherwise the update itself checks again, so that replicas
   * and concurrent uses write at most once per that many seconds. Returns whether it wrote.
   * Notifies nothing (the change feed ignores it: see migration 0005).
   */
  recordUse(id: string, lastUsedAt: Date | null, now: Date): Promise<boolean>;
  /**
   * Replaces a secret's hash `from` (hex) with `hash`, made under the key `keyId` (hex), unless
   * it was replaced meanwhile; returns whether it wrote. Notifies nothing, as a use does.
   */
  rehash(id: string, from: string, hash: Uint8Array, keyId: string): Promise<boolean>;
  /** How many secrets have a hash made under each key, by the key's id (hex; "" for none). */
  countByKey(): Promise<Map<string, number>>;
}

/** The columns of a live secret in {@link ClientSecretRepository.clientWithSecrets}'s rows. */
interface SecretColumns {
  secret_id: string | null;
  secret_hash: string | null;
  secret_hash_key_id: string | null;
  secret_expires_at: Date | null;
  secret_last_used_at: Date | null;
}

/** How fine `last_used_at` is: a secret's use is written at most once this many seconds. */
export const lastUsedResolutionSeconds = 60;

/** Creates the repository over a pool. */
export function createClientSecretRepository(sql: Sql): ClientSecretRepository {
  /** The rule of a live secret, as SQL over `oauth.client_secrets` (unqualified columns). */
  const live = (now: Date) => sql`(expires_at is null or expires_at > ${now})`;
  return {
    async create(projectId, secret, options) {
      return await sql.begin(async (tx) => {
        const [client] = await tx<{ type: string; secret_max_lifetime_seconds: number }[]>`
          select c.type, f.secret_max_lifetime_seconds
          from oauth.clients c join oauth.configs f on f.project_id = c.project_id
          where c.id = ${secret.client_id} and c.project_id = ${projectId}
          for update of c`;
        if (!client) return { kind: "no_client" } as const;
        if (client.type !== "web") return { kind: "public" } as const;
        const expiresAt = options.expiresAt(client.secret_max_lifetime_seconds);
        // Counted by the insert, in the same round trip: it starts after the lock above, so it
        // sees every secret that a creation holding the lock before it committed.
        const [row] = await tx<(ClientSecretRow & { live: number; total: number })[]>`
          with held as (
            select count(*) filter (where ${live(options.now)})::int as live,
              count(*)::int as total
            from oauth.client_secrets
            where client_id = ${secret.client_id}
          ),
          changed as (
            insert into oauth.client_secrets ${
          insertion(sql, {
            ...secret,
            created_at: uuidTime(secret.id),
            expires_at: expiresAt,
          }, "select")
        }
            from held where held.live < ${options.maxLive} and held.total < ${options.maxAll}
            returning *, oauth.etag(xmin) as etag
          ),
          ${secretEvent(sql, options.write.audit, projectId, secret.client_id, secret.id, false)}
          select held.live, held.total, id, client_id, secret_hint, created_at, expires_at,
            last_used_at, etag
          from held left join changed on true`;
        if (row!.id === null) {
          return { kind: "full", held: row!.live >= options.maxLive ? "live" : "all" } as const;
        }
        const { live: _, total: __, ...created } = row!;
        return { kind: "created", row: created } as const;
      });
    },
    async list(projectId, clientId) {
      const rows = await sql<(ClientSecretRow & { client_exists: boolean })[]>`
        select s.id, c.id as client_id, s.secret_hint, s.created_at, s.expires_at, s.last_used_at,
          oauth.etag(s.xmin) as etag
        from oauth.clients c
        left join oauth.client_secrets s on s.client_id = c.id
        where c.id = ${clientId} and c.project_id = ${projectId}
        order by s.id`;
      if (rows.length === 0) return undefined;
      return rows.filter((r) => r.id !== null);
    },
    async delete(projectId, clientId, id, write) {
      const rows = await sql`
        with changed as (
          delete from oauth.client_secrets s
          using oauth.clients c
          where s.id = ${id} and s.client_id = ${clientId}
            and c.id = s.client_id and c.project_id = ${projectId}
            ${ifExpiringMatch(sql, "oauth", "s", write)}
          returning s.*
        ),
        ${secretEvent(sql, write.audit, projectId, clientId, id, true)}
        select id from changed`;
      if (rows.length === 0 && write.etag !== undefined) {
        const [found] = await sql`
          select 1 from oauth.client_secrets s join oauth.clients c on c.id = s.client_id
          where s.id = ${id} and s.client_id = ${clientId} and c.project_id = ${projectId}`;
        if (found) throw etagMismatch("secret");
      }
      return rows.length > 0;
    },
    async clientWithSecrets(clientId, now) {
      // One row per live secret, or one without a secret: no aggregate to build (arrays of each
      // column cost verification about 5% more, measured in process). The rule of `live`, written
      // out: a fragment is a query object built per call, on the hottest path there is.
      const rows = await sql<(ClientRow & SecretColumns)[]>`
        select c.*, oauth.etag(c.xmin) as etag, s.id as secret_id, encode(s.secret_hash, 'hex') as secret_hash,
          encode(s.hash_key_id, 'hex') as secret_hash_key_id,
          s.expires_at as secret_expires_at, s.last_used_at as secret_last_used_at
        from oauth.clients c
        left join (
          select * from oauth.client_secrets
          where client_id = ${clientId} and ${live(now)}
        ) as s on true
        where c.id = ${clientId}`;
      const first = rows[0];
      if (first === undefined) return undefined;
      const secrets: LiveSecret[] = [];
      for (const r of rows) {
        if (r.secret_id === null) continue;
        secrets.push({
          id: r.secret_id,
          hash: r.secret_hash!,
          hash_key_id: r.secret_hash_key_id,
          expires_at: r.secret_expires_at,
          last_used_at: r.secret_last_used_at,
        });
      }
      // The first row is the client (its secret's columns, left on it, are never read as such).
      return Object.assign(first, { secrets });
    },
    async recordUse(id, lastUsedAt, now) {
      const since = new Date(now.getTime() - lastUsedResolutionSeconds * 1000);
      if (lastUsedAt !== null && lastUsedAt >= since) return false;
      const rows = await sql`
        update oauth.client_secrets set last_used_at = ${now}
        where id = ${id} and (last_used_at is null or last_used_at < ${since})
        returning id`;
      return rows.length > 0;
    },
    async rehash(id, from, hash, keyId) {
      const rows = await sql`
        update oauth.client_secrets
        set secret_hash = ${hash}, hash_key_id = decode(${keyId}, 'hex')
        where id = ${id} and secret_hash = decode(${from}, 'hex')
        returning id`;
      return rows.length > 0;
    },
    async countByKey() {
      const rows = await sql<{ key_id: string | null; secrets: number }[]>`
        select encode(hash_key_id, 'hex') as key_id, count(*)::int as secrets
        from oauth.client_secrets group by hash_key_id`;
      return new Map(rows.map((r) => [r.key_id ?? "", r.secrets]));
    },
  };
}
