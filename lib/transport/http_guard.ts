/**
 * `Deno.serve` behind a guard that bounds time, connections and memory, for the HTTP/1.1 listeners
 * (the gateway, and each service's Connect port).
 *
 * Why: `Deno.serve` has no timeouts at all (denoland/deno#3515, open since 2019): a client that
 * sends a request line and one header and then nothing holds its connection forever, and 2,000 of
 * them were all still open after 30 s here. Deno's `node:http` server ignores `headersTimeout` as
 * well. So the public port is a plain `Deno.listen` socket; each connection is relayed to the real
 * `Deno.serve` on a loopback port, and the relay follows the HTTP/1.1 framing of what the client
 * sends (request heads and `Content-Length` bodies) to enforce:
 *
 * - `headersTimeoutMs` (10 s): a connection must complete its first request head within this time
 *   of being accepted, so that one which never sends a byte is closed as soon as a slow one; a later
 *   head of a keep-alive connection has the same time from its first byte to its end;
 * - a minimum body rate, as Kestrel's MinRequestBodyDataRate with its defaults: once a body has
 *   taken `bodyGraceMs` (5 s), it must have come at `minBodyBytesPerSecond` (240) or more, averaged
 *   since its head ended, else the connection is closed. A stalled body goes after 5 to 6 s, and
 *   a slow one that keeps the rate is never cut. There is no total time: it would cut slow honest
 *   uploads and bound nothing, since a client cut at it connects again and holds as much; the
 *   rate is what holding a connection, and the budget its handler took for the body, costs (a
 *   stall was free for 30 s with the total this replaces);
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
 * The handler's `info.remoteAddr.hostname` is the client's address (the relay's own loopback
 * address is mapped back to it), as the gateway's user-code guessing limit needs.
 *
 * Only bodies of declared length: a request head with `Transfer-Encoding` is answered `411 Length
 * Required` by the guard (the listener's JSON error body, `invalid_argument`), and no byte of that
 * request reaches `Deno.serve`. Why: each chunk of a chunked body costs `Deno.serve` more than its
 * bytes (100,000 one-byte chunks took 212 MiB and 2 s in it alone; 500,000 froze the gateway for
 * ~38 s past 1 GB), inside it, where no budget sees them. Nothing is lost: every RPC is unary,
 * and stock clients (fetch, `curl -d`, oauth4webapi, connect-es) send a `Content-Length` with such
 * bodies.
 *
 * What the relay cannot follow it answers itself and closes: a head over 64 KiB (431), a
 * `Content-Length` it cannot read or two that differ (400), the HTTP/2 preface of prior knowledge
 * (closed: this listener speaks HTTP/1.1; the services' gRPC ports are HTTP/2). Passed on, such
 * input would let the rest of the connection through unchecked, as `Deno.serve` accepts what the
 * relay would not follow (heads whose lines end in a bare LF, which the relay reads as it does,
 * and `Content-Length` values of 16 digits and more). `Deno.serve` still parses every request.
 *
 * Memory: a request head is held by the guard until it is complete, so that `Deno.serve` (~18
 * KiB a connection) sees only connections that sent a whole head, never holds part of one (it
 * buffers up to 64 KiB of one, outside the budget) and never sees one the guard answers itself.
 * The held bytes are taken from the budget as a lease of the client's address (`addr:<address>`),
 * so that one address holds at most its share of the budget; a head past it gets the memory 503,
 * and its connection is closed. A head that comes whole in one read (as nearly all do) is passed
 * on without a copy. A body that does not fit the budget (`admit`) is refused the same way before
 * a byte of it is forwarded.
 *
 * Cost: a quiet connection holds a 4 KiB read buffer each way (32 MiB at 4,096 connections), one
 * that streams a 64 KiB one while it does; the relay cost ~14 µs of CPU per request here (a
 * constant handler: 132,000 req/s without it, 45,500 with it, on 2 cores). Eviction costs O(1)
 * amortized and no scan: each connection has a place in two linked lists, the listener's and its
 * address's, least recently active first; it goes to the back at its accept and when an answer to
 * it starts (a few pointer writes a request), and leaves when it is closed. An eviction takes the
 * first idle one from the front; the busy ones it meets before it are taken off too, so that no
 * eviction meets them again, and come back when an answer starts. The relay does not follow
 * responses (that would double its work per request), so "between requests" means: the last
 * request was whole, its answer has started and nothing is being written to the client. An
 * answer written in pieces with pauses between them could be taken for idle in a pause; the
 * answers here are small and written at once.
 *
 * @module
 */

