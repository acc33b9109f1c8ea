/**
 * The HTTP/1.1 listeners (the gateway, and each service's Connect port): a `Deno.listen` socket
 * whose connections this module reads and answers itself, request by request, with `handler`
 * (a `Deno.ServeHandler`), under deadlines and caps that bound time, connections and memory.
 *
 * Why not `Deno.serve`: it has no timeouts at all (denoland/deno#3515, open since 2019): a client
 * that sends a request line and one header and then nothing holds its connection forever, and
 * 2,000 of them were all still open after 30 s here. Deno's `node:http` server ignores
 * `headersTimeout` as well. This module was first a relay in front of `Deno.serve` on a loopback
 * port, following the framing of what the client sent; reading the requests here instead takes
 * that hop (two socket writes and two reads a request, and `Deno.serve`'s own parse) off every
 * request (the README's "What each change saved": the gateway's CPU a request fell by 0.011 to
 * 0.171 ms, by operation, in two runs of `bench:compare`). The limits:
 *
 * - `headersTimeoutMs` (10 s): a connection must complete its first request head within this time
 *   of being accepted, so that one which never sends a byte is closed as soon as a slow one; a later
 *   head of a keep-alive connection has the same time from its first byte to its end;
 * - a minimum body rate, as Kestrel's MinRequestBodyDataRate with its defaults: once a body has
 *   taken `bodyGraceMs` (5 s), it must have come at `minBodyBytesPerSecond` (240) or more, averaged
 *   since its head ended, else the connection is closed. A stalled body goes after 5 to 6 s, and
 *   a slow one that keeps the rate is never cut. There is no total time: it would cut slow honest
 *   uploads and bound nothing, since a client cut at it connects again and holds as much; the
 *   rate is what holding a connection, and the budget its body takes, costs;
 * - `idleTimeoutMs` (75 s, longer than the 60 s of common proxies in front, so that a proxy never
 *   reuses a connection the guard is closing): no byte in either direction between requests;
 * - `writeTimeoutMs` (30 s): a response the client does not read;
 * - `maxConnections` (4096): at the cap, the connection idle the longest (one that never sent a
 *   byte, or one between requests, least recently active first) is closed to make room, so that
 *   thousands of idle connections never keep a new client out; only when no connection is idle does
 *   the new one get a 503 with `Retry-After` and the JSON error body, and is closed;
 * - `maxConnectionsPerAddress` (half of `maxConnections`, 2048): the same for the connections from
 *   one client address, whose own longest-idle connection goes first; past it, the 503. Why half:
 *   a load balancer, an ingress or a sidecar in front is one address for all of its users, so the
 *   cap must leave it more requests in flight than a process serves within its deadlines (its idle
 *   pooled connections are closed for its new ones, never counted against it), while one address,
 *   whatever it sends, still leaves half of the connections to everyone else.
 *
 * Requests: read as ./http1.ts says, strictly (one way to frame each, or a refusal). The handler
 * gets a request once its head and its whole body are here, so a body cut short or stalled never
 * reaches it; requests of a connection are handled one at a time, in order (a pipelining client's
 * next request waits in the socket, not here); the answer is written in one write, with
 * `content-length` (bodies are small, so none is streamed; nor compressed). A request the parser
 * refuses is answered here with the listener's JSON error body and the connection closed: a head
 * with `Transfer-Encoding` `411 Length Required` (each chunk of a chunked body cost `Deno.serve`
 * more than its bytes, 100,000 one-byte chunks 212 MiB and 2 s; every RPC is unary, and stock
 * clients send a `Content-Length` with such bodies), a request line over 64 KiB 414, a head over
 * 64 KiB or 100 fields 431, one that cannot be read, or an HTTP/1.1 head without exactly one
 * `Host`, 400; the HTTP/2 preface of prior knowledge is closed (the services' gRPC ports are
 * HTTP/2). A body over `maxBodyBytes` is not read:
 * its handler answers 413 from `Content-Length`, and the connection ends after the answer.
 *
 * Memory: a request head, and a body until its request is handled, are held here, taken from the
 * budget as a lease of the client's address (`addr:<address>`), so that one address holds at most
 * its share of the budget; past it, the memory 503, and the connection is closed. A body that does
 * not fit the budget (`admit`) is refused the same way before a byte of it is read.
 *
 * After an answer that ends the connection while the client may still be sending (a refusal, or
 * an answer to a request whose body was not read), the listener stops writing and reads and drops
 * what comes for up to {@link lingerMs} and {@link lingerBytes} before it closes (nginx's lingering
 * close): closing at once with unread input makes the kernel reset the connection, and a client
 * still sending may lose the answer to the reset.
 *
 * Cost: a quiet connection holds a 4 KiB read buffer, one that streams a 64 KiB one while it does.
 * Eviction costs O(1) amortized and no scan: each connection has a place in two linked lists, the
 * listener's and its address's, least recently active first; it goes to the back at its accept and
 * when an answer to it starts (a few pointer writes a request), and leaves when it is closed. An
 * eviction takes the first idle one from the front; the busy ones it meets before it are taken off
 * too, so that no eviction meets them again, and come back when an answer starts.
 *
 * What a handler does not get that `Deno.serve` gave it: `req.signal` does not abort when the
 * client goes away (the request was whole; its handler's own deadlines bound it), and
 * `info.completed` is resolved from the start. The request is a ./guard_messages.ts `GuardRequest`
 * (a `Request` made from the checked head and the body read here, without `new Request`'s cost).
 *
 * @module
 */

