/**
 * The token schema's grant tables: token families, authorization codes, refresh tokens and the
 * access tokens each family issued (migrations/0002_grants.sql). Codes and refresh tokens are
 * looked up by the SHA-256 of their value; every state change is one conditional UPDATE, so two
 * concurrent redemptions of one code (or uses of one refresh token) cannot both succeed.
 *
 * @module
 */

import type { Sql } from "../../../lib/db/mod.ts";

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
}

/** What redeeming a code found. */
export type Redemption =
  | { kind: "redeemed"; code: CodeRow; family: FamilyRow }
  | { kind: "replayed"; code: CodeRow }
  | { kind: "unknown" };

/** What using a refresh token found. */
export type RefreshUse =
  | { kind: "used"; token: RefreshRow; family: FamilyRow }
  | { kind: "spent"; token: RefreshRow }
  | { kind: "unknown" };

/** Reads and writes the grant tables. */
export interface GrantRepository {
  /** Stores a new family and its authorization code. */
  createCode(
    family: Omit<FamilyRow, "revoked_at">,
    code: Omit<CodeRow, "redeemed_at">,
  ): Promise<void>;
  /**
   * Marks a code redeemed, once: `redeemed` the first time (with its family), `replayed` after.
   * An expired or revoked code is redeemed too (and refused by the caller), so it cannot be tried
   * again.
   */
  redeemCode(codeHash: Uint8Array, at: Date): Promise<Redemption>;
  /** Stores a refresh token of a family and extends the family's life to cover it. */
  addRefreshToken(token: Omit<RefreshRow, "spent_at">): Promise<void>;
  /** Spends a refresh token, once: `used` the first time (with its family), `spent` after. */
  useRefreshToken(tokenHash: Uint8Array, at: Date): Promise<RefreshUse>;
  /** A refresh token, spent or not, with its family; undefined when unknown. */
  findRefreshToken(
    tokenHash: Uint8Array,
  ): Promise<{ token: RefreshRow; family: FamilyRow } | undefined>;
  /**
   * Records an access token a family issued (so that revoking the family revokes it), and extends
   * the family's life to cover it.
   */
  addAccessToken(jti: string, familyId: string, expiresAt: Date): Promise<void>;
  /**
   * Revokes a family: marks it, and puts every access token it issued that has not expired on the
   * revocation list. Revoking a revoked family changes nothing.
   */
  revokeFamily(familyId: string, at: Date): Promise<void>;
  /** Deletes what expired before `at`. */
  purge(at: Date): Promise<void>;
}

/** Creates the repository over a pool. */
export function createGrantRepository(sql: Sql): GrantRepository {
  return {
    async createCode(family, code) {
      await sql.begin(async (tx) => {
        await tx`insert into token.families ${tx(family)}`;
        await tx`insert into token.authorization_codes ${tx(code)}`;
      });
    },

    async redeemCode(codeHash, at) {
      const [code] = await sql<CodeRow[]>`
        update token.authorization_codes set redeemed_at = ${at}
        where code_hash = ${codeHash} and redeemed_at is null
        returning *`;
      if (code) {
        const [family] = await sql<FamilyRow[]>`
          select * from token.families where id = ${code.family_id}`;
        return { kind: "redeemed", code, family: family! };
      }
      const [used] = await sql<CodeRow[]>`
        select * from token.authorization_codes where code_hash = ${codeHash}`;
      return used ? { kind: "replayed", code: used } : { kind: "unknown" };
    },

    async addRefreshToken(token) {
      await sql.begin(async (tx) => {
        await tx`insert into token.refresh_tokens ${tx(token)}`;
        await tx`
          update token.families set expires_at = greatest(expires_at, ${token.expires_at})
          where id = ${token.family_id}`;
      });
    },

    async useRefreshToken(tokenHash, at) {
      const [token] = await sql<RefreshRow[]>`
        update token.refresh_tokens set spent_at = ${at}
        where token_hash = ${tokenHash} and spent_at is null
        returning *`;
      if (token) {
        const [family] = await sql<FamilyRow[]>`
          select * from token.families where id = ${token.family_id}`;
        return { kind: "used", token, family: family! };
      }
      const [spent] = await sql<RefreshRow[]>`
        select * from token.refresh_tokens where token_hash = ${tokenHash}`;
      return spent ? { kind: "spent", token: spent } : { kind: "unknown" };
    },

    async findRefreshToken(tokenHash) {
      const [token] = await sql<RefreshRow[]>`
        select * from token.refresh_tokens where token_hash = ${tokenHash}`;
      if (!token) return undefined;
      const [family] = await sql<FamilyRow[]>`
        select * from token.families where id = ${token.family_id}`;
      return { token, family: family! };
    },

    async addAccessToken(jti, familyId, expiresAt) {
      await sql.begin(async (tx) => {
        await tx`
          insert into token.family_access_tokens (jti, family_id, expires_at)
          values (${jti}, ${familyId}, ${expiresAt})`;
        await tx`
          update token.families set expires_at = greatest(expires_at, ${expiresAt})
          where id = ${familyId}`;
      });
    },

    async revokeFamily(familyId, at) {
      await sql.begin(async (tx) => {
        const [family] = await tx`
          update token.families set revoked_at = ${at}
          where id = ${familyId} and revoked_at is null
          returning id`;
        if (!family) return;
        await tx`
          insert into token.revoked_tokens (jti, expires_at, revoked_at)
          select jti, expires_at, ${at} from token.family_access_tokens
          where family_id = ${familyId} and expires_at > ${at}
          on conflict (jti) do nothing`;
      });
    },

    async purge(at) {
      // A family goes with its codes, refresh tokens and access token records (on delete cascade).
      await sql`delete from token.families where expires_at < ${at}`;
      await sql`delete from token.revoked_tokens where expires_at < ${at}`;
    },
  };
}