import * as v from "valibot";
import type { MemoryBudget } from "../platform/mod.ts";
import { concat } from "./bytes.ts";
import { positiveInt, smallRequestBytes } from "../platform/mod.ts";

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
  /** The process's memory budget, which heads held by the guard are taken from. */
  budget?: MemoryBudget;
  /**
   * Whether a request body of the declared length may come in now. When it may not, the guard
   * answers 503 with `Retry-After` itself and closes the connection, before a byte of the body
   * reaches `Deno.serve`. (The handler's refusal comes too late for a body: by the time its early
   * answer arrives, loopback has carried megabytes of the body into Deno.serve's socket, and a
   * flood of 4 MB bodies refused that way kept a service's CPU busy copying them.)
   */
  admit?: (contentLength: number) => boolean;
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
  /** Stops accepting, lets requests in flight finish (as `Deno.serve`'s shutdown does), closes. */
  shutdown(): Promise<void>;
}

const maxHeadBytes = 64 * 1024;
/**
 * After an answer that ends the connection while the client may still be sending its request
 * (a refusal of the guard's, or an early answer of the handler's, say a 503 before the body is
 * read), the guard stops writing and reads on, discarding, for up to this long and this many bytes
 * before it closes (nginx's lingering close). Closing at once with unread input makes the kernel
 * reset the connection, and a client still sending may lose the answer to the reset.
 */
const lingerMs = 2000;
const lingerBytes = 8 * 1024 * 1024;
const CR = 13;
const LF = 10;
const latin1 = new TextDecoder("latin1");

const enum State {
  /** Between requests, or inside a request head. */
  Head,
  /** Inside a body of known length. */
  Body,
  /** A request the guard answers itself (see {@link RequestFraming.refusal}): nothing more. */
  Refused,
}

/** Why the guard answers a request itself instead of passing it on. */
export type Refusal = "length-required" | "bad-request" | "head-too-large";

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
    `HTTP/1.1 ${status}\r\ncontent-type: application/json\r\n${retry}connection: close\r\n` +
      `content-length: ${body.length}\r\n\r\n`,
  );
  return concat([head, body]);
}

/** The guard's answers: the 503s (past a cap, past the budget) and the requests it refuses. */
function answers(
  errorBody: ErrorBody,
): Record<"connections" | "address" | "memory" | Refusal, Uint8Array> {
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
      "The request could not be read: a malformed Content-Length, or not HTTP/1.1",
      errorBody,
    ),
    "head-too-large": answer(
      "431 Request Header Fields Too Large",
      "invalid_argument",
      "The request head is over 64 KiB",
      errorBody,
    ),
  };
}

const h2Preface = new TextEncoder().encode("PRI * HTTP/2.0");

/**
 * Follows the framing of the bytes a client sends, request after request, and says when each
 * deadline starts. Exported for its tests.
 */
export class RequestFraming {
  state: State = State.Head;
  /** Bytes of the current head seen so far. */
  #head: Uint8Array[] = [];
  #headBytes = 0;
  /** How the bytes so far end: 1 after LF, 2 after LF CR (a head ends at LF [CR] LF). */
  #tail = 0;
  /** The current body's length, and how much of it is still to come. */
  #length = 0;
  #remaining = 0;
  /** Requests whose last byte was seen. */
  completed = 0;
  /** The largest `Content-Length` among the heads that ended since the caller last reset it. */
  declared = 0;
  /** Set when a head is one the guard answers itself; nothing more is followed then. */
  refusal: Refusal | undefined;
  /** Where in the bytes last fed the head still incomplete began (0: in earlier bytes). */
  headStart = 0;
  /**
   * The path of the request-target of the last head that was refused or declared a body (one the
   * caller may refuse for want of budget), "" when unknown: read only to shape a refusal, so
   * taken only from those heads.
   */
  path = "";

  /** Which deadline applies: the first head (from the accept), between requests, a head, a body. */
  get phase(): Phase {
    if (this.state === State.Body) return "body";
    if (this.completed === 0) return "first";
    return this.#headBytes === 0 ? "idle" : "head";
  }

  /** Bytes of the current body seen so far. */
  get bodyReceived(): number {
    return this.#length - this.#remaining;
  }

