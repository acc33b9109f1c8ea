/**
 * The signing keys of access tokens: Ed25519 key pairs (JWS `EdDSA`, RFC 8037) kept in
 * `token.signing_keys`, the private half sealed with AES-256-GCM under a key derived from
 * TOKEN_KEY_ENCRYPTION_KEY.
 *
 * Why EdDSA and not ES256: Deno's ECDSA P-256 (WebCrypto and node:crypto alike) took ~630 µs to
 * sign and ~680 µs to verify on our 2-core machines, against ~57 µs and ~52 µs for Ed25519
 * through WebCrypto; with ES256 a signature was most of a grant's CPU, and a verification most of
 * an introspection's. Keys of an earlier algorithm (ES256) are still read and verified with while
 * they are published.
 *
 * The sealing key can change without a signing key being lost: the old secret goes to
 * TOKEN_KEY_ENCRYPTION_PREVIOUS_KEYS, a private key that only a previous secret opens is opened
 * with it and sealed again under the current one (the row is updated, unless another replica did
 * it first), and a key no configured secret opens is an error that names it.
 *
 * Rotation: two keys are always published, the one that signs now and the next one, whose period
 * starts when the current one's ends. A key therefore appears in the JWK Set a whole rotation
 * period before it signs anything (so no verifier's cached set lacks it), and stays there after its
 * period until the last token it signed has expired. Replicas agree through the table: whichever
 * finds a key missing creates it under an advisory lock, and each replica signs with the key whose
 * period holds now.
 *
 * Each replica keeps the keys in memory, and Postgres keeps them honest: every insertion, deletion
 * or change of a key (but for sealing it again) notifies `token_signing_keys` as it commits
 * (migrations/0017_signing_keys_feed.sql), and the ring follows the channel
 * (lib/db/change_feed.ts). A notification, or listening again after a lost connection, has the
 * table read again (and a missing current or next key created), and until that read is done, or
 * while the feed is not fresh, {@link KeyRing.ready} reads the table before answering. So a key
 * deleted or changed by SQL (an operator deleting a compromised key) stops verifying, and one
 * created starts, in every replica within a second. Without a feed (the embedded database's single
 * connection leaves no room for a listener) the table is read again on use once what was read is
 * a second old. Each replica also reads it each minute ({@link KeyRing.refresh}), which creates
 * the next key once the current one has started signing.
 *
 * @module
 */

import { calculateJwkThumbprint, type JWK } from "jose";
import type { TransactionSql } from "postgres";
import { type ChangeFeed, type FollowOptions, propagationMs, type Sql } from "../../lib/db/mod.ts";

/** The pool, or a transaction of it. */
type Queries = Sql | TransactionSql;

/** What one key is, as the service uses it. */
export interface SigningKey {
  /** The key id (RFC 7638 thumbprint of the public key). */
  kid: string;
  /** Its JWS algorithm: `EdDSA`, or `ES256` for keys made before. */
  alg: string;
  /** The public JWK, with `kid`, `alg` and `use`. */
  publicJwk: JWK;
  /** The private key, for signing (undefined for keys that no longer sign). */
  privateKey: CryptoKey | undefined;
  /** The public key, for verifying. */
  publicKey: CryptoKey;
  /** When it starts and stops signing, and stops being published (ms since the epoch). */
  signsFrom: number;
  signsUntil: number;
  publishedUntil: number;
}

/** Options of {@link createKeyRing}. */
export interface KeyRingOptions {
  /** The pool. */
  sql: Sql;
  /** The secret the private keys are sealed under (at least 32 characters). */
  encryptionKey: string;
  /** Earlier secrets, which private keys may still be sealed under (each sealed again). */
  previousEncryptionKeys?: readonly string[] | undefined;
  /** Told of each private key sealed again under the current secret. */
  onResealed?: (kid: string) => void;
  /** How long each key signs, in ms. */
  rotationMs: number;
  /** The longest lifetime of a token a key signs, in ms (it stays published this long after). */
  tokenLifetimeMs: number;
  /** The clock. */
  now: () => number;
  /**
   * Follows the keys' change channel (lib/db/change_feed.ts's followChanges, bound); without it,
   * the table is read again on use once what was read is a second old.
   */
  follow?: ((options: FollowOptions) => ChangeFeed) | undefined;
  /** The monotonic clock (ms) the age of a read is measured on (default `performance.now()`). */
  monotonic?: () => number;
}

