// deno-lint-ignore-file no-explicit-any
import assert from "node:assert/strict";
import hpack from "hpack.js";
import {
  type HeaderField,
  HpackDecoder,
  hpackEncode,
  HpackEncoder,
  HpackError,
  huffmanCacheBytes,
} from "./hpack.ts";

function reference(
  fields: HeaderField[],
  options: { huffman: boolean },
  compressor: any,
): Uint8Array {
  compressor.write(fields.map(([name, value]) => ({ name, value, huffman: options.huffman })));
  const chunks: Uint8Array[] = [];
  let chunk;
  while ((chunk = compressor.read()) !== null) chunks.push(chunk);
  return Uint8Array.from(chunks.flatMap((c) => [...c]));
}

const sample: HeaderField[] = [
  [":method", "POST"],
  [":scheme", "http"],
  [":path", "/registry.oauth.v1.OAuthRegistryService/GetClient"],
  [":authority", "127.0.0.1:50051"],
  ["content-type", "application/grpc"],
  ["te", "trailers"],
  ["grpc-timeout", "9999m"],
  ["authorization", "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1In0.c2lnbmF0dXJl"],
  ["user-agent", "grpc-node-js/1.14.7"],
  ["x-custom", 'value with spaces ~!@#$%^&*()_+{}|:"<>?'],
];

Deno.test("HpackDecoder decodes what a reference encoder writes, Huffman and dynamic table included", () => {
  for (const huffman of [true, false]) {
    const compressor = hpack.compressor.create({ table: { size: 4096 } });
    const decoder = new HpackDecoder();
    for (let i = 0; i < 50; i++) {
      const fields: HeaderField[] = [...sample, ["x-request-id", `req-${i}`], [
        "x-n",
        String(i * 7919),
      ]];
      assert.deepEqual(decoder.decode(reference(fields, { huffman }, compressor)), fields);
    }
  }
});

Deno.test("HpackDecoder decodes every byte value of a Huffman string", () => {
  const compressor = hpack.compressor.create({ table: { size: 4096 } });
  const value = String.fromCharCode(...Array.from({ length: 256 }, (_, i) => i));
  const block = reference([["x-all", value]], { huffman: true }, compressor);
  assert.deepEqual(new HpackDecoder().decode(block), [["x-all", value]]);
});

Deno.test("HpackDecoder's memory of Huffman strings never mixes up strings of one length", () => {
  // Ten values of the same length, three times over in different orders: more than the memory
  // keeps per length, so each is found, missed and decoded again.
  const values = Array.from({ length: 10 }, (_, i) => `/svc.v1.S/Method${i}`);
  const order = [...values, ...values.toReversed(), ...values.filter((_, i) => i % 3 === 0)];
  for (const value of order) {
    const compressor = hpack.compressor.create({ table: { size: 4096 } });
    const block = reference([[":path", value]], { huffman: true }, compressor);
    assert.deepEqual(new HpackDecoder().decode(block), [[":path", value]]);
  }
});

Deno.test("hpackEncode output is read back by a reference decoder", () => {
  const block = hpackEncode([[":status", "200"], ["content-type", "application/grpc"], [
    "grpc-status",
    "0",
  ]]);
  const decompressor = hpack.decompressor.create({ table: { size: 4096 } });
  decompressor.write(block);
  decompressor.execute();
  const out: HeaderField[] = [];
  let field;
  while ((field = decompressor.read()) !== null) out.push([field.name, field.value]);
  assert.deepEqual(out, [[":status", "200"], ["content-type", "application/grpc"], [
    "grpc-status",
    "0",
  ]]);
  assert.deepEqual(new HpackDecoder().decode(block), out);
});

