/**
 * The HTTP/2 server under what broke node:http2 in Deno (clients closing connections), under
 * protocol abuse from a raw socket, and with responses larger than the flow-control windows;
 * each deadline and limit of `serveH2`, with small settings, checked by its outcome (what the
 * server sent, whether it closed), not by how long it took; and the RFC 9113 rules h2spec found
 * broken: malformed requests, frames on idle and closed streams.
 */

import assert from "node:assert/strict";
import type { Buffer } from "node:buffer";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  Health,
  HealthCheckRequestSchema,
  HealthCheckResponse_ServingStatus as Status,
  HealthListResponseSchema,
} from "../../gen/grpc/health/v1/health_pb.ts";
import { bindGrpc, serveGrpc } from "../rpc/mod.ts";
import { type GrpcChannel, grpcChannel, grpcChurn } from "../testing/mod.ts";
import { createMemoryBudget } from "../platform/mod.ts";
import { concat } from "./bytes.ts";
import { type HeaderField, HpackDecoder, hpackEncode } from "./hpack.ts";
import {
  bodyOverBudget,
  checkRequestHeaders,
  checkTrailers,
  type H2Handler,
  type H2Server,
  type H2ServerOptions,
  serveH2,
} from "./h2_server.ts";

function healthServer(delayMs = 1) {
  return serveGrpc([bindGrpc(Health, {
    check: async () => {
      await new Promise((r) => setTimeout(r, delayMs));
      return { status: Status.SERVING };
    },
    list: () => ({
      statuses: Object.fromEntries(
        Array.from(
          { length: 20_000 },
          (_, i) => [`service.number.${i}.v1.Svc`, { status: Status.SERVING }],
        ),
      ),
    }),
  })], { port: 0, hostname: "127.0.0.1" });
}

/** A unary call with stock grpc-js (on Node.js): the response's bytes, or an error. */
async function call(client: GrpcChannel, path: string, body: Uint8Array): Promise<Buffer> {
  const out = await client.call({ path, requests: [body], timeoutMs: 10_000 });
  if (out.code !== 0) throw new Error(`${path}: ${out.code} ${out.details}`);
  return out.responses[0]!;
}

const check = (client: GrpcChannel) =>
  call(
    client,
    "/grpc.health.v1.Health/Check",
    toBinary(HealthCheckRequestSchema, {
      $typeName: "grpc.health.v1.HealthCheckRequest",
      service: "",
    }),
  );

Deno.test("clients that make calls and close their connections never take the server down", async () => {
  const server = healthServer();
  try {
    // 5 rounds of 32 stock grpc-js channels (on Node.js), 20 calls each, then closed.
    const churn = await grpcChurn({
      address: `127.0.0.1:${server.port}`,
      method: Health.method.check,
      request: { service: "" },
      rounds: 5,
      clients: 32,
      calls: 20,
    });
    assert.deepEqual(churn, { calls: 5 * 32 * 20, codes: { "0": 5 * 32 * 20 } });
    const last = grpcChannel(`127.0.0.1:${server.port}`);
    await check(last);
    last.close();
  } finally {
    await server.close(0);
  }
});

Deno.test("a response larger than the flow-control windows arrives whole", async () => {
  const server = healthServer();
  const client = grpcChannel(`127.0.0.1:${server.port}`);
  try {
    const bytes = await call(client, "/grpc.health.v1.Health/List", new Uint8Array());
    assert.ok(bytes.length > 500_000, `${bytes.length} bytes`);
    assert.equal(Object.keys(fromBinary(HealthListResponseSchema, bytes).statuses).length, 20_000);
  } finally {
    client.close();
    await server.close(0);
  }
});

// --- raw HTTP/2 frames ---------------------------------------------------------------------

const preface = new TextEncoder().encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

function frame(
  type: number,
  flags: number,
  stream: number,
  payload: Uint8Array = new Uint8Array(),
): Uint8Array {
  const out = new Uint8Array(9 + payload.length);
  out[0] = payload.length >>> 16;
  out[1] = payload.length >>> 8;
  out[2] = payload.length;
  out[3] = type;
  out[4] = flags;
  new DataView(out.buffer).setUint32(5, stream);
  out.set(payload, 9);
  return out;
}

const u32 = (n: number) => {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, n);
  return b;
};

const requestFields: HeaderField[] = [
  [":method", "POST"],
  [":scheme", "http"],
  [":path", "/grpc.health.v1.Health/Check"],
  [":authority", "localhost"],
  ["content-type", "application/grpc"],
  ["te", "trailers"],
];
const requestHeaders = hpackEncode(requestFields);

interface Frame {
  type: number;
  flags: number;
  stream: number;
  payload: Uint8Array;
}

/** Appends `chunk` to `buf`, moves every complete frame into `frames`, returns the rest. */
function readFrames(buf: Uint8Array, chunk: Uint8Array, frames: Frame[]): Uint8Array {
  let rest = new Uint8Array(buf.length + chunk.length);
  rest.set(buf);
  rest.set(chunk, buf.length);
  while (rest.length >= 9) {
    const length = (rest[0]! << 16) | (rest[1]! << 8) | rest[2]!;
    if (rest.length < 9 + length) break;
    frames.push({
      type: rest[3]!,
      flags: rest[4]!,
      stream: new DataView(rest.buffer, rest.byteOffset + 5, 4).getUint32(0),
      payload: rest.slice(9, 9 + length),
    });
    rest = rest.slice(9 + length);
  }
  return rest;
}

/** Writes `bytes` after the preface and reads frames until the server closes or `until` holds. */
async function exchange(
  port: number,
  bytes: Uint8Array[],
  until: (f: Frame[]) => unknown,
): Promise<Frame[]> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  const frames: Frame[] = [];
  try {
    for (const b of [preface, frame(4, 0, 0), ...bytes]) await conn.write(b);
    let buf: Uint8Array = new Uint8Array();
    const deadline = setTimeout(() => conn.close(), 5000);
    try {
      for await (const chunk of conn.readable) {
        buf = readFrames(buf, chunk, frames);
        if (until(frames)) break;
      }
    } catch {
      /* closed by the server */
    } finally {
      clearTimeout(deadline);
    }
  } finally {
    try {
      conn.close();
    } catch { /* already closed */ }
  }
  return frames;
}

const goaway = (frames: Frame[]) => frames.find((f) => f.type === 7);
const goawayCode = (frames: Frame[]) => {
  const g = goaway(frames);
  return g && new DataView(g.payload.buffer, g.payload.byteOffset + 4, 4).getUint32(0);
};

