/**
 * A raw HTTP/2 cleartext client for tests of flow control: it announces the stream window it is
 * given (SETTINGS_INITIAL_WINDOW_SIZE) and never gives a byte of window back (no WINDOW_UPDATE, on
 * a stream or the connection), so a server that answers more than that must hold its answer or
 * give it up. Otherwise it is a well-behaved peer: it acknowledges SETTINGS, answers PING, and
 * reads the socket all the time, so that nothing but the windows holds the server back.
 *
 * @module
 */

import {
  Flag,
  frame,
  FrameType,
  type HeaderField,
  HpackDecoder,
  hpackEncode,
  preface,
  Setting,
} from "../transport/mod.ts";

/** How a stream of a {@link RawH2Connection} ended. */
export interface RawH2End {
  /** The error code of the server's RST_STREAM (`ErrorCode`), if it reset the stream. */
  reset?: number;
  /** The trailers (or a trailers-only answer's headers), if the stream ended with them. */
  trailers?: HeaderField[];
  /** The connection closed (GOAWAY or the socket) before the stream ended. */
  connectionClosed?: boolean;
}

/** One request's stream: what came back so far. */
export interface RawH2Stream {
  /** The stream id. */
  readonly id: number;
  /** The first header block of the answer. */
  readonly headers: Promise<HeaderField[]>;
  /** The DATA payload bytes received, in order. */
  readonly data: Uint8Array[];
  /** How many DATA payload bytes arrived. */
  readonly dataBytes: number;
  /** Resolves when the stream ends: reset, ended with trailers, or its connection gone. */
  readonly ended: Promise<RawH2End>;
}

/** A raw HTTP/2 connection (see the module's description). */
export interface RawH2Connection {
  /** Sends a request (HEADERS, then the body in one DATA frame with END_STREAM). */
  request(headers: HeaderField[], body: Uint8Array): RawH2Stream;
  /** Resolves when the connection is gone, with the GOAWAY error code if one came. */
  readonly closed: Promise<{ goaway?: number }>;
  /** Closes the socket. */
  close(): void;
}

class StreamState implements RawH2Stream {
  data: Uint8Array[] = [];
  dataBytes = 0;
  headers: Promise<HeaderField[]>;
  ended: Promise<RawH2End>;
  resolveHeaders!: (h: HeaderField[]) => void;
  resolveEnded!: (e: RawH2End) => void;
  gotHeaders = false;
  constructor(readonly id: number) {
    this.headers = new Promise((r) => this.resolveHeaders = r);
    this.ended = new Promise((r) => this.resolveEnded = r);
    this.headers.catch(() => {});
  }
}

function settingsFrame(pairs: [number, number][]): Uint8Array {
  const payload = new Uint8Array(6 * pairs.length);
  const view = new DataView(payload.buffer);
  pairs.forEach(([id, value], i) => {
    view.setUint16(6 * i, id);
    view.setUint32(6 * i + 2, value);
  });
  return frame(FrameType.SETTINGS, 0, 0, payload);
}

/**
 * Connects to `host:port` and announces a stream window of `streamWindow` bytes, never given back.
 */
