/**
 * `Deno.serve` behind a guard that bounds time and connections, for the HTTP/1.1 listeners (the
 * gateway, and each service's Connect port).
 *
 * Why: `Deno.serve` has no timeouts at all (denoland/deno#3515, open since 2019): a client that
 * sends a request line and one header and then nothing holds its connection forever, and 2,000 of
 * them were all still open after 30 s here. Deno's `node:http` server ignores `headersTimeout` as
 * well. So the public port is a plain `Deno.listen` socket; each connection is relayed to the real
 * `Deno.serve` on a loopback port, and the relay follows the HTTP/1.1 framing of what the client
 * sends (request heads, `Content-Length` and chunked bodies) to enforce:
 *
 * - `headersTimeoutMs` (10 s): from the first byte of a request head to its end;
 * - `bodyTimeoutMs` (30 s): from the end of a head to the end of its body;
 * - `idleTimeoutMs` (75 s, longer than the 60 s of common proxies in front, so that a proxy never
 *   reuses a connection the guard is closing): no byte in either direction;
 * - `writeTimeoutMs` (30 s): a response the client does not read;
 * - `maxConnections` (4096): past it, a new connection gets a 503 with `Retry-After` and the JSON
 *   error body, and is closed.
 *
 * A connection past a deadline is closed. `Deno.serve` still parses every byte (the relay never
 * decides what a request means), so input the relay cannot follow (a head over 64 KiB, a malformed
 * chunk size) is passed on as it is and answered by `Deno.serve` with a 4xx; the idle and write
 * timeouts still hold for it. The client's preface of HTTP/2 with prior knowledge is refused: this
 * listener speaks HTTP/1.1 (the services' gRPC ports are HTTP/2).
 *
 * Cost: a quiet connection holds a 4 KiB read buffer each way (32 MiB at 4,096 connections), one
 * that streams a 64 KiB one while it does; the relay cost ~14 µs of CPU per request here (a
 * constant handler: 132,000 req/s without it, 45,500 with it, on 2 cores).
 *
 * @module
 */

import * as v from "valibot";
import type { MemoryBudget } from "../platform/mod.ts";
import { concat } from "./bytes.ts";
import { positiveInt } from "../platform/mod.ts";

/** The settings of a guarded listener that a deployment may want to change. */
export const guardSettings = {
  /** Most connections open at once on the listener. */
  HTTP_MAX_CONNECTIONS: positiveInt(4096),
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
  /** Time from a request's first byte to the end of its head (default 10 s). */
  headersTimeoutMs?: number;
  /** Time from the end of a request's head to the end of its body (default 30 s). */
  bodyTimeoutMs?: number;
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
  /** The body of the guard's own 503s (default: the gateway's shape). */
  errorBody?: ErrorBody;
}

/** A running guarded server. */
export interface GuardedServer {
  /** The public address. */
  addr: Deno.NetAddr;
  /** Connections open now. */
  readonly connections: number;
  /** Connections closed by a timeout, and refused at the cap, since the start. */
  readonly closedBy: { headers: number; body: number; idle: number; write: number; cap: number };
  /** Stops accepting, lets requests in flight finish (as `Deno.serve`'s shutdown does), closes. */
  shutdown(): Promise<void>;
}

const maxHeadBytes = 64 * 1024;
const maxLineBytes = 4 * 1024;
const CR = 13;
const LF = 10;

const enum State {
  /** Between requests, or inside a request head. */
  Head,
  /** Inside a body of known length. */
  Body,
  /** Inside a chunk-size line of a chunked body. */
  ChunkLine,
  /** Inside a chunk's data (plus its closing CRLF). */
  ChunkData,
  /** Inside the trailer section of a chunked body. */
  Trailer,
  /** Input the relay cannot follow: only the idle and write timeouts apply. */
  Opaque,
}

/** The JSON body of an error answer: the gateway's shape, or the Connect protocol's. */
export type ErrorBody = (code: string, message: string) => string;

/** The gateway's error body, `{"error": {"code", "message", "details"}}`. */
export const gatewayErrorBody: ErrorBody = (code, message) =>
  JSON.stringify({ error: { code, message, details: [] } });

/** The Connect protocol's error body, `{"code", "message"}`. */
export const connectErrorBody: ErrorBody = (code, message) => JSON.stringify({ code, message });

