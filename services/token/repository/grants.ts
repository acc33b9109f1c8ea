/**
 * The token schema's grant tables: token families, authorization codes, refresh tokens and the
 * access tokens each family issued (migrations/0002_grants.sql). Codes and refresh tokens are
 * looked up by the SHA-256 of their value. Reading one changes nothing; it is spent only by
 * {@link GrantRepository.issue}, in the transaction that stores what it buys, with a conditional
 * UPDATE, so two concurrent redemptions of one code (or uses of one refresh token) cannot both
 * succeed, and a refused one spends nothing.
 *
 * @module
 */

import type { AuditContext } from "../../../lib/audit/mod.ts";
import { deleteBatch, insertion, type Sql } from "../../../lib/db/mod.ts";
import {
  changesOf,
  type FieldValue,
  installationResource,
  type SecurityEvent,
  securityEventCtes,
} from "../security_events.ts";

/** A family: the tokens descended from one authorization code. */
export interface FamilyRow {
  id: string;
  client_id: string;
  project_id: string;
  installation_id: string;
  created_at: Date;
  revoked_at: Date | null;
  expires_at: Date;
}

/** An authorization code. */
export interface CodeRow {
  code_hash: Uint8Array;
  family_id: string;
  client_id: string;
  redirect_uri: string;
  code_challenge: string;
  scopes: string[];
  account_id: string;
  principal_id: string;
  expires_at: Date;
  redeemed_at: Date | null;
  /**
   * The thumbprint of the DPoP key it must be redeemed with (RFC 9449 10, the request's
   * `dpop_jkt`); null when it is not bound.
   */
  dpop_jkt: string | null;
}

/** A refresh token. */
export interface RefreshRow {
  token_hash: Uint8Array;
  family_id: string;
  client_id: string;
  scopes: string[];
  account_id: string;
  principal_id: string;
  created_at: Date;
  expires_at: Date;
  spent_at: Date | null;
  /**
   * The thumbprint of the DPoP key it is bound to (a public client's, RFC 9449 5), whose proof
   * every use needs; null when it is not bound.
   */
  dpop_jkt: string | null;
}

/**
 * What issuing from a code, a refresh token or a device code spends: the code's hash, the token's,
 * or the device code's (migrations/0007_device_codes.sql).
 */
export type Spent =
  | { codeHash: Uint8Array }
  | { refreshTokenHash: Uint8Array }
  | { deviceCodeHash: Uint8Array };

/**
 * How issuing went: `issued`; or nothing written because what it spends was spent first (by a
 * request that got there before this one) or the family was revoked meanwhile.
 */
export type IssueOutcome = "issued" | "spent" | "revoked";

/** What one redemption or rotation issues into a family. */
export interface Issued {
  /** The access token's id and expiry, recorded so that revoking the family revokes it. */
  access: { jti: string; expiresAt: Date };
  /** The new refresh token. */
  refresh: Omit<RefreshRow, "spent_at">;
}

/**
 * The security event a family's revocation records (../security_events.ts), in its transaction:
 * who, what happened, and fields of its own; the resource (the family's installation) and the
 * count of access tokens put on the revocation list (`revoked_access_tokens`) are added.
 */
export interface RevocationEvent {
  audit: AuditContext;
  result: "code_replayed" | "refresh_token_reused" | "revoked";
  changes: FieldValue[];
}

/** Reads and writes the grant tables. */
export interface GrantRepository {
  /**
   * Stores a new family and its authorization code, with `event` when given (a consent page's
   * Allow), in the same statement.
   */
  createCode(
    family: Omit<FamilyRow, "revoked_at">,
    code: Omit<CodeRow, "redeemed_at">,
    event?: SecurityEvent & { audit: AuditContext },
  ): Promise<void>;
  /** A code, redeemed or not, with its family; undefined when unknown. Changes nothing. */
  findCode(codeHash: Uint8Array): Promise<{ code: CodeRow; family: FamilyRow } | undefined>;
  /** A refresh token, spent or not, with its family; undefined when unknown. Changes nothing. */
  findRefreshToken(
    tokenHash: Uint8Array,
  ): Promise<{ token: RefreshRow; family: FamilyRow } | undefined>;
  /**
   * In one transaction: spends the code or refresh token (only if it is not spent yet), records
   * the access token in the family and stores the new refresh token, extending the family's life
   * to cover both. So a request that is refused, or fails half way, spends nothing; and of two
   * requests with one code or token, exactly one issues. The family's row is locked first, as
   * {@link revokeFamily} locks it: a revocation either sees the new access token or stops this.
   */
  issue(familyId: string, spent: Spent, at: Date, issued: Issued): Promise<IssueOutcome>;
  /**
   * Revokes a family: marks it, and puts every access token it issued that has not expired on the
   * revocation list (and tells the repository's `onRevoked` once it is committed, so that this
   * replica knows at once), with `event` when given, in the same transaction. Revoking a revoked
   * family changes nothing and records nothing. Returns how many access tokens it revoked.
   */
  revokeFamily(familyId: string, at: Date, event?: RevocationEvent): Promise<number>;
  /**
   * Deletes at most `limit` families that expired before `at` (with their codes, refresh tokens
   * and access token records) and at most `limit` revoked tokens past their expiry; returns how
   * many rows of the two it deleted.
   */
  purge(at: Date, limit: number): Promise<number>;
}