  /** Feeds bytes from the client, in order. */
  feed(bytes: Uint8Array): void {
    this.headStart = 0;
    let i = 0;
    while (i < bytes.length) {
      if (this.state === State.Head) i = this.#feedHead(bytes, i);
      else if (this.state === State.Body) {
        const n = Math.min(this.#remaining, bytes.length - i);
        this.#remaining -= n;
        i += n;
        if (this.#remaining === 0) this.#complete();
      } else return;
    }
  }

  #feedHead(bytes: Uint8Array, start: number): number {
    // The head ends at an empty line. Lines end in CRLF or, as Deno.serve also reads them, a bare
    // LF; #tail keeps how the previous bytes ended.
    let tail = this.#tail;
    let end = -1;
    for (let i = start; i < bytes.length; i++) {
      const b = bytes[i];
      if (b === LF) {
        if (tail !== 0) {
          end = i + 1;
          break;
        }
        tail = 1;
      } else tail = b === CR && tail === 1 ? 2 : 0;
    }
    const stop = end === -1 ? bytes.length : end;
    if (this.#headBytes === 0) {
      // Blank lines before a request line are allowed (RFC 9112 2.2); they do not start a head.
      let s = start;
      while (s < stop && (bytes[s] === CR || bytes[s] === LF)) s++;
      if (s === stop) {
        this.#tail = 0;
        return stop;
      }
      if (s > start) return s;
      this.headStart = start;
    }
    this.#head.push(bytes.slice(start, stop));
    this.#headBytes += stop - start;
    this.#tail = tail;
    if (end === -1) {
      if (this.#headBytes > maxHeadBytes) {
        this.#refuse("head-too-large", latin1.decode(this.#head[0]!.subarray(0, 8192)));
      }
      return stop;
    }
    this.#endHead();
    return stop;
  }

  #endHead(): void {
    const head = latin1.decode(concat(this.#head));
    this.#head = [];
    this.#headBytes = 0;
    this.#tail = 0;
    if (head.startsWith("PRI * HTTP/2.0")) return this.#refuse("bad-request", head);
    let length: number | undefined;
    for (let at = head.indexOf("\n") + 1; at < head.length;) {
      let next = head.indexOf("\n", at);
      if (next === -1) next = head.length;
      const colon = head.indexOf(":", at);
      if (colon > at && colon < next) {
        const name = head.slice(at, colon).trim().toLowerCase();
        if (name === "transfer-encoding") return this.#refuse("length-required", head);
        if (name === "content-length") {
          const value = head.slice(colon + 1, next).trim();
          const n = Number(value);
          if (!/^\d+$/.test(value) || n > Number.MAX_SAFE_INTEGER) {
            return this.#refuse("bad-request", head);
          }
          if (length !== undefined && length !== n) return this.#refuse("bad-request", head);
          length = n;
        }
      }
      at = next + 1;
    }
    if (length !== undefined && length > 0) {
      this.path = pathOf(head);
      this.state = State.Body;
      this.#length = this.#remaining = length;
      if (length > this.declared) this.declared = length;
    } else this.#complete();
  }

  #complete(): void {
    this.state = State.Head;
    this.#length = this.#remaining = 0;
    this.completed++;
  }

  #refuse(refusal: Refusal, head: string): void {
    this.path = pathOf(head);
    this.state = State.Refused;
    this.refusal = refusal;
    this.#head = [];
  }
}

/**
 * The path of a head's request-target (origin form, or absolute form), without its query; "" when
 * the request line is not there or not one.
 */
function pathOf(head: string): string {
  const start = head.indexOf(" ") + 1;
  const end = head.indexOf(" ", start);
  if (start === 0 || end === -1 || head.lastIndexOf("\n", end) !== -1) return "";
  const target = head.slice(start, end);
  if (target.startsWith("/")) return target.split("?", 1)[0]!;
  try {
    return new URL(target).pathname;
  } catch {
    return "";
  }
}

/** Which deadline a connection is under. */
type Deadline = "headers" | "body" | "idle" | "write";

/** Where a client is in its requests. */
export type Phase = "first" | "idle" | "head" | "body";

const deadlineOf: Record<Exclude<Phase, "body">, Exclude<Deadline, "body" | "write">> = {
  first: "headers",
  head: "headers",
  idle: "idle",
};

