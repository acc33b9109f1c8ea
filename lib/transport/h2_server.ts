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
 * GOAWAY, RST_STREAM, CONTINUATION, padding; no server push, no priorities (ignored, but a stream
 * may not depend on itself), no HTTP/1.1 upgrade. Conformance: h2spec's strict run
 * (tests/h2spec_test.ts) passes every case, given a handler that answers h2spec's plain GET with
 * a body (three cases wait for DATA frames); the stream states of RFC 9113 5.1 are kept (frames
 * on idle and closed streams are the errors the RFC names), and a malformed request (RFC 9113
 * 8.1.1: invalid or upper-case field names, connection-specific fields, `te` other than
 * `trailers`, unknown, repeated, missing or misplaced pseudo-headers, a body that does not match
 * `content-length`) is reset with PROTOCOL_ERROR, before any handler sees it where the headers
 * tell.
 *
 * Hardening, each an option of {@link serveH2} (defaults in brackets):
 * - `maxConnections` [1,000]: past it a new connection gets GOAWAY ENHANCE_YOUR_CALM and is closed;
 * - `maxConcurrentStreams` [100]: SETTINGS_MAX_CONCURRENT_STREAMS; more are refused
 *   (REFUSED_STREAM). A stream whose answer still waits for a window counts until it ends, its
 *   handler returned or not;
 * - `maxStreams` [2,000]: streams open at once across all connections of the server, half-closed
 *   ones included. At the cap, the stream that has waited on its peer the longest (its request
 *   has not ended, or its answer waits for a window; least recently active first) is reset
 *   (CANCEL) to make room, as a reset its own peer provoked; when no stream waits (every place
 *   held by calls being served, as under a flood that keeps the process busy), the connection
 *   holding the most streams gives up its newest, if it holds more than one more than the
 *   connection asking (each keeps its fair share); else the new one is refused (REFUSED_STREAM,
 *   not counted as a reset, and no handler runs). A waiting stream active within `stallMs` [1 s]
 *   is not given up for a newcomer (a burst of new streams would give up each other's places as
 *   fast as they came: 450 connections of 100 took a service past its heap so), only for a
 *   connection's fair share; So stalled streams cannot keep other
 *   callers out (under 150 connections of 100 stalled streams, refusing instead failed 50 of 58
 *   normal calls, tests/cheap_attacks_test.ts). Each open stream whose handler waits for its
 *   body costs 6.2-6.8 KB of heap with the gRPC adapter (lib/rpc/grpc_server.ts), measured with
 *   the services' V8 flags on 1,000 to 6,000 streams of HEADERS without a body: 2,000 is 13 MiB,
 *   about a seventh of the 96 MiB old space, and above the concurrency of any load we run (1,600
 *   streams in tests/attacks_test.ts). Before the cap, 150 connections of 100 such streams took
 *   a service past its heap bound within 10 s. What the header fields cost on top (up to ~176 KB
 *   a stream for a 2 KB block of references to one HPACK table entry) is taken from the memory
 *   budget, three times the size of the header list (RFC 9113 6.5.2), while the stream is open;
 *   a stream whose fields do not fit is reset with ENHANCE_YOUR_CALM;
 * - `maxHeaderListSize` [64 KiB]: SETTINGS_MAX_HEADER_LIST_SIZE, also the cap of a header block;
 * - `prefaceTimeoutMs` [10 s]: the client's preface and first SETTINGS must arrive within it;
 * - `headerBlockTimeoutMs` [10 s]: a header block split over CONTINUATION frames must end within
 *   it;
 * - `bodyTimeoutMs` [30 s]: a stream whose handler waits for body bytes that do not come is reset;
 * - `minBodyBytesPerSecond` [240] / `bodyGraceMs` [5 s], as Kestrel's MinRequestBodyDataRate and
 *   the HTTP/1.1 guard's rule: a body that has not ended and came slower than that since its
 *   stream opened, after the grace, is reset (CANCEL) whether its handler reads or not; time in
 *   which our windows held the peer back is not counted. A unary gRPC call sends its body at
 *   once; a client stream that goes on sending 240 bytes a second is never cut, one that sends
 *   less for longer is;
 * - `windowTimeoutMs` [30 s]: a response write that waits that long for the peer's flow-control
 *   window is given up: the stream is reset (CANCEL) and what it held is freed;
 * - `idleTimeoutMs` [5 min]: a connection without open streams that long gets GOAWAY and is closed;
 * - `keepaliveIntervalMs` [1 min] / `keepaliveTimeoutMs` [20 s]: after that long with nothing
 *   received, a PING; without its ACK in time, the connection is closed;
 * - `maxOutputBytes` [1 MiB]: a connection's queued output; response bodies wait for the socket
 *   (backpressure) rather than queue past it; a peer whose queue still grows 64 KiB past it
 *   (answers to control frames it sends and does not read) is dropped;
 * - `writeTimeoutMs` [30 s]: a peer that does not read for that long while output waits is dropped;
 * - `maxControlFrames` [1,000, nghttp2's limit]: PING and SETTINGS ACKs, RST_STREAM and GOAWAY
 *   queued and not yet written per connection; past it the peer, which asks for answers it does
 *   not read, gets GOAWAY ENHANCE_YOUR_CALM (if it can still be written) and is closed. Control
 *   frames are written into a shared buffer, not an object each: each was an object of ~90 bytes
 *   resident before (8 connections that sent PINGs and did not read took 45 MB);
 * - peer resets, and resets the peer provokes with malformed frames, are capped at 200 a second
 *   (rapid reset, CVE-2023-44487, and its provoked variant): past it, GOAWAY ENHANCE_YOUR_CALM.
 * All deadlines are checked by one periodic sweep per server (every quarter of the smallest
 * timeout, but every second at least and every 10 ms at most) against a clock the sweep keeps: no
 * timer per connection, stream or frame, and nothing left behind when a connection ends. Any
 * protocol violation ends the connection with GOAWAY, never the process.
 *
 * With a memory budget, what a connection holds of requests (body bytes received and not read,
 * the header fields of open streams) is taken for two holders, `h2:<connection number>` and
 * `addr:<peer address>`, so that one connection and one address each hold at most the budget's
 * share; handlers get the same holders ({@link H2Request.holders}) for what they take.
 *
 * @module
 */

import { type Lease, type MemoryBudget, smallRequestBytes } from "../platform/mod.ts";
import { concat } from "./bytes.ts";
import {
  ErrorCode,
  Flag,
  frame,
  FrameType,
  maxWindow,
  preface,
  readU32,
  u32,
  writeFrameHeader,
  writeU32,
} from "./h2_frame.ts";
import { type HeaderField, HpackDecoder, HpackEncoder, HpackError } from "./hpack.ts";

export { ErrorCode } from "./h2_frame.ts";

const { END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY } = Flag;

const maxFrameSize = 16_384; // what we accept (the default; we never raise it)
const maxDataFrame = 64 * 1024; // the largest DATA frame we send, whatever the peer allows
const streamWindow = 256 * 1024; // what we let a peer send per stream before it must wait
const connectionWindow = 1024 * 1024;
/** CONTINUATION frames one header block may take (empty ones cost nothing else to send). */
const maxContinuations = 64;
/** Peer resets, and stream errors the peer provokes, allowed per second. */
const maxResetsPerSecond = 200;
/** What control frames may add to the output past `maxOutputBytes` before the peer is dropped. */
const controlSlack = 64 * 1024;
/** The size of the buffers control frames are written into, one after another (see `#control`). */
const controlChunk = 1024;
/**
 * What a byte of a request's header list (RFC 9113 6.5.2: names, values and 32 per field) costs
 * while its stream is open: the fields as strings and arrays, and the gRPC adapter's copy. A
 * 2 KB header block of 1,900 references to one HPACK table entry is a 64 KiB list that held
 * ~176 KB of heap per stream until its stream ended (measured); 3 covers that and literal values.
 */
const headerCostFactor = 3;
/** How long a connection that is closing may take to send what it queued. */
const closeGraceMs = 1000;
/** How many closed streams a connection remembers the state of (RFC 9113 5.1 "closed"). */
const closedMemory = 128;

/** The payload of the PING that ends the first step of a graceful GOAWAY. */
const drainPing = new TextEncoder().encode("drain~01");
/** The payload of a keepalive PING. */
const keepalivePing = new TextEncoder().encode("alive~01");

// The reasons a stream's signal aborts with. Made once: a DOMException captures a stack trace, and
// every stream's signal aborts when the stream ends (CPU profile of a service under gRPC load:
// ~4% of its time went to making these per stream).
const streamEnded = new DOMException("The stream ended", "AbortError");
const streamReset = new DOMException("The stream was reset", "AbortError");
const peerReset = new DOMException("The peer reset the stream", "AbortError");
const bodyTimedOut = new DOMException("No request body arrived in time", "TimeoutError");
const bodyTooSlow = new DOMException("The request body arrived too slowly", "TimeoutError");
/**
 * What a stream's body throws to its handler once a DATA frame did not fit the memory budget (or
 * its holders' shares): the handler answers the refusal itself (the gRPC adapter with
 * RESOURCE_EXHAUSTED), rather than the stream being reset.
 */
export const bodyOverBudget: DOMException = new DOMException(
  "The request body does not fit the memory budget",
  "QuotaExceededError",
);
const evicted = new DOMException(
  "The stream waited on its peer the longest when the server needed room for another",
  "AbortError",
);
const windowTimedOut = new DOMException(
  "The peer gave no flow-control window for the response in time",
  "TimeoutError",
);
const connectionFailed = new DOMException("The connection failed", "AbortError");
const connectionClosed = new DOMException("The connection closed", "AbortError");

/** A request stream as the handler sees it. */
export interface H2Request {
  /** The stream id. */
  readonly streamId: number;
  /** Header fields in order, pseudo-headers (`:method`, `:path`...) included. */
  readonly headers: readonly HeaderField[];
  /**
   * The request body, chunk by chunk; ends at END_STREAM; throws if the stream is reset. Each chunk
   * is handed over: the server keeps no reference to it, so a reader done with it may free it
   * (`release` of ./bytes.ts).
   */
  readonly body: AsyncIterable<Uint8Array>;
  /** Aborts when the stream ends, the peer resets it or the connection goes away. */
  readonly signal: AbortSignal;
  /**
   * The memory budget holders of the stream's connection: `h2:<connection number>` and
   * `addr:<peer address>` (the same array for every stream of a connection). The server takes
   * the bytes it receives and holds with them, so that one connection and one address each hold
   * at most the budget's share; a handler takes what it holds per request with them too.
   */
  readonly holders: readonly string[];
  /**
   * Says that this call may pause between its messages (a client or bidirectional stream, which
   * sends when its application has something to say): its body is then held to `bodyTimeoutMs`
   * only, not to `minBodyBytesPerSecond`.
   */
  patient(): void;
}

/** The response side of a stream. Calls after the stream closed are ignored. */
export interface H2Response {
  /** Sends the response headers (or, with `endStream`, a headers-only response). */
  headers(fields: HeaderField[], endStream?: boolean): void;
  /**
   * Sends body bytes (and, with `endStream`, ends the stream after them), respecting flow control
   * and the connection's output cap. Returns nothing when they were all queued for the socket at
   * once, else a promise that resolves when they are (it never rejects; a stream that ends
   * meanwhile resolves it).
   */
  data(bytes: Uint8Array, endStream?: boolean): Promise<void> | undefined;
  /** Sends trailers and ends the stream (after any body bytes still waiting for a window). */
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
  /** SETTINGS_MAX_CONCURRENT_STREAMS: streams past it are refused (default 100). */
  maxConcurrentStreams?: number;
  /**
   * Streams open at once across all connections of the server (default 2,000), half-closed ones
   * included. A new stream past it takes the place of the stream that has waited on its peer the
   * longest (a request whose body has not ended, an answer waiting for a window), which is reset
   * (CANCEL; its handler's signal aborts) and counts as a reset its peer provoked; when no stream
   * waits, the new one is refused with REFUSED_STREAM (nothing was processed: gRPC clients retry
   * it, or report UNAVAILABLE), which does not count as a reset.
   */
  maxStreams?: number;
  /**
   * How long a stream must have been inactive before it may be given up to make room at
   * `maxStreams` (default 1 s). A younger one is not: a burst of new streams would otherwise give
   * up each other's places as fast as they come, each having run its handler for nothing (450
   * connections of 100 streams each, in one burst, took a service past its heap that way), where
   * refusing the newcomer costs nothing.
   */
  stallMs?: number;
  /** SETTINGS_MAX_HEADER_LIST_SIZE, and the cap of one encoded header block (default 64 KiB). */
  maxHeaderListSize?: number;
  /**
   * Open connections per server (default 1,000). A connection past it is sent SETTINGS and GOAWAY
   * ENHANCE_YOUR_CALM and closed at once; the others are not affected.
   */
  maxConnections?: number;
  /**
   * How long a new connection may take to send the client preface and its first SETTINGS frame
   * (default 10 s); then it is closed.
   */
  prefaceTimeoutMs?: number;
  /**
   * How long a header block may stay open: HEADERS without END_HEADERS, then CONTINUATION frames
   * (default 10 s); then GOAWAY ENHANCE_YOUR_CALM and the connection is closed.
   */
  headerBlockTimeoutMs?: number;
  /**
   * How long a stream's handler may wait for request body bytes that do not come (default 30 s):
   * then the stream is reset (CANCEL), its handler's signal aborts with a `TimeoutError`, and its
   * slot and buffers are freed. A handler that does not read is not limited by it.
   */
  bodyTimeoutMs?: number;
  /**
   * The slowest a request body may arrive, in bytes a second (default 240, as Kestrel's
   * MinRequestBodyDataRate; 0 turns the check off): a stream whose body has not ended and has
   * come slower than that on average since the stream opened, once `bodyGraceMs` have
   * passed, is reset (CANCEL) and its handler's signal aborts with a `TimeoutError`, whether
   * the handler reads or not. The time the peer could not send because our flow-control windows
   * were (nearly) closed does not count: the measurement starts again after it.
   */
  minBodyBytesPerSecond?: number;
  /** How long a request body may come slower than `minBodyBytesPerSecond` (default 5 s). */
  bodyGraceMs?: number;
  /**
   * How long a response write may wait for the peer to give a flow-control window (default 30 s):
   * then the stream is reset (CANCEL), its handler's signal aborts with a `TimeoutError`, the
   * write resolves and what it held is freed. Until then the stream counts against
   * `maxConcurrentStreams` and `maxStreams`, whether its handler returned or not (at
   * `maxStreams`, such a stream makes room for a new one first).
   */
  windowTimeoutMs?: number;
  /**
   * How long a connection may stay without open streams (default 5 min: gRPC channels stay open
   * between calls): then GOAWAY NO_ERROR and the connection is closed.
   */
  idleTimeoutMs?: number;
  /** After this long with nothing received, the server sends a PING (default 60 s). */
  keepaliveIntervalMs?: number;
  /** How long a keepalive PING's ACK may take before the connection is closed (default 20 s). */
  keepaliveTimeoutMs?: number;
  /**
   * Bytes a connection may have queued for its socket (default 1 MiB). Response bodies wait for the
   * socket past it (backpressure); control frames may exceed it by 64 KiB, then the peer, which
   * does not read, is dropped.
   */
  maxOutputBytes?: number;
  /** How long a socket write may wait for the peer to read (default 30 s): then it is dropped. */
  writeTimeoutMs?: number;
  /**
   * Control frames (PING and SETTINGS acknowledgements, RST_STREAM, GOAWAY; not WINDOW_UPDATE)
   * a connection may have queued for its socket (default 1,000, nghttp2's limit): past it the
   * peer, which asks for answers it does not read, gets GOAWAY ENHANCE_YOUR_CALM (when that can
   * still be written) and is closed.
   */
  maxControlFrames?: number;
  /**
   * The process's memory budget. The request bytes a connection has received and its handlers have
   * not read yet are taken from it; a DATA frame that does not fit resets its stream with
   * ENHANCE_YOUR_CALM (gRPC clients report RESOURCE_EXHAUSTED) and its bytes go back to the
   * connection's window. So the windows we advertise (256 KiB a stream, 1 MiB a connection) let a
   * peer send, but never make the process hold more than the budget.
   */
  budget?: MemoryBudget;
  /** Reports connection-level failures (they never throw out of the server). */
  onError?: (error: unknown) => void;
}

/** A running HTTP/2 server. */
export interface H2Server {
  /** The bound port. */
  port: number;
  /**
   * Stops accepting connections, sends GOAWAY on every connection, lets open streams finish, and
   * closes what is left after `graceMs`. Resolves when every connection is closed.
   */
  close(graceMs: number): Promise<void>;
}

type ConnectionOptions =
  & Required<Omit<H2ServerOptions, "onError" | "budget">>
  & Pick<H2ServerOptions, "onError" | "budget">;

/** The defaults of {@link H2ServerOptions}. */
const defaults = {
  maxConcurrentStreams: 100,
  maxStreams: 2000,
  stallMs: 1000,
  maxHeaderListSize: 64 * 1024,
  maxConnections: 1000,
  prefaceTimeoutMs: 10_000,
  headerBlockTimeoutMs: 10_000,
  bodyTimeoutMs: 30_000,
  minBodyBytesPerSecond: 240,
  bodyGraceMs: 5000,
  windowTimeoutMs: 30_000,
  idleTimeoutMs: 5 * 60_000,
  keepaliveIntervalMs: 60_000,
  keepaliveTimeoutMs: 20_000,
  maxOutputBytes: 1024 * 1024,
  writeTimeoutMs: 30_000,
  maxControlFrames: 1000,
} as const;

/** What the connections of a server share. */
interface Shared {
  /** The sweep's clock: `Date.now()` as of the last sweep. */
  now: number;
  /** Streams open across the connections (what `maxStreams` caps). */
  streams: number;
  /**
   * The streams that wait on their peer: their request has not ended, or their answer waits for a
   * window. Least recently active first: at `maxStreams`, the first makes room for a new stream.
   */
  waiting: Waiting;
  /** The server's connections (to find the one holding the most streams). */
  connections: ReadonlyMap<Connection, unknown>;
  /** The time between two sweeps. */
  sweepMs: number;
}

/**
 * The streams that wait on their peer, least recently active first: a list through the streams
 * themselves (every gRPC call enters and leaves it, so no hashing and nothing allocated).
 */
class Waiting {
  first: Stream | undefined;
  last: Stream | undefined;

  /** Puts `stream` last (taking it out first if it is in). */
  add(stream: Stream): void {
    if (stream.waiting) this.delete(stream);
    stream.waiting = true;
    stream.before = this.last;
    if (this.last) this.last.after = stream;
    else this.first = stream;
    this.last = stream;
  }

  delete(stream: Stream): void {
    if (!stream.waiting) return;
    stream.waiting = false;
    const { before, after } = stream;
    if (before) before.after = after;
    else this.first = after;
    if (after) after.before = before;
    else this.last = before;
    stream.before = stream.after = undefined;
  }
}

/** Numbers the connections of the process, for their budget holder names. */
let connectionNumber = 0;

class ConnectionError extends Error {
  constructor(readonly code: number, message: string) {
    super(message);
  }
}

// --- request validation (RFC 9113 8.2, 8.3) --------------------------------------------------

/** A field name: a token in lower case (RFC 9113 8.2.1). */
const fieldName = /^[!#$%&'*+\-.^_`|~0-9a-z]+$/;
/**
 * A field value that is malformed: NUL, CR or LF anywhere. RFC 9113 8.2.1 also forbids whitespace
 * at either end, but stock clients send it (grpc-js sends `authorization: Bearer ` for an empty
 * token) and nghttp2, under Node and curl, accepts it: such a value reaches the handler and is
 * trimmed there, as HTTP/1.1 trims optional whitespace (RFC 9110 5.5), so the caller gets the
 * application's answer (UNAUTHENTICATED) instead of a reset stream.
 */
const badFieldValue = /[\0\r\n]/;
const digits = /^[0-9]+$/;
const connectionSpecific = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "upgrade",
]);
/** Names found valid (bounded): a request's names are mostly the same every time. */
const validNames = new Set<string>();