/** The 503 a connection gets when it is past the cap or its request is past the memory budget. */
function refusal(what: "connections" | "memory", errorBody: ErrorBody): Uint8Array {
  const body = errorBody(
    "unavailable",
    what === "connections"
      ? "The server has too many connections; retry later"
      : "The server is at its memory budget; retry later",
  );
  return new TextEncoder().encode(
    "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n" +
      `connection: close\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
  );
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
  /** The last bytes of the head, to find CRLFCRLF across reads. */
  #tail = 0;
  #remaining = 0;
  #line: number[] = [];
  /** Requests whose last byte was seen. */
  completed = 0;
  /** The largest `Content-Length` among the heads that ended since the caller last reset it. */
  declared = 0;

  /** Which deadline applies: between requests, in a head, in a body, or none it can follow. */
  get phase(): Phase {
    switch (this.state) {
      case State.Head:
        return this.#headBytes === 0 ? "idle" : "head";
      case State.Opaque:
        return "opaque";
      default:
        return "body";
    }
  }

  /** Feeds bytes from the client, in order. */
  feed(bytes: Uint8Array): void {
    let i = 0;
    while (i < bytes.length) {
      switch (this.state) {
        case State.Head:
          i = this.#feedHead(bytes, i);
          break;
        case State.Body: {
          const n = Math.min(this.#remaining, bytes.length - i);
          this.#remaining -= n;
          i += n;
          if (this.#remaining === 0) this.#complete();
          break;
        }
        case State.ChunkData: {
          const n = Math.min(this.#remaining, bytes.length - i);
          this.#remaining -= n;
          i += n;
          if (this.#remaining === 0) this.state = State.ChunkLine;
          break;
        }
        case State.ChunkLine:
        case State.Trailer:
          i = this.#feedLine(bytes, i);
          break;
        case State.Opaque:
          return;
      }
    }
  }

  #feedHead(bytes: Uint8Array, start: number): number {
    // The head ends at CRLF CRLF; #tail keeps how much of it the previous bytes ended with.
    let tail = this.#tail;
    let end = -1;
    for (let i = start; i < bytes.length; i++) {
      const b = bytes[i];
      if (b === CR) tail = tail === 2 ? 3 : 1;
      else if (b === LF) {
        if (tail === 1) tail = 2;
        else if (tail === 3) {
          end = i + 1;
          break;
        } else tail = 0;
      } else tail = 0;
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
    }
    this.#head.push(bytes.slice(start, stop));
    this.#headBytes += stop - start;
    this.#tail = tail;
    if (end === -1) {
      if (this.#headBytes > maxHeadBytes) this.#opaque();
      return stop;
    }
    this.#endHead();
    return stop;
  }

  #endHead(): void {
    const head = new TextDecoder("latin1").decode(concat(this.#head));
    this.#head = [];
    this.#headBytes = 0;
    this.#tail = 0;
    if (head.startsWith("PRI * HTTP/2.0")) return this.#opaque();
    let length: number | undefined;
    let chunked = false;
    const lines = head.split("\r\n");
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i]!;
      const colon = line.indexOf(":");
      if (colon <= 0) continue;
      const name = line.slice(0, colon).trim().toLowerCase();
      const value = line.slice(colon + 1).trim();
      if (name === "content-length") {
        if (!/^\d{1,15}$/.test(value) || (length !== undefined && length !== Number(value))) {
          return this.#opaque();
        }
        length = Number(value);
      } else if (name === "transfer-encoding") {
        chunked = /(^|,)\s*chunked\s*$/i.test(value);
        if (!chunked) return this.#opaque();
      }
    }
    if (chunked) {
      if (length !== undefined) return this.#opaque(); // both: Deno.serve refuses it
      this.state = State.ChunkLine;
    } else if (length !== undefined && length > 0) {
      this.state = State.Body;
      this.#remaining = length;
      if (length > this.declared) this.declared = length;
    } else this.#complete();
  }

  #feedLine(bytes: Uint8Array, start: number): number {
    for (let i = start; i < bytes.length; i++) {
      const b = bytes[i]!;
      if (b !== LF) {
        this.#line.push(b);
        if (this.#line.length > maxLineBytes) {
          this.#opaque();
          return bytes.length;
        }
        continue;
      }
      const text = String.fromCharCode(...this.#line).replace(/\r$/, "");
      this.#line = [];
      if (this.state === State.Trailer) {
        if (text === "") this.#complete();
        return i + 1;
      }
      const size = /^([0-9a-fA-F]{1,12})[ \t]*(;.*)?$/.exec(text);
      if (!size) {
        this.#opaque();
        return bytes.length;
      }
      const n = parseInt(size[1]!, 16);
      if (n === 0) this.state = State.Trailer;
      else {
        this.state = State.ChunkData;
        this.#remaining = n + 2; // the data and its CRLF
      }
      return i + 1;
    }
    return bytes.length;
  }

  #complete(): void {
    this.state = State.Head;
    this.completed++;
  }

  #opaque(): void {
    this.state = State.Opaque;
    this.#head = [];
    this.#line = [];
  }
}

/** Which deadline a connection is under. */
type Deadline = "headers" | "body" | "idle" | "write";

/** Where a client is in its requests. */
export type Phase = "idle" | "head" | "body" | "opaque";

const deadlineOf: Record<Phase, Deadline> = {
  idle: "idle",
  head: "headers",
  body: "body",
  opaque: "idle",
};

interface Guarded {
  client: Deno.TcpConn;
  framing: RequestFraming;
  /** The framing's phase when `since` was set. */
  phase: Phase;
  /** When the current head or body started, or when the last byte moved (idle). */
  since: number;
  /** Set while a write to the client is pending. */
  writingSince: number | undefined;
  close(reason?: Deadline): void;
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
  let offset = 0;
  while (offset < bytes.length) offset += await conn.write(bytes.subarray(offset));
}

/** Starts `handler` on `Deno.serve` behind the guard. */
export function serveGuarded(options: GuardOptions, handler: Deno.ServeHandler): GuardedServer {
  const maxConnections = options.maxConnections ?? 4096;
  const errorBody = options.errorBody ?? gatewayErrorBody;
  const refused = {
    connections: refusal("connections", errorBody),
    memory: refusal("memory", errorBody),
  };
  const limits: Record<Deadline, number> = {
    headers: options.headersTimeoutMs ?? 10_000,
    body: options.bodyTimeoutMs ?? 30_000,
    idle: options.idleTimeoutMs ?? 75_000,
    write: options.writeTimeoutMs ?? 30_000,
  };
  const inner = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, handler);
  const upstream = { hostname: "127.0.0.1", port: inner.addr.port, transport: "tcp" as const };
  const listener = Deno.listen({ hostname: options.hostname, port: options.port });
  const open = new Set<Guarded>();
  const closedBy = { headers: 0, body: 0, idle: 0, write: 0, cap: 0 };

  const sweep = setInterval(() => {
    const now = performance.now();
    for (const g of open) {
      if (g.writingSince !== undefined && now - g.writingSince > limits.write) {
        g.close("write");
        continue;
      }
      const deadline = deadlineOf[g.phase];
      if (now - g.since > limits[deadline]) g.close(deadline);
    }
  }, Math.min(1000, ...Object.values(limits).map((ms) => Math.max(10, ms / 4))));
  Deno.unrefTimer(sweep);

  async function relay(client: Deno.TcpConn): Promise<void> {
    let server: Deno.TcpConn | undefined;
    let closed = false;
    let turnedAway = false;
    // The first head is held here until it is complete: Deno.serve (~18 KiB a connection) sees
    // only connections that sent a whole head. Its bytes are taken from the budget.
    let pending: Uint8Array[] | undefined = [];
    const lease = options.budget?.take(0);
    const g: Guarded = {
      client,
      framing: new RequestFraming(),
      phase: "idle",
      since: performance.now(),
      writingSince: undefined,
      close(reason) {
        if (closed) return;
        closed = true;
        if (reason) closedBy[reason]++;
        open.delete(g);
        pending = undefined;
        lease?.release();
        try {
          client.close();
        } catch { /* closed */ }
        try {
          server?.close();
        } catch { /* closed */ }
      },
    };
    open.add(g);
    const toClient = async (server: Deno.TcpConn) => {
      const reader = new Reader(server);
      try {
        for (;;) {
          const bytes = await reader.read();
          if (bytes === null) break;
          g.writingSince = performance.now();
          await writeAll(client, bytes);
          g.writingSince = undefined;
          if (g.phase === "idle" || g.phase === "opaque") g.since = performance.now();
        }
      } finally {
        reader.release();
      }
    };
    const fromClient = async (reader: Reader) => {
      for (let first = true;;) {
        const bytes = await reader.read();
        if (bytes === null) break;
        if (first && bytes.length >= 4) {
          first = false;
          if (h2Preface.every((b, i) => i >= bytes.length || bytes[i] === b)) return;
        }
        g.framing.declared = 0;
        g.framing.feed(bytes);
        if (g.framing.declared > 0 && options.admit && !options.admit(g.framing.declared)) {
          // Under pressure: no byte of this request goes on. An answer of an earlier request on
          // the connection still being written is cut (only pipelining clients can meet that).
          turnedAway = true;
          await writeAll(client, refused.memory).catch(() => {});
          return;
        }
        // A deadline starts when its part starts: the head at its first byte, the body at the end
        // of the head; between requests and when the input is opaque, each byte restarts idle.
        const phase = g.framing.phase;
        if (phase !== g.phase || phase === "idle" || phase === "opaque") {
          g.phase = phase;
          g.since = performance.now();
        }
        if (server) {
          await writeAll(server, bytes);
          continue;
        }
        if (!pending) return; // closed meanwhile
        if (lease && !lease.grow(bytes.length)) {
          await writeAll(client, refused.memory).catch(() => {});
          return;
        }
        pending.push(bytes.slice());
        if (phase === "head" || (phase === "idle" && g.framing.completed === 0)) continue;
        server = await Deno.connect(upstream);
        if (closed) return;
        server.setNoDelay(true);
        const head = concat(pending);
        pending = undefined;
        lease?.release();
        toClient(server).catch(() => {}).finally(() => g.close());
        await writeAll(server, head);
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
    // Without a server (or refused), the client's end is the end; else the server's end is.
    if (!server || turnedAway) g.close();
  }

  const accepting = (async () => {
    for await (const client of listener) {
      if (open.size >= maxConnections) {
        closedBy.cap++;
        writeAll(client, refused.connections).catch(() => {}).finally(() => {
          try {
            client.close();
          } catch { /* closed */ }
        });
        continue;
      }
      relay(client).catch(() => {});
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