export async function rawH2Connect(
  address: string,
  streamWindow: number,
): Promise<RawH2Connection> {
  const [hostname, port] = address.split(":");
  const conn = await Deno.connect({ hostname: hostname!, port: Number(port) });
  conn.setNoDelay(true);
  const streams = new Map<number, StreamState>();
  const decoder = new HpackDecoder();
  let nextId = 1;
  let gone = false;
  let writing = Promise.resolve();
  const write = (bytes: Uint8Array) => {
    writing = writing.then(async () => {
      if (gone) return;
      try {
        let at = 0;
        while (at < bytes.length) at += await conn.write(bytes.subarray(at));
      } catch {
        gone = true;
      }
    });
  };
  write(preface);
  write(settingsFrame([
    [Setting.ENABLE_PUSH, 0],
    [Setting.INITIAL_WINDOW_SIZE, streamWindow],
  ]));

  // A header block in progress (HEADERS without END_HEADERS, then CONTINUATION).
  let block: { id: number; endStream: boolean; parts: Uint8Array[] } | undefined;
  const onHeaderBlock = (id: number, endStream: boolean, parts: Uint8Array[]) => {
    const bytes = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) {
      bytes.set(p, at);
      at += p.length;
    }
    const fields = decoder.decode(bytes);
    const s = streams.get(id);
    if (!s) return;
    if (!s.gotHeaders) {
      s.gotHeaders = true;
      s.resolveHeaders(fields);
    }
    if (endStream) {
      streams.delete(id);
      s.resolveEnded({ trailers: fields });
    }
  };

  let goaway: number | undefined;
  const closed = (async () => {
    let buffered = new Uint8Array(0);
    const chunk = new Uint8Array(64 * 1024);
    try {
      for (;;) {
        const n = await conn.read(chunk);
        if (n === null) break;
        const joined = new Uint8Array(buffered.length + n);
        joined.set(buffered);
        joined.set(chunk.subarray(0, n), buffered.length);
        buffered = joined;
        while (buffered.length >= 9) {
          const length = (buffered[0]! << 16) | (buffered[1]! << 8) | buffered[2]!;
          if (buffered.length < 9 + length) break;
          const type = buffered[3]!;
          const flags = buffered[4]!;
          const id = new DataView(buffered.buffer, buffered.byteOffset).getUint32(5) & 0x7fffffff;
          let payload = buffered.slice(9, 9 + length);
          buffered = buffered.slice(9 + length);
          if ((type === FrameType.DATA || type === FrameType.HEADERS) && flags & Flag.PADDED) {
            payload = payload.subarray(1, payload.length - payload[0]!);
          }
          switch (type) {
            case FrameType.SETTINGS:
              if (!(flags & Flag.ACK)) write(frame(FrameType.SETTINGS, Flag.ACK, 0));
              break;
            case FrameType.PING:
              if (!(flags & Flag.ACK)) write(frame(FrameType.PING, Flag.ACK, 0, payload));
              break;
            case FrameType.GOAWAY:
              goaway = new DataView(payload.buffer, payload.byteOffset).getUint32(4);
              break;
            case FrameType.RST_STREAM: {
              const s = streams.get(id);
              if (s) {
                streams.delete(id);
                s.resolveEnded({
                  reset: new DataView(payload.buffer, payload.byteOffset).getUint32(0),
                });
              }
              break;
            }
            case FrameType.DATA: {
              const s = streams.get(id);
              if (s) {
                s.data.push(payload);
                s.dataBytes += payload.length;
                if (flags & Flag.END_STREAM) {
                  streams.delete(id);
                  s.resolveEnded({});
                }
              }
              break;
            }
            case FrameType.HEADERS: {
              const fragment = flags & Flag.PRIORITY ? payload.subarray(5) : payload;
              const endStream = (flags & Flag.END_STREAM) !== 0;
              if (flags & Flag.END_HEADERS) onHeaderBlock(id, endStream, [fragment]);
              else block = { id, endStream, parts: [fragment] };
              break;
            }
            case FrameType.CONTINUATION:
              if (block && block.id === id) {
                block.parts.push(payload);
                if (flags & Flag.END_HEADERS) {
                  const done = block;
                  block = undefined;
                  onHeaderBlock(done.id, done.endStream, done.parts);
                }
              }
              break;
          }
        }
      }
    } catch {
      // A reset socket is a close.
    }
    gone = true;
    for (const s of streams.values()) {
      s.resolveHeaders([]);
      s.resolveEnded({ connectionClosed: true });
    }
    streams.clear();
    return goaway === undefined ? {} : { goaway };
  })();

  return {
    request(headers, body) {
      const id = nextId;
      nextId += 2;
      const s = new StreamState(id);
      if (gone) {
        s.resolveHeaders([]);
        s.resolveEnded({ connectionClosed: true });
        return s;
      }
      streams.set(id, s);
      write(frame(FrameType.HEADERS, Flag.END_HEADERS, id, hpackEncode(headers)));
      write(frame(FrameType.DATA, Flag.END_STREAM, id, body));
      return s;
    },
    closed,
    close() {
      gone = true;
      try {
        conn.close();
      } catch { /* closed */ }
    },
  };
}

/** The request headers of a gRPC call to `path` (no TLS). */
export function grpcRequestHeaders(
  path: string,
  metadata: Record<string, string> = {},
): HeaderField[] {
  return [
    [":method", "POST"],
    [":scheme", "http"],
    [":path", path],
    [":authority", "localhost"],
    ["content-type", "application/grpc"],
    ["te", "trailers"],
    ...Object.entries(metadata),
  ];
}

/** A gRPC message in its length-prefixed frame (uncompressed). */
export function grpcMessage(message: Uint8Array): Uint8Array {
  const out = new Uint8Array(5 + message.length);
  new DataView(out.buffer).setUint32(1, message.length);
  out.set(message, 5);
  return out;
}

/** The complete gRPC messages in `chunks` (a DATA stream), and how many bytes trail them. */
export function grpcMessages(chunks: Uint8Array[]): { messages: Uint8Array[]; rest: number } {
  const all = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.length;
  }
  const messages: Uint8Array[] = [];
  let offset = 0;
  while (all.length - offset >= 5) {
    const length = new DataView(all.buffer, offset + 1, 4).getUint32(0);
    if (all.length - offset - 5 < length) break;
    messages.push(all.slice(offset + 5, offset + 5 + length));
    offset += 5 + length;
  }
  return { messages, rest: all.length - offset };
}