function validName(name: string): boolean {
  if (validNames.has(name)) return true;
  if (!fieldName.test(name)) return false;
  if (name.length <= 64) {
    if (validNames.size >= 1024) validNames.clear();
    validNames.add(name);
  }
  return true;
}

/** Why a regular (non-pseudo) field is malformed, or undefined. */
function regularFieldProblem(name: string, value: string): string | undefined {
  if (!validName(name)) return "invalid field name";
  if (badFieldValue.test(value)) return `invalid value of ${name}`;
  if (connectionSpecific.has(name)) return `connection-specific field ${name}`;
  if (name === "te" && value !== "trailers") return "te other than trailers";
  return undefined;
}

/**
 * Checks a request's header fields (RFC 9113 8.3.1): the value of `content-length` (-1 when
 * absent) when the request is well-formed, else why it is malformed.
 */
export function checkRequestHeaders(fields: readonly HeaderField[]): number | string {
  let method: string | undefined;
  let scheme: string | undefined;
  let path: string | undefined;
  let authority: string | undefined;
  let regular = false;
  let contentLength = -1;
  for (const [name, value] of fields) {
    if (name.charCodeAt(0) === 0x3a) {
      if (regular) return "pseudo-header after a regular field";
      if (badFieldValue.test(value)) return `invalid value of ${name}`;
      switch (name) {
        case ":method":
          if (method !== undefined) return "repeated :method";
          method = value;
          break;
        case ":scheme":
          if (scheme !== undefined) return "repeated :scheme";
          scheme = value;
          break;
        case ":path":
          if (path !== undefined) return "repeated :path";
          path = value;
          break;
        case ":authority":
          if (authority !== undefined) return "repeated :authority";
          authority = value;
          break;
        default:
          return `pseudo-header ${name} in a request`;
      }
      continue;
    }
    regular = true;
    const problem = regularFieldProblem(name, value);
    if (problem) return problem;
    if (name === "content-length") {
      if (!digits.test(value)) return "invalid content-length";
      const length = Number(value);
      if (contentLength >= 0 && length !== contentLength) return "conflicting content-length";
      contentLength = length;
    }
  }
  if (method === undefined) return "no :method";
  if (method === "CONNECT") {
    if (scheme !== undefined || path !== undefined || authority === undefined) {
      return "malformed CONNECT";
    }
    return contentLength;
  }
  if (scheme === undefined) return "no :scheme";
  if (path === undefined || path === "") return "no :path";
  if (path[0] !== "/" && !(path === "*" && method === "OPTIONS")) return "invalid :path";
  return contentLength;
}

