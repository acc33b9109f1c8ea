/**
 * Resource identifiers: TypeIDs (`cli_01jd3m6v4ffe0a3k2v7y8q9h1c`), a type prefix and the 26
 * character Crockford base32 form of a UUIDv7. They are opaque to API users, sort by creation
 * time as plain strings, and are stored in Postgres as `uuid` (16 bytes, byte order = time order).
 *
 * @module
 */

const alphabet = "0123456789abcdefghjkmnpqrstvwxyz";
const decodeTable = new Int8Array(128).fill(-1);
for (let i = 0; i < alphabet.length; i++) decodeTable[alphabet.charCodeAt(i)] = i;

/**
 * Returns a UUIDv7 (RFC 9562) generator reading the time from `now` (Unix milliseconds). Its
 * values increase strictly, also within one millisecond (the 12-bit rand_a field is a counter
 * seeded at random, method 3) and when the clock goes back (the last time is kept until the
 * clock passes it). Each generator keeps its own last time, so a test can run one on a clock of
 * its own without moving the ids of the rest of the process.
 */
export function uuidv7Generator(now: () => number = Date.now): () => Uint8Array {
  let lastMs = 0;
  let counter = 0;
  return () => {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    let ms = now();
    if (ms <= lastMs) {
      ms = lastMs;
      counter++;
      if (counter > 0xfff) {
        ms++;
        counter = bytes[6]! & 0x07;
      }
    } else {
      counter = ((bytes[6]! & 0x07) << 8) | bytes[7]!;
    }
    lastMs = ms;
    const hi = Math.floor(ms / 2 ** 16);
    bytes[0] = hi >>> 24;
    bytes[1] = hi >>> 16;
    bytes[2] = hi >>> 8;
    bytes[3] = hi;
    bytes[4] = ms >>> 8;
    bytes[5] = ms;
    bytes[6] = 0x70 | (counter >>> 8);
    bytes[7] = counter & 0xff;
    bytes[8] = 0x80 | (bytes[8]! & 0x3f);
    return bytes;
  };
}

/**
 * Returns a new UUIDv7 as 16 bytes from the system clock: one generator for the whole process,
 * shared by every {@link idKind} made without a generator of its own, so all their ids increase
 * together.
 */
export const uuidv7Bytes: () => Uint8Array = uuidv7Generator();

/** The alphabet's character codes. */
const alphabetCodes = Array.from(alphabet, (c) => c.charCodeAt(0));
/** The 26 character codes of the suffix being encoded (one encoding at a time: it is synchronous). */
const suffixCodes = new Array<number>(26).fill(0);

/**
 * Encodes 16 bytes as 26 Crockford base32 characters (the TypeID suffix): into one array of codes
 * made into a string at once, where 26 appended characters made a rope of 26 pieces for V8 to
 * flatten (0.56 us per id, 0.18 with the scratch bytes of {@link uuidToBytes}; a page of 100
 * clients converts 100).
 */
function encodeBase32(bytes: Uint8Array): string {
  // 130 bits of output for 128 bits of input: two leading zero bits.
  let acc = 0;
  let bits = 2;
  let n = 0;
  for (let i = 0; i < 16; i++) {
    acc = (acc << 8) | bytes[i]!;
    bits += 8;
    while (bits >= 5) {
      bits -= 5;
      suffixCodes[n++] = alphabetCodes[(acc >>> bits) & 31]!;
    }
    acc &= (1 << bits) - 1;
  }
  return String.fromCharCode.apply(null, suffixCodes);
}

/** Decodes a 26 character TypeID suffix to 16 bytes, or undefined if it is not one. */
function decodeBase32(text: string): Uint8Array | undefined {
  if (text.length !== 26) return undefined;
  const bytes = new Uint8Array(16);
  let acc = 0;
  let bits = 0;
  let j = 0;
  for (let i = 0; i < 26; i++) {
    const code = text.charCodeAt(i);
    const value = code < 128 ? decodeTable[code]! : -1;
    if (value < 0) return undefined;
    if (i === 0) {
      if (value > 7) return undefined; // would overflow 128 bits
      acc = value;
      bits = 3;
      continue;
    }
    acc = (acc << 5) | value;
    bits += 5;
    if (bits >= 8) {
      bits -= 8;
      bytes[j++] = (acc >>> bits) & 0xff;
      acc &= (1 << bits) - 1;
    }
  }
  return bytes;
}

