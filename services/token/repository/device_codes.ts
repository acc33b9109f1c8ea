/**
 * The device authorization grant's tables (migrations/0007_device_codes.sql): device codes, and
 * the counts of wrong user codes (RFC 8628 5.1) that every replica shares. A device code is looked
 * up by the SHA-256 of its value, and by that of its normalised user code; polling it (the token
 * endpoint) locks its row, so that two polls at once see each other's time (`slow_down`).
 *
 * @module
 */

import type { AuditContext } from "../../../lib/audit/mod.ts";
import { deleteBatch, insertion, type Sql } from "../../../lib/db/mod.ts";
import { changesOf, securityEventCtes } from "../security_events.ts";
import type { FamilyRow } from "./grants.ts";

/** A device code. */
export interface DeviceCodeRow {
  device_code_hash: Uint8Array;
  user_code_hash: Uint8Array;
  client_id: string;
  project_id: string;
  scopes: string[];
  created_at: Date;
  expires_at: Date;
  interval_seconds: number;
  last_polled_at: Date;
  status: "pending" | "approved" | "denied";
  decided_at: Date | null;
  family_id: string | null;
  account_id: string | null;
  principal_id: string | null;
  redeemed_at: Date | null;
}

/** What a poll found (the row is this client's; else `unknown`). */
export type Poll =
  | { kind: "unknown" }
  | { kind: "expired" }
  | { kind: "redeemed"; familyId: string | null }
  | { kind: "slow_down" }
  | { kind: "ready"; row: DeviceCodeRow; family: FamilyRow | undefined };

/** The guessing limit's numbers. */
export interface GuessLimit {
  /** Wrong codes allowed within `windowMs` from one key before it is refused. */
  maxFailures: number;
  windowMs: number;
  /** How long a key is then refused, every code, right or wrong. */
  coolDownMs: number;
}

/** Reads and writes device codes. */
export interface DeviceCodeRepository {
  /** Stores a new device code; false when its user code is taken (make another). */
  create(
    row: Omit<
      DeviceCodeRow,
      "status" | "decided_at" | "family_id" | "account_id" | "principal_id" | "redeemed_at"
    >,
  ): Promise<boolean>;
  /**
   * A poll of the token endpoint at `at` by `clientId`: locks the row, and unless it is unknown to
   * this client, spent or expired, records the poll; one sooner than the interval after the last
   * (or the issue) adds 5 seconds to the interval and is `slow_down` (RFC 8628 3.5).
   */
  poll(deviceCodeHash: Uint8Array, clientId: string, at: Date): Promise<Poll>;
  /**
   * A user code typed on the verification page, counted against `keys` (the session's and the
   * address's hashes), serialised per key: refused (`blocked`) while any key is cooling down;
   * else the pending, unexpired code, or undefined after counting a failure for every key (the
   * `maxFailures`-th within the window starts the cool-down).
   */
  attempt(
    userCodeHash: Uint8Array | undefined,
    keys: Uint8Array[],
    at: Date,
    limit: GuessLimit,
  ): Promise<DeviceCodeRow | "blocked" | undefined>;
  /**
   * Approves a pending, unexpired code for the installation `consent` records: its family is
   * made, for the tokens to come. The code's row is held (locked) from before `consent` is called
   * until the approval commits, so the code is won before anything is recorded: another decision
   * of it (a Deny in another tab, a second Allow) waits, then finds it decided; one that decided
   * first leaves nothing pending, and `consent` is not called. False then, or when it expired.
   * An error of `consent` leaves the code pending. With `audit`, the consent's security event
   * (`allowed`, ../security_events.ts) is written by the statement that decides it.
   */
  approve(
    userCodeHash: Uint8Array,
    at: Date,
    consent: () => Promise<{ installationId: string; accountId: string; principalId: string }>,
    audit?: AuditContext,
  ): Promise<boolean>;
  /**
   * Denies a pending, unexpired code; false when it was not. With `audit`, the security event
   * (`denied`) is written by the statement that denies it, and only when it did.
   */
  deny(userCodeHash: Uint8Array, at: Date, audit?: AuditContext): Promise<boolean>;
  /** Whether the code was decided (approved or denied); read without counting anything. */
  decided(userCodeHash: Uint8Array): Promise<boolean>;
  /**
   * Deletes at most `batch` each of the codes expired an hour before `at`, the failure counts and
   * the cool-downs that are over; returns how many rows in all.
   */
  purge(at: Date, limit: GuessLimit, batch: number): Promise<number>;
}

/** An advisory lock id of a key (its first 8 bytes, as a signed bigint's text). */
function lockId(key: Uint8Array): string {
  return new DataView(key.buffer, key.byteOffset, 8).getBigInt64(0).toString();
}

/**
 * The CTEs of a device code's decision (its consent): the event of the rows of the CTE `decided`
 * (`project_id`, `client_id`, `scopes`), about the client, with the scopes and, for an approval,
 * the installation that holds the consent.
 */
function decisionEvent(
  sql: Sql,
  audit: AuditContext | undefined,
  result: "allowed" | "denied",
  installationId?: string,
) {
  if (audit === undefined) return sql``;
  return sql`, ${
    securityEventCtes(sql, audit, {
      parent: sql`decided.project_id`,
      resource: sql`'projects/' || decided.project_id || '/clients/' || decided.client_id`,
      from: sql`decided`,
      changes: changesOf(
        sql,
        installationId === undefined ? [] : [{ field: "installation_id", new: installationId }],
        sql`jsonb_build_array(jsonb_build_object('field', 'scopes', 'new', to_jsonb(decided.scopes)))`,
      ),
      result,
    })
  }`;
}

