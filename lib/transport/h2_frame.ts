/**
 * HTTP/2 framing shared by our server and client (RFC 9113 4, 6, 7): frame types, flags, error
 * codes, the connection preface, and the frame encoder.
 *
 * @module
 */

/** HTTP/2 error codes (RFC 9113 7). */
export const ErrorCode = {
  NO_ERROR: 0x0,
  PROTOCOL_ERROR: 0x1,
  INTERNAL_ERROR: 0x2,
  FLOW_CONTROL_ERROR: 0x3,
  STREAM_CLOSED: 0x5,
  FRAME_SIZE_ERROR: 0x6,
  REFUSED_STREAM: 0x7,
  CANCEL: 0x8,
  COMPRESSION_ERROR: 0x9,
  ENHANCE_YOUR_CALM: 0xb,
} as const;

/** Frame types (RFC 9113 6). */
export const FrameType = {
  DATA: 0,
  HEADERS: 1,
  PRIORITY: 2,
  RST_STREAM: 3,
  SETTINGS: 4,
  PUSH_PROMISE: 5,
  PING: 6,
  GOAWAY: 7,
  WINDOW_UPDATE: 8,
  CONTINUATION: 9,
} as const;

/** Frame flags. */
export const Flag = {
  END_STREAM: 0x1,
  ACK: 0x1,
  END_HEADERS: 0x4,
  PADDED: 0x8,
  PRIORITY: 0x20,
} as const;

/** SETTINGS parameters (RFC 9113 6.5.2). */
export const Setting = {
  HEADER_TABLE_SIZE: 0x1,
  ENABLE_PUSH: 0x2,
  MAX_CONCURRENT_STREAMS: 0x3,
  INITIAL_WINDOW_SIZE: 0x4,
  MAX_FRAME_SIZE: 0x5,
  MAX_HEADER_LIST_SIZE: 0x6,
} as const;

/** The client connection preface (RFC 9113 3.4). */
export const preface: Uint8Array = new TextEncoder().encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

/** The largest flow-control window (RFC 9113 6.9.1). */
export const maxWindow = 2 ** 31 - 1;

/** A frame: its 9-byte header and payload in one array (no DataView, no second copy). */
export function frame(
  type: number,
  flags: number,
  streamId: number,
  payload?: Uint8Array,
): Uint8Array {
  const length = payload?.length ?? 0;
  const out = new Uint8Array(9 + length);
  out[0] = length >>> 16;
  out[1] = length >>> 8;
  out[2] = length;
  out[3] = type;
  out[4] = flags;
  out[5] = (streamId >>> 24) & 0x7f;
  out[6] = streamId >>> 16;
  out[7] = streamId >>> 8;
  out[8] = streamId;
  if (payload) out.set(payload, 9);
  return out;
}

/**
 * Writes a frame's 9-byte header into `target` at `offset` (for frames written into a buffer
 * shared with others); returns where the payload goes.
 */
export function writeFrameHeader(
  target: Uint8Array,
  offset: number,
  length: number,
  type: number,
  flags: number,
  streamId: number,
): number {
  target[offset] = length >>> 16;
  target[offset + 1] = length >>> 8;
  target[offset + 2] = length;
  target[offset + 3] = type;
  target[offset + 4] = flags;
  target[offset + 5] = (streamId >>> 24) & 0x7f;
  target[offset + 6] = streamId >>> 16;
  target[offset + 7] = streamId >>> 8;
  target[offset + 8] = streamId;
  return offset + 9;
}

/** Writes a 32-bit unsigned integer, big-endian, into `target` at `offset`. */
export function writeU32(target: Uint8Array, offset: number, value: number): void {
  target[offset] = value >>> 24;
  target[offset + 1] = value >>> 16;
  target[offset + 2] = value >>> 8;
  target[offset + 3] = value;
}

/** A 32-bit unsigned integer, big-endian. */
export function u32(value: number): Uint8Array {
  return Uint8Array.of(value >>> 24, value >>> 16, value >>> 8, value);
}

/** Reads a 32-bit unsigned big-endian integer. */
export function readU32(bytes: Uint8Array, offset = 0): number {
  return ((bytes[offset]! << 24) | (bytes[offset + 1]! << 16) | (bytes[offset + 2]! << 8) |
    bytes[offset + 3]!) >>> 0;
}