/** Two lower-case hex digits for each byte value. */
export const hexByte: readonly string[] = Array.from(
  { length: 256 },
  (_, i) => i.toString(16).padStart(2, "0"),
);

function bytesToUuid(b: Uint8Array): string {
  const h = (i: number) => hexByte[b[i]!]!;
  return `${h(0)}${h(1)}${h(2)}${h(3)}-${h(4)}${h(5)}-${h(6)}${h(7)}-${h(8)}${h(9)}-${h(10)}${
    h(11)
  }${h(12)}${h(13)}${h(14)}${h(15)}`;
}

/** Hex digit values by char code (-1: not a hex digit). */
const hexValue = Int8Array.from({ length: 128 }, (_, c) => {
  const ch = String.fromCharCode(c);
  return /[0-9a-fA-F]/.test(ch) ? parseInt(ch, 16) : -1;
});

/**
 * The 16 bytes of a UUID as Postgres writes it (`8-4-4-4-12` hex digits), into `bytes`. A
 * byte-at-a-time parse (no slices, no parseInt): it ran for every id of every record read, ~4.6%
 * of a service's CPU under GetClient load before.
 */
function uuidToBytes(uuid: string, bytes: Uint8Array): Uint8Array {
  let j = 0;
  for (let i = 0; i < uuid.length && j < 16; i++) {
    const hi = hexValue[uuid.charCodeAt(i)] ?? -1;
    if (hi < 0) continue; // a dash
    const lo = hexValue[uuid.charCodeAt(++i)] ?? -1;
    bytes[j++] = (hi << 4) | (lo < 0 ? 0 : lo);
  }
  return bytes;
}

/** The bytes of a UUID being encoded (one at a time): an array of 16 per id cost 0.4 us or more. */
const uuidScratch = new Uint8Array(16);

/** A kind of identifier: its prefix, and conversions between the API form and the stored UUID. */
export interface IdKind {
  /** The TypeID prefix, without the underscore (e.g. `cli`). */
  readonly prefix: string;
  /** Returns a new identifier: `{ id, uuid }`, the API form and the stored form. */
  generate(): { id: string; uuid: string };
  /** Returns the API form of a stored UUID. */
  fromUuid(uuid: string): string;
  /** Returns the stored UUID of an API identifier, or undefined if the text is not one of this kind. */
  toUuid(id: string): string | undefined;
}

/**
 * Creates the identifier kind with the given TypeID prefix (lowercase letters). New ids come from
 * `nextUuid` (by default the process-wide {@link uuidv7Bytes}, on the system clock).
 */
export function idKind(prefix: string, nextUuid: () => Uint8Array = uuidv7Bytes): IdKind {
  if (!/^[a-z]{1,63}$/.test(prefix)) throw new Error(`Cannot use id prefix ${prefix}`);
  const head = `${prefix}_`;
  return {
    prefix,
    generate() {
      const bytes = nextUuid();
      return { id: head + encodeBase32(bytes), uuid: bytesToUuid(bytes) };
    },
    fromUuid(uuid) {
      return head + encodeBase32(uuidToBytes(uuid, uuidScratch));
    },
    toUuid(id) {
      if (id.length !== head.length + 26 || !id.startsWith(head)) return undefined;
      const bytes = decodeBase32(id.slice(head.length));
      return bytes && bytesToUuid(bytes);
    },
  };
}

/**
 * The creation time inside a UUIDv7 (its first 48 bits, Unix milliseconds). Stored as a record's
 * `created_at`, it keeps creation times in id order, which is list order: taken from the
 * database clock at insert instead, concurrent inserts committed in another order than their
 * ids were made showed `created_at` going back within a list.
 */
export function uuidTime(uuid: string): Date {
  return new Date(parseInt(uuid.replaceAll("-", "").slice(0, 12), 16));
}