import * as v from "valibot";
import type { MemoryBudget } from "../platform/mod.ts";
import { concat } from "./bytes.ts";
import { FieldHeaders, GuardRequest, requestMethod } from "./guard_messages.ts";
import { positiveInt, smallRequestBytes } from "../platform/mod.ts";
import {
  continueBytes,
  pathOf,
  type Phase,
  type Refusal,
  type RequestHead,
  RequestParser,
  responseBytes,
} from "./http1.ts";

export type { Refusal } from "./http1.ts";

/** The settings of a guarded listener that a deployment may want to change. */
export const guardSettings = {
  /** Most connections open at once on the listener. */
  HTTP_MAX_CONNECTIONS: positiveInt(4096),
  /** Most connections open at once from one client address (default: half of the above). */
  HTTP_MAX_CONNECTIONS_PER_ADDRESS: v.optional(
    v.pipe(
      v.string(),
      v.regex(/^[1-9]\d{0,8}$/, "must be a positive integer"),
      v.transform(Number),
    ),
  ),
  /** Time without a byte in either direction before a connection is closed. */
  HTTP_IDLE_TIMEOUT_MS: positiveInt(75_000),
};

/** The guard settings, parsed. */
export type GuardConfig = v.InferOutput<v.ObjectSchema<typeof guardSettings, undefined>>;