/** Creates the repository over a pool. */
export function createDeviceCodeRepository(sql: Sql): DeviceCodeRepository {
  return {
    async create(row) {
      const inserted = await sql`
        insert into token.device_codes ${insertion(sql, row)}
        on conflict (user_code_hash) do nothing
        returning client_id`;
      return inserted.length === 1;
    },

    async poll(hash, clientId, at) {
      // One statement (devices poll it every few seconds): the row is locked, read and, when it
      // is this client's, live and unspent, its poll recorded, in one round trip. A poll that
      // waited for the lock sees the row as the other poll left it.
      const [row] = await sql<DeviceCodeRow[]>`
        with old as (
          select * from token.device_codes where device_code_hash = ${hash} for update
        ), polled as (
          update token.device_codes d
          set last_polled_at = ${at},
            interval_seconds = d.interval_seconds + case
              when old.status = 'pending'
                and ${at}::timestamptz < old.last_polled_at + old.interval_seconds * interval '1 second'
              then 5 else 0 end
          from old
          where d.device_code_hash = old.device_code_hash and old.client_id = ${clientId}
            and old.redeemed_at is null and old.expires_at > ${at}
          returning 1
        )
        select * from old`;
      if (!row || row.client_id !== clientId) return { kind: "unknown" };
      // Expired before redeemed, as node-oidc-provider checks: a stale code is no replay.
      if (row.expires_at.getTime() <= at.getTime()) return { kind: "expired" };
      if (row.redeemed_at !== null) return { kind: "redeemed", familyId: row.family_id };
      // slow_down is "a variant of authorization_pending" (RFC 8628 3.5): a request the user has
      // decided on is answered as decided, however soon it is polled.
      const tooSoon = at.getTime() < row.last_polled_at.getTime() + row.interval_seconds * 1000;
      if (tooSoon && row.status === "pending") return { kind: "slow_down" };
      const [family] = row.family_id === null ? [] : await sql<FamilyRow[]>`
        select * from token.families where id = ${row.family_id}`;
      return { kind: "ready", row, family };
    },

    async attempt(userCodeHash, keys, at, limit) {
      const ordered = keys.map(lockId).sort();
      return await sql.begin(async (tx) => {
        for (const id of ordered) await tx`select pg_advisory_xact_lock(${id}::bigint)`;
        for (const key of keys) {
          const [blocked] = await tx`
            select 1 from token.user_code_blocks where key = ${key} and until > ${at}`;
          if (blocked) return "blocked" as const;
        }
        if (userCodeHash !== undefined) {
          const [row] = await tx<DeviceCodeRow[]>`
            select * from token.device_codes
            where user_code_hash = ${userCodeHash} and status = 'pending' and expires_at > ${at}`;
          if (row) return row;
        }
        const since = new Date(at.getTime() - limit.windowMs);
        for (const key of keys) {
          await tx`insert into token.user_code_failures (key, at) values (${key}, ${at})`;
          const [{ n }] = await tx<{ n: number }[]>`
            select count(*)::int as n from token.user_code_failures
            where key = ${key} and at > ${since}` as unknown as [{ n: number }];
          if (n >= limit.maxFailures) {
            const until = new Date(at.getTime() + limit.coolDownMs);
            await tx`
              insert into token.user_code_blocks (key, until) values (${key}, ${until})
              on conflict (key) do update set until = excluded.until`;
          }
        }
        return undefined;
      });
    },

    async approve(userCodeHash, at, consent, audit) {
      return await sql.begin(async (tx) => {
        const [row] = await tx<DeviceCodeRow[]>`
          select * from token.device_codes
          where user_code_hash = ${userCodeHash} and status = 'pending' and expires_at > ${at}
          for update`;
        if (!row) return false;
        // Recorded while the row is held: only the decision that wins the code records a consent.
        // Should this transaction fail after the registry committed (a lost connection), the
        // consent stays and the code stays pending: a consent the user did give, on this page.
        const holder = await consent();
        const familyId = crypto.randomUUID();
        await tx`
          insert into token.families
            (id, client_id, project_id, installation_id, created_at, expires_at)
          values (${familyId}, ${row.client_id}, ${row.project_id}, ${holder.installationId},
            ${at}, ${row.expires_at})`;
        await tx`
          with decided as (
            update token.device_codes
            set status = 'approved', decided_at = ${at}, family_id = ${familyId},
              account_id = ${holder.accountId}, principal_id = ${holder.principalId}
            where device_code_hash = ${row.device_code_hash}
            returning project_id, client_id, scopes
          )${decisionEvent(tx as unknown as Sql, audit, "allowed", holder.installationId)}
          select 1 from decided`;
        return true;
      });
    },

    async deny(userCodeHash, at, audit) {
      const denied = await sql`
        with decided as (
          update token.device_codes set status = 'denied', decided_at = ${at}
          where user_code_hash = ${userCodeHash} and status = 'pending' and expires_at > ${at}
          returning project_id, client_id, scopes
        )${decisionEvent(sql, audit, "denied")}
        select client_id from decided`;
      return denied.length === 1;
    },

    async decided(userCodeHash) {
      const [row] = await sql`
        select 1 from token.device_codes
        where user_code_hash = ${userCodeHash} and status <> 'pending'`;
      return row !== undefined;
    },

    async purge(at, limit, batch) {
      const codesBefore = new Date(at.getTime() - 3_600_000);
      const failuresBefore = new Date(at.getTime() - limit.windowMs);
      return await deleteBatch(sql, "token.device_codes", sql`expires_at < ${codesBefore}`, batch) +
        await deleteBatch(sql, "token.user_code_failures", sql`at < ${failuresBefore}`, batch) +
        await deleteBatch(sql, "token.user_code_blocks", sql`until < ${at}`, batch);
    },
  };
}
