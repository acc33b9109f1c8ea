/**
 * HPACK (RFC 7541) for our HTTP/2 server and client: a decoder with the dynamic table and Huffman
 * strings, and an encoder with the dynamic table and without Huffman coding (which every decoder
 * accepts), one of each per connection. The static table and the Huffman code come from the
 * hpack.js package (data only; the coding here is ours).
 *
 * @module
 */

import huffmanData from "hpack.js/lib/hpack/huffman.js";
import staticData from "hpack.js/lib/hpack/static-table.js";

/** A header field. */
export type HeaderField = [name: string, value: string];

/** A decoding failure: the connection must end with COMPRESSION_ERROR. */
export class HpackError extends Error {}

const staticTable: HeaderField[] = (staticData as { table: { name: string; value: string }[] })
  .table
  .map((e) => [e.name, e.value]);
const staticNameIndex = new Map<string, number>();
staticTable.forEach(([name], i) => {
  if (!staticNameIndex.has(name)) staticNameIndex.set(name, i + 1);
});

// Huffman decoding trie: node n has children at 2n and 2n+1 of `children` (0 = none); a leaf
// stores symbol + 1 in `symbols`.
const codes = (huffmanData as unknown as { encode: [number, number][] }).encode;
const children = new Int32Array(2 * 1024);
const symbols = new Int32Array(1024);
let nodes = 1;
codes.forEach(([length, code], symbol) => {
  let node = 0;
  for (let bit = length - 1; bit >= 0; bit--) {
    const slot = 2 * node + ((code >>> bit) & 1);
    if (children[slot] === 0) children[slot] = nodes++;
    node = children[slot]!;
  }
  symbols[node] = symbol + 1;
});

const utf8 = new TextDecoder();

/**
 * Bytes to a string of the same code units (ISO-8859-1; TextDecoder's "latin1" is cp1252). Header
 * values are nearly always ASCII, which the native decoder turns into the same string at a
 * fraction of the cost of building it code unit by code unit (a bearer token on every request
 * made that ~6% of a service's CPU).
 */
function latin1(bytes: Uint8Array | number[]): string {
  let isAscii = true;
  for (let i = 0; i < bytes.length; i++) {
    if (bytes[i]! >= 0x80) {
      isAscii = false;
      break;
    }
  }
  if (isAscii && bytes instanceof Uint8Array) return utf8.decode(bytes);
  let out = "";
  for (let i = 0; i < bytes.length; i += 4096) {
    out += String.fromCharCode(...bytes.slice(i, i + 4096));
  }
  return out;
}

/**
 * Decodes a Huffman string (RFC 7541 5.2) of at most `max` characters: a longer one throws before
 * more than `max` are held (a Huffman string decodes to up to 8/5 of its length, so a 64 KiB value
 * would otherwise become 100,000 characters before the header list's limit is checked).
 */
function huffmanDecode(bytes: Uint8Array, max: number): string {
  const out: number[] = [];
  let node = 0;
  let depth = 0; // bits read since the last symbol
  let ones = true; // those bits were all 1
  for (const byte of bytes) {
    for (let bit = 7; bit >= 0; bit--) {
      const b = (byte >>> bit) & 1;
      node = children[2 * node + b]!;
      depth++;
      ones &&= b === 1;
      if (node === 0) throw new HpackError("invalid Huffman code");
      const symbol = symbols[node]!;
      if (symbol !== 0) {
        if (symbol === 257) throw new HpackError("EOS in a Huffman string");
        if (out.length === max) throw new HpackError("header list too large");
        out.push(symbol - 1);
        node = 0;
        depth = 0;
        ones = true;
      }
    }
  }
  if (depth > 7 || !ones) throw new HpackError("invalid Huffman padding");
  return latin1(out);
}

/**
 * Huffman strings decoded lately, by length. Clients send some fields as literals never indexed
 * (nghttp2 and so grpc-js and h2load never index `:path`), so the same bytes arrive with every
 * request; comparing them with a few remembered ones is cheaper than decoding them bit by bit
 * (which took ~6% of a service's CPU under gRPC load). Bounded: only strings of at most 256 bytes
 * (what requests repeat is short: paths, content types, user agents), 4 per length, so at most
 * 256 x 4 of them, about 1 MiB with their text: a peer sending long values cannot grow it.
 */
const huffmanCache = new Map<number, Array<[Uint8Array, string]>>();
const maxCachedLength = 256;