/** The keys, read from the table (see the module's header). */
export interface KeyRing {
  /** Makes sure the current and the next key exist, and loads every published key. */
  refresh(): Promise<void>;
  /**
   * Resolves once the keys in memory may be used: at once when they were read after the last
   * change arrived and the feed is fresh, else when a refresh begun since has succeeded. Call it
   * before each use of {@link signing}, {@link byKid} or {@link jwks}.
   */
  ready(): Promise<void>;
  /** The key that signs now. Throws when none has been loaded. */
  signing(): SigningKey;
  /** A published key by id, for verifying. */
  byKid(kid: string): SigningKey | undefined;
  /** The JWK Set of the published keys (public parts only). */
  jwks(): { keys: JWK[] };
  /** Stops following the feed. */
  close(): Promise<void>;
}

const lockId = 0x746f6b656e; // "token": one advisory lock for key creation
/** The algorithm new keys are made for. */
const alg = "EdDSA";
/** WebCrypto's parameters of each JWS algorithm a published key may have. */
const algorithms: Record<string, EcKeyImportParams | Algorithm> = {
  EdDSA: { name: "Ed25519" },
  ES256: { name: "ECDSA", namedCurve: "P-256" },
};

/**
 * A key derived from the configured secret (HKDF-SHA-256), one per purpose named by `info`: the
 * AES-256-GCM key that seals private keys here, the consent page's CSRF key elsewhere.
 */
export async function deriveFromSecret(
  secret: string,
  options: {
    info: string;
    salt?: Uint8Array<ArrayBuffer>;
    key: AesKeyGenParams | HmacKeyGenParams;
    usages: KeyUsage[];
  },
): Promise<CryptoKey> {
  const material = await crypto.subtle.importKey(
    "raw",
    new TextEncoder().encode(secret),
    "HKDF",
    false,
    ["deriveKey"],
  );
  return await crypto.subtle.deriveKey(
    {
      name: "HKDF",
      hash: "SHA-256",
      salt: options.salt ?? new Uint8Array(0),
      info: new TextEncoder().encode(options.info),
    },
    material,
    options.key,
    false,
    options.usages,
  );
}

/** Derives the AES-256-GCM key that seals private keys from the configured secret. */
function sealingKey(secret: string): Promise<CryptoKey> {
  return deriveFromSecret(secret, {
    info: "registry token signing keys v1",
    salt: new Uint8Array(32),
    key: { name: "AES-GCM", length: 256 },
    usages: ["encrypt", "decrypt"],
  });
}

/** Seals a private JWK: IV, then ciphertext and tag; the kid is the additional data. */
export async function seal(key: CryptoKey, kid: string, jwk: JWK): Promise<Uint8Array> {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const sealed = await crypto.subtle.encrypt(
    { name: "AES-GCM", iv, additionalData: new TextEncoder().encode(kid) },
    key,
    new TextEncoder().encode(JSON.stringify(jwk)),
  );
  const out = new Uint8Array(12 + sealed.byteLength);
  out.set(iv);
  out.set(new Uint8Array(sealed), 12);
  return out;
}

/** Opens what {@link seal} sealed; throws when the key or the kid is not the one it was sealed with. */
export async function unseal(
  key: CryptoKey,
  kid: string,
  sealed: Uint8Array<ArrayBuffer>,
): Promise<JWK> {
  const plain = await crypto.subtle.decrypt(
    {
      name: "AES-GCM",
      iv: sealed.subarray(0, 12),
      additionalData: new TextEncoder().encode(kid),
    },
    key,
    sealed.subarray(12),
  );
  return JSON.parse(new TextDecoder().decode(plain));
}

interface KeyRow {
  kid: string;
  alg: string;
  public_jwk: JWK;
  private_jwk_sealed: Uint8Array<ArrayBuffer>;
  signs_from: Date;
  signs_until: Date;
  published_until: Date;
}

