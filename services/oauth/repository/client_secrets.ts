/**
 * The `oauth.client_secrets` table: keyed hashes of client secrets, never the plaintext.
 *
 * @module
 */

import type { Sql } from "../../../lib/db/mod.ts";
import { uuidTime } from "../../../lib/platform/mod.ts";
import type { ClientRow } from "./clients.ts";

/** A row of oauth.client_secrets, without the hash. */
export interface ClientSecretRow {
  id: string;
  client_id: string;
  secret_hint: string;
  created_at: Date;
}

/** A client with the hashes of its live secrets (hex), for verification. */
export interface ClientWithHashes extends ClientRow {
  hashes: string[];
}

/** What {@link ClientSecretRepository.create} found. */
export type CreateSecretResult =
  | { kind: "created"; row: ClientSecretRow }
  | { kind: "no_client" }
  | { kind: "public" }
  | { kind: "full" };

/** Reads and writes oauth.client_secrets. */
export interface ClientSecretRepository {
  /**
   * Stores a new secret for the project's client unless the client is missing or already holds
   * `max` secrets. Concurrent calls for one client are serialised by a row lock on the client.
   */
  create(
    projectId: string,
    secret: { id: string; client_id: string; secret_hash: Uint8Array; secret_hint: string },
    max: number,
  ): Promise<CreateSecretResult>;
  /** Returns the secrets of the project's client in id order, or undefined if there is no client. */
  list(projectId: string, clientId: string): Promise<ClientSecretRow[] | undefined>;
  /** Deletes a secret of the project's client; returns false when there was none. */
  delete(projectId: string, clientId: string, id: string): Promise<boolean>;
  /** Returns a client (of any project) with its secrets' hashes, or undefined. */
  clientWithHashes(clientId: string): Promise<ClientWithHashes | undefined>;
}

/** Creates the repository over a pool. */
export function createClientSecretRepository(sql: Sql): ClientSecretRepository {
  return {
    async create(projectId, secret, max) {
      return await sql.begin(async (tx) => {
        const [client] = await tx<{ type: string }[]>`
          select type from oauth.clients
          where id = ${secret.client_id} and project_id = ${projectId}
          for update`;
        if (!client) return { kind: "no_client" } as const;
        if (client.type !== "web") return { kind: "public" } as const;
        const [held] = await tx<{ count: number }[]>`
          select count(*)::int as count from oauth.client_secrets
          where client_id = ${secret.client_id}`;
        if (held!.count >= max) return { kind: "full" } as const;
        const [row] = await tx<ClientSecretRow[]>`
          insert into oauth.client_secrets ${tx({ ...secret, created_at: uuidTime(secret.id) })}
          returning id, client_id, secret_hint, created_at`;
        return { kind: "created", row: row! } as const;
      });
    },
    async list(projectId, clientId) {
      const rows = await sql<(ClientSecretRow & { client_exists: boolean })[]>`
        select s.id, c.id as client_id, s.secret_hint, s.created_at
        from oauth.clients c
        left join oauth.client_secrets s on s.client_id = c.id
        where c.id = ${clientId} and c.project_id = ${projectId}
        order by s.id`;
      if (rows.length === 0) return undefined;
      return rows.filter((r) => r.id !== null);
    },
    async delete(projectId, clientId, id) {
      const rows = await sql`
        delete from oauth.client_secrets s
        using oauth.clients c
        where s.id = ${id} and s.client_id = ${clientId}
          and c.id = s.client_id and c.project_id = ${projectId}
        returning s.id`;
      return rows.length > 0;
    },
    async clientWithHashes(clientId) {
      const [row] = await sql<ClientWithHashes[]>`
        select c.*,
          coalesce(
            (select array_agg(encode(s.secret_hash, 'hex') order by s.id) from oauth.client_secrets s
             where s.client_id = c.id),
            '{}'::text[]
          ) as hashes
        from oauth.clients c
        where c.id = ${clientId}`;
      return row;
    },
  };
}