Deno.test("protocol abuse ends the connection with the right GOAWAY, never the server", async () => {
  const server = healthServer(0);
  const port = server.port;
  const stillServes = async () => {
    const client = grpcChannel(`127.0.0.1:${port}`);
    await check(client);
    client.close();
  };
  try {
    // Not HTTP/2 at all: closed by the server, with nothing sent but its own preface (SETTINGS
    // and WINDOW_UPDATE, written as the connection opens), no HTTP/1.1 answer.
    const http1 = await Raw.open(port, { preface: false });
    await http1.write(new TextEncoder().encode("GET / HTTP/1.1\r\nhost: x\r\n\r\n"));
    assert.equal(await http1.untilClosed(), true, "the server did not close the connection");
    assert.deepEqual(http1.rest.length, 0, "bytes that are not HTTP/2 frames");
    assert.deepEqual(http1.frames.map((f) => f.type), [4, 8]);
    await stillServes();

    // A frame larger than our SETTINGS_MAX_FRAME_SIZE.
    assert.equal(
      goawayCode(await exchange(port, [frame(0, 0, 1, new Uint8Array(20_000))], goaway)),
      0x6,
    );
    // A header block HPACK cannot decode.
    assert.equal(
      goawayCode(await exchange(port, [frame(1, 0x5, 1, Uint8Array.of(0x80))], goaway)),
      0x9,
    );
    // CONTINUATION without HEADERS, and HEADERS not followed by CONTINUATION.
    assert.equal(goawayCode(await exchange(port, [frame(9, 0x4, 1, requestHeaders)], goaway)), 0x1);
    assert.equal(
      goawayCode(
        await exchange(port, [frame(1, 0, 1, requestHeaders), frame(8, 0, 0, u32(1))], goaway),
      ),
      0x1,
    );
    // Rapid reset: streams opened and cancelled at once, over and over.
    const flood: Uint8Array[] = [];
    for (let id = 1; id < 1000; id += 2) {
      flood.push(frame(1, 0x4, id, requestHeaders), frame(3, 0, id, u32(8)));
    }
    assert.equal(goawayCode(await exchange(port, flood, goaway)), 0xb);
    // Past SETTINGS_MAX_CONCURRENT_STREAMS: the extra streams are refused.
    const open: Uint8Array[] = [];
    for (let id = 1; id <= 2 * 101; id += 2) open.push(frame(1, 0x4, id, requestHeaders));
    const refused = await exchange(port, open, (f) => f.some((x) => x.type === 3));
    const rst = refused.find((f) => f.type === 3)!;
    assert.equal(rst.stream, 201);
    assert.equal(new DataView(rst.payload.buffer, rst.payload.byteOffset, 4).getUint32(0), 0x7);
    // PING is answered.
    const ping = await exchange(
      port,
      [frame(6, 0, 0, Uint8Array.of(1, 2, 3, 4, 5, 6, 7, 8))],
      (f) => f.some((x) => x.type === 6),
    );
    assert.deepEqual([...ping.find((f) => f.type === 6)!.payload], [1, 2, 3, 4, 5, 6, 7, 8]);

    await stillServes();
  } finally {
    await server.close(0);
  }
});

Deno.test("a graceful close serves the streams a client sent before it learned of it", async () => {
  const server = healthServer(300);
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
  const frames: Frame[] = [];
  let buf: Uint8Array = new Uint8Array();
  const reader = conn.readable.getReader();
  /** Reads frames until `until` finds one (or 5 s pass). */
  const waitFor = async (until: (f: Frame) => boolean): Promise<Frame> => {
    const deadline = Date.now() + 5000;
    for (;;) {
      const found = frames.find(until);
      if (found) return found;
      if (Date.now() > deadline) throw new Error("no such frame");
      const { value, done } = await reader.read();
      if (done) throw new Error("closed");
      buf = readFrames(buf, value, frames);
    }
  };
  const call = (stream: number) => [
    frame(1, 0x4, stream, requestHeaders),
    frame(0, 0x1, stream, new Uint8Array(5)),
  ];
  const lastId = (f: Frame) => new DataView(f.payload.buffer, f.payload.byteOffset).getUint32(0);
  const ended = (stream: number) => (f: Frame) =>
    f.stream === stream && f.type === 1 && !!(f.flags & 1);
  try {
    for (const b of [preface, frame(4, 0, 0), ...call(1)]) await conn.write(b);
    await waitFor((f) => f.type === 4 && !(f.flags & 1)); // the server's SETTINGS
    const closed = server.close(5000);
    // Step one: a GOAWAY that refuses nothing, and a PING.
    const first = await waitFor((f) => f.type === 7);
    assert.equal(lastId(first), 0x7fffffff);
    const ping = await waitFor((f) => f.type === 6 && !(f.flags & 1));
    // A stream sent before the PING's answer is served.
    for (const b of call(3)) await conn.write(b);
    await conn.write(frame(6, 1, 0, ping.payload));
    // Step two: a GOAWAY naming the last stream received; later streams are refused.
    const second = await waitFor((f) => f.type === 7 && f !== first);
    assert.equal(lastId(second), 3);
    for (const b of call(5)) await conn.write(b);
    const refused = await waitFor((f) => f.type === 3 && f.stream === 5);
    assert.equal(new DataView(refused.payload.buffer).getUint32(0), 7); // REFUSED_STREAM
    await waitFor(ended(1));
    await waitFor(ended(3));
    await closed;
  } finally {
    reader.releaseLock();
    try {
      conn.close();
    } catch { /* closed by the server */ }
    await server.close(0);
  }
});

// --- deadlines and limits, on a bare serveH2 with small settings ------------------------------

/** A raw HTTP/2 client connection; a background pump reads frames unless told not to. */
class Raw {
  readonly frames: Frame[] = [];
  /** Bytes after the last whole frame. */
  rest: Uint8Array = new Uint8Array();
  /** The server closed (EOF or reset). */
  closed = false;
  #wake: (() => void) | undefined;
  #pumping: Promise<void> | undefined;

  private constructor(readonly conn: Deno.TcpConn) {}

  /** Connects; with `preface` (default) sends the preface and `settings`; with `read`, pumps. */
  static async open(
    port: number,
    options: { preface?: boolean; settings?: Uint8Array; read?: boolean } = {},
  ): Promise<Raw> {
    const raw = new Raw(await Deno.connect({ hostname: "127.0.0.1", port }));
    if (options.preface ?? true) {
      await raw.write(preface, frame(4, 0, 0, options.settings ?? new Uint8Array()));
    }
    if (options.read ?? true) raw.pump();
    return raw;
  }

