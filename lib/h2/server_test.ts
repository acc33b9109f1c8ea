/**
 * The HTTP/2 server under what broke node:http2 in Deno (clients closing connections), under
 * protocol abuse from a raw socket, and with responses larger than the flow-control windows.
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import {
  Health,
  HealthCheckRequestSchema,
  HealthCheckResponse_ServingStatus as Status,
  HealthListResponseSchema,
} from "../../gen/grpc/health/v1/health_pb.ts";
import { bindGrpc, serveGrpc } from "../grpc_server.ts";
import { grpcChurn } from "../testing/grpc_client.ts";
import { hpackEncode } from "./hpack.ts";

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

function call(client: grpc.Client, path: string, body: Uint8Array): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    client.makeUnaryRequest(
      path,
      (b: Buffer) => b,
      (b: Buffer) => b,
      Buffer.from(body),
      { deadline: Date.now() + 10_000 },
      (err, res) => (err ? reject(err) : resolve(res!)),
    );
  });
}

const check = (client: grpc.Client) =>
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
    const last = new grpc.Client(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
    await check(last);
    last.close();
  } finally {
    await server.close(0);
  }
});

Deno.test("a response larger than the flow-control windows arrives whole", async () => {
  const server = healthServer();
  const client = new grpc.Client(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
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

const requestHeaders = hpackEncode([
  [":method", "POST"],
  [":scheme", "http"],
  [":path", "/grpc.health.v1.Health/Check"],
  [":authority", "localhost"],
  ["content-type", "application/grpc"],
  ["te", "trailers"],
]);

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
    const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
    await check(client);
    client.close();
  };
  try {
    // Not HTTP/2 at all: closed without a word.
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    await conn.write(new TextEncoder().encode("GET / HTTP/1.1\r\nhost: x\r\n\r\n"));
    const read = await conn.read(new Uint8Array(1024)).catch(() => null);
    assert.ok(read === null || read > 0);
    conn.close();
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
