/**
 * HPACK (RFC 7541) for the HTTP/2 server: a decoder with the dynamic table and Huffman strings,
 * and an encoder that needs neither (literal fields without indexing, names from the static table
 * where they exist), which every decoder accepts. The static table and the Huffman code come from
 * the hpack.js package (data only; the coding here is ours).
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

  /** Decodes one complete header block; `maxListSize` bounds the decoded size (RFC 9113 6.5.2). */
  decode(block: Uint8Array, maxListSize = 65536): HeaderField[] {
    const out: HeaderField[] = [];
    let listSize = 0;
    let i = 0;
    const integer = (prefixBits: number): number => {
      const max = (1 << prefixBits) - 1;
      if (i >= block.length) throw new HpackError("truncated integer");
      let value = block[i++]! & max;
      if (value < max) return value;
      let shift = 0;
      for (;;) {
        if (i >= block.length) throw new HpackError("truncated integer");
        const b = block[i++]!;
        value += (b & 0x7f) * 2 ** shift;
        shift += 7;
        if (value > 2 ** 31) throw new HpackError("integer too large");
        if ((b & 0x80) === 0) return value;
      }
    };
    /** A string literal of at most `max` characters (what is left of the list's size). */
    const string = (max: number): string => {
      if (i >= block.length) throw new HpackError("truncated string");
      const huffman = (block[i]! & 0x80) !== 0;
      const length = integer(7);
      if (i + length > block.length) throw new HpackError("truncated string");
      const bytes = block.subarray(i, i + length);
      i += length;
      if (huffman) return cachedHuffmanDecode(bytes, Math.max(0, max));
      if (length > max) throw new HpackError("header list too large");
      return latin1(bytes);
    };
    while (i < block.length) {
      const b = block[i]!;
      let field: HeaderField;
      if (b & 0x80) {
        field = this.#field(integer(7));
      } else if ((b & 0xe0) === 0x20) {
        // Only at the start of a block (RFC 7541 4.2): after a field it is a decoding error.
        if (out.length > 0) throw new HpackError("table size update after a field");
        const size = integer(5);
        if (size > this.#limit) throw new HpackError("table size update above the limit");
        this.#maxSize = size;
        this.#evict();
        continue;
      } else {
        const incremental = (b & 0xc0) === 0x40;
        const index = integer(incremental ? 6 : 4);
        // Each field counts its name, its value and 32 (RFC 9113 6.5.2).
        const left = maxListSize - listSize - 32;
        const name = index === 0 ? string(left) : this.#field(index)[0];
        field = [name, string(left - name.length)];
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
    return out;
  }
}

const encoder = new TextEncoder();

/**
 * Encodes a header block with literal fields without indexing (no dynamic table state, no
 * Huffman), names from the static table where they exist, which every decoder accepts. Names must
 * be lower case. Values are written as their UTF-8 bytes (gRPC metadata values are ASCII).
 */
export function hpackEncode(fields: readonly HeaderField[]): Uint8Array {
  let size = 0;
  for (const [name, value] of fields) size += name.length + 3 * value.length + 12;
  const out = new Uint8Array(size);
  let at = 0;
  const integer = (value: number, prefixBits: number, flags: number) => {
    const max = (1 << prefixBits) - 1;
    if (value < max) {
      out[at++] = flags | value;
      return;
    }
    out[at++] = flags | max;
    value -= max;
    while (value >= 128) {
      out[at++] = (value & 0x7f) | 0x80;
      value = Math.floor(value / 128);
    }
    out[at++] = value;
  };
  const string = (text: string) => {
    let isAscii = true;
    for (let i = 0; i < text.length; i++) {
      if (text.charCodeAt(i) >= 0x80) {
        isAscii = false;
        break;
      }
    }
    const bytes = isAscii ? undefined : encoder.encode(text);
    const length = bytes ? bytes.length : text.length;
    integer(length, 7, 0);
    if (bytes) out.set(bytes, at);
    else for (let i = 0; i < length; i++) out[at + i] = text.charCodeAt(i);
    at += length;
  };
  for (const [name, value] of fields) {
    const index = staticNameIndex.get(name);
    if (index !== undefined) integer(index, 4, 0x00);
    else {
      out[at++] = 0x00;
      string(name);
    }
    string(value);
  }
  return out.subarray(0, at);
}

/** Decodes bytes of a header value that a peer sent as UTF-8 (gRPC metadata may be). */
export function utf8Value(latin1Value: string): string {
  return utf8.decode(Uint8Array.from(latin1Value, (c) => c.charCodeAt(0)));
}
