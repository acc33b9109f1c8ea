/**
 * A small HTTP/2 client over cleartext TCP (h2c with prior knowledge, RFC 9113), written on
 * `Deno.connect`, for the gateway's calls into the services' gRPC ports.
 *
 * Why not `fetch`: per call it builds a Request, a Headers list, a Response and a body stream, and
 * makes three async ops (measured on our 2-core machines, the gateway spent ~16% of its CPU in
 * fetch for a GET, and more with `fetch` over HTTP/2, whose client costs more than HTTP/1.1's).
 * Here a call is a HEADERS and a DATA frame appended to the connection's output, which leaves in
 * one socket write with every other call queued meanwhile, and its answer is parsed out of the
 * same reads as the answers of the other calls in flight.
 *
 * Scope: what a unary RPC client needs. Streams carry one request body and one response (headers,
 * body, trailers); flow control in both directions; SETTINGS, PING, GOAWAY, RST_STREAM,
 * CONTINUATION and padding; no server push (disabled), no priorities.
 *
 * Connections: a pool of at most `connections` per target (default 2), used least-loaded first
 * within the peer's SETTINGS_MAX_CONCURRENT_STREAMS; a call that finds every connection full
 * waits for a stream to end. A connection is retired after `maxConnectionAgeMs` (default 30 s):
 * it takes no new calls, finishes the ones it has and closes, so that calls spread again over the
 * replicas behind a Kubernetes Service (one HTTP/2 connection would stick to one pod forever).
 * Failures: a connection that fails or closes fails its calls; a call the server did not process
 * (refused, or above a GOAWAY's last stream id) fails with `processed: false`, so the caller knows
 * it may send it again.
 *
 * @module
 */

import { concat } from "./bytes.ts";
import {
  ErrorCode,
  Flag,
  frame,
  FrameType,
  maxWindow,
  preface,
  readU32,
  Setting,
  u32,
} from "./h2_frame.ts";
import { type HeaderField, HpackDecoder, HpackEncoder, HpackError } from "./hpack.ts";

/** Options of {@link createH2Client}. */
export interface H2ClientOptions {
  /** Host to connect to. */
  hostname: string;
  /** Port to connect to. */
  port: number;
  /** Connections to keep at most (default 2). */
  connections?: number;
  /** How long a connection takes new calls (default 30 s). */
  maxConnectionAgeMs?: number;
  /** How long a TCP connect may take (default 5 s). */
  connectTimeoutMs?: number;
  /** The largest response (headers, body and trailers) accepted (default 16 MiB). */
  maxResponseBytes?: number;
  /** The clock connection ages are read on (ms; default `Date.now`). */
  now?: () => number;
}

/** A complete response. */
export interface H2ClientResponse {
  /** The `:status`. */
  status: number;
  /** The response's header fields (pseudo-headers left out). */
  headers: HeaderField[];
  /** The body. */
  body: Uint8Array;
  /** The trailers (empty when there were none). */
  trailers: HeaderField[];
}

/** Why a call failed below HTTP. */
export class H2ClientError extends Error {
  /** False when the server certainly did not process the request (it may be sent again). */
  readonly processed: boolean;
  constructor(message: string, processed: boolean, options?: ErrorOptions) {
    super(message, options);
    this.name = "H2ClientError";
    this.processed = processed;
  }
}

/**
 * What a request may be cancelled by: an AbortSignal, or a {@link Cancellation} (the same, for
 * the one listener the client adds, at a fraction of its cost).
 */
export interface CancelSignal {
  readonly aborted: boolean;
  readonly reason: unknown;
  addEventListener(type: "abort", listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: "abort", listener: () => void): void;
}

/**
 * A {@link CancelSignal} that one party aborts: what the gRPC transport gives each call, whose
 * deadline or caller may end it, in place of an AbortController, whose signal's EventTarget
 * listeners alone were 0.6 KB of garbage a call in the gateway's heap profile and their add and
 * remove 0.6% of its busy time in its CPU profile.
 */
export class Cancellation implements CancelSignal {
  aborted = false;
  reason: unknown = undefined;
  #listeners: (() => void)[] = [];

  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    const listeners = this.#listeners;
    this.#listeners = [];
    for (const listener of listeners) listener();
  }

  addEventListener(_type: "abort", listener: () => void): void {
    if (!this.aborted) this.#listeners.push(listener);
  }

  removeEventListener(_type: "abort", listener: () => void): void {
    const at = this.#listeners.indexOf(listener);
    if (at >= 0) this.#listeners.splice(at, 1);
  }
}

