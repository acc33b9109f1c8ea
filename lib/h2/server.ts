/**
 * A small HTTP/2 server over cleartext TCP (h2c with prior knowledge, RFC 9113), written on
 * `Deno.listen`, for the services' gRPC port.
 *
 * Why not node:http2 (under @grpc/grpc-js or connect-node): in Deno 2.9.6 it aborts the whole
 * process (`free(): invalid pointer`, or nghttp2's `find_stream_on_goaway_func` assertion;
 * denoland/deno#36788) when clients close their connections: 32 stock grpc-js clients making 50
 * calls each and closing killed a grpc-js server in 4 runs of 4 here. A crash that any client can
 * cause is not acceptable for a service, and `Deno.serve` cannot send the trailers gRPC needs.
 *
 * Scope: what a gRPC server needs. Streams, flow control in both directions, SETTINGS, PING,
 * GOAWAY, RST_STREAM, CONTINUATION, padding; no server push, no priorities (ignored), no HTTP/1.1
 * upgrade. Hardening: a cap on concurrent streams (REFUSED_STREAM), on header list size, on
 * buffered output, and on peer resets per second (rapid-reset, CVE-2023-44487); any protocol
 * violation ends the connection with GOAWAY, never the process.
 *
 * @module
 */

import { type HeaderField, HpackDecoder, hpackEncode, HpackError } from "./hpack.ts";

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

const FrameType = {
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

const END_STREAM = 0x1;
const ACK = 0x1;
const END_HEADERS = 0x4;
const PADDED = 0x8;
const PRIORITY = 0x20;

const preface = new TextEncoder().encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
const maxFrameSize = 16_384; // what we accept (the default; we never raise it)
const streamWindow = 256 * 1024; // what we let a peer send per stream before it must wait
const connectionWindow = 1024 * 1024;
const maxWindow = 2 ** 31 - 1;

// The reasons a stream's signal aborts with. Made once: a DOMException captures a stack trace, and
// every stream's signal aborts when the stream ends (CPU profile of a service under gRPC load:
// ~4% of its time went to making these per stream).
/** The payload of the PING that ends the first step of a graceful GOAWAY. */
const drainPing = new TextEncoder().encode("drain~01");

const streamEnded = new DOMException("The stream ended", "AbortError");
const streamReset = new DOMException("The stream was reset", "AbortError");
const peerReset = new DOMException("The peer reset the stream", "AbortError");
const connectionFailed = new DOMException("The connection failed", "AbortError");
const connectionClosed = new DOMException("The connection closed", "AbortError");

/** A request stream as the handler sees it. */
export interface H2Request {
  /** The stream id. */
  readonly streamId: number;
  /** Header fields in order, pseudo-headers (`:method`, `:path`...) included. */
  readonly headers: readonly HeaderField[];
  /** The request body, chunk by chunk; ends at END_STREAM; throws if the stream is reset. */
  readonly body: AsyncIterable<Uint8Array>;
  /** Aborts when the peer resets the stream or the connection goes away. */
  readonly signal: AbortSignal;
}

/** The response side of a stream. Calls after the stream closed are ignored. */
export interface H2Response {
  /** Sends the response headers (or, with `endStream`, a headers-only response). */
  headers(fields: HeaderField[], endStream?: boolean): void;
  /**
   * Sends body bytes, respecting flow control. Returns nothing when they were all queued for the
   * socket at once (the windows had room), else a promise that resolves when they are.
   */
  data(bytes: Uint8Array): Promise<void> | undefined;
  /** Sends trailers and ends the stream. */
  trailers(fields: HeaderField[]): void;
  /** Resets the stream. */
  reset(code: number): void;
}

/** Handles one request stream. */
export type H2Handler = (req: H2Request, res: H2Response) => void | Promise<void>;

/** Options of {@link serveH2}. */
export interface H2ServerOptions {
  /** Port (0 = any free port). */
  port: number;
  /** Address. */
  hostname: string;
  /** The stream handler. */
  handler: H2Handler;
  /** SETTINGS_MAX_CONCURRENT_STREAMS (default 100). */
  maxConcurrentStreams?: number;
  /** SETTINGS_MAX_HEADER_LIST_SIZE (default 64 KiB). */
  maxHeaderListSize?: number;
  /** Reports connection-level failures (they never throw out of the server). */
  onError?: (error: unknown) => void;
}

/** A running HTTP/2 server. */
export interface H2Server {
  /** The bound port. */
  port: number;
  /**
   * Stops accepting connections, sends GOAWAY on every connection, lets open streams finish, and
   * closes what is left after `graceMs`.
   */
  close(graceMs: number): Promise<void>;
}

type ConnectionOptions =
  & Required<Omit<H2ServerOptions, "onError">>
  & Pick<H2ServerOptions, "onError">;

class ConnectionError extends Error {
  constructor(readonly code: number, message: string) {
    super(message);
  }
}

function frameHeader(length: number, type: number, flags: number, streamId: number): Uint8Array {
  const h = new Uint8Array(9);
  h[0] = length >>> 16;
  h[1] = length >>> 8;
  h[2] = length;
  h[3] = type;
  h[4] = flags;
  new DataView(h.buffer).setUint32(5, streamId & 0x7fffffff);
  return h;
}

function frame(type: number, flags: number, streamId: number, payload?: Uint8Array): Uint8Array {
  const out = new Uint8Array(9 + (payload?.length ?? 0));
  out.set(frameHeader(payload?.length ?? 0, type, flags, streamId));
  if (payload) out.set(payload, 9);
  return out;
}

function u32(value: number): Uint8Array {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, value);
  return b;
}