/**
 * What a request's header fields are held for in the memory budget while its stream is open: the
 * size of the list as SETTINGS_MAX_HEADER_LIST_SIZE counts it (RFC 9113 6.5.2) times
 * `headerCostFactor`.
 */
export function requestHeaderCost(fields: readonly HeaderField[]): number {
  let size = 0;
  for (let i = 0; i < fields.length; i++) {
    const field = fields[i]!;
    size += field[0].length + field[1].length + 32;
  }
  return size * headerCostFactor;
}

/** Why trailers are malformed (a pseudo-header, a field a request may not have), or undefined. */
export function checkTrailers(fields: readonly HeaderField[]): string | undefined {
  for (const [name, value] of fields) {
    if (name.charCodeAt(0) === 0x3a) return "pseudo-header in trailers";
    const problem = regularFieldProblem(name, value);
    if (problem) return problem;
  }
  return undefined;
}

// --- connections -------------------------------------------------------------------------------

/** How a stream we remember as closed was closed (what a late frame on it means). */
const Closed = {
  /** Both sides ended it: DATA is a stream error, HEADERS a connection error (STREAM_CLOSED). */
  ENDED: 1,
  /** The peer reset it: anything but PRIORITY, WINDOW_UPDATE and RST_STREAM is STREAM_CLOSED. */
  BY_PEER: 2,
  /** We reset it (or refused it): what the peer sent before it knew is ignored. */
  BY_US: 3,
} as const;

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
  /** Wakes the handler waiting in the body for bytes. */
  wake: (() => void) | undefined;
  /** Since when the handler waits for body bytes (the sweep's clock). */
  waitingSince = 0;
  /** Wakes a response write waiting for a flow-control window. */
  writeWaiter: (() => void) | undefined;
  /** A response write in progress that later writes and the trailers must follow. */
  sending: Promise<void> | undefined;
  /** The request's `content-length`, or -1. */
  contentLength = -1;
  /** Body bytes received (padding excluded). */
  received = 0;
  /** Since when the body's rate is measured (the sweep's clock), and `received` then. */
  rateSince: number;
  rateBase = 0;
  /** Its handler said it may pause between messages: no minimum rate for its body. */
  patient = false;
  /** When it was last active (the sweep's clock): a stream younger than `stallMs` keeps its place. */
  activeAt: number;
  /** A DATA frame did not fit the budget: its body ends with {@link bodyOverBudget}. */
  overBudget = false;
  /** Since when a response write waits for a flow-control window (the sweep's clock), or 0. */
  blockedSince = 0;
  /** What the request's header fields are held for in the budget, until the stream ends. */
  headerCost = 0;
  /** Its place among the server's streams that wait on their peer (see {@link Waiting}). */
  waiting = false;
  before: Stream | undefined;
  after: Stream | undefined;

  constructor(
    readonly id: number,
    readonly owner: Connection,
    initialWindow: number,
    now: number,
  ) {
    this.sendWindow = initialWindow;
    this.rateSince = this.activeAt = now;
  }
}

class Connection {
  readonly #conn: Deno.Conn;
  readonly #options: ConnectionOptions;
  readonly #shared: Shared;
  readonly #decoder = new HpackDecoder();
  /** Our answers' header blocks, encoded in the order they are written. */
  readonly #encoder = new HpackEncoder();
  /** Open and half-closed streams. */
  readonly #streams = new Map<number, Stream>();
  /**
   * How many of them are half-closed (local): we ended them before the peer did. What the peer
   * still sends on them is checked and dropped; they do not count as open.
   */
  #localClosed = 0;
  #lastStreamId = 0;
  #goingAway = false;
  /** After a connection error or a graceful close: input is discarded until the peer closes. */
  #failed = false;
  /** No more output; the socket closes once what was queued is written (or `#closeBy`). */
  #closed = false;
  #socketClosed = false;
  #halfClosed = false;
  #resolveSocketClosed!: () => void;
  readonly #socketClosedPromise = new Promise<void>((r) => this.#resolveSocketClosed = r);
  /** When a connection that is closing is closed whatever it still has to send. */
  #closeBy = 0;
  #peerInitialWindow = 65_535;
  #peerMaxFrame = 16_384;
  #sendWindow = 65_535;
  /** What the peer may still send on the connection. */
  #recvWindow = connectionWindow;
  /** Streams whose response writes wait for a flow-control window. */
  readonly #blocked = new Set<Stream>();
  /** Response writes waiting for the output queue to drain. */
  #drainWaiters: (() => void)[] = [];
  #out: Uint8Array[] = [];
  /** Bytes queued or being written. */
  #pending = 0;
  /**
   * Control frames are written one after another into a buffer of `controlChunk` bytes, not into
   * an array each: a peer that sent PINGs or SETTINGS and did not read had every answer queued
   * as an object of its own, ~5 MB resident per connection before the byte cap dropped it
   * (measured). `#out` gets one view of the frames written since the last other frame, when the
   * next other frame is queued or the queue is flushed; once everything queued is written, the
   * buffer is reused from its start.
   */
  #ctl: Uint8Array | undefined;
  /** Bytes written into `#ctl`, and how many of them `#out` has views of. */
  #ctlFill = 0;
  #ctlSealed = 0;
  /** Control frames counted against `maxControlFrames`: queued, and in the write under way. */
  #ctlQueued = 0;
  #ctlWriting = 0;
  #flushing = false;
  /** Since when a socket write waits (the sweep's clock), 0 when none does. */
  #writeSince = 0;
  #continuation:
    | {
      streamId: number;
      flags: number;
      chunks: Uint8Array[];
      size: number;
      frames: number;
      selfDependent: boolean;
      startedAt: number;
    }
    | undefined;
  #resetsSecond = 0;
  #resets = 0;
  /** Bytes the handlers consumed that the peer's connection window has not been given back yet. */
  #unacked = 0;
  /** Resolves when the connection has no open streams (used by graceful close). */
  #idle: (() => void) | undefined;
  readonly #startedAt: number;
  #sawSettings = false;
  /** When the last read returned (the sweep's clock). */
  #lastReceived: number;
  /** When the last stream closed (valid while none is open). */
  #idleSince: number;
  /** When an unanswered keepalive PING was sent, or 0. */
  #pingSentAt = 0;
  /** When the graceful close's second GOAWAY is due, or 0. */
  #drainAt = 0;
  /**
   * The least window (stream or connection) that lets a peer keep `minBodyBytesPerSecond` for a
   * grace period: below it, the peer is held back by us, not slow.
   */
  readonly #slowWindow: number;
  /** When the connection's window was last reopened from below `#slowWindow` (sweep's clock). */
  #windowReopened = 0;
  // Closed streams, remembered in a ring: their ids and how they closed.
  #closedIds: Int32Array | undefined;
  #closedHow: Uint8Array | undefined;
  #closedNext = 0;