/** Thrown inside {@link GrantRepository.issue}'s transaction to roll it back with an outcome. */
class NotIssued extends Error {
  constructor(readonly outcome: Exclude<IssueOutcome, "issued">) {
    super(outcome);
  }
}

/** Creates the repository over a pool. */
export function createGrantRepository(
  sql: Sql,
  onRevoked: (jtis: string[]) => void = () => {},
): GrantRepository {
  return {
    async createCode(family, code, event) {
      // One statement, so one transaction without `begin` and `commit` around it: one round trip
      // instead of four (five with the event, written on its own). The code's foreign key is
      // checked at the statement's end, when the family's row is there.
      const audit = event === undefined
        ? sql``
        : sql`, one as (select 1), ${
          securityEventCtes(sql, event.audit, {
            parent: event.parent,
            resource: event.resource,
            from: sql`one`,
            changes: changesOf(sql, event.changes),
            result: event.result,
          })
        }`;
      await sql`
        with family as (insert into token.families ${insertion(sql, family)})${audit}
        insert into token.authorization_codes ${insertion(sql, code)}`;
    },

    async findCode(codeHash) {
      const [code] = await sql<CodeRow[]>`
        select * from token.authorization_codes where code_hash = ${codeHash}`;
      if (!code) return undefined;
      const [family] = await sql<FamilyRow[]>`
        select * from token.families where id = ${code.family_id}`;
      // Purged between the two reads (an expired family is deleted with its codes): unknown now.
      if (!family) return undefined;
      return { code, family };
    },

    async findRefreshToken(tokenHash) {
      const [token] = await sql<RefreshRow[]>`
        select * from token.refresh_tokens where token_hash = ${tokenHash}`;
      if (!token) return undefined;
      const [family] = await sql<FamilyRow[]>`
        select * from token.families where id = ${token.family_id}`;
      // Purged between the two reads (an expired family is deleted with its tokens): unknown now.
      if (!family) return undefined;
      return { token, family };
    },

    async issue(familyId, spent, at, { access, refresh }) {
      const until = new Date(Math.max(access.expiresAt.getTime(), refresh.expires_at.getTime()));
      try {
        await sql.begin(async (tx) => {
          const [live] = await tx`
            update token.families set expires_at = greatest(expires_at, ${until})
            where id = ${familyId} and revoked_at is null
            returning id`;
          if (!live) throw new NotIssued("revoked");
          const [spends] = "codeHash" in spent
            ? await tx`
              update token.authorization_codes set redeemed_at = ${at}
              where code_hash = ${spent.codeHash} and family_id = ${familyId}
                and redeemed_at is null
              returning family_id`
            : "deviceCodeHash" in spent
            ? await tx`
              update token.device_codes set redeemed_at = ${at}
              where device_code_hash = ${spent.deviceCodeHash} and family_id = ${familyId}
                and redeemed_at is null
              returning family_id`
            : await tx`
              update token.refresh_tokens set spent_at = ${at}
              where token_hash = ${spent.refreshTokenHash} and family_id = ${familyId}
                and spent_at is null
              returning family_id`;
          if (!spends) throw new NotIssued("spent");
          await tx`
            insert into token.family_access_tokens (jti, family_id, expires_at)
            values (${access.jti}, ${familyId}, ${access.expiresAt})`;
          await tx`insert into token.refresh_tokens ${insertion(sql, refresh)}`;
        });
        return "issued";
      } catch (error) {
        if (error instanceof NotIssued) return error.outcome;
        throw error;
      }
    },

    async revokeFamily(familyId, at, event) {
      const revoked = await sql.begin(async (tx) => {
        // Two statements: the second reads the family's access tokens after the first holds the
        // family's row (GrantRepository.issue locks it too), so it sees every one issued.
        const [family] = await tx<Pick<FamilyRow, "project_id" | "installation_id">[]>`
          update token.families set revoked_at = ${at}
          where id = ${familyId} and revoked_at is null
          returning project_id, installation_id`;
        if (!family) return [];
        // The event, when there is one, is two more CTEs of the statement that revokes the tokens.
        const q = tx as unknown as Sql;
        const audit = event === undefined
          ? tx``
          : tx`, one as (select 1), ${
            securityEventCtes(q, event.audit, {
              parent: family.project_id,
              resource: installationResource(family.project_id, family.installation_id),
              from: tx`one`,
              changes: changesOf(
                q,
                event.changes,
                tx`jsonb_build_array(jsonb_build_object(
                'field', 'revoked_access_tokens', 'new', (select count(*) from revoked)))`,
              ),
              result: event.result,
            })
          }`;
        return await tx<{ jti: string }[]>`
          with revoked as (
            insert into token.revoked_tokens (jti, expires_at, revoked_at)
            select jti, expires_at, ${at} from token.family_access_tokens
            where family_id = ${familyId} and expires_at > ${at}
            on conflict (jti) do nothing
            returning jti::text
          )${audit}
          select jti from revoked`;
      });
      const jtis = (revoked as { jti: string }[]).map((r) => r.jti);
      onRevoked(jtis);
      return jtis.length;
    },

    async purge(at, limit) {
      // A family goes with its codes, refresh tokens and access token records (on delete cascade).
      return await deleteBatch(sql, "token.families", sql`expires_at < ${at}`, limit) +
        await deleteBatch(sql, "token.revoked_tokens", sql`expires_at < ${at}`, limit);
    },
  };
}