/** Bytes the Huffman cache holds (encoded and decoded), for tests. */
export function huffmanCacheBytes(): number {
  let bytes = 0;
  for (const entries of huffmanCache.values()) {
    for (const [known, text] of entries) bytes += known.length + text.length;
  }
  return bytes;
}

function cachedHuffmanDecode(bytes: Uint8Array, max: number): string {
  if (bytes.length > maxCachedLength) return huffmanDecode(bytes, max);
  const seen = huffmanCache.get(bytes.length);
  if (seen) {
    for (const [known, text] of seen) {
      let i = 0;
      while (i < bytes.length && known[i] === bytes[i]) i++;
      if (i === bytes.length) {
        if (text.length > max) throw new HpackError("header list too large");
        return text;
      }
    }
  }
  const text = huffmanDecode(bytes, max);
  if (seen) {
    if (seen.length >= 4) seen.pop();
    seen.unshift([bytes.slice(), text]);
  } else {
    if (huffmanCache.size >= maxCachedLength) huffmanCache.clear();
    huffmanCache.set(bytes.length, [[bytes.slice(), text]]);
  }
  return text;
}

const empty = new Uint8Array(0);

/** Decodes header blocks of one connection (the dynamic table lives across blocks). */
export class HpackDecoder {
  #table: HeaderField[] = []; // newest first
  #size = 0;
  #maxSize: number;
  #limit: number;

  /** `maxTableSize` is what our SETTINGS_HEADER_TABLE_SIZE allows the peer (default 4096). */
  constructor(maxTableSize = 4096) {
    this.#maxSize = maxTableSize;
    this.#limit = maxTableSize;
  }