/** A reference decoder (hpack.js) of one connection: its blocks in order, with its table. */
function referenceDecoder(): (block: Uint8Array) => HeaderField[] {
  const decompressor = hpack.decompressor.create({ table: { maxSize: 4096 } });
  return (block) => {
    decompressor.write(block);
    decompressor.execute();
    const out: HeaderField[] = [];
    let field;
    while ((field = decompressor.read()) !== null) out.push([field.name, field.value]);
    return out;
  };
}

Deno.test("HpackEncoder sends a field that repeats as an index, which our decoder and a reference one read back", () => {
  const encoder = new HpackEncoder();
  const ours = new HpackDecoder();
  const theirs = referenceDecoder();
  const sizes: number[] = [];
  for (let i = 0; i < 20; i++) {
    const fields: HeaderField[] = [...sample, ["x-request-id", `req-${i}`]];
    const block = encoder.encode(fields);
    sizes.push(block.length);
    assert.deepEqual(ours.decode(block), fields);
    assert.deepEqual(theirs(block), fields);
  }
  // The first block carries every string; the next ones the unique and the secret ones, and an
  // index of a byte for each field that repeats.
  const token = sample.find(([name]) => name === "authorization")![1];
  assert.ok(sizes[0]! > 250, `${sizes}`);
  assert.ok(Math.max(...sizes.slice(1)) < token.length + "req-10".length + 30, `${sizes}`);
});

Deno.test("HpackEncoder never indexes credentials and sends them as never-indexed literals (RFC 7541 7.1.3)", () => {
  const encoder = new HpackEncoder();
  const fields: HeaderField[] = [["authorization", "Bearer abc.def.ghi"], ["cookie", "s=1"]];
  for (let i = 0; i < 3; i++) {
    const block = encoder.encode(fields);
    // 0001xxxx: literal never indexed; the name from the static table (authorization 23, cookie 32)
    assert.equal(block[0], 0x10 | 0x0f);
    assert.ok(new TextDecoder().decode(block).includes("Bearer abc.def.ghi"));
    assert.deepEqual(referenceDecoder()(block), fields);
  }
});

Deno.test("HpackEncoder's table evicts as the decoder's does, under fields that never repeat soon enough", () => {
  const encoder = new HpackEncoder();
  const ours = new HpackDecoder();
  const theirs = referenceDecoder();
  // 300 user agents of ~100 bytes in turn: the 4 KiB table holds ~30 of them, so every field is
  // added, found a few times, and pushed out again.
  for (let i = 0; i < 2_000; i++) {
    const fields: HeaderField[] = [
      [":method", "POST"],
      [":path", `/svc.v1.S/M${i % 7}`],
      ["user-agent", `agent-${(i * 7) % 300}-`.padEnd(100, "x")],
      ["x-seen", `${i % 40}`],
    ];
    const block = encoder.encode(fields);
    assert.deepEqual(ours.decode(block), fields, `block ${i}`);
    assert.deepEqual(theirs(block), fields, `block ${i}`);
  }
});

Deno.test("HpackEncoder follows the peer's SETTINGS_HEADER_TABLE_SIZE down, with a size update (RFC 7541 4.2)", () => {
  const encoder = new HpackEncoder();
  const ours = new HpackDecoder();
  const theirs = referenceDecoder();
  const fields: HeaderField[] = [[":path", "/svc.v1.S/M"], ["user-agent", "agent/1.0"]];
  for (let i = 0; i < 2; i++) {
    const block = encoder.encode(fields);
    assert.deepEqual(ours.decode(block), fields);
    assert.deepEqual(theirs(block), fields);
  }
  encoder.setPeerTableSize(64);
  const smaller = encoder.encode(fields);
  assert.equal(smaller[0], 0x3f); // 001xxxxx: a size update, 64 = 31 + 33
  assert.equal(smaller[1], 33);
  assert.deepEqual(ours.decode(smaller), fields);
  assert.deepEqual(theirs(smaller), fields);
  // Raised again: the encoder keeps the smaller table (it may use less than allowed); at 0, none.
  encoder.setPeerTableSize(4096);
  encoder.setPeerTableSize(0);
  const none = encoder.encode(fields);
  assert.deepEqual([none[0]], [0x20]);
  assert.deepEqual(ours.decode(none), fields);
  assert.deepEqual(theirs(none), fields);
  assert.deepEqual(ours.decode(encoder.encode(fields)), fields);
});