/** One open stream. */
class Stream {
  readonly abort = new AbortController();
  sendWindow: number;
  /** Bytes received and not yet read by the handler. */
  buffered = 0;
  /** What the peer may still send on this stream: our advertised window, as we see it. */
  recvWindow = streamWindow;
  chunks: Uint8Array[] = [];
  ended = false; // the peer sent END_STREAM
  closed = false; // we ended the stream (or it was reset)
  headersSent = false;
  wake: (() => void) | undefined;

  constructor(readonly id: number, initialWindow: number) {
    this.sendWindow = initialWindow;
  }
}

class Connection {
  readonly #conn: Deno.Conn;
  readonly #options: ConnectionOptions;
  readonly #decoder = new HpackDecoder();
  readonly #streams = new Map<number, Stream>();
  #lastStreamId = 0;
  #goingAway = false;
  #closed = false;
  #peerInitialWindow = 65_535;
  #peerMaxFrame = 16_384;
  #sendWindow = 65_535;
  #windowWaiters: (() => void)[] = [];
  #out: Uint8Array[] = [];
  #outBytes = 0;
  #flushing = false;
  #continuation:
    | { streamId: number; flags: number; chunks: Uint8Array[]; size: number }
    | undefined;
  #resets: number[] = [];
  /** Bytes the handlers consumed that the peer's connection window has not been given back yet. */
  #unacked = 0;
  /** Resolves when the connection has no open streams (used by graceful close). */
  #idle: (() => void) | undefined;

  constructor(conn: Deno.Conn, options: ConnectionOptions) {
    this.#conn = conn;
    this.#options = options;
  }

  get streamCount(): number {
    return this.#streams.size;
  }