/** Options of {@link serveGuarded}. */
export interface GuardOptions {
  /** Public port (0 = any free port). */
  port: number;
  /** Public address. */
  hostname: string;
  /** Most connections open at once (default 4,096). */
  maxConnections?: number;
  /** Most connections open at once from one address (default: half of `maxConnections`). */
  maxConnectionsPerAddress?: number | undefined;
  /**
   * Time from a connection's accept to the end of its first request head, and from the first
   * byte of a later head to its end (default 10 s).
   */
  headersTimeoutMs?: number;
  /** Time a body may take before the minimum rate applies to it (default 5 s). */
  bodyGraceMs?: number;
  /** Least average rate of a body past its grace, in bytes a second (default 240; 0: none). */
  minBodyBytesPerSecond?: number;
  /** Time without a byte in either direction before the connection is closed (default 75 s). */
  idleTimeoutMs?: number;
  /** Time a response may wait for the client to read it (default 30 s). */
  writeTimeoutMs?: number;
  /** Called once the public port listens. */
  onListen?: (addr: Deno.NetAddr) => void;
  /** The process's memory budget, which the heads and bodies held here are taken from. */
  budget?: MemoryBudget;
  /**
   * Whether a request body of the declared length may come in now. When it may not, the listener
   * answers 503 with `Retry-After` itself and closes the connection, before a byte of the body is
   * read. (A flood of 4 MB bodies refused only after they were read kept a service's CPU busy
   * copying them.)
   */
  admit?: (contentLength: number) => boolean;
  /**
   * The largest body read before its request is handled (default: no limit). A request that
   * declares more is handled without its body (its handler answers 413 from `Content-Length`),
   * and the connection ends after the answer.
   */
  maxBodyBytes?: number;
  /** The body of the guard's own answers (default: the gateway's shape). */
  errorBody?: ErrorBody;
  /**
   * The body of the guard's answer to a request of this path, when it is not `errorBody` (the
   * OAuth endpoints answer in RFC 6749's shape). Called only for a request the guard answers.
   */
  errorBodyFor?: (path: string) => ErrorBody | undefined;
}

/** Why connections were closed or turned away by the guard, counted since the start. */
export interface ClosedBy {
  /** A head (or a first head, counted from the accept) past `headersTimeoutMs`. */
  headers: number;
  /** A body below the minimum rate past its grace. */
  body: number;
  /** Idle past `idleTimeoutMs`. */
  idle: number;
  /** A response not read within `writeTimeoutMs`. */
  write: number;
  /** Idle, closed to make room for a new connection at a cap. */
  evicted: number;
  /** New connections refused at `maxConnections`, no connection being idle. */
  cap: number;
  /** New connections refused at `maxConnectionsPerAddress`, none of the address's being idle. */
  addressCap: number;
}

/** A running guarded server. */
export interface GuardedServer {
  /** The public address. */
  addr: Deno.NetAddr;
  /** Connections open now. */
  readonly connections: number;
  /** Connections closed by a timeout, evicted, and refused at a cap, since the start. */
  readonly closedBy: ClosedBy;
  /** Stops accepting, lets requests in flight finish (answered with `connection: close`), closes. */
  shutdown(): Promise<void>;
}

/** How long, and how many bytes, a lingering close reads and drops (see the module's header). */
const lingerMs = 2000;
const lingerBytes = 8 * 1024 * 1024;
/** The JSON body of an error answer: the gateway's shape, or the Connect protocol's. */
export type ErrorBody = (code: string, message: string) => string;

/** The gateway's error body, `{"error": {"code", "message", "details"}}`. */
export const gatewayErrorBody: ErrorBody = (code, message) =>
  JSON.stringify({ error: { code, message, details: [] } });

/** The Connect protocol's error body, `{"code", "message"}`. */
export const connectErrorBody: ErrorBody = (code, message) => JSON.stringify({ code, message });

/** A whole answer of the guard's own, with `connection: close` (the guard closes after it). */
function answer(status: string, code: string, message: string, errorBody: ErrorBody): Uint8Array {
  const body = new TextEncoder().encode(errorBody(code, message));
  const retry = status.startsWith("503") ? "retry-after: 1\r\n" : "";
  const head = new TextEncoder().encode(
    `HTTP/1.1 ${status}\r\ncontent-type: application/json\r\ncache-control: no-store\r\n` +
      `${retry}connection: close\r\n` +
      `content-length: ${body.length}\r\n\r\n`,
  );
  return concat([head, body]);
}