  pump(): void {
    this.#pumping ??= (async () => {
      const buffer = new Uint8Array(64 * 1024);
      try {
        for (;;) {
          const n = await this.conn.read(buffer);
          if (n === null) break;
          this.rest = readFrames(this.rest, buffer.subarray(0, n), this.frames);
          this.#wake?.();
        }
      } catch { /* reset by the server, or closed by us */ }
      this.closed = true;
      this.#wake?.();
    })();
  }

  async write(...chunks: Uint8Array[]): Promise<void> {
    for (const chunk of chunks) {
      let rest = chunk;
      while (rest.length > 0) rest = rest.subarray(await this.conn.write(rest));
    }
  }

  /**
   * Waits until `found` holds for the frames received (true), or the server closes or `safetyMs`
   * pass (false). The safety limit only keeps a broken server from hanging the test.
   */
  async until(found: (frames: Frame[]) => unknown, safetyMs = 10_000): Promise<boolean> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    let timedOut = false;
    const timeout = new Promise<void>((r) =>
      timer = setTimeout(() => {
        timedOut = true;
        r();
      }, safetyMs)
    );
    try {
      while (!found(this.frames)) {
        if (this.closed || timedOut) return false;
        await Promise.race([new Promise<void>((r) => this.#wake = r), timeout]);
      }
      return true;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Waits for the server to close the connection: true, or false after `safetyMs`. */
  async untilClosed(safetyMs = 10_000): Promise<boolean> {
    await this.until(() => false, safetyMs);
    return this.closed;
  }

  async close(): Promise<void> {
    try {
      this.conn.close();
    } catch { /* closed */ }
    await this.#pumping;
  }
}

const settingsAck = (f: Frame) => f.type === 4 && (f.flags & 1) === 1;
const rstOf = (frames: Frame[], stream: number) =>
  frames.find((f) => f.type === 3 && f.stream === stream);
const rstCode = (frames: Frame[], stream: number) => {
  const rst = rstOf(frames, stream);
  return rst && new DataView(rst.payload.buffer, rst.payload.byteOffset, 4).getUint32(0);
};
const responseEnded = (stream: number) => (frames: Frame[]) =>
  frames.some((f) => f.stream === stream && (f.type === 0 || f.type === 1) && (f.flags & 1));

function settingsPayload(...pairs: [number, number][]): Uint8Array {
  const out = new Uint8Array(6 * pairs.length);
  const view = new DataView(out.buffer);
  pairs.forEach(([id, value], i) => {
    view.setUint16(6 * i, id);
    view.setUint32(6 * i + 2, value);
  });
  return out;
}

/** A handler that reads the body and answers 200 with `body` (empty: headers only). */
function answering(body = new Uint8Array()): H2Handler {
  return async (req, res) => {
    for await (const _ of req.body) { /* read */ }
    if (body.length === 0) return res.headers([[":status", "200"]], true);
    res.headers([[":status", "200"]]);
    await res.data(body, true);
  };
}

async function withServer(
  options: Partial<H2ServerOptions>,
  test: (server: H2Server) => Promise<void>,
): Promise<void> {
  const server = serveH2({ hostname: "127.0.0.1", port: 0, handler: answering(), ...options });
  try {
    await test(server);
  } finally {
    await server.close(0);
  }
}

Deno.test("a client that sends half a preface, or no SETTINGS after it, is closed", async () => {
  await withServer({ prefaceTimeoutMs: 200 }, async ({ port }) => {
    const half = await Raw.open(port, { preface: false });
    await half.write(preface.subarray(0, 10));
    const noSettings = await Raw.open(port, { preface: false });
    await noSettings.write(preface);
    assert.equal(await half.untilClosed(), true, "half a preface: still open");
    assert.equal(await noSettings.untilClosed(), true, "no SETTINGS: still open");
    // A client that completes its preface is served, after the same time.
    const whole = await Raw.open(port);
    await new Promise((r) => setTimeout(r, 400));
    await whole.write(frame(1, 0x5, 1, requestHeaders));
    assert.ok(await whole.until(responseEnded(1)), "a complete preface was not served");
    await Promise.all([half.close(), noSettings.close(), whole.close()]);
  });
});

Deno.test("a header block that never ends gets GOAWAY and is closed", async () => {
  await withServer({ headerBlockTimeoutMs: 200 }, async ({ port }) => {
    const raw = await Raw.open(port);
    // HEADERS without END_HEADERS, one CONTINUATION without it either, then nothing.
    await raw.write(
      frame(1, 0, 1, requestHeaders.subarray(0, 10)),
      frame(9, 0, 1, requestHeaders.subarray(10, 20)),
    );
    assert.equal(await raw.untilClosed(), true, "still open");
    assert.equal(goawayCode(raw.frames), 0xb); // ENHANCE_YOUR_CALM
    await raw.close();
  });
});

Deno.test("a stream whose body stops coming is reset, and its slot and handler are freed", async () => {
  const reasons: unknown[] = [];
  const handler: H2Handler = async (req, res) => {
    try {
      for await (const _ of req.body) { /* read */ }
      res.headers([[":status", "200"]], true);
    } catch (error) {
      reasons.push(error);
    }
  };
  await withServer({ bodyTimeoutMs: 200, maxConcurrentStreams: 1, handler }, async ({ port }) => {
    const raw = await Raw.open(port);
    // A request whose body starts and stops: the handler waits for the rest.
    await raw.write(frame(1, 0x4, 1, requestHeaders), frame(0, 0, 1, new Uint8Array(5)));
    assert.ok(await raw.until((f) => rstOf(f, 1)), "stream 1 was not reset");
    assert.equal(rstCode(raw.frames, 1), 0x8); // CANCEL
    assert.equal(reasons.length, 1);
    assert.equal((reasons[0] as DOMException).name, "TimeoutError");
    // The only stream slot is free again: the next stream is served, not refused.
    await raw.write(frame(1, 0x5, 3, requestHeaders));
    assert.ok(await raw.until(responseEnded(3)), "stream 3 was not answered");
    assert.equal(rstOf(raw.frames, 3), undefined);
    await raw.close();
  });
});

Deno.test("a stream answered before its body ended is reset once the peer stops sending", async () => {
  // The handler answers at once, without reading; the client sent part of a body and stops.
  const early: H2Handler = (_req, res) => res.headers([[":status", "200"]], true);
  await withServer({ bodyTimeoutMs: 200, handler: early }, async ({ port }) => {
    const raw = await Raw.open(port);
    await raw.write(frame(1, 0x4, 1, requestHeaders));
    assert.ok(await raw.until(responseEnded(1)), "no answer");
    await raw.write(frame(0, 0, 1, new Uint8Array(5))); // still accepted: half-closed (local)
    assert.ok(await raw.until((f) => rstOf(f, 1)), "the stream was never reset");
    assert.equal(rstCode(raw.frames, 1), 0x0); // NO_ERROR: the answer stands
    assert.equal(goaway(raw.frames), undefined);
    await raw.close();
  });
});

Deno.test("an idle connection gets GOAWAY NO_ERROR and is closed; a busy one is not", async () => {
  const slow: H2Handler = async (req, res) => {
    for await (const _ of req.body) { /* read */ }
    await new Promise((r) => setTimeout(r, 600)); // three idle timeouts with a stream open
    res.headers([[":status", "200"]], true);
  };
  await withServer({ idleTimeoutMs: 200, handler: slow }, async ({ port }) => {
    const raw = await Raw.open(port);
    await raw.write(frame(1, 0x5, 1, requestHeaders));
    assert.ok(await raw.until(responseEnded(1)), "the slow stream was not answered");
    assert.equal(goaway(raw.frames), undefined, "GOAWAY while a stream was open");
    assert.equal(await raw.untilClosed(), true, "the idle connection stayed open");
    assert.equal(goawayCode(raw.frames), 0x0);
    const g = goaway(raw.frames)!;
    assert.equal(new DataView(g.payload.buffer, g.payload.byteOffset).getUint32(0), 1);
    await raw.close();
  });
});

Deno.test("keepalive: a peer that answers PINGs stays, one that does not is closed", async () => {
  await withServer({ keepaliveIntervalMs: 100, keepaliveTimeoutMs: 300 }, async ({ port }) => {
    const pings = (f: Frame[]) => f.filter((x) => x.type === 6 && !(x.flags & 1));
    const silent = await Raw.open(port);
    const answering = await Raw.open(port);
    for (let answered = 0; answered < 4; answered++) {
      assert.ok(await answering.until((f) => pings(f).length > answered), "no keepalive PING");
      await answering.write(frame(6, 1, 0, pings(answering.frames)[answered]!.payload));
    }
    assert.equal(await silent.untilClosed(), true, "a peer that never answered is still open");
    assert.ok(pings(silent.frames).length >= 1);
    assert.equal(answering.closed, false, "a peer that answered every PING was closed");
    assert.equal(goaway(answering.frames), undefined);
    await Promise.all([silent.close(), answering.close()]);
  });
});

Deno.test("past maxConnections a connection is refused at once; the others keep working", async () => {
  await withServer({ maxConnections: 2 }, async ({ port }) => {
    const first = await Raw.open(port);
    const second = await Raw.open(port);
    assert.ok(await first.until((f) => f.some(settingsAck)));
    assert.ok(await second.until((f) => f.some(settingsAck)));
    const third = await Raw.open(port);
    assert.equal(await third.untilClosed(), true, "the third connection was not closed");
    assert.equal(goawayCode(third.frames), 0xb);
    for (const [i, raw] of [first, second].entries()) {
      await raw.write(frame(1, 0x5, 1, requestHeaders));
      assert.ok(await raw.until(responseEnded(1)), `connection ${i + 1} stopped working`);
    }
    // Once one closes, a new connection is served.
    await first.close();
    let served = false;
    for (let attempt = 0; attempt < 50 && !served; attempt++) {
      const next = await Raw.open(port);
      await next.write(frame(1, 0x5, 1, requestHeaders));
      served = await next.until(responseEnded(1));
      await next.close();
    }
    assert.ok(served, "no connection was served after one closed");
    await second.close();
  });
});

/** Windows as large as the protocol allows, for a client that lets the server send freely. */
const wideOpen = [
  frame(8, 0, 0, u32(2 ** 31 - 1 - 65_535)),
];
const wideSettings = settingsPayload([0x4, 2 ** 31 - 1]);

Deno.test("a large response waits for a slow reader and arrives whole", async () => {
  const body = new Uint8Array(4 * 1024 * 1024).map((_, i) => i % 251);
  await withServer({ maxOutputBytes: 64 * 1024, handler: answering(body) }, async ({ port }) => {
    const raw = await Raw.open(port, { settings: wideSettings, read: false });
    await raw.write(...wideOpen, frame(1, 0x5, 1, requestHeaders));
    await new Promise((r) => setTimeout(r, 300)); // the server fills the socket and waits
    raw.pump();
    assert.ok(await raw.until(responseEnded(1)), "the response did not end");
    const data = raw.frames.filter((f) => f.type === 0 && f.stream === 1);
    const received = concat(data.map((f) => f.payload));
    assert.equal(received.length, body.length);
    assert.deepEqual(received.subarray(-1000), body.subarray(-1000));
    await raw.close();
  });
});

Deno.test("a peer that does not read is dropped, and its output queue stays bounded", async () => {
  const total = 64 * 1024 * 1024;
  let written = 0;
  let aborted: unknown;
  const handler: H2Handler = async (req, res) => {
    res.headers([[":status", "200"]]);
    const chunk = new Uint8Array(64 * 1024);
    while (written < total && !req.signal.aborted) {
      await res.data(chunk);
      if (!req.signal.aborted) written += chunk.length;
    }
    aborted = req.signal.reason;
  };
  const maxOutputBytes = 64 * 1024;
  await withServer({ maxOutputBytes, writeTimeoutMs: 300, handler }, async ({ port }) => {
    const raw = await Raw.open(port, { settings: wideSettings, read: false });
    await raw.write(...wideOpen, frame(1, 0x5, 1, requestHeaders));
    const deadline = Date.now() + 10_000;
    while (aborted === undefined && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(aborted instanceof DOMException, "the handler's stream never ended");
    // What the handler could write is what the queue and the kernel's socket buffers hold: the
    // queue (64 KiB here) and not 16 MiB, the old cap, nor all of it.
    const kernel = await socketBufferBytes();
    assert.ok(
      written <= maxOutputBytes + kernel + 1024 * 1024,
      `${written} bytes taken with ${kernel} bytes of socket buffers`,
    );
    await raw.close();
  });
});

/** The most the kernel may buffer for a loopback connection nobody reads (send and receive). */
async function socketBufferBytes(): Promise<number> {
  try {
    const max = async (file: string) =>
      Number((await Deno.readTextFile(file)).trim().split(/\s+/)[2]);
    return await max("/proc/sys/net/ipv4/tcp_wmem") +
      4 * Number((await Deno.readTextFile("/proc/sys/net/ipv4/tcp_rmem")).trim().split(/\s+/)[1]);
  } catch {
    return 8 * 1024 * 1024;
  }
}

Deno.test("a response that waits for windows adds no listener to the stream's signal", async () => {
  let added = 0;
  const handler: H2Handler = async (req, res) => {
    const signal = req.signal;
    const add = signal.addEventListener.bind(signal);
    signal.addEventListener = ((...args: Parameters<typeof add>) => {
      added++;
      return add(...args);
    }) as typeof signal.addEventListener;
    res.headers([[":status", "200"]]);
    await res.data(new Uint8Array(256 * 1024));
    res.trailers([["x-done", "1"]]);
  };
  await withServer({ handler }, async ({ port }) => {
    // A window of 1 KiB per stream, given back a frame at a time: the response waits ~256 times.
    const raw = await Raw.open(port, { settings: settingsPayload([0x4, 1024]) });
    await raw.write(frame(8, 0, 0, u32(1024 * 1024)), frame(1, 0x5, 1, requestHeaders));
    const dataFrames = (f: Frame[]) => f.filter((x) => x.type === 0 && x.stream === 1).length;
    let granted = 0;
    while (!responseEnded(1)(raw.frames)) {
      assert.ok(
        await raw.until((f) => dataFrames(f) > granted || responseEnded(1)(f)),
        "the response stopped",
      );
      granted = dataFrames(raw.frames);
      await raw.write(frame(8, 0, 1, u32(1024)));
    }
    assert.ok(granted >= 200, `only ${granted} DATA frames: the response did not wait`);
    assert.equal(added, 0, `${added} listeners added over ${granted} waits`);
    await raw.close();
  });
});

Deno.test("malformed requests are reset with PROTOCOL_ERROR and never reach the handler", async () => {
  let calls = 0;
  let bodiesRead = 0;
  const handler: H2Handler = async (req, res) => {
    calls++;
    try {
      for await (const _ of req.body) { /* read */ }
    } catch {
      return; // reset
    }
    bodiesRead++;
    res.headers([[":status", "200"]], true);
  };
  const valid: HeaderField[] = [
    [":method", "POST"],
    [":scheme", "http"],
    [":path", "/svc/Method"],
    [":authority", "localhost"],
    ["content-type", "application/grpc"],
  ];
  const malformed: HeaderField[][] = [
    [...valid, ["X-Upper", "1"]],
    [...valid, ["connection", "keep-alive"]],
    [...valid, ["te", "gzip"]],
    [...valid, [":unknown", "1"]],
    [...valid, [":status", "200"]],
    [valid[0]!, valid[1]!, ["content-type", "application/grpc"], valid[2]!, valid[3]!],
    valid.filter(([name]) => name !== ":path"),
    valid.filter(([name]) => name !== ":method"),
    valid.filter(([name]) => name !== ":scheme"),
    [...valid.slice(0, 1), ...valid],
    [valid[0]!, valid[1]!, [":path", ""], valid[3]!],
    [...valid, ["x-value", "a\nb"]],
  ];
  await withServer({ handler }, async ({ port }) => {
    const raw = await Raw.open(port);
    let id = 1;
    for (const fields of malformed) {
      await raw.write(frame(1, 0x5, id, hpackEncode(fields)));
      assert.ok(await raw.until((f) => rstOf(f, id)), `no reset for ${JSON.stringify(fields)}`);
      assert.equal(rstCode(raw.frames, id), 0x1, JSON.stringify(fields));
      id += 2;
    }
    assert.equal(calls, 0);
    // A body longer or shorter than its content-length: its handler never reads it whole.
    for (const sent of [3, 5]) {
      await raw.write(
        frame(1, 0x4, id, hpackEncode([...valid, ["content-length", "4"]])),
        frame(0, 0x1, id, new Uint8Array(sent)),
      );
      assert.ok(await raw.until((f) => rstOf(f, id)), `no reset for ${sent} bytes of 4`);
      assert.equal(rstCode(raw.frames, id), 0x1);
      id += 2;
    }
    // A stream that depends on itself.
    await raw.write(
      frame(1, 0x25, id, concat([u32(id), Uint8Array.of(16), hpackEncode(valid)])),
    );
    assert.ok(await raw.until((f) => rstOf(f, id)), "no reset for a self-dependency");
    assert.equal(rstCode(raw.frames, id), 0x1);
    id += 2;
    assert.equal(calls, 2);
    assert.equal(bodiesRead, 0);
    // They were stream errors: the connection still serves a well-formed request.
    await raw.write(frame(1, 0x5, id, hpackEncode(valid)));
    assert.ok(await raw.until(responseEnded(id)), "a valid request after them was not served");
    assert.equal(bodiesRead, 1);
    assert.equal(goaway(raw.frames), undefined);
    await raw.close();
  });
});

Deno.test("frames on idle or reused streams end the connection with PROTOCOL_ERROR", async () => {
  await withServer({}, async ({ port }) => {
    const cases: [string, Uint8Array[]][] = [
      ["RST_STREAM on an idle stream", [frame(3, 0, 1, u32(8))]],
      ["WINDOW_UPDATE on an idle stream", [frame(8, 0, 1, u32(1))]],
      ["DATA on an idle stream", [frame(0, 0x1, 1, new Uint8Array(1))]],
      ["PRIORITY on an idle stream that depends on itself", [
        frame(2, 0, 1, concat([u32(1), Uint8Array.of(16)])),
      ]],
      ["a stream id below the last one", [
        frame(1, 0x5, 5, requestHeaders),
        frame(1, 0x5, 3, requestHeaders),
      ]],
      ["SETTINGS ACK with a payload", [frame(4, 1, 0, new Uint8Array(6))]],
      ["GOAWAY on a stream", [frame(7, 0, 1, new Uint8Array(8))]],
    ];
    for (const [name, frames] of cases) {
      const raw = await Raw.open(port);
      await raw.write(...frames);
      assert.equal(await raw.untilClosed(), true, `${name}: not closed`);
      const code = name.startsWith("SETTINGS") ? 0x6 : 0x1;
      assert.equal(goawayCode(raw.frames), code, name);
      await raw.close();
    }
    // After both sides ended a stream: DATA is STREAM_CLOSED for the stream, HEADERS for the
    // connection.
    const raw = await Raw.open(port);
    await raw.write(frame(1, 0x5, 1, requestHeaders));
    assert.ok(await raw.until(responseEnded(1)));
    await raw.write(frame(0, 0x1, 1, new Uint8Array(1)));
    assert.ok(await raw.until((f) => rstOf(f, 1)));
    assert.equal(rstCode(raw.frames, 1), 0x5);
    await raw.write(frame(1, 0x5, 1, requestHeaders));
    assert.equal(await raw.untilClosed(), true);
    assert.equal(goawayCode(raw.frames), 0x5);
    await raw.close();
  });
});

Deno.test("checkRequestHeaders accepts what gRPC clients send and returns content-length", () => {
  const grpc: HeaderField[] = [
    [":method", "POST"],
    [":scheme", "http"],
    [":path", "/grpc.health.v1.Health/Check"],
    [":authority", "127.0.0.1:50051"],
    ["content-type", "application/grpc"],
    ["te", "trailers"],
    ["grpc-timeout", "9999m"],
    ["user-agent", "grpc-node-js/1.14.7"],
  ];
  assert.equal(checkRequestHeaders(grpc), -1);
  assert.equal(checkRequestHeaders([...grpc, ["content-length", "12"]]), 12);
  assert.equal(typeof checkRequestHeaders([...grpc, ["content-length", "1e3"]]), "string");
  // Whitespace around a value is tolerated (grpc-js sends "Bearer " for an empty token); a line
  // break or NUL in one is not.
  assert.equal(checkRequestHeaders([...grpc, ["authorization", "Bearer "]]), -1);
  assert.equal(typeof checkRequestHeaders([...grpc, ["authorization", "Bearer a\nb"]]), "string");
  assert.equal(typeof checkRequestHeaders([...grpc, ["x-a", "a\0"]]), "string");
  assert.equal(
    checkRequestHeaders([[":method", "CONNECT"], [":authority", "example.com:443"]]),
    -1,
  );
  assert.equal(checkTrailers([["x-checksum", "abc"]]), undefined);
  assert.equal(typeof checkTrailers([[":path", "/"]]), "string");
});

/**
 * A handler that answers only once `released`, reading its body after that: 200, or 503 when its
 * body ended because it did not fit the budget.
 */
function readsWhenReleased(released: Promise<void>, holders?: (readonly string[])[]): H2Handler {
  return async (req, res) => {
    holders?.push(req.holders);
    await released;
    try {
      for await (const _ of req.body) { /* read */ }
    } catch (error) {
      if (error !== bodyOverBudget) throw error;
      return res.headers([[":status", "503"]], true);
    }
    res.headers([[":status", "200"]], true);
  };
}

/** Whether stream `stream` was answered with status `status` (the server indexes nothing). */
const answered = (stream: number, status: string) => (frames: Frame[]) =>
  frames.some((f) =>
    f.stream === stream && f.type === 1 &&
    new HpackDecoder().decode(f.payload).some(([name, value]) =>
      name === ":status" && value === status
    )
  );

Deno.test("body bytes no handler has read are taken from the budget; past it the body ends for its handler", async () => {
  const budget = createMemoryBudget(40 * 1024);
  let release!: () => void;
  const released = new Promise<void>((r) => release = r);
  await withServer({ budget, handler: readsWhenReleased(released) }, async ({ port }) => {
    const raw = await Raw.open(port);
    const kib16 = new Uint8Array(16 * 1024);
    await raw.write(frame(1, 0x4, 1, requestHeaders), frame(0, 0, 1, kib16), frame(0, 0, 1, kib16));
    await raw.write(frame(1, 0x4, 3, requestHeaders), frame(0, 0, 3, kib16));
    await roundTrip(raw);
    // 32 KiB held for stream 1 (and its header fields); stream 3's 16 KiB would pass 40 KiB: they
    // are dropped, and stream 3's body ends there for its handler, which answers the refusal
    // (not a reset, which a client reads as a broken call).
    assert.equal(rstOf(raw.frames, 3), undefined, "stream 3 was reset");
    assert.equal(budget.held, 32 * 1024 + 2 * headerCost(requestFields));
    release();
    assert.ok(await raw.until(answered(3, "503")), "stream 3's handler did not answer 503");
    // Once read, the bytes go back: stream 1 ends and is answered, and the budget is empty.
    await raw.write(frame(0, 0x1, 1));
    assert.ok(await raw.until(responseEnded(1)), "stream 1 was not answered");
    assert.equal(budget.held, 0);
    await raw.close();
  });
  assert.equal(budget.held, 0);
});

/**
 * What the server holds in the budget for a request's header fields while its stream is open:
 * the header list's size as SETTINGS_MAX_HEADER_LIST_SIZE counts it, three times.
 */
function headerCost(fields: HeaderField[]): number {
  return 3 * fields.reduce((size, [name, value]) => size + name.length + value.length + 32, 0);
}

/** Sends a PING and waits for its ACK: the server has handled every frame sent before it. */
async function roundTrip(raw: Raw): Promise<void> {
  const payload = crypto.getRandomValues(new Uint8Array(8));
  await raw.write(frame(6, 0, 0, payload));
  assert.ok(
    await raw.until((f) =>
      f.some((x) => x.type === 6 && (x.flags & 1) && x.payload.every((b, i) => b === payload[i]))
    ),
    "no PING ACK",
  );
}

/** `promise`, or a rejection after `ms` (only so that a broken server cannot hang the test). */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    promise,
    new Promise<T>((_, reject) => timer = setTimeout(() => reject(new Error(what)), ms)),
  ]).finally(() => clearTimeout(timer));
}

const pathOf = (req: { headers: readonly HeaderField[] }) =>
  req.headers.find(([name]) => name === ":path")?.[1];
const withPath = (path: string) =>
  hpackEncode(requestFields.map(([name, value]) => [name, name === ":path" ? path : value]));

Deno.test("past maxStreams a stream of any connection is refused, and that is no reset", async () => {
  let open!: () => void;
  const gate = new Promise<void>((r) => open = r);
  // Busy streams: whole requests whose handlers work (here, wait) before they answer.
  const busy: H2Handler = async (req, res) => {
    for await (const _ of req.body) { /* read */ }
    await gate;
    res.headers([[":status", "200"]], true);
  };
  await withServer({ maxStreams: 3, handler: busy }, async ({ port }) => {
    const a = await Raw.open(port);
    const b = await Raw.open(port);
    await a.write(frame(1, 0x5, 1, requestHeaders), frame(1, 0x5, 3, requestHeaders));
    await b.write(frame(1, 0x5, 1, requestHeaders));
    await roundTrip(a);
    await roundTrip(b);
    // 300 more at once: all refused, and (unlike resets the peer provokes, 200 a second) never
    // the connection's end.
    const more: Uint8Array[] = [];
    for (let id = 3; id <= 601; id += 2) more.push(frame(1, 0x5, id, requestHeaders));
    await b.write(concat(more));
    assert.ok(await b.until((f) => rstOf(f, 601)), "stream 601 was not refused");
    for (let id = 3; id <= 601; id += 2) assert.equal(rstCode(b.frames, id), 0x7, `stream ${id}`);
    await roundTrip(b);
    assert.equal(goaway(b.frames), undefined);
    assert.equal(rstOf(a.frames, 1) ?? rstOf(a.frames, 3) ?? rstOf(b.frames, 1), undefined);
    // Once they are answered, their places are free.
    open();
    for (const [raw, id] of [[a, 1], [a, 3], [b, 1]] as const) {
      assert.ok(await raw.until(responseEnded(id)), `stream ${id} was not answered`);
    }
    await b.write(frame(1, 0x5, 603, requestHeaders));
    assert.ok(await b.until(responseEnded(603)), "stream 603 was not answered");
    assert.equal(rstOf(b.frames, 603), undefined);
    await Promise.all([a.close(), b.close()]);
  });
});

Deno.test("at maxStreams the stream that waited on its peer longest makes room", async () => {
  const reasons = new Map<number, unknown>();
  let open!: () => void;
  const gate = new Promise<void>((r) => open = r);
  const handler: H2Handler = async (req, res) => {
    try {
      for await (const _ of req.body) { /* read */ }
      if (pathOf(req) === "/busy") await gate;
      res.headers([[":status", "200"]], true);
    } catch (error) {
      reasons.set(req.streamId, error);
    }
  };
  await withServer({ maxStreams: 2, stallMs: 0, handler }, async ({ port }) => {
    // Two requests whose bodies have not ended; stream 1 was active last.
    const stalled = await Raw.open(port);
    await stalled.write(frame(1, 0x4, 1, requestHeaders), frame(1, 0x4, 3, requestHeaders));
    await stalled.write(frame(0, 0, 1, new Uint8Array(5)));
    await roundTrip(stalled);
    // Whole requests from another connection, which keep working: the first takes the place of
    // stream 3, the second that of stream 1.
    const caller = await Raw.open(port);
    const busy = withPath("/busy");
    await caller.write(frame(1, 0x5, 1, busy));
    assert.ok(await stalled.until((f) => rstOf(f, 3)), "no stream made room");
    assert.equal(rstCode(stalled.frames, 3), 0x8); // CANCEL
    assert.equal((reasons.get(3) as DOMException | undefined)?.name, "AbortError");
    await roundTrip(stalled);
    assert.equal(rstOf(stalled.frames, 1), undefined, "the stream active last made room first");
    await caller.write(frame(1, 0x5, 3, busy));
    assert.ok(await stalled.until((f) => rstOf(f, 1)), "the second stream made no room");
    assert.equal(rstCode(stalled.frames, 1), 0x8);
    // Now only streams that work are left: a third is refused.
    await caller.write(frame(1, 0x5, 5, busy));
    assert.ok(await caller.until((f) => rstOf(f, 5)), "the third stream was not refused");
    assert.equal(rstCode(caller.frames, 5), 0x7); // REFUSED_STREAM
    open();
    assert.ok(await caller.until((f) => responseEnded(1)(f) && responseEnded(3)(f)));
    assert.equal(rstOf(caller.frames, 1) ?? rstOf(caller.frames, 3), undefined);
    assert.equal(goaway(stalled.frames) ?? goaway(caller.frames), undefined);
    await Promise.all([stalled.close(), caller.close()]);
  });
});

Deno.test("at maxStreams with no stream stalled, the connection holding the most gives up its newest", async () => {
  let open!: () => void;
  const gate = new Promise<void>((r) => open = r);
  const handler: H2Handler = async (req, res) => {
    try {
      for await (const _ of req.body) { /* read */ }
      await gate;
      res.headers([[":status", "200"]], true);
    } catch { /* given up */ }
  };
  await withServer({ maxStreams: 3, stallMs: 0, handler }, async ({ port }) => {
    // A flood of whole requests that keep the process busy holds every place.
    const flood = await Raw.open(port);
    const busy = withPath("/busy");
    await flood.write(frame(1, 0x5, 1, busy), frame(1, 0x5, 3, busy), frame(1, 0x5, 5, busy));
    await roundTrip(flood);
    // Another connection's call takes the place of the flood's newest stream...
    const caller = await Raw.open(port);
    await caller.write(frame(1, 0x5, 1, busy));
    assert.ok(await flood.until((f) => rstOf(f, 5)), "the flood gave up nothing");
    assert.equal(rstCode(flood.frames, 5), 0x8); // CANCEL
    await roundTrip(caller);
    assert.equal(rstOf(caller.frames, 1), undefined, "the caller's call was refused");
    // ...but not more than its fair share: with two places to the caller's one, the flood keeps them.
    await caller.write(frame(1, 0x5, 3, busy));
    assert.ok(await caller.until((f) => rstOf(f, 3)), "the caller's second call was not refused");
    assert.equal(rstCode(caller.frames, 3), 0x7); // REFUSED_STREAM
    open();
    assert.ok(await caller.until(responseEnded(1)), "the caller's call was not answered");
    assert.ok(await flood.until((f) => responseEnded(1)(f) && responseEnded(3)(f)));
    await Promise.all([flood.close(), caller.close()]);
  });
});

Deno.test("at maxStreams a stream younger than stallMs keeps its place: the newcomer is refused", async () => {
  let calls = 0;
  const handler: H2Handler = async (req, res) => {
    calls++;
    try {
      for await (const _ of req.body) { /* read */ }
      res.headers([[":status", "200"]], true);
    } catch { /* given up */ }
  };
  await withServer({ maxStreams: 1, stallMs: 60_000, handler }, async ({ port }) => {
    const stalled = await Raw.open(port);
    await stalled.write(frame(1, 0x4, 1, requestHeaders));
    await roundTrip(stalled);
    const caller = await Raw.open(port);
    await caller.write(frame(1, 0x5, 1, requestHeaders));
    assert.ok(await caller.until((f) => rstOf(f, 1)), "the newcomer was not refused");
    assert.equal(rstCode(caller.frames, 1), 0x7); // REFUSED_STREAM: nothing was processed
    await roundTrip(stalled);
    assert.equal(rstOf(stalled.frames, 1), undefined, "the young stream was given up");
    assert.equal(calls, 1, "a refused stream's handler ran");
    await Promise.all([stalled.close(), caller.close()]);
  });
});

Deno.test("a peer whose stalled streams keep being given up for room is cut off", async () => {
  await withServer({ maxStreams: 1, stallMs: 0 }, async ({ port }) => {
    // Each new stream takes the place of the one before it, a reset this peer provoked: past 200
    // a second, the connection ends.
    const churn = await Raw.open(port);
    const streams: Uint8Array[] = [];
    for (let id = 1; id <= 599; id += 2) streams.push(frame(1, 0x4, id, requestHeaders));
    await churn.write(concat(streams));
    assert.equal(await churn.untilClosed(5000), true, "the churning peer was not cut off");
    assert.equal(goawayCode(churn.frames), 0xb); // ENHANCE_YOUR_CALM
    assert.ok(churn.frames.filter((f) => f.type === 3).every((f) => rstCode([f], f.stream) === 8));
    // The place is free for others.
    const other = await Raw.open(port);
    await other.write(frame(1, 0x5, 1, requestHeaders));
    assert.ok(await other.until(responseEnded(1)), "another peer was not served");
    await Promise.all([churn.close(), other.close()]);
  });
});

Deno.test("a request body that stops advancing is reset, whether or not its handler reads", async () => {
  const reasons = new Map<number, unknown>();
  const handler: H2Handler = async (req, res) => {
    try {
      if (pathOf(req) === "/reads") {
        for await (const _ of req.body) { /* read */ }
      } else {
        // Reads nothing; waits for the stream to end.
        await new Promise((r) => req.signal.addEventListener("abort", r, { once: true }));
        throw req.signal.reason;
      }
      res.headers([[":status", "200"]], true);
    } catch (error) {
      reasons.set(req.streamId, error);
    }
  };
  const options = { handler, minBodyBytesPerSecond: 1000, bodyGraceMs: 300, bodyTimeoutMs: 60_000 };
  await withServer(options, async ({ port }) => {
    const raw = await Raw.open(port);
    const reads = withPath("/reads");
    const ignores = withPath("/ignores");
    // 1: no body at all, its handler waiting for one; 3: ten bytes and no more, its handler not
    // reading.
    await raw.write(
      frame(1, 0x4, 1, reads),
      frame(1, 0x4, 3, ignores),
      frame(0, 0, 3, new Uint8Array(10)),
    );
    // 5: its whole stream window (256 KiB) at once, to a handler that does not read: it cannot
    // send more, and that is not its fault.
    const window: Uint8Array[] = [frame(1, 0x4, 5, ignores)];
    for (let i = 0; i < 16; i++) window.push(frame(0, 0, 5, new Uint8Array(16 * 1024)));
    await raw.write(concat(window));
    // 7: keeps sending, 200 bytes every 40 ms (5 times the minimum), for five grace periods.
    await raw.write(frame(1, 0x4, 7, reads));
    const start = Date.now();
    while (Date.now() - start < 1500) {
      await raw.write(frame(0, 0, 7, new Uint8Array(200)));
      await new Promise((r) => setTimeout(r, 40));
    }
    await raw.write(frame(0, 0x1, 7));
    assert.ok(await raw.until(responseEnded(7)), "the stream that kept sending was not answered");
    assert.equal(rstOf(raw.frames, 7), undefined, "the stream that kept sending was reset");
    assert.ok(await raw.until((f) => rstOf(f, 1) && rstOf(f, 3), 5000), "a stalled body stayed");
    assert.equal(rstCode(raw.frames, 1), 0x8); // CANCEL
    assert.equal(rstCode(raw.frames, 3), 0x8);
    for (const id of [1, 3]) {
      assert.equal((reasons.get(id) as DOMException | undefined)?.name, "TimeoutError", `${id}`);
    }
    assert.equal(rstOf(raw.frames, 5), undefined, "a stream our window held back was reset");
    assert.equal(goaway(raw.frames), undefined);
    await raw.close();
  });
});

Deno.test("an answer that waits for a window that never opens counts, then is reset", async () => {
  const first: { pending: Promise<void> | undefined; signal: AbortSignal }[] = [];
  // Answers and returns at once; the body waits for the peer's window.
  const handler: H2Handler = (req, res) => {
    res.headers([[":status", "200"]]);
    const pending = res.data(new Uint8Array(1024));
    res.trailers([["x-done", "1"]]);
    first.push({ pending, signal: req.signal });
  };
  const zeroWindow = settingsPayload([0x4, 0]);
  const options = { handler, windowTimeoutMs: 300, maxConcurrentStreams: 1 };
  await withServer(options, async ({ port }) => {
    const zero = await Raw.open(port, { settings: zeroWindow });
    await zero.write(frame(1, 0x5, 1, requestHeaders));
    assert.ok(await zero.until((f) => f.some((x) => x.type === 1 && x.stream === 1)));
    assert.ok(first[0]?.pending, "the response did not wait");
    // While its answer waits, the stream counts: the connection's next one is refused.
    await zero.write(frame(1, 0x5, 3, requestHeaders));
    assert.ok(await zero.until((f) => rstOf(f, 3)), "stream 3 was not refused");
    assert.equal(rstCode(zero.frames, 3), 0x7);
    // Then the answer nobody takes is given up: reset, its write resolved, its place freed.
    assert.ok(await zero.until((f) => rstOf(f, 1), 5000), "the waiting answer was never reset");
    assert.equal(rstCode(zero.frames, 1), 0x8); // CANCEL
    assert.equal((first[0].signal.reason as DOMException).name, "TimeoutError");
    await within(first[0].pending, 5000, "the waiting write never resolved");
    assert.equal(zero.frames.some((f) => f.type === 0 && f.stream === 1), false);
    await zero.write(frame(1, 0x5, 5, requestHeaders));
    assert.ok(await zero.until((f) => f.some((x) => x.type === 1 && x.stream === 5)));
    assert.equal(rstOf(zero.frames, 5), undefined, "no place after the reset");
    await zero.close();
  });
  // It counts in the server too: at maxStreams, another connection's call takes its place.
  first.length = 0;
  await withServer({ handler, maxStreams: 1, stallMs: 0 }, async ({ port }) => {
    const zero = await Raw.open(port, { settings: zeroWindow });
    await zero.write(frame(1, 0x5, 1, requestHeaders));
    assert.ok(await zero.until((f) => f.some((x) => x.type === 1 && x.stream === 1)));
    const other = await Raw.open(port);
    await other.write(frame(1, 0x5, 1, requestHeaders));
    assert.ok(await other.until(responseEnded(1)), "the other connection's call was not served");
    assert.ok(await zero.until((f) => rstOf(f, 1)), "the waiting answer kept its place");
    assert.equal(rstCode(zero.frames, 1), 0x8);
    await within(first[0]!.pending!, 5000, "the waiting write never resolved");
    await Promise.all([zero.close(), other.close()]);
  });
});

Deno.test("a peer that asks for control frames and does not read them is cut off", async () => {
  let written = 0;
  const big: H2Handler = async (req, res) => {
    res.headers([[":status", "200"]]);
    const chunk = new Uint8Array(64 * 1024);
    while (written < 64 * 1024 * 1024 && !req.signal.aborted) {
      await res.data(chunk);
      written += chunk.length;
    }
  };
  const ping = frame(6, 0, 0, new Uint8Array(8));
  const pings = (n: number) => concat(Array.from({ length: n }, () => ping));
  const acks = (f: Frame[]) => f.filter((x) => x.type === 6 && (x.flags & 1)).length;
  const options = { handler: big, maxControlFrames: 50, maxOutputBytes: 64 * 1024 };
  await withServer({ ...options, writeTimeoutMs: 60_000 }, async ({ port }) => {
    // A peer that reads may send any number of PINGs, 40 at a time.
    const reader = await Raw.open(port);
    for (let round = 1; round <= 6; round++) {
      await reader.write(pings(40));
      assert.ok(await reader.until((f) => acks(f) >= 40 * round), `round ${round}`);
    }
    assert.equal(goaway(reader.frames), undefined);
    assert.equal(reader.closed, false);
    // 200 at once: more answers queued than the cap.
    const burst = await Raw.open(port);
    await burst.write(pings(200));
    assert.equal(await burst.untilClosed(5000), true, "a PING flood was not cut off");
    assert.equal(goawayCode(burst.frames), 0xb); // ENHANCE_YOUR_CALM
    // A peer that does not read: a response fills the socket, then PINGs come a few at a time.
    const stuck = await Raw.open(port, { settings: wideSettings, read: false });
    await stuck.write(...wideOpen, frame(1, 0x5, 1, requestHeaders));
    for (let last = -1, deadline = Date.now() + 10_000; written !== last;) {
      assert.ok(Date.now() < deadline, "the response never waited for the socket");
      last = written;
      await new Promise((r) => setTimeout(r, 200));
    }
    for (let i = 0; i < 12; i++) {
      await stuck.write(pings(5));
      await new Promise((r) => setTimeout(r, 10));
    }
    stuck.pump();
    assert.equal(await stuck.untilClosed(5000), true, "a peer that read nothing was not cut off");
    // Its GOAWAY came after what the socket held, if the peer read that in time.
    assert.ok([undefined, 0xb].includes(goawayCode(stuck.frames)));
    await Promise.all([reader.close(), burst.close(), stuck.close()]);
  });
});

Deno.test("unread bytes are held for the connection and the peer's address, each up to its share", async () => {
  const budget = createMemoryBudget(100 * 1024, 40 * 1024);
  let release!: () => void;
  const released = new Promise<void>((r) => release = r);
  const holders: (readonly string[])[] = [];
  await withServer({ budget, handler: readsWhenReleased(released, holders) }, async ({ port }) => {
    const a = await Raw.open(port);
    const kib12 = new Uint8Array(12 * 1024);
    await a.write(
      frame(1, 0x4, 1, requestHeaders),
      frame(0, 0, 1, kib12),
      frame(0, 0, 1, kib12),
      frame(0, 0, 1, kib12),
    );
    await roundTrip(a);
    const [connection, address] = holders[0] ?? [];
    assert.match(connection ?? "", /^h2:\d+$/);
    assert.equal(address, "addr:127.0.0.1");
    const held = 36 * 1024 + headerCost(requestFields);
    assert.equal(budget.heldBy(connection!), held);
    assert.equal(budget.heldBy(address!), held);
    // A second stream's 8 KiB would take the connection past its share (40 KiB): its body ends
    // there for its handler.
    await a.write(frame(1, 0x4, 3, requestHeaders), frame(0, 0, 3, new Uint8Array(8 * 1024)));
    await roundTrip(a);
    // So would another connection's from the same address, though the budget has room.
    const b = await Raw.open(port);
    await b.write(frame(1, 0x4, 1, requestHeaders), frame(0, 0, 1, new Uint8Array(8 * 1024)));
    await roundTrip(b);
    assert.equal(holders.length, 3);
    assert.notEqual(holders[2]![0], connection);
    assert.equal(holders[2]![1], address);
    assert.equal(budget.heldBy(address!), held + 2 * headerCost(requestFields));
    release();
    assert.ok(await a.until(answered(3, "503")), "stream 3 was not refused");
    assert.ok(await b.until(answered(1, "503")), "the other connection's stream was not refused");
    // Once read, everything goes back, and the holders hold nothing.
    await a.write(frame(0, 0x1, 1));
    assert.ok(await a.until(responseEnded(1)), "stream 1 was not answered");
    assert.ok(await a.until(answered(1, "200")), "stream 1 was refused");
    assert.equal(budget.held, 0);
    assert.equal(budget.heldBy(connection!), 0);
    assert.equal(budget.heldBy(address!), 0);
    await Promise.all([a.close(), b.close()]);
  });
  assert.equal(budget.held, 0);
});

Deno.test("a request's header fields are held in the budget while its stream is open", async () => {
  const budget = createMemoryBudget(1024 * 1024, 100 * 1024);
  let calls = 0;
  const handler: H2Handler = async (req, res) => {
    calls++;
    for await (const _ of req.body) { /* read */ }
    res.headers([[":status", "200"]], true);
  };
  await withServer({ budget, handler }, async ({ port }) => {
    const raw = await Raw.open(port);
    // 1,900 references to one HPACK table entry: a 2 KB block that decodes to a 64 KiB header
    // list, which held ~176 KB of heap per stream. Three times its size passes the 100 KiB share.
    const bomb = concat([
      requestHeaders,
      Uint8Array.of(0x40, 1, 0x61, 0), // "a: " (incremental indexing: table entry 62)
      new Uint8Array(1900).fill(0xbe), // that entry, 1,900 times
    ]);
    assert.ok(bomb.length < 2100);
    await raw.write(frame(1, 0x5, 1, bomb));
    assert.ok(await raw.until((f) => rstOf(f, 1) || responseEnded(1)(f)));
    assert.equal(rstCode(raw.frames, 1), 0xb, "the header bomb was not refused");
    assert.equal(calls, 0);
    // An ordinary request is served, and holds its fields only while its stream is open.
    await raw.write(frame(1, 0x4, 3, requestHeaders));
    await roundTrip(raw);
    assert.equal(budget.held, headerCost(requestFields));
    await raw.write(frame(0, 0x1, 3));
    assert.ok(await raw.until(responseEnded(3)), "stream 3 was not answered");
    assert.equal(budget.held, 0);
    assert.equal(calls, 1);
    assert.equal(goaway(raw.frames), undefined);
    await raw.close();
  });
});
