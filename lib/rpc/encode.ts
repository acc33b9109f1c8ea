/**
 * Protobuf binary encoding without an ArrayBuffer per growth step.
 *
 * protobuf-es's `toBinary` makes a `BinaryWriter` per message whose buffer starts empty, grows by
 * doubling from 128 bytes and is copied out by `finish()`: three to five ArrayBuffers for a
 * message of a few hundred bytes. Under Deno each of them is a backing store outside V8's heap
 * (a `new Uint8Array(128)` took 1.9 to 3.2 us in a loop here, a `new Uint8Array(16)` 0.4 to 1.2),
 * so encoding an introspection answer of ten fields took 13.5 to 14.6 us, ten times its decoding
 * (1.5 to 2.0). Here a writer that starts writing borrows one process-wide scratch buffer instead,
 * and gives it back in `finish()`, which copies its bytes out: 2.9 us for the same answer.
 *
 * Why this is safe: a `BinaryWriter` is only ever used inside one synchronous `toBinary` (nothing
 * here or in connect-es makes one otherwise, and protobuf-es writes nested messages into the same
 * writer), so no two writers write at once. A writer that fails before `finish()` (a field that
 * cannot be encoded) would keep the buffer: later writers then allocate as before, until
 * {@link encodeMessage}, which every hot path uses, takes it back once its own `toBinary` has
 * returned or thrown. A message larger than the scratch buffer grows out of it into buffers of its
 * own, as before.
 *
 * The patch is installed once, on this module's first import, on the `BinaryWriter` of the
 * protobuf-es that `deno.lock` pins; `encode_test.ts` checks that its output is byte for byte
 * protobuf-es's own.
 *
 * @module
 */

import { type DescMessage, type MessageShape, toBinary } from "@bufbuild/protobuf";
import { BinaryWriter } from "@bufbuild/protobuf/wire";
import { writeU32 } from "../transport/mod.ts";

/** The size of the buffer lent to writers (a message larger than this grows its own). */
export const scratchBytes = 64 * 1024;

const scratch = new Uint8Array(scratchBytes);
const empty = new Uint8Array(0);
/** The writer that holds {@link scratch}, if any. */
let lentTo: WriterInternals | undefined;

interface WriterInternals {
  buffer: Uint8Array;
  pos: number;
  ensureCapacity(size: number): void;
  finish(): Uint8Array;
}

const writer = BinaryWriter.prototype as unknown as WriterInternals;
if (!Object.hasOwn(writer, "ensureCapacity") || !Object.hasOwn(writer, "finish")) {
  throw new Error("@bufbuild/protobuf's BinaryWriter has changed: review lib/rpc/encode.ts");
}
const ensureCapacity = writer.ensureCapacity;
const finish = writer.finish;
writer.ensureCapacity = function (this: WriterInternals, size: number) {
  if (this.buffer.length === 0 && lentTo === undefined && this.pos + size <= scratchBytes) {
    lentTo = this;
    this.buffer = scratch;
    return;
  }
  ensureCapacity.call(this, size);
};
writer.finish = function (this: WriterInternals) {
  const bytes = finish.call(this);
  if (lentTo === this) {
    lentTo = undefined;
    this.buffer = empty;
  }
  return bytes;
};

/** Whether a writer holds the scratch buffer now (for the tests). */
export function scratchLent(): boolean {
  return lentTo !== undefined;
}

/** `toBinary`, and the scratch buffer free again afterwards, whatever happened. */
export function encodeMessage<Desc extends DescMessage>(
  schema: Desc,
  message: MessageShape<Desc>,
): Uint8Array<ArrayBuffer> {
  try {
    return toBinary(schema, message) as Uint8Array<ArrayBuffer>;
  } finally {
    lentTo = undefined;
  }
}

/**
 * A gRPC length-prefixed message (PROTOCOL-HTTP2.md): the compressed flag (0), the length as 32
 * bits big-endian, then `message`.
 */
export function lengthPrefixed(message: Uint8Array): Uint8Array<ArrayBuffer> {
  const framed = new Uint8Array(5 + message.length);
  writeU32(framed, 1, message.length);
  framed.set(message, 5);
  return framed;
}