Deno.test("HpackDecoder rejects malformed blocks without throwing anything else", () => {
  const bad = [
    Uint8Array.of(0x80), // index 0
    Uint8Array.of(0xff, 0xff, 0xff, 0xff, 0xff, 0x7f), // index overflow
    Uint8Array.of(0xbf), // index 62: empty dynamic table
    Uint8Array.of(0x00, 0x85, 0xff), // truncated Huffman string
    Uint8Array.of(0x00, 0x81, 0x00, 0x00), // Huffman padding of zeros
    Uint8Array.of(0x3f, 0xe1, 0x7f), // table size update above the limit
    Uint8Array.of(0x40), // truncated literal
    Uint8Array.of(0x82, 0x3f, 0xe1, 0x1f), // table size update after a field (RFC 7541 4.2)
  ];
  for (const block of bad) {
    assert.throws(() => new HpackDecoder().decode(block), HpackError, `${[...block]}`);
  }
  assert.throws(
    () => new HpackDecoder().decode(hpackEncode([["x", "y".repeat(70_000)]]), 65_536),
    /too large/,
  );
});

Deno.test("HpackDecoder applies table size updates at the start of a block", () => {
  const decoder = new HpackDecoder();
  // Two updates (to 0, then 4096) before the first field, then an indexed field (:method GET).
  assert.deepEqual(decoder.decode(Uint8Array.of(0x20, 0x3f, 0xe1, 0x1f, 0x82)), [
    [":method", "GET"],
  ]);
  // An update to 0 empties the dynamic table: index 62 no longer exists.
  const withEntry = new HpackDecoder();
  withEntry.decode(Uint8Array.of(0x40, 0x01, 0x61, 0x01, 0x62)); // a: b, indexed
  assert.deepEqual(withEntry.decode(Uint8Array.of(0xbe)), [["a", "b"]]);
  assert.throws(() => withEntry.decode(Uint8Array.of(0x20, 0xbe)), HpackError);
});

Deno.test("HpackDecoder holds nothing past the header list's limit: long Huffman values are neither decoded whole nor remembered", () => {
  // 300 blocks of one Huffman value each, over 40 KiB encoded, all lengths different: before,
  // each was decoded whole (up to 100,000 characters) and kept in the decoder's memory of strings
  // before the list's limit refused it.
  const before = huffmanCacheBytes();
  for (let n = 0; n < 300; n++) {
    const compressor = hpack.compressor.create({ table: { size: 4096 } });
    const value = "a".repeat(66_000 + n * 24); // "a" is 5 bits: 41..46 KB encoded
    const block = reference([["x-big", value]], { huffman: true }, compressor);
    assert.throws(() => new HpackDecoder().decode(block, 64 * 1024), HpackError);
  }
  assert.ok(huffmanCacheBytes() - before < 64 * 1024, `${huffmanCacheBytes()} bytes remembered`);
  // A value within the limit still decodes, Huffman or not.
  for (const huffman of [true, false]) {
    const compressor = hpack.compressor.create({ table: { size: 4096 } });
    const value = "b".repeat(60_000);
    const block = reference([["x-ok", value]], { huffman }, compressor);
    assert.deepEqual(new HpackDecoder().decode(block, 64 * 1024), [["x-ok", value]]);
    const fresh = hpack.compressor.create({ table: { size: 4096 } });
    const over = reference([["x-ok", value + "b".repeat(6_000)]], { huffman }, fresh);
    assert.throws(() => new HpackDecoder().decode(over, 64 * 1024), /header list too large/);
  }
});