/** Creates the key ring; call {@link KeyRing.refresh} before the first use. */
export function createKeyRing(options: KeyRingOptions): KeyRing {
  const { sql, rotationMs, tokenLifetimeMs, now } = options;
  let sealer: Promise<CryptoKey> | undefined;
  let previousSealers: Promise<CryptoKey>[] | undefined;
  let keys: SigningKey[] = [];
  const byKid = new Map<string, SigningKey>();
  /**
   * Imported keys by kid, with the public JWK they were imported from: a key is unsealed once per
   * process. Its times are the row's at each read (SQL may change them).
   */
  const opened = new Map<
    string,
    { publicJwk: string; publicKey: CryptoKey; privateKey: CryptoKey | undefined }
  >();

  async function createKey(tx: Queries, signsFrom: number): Promise<void> {
    const pair = await crypto.subtle.generateKey(algorithms[alg]!, true, [
      "sign",
      "verify",
    ]) as CryptoKeyPair;
    const { x, crv, kty } = await crypto.subtle.exportKey("jwk", pair.publicKey);
    const publicJwk: JWK = { kty: kty!, crv: crv!, x: x! };
    const kid = await calculateJwkThumbprint(publicJwk);
    const privateJwk = await crypto.subtle.exportKey("jwk", pair.privateKey) as JWK;
    const sealed = await seal(
      await (sealer ??= sealingKey(options.encryptionKey)),
      kid,
      privateJwk,
    );
    const signsUntil = signsFrom + rotationMs;
    await tx`
      insert into token.signing_keys
        (kid, alg, public_jwk, private_jwk_sealed, created_at, signs_from, signs_until,
         published_until)
      values (${kid}, ${alg}, ${tx.json({ ...publicJwk, kid, alg, use: "sig" } as never)},
              ${sealed}, ${new Date(now())}, ${new Date(signsFrom)}, ${new Date(signsUntil)},
              ${new Date(signsUntil + tokenLifetimeMs)})`;
  }

  /**
   * Makes sure a key signs now (the waiting next key, else a new one) and one follows it (a new
   * one, published a whole period before it signs).
   */
  async function ensure(): Promise<void> {
    const at = now();
    const missing = async (tx: Queries) => {
      const [current] = await tx<{ signs_until: Date }[]>`
        select signs_until from token.signing_keys
        where signs_from <= ${new Date(at)} and signs_until > ${new Date(at)}
        order by signs_from desc limit 1`;
      const currentUntil = current?.signs_until.getTime();
      const [next] = currentUntil === undefined ? [] : await tx`
        select 1 from token.signing_keys where signs_from >= ${new Date(currentUntil)} limit 1`;
      return { currentUntil, hasNext: next !== undefined };
    };
    const first = await missing(sql);
    if (first.currentUntil !== undefined && first.hasNext) return;
    await sql.begin(async (tx) => {
      await tx`select pg_advisory_xact_lock(${lockId})`;
      let state = await missing(tx); // another replica may have created them meanwhile
      if (state.currentUntil === undefined) {
        // None signs now (deleted or ended by SQL, or the first start): the next key, published
        // since it was made, signs from now to the end of its own period, where verifiers that
        // keep the JWK Set may already have it; a key is made only when none is waiting.
        const [promoted] = await tx`
          update token.signing_keys set signs_from = ${new Date(at)}
          where kid = (
            select kid from token.signing_keys where signs_from > ${new Date(at)}
            order by signs_from limit 1)
          returning kid`;
        if (!promoted) await createKey(tx, at);
        state = await missing(tx);
      }
      if (!state.hasNext) await createKey(tx, state.currentUntil!);
      await tx`
        delete from token.signing_keys where published_until < ${new Date(at - 86_400_000)}`;
    });
  }

  /**
   * The private JWK of a row: opened with the current secret, else with a previous one, and then
   * sealed again under the current secret.
   */
  async function open(row: KeyRow): Promise<JWK> {
    const current = await (sealer ??= sealingKey(options.encryptionKey));
    try {
      return await unseal(current, row.kid, row.private_jwk_sealed);
    } catch (error) {
      previousSealers ??= (options.previousEncryptionKeys ?? []).map(sealingKey);
      for (const previous of previousSealers) {
        let jwk: JWK;
        try {
          jwk = await unseal(await previous, row.kid, row.private_jwk_sealed);
        } catch {
          continue;
        }
        const [resealed] = await sql`
          update token.signing_keys set private_jwk_sealed = ${await seal(current, row.kid, jwk)}
          where kid = ${row.kid} and private_jwk_sealed = ${row.private_jwk_sealed}
          returning kid`;
        if (resealed) options.onResealed?.(row.kid);
        return jwk;
      }
      throw new Error(
        `Cannot open signing key ${row.kid}: it is sealed under neither TOKEN_KEY_ENCRYPTION_KEY ` +
          "nor one of TOKEN_KEY_ENCRYPTION_PREVIOUS_KEYS",
        { cause: error },
      );
    }
  }

  async function load(): Promise<void> {
    const at = new Date(now());
    const rows = await sql<KeyRow[]>`
      select kid, alg, public_jwk, private_jwk_sealed, signs_from, signs_until, published_until
      from token.signing_keys where published_until > ${at}
      order by signs_from`;
    const fresh: SigningKey[] = [];
    for (const row of rows) {
      const params = algorithms[row.alg];
      if (!params) continue; // an algorithm this version does not know: not published by it
      const signsUntil = row.signs_until.getTime();
      const publicJwk = JSON.stringify(row.public_jwk);
      let imported = opened.get(row.kid);
      if (imported?.publicJwk !== publicJwk) {
        imported = {
          publicJwk,
          publicKey: await crypto.subtle.importKey("jwk", row.public_jwk, params, true, ["verify"]),
          privateKey: undefined,
        };
      }
      // Only keys that still sign are unsealed.
      if (!imported.privateKey && signsUntil > at.getTime()) {
        imported.privateKey = await crypto.subtle.importKey(
          "jwk",
          await open(row),
          params,
          false,
          ["sign"],
        );
      }
      opened.set(row.kid, imported);
      fresh.push({
        kid: row.kid,
        alg: row.alg,
        publicJwk: row.public_jwk,
        privateKey: signsUntil > at.getTime() ? imported.privateKey : undefined,
        publicKey: imported.publicKey,
        signsFrom: row.signs_from.getTime(),
        signsUntil,
        publishedUntil: row.published_until.getTime(),
      });
    }
    keys = fresh;
    byKid.clear();
    for (const key of keys) byKid.set(key.kid, key);
    for (const kid of opened.keys()) if (!byKid.has(kid)) opened.delete(kid);
  }

  async function refresh(): Promise<void> {
    await ensure();
    await load();
  }

  const monotonic = options.monotonic ?? (() => performance.now());
  /** Changes that arrived (notifications, and listening again). */
  let changes = 0;
  /** The last refresh that succeeded: how many changes had arrived when it began, and when. */
  let loaded: { changes: number; at: number } | undefined;
  /** The refresh under way, and how many changes had arrived when it was asked for. */
  let underWay: { changes: number; done: Promise<void> } | undefined;

  /**
   * A refresh begun after the last change arrived: the one under way, or a new one after it (a new
   * one in any case when `anew`).
   */
  function reread(anew = false): Promise<void> {
    if (!anew && underWay && underWay.changes === changes) return underWay.done;
    const previous = underWay?.done;
    const seen = changes;
    const done = (async () => {
      await previous?.catch(() => {}); // one at a time, so that an older read never lands last
      const at = monotonic();
      await refresh();
      if (!loaded || seen >= loaded.changes) loaded = { changes: seen, at };
    })();
    const mine = { changes: seen, done };
    underWay = mine;
    done.catch(() => {}).finally(() => {
      if (underWay === mine) underWay = undefined;
    });
    return done;
  }

  const feed = options.follow?.({
    onChange() {
      changes++;
      reread().catch(() => {}); // failed: the next use reads the table
    },
    onReset() {
      changes++;
      reread().catch(() => {});
    },
  });

  /** Whether the keys in memory are as the table was at most a second ago. */
  const current = () =>
    loaded !== undefined && loaded.changes === changes &&
    (feed ? feed.fresh() : monotonic() - loaded.at < propagationMs);

  return {
    refresh: () => reread(true),
    ready() {
      return current() ? Promise.resolve() : reread();
    },
    signing() {
      const at = now();
      const key = keys.findLast((k) => k.signsFrom <= at && at < k.signsUntil && k.privateKey);
      if (!key) throw new Error("no signing key is loaded");
      return key;
    },
    byKid(kid) {
      const key = byKid.get(kid);
      return key && key.publishedUntil > now() ? key : undefined;
    },
    jwks() {
      const at = now();
      return { keys: keys.filter((k) => k.publishedUntil > at).map((k) => k.publicJwk) };
    },
    async close() {
      await feed?.close();
    },
  };
}