  async run(): Promise<void> {
    const settings = new Uint8Array(18);
    const view = new DataView(settings.buffer);
    view.setUint16(0, 0x3); // MAX_CONCURRENT_STREAMS
    view.setUint32(2, this.#options.maxConcurrentStreams);
    view.setUint16(6, 0x4); // INITIAL_WINDOW_SIZE
    view.setUint32(8, streamWindow);
    view.setUint16(12, 0x6); // MAX_HEADER_LIST_SIZE
    view.setUint32(14, this.#options.maxHeaderListSize);
    this.#write(frame(FrameType.SETTINGS, 0, 0, settings));
    this.#write(frame(FrameType.WINDOW_UPDATE, 0, 0, u32(connectionWindow - 65_535)));

    let buffer: Uint8Array = new Uint8Array(0);
    let sawPreface = false;
    let failed = false; // after a connection error: discard input until the peer closes
    // One read buffer per connection, reused (cheaper than the ReadableStream's chunk per read):
    // whatever outlives a read is copied out of it (frame remainders, DATA, HPACK strings).
    const readBuffer = new Uint8Array(64 * 1024);
    for (;;) {
      let chunk: Uint8Array;
      try {
        const n = await this.#conn.read(readBuffer);
        if (n === null) break;
        chunk = readBuffer.subarray(0, n);
      } catch {
        break; // reset or closed
      }
      if (failed) continue;
      try {
        buffer = buffer.length === 0 ? chunk : concat([buffer, chunk]);
        if (!sawPreface) {
          const n = Math.min(buffer.length, preface.length);
          if (!preface.subarray(0, n).every((b, i) => buffer[i] === b)) break; // not HTTP/2
          if (buffer.length < preface.length) {
            buffer = buffer.slice(); // out of the read buffer
            continue;
          }
          buffer = buffer.subarray(preface.length);
          sawPreface = true;
        }
        let offset = 0;
        while (buffer.length - offset >= 9) {
          const length = (buffer[offset]! << 16) | (buffer[offset + 1]! << 8) | buffer[offset + 2]!;
          if (length > maxFrameSize) {
            throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "frame too large");
          }
          if (buffer.length - offset < 9 + length) break;
          const type = buffer[offset + 3]!;
          const flags = buffer[offset + 4]!;
          const streamId =
            new DataView(buffer.buffer, buffer.byteOffset + offset + 5, 4).getUint32(0) &
            0x7fffffff;
          const payload = buffer.subarray(offset + 9, offset + 9 + length);
          offset += 9 + length;
          this.#frame(type, flags, streamId, payload);
        }
        buffer = offset === buffer.length ? new Uint8Array(0) : buffer.slice(offset);
      } catch (error) {
        if (!(error instanceof ConnectionError)) this.#options.onError?.(error);
        this.#goaway(error instanceof ConnectionError ? error.code : ErrorCode.INTERNAL_ERROR);
        // Closing with unread input would reset the connection and lose the GOAWAY: finish
        // writing, half-close, and keep reading (discarding) until the peer closes or 1 s passes.
        failed = true;
        this.#linger();
      }
    }
    this.#teardown();
  }

  #frame(type: number, flags: number, streamId: number, payload: Uint8Array): void {
    if (this.#continuation && type !== FrameType.CONTINUATION) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "expected CONTINUATION");
    }
    switch (type) {
      case FrameType.DATA:
        return this.#onData(flags, streamId, payload);
      case FrameType.HEADERS:
        return this.#onHeaders(flags, streamId, payload);
      case FrameType.PRIORITY:
        if (streamId === 0 || payload.length !== 5) {
          throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "bad PRIORITY");
        }
        return;
      case FrameType.RST_STREAM:
        return this.#onReset(streamId, payload);
      case FrameType.SETTINGS:
        return this.#onSettings(flags, streamId, payload);
      case FrameType.PUSH_PROMISE:
        throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "clients cannot push");
      case FrameType.PING:
        if (streamId !== 0 || payload.length !== 8) {
          throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "bad PING");
        }
        if (!(flags & ACK)) this.#write(frame(FrameType.PING, ACK, 0, payload.slice()));
        else if (payload.every((b, i) => b === drainPing[i])) this.#finalGoaway();
        return;
      case FrameType.GOAWAY:
        // The client is closing; its GOAWAY concerns streams we would open (we never do), so the
        // streams it still sends are served.
        return;
      case FrameType.WINDOW_UPDATE:
        return this.#onWindowUpdate(streamId, payload);
      case FrameType.CONTINUATION:
        return this.#onContinuation(flags, streamId, payload);
      default:
        return; // unknown frame types are ignored (RFC 9113 4.1)
    }
  }

  #unpad(flags: number, payload: Uint8Array): Uint8Array {
    if (!(flags & PADDED)) return payload;
    const pad = payload[0];
    if (pad === undefined || pad >= payload.length) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "bad padding");
    }
    return payload.subarray(1, payload.length - pad);
  }

  #onHeaders(flags: number, streamId: number, payload: Uint8Array): void {
    if (streamId === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "HEADERS on stream 0");
    let block = this.#unpad(flags, payload);
    if (flags & PRIORITY) {
      if (block.length < 5) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "bad HEADERS");
      block = block.subarray(5);
    }
    if (flags & END_HEADERS) return this.#onHeaderBlock(streamId, flags, block);
    this.#continuation = { streamId, flags, chunks: [block.slice()], size: block.length };
  }

  #onContinuation(flags: number, streamId: number, payload: Uint8Array): void {
    const c = this.#continuation;
    if (!c || c.streamId !== streamId) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "unexpected CONTINUATION");
    }
    c.chunks.push(payload.slice());
    c.size += payload.length;
    if (c.size > this.#options.maxHeaderListSize) {
      throw new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "header block too large");
    }
    if (!(flags & END_HEADERS)) return;
    this.#continuation = undefined;
    this.#onHeaderBlock(streamId, c.flags, concat(c.chunks));
  }

  #onHeaderBlock(streamId: number, flags: number, block: Uint8Array): void {
    let fields: HeaderField[];
    try {
      // Every block is decoded, even for refused streams, to keep the HPACK table in step.
      fields = this.#decoder.decode(block, this.#options.maxHeaderListSize);
    } catch (error) {
      if (error instanceof HpackError) {
        throw new ConnectionError(ErrorCode.COMPRESSION_ERROR, error.message);
      }
      throw error;
    }
    const existing = this.#streams.get(streamId);
    if (existing) {
      // Trailers from the client: they must end the stream.
      if (!(flags & END_STREAM)) {
        throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "headers in body");
      }
      existing.ended = true;
      existing.wake?.();
      return;
    }
    if (streamId % 2 === 0 || streamId <= this.#lastStreamId) {
      if (streamId <= this.#lastStreamId) return; // a stream we already closed: ignore
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "bad stream id");
    }
    this.#lastStreamId = streamId;
    if (this.#goingAway || this.#streams.size >= this.#options.maxConcurrentStreams) {
      this.#write(frame(FrameType.RST_STREAM, 0, streamId, u32(ErrorCode.REFUSED_STREAM)));
      return;
    }
    const stream = new Stream(streamId, this.#peerInitialWindow);
    stream.ended = (flags & END_STREAM) !== 0;
    this.#streams.set(streamId, stream);
    const request: H2Request = {
      streamId,
      headers: fields,
      body: this.#body(stream),
      signal: stream.abort.signal,
    };
    Promise.resolve()
      .then(() => this.#options.handler(request, this.#response(stream)))
      .catch((error) => {
        this.#options.onError?.(error);
        this.#response(stream).reset(ErrorCode.INTERNAL_ERROR);
      });
  }

  async *#body(stream: Stream): AsyncIterable<Uint8Array> {
    for (;;) {
      if (stream.abort.signal.aborted) throw stream.abort.signal.reason;
      const chunk = stream.chunks.shift();
      if (chunk) {
        stream.buffered -= chunk.length;
        // Reopen the windows by what the handler consumed: the connection's once a quarter of it
        // is used (not per request, which cost a write of its own), a stream's at once.
        this.#unacked += chunk.length;
        if (this.#unacked >= connectionWindow / 4) {
          this.#write(frame(FrameType.WINDOW_UPDATE, 0, 0, u32(this.#unacked)));
          this.#unacked = 0;
        }
        if (!stream.ended) {
          this.#write(frame(FrameType.WINDOW_UPDATE, 0, stream.id, u32(chunk.length)));
          stream.recvWindow += chunk.length; // else a body over 256 KiB was a FLOW_CONTROL_ERROR
        }
        yield chunk;
        continue;
      }
      if (stream.ended) return;
      await new Promise<void>((resolve) => stream.wake = resolve);
      stream.wake = undefined;
    }
  }

  #onData(flags: number, streamId: number, payload: Uint8Array): void {
    if (streamId === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "DATA on stream 0");
    const stream = this.#streams.get(streamId);
    if (!stream || stream.ended) {
      // Closed or unknown: return the bytes to the connection window and refuse the stream.
      if (payload.length > 0) {
        this.#write(frame(FrameType.WINDOW_UPDATE, 0, 0, u32(payload.length)));
      }
      if (streamId > this.#lastStreamId) {
        throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "DATA on idle stream");
      }
      if (!stream) return;
      this.#write(frame(FrameType.RST_STREAM, 0, streamId, u32(ErrorCode.STREAM_CLOSED)));
      return;
    }
    const data = this.#unpad(flags, payload);
    const padding = payload.length - data.length;
    if (padding > 0) {
      this.#write(frame(FrameType.WINDOW_UPDATE, 0, 0, u32(padding)));
      this.#write(frame(FrameType.WINDOW_UPDATE, 0, streamId, u32(padding)));
    }
    stream.buffered += data.length;
    stream.recvWindow -= payload.length;
    if (stream.recvWindow < 0) {
      throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "stream window exceeded");
    }
    stream.recvWindow += padding; // padding is returned at once (above)
    if (data.length > 0) stream.chunks.push(data.slice());
    if (flags & END_STREAM) stream.ended = true;
    stream.wake?.();
  }

  #onReset(streamId: number, payload: Uint8Array): void {
    if (streamId === 0 || payload.length !== 4) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "bad RST_STREAM");
    }
    const now = Date.now();
    this.#resets.push(now);
    while (this.#resets.length > 0 && this.#resets[0]! < now - 1000) this.#resets.shift();
    if (this.#resets.length > 200) {
      throw new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "too many stream resets");
    }
    const stream = this.#streams.get(streamId);
    if (stream) this.#finish(stream, peerReset);
  }

  #onSettings(flags: number, streamId: number, payload: Uint8Array): void {
    if (streamId !== 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "SETTINGS on a stream");
    if (flags & ACK) return;
    if (payload.length % 6 !== 0) {
      throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "bad SETTINGS");
    }
    const view = new DataView(payload.buffer, payload.byteOffset, payload.length);
    for (let i = 0; i < payload.length; i += 6) {
      const id = view.getUint16(i);
      const value = view.getUint32(i + 2);
      if (id === 0x4) {
        if (value > maxWindow) {
          throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "window too large");
        }
        const delta = value - this.#peerInitialWindow;
        this.#peerInitialWindow = value;
        for (const s of this.#streams.values()) s.sendWindow += delta;
      } else if (id === 0x5) {
        if (value < 16_384 || value > 16_777_215) {
          throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "bad MAX_FRAME_SIZE");
        }
        this.#peerMaxFrame = value;
      } else if (id === 0x2 && value > 1) {
        throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "bad ENABLE_PUSH");
      }
    }
    this.#write(frame(FrameType.SETTINGS, ACK, 0));
    this.#wakeWriters();
  }

  #onWindowUpdate(streamId: number, payload: Uint8Array): void {
    if (payload.length !== 4) {
      throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "bad WINDOW_UPDATE");
    }
    const increment = new DataView(payload.buffer, payload.byteOffset, 4).getUint32(0) & 0x7fffffff;
    if (streamId === 0) {
      if (increment === 0) {
        throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "zero WINDOW_UPDATE");
      }
      this.#sendWindow += increment;
      if (this.#sendWindow > maxWindow) {
        throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "window overflow");
      }
    } else {
      const stream = this.#streams.get(streamId);
      if (!stream) return;
      if (increment === 0) return this.#response(stream).reset(ErrorCode.PROTOCOL_ERROR);
      stream.sendWindow += increment;
      if (stream.sendWindow > maxWindow) {
        return this.#response(stream).reset(ErrorCode.FLOW_CONTROL_ERROR);
      }
    }
    this.#wakeWriters();
  }

  #wakeWriters(): void {
    const waiters = this.#windowWaiters;
    this.#windowWaiters = [];
    for (const w of waiters) w();
  }

  #response(stream: Stream): H2Response {
    const writeHeaders = (fields: HeaderField[], end: boolean) => {
      const block = hpackEncode(fields);
      const flags = end ? END_STREAM : 0;
      if (block.length <= this.#peerMaxFrame) {
        this.#write(frame(FrameType.HEADERS, flags | END_HEADERS, stream.id, block));
        return;
      }
      let offset = 0;
      while (offset < block.length) {
        const part = block.subarray(offset, offset + this.#peerMaxFrame);
        const last = offset + part.length >= block.length;
        const type = offset === 0 ? FrameType.HEADERS : FrameType.CONTINUATION;
        this.#write(
          frame(type, (offset === 0 ? flags : 0) | (last ? END_HEADERS : 0), stream.id, part),
        );
        offset += part.length;
      }
    };
    return {
      headers: (fields, endStream = false) => {
        if (stream.closed || stream.headersSent) return;
        stream.headersSent = true;
        writeHeaders(fields, endStream);
        if (endStream) this.#finish(stream);
      },
      data: (bytes) => {
        const room = Math.min(this.#sendWindow, stream.sendWindow, this.#peerMaxFrame);
        if (bytes.length <= room || stream.closed) {
          // The common case, a small message: queued now, so that headers, data and trailers
          // leave in one write.
          if (stream.closed || bytes.length === 0) return;
          this.#sendWindow -= bytes.length;
          stream.sendWindow -= bytes.length;
          this.#write(frame(FrameType.DATA, 0, stream.id, bytes));
          return;
        }
        return this.#dataSlow(stream, bytes);
      },
      trailers: (fields) => {
        if (stream.closed) return;
        writeHeaders(fields, true);
        this.#finish(stream);
      },
      reset: (code) => {
        if (stream.closed) return;
        this.#write(frame(FrameType.RST_STREAM, 0, stream.id, u32(code)));
        this.#finish(stream, streamReset);
      },
    };
  }

  async #dataSlow(stream: Stream, bytes: Uint8Array): Promise<void> {
    let offset = 0;
    while (offset < bytes.length && !stream.closed) {
      const room = Math.min(this.#sendWindow, stream.sendWindow, this.#peerMaxFrame);
      if (room <= 0) {
        await new Promise<void>((resolve) => {
          this.#windowWaiters.push(resolve);
          stream.abort.signal.addEventListener("abort", () => resolve(), { once: true });
        });
        continue;
      }
      const part = bytes.subarray(offset, offset + room);
      this.#sendWindow -= part.length;
      stream.sendWindow -= part.length;
      this.#write(frame(FrameType.DATA, 0, stream.id, part));
      offset += part.length;
    }
  }

  #finish(stream: Stream, reason?: unknown): void {
    if (stream.closed) return;
    stream.closed = true;
    this.#streams.delete(stream.id);
    if (stream.buffered > 0) {
      // Received bytes no handler will read (an answer sent before the body was read, e.g. a
      // message over the size limit): give them back to the connection's window, or a few such
      // calls stall every other stream of the connection until their deadlines.
      this.#write(frame(FrameType.WINDOW_UPDATE, 0, 0, u32(stream.buffered)));
      stream.buffered = 0;
      stream.chunks = [];
    }
    // The handler's signal fires on every end, as connect's HandlerContext signal does.
    stream.abort.abort(reason ?? streamEnded);
    stream.wake?.();
    if (this.#streams.size === 0) this.#idle?.();
  }

  #write(bytes: Uint8Array): void {
    if (this.#closed) return; // closing: nothing new after the frames already queued
    this.#out.push(bytes);
    this.#outBytes += bytes.length;
    if (this.#outBytes > 16 * 1024 * 1024) {
      // The peer does not read: drop it rather than buffer without bound.
      this.#teardown();
      return;
    }
    if (!this.#flushing) {
      this.#flushing = true;
      queueMicrotask(() => void this.#flush());
    }
  }

  #flushed: Promise<void> = Promise.resolve();

  #flush(): Promise<void> {
    return this.#flushed = this.#doFlush();
  }

  async #doFlush(): Promise<void> {
    try {
      while (this.#out.length > 0) {
        let data = this.#out.length === 1 ? this.#out[0]! : concat(this.#out);
        this.#out = [];
        this.#outBytes = 0;
        while (data.length > 0) data = data.subarray(await this.#conn.write(data));
      }
    } catch {
      this.#out = [];
      this.#teardown();
    } finally {
      this.#flushing = false;
    }
  }

  #linger(): void {
    for (const stream of [...this.#streams.values()]) {
      this.#finish(stream, connectionFailed);
    }
    (async () => {
      for (let i = 0; i < 1000 && (this.#flushing || this.#out.length > 0); i++) {
        await this.#flushed;
        await new Promise((r) => setTimeout(r, 0));
      }
      try {
        await this.#conn.closeWrite();
      } catch { /* already closed */ }
      setTimeout(() => this.#teardown(), 1000);
    })();
  }

  #goaway(code: number, lastStreamId = this.#lastStreamId): void {
    const payload = new Uint8Array(8);
    new DataView(payload.buffer).setUint32(0, lastStreamId);
    new DataView(payload.buffer).setUint32(4, code);
    this.#write(frame(FrameType.GOAWAY, 0, 0, payload));
  }

  #drainTimer: ReturnType<typeof setTimeout> | undefined;

  /**
   * Graceful, in two steps (RFC 9113 6.8): a GOAWAY naming the largest stream id and a PING, so
   * that the streams the client sent meanwhile are still served; when the PING comes back (or after
   * a second), a GOAWAY naming the last stream actually received, and later streams are refused.
   * (Deno's node:http2 client, which grpc-js uses under Deno, sometimes aborts its process when
   * a server it has an open channel to shuts down: nghttp2's assertion `stream->closed_next ==
   * NULL` in find_stream_on_goaway_func. Seen with a single GOAWAY, with this two-step one, and
   * with a GOAWAY naming the largest id alone; not a fault of the server's frames as far as we
   * can tell. Our tests close their channels before stopping a stack.)
   * Resolves when no stream is open.
   */
  drain(): Promise<void> {
    if (this.#drainTimer === undefined && !this.#goingAway) {
      this.#goaway(ErrorCode.NO_ERROR, 0x7fffffff);
      this.#write(frame(FrameType.PING, 0, 0, drainPing));
      this.#drainTimer = setTimeout(() => this.#finalGoaway(), 1000);
    }
    if (this.#streams.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idle = resolve);
  }

  #finalGoaway(): void {
    clearTimeout(this.#drainTimer);
    if (this.#goingAway || this.#closed) return;
    this.#goingAway = true;
    this.#goaway(ErrorCode.NO_ERROR);
  }

  #teardown(): void {
    clearTimeout(this.#drainTimer);
    for (const stream of [...this.#streams.values()]) {
      this.#finish(stream, connectionClosed);
    }
    this.#wakeWriters();
    if (this.#closed) return;
    // Let queued frames (a GOAWAY) go out, for at most a second, then close the socket.
    const out = (async () => {
      for (let i = 0; i < 1000 && (this.#flushing || this.#out.length > 0); i++) {
        await this.#flushed;
        await new Promise((r) => setTimeout(r, 0));
      }
    })();
    this.#closed = true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    Promise.race([out, new Promise((r) => timer = setTimeout(r, 1000))]).finally(() => {
      clearTimeout(timer);
      try {
        this.#conn.close();
      } catch { /* already closed */ }
    });
  }

  close(): void {
    this.#teardown();
  }
}

/** The parts, joined into one array. */
export function concat(parts: readonly Uint8Array[]): Uint8Array {
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

/** Starts the server. */
export function serveH2(options: H2ServerOptions): H2Server {
  const listener = Deno.listen({ hostname: options.hostname, port: options.port });
  const settings = {
    maxConcurrentStreams: 100,
    maxHeaderListSize: 64 * 1024,
    ...options,
  };
  const connections = new Set<Connection>();
  const accepting = (async () => {
    for await (const conn of listener) {
      try {
        conn.setNoDelay(true);
      } catch { /* not TCP */ }
      const connection = new Connection(conn, settings);
      connections.add(connection);
      connection.run().finally(() => connections.delete(connection));
    }
  })().catch(() => {});
  return {
    port: (listener.addr as Deno.NetAddr).port,
    async close(graceMs) {
      try {
        listener.close();
      } catch { /* already closed */ }
      await accepting;
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        Promise.all([...connections].map((c) => c.drain())),
        new Promise((r) => timer = setTimeout(r, graceMs)),
      ]);
      clearTimeout(timer);
      for (const c of connections) c.close();
    },
  };
}