  /**
   * Request bytes the connection holds, taken from the budget for its holders: received body bytes
   * no handler has read yet, and the header fields of its open streams.
   */
  readonly #queued: Lease | undefined;
  /** The connection's budget holders (see {@link H2Request.holders}). */
  readonly #holders: readonly string[];

  constructor(conn: Deno.Conn, options: ConnectionOptions, shared: Shared) {
    this.#conn = conn;
    this.#options = options;
    const address = (conn.remoteAddr as Deno.NetAddr).hostname ?? "unknown";
    this.#holders = Object.freeze([`h2:${++connectionNumber}`, `addr:${address}`]);
    this.#queued = options.budget?.take(0, this.#holders);
    this.#shared = shared;
    this.#startedAt = this.#lastReceived = this.#idleSince = shared.now;
    this.#slowWindow = Math.ceil(options.minBodyBytesPerSecond * options.bodyGraceMs / 1000);
  }

  /** What `maxStreams` still allows now across the server's connections. */
  get #streamsLeft(): number {
    return this.#options.maxStreams - this.#shared.streams;
  }

  /** Forgets a stream: it no longer counts against `maxStreams`. */
  #forget(stream: Stream): void {
    if (this.#streams.delete(stream.id)) this.#shared.streams--;
    this.#shared.waiting.delete(stream);
  }

  /** Forgets every stream left (they were finished). */
  #forgetAll(): void {
    for (const stream of this.#streams.values()) this.#shared.waiting.delete(stream);
    this.#shared.streams -= this.#streams.size;
    this.#streams.clear();
    this.#localClosed = 0;
  }

  /** After a stream's activity: it goes last among the streams that wait, or leaves them. */
  #touch(stream: Stream): void {
    stream.activeAt = this.#shared.now;
    if (!stream.ended || stream.blockedSince !== 0) this.#shared.waiting.add(stream);
    else this.#shared.waiting.delete(stream);
  }

  /**
   * Makes room under `maxStreams`: the stream that has waited on its peer the longest, on any
   * connection, is given up (RST_STREAM CANCEL; a half-closed one, whose answer is out, NO_ERROR).
   * Unary calls are complete when they arrive and answered at once, so the streams given up are
   * those of peers that stall: without this, stalled streams held every place until their
   * deadlines and refused every other caller meanwhile. False when no stream waits.
   */
  #makeRoom(): boolean {
    const victim = this.#shared.waiting.first;
    if (victim === undefined || this.#shared.now - victim.activeAt < this.#options.stallMs) {
      return false;
    }
    victim.owner.#giveUp(victim);
    return true;
  }

  /**
   * Makes room under `maxStreams` when no stream that waits on its peer may be given up: every
   * place is held by requests being served (as under a flood of calls that keeps the process busy)
   * or by young streams. Then the connection holding the most streams gives up its newest, when it
   * holds more than one more than this connection: so a flood from a few connections cannot keep
   * the others out, each connection keeps its fair share of the places. False when this connection
   * holds as many as any.
   * (60 connections of such calls kept the gateway's out, 22 of 26 calls refused, before.)
   */
  #takeFairShare(): boolean {
    let heaviest: Connection | undefined;
    for (const c of this.#shared.connections.keys()) {
      if (heaviest === undefined || c.#streams.size > heaviest.#streams.size) heaviest = c;
    }
    if (heaviest === undefined || heaviest.#streams.size <= this.#streams.size + 1) return false;
    // Its newest: the least likely to have done anything yet. No age is asked of it: a
    // connection gives up places only until the two hold about as many, so a burst cannot churn.
    let newest: Stream | undefined;
    for (const stream of heaviest.#streams.values()) newest = stream;
    heaviest.#giveUp(newest!);
    return true;
  }

  /**
   * Gives up one of this connection's streams to make room (see `#makeRoom`). It counts as a reset
   * this peer provoked: a peer whose stalled streams keep being given up is cut off at the rapid
   * reset rate, and the connection that needed the room, often a busy one, is not charged.
   */
  #giveUp(stream: Stream): void {
    if (stream.closed) this.#closeLocal(stream, Closed.BY_US, ErrorCode.NO_ERROR);
    else this.#resetStream(stream, ErrorCode.CANCEL, evicted);
    try {
      this.#countReset();
    } catch (error) {
      this.#fail((error as ConnectionError).code);
    }
  }

  /** Streams open for the handlers. */
  get #open(): number {
    return this.#streams.size - this.#localClosed;
  }

  /** Serves the connection; resolves when its socket is closed. */
  async run(): Promise<void> {
    const settings = new Uint8Array(18);
    const view = new DataView(settings.buffer);
    view.setUint16(0, 0x3); // MAX_CONCURRENT_STREAMS
    view.setUint32(2, this.#options.maxConcurrentStreams);
    view.setUint16(6, 0x4); // INITIAL_WINDOW_SIZE
    view.setUint32(8, streamWindow);
    view.setUint16(12, 0x6); // MAX_HEADER_LIST_SIZE
    view.setUint32(14, this.#options.maxHeaderListSize);
    this.#control(FrameType.SETTINGS, 0, 0, settings);
    this.#control(FrameType.WINDOW_UPDATE, 0, 0, undefined, connectionWindow - 65_535);

    let prefaceSeen = 0;
    // One read buffer per connection, reused (cheaper than the ReadableStream's chunk per read):
    // frames are parsed in place, and whatever outlives a read is copied out of it (DATA, HPACK
    // strings, a frame split across reads into a buffer of its own size), so a connection
    // allocates about what it receives, not a copy of every read's remainder.
    const readBuffer = new Uint8Array(32 * 1024);
    reading: for (;;) {
      let chunk: Uint8Array;
      try {
        const n = await this.#conn.read(readBuffer);
        if (n === null) break;
        chunk = readBuffer.subarray(0, n);
      } catch {
        break; // reset or closed
      }
      this.#lastReceived = this.#shared.now;
      if (this.#failed || this.#closed) continue;
      try {
        if (prefaceSeen < preface.length) {
          const n = Math.min(preface.length - prefaceSeen, chunk.length);
          for (let i = 0; i < n; i++) {
            if (chunk[i] !== preface[prefaceSeen + i]) break reading; // not HTTP/2
          }
          prefaceSeen += n;
          if (prefaceSeen < preface.length) continue;
          chunk = chunk.subarray(n);
        }
        this.#feed(chunk);
      } catch (error) {
        if (!(error instanceof ConnectionError)) this.#options.onError?.(error);
        // Closing with unread input would reset the connection and lose the GOAWAY: finish
        // writing, half-close, and keep reading (discarding) until the peer closes or 1 s passes.
        this.#fail(error instanceof ConnectionError ? error.code : ErrorCode.INTERNAL_ERROR);
      }
    }
    this.#teardown();
    await this.#socketClosedPromise;
  }

  /** The header of a frame split across reads, while its first 9 bytes come in. */
  readonly #head = new Uint8Array(9);
  #headFill = 0;
  /** That frame's payload, being filled (allocated once its length is known, at most 16 KiB). */
  #split: Uint8Array | undefined;
  #splitFill = 0;

  /** Parses the frames in `chunk`, completing a frame split across reads first. */
  #feed(chunk: Uint8Array): void {
    let offset = 0;
    if (this.#headFill > 0) {
      const take = Math.min(9 - this.#headFill, chunk.length);
      this.#head.set(chunk.subarray(0, take), this.#headFill);
      this.#headFill += take;
      offset = take;
      if (this.#headFill < 9) return;
      this.#headFill = 0;
      this.#split = new Uint8Array(frameLength(this.#head, 0));
      this.#splitFill = 0;
    }
    if (this.#split) {
      const take = Math.min(this.#split.length - this.#splitFill, chunk.length - offset);
      this.#split.set(chunk.subarray(offset, offset + take), this.#splitFill);
      this.#splitFill += take;
      offset += take;
      if (this.#splitFill < this.#split.length) return;
      const payload = this.#split;
      this.#split = undefined;
      const head = this.#head;
      this.#frame(head[3]!, head[4]!, readU32(head, 5) & 0x7fffffff, payload, true);
    }
    while (offset < chunk.length && !this.#failed && !this.#closed) {
      const left = chunk.length - offset;
      if (left < 9) {
        this.#head.set(chunk.subarray(offset));
        this.#headFill = left;
        return;
      }
      const length = frameLength(chunk, offset);
      if (left < 9 + length) {
        this.#head.set(chunk.subarray(offset, offset + 9));
        this.#split = new Uint8Array(length);
        this.#split.set(chunk.subarray(offset + 9));
        this.#splitFill = left - 9;
        return;
      }
      const type = chunk[offset + 3]!;
      const flags = chunk[offset + 4]!;
      const streamId = readU32(chunk, offset + 5) & 0x7fffffff;
      this.#frame(type, flags, streamId, chunk.subarray(offset + 9, offset + 9 + length));
      offset += 9 + length;
    }
  }

  /** Checks the connection's deadlines; called by the server's sweep. */
  tick(now: number): void {
    const o = this.#options;
    if (this.#writeSince !== 0 && now - this.#writeSince > o.writeTimeoutMs) {
      return this.#hardClose(); // the peer does not read
    }
    if (this.#closed || this.#failed) {
      if (this.#closeBy !== 0 && now >= this.#closeBy) this.#hardClose();
      return;
    }
    if (!this.#sawSettings) {
      if (now - this.#startedAt > o.prefaceTimeoutMs) this.#hardClose();
      return;
    }
    const c = this.#continuation;
    if (c && now - c.startedAt > o.headerBlockTimeoutMs) {
      return this.#fail(ErrorCode.ENHANCE_YOUR_CALM);
    }
    if (this.#pingSentAt !== 0 && now - this.#pingSentAt > o.keepaliveTimeoutMs) {
      return this.#fail(ErrorCode.NO_ERROR);
    }
    if (this.#open === 0 && !c && now - this.#idleSince > o.idleTimeoutMs) {
      return this.#fail(ErrorCode.NO_ERROR);
    }
    if (this.#streams.size > 0) {
      // Held back by the connection's window (its handlers read slowly), no peer is slow.
      const held = this.#recvWindow < this.#slowWindow;
      for (const stream of this.#streams.values()) {
        if (stream.closed) {
          // Half-closed (local): the answer is out and what the peer still sends is dropped. A
          // peer that sends nothing more, or too slowly, is asked to stop (its stream window is
          // not given back, so a closed window is no excuse here).
          if (now - stream.waitingSince > o.bodyTimeoutMs || this.#tooSlow(stream, now)) {
            this.#closeLocal(stream, Closed.BY_US, ErrorCode.NO_ERROR);
          }
          continue;
        }
        if (stream.blockedSince !== 0 && now - stream.blockedSince > o.windowTimeoutMs) {
          // The peer gives no window for the response: the stream and what it holds are freed.
          this.#resetStream(stream, ErrorCode.CANCEL, windowTimedOut);
          continue;
        }
        if (stream.ended) continue;
        if (
          stream.wake !== undefined && stream.chunks.length === 0 &&
          now - stream.waitingSince > o.bodyTimeoutMs
        ) {
          this.#resetStream(stream, ErrorCode.CANCEL, bodyTimedOut);
        } else if (
          held || stream.recvWindow < this.#slowWindow || stream.rateSince < this.#windowReopened
        ) {
          // Our windows hold the peer back: its rate is measured again from now.
          stream.rateSince = now;
          stream.rateBase = stream.received;
        } else if (this.#tooSlow(stream, now)) {
          this.#resetStream(stream, ErrorCode.CANCEL, bodyTooSlow);
        }
      }
    }
    if (this.#drainAt !== 0 && now >= this.#drainAt) this.#finalGoaway();
    if (this.#pingSentAt === 0 && now - this.#lastReceived > o.keepaliveIntervalMs) {
      this.#pingSentAt = now;
      this.#control(FrameType.PING, 0, 0, keepalivePing);
    }
  }

  /**
   * Whether a stream's body came slower than `minBodyBytesPerSecond` on average since its
   * measurement began, once `bodyGraceMs` have passed. The sweep's clock may date that beginning
   * up to a sweep early: a sweep's time is taken off, in the peer's favour.
   */
  #tooSlow(stream: Stream, now: number): boolean {
    const o = this.#options;
    const elapsed = now - stream.rateSince - this.#shared.sweepMs;
    return o.minBodyBytesPerSecond > 0 && !stream.patient && elapsed > o.bodyGraceMs &&
      (stream.received - stream.rateBase) * 1000 < o.minBodyBytesPerSecond * elapsed;
  }

  /** Resets an open stream on our side: RST_STREAM `code`; its handler's signal gets `reason`. */
  #resetStream(stream: Stream, code: number, reason: unknown): void {
    this.#control(FrameType.RST_STREAM, 0, stream.id, undefined, code);
    this.#finish(stream, reason, Closed.BY_US);
  }

  /** Handles a frame; `owned` when its payload is not a view of the read buffer. */
  #frame(type: number, flags: number, streamId: number, payload: Uint8Array, owned = false): void {
    if (this.#continuation && type !== FrameType.CONTINUATION) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "expected CONTINUATION");
    }
    if (!this.#sawSettings && (type !== FrameType.SETTINGS || flags & ACK)) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "the preface must end with SETTINGS");
    }
    switch (type) {
      case FrameType.DATA:
        return this.#onData(flags, streamId, payload, owned);
      case FrameType.HEADERS:
        return this.#onHeaders(flags, streamId, payload);
      case FrameType.PRIORITY:
        return this.#onPriority(streamId, payload);
      case FrameType.RST_STREAM:
        return this.#onReset(streamId, payload);
      case FrameType.SETTINGS:
        return this.#onSettings(flags, streamId, payload);
      case FrameType.PUSH_PROMISE:
        throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "clients cannot push");
      case FrameType.PING:
        if (streamId !== 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "PING on a stream");
        if (payload.length !== 8) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "bad PING");
        if (!(flags & ACK)) this.#control(FrameType.PING, ACK, 0, payload);
        else if (sameBytes(payload, keepalivePing)) this.#pingSentAt = 0;
        else if (sameBytes(payload, drainPing)) this.#finalGoaway();
        return;
      case FrameType.GOAWAY:
        if (streamId !== 0) {
          throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "GOAWAY on a stream");
        }
        if (payload.length < 8) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "bad GOAWAY");
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

  /** Whether a stream id names a stream the peer never opened nor skipped (RFC 9113 5.1 "idle"). */
  #isIdle(streamId: number): boolean {
    return streamId % 2 === 0 || streamId > this.#lastStreamId;
  }

  #remember(streamId: number, how: number): void {
    if (!this.#closedIds) {
      this.#closedIds = new Int32Array(closedMemory);
      this.#closedHow = new Uint8Array(closedMemory);
    }
    this.#closedIds[this.#closedNext] = streamId;
    this.#closedHow![this.#closedNext] = how;
    this.#closedNext = (this.#closedNext + 1) % closedMemory;
  }

  /** How a closed stream closed, or 0 when it is not remembered. */
  #closedState(streamId: number): number {
    const ids = this.#closedIds;
    if (!ids) return 0;
    for (let i = 0; i < closedMemory; i++) if (ids[i] === streamId) return this.#closedHow![i]!;
    return 0;
  }

  /** Counts a reset the peer sent or provoked; past the rate, the connection ends. */
  #countReset(): void {
    const second = Math.floor(this.#shared.now / 1000);
    if (second !== this.#resetsSecond) {
      this.#resetsSecond = second;
      this.#resets = 0;
    }
    if (++this.#resets > maxResetsPerSecond) {
      throw new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "too many stream resets");
    }
  }

  /** A stream error the peer caused (RFC 9113 5.4.2): RST_STREAM, and the stream is closed. */
  #streamError(streamId: number, code: number): void {
    this.#countReset();
    const stream = this.#streams.get(streamId);
    if (stream?.closed) return this.#closeLocal(stream, Closed.BY_US, code);
    if (stream) return this.#resetStream(stream, code, streamReset);
    this.#control(FrameType.RST_STREAM, 0, streamId, undefined, code);
  }

  /** Forgets a half-closed (local) stream, with a RST_STREAM of `code` when given. */
  #closeLocal(stream: Stream, how: number, code?: number): void {
    if (code !== undefined) this.#control(FrameType.RST_STREAM, 0, stream.id, undefined, code);
    this.#forget(stream);
    this.#localClosed--;
    this.#remember(stream.id, how);
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
    let selfDependent = false;
    if (flags & PRIORITY) {
      if (block.length < 5) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "bad HEADERS");
      selfDependent = (readU32(block) & 0x7fffffff) === streamId;
      block = block.subarray(5);
    }
    if (flags & END_HEADERS) return this.#onHeaderBlock(streamId, flags, block, selfDependent);
    if (block.length > this.#options.maxHeaderListSize) {
      throw new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "header block too large");
    }
    this.#continuation = {
      streamId,
      flags,
      chunks: [block.slice()],
      size: block.length,
      frames: 1,
      selfDependent,
      startedAt: this.#shared.now,
    };
  }

  #onContinuation(flags: number, streamId: number, payload: Uint8Array): void {
    const c = this.#continuation;
    if (!c || c.streamId !== streamId) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "unexpected CONTINUATION");
    }
    c.chunks.push(payload.slice());
    c.size += payload.length;
    if (c.size > this.#options.maxHeaderListSize || ++c.frames > maxContinuations) {
      throw new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "header block too large");
    }
    if (!(flags & END_HEADERS)) return;
    this.#continuation = undefined;
    this.#onHeaderBlock(streamId, c.flags, concat(c.chunks), c.selfDependent);
  }

  #onHeaderBlock(
    streamId: number,
    flags: number,
    block: Uint8Array,
    selfDependent: boolean,
  ): void {
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
      // Half-closed (remote): the peer already ended the stream.
      if (existing.ended) return this.#streamError(streamId, ErrorCode.STREAM_CLOSED);
      // Trailers: they must end the stream, carry no pseudo-header, and the body must be whole.
      if (
        !(flags & END_STREAM) || selfDependent || checkTrailers(fields) !== undefined ||
        (existing.contentLength >= 0 && existing.received !== existing.contentLength)
      ) {
        return this.#streamError(streamId, ErrorCode.PROTOCOL_ERROR);
      }
      if (existing.closed) return this.#closeLocal(existing, Closed.ENDED);
      existing.ended = true;
      this.#touch(existing);
      existing.wake?.();
      return;
    }
    if (streamId % 2 === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "even stream id");
    if (streamId <= this.#lastStreamId) {
      switch (this.#closedState(streamId)) {
        case Closed.BY_US:
          return; // sent before the peer learned of our reset
        case Closed.BY_PEER:
          return this.#streamError(streamId, ErrorCode.STREAM_CLOSED);
        case Closed.ENDED:
          throw new ConnectionError(ErrorCode.STREAM_CLOSED, "HEADERS on a closed stream");
        default:
          throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "stream id not above the last");
      }
    }
    this.#lastStreamId = streamId;
    const admitted = !this.#goingAway && this.#open < this.#options.maxConcurrentStreams &&
      (this.#streamsLeft > 0 || this.#makeRoom() || this.#takeFairShare());
    if (this.#failed) return; // making room gave up a stream of this peer, its last allowed reset
    if (!admitted) {
      // Refused, not provoked by the peer: not counted as a reset.
      this.#control(FrameType.RST_STREAM, 0, streamId, undefined, ErrorCode.REFUSED_STREAM);
      this.#remember(streamId, Closed.BY_US);
      return;
    }
    const contentLength = selfDependent ? "depends on itself" : checkRequestHeaders(fields);
    const ended = (flags & END_STREAM) !== 0;
    if (typeof contentLength === "string" || (ended && contentLength > 0)) {
      // Malformed (RFC 9113 8.1.1): a stream error; no handler sees it.
      this.#remember(streamId, Closed.BY_US);
      return this.#streamError(streamId, ErrorCode.PROTOCOL_ERROR);
    }
    // The fields are held as long as the stream is open: from the budget, as body bytes are.
    const headerCost = requestHeaderCost(fields);
    if (this.#queued && !this.#queued.grow(headerCost, headerCost <= smallRequestBytes)) {
      this.#control(FrameType.RST_STREAM, 0, streamId, undefined, ErrorCode.ENHANCE_YOUR_CALM);
      this.#remember(streamId, Closed.BY_US);
      return;
    }
    const stream = new Stream(streamId, this, this.#peerInitialWindow, this.#shared.now);
    stream.ended = ended;
    stream.contentLength = contentLength;
    stream.headerCost = headerCost;
    this.#streams.set(streamId, stream);
    this.#shared.streams++;
    if (!ended) this.#shared.waiting.add(stream);
    const request: H2Request = {
      streamId,
      headers: fields,
      body: this.#body(stream),
      signal: stream.abort.signal,
      holders: this.#holders,
      patient: () => stream.patient = true,
    };
    Promise.resolve()
      // A stream given up before its handler ran (to make room) costs nothing more.
      .then(() =>
        stream.closed ? undefined : this.#options.handler(request, this.#response(stream))
      )
      .catch((error) => {
        this.#options.onError?.(error);
        this.#response(stream).reset(ErrorCode.INTERNAL_ERROR);
      });
  }

  /** Gives consumed bytes back to the peer's connection window, a quarter of it at a time. */
  #credit(bytes: number): void {
    this.#unacked += bytes;
    if (this.#unacked >= connectionWindow / 4) {
      // A window reopened from below what a slow body needs: the streams held back by it are
      // measured again (see `tick`).
      if (this.#recvWindow < this.#slowWindow) this.#windowReopened = this.#shared.now;
      this.#control(FrameType.WINDOW_UPDATE, 0, 0, undefined, this.#unacked);
      this.#recvWindow += this.#unacked;
      this.#unacked = 0;
    }
  }

  async *#body(stream: Stream): AsyncIterable<Uint8Array> {
    for (;;) {
      if (stream.abort.signal.aborted) throw stream.abort.signal.reason;
      const chunk = stream.chunks.shift();
      if (chunk) {
        stream.buffered -= chunk.length;
        this.#queued?.shrink(chunk.length);
        // Reopen the windows by what the handler consumed: the connection's once a quarter of it
        // is used (not per request, which cost a write of its own), a stream's at once.
        this.#credit(chunk.length);
        if (!stream.ended) {
          if (stream.recvWindow < this.#slowWindow) {
            // Our window held the peer back until now: its rate is measured again from here.
            stream.rateSince = this.#shared.now;
            stream.rateBase = stream.received;
          }
          this.#control(FrameType.WINDOW_UPDATE, 0, stream.id, undefined, chunk.length);
          stream.recvWindow += chunk.length; // else a body over 256 KiB was a FLOW_CONTROL_ERROR
        }
        yield chunk;
        continue;
      }
      if (stream.overBudget) throw bodyOverBudget;
      if (stream.ended) return;
      stream.waitingSince = this.#shared.now;
      await new Promise<void>((resolve) => stream.wake = resolve);
      stream.wake = undefined;
    }
  }

  #onData(flags: number, streamId: number, payload: Uint8Array, owned: boolean): void {
    if (streamId === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "DATA on stream 0");
    if (this.#isIdle(streamId)) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "DATA on an idle stream");
    }
    // Connection flow control counts every DATA frame, whatever the state of its stream.
    this.#recvWindow -= payload.length;
    if (this.#recvWindow < 0) {
      throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "connection window exceeded");
    }
    const data = this.#unpad(flags, payload); // a bad padding is an error in any state
    const stream = this.#streams.get(streamId);
    if (!stream || stream.ended) {
      // Not open for the peer's data: its bytes go back to the connection window at once.
      this.#credit(payload.length);
      if (stream) return this.#streamError(streamId, ErrorCode.STREAM_CLOSED);
      // On a stream remembered as closed by both sides or by the peer, a stream error; else
      // ignored: after our reset the peer may still have frames under way, and a stream too old
      // to be remembered is most likely such a one.
      const how = this.#closedState(streamId);
      if (how === Closed.ENDED || how === Closed.BY_PEER) {
        this.#streamError(streamId, ErrorCode.STREAM_CLOSED);
      }
      return;
    }
    const padding = payload.length - data.length;
    stream.recvWindow -= payload.length;
    if (stream.recvWindow < 0) {
      throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "stream window exceeded");
    }
    if (padding > 0) {
      // Padding is given back at once.
      this.#credit(padding);
      stream.recvWindow += padding;
      this.#control(FrameType.WINDOW_UPDATE, 0, streamId, undefined, padding);
    }
    stream.received += data.length;
    const end = (flags & END_STREAM) !== 0;
    if (
      stream.contentLength >= 0 &&
      (stream.received > stream.contentLength ||
        (end && stream.received !== stream.contentLength))
    ) {
      this.#credit(data.length);
      return this.#streamError(streamId, ErrorCode.PROTOCOL_ERROR); // RFC 9113 8.1.1
    }
    if (stream.closed) {
      // Half-closed (local): the answer is complete, the rest of the body is dropped. Its bytes
      // go back to the connection window, not to the stream's: a peer that goes on sending stops
      // at the end of the stream window (gRPC clients reset the stream once they have the status).
      this.#credit(data.length);
      if (end) return this.#closeLocal(stream, Closed.ENDED);
      stream.waitingSince = this.#shared.now;
      return this.#touch(stream);
    }
    // A small request's bytes may come from the budget's reserve (lib/platform/budget.ts).
    const small = stream.headerCost + stream.received <= smallRequestBytes;
    if (stream.overBudget || (this.#queued && !this.#queued.grow(data.length, small))) {
      // Over the memory budget: this stream's body ends here for its handler, which answers the
      // refusal (a clean answer, where a reset looks like a broken call); the rest of the body
      // is dropped. Not the connection, and not counted as a reset the peer provoked.
      this.#credit(data.length);
      stream.overBudget = true;
      if (end) stream.ended = true;
      this.#touch(stream);
      stream.wake?.();
      return;
    }
    stream.buffered += data.length;
    if (data.length > 0) stream.chunks.push(owned ? data : data.slice());
    if (end) stream.ended = true;
    this.#touch(stream);
    stream.wake?.();
  }

  #onPriority(streamId: number, payload: Uint8Array): void {
    if (streamId === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "PRIORITY on stream 0");
    if (payload.length !== 5) {
      throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "bad PRIORITY");
    }
    if ((readU32(payload) & 0x7fffffff) !== streamId) return; // priorities are ignored
    // A stream may not depend on itself (RFC 9113 5.3.1): a stream error where there is a stream.
    if (this.#streams.has(streamId)) return this.#streamError(streamId, ErrorCode.PROTOCOL_ERROR);
    throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "stream depends on itself");
  }

  #onReset(streamId: number, payload: Uint8Array): void {
    if (streamId === 0) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on stream 0");
    }
    if (payload.length !== 4) {
      throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "bad RST_STREAM");
    }
    if (this.#isIdle(streamId)) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on an idle stream");
    }
    this.#countReset();
    const stream = this.#streams.get(streamId);
    if (stream?.closed) this.#closeLocal(stream, Closed.BY_PEER);
    else if (stream) this.#finish(stream, peerReset, Closed.BY_PEER);
  }

  #onSettings(flags: number, streamId: number, payload: Uint8Array): void {
    if (streamId !== 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "SETTINGS on a stream");
    if (flags & ACK) {
      if (payload.length !== 0) {
        throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload");
      }
      return;
    }
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
        for (const s of this.#streams.values()) {
          s.sendWindow += delta;
          if (s.sendWindow > maxWindow) {
            throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "window overflow");
          }
        }
      } else if (id === 0x5) {
        if (value < 16_384 || value > 16_777_215) {
          throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "bad MAX_FRAME_SIZE");
        }
        this.#peerMaxFrame = value;
      } else if (id === 0x2 && value > 1) {
        throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "bad ENABLE_PUSH");
      } else if (id === 0x1) this.#encoder.setPeerTableSize(value);
    }
    this.#sawSettings = true;
    this.#control(FrameType.SETTINGS, ACK, 0);
    this.#wakeWriters();
  }

  #onWindowUpdate(streamId: number, payload: Uint8Array): void {
    if (payload.length !== 4) {
      throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "bad WINDOW_UPDATE");
    }
    const increment = readU32(payload) & 0x7fffffff;
    if (streamId === 0) {
      if (increment === 0) {
        throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "zero WINDOW_UPDATE");
      }
      this.#sendWindow += increment;
      if (this.#sendWindow > maxWindow) {
        throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "window overflow");
      }
    } else {
      if (this.#isIdle(streamId)) {
        throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream");
      }
      const stream = this.#streams.get(streamId);
      if (increment === 0) {
        // A stream error on a stream that is open, or remembered as closed by both sides or by
        // the peer (as for DATA).
        const how = stream ? 0 : this.#closedState(streamId);
        if (stream || how === Closed.ENDED || how === Closed.BY_PEER) {
          return this.#streamError(streamId, ErrorCode.PROTOCOL_ERROR);
        }
        return;
      }
      if (!stream) return; // closed: a WINDOW_UPDATE may cross our END_STREAM or RST_STREAM
      // Half-closed (local) included: its window is still checked.
      stream.sendWindow += increment;
      if (stream.sendWindow > maxWindow) {
        return this.#streamError(streamId, ErrorCode.FLOW_CONTROL_ERROR);
      }
      if (stream.closed) return;
    }
    this.#wakeWriters();
  }

  #wakeWriters(): void {
    if (this.#blocked.size === 0) return;
    for (const stream of this.#blocked) stream.writeWaiter?.();
    this.#blocked.clear();
  }

  #wakeDrainWaiters(): void {
    const waiters = this.#drainWaiters;
    this.#drainWaiters = [];
    for (const w of waiters) w();
  }

  #response(stream: Stream): H2Response {
    const writeHeaders = (fields: HeaderField[], end: boolean) => {
      const block = this.#encoder.encode(fields);
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
    const sendTrailers = (fields: HeaderField[]) => {
      if (stream.closed) return;
      writeHeaders(fields, true);
      this.#finish(stream);
    };
    return {
      headers: (fields, endStream = false) => {
        if (stream.closed || stream.headersSent) return;
        stream.headersSent = true;
        writeHeaders(fields, endStream);
        if (endStream) this.#finish(stream);
      },
      data: (bytes, endStream = false) => {
        if (stream.closed) return;
        if (stream.sending === undefined) {
          const room = Math.min(
            this.#sendWindow,
            stream.sendWindow,
            this.#peerMaxFrame,
            maxDataFrame,
          );
          if (
            bytes.length <= room && this.#pending + bytes.length <= this.#options.maxOutputBytes
          ) {
            // The common case, a small message: queued now, so that headers, data and trailers
            // leave in one write.
            if (bytes.length === 0 && !endStream) return;
            this.#sendWindow -= bytes.length;
            stream.sendWindow -= bytes.length;
            this.#write(frame(FrameType.DATA, endStream ? END_STREAM : 0, stream.id, bytes));
            if (endStream) this.#finish(stream);
            return;
          }
        }
        // Writes of one stream leave in order: a write waits for the one before it.
        const before = stream.sending;
        const sending: Promise<void> = before
          ? before.then(() => this.#dataSlow(stream, bytes, endStream))
          : this.#dataSlow(stream, bytes, endStream);
        stream.sending = sending;
        void sending.then(() => {
          if (stream.sending === sending) stream.sending = undefined;
        });
        return sending;
      },
      trailers: (fields) => {
        if (stream.closed) return;
        if (stream.sending) void stream.sending.then(() => sendTrailers(fields));
        else sendTrailers(fields);
      },
      reset: (code) => {
        if (stream.closed) return;
        this.#resetStream(stream, code, streamReset);
      },
    };
  }

  /**
   * Sends body bytes as the windows and the output cap allow. Each wait is one promise, resolved
   * by a WINDOW_UPDATE, SETTINGS, the queue's draining or the stream's end: nothing is added to
   * the stream's signal, and nothing is left behind per wait.
   */
  async #dataSlow(stream: Stream, bytes: Uint8Array, endStream: boolean): Promise<void> {
    if (bytes.length === 0 && !endStream) return;
    let offset = 0;
    while (!stream.closed && !this.#closed) {
      const left = bytes.length - offset;
      const room = Math.min(this.#sendWindow, stream.sendWindow, this.#peerMaxFrame, maxDataFrame);
      if (left > 0 && room <= 0) {
        // Waiting for the peer's window: `windowTimeoutMs` from the first wait without progress.
        if (stream.blockedSince === 0) {
          stream.blockedSince = this.#shared.now;
          this.#touch(stream);
        }
        await new Promise<void>((resolve) => {
          stream.writeWaiter = resolve;
          this.#blocked.add(stream);
        });
        stream.writeWaiter = undefined;
        continue;
      }
      if (
        this.#pending > 0 && this.#pending + Math.min(left, room) > this.#options.maxOutputBytes
      ) {
        await new Promise<void>((resolve) => this.#drainWaiters.push(resolve));
        continue;
      }
      const size = Math.max(0, Math.min(left, room));
      const part = bytes.subarray(offset, offset + size);
      if (stream.blockedSince !== 0) {
        stream.blockedSince = 0;
        this.#touch(stream);
      }
      this.#sendWindow -= size;
      stream.sendWindow -= size;
      offset += size;
      const last = offset === bytes.length;
      this.#write(frame(FrameType.DATA, last && endStream ? END_STREAM : 0, stream.id, part));
      if (last) {
        if (endStream) this.#finish(stream);
        return;
      }
    }
  }

  /**
   * Ends a stream on our side. `how` says how it closed when that was not our END_STREAM. After our
   * END_STREAM on a stream the peer has not ended, the stream is half-closed (local) until the
   * peer ends it: what the peer sends on it is still checked (e.g. a body longer than its
   * `content-length`, trailers without END_STREAM) and dropped, and the stream's window is not
   * given back. The peer is asked to stop sending (RST_STREAM NO_ERROR, RFC 9113 8.1) after
   * `bodyTimeoutMs` without a frame from it or when it sends slower than `minBodyBytesPerSecond`,
   * and at once when there are too many such streams or the server is at `maxStreams` (a
   * half-closed stream holds its place in `maxStreams` until it is forgotten).
   * (Resetting them at once lets a client that uploads bodies we refuse start the next one at
   * once: under a flood of 1 MiB messages refused after their first bytes, that was ~25 times the
   * requests per second and the process's peak memory grew by ~40 MiB.)
   */
  #finish(stream: Stream, reason?: unknown, how?: number): void {
    if (stream.closed) return;
    stream.closed = true;
    if (
      how === undefined && !stream.ended &&
      this.#localClosed < this.#options.maxConcurrentStreams && this.#streamsLeft > 0
    ) {
      this.#localClosed++;
      stream.waitingSince = this.#shared.now;
    } else {
      this.#forget(stream);
      if (how === undefined) {
        how = Closed.ENDED;
        if (!stream.ended) {
          this.#control(FrameType.RST_STREAM, 0, stream.id, undefined, ErrorCode.NO_ERROR);
          how = Closed.BY_US;
        }
      }
      this.#remember(stream.id, how);
    }
    if (stream.buffered > 0) {
      // Received bytes no handler will read (an answer sent before the body was read, e.g. a
      // message over the size limit): give them back to the connection's window.
      this.#credit(stream.buffered);
      this.#queued?.shrink(stream.buffered);
      stream.buffered = 0;
      stream.chunks = [];
    }
    this.#queued?.shrink(stream.headerCost);
    stream.headerCost = 0;
    // The handler's signal fires on every end, as connect's HandlerContext signal does.
    stream.abort.abort(reason ?? streamEnded);
    stream.wake?.();
    if (stream.writeWaiter) {
      this.#blocked.delete(stream);
      stream.writeWaiter();
    }
    if (this.#open === 0) {
      this.#idleSince = this.#shared.now;
      this.#idle?.();
    }
  }

  /** Queues a frame of a response (HEADERS, CONTINUATION, DATA). */
  #write(bytes: Uint8Array): void {
    if (this.#closed) return; // closing: nothing new after the frames already queued
    if (this.#ctlFill > this.#ctlSealed) this.#seal(); // control frames queued before it go first
    this.#out.push(bytes);
    this.#pending += bytes.length;
    this.#queuedOutput();
  }

  /**
   * Queues a control frame, written into `#ctl` after the ones before it: its payload is
   * `payload`, or the 32-bit `word` when given (RST_STREAM, WINDOW_UPDATE), else empty. Every type
   * but WINDOW_UPDATE counts against `maxControlFrames` (a peer gets WINDOW_UPDATEs only for the
   * DATA it sends, which the windows bound; the others it can ask for without end).
   */
  #control(type: number, flags: number, streamId: number, payload?: Uint8Array, word = -1): void {
    if (this.#closed) return;
    const length = payload ? payload.length : word >= 0 ? 4 : 0;
    const size = 9 + length;
    let chunk = this.#ctl;
    if (chunk === undefined || this.#ctlFill + size > chunk.length) {
      this.#seal();
      chunk = this.#ctl = new Uint8Array(Math.max(controlChunk, size));
      this.#ctlFill = this.#ctlSealed = 0;
    }
    const at = writeFrameHeader(chunk, this.#ctlFill, length, type, flags, streamId);
    if (payload) chunk.set(payload, at);
    else if (word >= 0) writeU32(chunk, at, word);
    this.#ctlFill += size;
    this.#pending += size;
    if (
      type !== FrameType.WINDOW_UPDATE && !this.#failed &&
      ++this.#ctlQueued + this.#ctlWriting > this.#options.maxControlFrames
    ) {
      return this.#flooded();
    }
    this.#queuedOutput();
  }

  /** Gives `#out` a view of the control frames written since the last view. */
  #seal(): void {
    if (this.#ctlFill > this.#ctlSealed) {
      this.#out.push(this.#ctl!.subarray(this.#ctlSealed, this.#ctlFill));
      this.#ctlSealed = this.#ctlFill;
    }
  }

  /** After a frame was queued: past the byte cap the peer is dropped, else a flush is due. */
  #queuedOutput(): void {
    if (this.#pending > this.#options.maxOutputBytes + controlSlack) {
      // The peer does not read what it asks for: drop it rather than buffer without bound.
      return this.#hardClose();
    }
    if (!this.#flushing) {
      this.#flushing = true;
      queueMicrotask(this.#flushTask);
    }
  }

  /**
   * The peer asks for more control frames than it reads: what is queued and not being written is
   * dropped, and the connection fails with ENHANCE_YOUR_CALM (its GOAWAY leaves if the write under
   * way ever ends; else the sweep closes the socket after `closeGraceMs`).
   */
  #flooded(): void {
    let dropped = this.#ctlFill - this.#ctlSealed;
    for (const bytes of this.#out) dropped += bytes.length;
    this.#out = [];
    this.#ctlSealed = this.#ctlFill;
    this.#pending -= dropped;
    this.#ctlQueued = 0;
    this.#fail(ErrorCode.ENHANCE_YOUR_CALM);
  }

  readonly #flushTask = (): void => void this.#flush();

  async #flush(): Promise<void> {
    try {
      for (;;) {
        this.#seal();
        if (this.#out.length === 0) break;
        let data = this.#out.length === 1 ? this.#out[0]! : concat(this.#out);
        this.#out = [];
        this.#ctlWriting = this.#ctlQueued;
        this.#ctlQueued = 0;
        while (data.length > 0) {
          this.#writeSince = this.#shared.now || 1;
          const n = await this.#conn.write(data);
          this.#pending -= n;
          data = data.subarray(n);
          if (this.#drainWaiters.length > 0 && this.#pending <= this.#options.maxOutputBytes / 2) {
            this.#wakeDrainWaiters();
          }
        }
        this.#ctlWriting = 0;
        this.#writeSince = 0;
      }
      // Everything queued is written: nothing refers to the control buffer any more.
      this.#ctlFill = this.#ctlSealed = 0;
    } catch {
      this.#out = [];
      this.#ctlSealed = this.#ctlFill;
      this.#pending = 0;
      this.#hardClose();
    } finally {
      this.#writeSince = 0;
      this.#flushing = false;
      if (this.#drainWaiters.length > 0) this.#wakeDrainWaiters();
      if (this.#closed) this.#closeSocket();
      else if (this.#failed) this.#halfClose();
    }
  }

  /** After a connection error: no more output after it; the peer's input is read and dropped. */
  #fail(code: number): void {
    if (this.#failed || this.#closed) return;
    this.#failed = true;
    this.#goaway(code);
    this.#goingAway = true;
    this.#continuation = undefined;
    this.#closeBy = this.#shared.now + closeGraceMs;
    for (const stream of [...this.#streams.values()]) {
      this.#finish(stream, connectionFailed, Closed.BY_US);
    }
    this.#forgetAll();
    this.#queued?.release();
    if (!this.#flushing) this.#halfClose();
  }

  #halfClose(): void {
    if (this.#halfClosed || this.#socketClosed) return;
    this.#halfClosed = true;
    this.#conn.closeWrite().catch(() => {});
  }

  #goaway(code: number, lastStreamId = this.#lastStreamId): void {
    const payload = new Uint8Array(8);
    new DataView(payload.buffer).setUint32(0, lastStreamId);
    new DataView(payload.buffer).setUint32(4, code);
    this.#control(FrameType.GOAWAY, 0, 0, payload);
  }

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
    if (this.#drainAt === 0 && !this.#goingAway && !this.#closed) {
      this.#goaway(ErrorCode.NO_ERROR, 0x7fffffff);
      this.#control(FrameType.PING, 0, 0, drainPing);
      this.#drainAt = this.#shared.now + closeGraceMs;
    }
    if (this.#open === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idle = resolve);
  }

  #finalGoaway(): void {
    this.#drainAt = 0;
    if (this.#goingAway || this.#closed) return;
    this.#goingAway = true;
    this.#goaway(ErrorCode.NO_ERROR);
  }

  /** Ends every stream; the socket closes once the queued output is written (1 s at most). */
  #teardown(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#continuation = undefined;
    for (const stream of [...this.#streams.values()]) {
      this.#finish(stream, connectionClosed, Closed.BY_US);
    }
    this.#forgetAll();
    // Its holders are forgotten with their last lease.
    this.#queued?.release();
    this.#wakeWriters();
    this.#wakeDrainWaiters();
    if (this.#flushing) {
      const by = this.#shared.now + closeGraceMs;
      this.#closeBy = this.#closeBy === 0 ? by : Math.min(this.#closeBy, by);
    } else {
      this.#closeSocket();
    }
  }

  /** Closes at once, dropping what is queued. */
  #hardClose(): void {
    this.#out = [];
    this.#ctlSealed = this.#ctlFill;
    this.#teardown();
    this.#closeSocket();
  }

  #closeSocket(): void {
    if (this.#socketClosed) return;
    this.#socketClosed = true;
    try {
      this.#conn.close();
    } catch { /* already closed */ }
    this.#resolveSocketClosed();
  }

  /** Closes the connection (what is queued gets a second to leave). */
  close(): void {
    this.#teardown();
  }
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** The payload length of the frame whose header starts at `offset` (FRAME_SIZE_ERROR past ours). */
function frameLength(bytes: Uint8Array, offset: number): number {
  const length = (bytes[offset]! << 16) | (bytes[offset + 1]! << 8) | bytes[offset + 2]!;
  if (length > maxFrameSize) {
    throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "frame too large");
  }
  return length;
}

/** SETTINGS (none) and GOAWAY ENHANCE_YOUR_CALM: what a connection past `maxConnections` gets. */
const overCapacity = concat([
  frame(FrameType.SETTINGS, 0, 0),
  frame(FrameType.GOAWAY, 0, 0, concat([u32(0), u32(ErrorCode.ENHANCE_YOUR_CALM)])),
]);

/** Starts the server. */
export function serveH2(options: H2ServerOptions): H2Server {
  const listener = Deno.listen({ hostname: options.hostname, port: options.port });
  const settings: ConnectionOptions = { ...defaults, ...options };
  const connections = new Map<Connection, Promise<void>>();
  // One sweep for every deadline of every connection.
  const smallest = Math.min(
    settings.prefaceTimeoutMs,
    settings.headerBlockTimeoutMs,
    settings.bodyTimeoutMs,
    settings.minBodyBytesPerSecond > 0 ? settings.bodyGraceMs : Infinity,
    settings.windowTimeoutMs,
    settings.idleTimeoutMs,
    settings.keepaliveIntervalMs,
    settings.keepaliveTimeoutMs,
    settings.writeTimeoutMs,
    closeGraceMs,
  );
  const sweepMs = Math.max(10, Math.min(1000, Math.floor(smallest / 4)));
  const shared: Shared = {
    now: Date.now(),
    streams: 0,
    waiting: new Waiting(),
    connections,
    sweepMs,
  };
  const sweep = setInterval(() => {
    shared.now = Date.now();
    for (const connection of connections.keys()) connection.tick(shared.now);
  }, sweepMs);
  let closing = false;
  const accepting = (async () => {
    for (;;) {
      let conn: Deno.TcpConn;
      try {
        conn = await listener.accept() as Deno.TcpConn;
      } catch (error) {
        if (closing || error instanceof Deno.errors.BadResource) return;
        options.onError?.(error); // e.g. out of file descriptors: try again shortly
        await new Promise((r) => setTimeout(r, 50));
        continue;
      }
      if (connections.size >= settings.maxConnections) {
        conn.write(overCapacity).catch(() => {}).finally(() => {
          try {
            conn.close();
          } catch { /* already closed */ }
        });
        continue;
      }
      try {
        conn.setNoDelay(true);
      } catch { /* not TCP */ }
      shared.now = Date.now();
      const connection = new Connection(conn, settings, shared);
      connections.set(
        connection,
        connection.run().catch((error) => options.onError?.(error)).finally(() =>
          connections.delete(connection)
        ),
      );
    }
  })();
  return {
    port: (listener.addr as Deno.NetAddr).port,
    async close(graceMs) {
      closing = true;
      try {
        listener.close();
      } catch { /* already closed */ }
      await accepting;
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        Promise.all([...connections.keys()].map((c) => c.drain())),
        new Promise((r) => timer = setTimeout(r, graceMs)),
      ]);
      clearTimeout(timer);
      for (const c of connections.keys()) c.close();
      // The sweep closes, within a second, a socket whose peer does not take what is queued.
      await Promise.all(connections.values());
      clearInterval(sweep);
    },
  };
}