/** An HTTP/2 client of one target. */
export interface H2Client {
  /**
   * Sends a request (pseudo-headers `:method`, `:path` first; `:scheme` and `:authority` are
   * added) and resolves with the whole response. Rejects with {@link H2ClientError}, or with the
   * signal's reason when it aborts (the stream is then reset).
   */
  request(
    headers: readonly HeaderField[],
    body: Uint8Array,
    signal?: CancelSignal,
  ): Promise<H2ClientResponse>;
  /** Closes every connection; calls in flight fail. */
  close(): void;
}

const { END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY } = Flag;
const maxStreamId = 2 ** 31 - 1;
/** The largest frame a server may send us: the default, which we never raise. */
const maxFrameSize = 16_384;

/** One request in flight. */
interface Stream {
  id: number;
  resolve(response: H2ClientResponse): void;
  reject(error: unknown): void;
  status: number;
  headers: HeaderField[] | undefined;
  trailers: HeaderField[];
  chunks: Uint8Array[];
  size: number;
  /** Bytes the peer lets us send on this stream. */
  window: number;
  /** Body bytes not sent yet (waiting for a window). */
  pending: Uint8Array | undefined;
  done: boolean;
  onAbort: (() => void) | undefined;
  signal: CancelSignal | undefined;
}

class Connection {
  readonly born: number;
  /** No new streams once set (GOAWAY, age, failure). */
  retired = false;
  closed = false;
  readonly streams = new Map<number, Stream>();
  #conn: Deno.TcpConn | undefined;
  #out: Uint8Array[] = [];
  #writing = false;
  /** A GOAWAY is on its way; the socket closes after it. */
  #closing = false;
  /** When the last frame arrived. */
  lastFrameAt: number;
  #nextId = 1;
  #decoder = new HpackDecoder();
  /** Our requests' header blocks, encoded in the order they are queued. */
  #encoder = new HpackEncoder();
  /** Peer settings. */
  maxStreams = 100;
  /**
   * Whether the server's first SETTINGS arrived: until then no stream is opened (its stream limit
   * is unknown, and streams past it would be refused), as gRPC clients wait for it too.
   */
  ready = false;
  #initialWindow = 65_535;
  #maxFrame = 16_384;
  #window = 65_535;
  /** DATA bytes received since our last connection-level WINDOW_UPDATE. */
  #unacknowledged = 0;
  /** A header block being received (HEADERS without END_HEADERS, then CONTINUATION). */
  #block: { id: number; parts: Uint8Array[]; endStream: boolean } | undefined;
  #onIdle: (c: Connection, error?: unknown) => void;

  constructor(
    private readonly options: Required<H2ClientOptions>,
    onIdle: (c: Connection, error?: unknown) => void,
  ) {
    this.#onIdle = onIdle;
    this.born = this.lastFrameAt = options.now();
    this.#connect().catch(() => {}); // a failure fails the connection's calls (see #connect)
  }

  get load(): number {
    return this.streams.size;
  }

