/**
 * Byte-array helpers shared by the servers and the gateway.
 *
 * @module
 */

/** The parts joined into one array (the part itself when there is one). */
export function concat(parts: readonly Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  let size = 0;
  for (const p of parts) size += p.length;
  const out = new Uint8Array(size);
  let offset = 0;
  for (const p of parts) {
    out.set(p, offset);
    offset += p.length;
  }
  return out;
}

/**
 * Frees the memory of `bytes` at once, when it views the whole of its buffer (else does nothing):
 * the buffer is detached (ArrayBuffer.prototype.transfer), and every view of it reads as empty.
 * Only for a buffer nothing else reads any more. V8 frees an ArrayBuffer's memory, which lies
 * outside its heap, only when a collection finds the buffer's small wrapper dead: under a flood of
 * large messages the dead ones pile up between collections, the more the larger the young
 * generation (lib/platform/run_flags.ts has the figures).
 */
export function release(bytes: Uint8Array): void {
  const buffer = bytes.buffer;
  if (
    bytes.byteOffset !== 0 || bytes.byteLength !== buffer.byteLength ||
    !(buffer instanceof ArrayBuffer) || buffer.detached
  ) return;
  try {
    buffer.transfer(0);
  } catch {
    // One that cannot be detached is left to the collector.
  }
}