interface Guarded {
  client: Deno.TcpConn;
  framing: RequestFraming;
  /** The framing's phase when `since` was set. */
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
  /** `framing.completed` when the server last sent bytes: the requests whose answer started. */
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
  return g.phase === "idle" && g.answered === g.framing.completed;
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

/** Starts `handler` on `Deno.serve` behind the guard. */
export function serveGuarded(options: GuardOptions, handler: Deno.ServeHandler): GuardedServer {
  const maxConnections = options.maxConnections ?? 4096;
  const maxPerAddress = options.maxConnectionsPerAddress ?? Math.ceil(maxConnections / 2);
  const refused = answers(options.errorBody ?? gatewayErrorBody);
  // The answers in another shape, by path: built once for each shape.
  const answersBy = new Map<ErrorBody, ReturnType<typeof answers>>();
  const refusedFor = (path: string) => {
    const shape = path === "" ? undefined : options.errorBodyFor?.(path);
    if (shape === undefined) return refused;
    let shaped = answersBy.get(shape);
    if (!shaped) answersBy.set(shape, shaped = answers(shape));
    return shaped;
  };
  const limits = {
    headers: options.headersTimeoutMs ?? 10_000,
    idle: options.idleTimeoutMs ?? 75_000,
    write: options.writeTimeoutMs ?? 30_000,
  };
  const bodyGraceMs = options.bodyGraceMs ?? 5_000;
  const minBodyRate = options.minBodyBytesPerSecond ?? 240;
  // Which client address each relayed connection stands for, by the relay's local port (the
  // inner server's peer port), so that the handler's `info.remoteAddr` is the client's address.
  const clientOfPort = new Map<number, string>();
  const inner = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    (req, info) => {
      const client = clientOfPort.get(info.remoteAddr.port);
      return handler(
        req,
        client === undefined
          ? info
          : { ...info, remoteAddr: { ...info.remoteAddr, hostname: client } },
      );
    },
  );
  const upstream = { hostname: "127.0.0.1", port: inner.addr.port, transport: "tcp" as const };
  const listener = Deno.listen({ hostname: options.hostname, port: options.port });
  const open = new Set<Guarded>();
  const idle = new IdleList();
  const peers = new Map<string, Peer>();
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
      if (g.phase === "body") {
        // The body's average rate since its head ended, once it is past its grace. Bytes the relay
        // has not read because Deno.serve is not reading count as not come: the socket buffers
        // between them take over 100 KiB first, minutes' worth at the rate asked.
        const elapsed = now - g.since;
        if (elapsed > bodyGraceMs && g.framing.bodyReceived * 1000 < minBodyRate * elapsed) {
          g.close("body");
        }
        continue;
      }
      const deadline = deadlineOf[g.phase];
      if (now - g.since > limits[deadline]) g.close(deadline);
    }
  }, Math.min(1000, ...[...Object.values(limits), bodyGraceMs].map((ms) => Math.max(10, ms / 4))));
  Deno.unrefTimer(sweep);

  async function relay(client: Deno.TcpConn, address: string): Promise<void> {
    let server: Deno.TcpConn | undefined;
    let closed = false;
    let turnedAway = false;
    // A head is held here until it is complete, so that Deno.serve (~18 KiB a connection) sees
    // only connections that sent a whole head, never holds part of one, and never sees one the
    // guard answers itself. Its bytes are taken from the budget, as bytes of the client's
    // address, which may hold at most its share.
    let held: Uint8Array[] = [];
    const lease = options.budget?.take(0, [`addr:${address}`]);
    let peer = peers.get(address);
    if (!peer) peers.set(address, peer = { count: 0, idle: new IdleList() });
    peer.count++;
    const g: Guarded = {
      client,
      framing: new RequestFraming(),
      phase: "first",
      since: performance.now(),
      writingSince: undefined,
      heard: false,
      answered: 0,
      dropped: false,
      lingering: undefined,
      linger() {
        if (closed || g.lingering !== undefined) return;
        g.lingering = performance.now();
        idle.remove(inListener);
        peer.idle.remove(inPeer);
        held = [];
        lease?.shrink(lease.bytes);
        try {
          server?.close();
        } catch { /* closed */ }
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
        held = [];
        lease?.release();
        try {
          client.close();
        } catch { /* closed */ }
        try {
          server?.close();
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
    const toClient = async (server: Deno.TcpConn) => {
      const reader = new Reader(server);
      try {
        for (;;) {
          const bytes = await reader.read();
          if (bytes === null) break;
          g.writingSince = performance.now();
          await writeAll(client, bytes);
          g.writingSince = undefined;
          if (g.phase === "idle") g.since = performance.now();
          if (g.answered !== g.framing.completed || g.dropped) {
            // An answer started (or an eviction took it off its idle lists while busy): it is
            // the most recently active now.
            g.answered = g.framing.completed;
            g.dropped = false;
            toBack();
          }
        }
      } finally {
        reader.release();
      }
    };
    const fromClient = async (reader: Reader) => {
      let discarded = 0;
      let serverGone = false;
      for (let first = true;;) {
        const bytes = await reader.read();
        if (bytes === null) break;
        if (g.lingering !== undefined || serverGone) {
          // Answered: what the client still sends is read and dropped, up to a bound.
          discarded += bytes.length;
          if (discarded > lingerBytes) return;
          continue;
        }
        if (first && bytes.length >= 4) {
          first = false;
          if (h2Preface.every((b, i) => i >= bytes.length || bytes[i] === b)) return;
        }
        g.framing.declared = 0;
        g.framing.feed(bytes);
        const refusal = g.framing.refusal;
        if (
          refusal !== undefined ||
          (g.framing.declared > 0 && options.admit && !options.admit(g.framing.declared))
        ) {
          // Answered here: no byte of this request goes on. An answer of an earlier request on
          // the connection still being written is cut (only pipelining clients can meet that).
          turnedAway = true;
          const answer = refusedFor(g.framing.path)[refusal ?? "memory"];
          await writeAll(client, answer).catch(() => {});
          g.linger();
          continue;
        }
        // A deadline starts when its part starts: the first head at the accept, a later head at
        // its first byte, the body at the end of the head; between requests, each byte restarts
        // idle.
        const phase = g.framing.phase;
        if (phase !== g.phase || phase === "idle") {
          g.phase = phase;
          g.since = performance.now();
        }
        if (closed) return;
        if (!server) g.heard = true;
        if (phase === "first" || phase === "head") {
          // The bytes end inside a head: what came before it goes on, the head waits for its end.
          const from = server ? g.framing.headStart : 0;
          if (from > 0) await writeAll(server!, bytes.subarray(0, from));
          const more = bytes.length - from;
          if (lease && !lease.grow(more, lease.bytes + more <= smallRequestBytes)) {
            turnedAway = true;
            await writeAll(client, refused.memory).catch(() => {});
            g.linger();
            continue;
          }
          held.push(bytes.slice(from));
          continue;
        }
        let out = bytes;
        if (held.length > 0) {
          held.push(bytes);
          out = concat(held);
          held = [];
          lease?.shrink(lease.bytes);
        }
        if (!server) {
          server = await Deno.connect(upstream);
          const relayPort = (server.localAddr as Deno.NetAddr).port;
          clientOfPort.set(relayPort, address);
          const forget = () => clientOfPort.delete(relayPort);
          if (closed || g.lingering !== undefined) {
            forget();
            return;
          }
          server.setNoDelay(true);
          // Deno.serve closed: between requests nothing more is coming, else the client may
          // still be sending a request it answered early.
          toClient(server).catch(() => {}).finally(() => {
            forget();
            if (g.lingering === undefined) g.phase === "idle" ? g.close() : g.linger();
          });
        }
        try {
          await writeAll(server, out);
        } catch {
          // Deno.serve answered early and closed (a refusal before the body was read): its
          // answer is on its way to the client, which lingers on it.
          serverGone = true;
        }
      }
      try {
        await server?.closeWrite();
      } catch { /* closed */ }
    };
    const reader = new Reader(client);
    try {
      client.setNoDelay(true);
      await fromClient(reader);
    } catch {
      /* reset */
    } finally {
      reader.release();
    }
    // Without a server (or refused, or lingering), the client's end is the end; else the
    // server's end is.
    if (!server || turnedAway || g.lingering !== undefined) g.close();
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
      relay(client, address).catch(() => {});
    }
  })().catch(() => {});

  const addr = listener.addr as Deno.NetAddr;
  options.onListen?.(addr);
  return {
    addr,
    get connections() {
      return open.size;
    },
    closedBy,
    async shutdown() {
      try {
        listener.close();
      } catch { /* closed */ }
      await accepting;
      await inner.shutdown();
      // Deno.serve has answered every request and closes its connections; let the relays pass
      // the last answers on (at most a second) before closing what is left.
      for (let i = 0; i < 100 && open.size > 0; i++) await new Promise((r) => setTimeout(r, 10));
      clearInterval(sweep);
      for (const g of open) g.close();
    },
  };
}