/** The guard's answers: the 503s (past a cap, past the budget) and the requests it refuses. */
function answers(
  errorBody: ErrorBody,
): Record<"connections" | "address" | "memory" | "method" | Refusal, Uint8Array> {
  const unavailable = (message: string) =>
    answer("503 Service Unavailable", "unavailable", message, errorBody);
  return {
    connections: unavailable("The server has too many connections; retry later"),
    address: unavailable("The server has too many connections from your address; retry later"),
    memory: unavailable("The server is at its memory budget; retry later"),
    "length-required": answer(
      "411 Length Required",
      "invalid_argument",
      "A request body needs a Content-Length; Transfer-Encoding (chunked) is not accepted",
      errorBody,
    ),
    "bad-request": answer(
      "400 Bad Request",
      "invalid_argument",
      "The request could not be read as HTTP/1.1: a malformed request line (a target with a " +
        "space, a control or a non-ASCII byte: percent-encode it), a malformed header field " +
        "(a control character in its value), no Host or two, or a malformed Content-Length",
      errorBody,
    ),
    // A well-formed request of a method no server of this kind serves (RFC 9110 15.6.2).
    method: answer(
      "501 Not Implemented",
      "unimplemented",
      "CONNECT, TRACE and TRACK are not served here",
      errorBody,
    ),
    "head-too-large": answer(
      "431 Request Header Fields Too Large",
      "invalid_argument",
      "The request head is over 64 KiB or 100 fields",
      errorBody,
    ),
    "uri-too-long": answer(
      "414 URI Too Long",
      "invalid_argument",
      "The request line is over 64 KiB",
      errorBody,
    ),
  };
}

/** Which deadline a connection is under. */
type Deadline = "headers" | "body" | "idle" | "write";

const deadlineOf: Record<Exclude<Phase, "body">, Exclude<Deadline, "body" | "write">> = {
  first: "headers",
  head: "headers",
  idle: "idle",
};

interface Guarded {
  client: Deno.TcpConn;
  parser: RequestParser;
  /** The parser's phase when `since` was set. */
  phase: Phase;
  /**
   * When the current head or body started (the first head: at the accept), or when the last byte
   * moved (between requests).
   */
  since: number;
  /** Set while a write to the client is pending. */
  writingSince: number | undefined;
  /** Whether the client has sent a byte. */
  heard: boolean;
  /** Set while the handler has a request of it. */
  handling: boolean;
  /** `parser.completed` when an answer last started: the requests whose answer started. */
  answered: number;
  /** Set when an eviction found it busy and took it off the idle lists. */
  dropped: boolean;
  /** Since when it lingers: answered, writing no more, discarding what the client still sends. */
  lingering: number | undefined;
  /** Ends the connection after an answer while the client may still be sending: lingers. */
  linger(): void;
  close(reason?: keyof ClosedBy): void;
}

/** Whether a connection has no request in flight: it never sent a byte, or is between requests. */
function isIdle(g: Guarded): boolean {
  if (g.writingSince !== undefined) return false;
  if (g.phase === "first") return !g.heard;
  return !g.handling && g.phase === "idle" && g.answered === g.parser.completed &&
    g.parser.buffered === 0;
}

/** A connection's place in an {@link IdleList}. */
interface Link {
  g: Guarded;
  prev: Link | undefined;
  next: Link | undefined;
  listed: boolean;
}

/**
 * Connections that may be idle, least recently active first: each goes to the back at its accept
 * and when an answer to it starts (a few pointer writes, once a request). {@link take} takes the
 * busy ones it meets off the list, so that it never meets them twice; they come back when they
 * are idle again.
 */
class IdleList {
  #first: Link | undefined;
  #last: Link | undefined;

  /** A new place in this list for `g`, not yet in it. */
  link(g: Guarded): Link {
    return { g, prev: undefined, next: undefined, listed: false };
  }