  async #connect(): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      const conn = await Promise.race([
        Deno.connect({ hostname: this.options.hostname, port: this.options.port }),
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(new H2ClientError("connect timed out", false)),
            this.options.connectTimeoutMs,
          );
        }),
      ]);
      if (this.closed) {
        conn.close();
        return;
      }
      conn.setNoDelay(true);
      this.#conn = conn;
    } catch (error) {
      this.fail(
        error instanceof H2ClientError ? error : new H2ClientError("connect failed", false, {
          cause: error,
        }),
      );
      throw error;
    } finally {
      clearTimeout(timer);
    }
    // Our receive windows: a whole response fits in a stream's window, and the connection's is
    // topped up as responses are read.
    const settings = concat([
      Uint8Array.of(0, Setting.ENABLE_PUSH),
      u32(0),
      Uint8Array.of(0, Setting.INITIAL_WINDOW_SIZE),
      // One byte more than the largest response: a larger one overflows it and is refused.
      u32(Math.min(maxWindow, this.options.maxResponseBytes + 1)),
    ]);
    this.#out.unshift(
      preface,
      frame(FrameType.SETTINGS, 0, 0, settings),
      frame(FrameType.WINDOW_UPDATE, 0, 0, u32(maxWindow - 65_535)),
    );
    this.#flush();
    this.#readLoop().catch((error) => this.fail(error));
  }

  /** Starts a stream; false when this connection cannot take one now. */
  open(stream: Omit<Stream, "id" | "window">, headers: HeaderField[], body: Uint8Array): boolean {
    if (!this.ready || this.retired || this.closed || this.streams.size >= this.maxStreams) {
      return false;
    }
    const id = this.#nextId;
    this.#nextId += 2;
    if (this.#nextId > maxStreamId) this.retired = true;
    const s = stream as Stream;
    s.id = id;
    s.window = this.#initialWindow;
    this.streams.set(id, s);
    const block = this.#encoder.encode(headers);
    const endStream = body.length === 0;
    if (block.length <= this.#maxFrame) {
      this.#out.push(
        frame(FrameType.HEADERS, END_HEADERS | (endStream ? END_STREAM : 0), id, block),
      );
    } else {
      for (let offset = 0; offset < block.length; offset += this.#maxFrame) {
        const part = block.subarray(offset, offset + this.#maxFrame);
        const last = offset + this.#maxFrame >= block.length;
        const type = offset === 0 ? FrameType.HEADERS : FrameType.CONTINUATION;
        const flags = (last ? END_HEADERS : 0) | (offset === 0 && endStream ? END_STREAM : 0);
        this.#out.push(frame(type, flags, id, part));
      }
    }
    if (!endStream) {
      s.pending = body;
      this.#sendData(s);
    }
    this.#flush();
    return true;
  }

  /** Sends what the windows allow of a stream's body. */
  #sendData(s: Stream): void {
    while (s.pending && s.pending.length > 0) {
      const n = Math.min(s.pending.length, this.#maxFrame, s.window, this.#window);
      if (n <= 0) return;
      const last = n === s.pending.length;
      this.#out.push(frame(FrameType.DATA, last ? END_STREAM : 0, s.id, s.pending.subarray(0, n)));
      s.window -= n;
      this.#window -= n;
      s.pending = last ? undefined : s.pending.subarray(n);
    }
  }

  /** Writes what is queued, in one write per turn; calls queued meanwhile go in the next. */
  #flush(): void {
    if (this.#writing || !this.#conn || this.#out.length === 0) return;
    this.#writing = true;
    (async () => {
      try {
        while (this.#out.length > 0 && !this.closed) {
          const bytes = this.#out.length === 1 ? this.#out[0]! : concat(this.#out);
          this.#out = [];
          let offset = 0;
          while (offset < bytes.length) offset += await this.#conn!.write(bytes.subarray(offset));
        }
      } catch (error) {
        this.fail(new H2ClientError("the connection failed", true, { cause: error }));
      } finally {
        this.#writing = false;
        if (this.#closing) this.fail(new H2ClientError("the connection was closed", false));
      }
    })();
  }

  async #readLoop(): Promise<void> {
    const conn = this.#conn!;
    const buffer = new Uint8Array(64 * 1024);
    let start = 0;
    let end = 0;
    for (;;) {
      if (end === buffer.length) {
        // Make room: what is left of a frame moves to the front (a whole frame fits the buffer).
        buffer.copyWithin(0, start, end);
        end -= start;
        start = 0;
      }
      const n = await conn.read(buffer.subarray(end));
      if (n === null) {
        this.fail(new H2ClientError("the server closed the connection", true));
        return;
      }
      end += n;
      while (end - start >= 9) {
        const length = (buffer[start]! << 16) | (buffer[start + 1]! << 8) | buffer[start + 2]!;
        if (length > maxFrameSize) {
          // We never raise SETTINGS_MAX_FRAME_SIZE (RFC 9113 4.2).
          this.fail(new H2ClientError("a frame exceeds the maximum frame size", true));
          return;
        }
        if (end - start < 9 + length) break;
        this.lastFrameAt = this.options.now();
        const type = buffer[start + 3]!;
        const flags = buffer[start + 4]!;
        const id = readU32(buffer, start + 5) & 0x7fffffff;
        // The payload is copied only where it is kept (DATA, header blocks).
        this.#frame(type, flags, id, buffer.subarray(start + 9, start + 9 + length));
        start += 9 + length;
        if (this.closed) return;
      }
      if (start === end) start = end = 0;
    }
  }

  #frame(type: number, flags: number, id: number, payload: Uint8Array): void {
    if (this.#block && type !== FrameType.CONTINUATION) {
      return this.fail(new H2ClientError("header block interrupted", true));
    }
    switch (type) {
      case FrameType.DATA: {
        this.#unacknowledged += payload.length;
        if (this.#unacknowledged >= 1 << 20) {
          this.#out.push(frame(FrameType.WINDOW_UPDATE, 0, 0, u32(this.#unacknowledged)));
          this.#unacknowledged = 0;
          this.#flush();
        }
        const s = this.streams.get(id);
        if (!s) return;
        if (s.headers === undefined) {
          return this.#resetStream(s, ErrorCode.PROTOCOL_ERROR, "DATA before the response headers");
        }
        const data = this.#unpad(flags, payload);
        if (data === undefined) {
          return this.#resetStream(s, ErrorCode.PROTOCOL_ERROR, "bad padding");
        }
        s.size += data.length;
        if (s.size > this.options.maxResponseBytes) {
          return this.#resetStream(s, ErrorCode.CANCEL, "the response is too large");
        }
        if (data.length > 0) s.chunks.push(data.slice());
        if (flags & END_STREAM) this.#complete(s);
        return;
      }
      case FrameType.HEADERS: {
        let block = this.#unpad(flags, payload);
        if (block === undefined) return this.fail(new H2ClientError("bad padding", true));
        if (flags & PRIORITY) block = block.subarray(5);
        const endStream = (flags & END_STREAM) !== 0;
        if (flags & END_HEADERS) return this.#headers(id, block, endStream);
        this.#block = { id, parts: [block.slice()], endStream };
        return;
      }
      case FrameType.CONTINUATION: {
        const b = this.#block;
        if (!b || b.id !== id) {
          return this.fail(new H2ClientError("unexpected CONTINUATION", true));
        }
        b.parts.push(payload.slice());
        if (b.parts.reduce((n, p) => n + p.length, 0) > this.options.maxResponseBytes) {
          return this.fail(new H2ClientError("header block too large", true));
        }
        if (flags & END_HEADERS) {
          this.#block = undefined;
          this.#headers(id, concat(b.parts), b.endStream);
        }
        return;
      }
      case FrameType.RST_STREAM: {
        const s = this.streams.get(id);
        if (!s || payload.length !== 4) return;
        const code = readU32(payload, 0);
        this.#end(
          s,
          new H2ClientError(
            `the server reset the stream (code ${code})`,
            code !== ErrorCode.REFUSED_STREAM,
          ),
        );
        return;
      }
      case FrameType.SETTINGS:
        if (flags & ACK || id !== 0) return;
        for (let i = 0; i + 6 <= payload.length; i += 6) {
          const key = (payload[i]! << 8) | payload[i + 1]!;
          const value = readU32(payload, i + 2);
          if (key === Setting.MAX_CONCURRENT_STREAMS) this.maxStreams = value;
          else if (key === Setting.HEADER_TABLE_SIZE) this.#encoder.setPeerTableSize(value);
          else if (key === Setting.INITIAL_WINDOW_SIZE) {
            if (value > maxWindow) {
              return this.fail(new H2ClientError("bad SETTINGS_INITIAL_WINDOW_SIZE", true));
            }
            const delta = value - this.#initialWindow;
            this.#initialWindow = value;
            for (const s of this.streams.values()) s.window += delta;
          } else if (key === Setting.MAX_FRAME_SIZE) {
            if (value < 16_384 || value > 16_777_215) {
              return this.fail(new H2ClientError("bad SETTINGS_MAX_FRAME_SIZE", true));
            }
            this.#maxFrame = value;
          }
        }
        this.#out.push(frame(FrameType.SETTINGS, ACK, 0));
        for (const s of this.streams.values()) this.#sendData(s);
        this.#flush();
        if (!this.ready) {
          this.ready = true;
          this.#onIdle(this); // the calls waiting for it go now
        }
        return;
      case FrameType.PING:
        if (flags & ACK) return;
        this.#out.push(frame(FrameType.PING, ACK, 0, payload.slice()));
        this.#flush();
        return;
      case FrameType.GOAWAY: {
        const last = payload.length >= 8 ? readU32(payload, 0) & 0x7fffffff : 0;
        this.retired = true;
        for (const s of [...this.streams.values()]) {
          if (s.id > last) this.#end(s, new H2ClientError("the server is going away", false));
        }
        this.#maybeClose();
        return;
      }
      case FrameType.WINDOW_UPDATE: {
        if (payload.length !== 4) return;
        const increment = readU32(payload, 0) & 0x7fffffff;
        if (id === 0) {
          this.#window += increment;
          if (this.#window > maxWindow) {
            return this.fail(new H2ClientError("flow control window overflow", true));
          }
          for (const s of this.streams.values()) this.#sendData(s);
        } else {
          const s = this.streams.get(id);
          if (!s) return;
          s.window += increment;
          if (s.window > maxWindow) {
            return this.#resetStream(s, ErrorCode.FLOW_CONTROL_ERROR, "overflow");
          }
          this.#sendData(s);
        }
        this.#flush();
        return;
      }
      case FrameType.PUSH_PROMISE:
        return this.fail(new H2ClientError("push is disabled", true));
      default:
        return; // unknown frame types are ignored (RFC 9113 5.5)
    }
  }

  #unpad(flags: number, payload: Uint8Array): Uint8Array | undefined {
    if (!(flags & PADDED)) return payload;
    const pad = payload[0];
    if (pad === undefined || pad >= payload.length) return undefined;
    return payload.subarray(1, payload.length - pad);
  }

  #headers(id: number, block: Uint8Array, endStream: boolean): void {
    let fields: HeaderField[];
    try {
      fields = this.#decoder.decode(block, this.options.maxResponseBytes);
    } catch (error) {
      // The decoder's table may now differ from the server's: the connection cannot go on.
      return this.fail(
        new H2ClientError(error instanceof HpackError ? error.message : "bad header block", true),
      );
    }
    const s = this.streams.get(id);
    if (!s) return;
    if (s.headers === undefined) {
      const status = Number(fields.find(([name]) => name === ":status")?.[1]);
      if (!Number.isInteger(status)) {
        return this.#resetStream(s, ErrorCode.PROTOCOL_ERROR, "no :status");
      }
      if (status >= 100 && status < 200) return; // informational
      s.status = status;
      s.headers = fields.filter(([name]) => !name.startsWith(":"));
    } else s.trailers = fields;
    if (endStream) this.#complete(s);
  }

  #complete(s: Stream): void {
    if (s.headers === undefined) {
      return this.#resetStream(s, ErrorCode.PROTOCOL_ERROR, "the response has no headers");
    }
    const body = s.chunks.length === 1 ? s.chunks[0]! : concat(s.chunks);
    const response = { status: s.status, headers: s.headers, body, trailers: s.trailers };
    this.#end(s, undefined, response);
  }

  #resetStream(s: Stream, code: number, message: string): void {
    this.#out.push(frame(FrameType.RST_STREAM, 0, s.id, u32(code)));
    this.#flush();
    this.#end(s, new H2ClientError(message, true));
  }

  /** Ends a stream with its response or an error. */
  #end(s: Stream, error: unknown, response?: H2ClientResponse): void {
    if (s.done) return;
    s.done = true;
    this.streams.delete(s.id);
    if (s.onAbort) s.signal?.removeEventListener("abort", s.onAbort);
    if (response) s.resolve(response);
    else s.reject(error);
    if (this.closed) return; // fail() wakes the waiting calls once, after every stream
    this.#maybeClose();
    this.#onIdle(this);
  }

  /** Resets a stream the caller gave up on. */
  cancel(s: Stream, reason: unknown): void {
    if (s.done || !this.streams.has(s.id)) return;
    // A peer silent for a second while a caller gave up may be gone without a word (a frozen
    // process, a lost route): new calls go to a new connection.
    if (this.options.now() - this.lastFrameAt > 1000) this.retired = true;
    this.#out.push(frame(FrameType.RST_STREAM, 0, s.id, u32(ErrorCode.CANCEL)));
    this.#flush();
    this.#end(s, reason);
  }

  #maybeClose(): void {
    if (!this.retired || this.streams.size > 0 || this.closed || this.#closing) return;
    this.#closing = true;
    this.#out.push(frame(FrameType.GOAWAY, 0, 0, concat([u32(0), u32(ErrorCode.NO_ERROR)])));
    if (this.#conn) this.#flush(); // the socket closes once the GOAWAY is written
    else this.fail(new H2ClientError("the connection was closed", false));
  }

  /** Closes the connection and fails what it carries. */
  fail(error: unknown): void {
    if (this.closed) return;
    this.closed = true;
    this.retired = true;
    try {
      this.#conn?.close();
    } catch { /* closed */ }
    for (const s of [...this.streams.values()]) this.#end(s, error);
    this.#onIdle(this, error);
  }
}