  #evict(): void {
    while (this.#size > this.#maxSize) {
      const [name, value] = this.#table.pop()!;
      this.#size -= name.length + value.length + 32;
    }
  }

  #field(index: number): HeaderField {
    if (index === 0) throw new HpackError("index 0");
    if (index <= staticTable.length) return staticTable[index - 1]!;
    const field = this.#table[index - staticTable.length - 1];
    if (!field) throw new HpackError(`index ${index} out of range`);
    return field;
  }

  /** The block being decoded, and where. */
  #block: Uint8Array = empty;
  #i = 0;

  #integer(prefixBits: number): number {
    const block = this.#block;
    const max = (1 << prefixBits) - 1;
    if (this.#i >= block.length) throw new HpackError("truncated integer");
    let value = block[this.#i++]! & max;
    if (value < max) return value;
    let shift = 0;
    for (;;) {
      if (this.#i >= block.length) throw new HpackError("truncated integer");
      const b = block[this.#i++]!;
      value += (b & 0x7f) * 2 ** shift;
      shift += 7;
      if (value > 2 ** 31) throw new HpackError("integer too large");
      if ((b & 0x80) === 0) return value;
    }
  }

  /** A string literal of at most `max` characters (what is left of the list's size). */
  #string(max: number): string {
    const block = this.#block;
    if (this.#i >= block.length) throw new HpackError("truncated string");
    const huffman = (block[this.#i]! & 0x80) !== 0;
    const length = this.#integer(7);
    const i = this.#i;
    if (i + length > block.length) throw new HpackError("truncated string");
    const bytes = block.subarray(i, i + length);
    this.#i = i + length;
    if (huffman) return cachedHuffmanDecode(bytes, Math.max(0, max));
    if (length > max) throw new HpackError("header list too large");
    return latin1(bytes);
  }

  /** Decodes one complete header block; `maxListSize` bounds the decoded size (RFC 9113 6.5.2). */
  decode(block: Uint8Array, maxListSize = 65536): HeaderField[] {
    const out: HeaderField[] = [];
    let listSize = 0;
    this.#block = block;
    this.#i = 0;
    try {
      while (this.#i < block.length) {
        const b = block[this.#i]!;
        let field: HeaderField;
        if (b & 0x80) {
          field = this.#field(this.#integer(7));
        } else if ((b & 0xe0) === 0x20) {
          // Only at the start of a block (RFC 7541 4.2): after a field it is a decoding error.
          if (out.length > 0) throw new HpackError("table size update after a field");
          const size = this.#integer(5);
          if (size > this.#limit) throw new HpackError("table size update above the limit");
          this.#maxSize = size;
          this.#evict();
          continue;
        } else {
          const incremental = (b & 0xc0) === 0x40;
          const index = this.#integer(incremental ? 6 : 4);
          // Each field counts its name, its value and 32 (RFC 9113 6.5.2).
          const left = maxListSize - listSize - 32;
          const name = index === 0 ? this.#string(left) : this.#field(index)[0];
          field = [name, this.#string(left - name.length)];
          if (incremental) {
            this.#table.unshift(field);
            this.#size += field[0].length + field[1].length + 32;
            this.#evict();
          }
        }
        listSize += field[0].length + field[1].length + 32;
        if (listSize > maxListSize) throw new HpackError("header list too large");
        out.push(field);
      }
    } finally {
      this.#block = empty; // not held past the call
    }
    return out;
  }
}

const encoder = new TextEncoder();

function ascii(text: string): boolean {
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) >= 0x80) return false;
  return true;
}

/** Each static-table field by name and value, for an exact match (`:method POST`, `:status 200`). */
const staticFieldIndex = new Map<string, Map<string, number>>();
staticTable.forEach(([name, value], i) => {
  if (value === "") return;
  let values = staticFieldIndex.get(name);
  if (!values) staticFieldIndex.set(name, values = new Map());
  if (!values.has(value)) values.set(value, i + 1);
});

/**
 * Fields sent as "never indexed" literals (RFC 7541 6.2.3, 7.1.3): credentials, which no table
 * may keep, here or in an intermediary, and which nghttp2 never indexes either.
 */
const neverIndexed = new Set(["authorization", "proxy-authorization", "cookie", "set-cookie"]);
/**
 * Fields whose value is new with nearly every request: in the table they would only push out the
 * fields that repeat. Binary metadata (`-bin`) is left out the same way.
 */
const unique = new Set([
  "x-request-id",
  "traceparent",
  "tracestate",
  "content-length",
  "grpc-message",
  "idempotency-key",
  "date",
  "etag",
]);

/** The dynamic table an encoder keeps: at most 4 KiB, the size every HTTP/2 peer starts with. */
const encoderTableSize = 4096;
/** The largest block an encoder encodes into its own reused buffer. */
const scratchSize = 4096;

/**
 * Encodes the header blocks of one connection, in the order they are sent (each block may refer to
 * fields the ones before it added). Fields that repeat from request to request (`:path`,
 * `content-type`, `te`, `grpc-timeout`, `user-agent`; `:status` and `grpc-status` in answers) go
 * into the dynamic table (RFC 7541 2.3.2) the first time and are sent as an index of a byte or two
 * after that, which the peer's decoder answers with the field it already has instead of a new
 * string: between the gateway and a service, the same dozen fields come with every call. Strings
 * are never Huffman-coded (which every decoder accepts). Names must be lower case.
 *
 * The table is what the peer's SETTINGS_HEADER_TABLE_SIZE allows, at most 4 KiB; when the peer
 * lowers it, {@link setPeerTableSize} shrinks ours and the next block begins with the dynamic
 * table size update that RFC 7541 4.2 requires. With a size of 0 the encoder keeps no state.
 */
export class HpackEncoder {
  #maxSize: number;
  #size = 0;
  /** A size update to send at the start of the next block. */
  #pendingUpdate: number | undefined;
  /** The table, oldest first: what each entry counts (RFC 7541 4.1), and its place in the maps. */
  #entries: { name: string; value: string; size: number; seq: number }[] = [];
  /** How many entries were ever added: the newest has `#added - 1` as its sequence number. */
  #added = 0;
  /** The sequence number of the newest entry of each field, and of each name. */
  #byField = new Map<string, Map<string, number>>();
  #byName = new Map<string, number>();
  /** The buffer blocks are encoded into, the one being written, and where. */
  #scratch: Uint8Array = new Uint8Array(256);
  #out: Uint8Array = this.#scratch;
  #at = 0;

  constructor(maxSize = encoderTableSize) {
    this.#maxSize = Math.min(maxSize, encoderTableSize);
  }

  /**
   * The peer's SETTINGS_HEADER_TABLE_SIZE. A smaller table than ours is used from the next block
   * on; a larger one changes nothing (an encoder may use less than it is allowed, RFC 7541 4.2).
   */
  setPeerTableSize(size: number): void {
    if (size >= this.#maxSize) return;
    this.#maxSize = size;
    this.#pendingUpdate = size;
    this.#evict(0);
  }

  #evict(room: number): void {
    while (this.#entries.length > 0 && this.#size + room > this.#maxSize) {
      const old = this.#entries.shift()!;
      this.#size -= old.size;
      const values = this.#byField.get(old.name);
      if (values?.get(old.value) === old.seq) {
        values.delete(old.value);
        if (values.size === 0) this.#byField.delete(old.name);
      }
      if (this.#byName.get(old.name) === old.seq) this.#byName.delete(old.name);
    }
  }

  /** The index of an entry by its sequence number: the newest is 62, after the static table. */
  #index(seq: number): number {
    return staticTable.length + this.#added - seq;
  }

  /**
   * Encodes one header block into the encoder's own buffer: the bytes are valid until the next
   * call (the caller copies them into a frame at once), so that a block allocates nothing that
   * outlives it. A block larger than {@link scratchSize} gets a buffer of its own.
   */
  encode(fields: readonly HeaderField[]): Uint8Array {
    let size = 6;
    for (const [name, value] of fields) size += name.length + 3 * value.length + 12;
    if (size > scratchSize) {
      const block = this.#encode(fields, new Uint8Array(size));
      this.#out = this.#scratch;
      return block;
    }
    if (size > this.#scratch.length) this.#scratch = new Uint8Array(scratchSize);
    return this.#encode(fields, this.#scratch);
  }

  #integer(value: number, prefixBits: number, flags: number): void {
    const out = this.#out;
    const max = (1 << prefixBits) - 1;
    if (value < max) {
      out[this.#at++] = flags | value;
      return;
    }
    out[this.#at++] = flags | max;
    value -= max;
    while (value >= 128) {
      out[this.#at++] = (value & 0x7f) | 0x80;
      value = Math.floor(value / 128);
    }
    out[this.#at++] = value;
  }

  #string(text: string, isAscii: boolean): void {
    const bytes = isAscii ? undefined : encoder.encode(text);
    const length = bytes ? bytes.length : text.length;
    this.#integer(length, 7, 0);
    const out = this.#out;
    const at = this.#at;
    if (bytes) out.set(bytes, at);
    else for (let i = 0; i < length; i++) out[at + i] = text.charCodeAt(i);
    this.#at = at + length;
  }

  #encode(fields: readonly HeaderField[], out: Uint8Array): Uint8Array {
    this.#out = out;
    this.#at = 0;
    if (this.#pendingUpdate !== undefined) {
      this.#integer(this.#pendingUpdate, 5, 0x20);
      this.#pendingUpdate = undefined;
    }
    for (const [name, value] of fields) {
      const staticField = staticFieldIndex.get(name)?.get(value);
      if (staticField !== undefined) {
        this.#integer(staticField, 7, 0x80);
        continue;
      }
      const valueAscii = ascii(value);
      const entrySize = name.length + value.length + 32;
      // Not a UTF-8 value (the decoder counts its bytes), nor an entry of more than 3/4 of the
      // table, which would push out nearly everything (nghttp2's rule).
      const indexable = valueAscii && this.#maxSize > 0 && entrySize <= (this.#maxSize * 3) >> 2 &&
        !neverIndexed.has(name) && !unique.has(name) && !name.endsWith("-bin");
      if (indexable) {
        const seq = this.#byField.get(name)?.get(value);
        if (seq !== undefined) {
          this.#integer(this.#index(seq), 7, 0x80);
          continue;
        }
      }
      const named = this.#byName.get(name);
      const nameIndex = named !== undefined ? this.#index(named) : staticNameIndex.get(name);
      // Literal with incremental indexing (6-bit name index), never indexed or without indexing (4).
      const flags = indexable ? 0x40 : neverIndexed.has(name) ? 0x10 : 0x00;
      if (nameIndex !== undefined) this.#integer(nameIndex, indexable ? 6 : 4, flags);
      else {
        out[this.#at++] = flags;
        this.#string(name, true);
      }
      this.#string(value, valueAscii);
      if (indexable) this.#add(name, value, entrySize);
    }
    return out.subarray(0, this.#at);
  }

  #add(name: string, value: string, size: number): void {
    this.#evict(size);
    const seq = this.#added++;
    this.#entries.push({ name, value, size, seq });
    this.#size += size;
    let values = this.#byField.get(name);
    if (!values) this.#byField.set(name, values = new Map());
    values.set(value, seq);
    this.#byName.set(name, seq);
  }
}

/** No table: what {@link hpackEncode} encodes with. */
const stateless = new HpackEncoder(0);

/**
 * Encodes a header block that depends on no other (no dynamic table: literals, names and whole
 * fields from the static table where they exist), which every decoder accepts in any order.
 */
export function hpackEncode(fields: readonly HeaderField[]): Uint8Array {
  return stateless.encode(fields).slice();
}

/** Decodes bytes of a header value that a peer sent as UTF-8 (gRPC metadata may be). */
export function utf8Value(latin1Value: string): string {
  return utf8.decode(Uint8Array.from(latin1Value, (c) => c.charCodeAt(0)));
}