  /** Puts a connection at the back (the most recently active). */
  toBack(link: Link): void {
    if (link === this.#last) return;
    if (link.listed) this.remove(link);
    link.listed = true;
    link.prev = this.#last;
    if (this.#last) this.#last.next = link;
    else this.#first = link;
    this.#last = link;
  }

  remove(link: Link): void {
    if (!link.listed) return;
    link.listed = false;
    if (link.prev) link.prev.next = link.next;
    else this.#first = link.next;
    if (link.next) link.next.prev = link.prev;
    else this.#last = link.prev;
    link.prev = link.next = undefined;
  }

  /** Takes off the connection idle the longest, or undefined when none is idle. */
  take(): Guarded | undefined {
    for (let link = this.#first; link; link = this.#first) {
      this.remove(link);
      if (isIdle(link.g)) return link.g;
      link.g.dropped = true;
    }
    return undefined;
  }
}

/** The connections from one client address. */
interface Peer {
  count: number;
  idle: IdleList;
}

/** Buffers given back by closed connections, reused instead of left to the garbage collector. */
const pools = { small: [] as Uint8Array[], large: [] as Uint8Array[] };
const smallSize = 4 * 1024;
const largeSize = 64 * 1024;

function borrow(kind: "small" | "large"): Uint8Array {
  return pools[kind].pop() ?? new Uint8Array(kind === "small" ? smallSize : largeSize);
}

function giveBack(buffer: Uint8Array): void {
  const pool = buffer.length === smallSize ? pools.small : pools.large;
  if (pool.length < 256) pool.push(buffer);
}

/**
 * Reads a connection into a small buffer while it is quiet (4 KiB held per waiting read) and a
 * large one while bytes stream (a full small read switches to 64 KiB until a read is short).
 * Buffers come from a pool: a flood of large bodies over new connections otherwise left ~128 KiB
 * of ArrayBuffers per connection for the garbage collector, which V8 collects late.
 */
class Reader {
  #small: Uint8Array | undefined = borrow("small");
  #large: Uint8Array | undefined;
  constructor(readonly conn: Deno.Conn) {}

  /** The next bytes (valid until the next call), or null at the end. */
  async read(): Promise<Uint8Array | null> {
    const buffer = this.#large ?? this.#small!;
    const n = await this.conn.read(buffer);
    if (n === null) return null;
    if (n === buffer.length) this.#large ??= borrow("large");
    else if (this.#large) {
      giveBack(this.#large);
      this.#large = undefined;
    }
    return buffer.subarray(0, n);
  }

  /** Gives the buffers back; call once no read is pending. */
  release(): void {
    if (this.#small) giveBack(this.#small);
    if (this.#large) giveBack(this.#large);
    this.#small = this.#large = undefined;
  }
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  if (bytes.length === 0) return;
  // Nearly always one write: no view of the bytes is made for it.
  let offset = await conn.write(bytes);
  while (offset < bytes.length) offset += await conn.write(bytes.subarray(offset));
}

const h2Preface = new TextEncoder().encode("PRI * HTTP/2.0");
const resolved = Promise.resolve();
/** A `Host` that is an authority and nothing more (no path, query, fragment or credentials). */
const authority = /^[A-Za-z0-9._~!$&'()*+,;=:\[\]%-]+$/;

/** Serves `handler` on a `Deno.listen` socket behind the guard. */
export function serveGuarded(options: GuardOptions, handler: Deno.ServeHandler): GuardedServer {
  const maxConnections = options.maxConnections ?? 4096;
  const maxPerAddress = options.maxConnectionsPerAddress ?? Math.ceil(maxConnections / 2);
  const maxBodyBytes = options.maxBodyBytes ?? Infinity;
  const defaultShape = options.errorBody ?? gatewayErrorBody;
  /** The error body of an answer to a request of `path` ("" when the path is not known). */
  const shapeFor = (path: string) =>
    (path === "" ? undefined : options.errorBodyFor?.(path)) ?? defaultShape;
  // The listener's own answers, built once for each shape.
  const answersBy = new Map<ErrorBody, ReturnType<typeof answers>>();
  const refusedFor = (path: string) => {
    const shape = shapeFor(path);
    let shaped = answersBy.get(shape);
    if (!shaped) answersBy.set(shape, shaped = answers(shape));
    return shaped;
  };
  const refused = refusedFor("");
  const limits = {
    headers: options.headersTimeoutMs ?? 10_000,
    idle: options.idleTimeoutMs ?? 75_000,
    write: options.writeTimeoutMs ?? 30_000,
  };
  const bodyGraceMs = options.bodyGraceMs ?? 5_000;
  const minBodyRate = options.minBodyBytesPerSecond ?? 240;
  const listener = Deno.listen({ hostname: options.hostname, port: options.port });
  const addr = listener.addr as Deno.NetAddr;
  // The authority of a request that names none (HTTP/1.0 without Host, or an empty Host).
  const ownAuthority = addr.hostname.includes(":")
    ? `[${addr.hostname}]:${addr.port}`
    : `${addr.hostname}:${addr.port}`;
  const open = new Set<Guarded>();
  const idle = new IdleList();
  const peers = new Map<string, Peer>();
  let stopping = false;
  const closedBy: ClosedBy = {
    headers: 0,
    body: 0,
    idle: 0,
    write: 0,
    evicted: 0,
    cap: 0,
    addressCap: 0,
  };

  const sweep = setInterval(() => {
    const now = performance.now();
    for (const g of open) {
      if (g.lingering !== undefined) {
        if (now - g.lingering > lingerMs) g.close();
        continue;
      }
      if (g.writingSince !== undefined && now - g.writingSince > limits.write) {
        g.close("write");
        continue;
      }
      if (g.handling) continue; // its handler has the request: its own deadlines apply
      if (g.phase === "body") {
        // The body's average rate since its head ended, once it is past its grace.
        const elapsed = now - g.since;
        if (elapsed > bodyGraceMs && g.parser.bodyReceived * 1000 < minBodyRate * elapsed) {
          g.close("body");
        }
        continue;
      }
      const deadline = deadlineOf[g.phase];
      if (now - g.since > limits[deadline]) g.close(deadline);
    }
  }, Math.min(1000, ...[...Object.values(limits), bodyGraceMs].map((ms) => Math.max(10, ms / 4))));
  Deno.unrefTimer(sweep);

  /** The request of `head` (and its body), or undefined when its target or fields cannot make one. */
  function requestOf(
    head: RequestHead,
    body: Uint8Array<ArrayBuffer> | null,
  ): Request | undefined {
    let url: string;
    if (head.target.charCodeAt(0) === 47 /* / */) {
      const host = head.host || ownAuthority;
      // An authority only: nothing that would move the path or add credentials.
      if (!authority.test(host)) return undefined;
      url = `http://${host}${head.target}`;
    } else if (/^https?:\/\//i.test(head.target)) url = head.target;
    else return undefined;
    // A URL Request cannot parse: not a request (a method it refuses was answered 501 before).
    const method = requestMethod(head.method);
    if (method === undefined) return undefined;
    let href: string;
    try {
      href = new URL(url).href;
    } catch {
      return undefined;
    }
    const withBody = body !== null && method !== "GET" && method !== "HEAD";
    return new GuardRequest(method, href, new FieldHeaders(head.fields), withBody ? body : null);
  }

  async function serveConnection(client: Deno.TcpConn, address: string): Promise<void> {
    let closed = false;
    // Bytes held here (a head until it is complete, a body until its request is handled) are
    // taken from the budget, as bytes of the client's address, which may hold at most its share.
    const lease = options.budget?.take(0, [`addr:${address}`]);
    let peer = peers.get(address);
    if (!peer) peers.set(address, peer = { count: 0, idle: new IdleList() });
    peer.count++;
    const parser = new RequestParser();
    const g: Guarded = {
      client,
      parser,
      phase: "first",
      since: performance.now(),
      writingSince: undefined,
      handling: false,
      heard: false,
      answered: 0,
      dropped: false,
      lingering: undefined,
      linger() {
        if (closed || g.lingering !== undefined) return;
        g.lingering = performance.now();
        idle.remove(inListener);
        peer.idle.remove(inPeer);
        lease?.shrink(lease.bytes);
        client.closeWrite().catch(() => g.close());
      },
      close(reason) {
        if (closed) return;
        closed = true;
        if (reason) closedBy[reason]++;
        open.delete(g);
        idle.remove(inListener);
        peer.idle.remove(inPeer);
        if (--peer.count === 0) peers.delete(address);
        lease?.release();
        try {
          client.close();
        } catch { /* closed */ }
      },
    };
    // Its places in the idle lists of the listener and of its address.
    const inListener = idle.link(g);
    const inPeer = peer.idle.link(g);
    const toBack = () => {
      idle.toBack(inListener);
      peer.idle.toBack(inPeer);
    };
    open.add(g);
    toBack();
    const info: Deno.ServeHandlerInfo = {
      remoteAddr: {
        transport: "tcp",
        hostname: address,
        port: (client.remoteAddr as Deno.NetAddr).port,
      },
      completed: resolved,
    };
    const reader = new Reader(client);

    const send = async (bytes: Uint8Array) => {
      g.writingSince = performance.now();
      await writeAll(client, bytes);
      g.writingSince = undefined;
    };
    /** Answers with one of the guard's own answers and lingers: nothing more is read as requests. */
    const refuse = async (bytes: Uint8Array) => {
      await send(bytes).catch(() => {});
      g.linger();
    };
    /** A deadline starts when its part starts; between requests, each byte restarts idle. */
    const track = () => {
      const phase = parser.phase;
      if (phase !== g.phase || phase === "idle") {
        g.phase = phase;
        g.since = performance.now();
      }
    };
    /** Holds `bytes` in the lease (heads and bodies not yet handled); false past the budget. */
    const hold = (bytes: number) => {
      if (!lease) return true;
      const more = bytes - lease.bytes;
      if (more <= 0) {
        lease.shrink(-more);
        return true;
      }
      return lease.grow(more, bytes <= smallRequestBytes);
    };
    let first = true;
    /** Reads more bytes into the parser; false at the end of the client's input. */
    const read = async (): Promise<boolean> => {
      parser.keep();
      const bytes = await reader.read();
      if (bytes === null || closed) return false;
      if (first && bytes.length >= 4) {
        first = false;
        // The HTTP/2 preface of prior knowledge: this listener speaks HTTP/1.1 only.
        if (h2Preface.every((b, i) => i >= bytes.length || bytes[i] === b)) return false;
      }
      g.heard = true;
      parser.push(bytes);
      return true;
    };

    /** Reads and handles requests until the connection ends; true when it should linger. */
    const serve = async (): Promise<boolean> => {
      for (;;) {
        const parsed = parser.next();
        track();
        if (parsed.kind === "more") {
          if (!hold(parser.buffered)) {
            await refuse(refusedFor("").memory);
            return true;
          }
          if (stopping && g.phase === "idle" && parser.buffered === 0) return false;
          if (!await read()) return false;
          continue;
        }
        if (parsed.kind === "refused") {
          await refuse(refusedFor(parser.path)[parsed.refusal]);
          return true;
        }
        if (parsed.kind !== "head") continue; // a body's end, read below
        const head = parsed.head;
        let body: Uint8Array<ArrayBuffer> | null = null;
        // A body over the limit is not read: its handler answers from the declared length
        // (413), and the connection ends after the answer.
        const unread = head.length > maxBodyBytes;
        if (head.length > 0 && !unread) {
          if (options.admit && !options.admit(head.length)) {
            await refuse(refusedFor(parser.path).memory);
            return true;
          }
          if (head.expectContinue && parser.buffered === 0) await send(continueBytes);
          // The body grows as it comes, in one array that doubles up to the declared length
          // (one-byte reads cost a copy each, not an object each), and holds only what came.
          let into = new Uint8Array(Math.min(head.length, 16 * 1024));
          let received = 0;
          for (;;) {
            const part = parser.next();
            if (part.kind === "end") break;
            if (part.kind === "body") {
              if (received + part.bytes.length > into.length) {
                const grown = new Uint8Array(
                  Math.min(head.length, Math.max(2 * into.length, received + part.bytes.length)),
                );
                grown.set(into.subarray(0, received));
                into = grown;
              }
              into.set(part.bytes, received);
              received += part.bytes.length;
              continue;
            }
            track();
            if (!hold(received + parser.buffered)) {
              await refuse(refusedFor(parser.path).memory);
              return true;
            }
            if (!await read()) return false;
          }
          body = into;
        }
        track();
        hold(parser.buffered);
        if (requestMethod(head.method) === undefined) {
          await refuse(refusedFor(pathOf(head.target)).method);
          return true;
        }
        const req = requestOf(head, body);
        if (!req) {
          await refuse(refusedFor(pathOf(head.target))["bad-request"]);
          return true;
        }
        g.handling = true;
        const close = head.close || unread || stopping;
        const answer = { head: head.method === "HEAD", close };
        let bytes: Uint8Array;
        try {
          bytes = await responseBytes(await handler(req, info), answer);
        } catch {
          // A handler that throws, or a response body that fails: 500, the JSON error body.
          const fault = new Response(shapeFor(pathOf(head.target))("internal", "Internal error"), {
            status: 500,
            headers: { "content-type": "application/json" },
          });
          bytes = await responseBytes(fault, answer);
        }
        g.handling = false;
        if (closed) return false;
        // An answer started: the connection is the most recently active one now.
        g.answered = parser.completed;
        g.dropped = false;
        toBack();
        await send(bytes);
        if (g.phase === "idle") g.since = performance.now();
        if (unread) {
          g.linger();
          return true;
        }
        if (close) return false;
      }
    };

    try {
      client.setNoDelay(true);
      if (await serve()) {
        // Answered while the client may still be sending: what it sends is read and dropped, up
        // to a bound, until it closes or the linger ends.
        let discarded = 0;
        for (;;) {
          const bytes = await reader.read();
          if (bytes === null || (discarded += bytes.length) > lingerBytes) break;
        }
      }
    } catch {
      /* reset, or closed by a deadline */
    } finally {
      reader.release();
      g.close();
    }
  }

  /** Closes the connection idle the longest in `list`; false when none is idle. */
  const evict = (list: IdleList) => {
    const g = list.take();
    g?.close("evicted");
    return g !== undefined;
  };

  const turnAway = (client: Deno.TcpConn, bytes: Uint8Array) => {
    writeAll(client, bytes).catch(() => {}).finally(() => {
      try {
        client.close();
      } catch { /* closed */ }
    });
  };

  const accepting = (async () => {
    for await (const client of listener) {
      const address = (client.remoteAddr as Deno.NetAddr).hostname;
      const peer = peers.get(address);
      if (peer && peer.count >= maxPerAddress && !evict(peer.idle)) {
        closedBy.addressCap++;
        turnAway(client, refused.address);
        continue;
      }
      if (open.size >= maxConnections && !evict(idle)) {
        closedBy.cap++;
        turnAway(client, refused.connections);
        continue;
      }
      serveConnection(client, address).catch(() => {});
    }
  })().catch(() => {});

  options.onListen?.(addr);
  return {
    addr,
    get connections() {
      return open.size;
    },
    closedBy,
    async shutdown() {
      stopping = true;
      try {
        listener.close();
      } catch { /* closed */ }
      await accepting;
      // Requests in flight are answered (with `connection: close`); idle connections close now.
      for (const g of open) if (isIdle(g)) g.close();
      for (let i = 0; i < 3000 && [...open].some((g) => g.handling); i++) {
        await new Promise((r) => setTimeout(r, 10));
      }
      for (let i = 0; i < 100 && open.size > 0; i++) await new Promise((r) => setTimeout(r, 10));
      clearInterval(sweep);
      for (const g of open) g.close();
    },
  };
}