/** A call waiting for a stream: it tries again when a connection changes, or fails. */
interface Waiter {
  start(): void;
  fail(error: unknown): void;
}

/** Creates a client of one `hostname:port`. */
export function createH2Client(options: H2ClientOptions): H2Client {
  const settings: Required<H2ClientOptions> = {
    connections: 2,
    maxConnectionAgeMs: 30_000,
    now: Date.now,
    connectTimeoutMs: 5_000,
    maxResponseBytes: 16 * 1024 * 1024,
    ...options,
  };
  let connections: Connection[] = [];
  let waiting: Waiter[] = [];
  let closed = false;

  const onIdle = (c: Connection, error?: unknown) => {
    if (c.closed) connections = connections.filter((x) => x !== c);
    const woken = waiting;
    waiting = [];
    // A connection that failed before it was ready fails the calls that waited for it (the
    // server is not there: no point in connecting again for each of them).
    if (c.closed && !c.ready) { for (const w of woken) w.fail(error); }
    // Each other call tries once; those that still find no room wait for the next change.
    else for (const w of woken) w.start();
  };
  const usable = (c: Connection, now: number) => {
    if (!c.retired && now - c.born > settings.maxConnectionAgeMs) {
      c.retired = true;
      if (c.streams.size === 0) c.fail(new H2ClientError("the connection was retired", false));
    }
    return c.ready && !c.retired && !c.closed && c.load < c.maxStreams;
  };
  /** The least loaded connection that takes a call now; opens another when that helps. */
  const pick = (): Connection | undefined => {
    const now = settings.now();
    let best: Connection | undefined;
    for (const c of connections) {
      if (usable(c, now) && (best === undefined || c.load < best.load)) best = c;
    }
    const live = connections.filter((c) => !c.retired && !c.closed);
    const starting = live.some((c) => !c.ready);
    if ((best === undefined || best.load > 0) && live.length < settings.connections && !starting) {
      connections.push(new Connection(settings, onIdle));
    }
    return best;
  };

  // The pseudo-headers every request adds, made once.
  const scheme: HeaderField = [":scheme", "http"];
  const authority: HeaderField = [":authority", `${settings.hostname}:${settings.port}`];
  return {
    request(headers, body, signal) {
      return new Promise<H2ClientResponse>((resolve, reject) => {
        if (closed) return reject(new H2ClientError("the client is closed", false));
        if (signal?.aborted) return reject(signal.reason);
        const fields: HeaderField[] = [];
        let i = 0;
        for (; i < headers.length && headers[i]![0].startsWith(":"); i++) fields.push(headers[i]!);
        fields.push(scheme, authority);
        for (; i < headers.length; i++) fields.push(headers[i]!);
        let connection: Connection | undefined;
        const stream: Omit<Stream, "id" | "window"> = {
          resolve,
          reject,
          status: 0,
          headers: undefined,
          trailers: [],
          chunks: [],
          size: 0,
          pending: undefined,
          done: false,
          signal,
          onAbort: undefined,
        };
        const waiter: Waiter = {
          start() {
            if (closed) return waiter.fail(new H2ClientError("the client is closed", false));
            connection = pick();
            if (connection?.open(stream, fields, body)) return;
            connection = undefined;
            waiting.push(waiter);
          },
          fail(error) {
            signal?.removeEventListener("abort", onAbort);
            reject(error ?? new H2ClientError("cannot connect", false));
          },
        };
        const onAbort = () => {
          if (connection) return connection.cancel(stream as Stream, signal!.reason);
          waiting = waiting.filter((w) => w !== waiter);
          reject(signal!.reason);
        };
        stream.onAbort = signal ? onAbort : undefined;
        signal?.addEventListener("abort", onAbort, { once: true });
        waiter.start();
      });
    },
    close() {
      closed = true;
      for (const c of connections) c.fail(new H2ClientError("the client is closed", true));
      connections = [];
      for (const w of waiting.splice(0)) w.fail(new H2ClientError("the client is closed", false));
    },
  };
}
