/**
 * The HTTP/2 client against our server (concurrency past the peer's stream limit, flow control in
 * both directions, deadlines, connection age, a server that goes away), against a raw socket that
 * sends what a server may send (padding, CONTINUATION, refused streams, GOAWAY) and what it must
 * not (an oversized frame), and against nghttp2's server (Node.js's `node:http2`).
 */

import assert from "node:assert/strict";
import { concat } from "./bytes.ts";
import { Cancellation, createH2Client, H2ClientError } from "./h2_client.ts";
import { ErrorCode, Flag, frame, FrameType, preface, readU32, u32 } from "./h2_frame.ts";
import { type H2Handler, type H2Server, serveH2 } from "./h2_server.ts";
import { type HeaderField, HpackDecoder, hpackEncode } from "./hpack.ts";

const post = (path: string): HeaderField[] => [[":method", "POST"], [":path", path]];

function server(handler: H2Handler, maxConcurrentStreams = 100): H2Server {
  return serveH2({ port: 0, hostname: "127.0.0.1", handler, maxConcurrentStreams });
}

async function readAll(body: AsyncIterable<Uint8Array>): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  for await (const chunk of body) chunks.push(chunk.slice());
  return concat(chunks);
}

/** Echoes the body back with a header and a trailer saying its length. */
const echo: H2Handler = async (req, res) => {
  const body = await readAll(req.body);
  const path = req.headers.find(([n]) => n === ":path")![1];
  res.headers([[":status", "200"], ["x-path", path]]);
  const pending = res.data(body);
  if (pending) await pending;
  res.trailers([["x-length", String(body.length)]]);
};

Deno.test("createH2Client() gets headers, body and trailers, many calls at once", async () => {
  const s = server(echo, 10);
  const client = createH2Client({ hostname: "127.0.0.1", port: s.port, connections: 2 });
  try {
    // 300 calls, at most 2 x 10 streams at once: the rest wait for a stream to end.
    const answers = await Promise.all(
      Array.from(
        { length: 300 },
        (_, i) => client.request(post(`/echo/${i}`), new TextEncoder().encode(`body ${i}`)),
      ),
    );
    answers.forEach((res, i) => {
      assert.equal(res.status, 200);
      assert.deepEqual(res.headers.find(([n]) => n === "x-path"), ["x-path", `/echo/${i}`]);
      assert.equal(new TextDecoder().decode(res.body), `body ${i}`);
      assert.deepEqual(res.trailers, [["x-length", String(`body ${i}`.length)]]);
    });
  } finally {
    client.close();
    await s.close(1000);
  }
});

Deno.test("createH2Client() sends and receives bodies larger than every window", async () => {
  const s = server(echo);
  const client = createH2Client({ hostname: "127.0.0.1", port: s.port });
  try {
    // The server's windows are 256 KiB a stream and 1 MiB a connection; 3 MiB each way, twice.
    const big = new Uint8Array(3 * 1024 * 1024).map((_, i) => i % 251);
    const [a, b] = await Promise.all([
      client.request(post("/a"), big),
      client.request(post("/b"), big),
    ]);
    assert.deepEqual(a.body, big);
    assert.deepEqual(b.body, big);
  } finally {
    client.close();
    await s.close(1000);
  }
});

Deno.test("createH2Client() refuses a response larger than maxResponseBytes", async () => {
  const s = server((_req, res) => {
    res.headers([[":status", "200"]]);
    void res.data(new Uint8Array(200_000), true);
  });
  const client = createH2Client({ hostname: "127.0.0.1", port: s.port, maxResponseBytes: 100_000 });
  try {
    await assert.rejects(
      client.request(post("/big"), new Uint8Array(0)),
      (e) => e instanceof H2ClientError && /too large/.test(e.message),
    );
    // The connection goes on.
    const s2 = await client.request(post("/big"), new Uint8Array(0)).catch((e) => e);
    assert.ok(s2 instanceof H2ClientError);
  } finally {
    client.close();
    await s.close(1000);
  }
});

for (const kind of ["an AbortSignal", "a Cancellation"]) {
  Deno.test(`createH2Client(): a call aborted by ${kind} resets its stream and rejects with the reason`, async () => {
    let serverSaw: unknown;
    const s = server(async (req, res) => {
      await new Promise<void>((resolve) => req.signal.addEventListener("abort", () => resolve()));
      serverSaw = req.signal.reason;
      res.headers([[":status", "200"]], true);
    });
    const client = createH2Client({ hostname: "127.0.0.1", port: s.port });
    try {
      const controller = new AbortController();
      const cancellation = new Cancellation();
      const call = client.request(
        post("/slow"),
        new Uint8Array(0),
        kind === "a Cancellation" ? cancellation : controller.signal,
      );
      setTimeout(() => {
        controller.abort(new Error("deadline"));
        cancellation.abort(new Error("deadline"));
      }, 50);
      await assert.rejects(call, /deadline/);
      for (let i = 0; i < 100 && serverSaw === undefined; i++) {
        await new Promise((r) => setTimeout(r, 10));
      }
      assert.match(String(serverSaw), /reset/);
    } finally {
      client.close();
      await s.close(1000);
    }
  });
}

Deno.test("Cancellation: its listeners run once, at the abort; one removed or added after it never runs", () => {
  const c = new Cancellation();
  const ran: string[] = [];
  const a = () => ran.push("a");
  const b = () => ran.push("b");
  c.addEventListener("abort", a);
  c.addEventListener("abort", b);
  c.removeEventListener("abort", a);
  c.abort("why");
  c.abort("again");
  c.addEventListener("abort", a);
  assert.deepEqual(ran, ["b"]);
  assert.equal(c.aborted, true);
  assert.equal(c.reason, "why");
});

Deno.test("createH2Client(): no server is a failure the caller may retry", async () => {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  const client = createH2Client({ hostname: "127.0.0.1", port });
  try {
    await assert.rejects(
      client.request(post("/x"), new Uint8Array(0)),
      (e) => e instanceof H2ClientError && e.processed === false,
    );
  } finally {
    client.close();
  }
});

Deno.test("createH2Client() opens a new connection once one is older than maxConnectionAgeMs", async () => {
  const seen = new Set<string>();
  const s = server((req, res) => {
    seen.add(req.headers.find(([n]) => n === "x-call")![1]);
    res.headers([[":status", "200"]], true);
  });
  let accepted = 0;
  // Count connections through a relay in front of the server.
  const relay = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  (async () => {
    for await (const conn of relay) {
      accepted++;
      const upstream = await Deno.connect({ hostname: "127.0.0.1", port: s.port });
      conn.readable.pipeTo(upstream.writable).catch(() => {});
      upstream.readable.pipeTo(conn.writable).catch(() => {});
    }
  })().catch(() => {});
  let clock = Date.UTC(2030, 0, 1);
  const client = createH2Client({
    hostname: "127.0.0.1",
    port: (relay.addr as Deno.NetAddr).port,
    connections: 1,
    maxConnectionAgeMs: 100,
    now: () => clock,
  });
  try {
    const req = (i: number) =>
      client.request([...post("/x"), ["x-call", `${i}`]], new Uint8Array(0));
    await req(1);
    clock += 100;
    await req(2);
    assert.equal(accepted, 1);
    clock += 1;
    await req(3);
    assert.equal(accepted, 2);
    assert.equal(seen.size, 3);
  } finally {
    client.close();
    relay.close();
    await s.close(1000);
  }
});

/**
 * A raw HTTP/2 server on a socket: reads the client's preface and frames, and answers each
 * request's HEADERS with what `respond` writes.
 */
function rawServer(
  respond: (streamId: number, write: (bytes: Uint8Array) => Promise<void>) => Promise<void>,
) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns: Deno.Conn[] = [];
  (async () => {
    for await (const conn of listener) {
      conns.push(conn);
      const write = async (bytes: Uint8Array) => {
        let o = 0;
        while (o < bytes.length) o += await conn.write(bytes.subarray(o));
      };
      (async () => {
        await write(frame(FrameType.SETTINGS, 0, 0));
        let buffer: Uint8Array = new Uint8Array(0);
        const chunk = new Uint8Array(65536);
        let prefaceSeen = false;
        for (;;) {
          const n = await conn.read(chunk);
          if (n === null) return;
          buffer = concat([buffer, chunk.subarray(0, n)]);
          if (!prefaceSeen) {
            if (buffer.length < preface.length) continue;
            buffer = buffer.subarray(preface.length);
            prefaceSeen = true;
          }
          while (buffer.length >= 9) {
            const length = (buffer[0]! << 16) | (buffer[1]! << 8) | buffer[2]!;
            if (buffer.length < 9 + length) break;
            const type = buffer[3]!;
            const flags = buffer[4]!;
            const id = readU32(buffer, 5) & 0x7fffffff;
            buffer = buffer.subarray(9 + length);
            if (type === FrameType.SETTINGS && !(flags & Flag.ACK)) {
              await write(frame(FrameType.SETTINGS, Flag.ACK, 0));
            }
            if (type === FrameType.HEADERS) await respond(id, write);
          }
        }
      })().catch(() => {});
    }
  })().catch(() => {});
  return {
    port: (listener.addr as Deno.NetAddr).port,
    close() {
      listener.close();
      for (const c of conns) {
        try {
          c.close();
        } catch { /* closed */ }
      }
    },
  };
}

Deno.test("createH2Client() reads padded DATA and a header block split over CONTINUATION", async () => {
  const raw = rawServer(async (id, write) => {
    const block = hpackEncode([[":status", "200"], ["x-long", "v".repeat(100)]]);
    await write(frame(FrameType.HEADERS, 0, id, block.subarray(0, 10)));
    await write(frame(FrameType.CONTINUATION, Flag.END_HEADERS, id, block.subarray(10)));
    // DATA with 4 bytes of padding: pad length, data, padding.
    const data = concat([Uint8Array.of(4), new TextEncoder().encode("hello"), new Uint8Array(4)]);
    await write(frame(FrameType.DATA, Flag.PADDED | Flag.END_STREAM, id, data));
  });
  const client = createH2Client({ hostname: "127.0.0.1", port: raw.port });
  try {
    const res = await client.request(post("/p"), new Uint8Array(0));
    assert.equal(res.status, 200);
    assert.equal(res.headers.find(([n]) => n === "x-long")![1], "v".repeat(100));
    assert.equal(new TextDecoder().decode(res.body), "hello");
  } finally {
    client.close();
    raw.close();
  }
});

Deno.test("createH2Client(): a refused stream and a stream past GOAWAY were not processed", async () => {
  let calls = 0;
  const raw = rawServer(async (id, write) => {
    calls++;
    if (calls === 1) {
      await write(frame(FrameType.RST_STREAM, 0, id, u32(ErrorCode.REFUSED_STREAM)));
    } else if (calls === 2) {
      await write(frame(FrameType.GOAWAY, 0, 0, concat([u32(0), u32(ErrorCode.NO_ERROR)])));
    } else {
      await write(frame(FrameType.RST_STREAM, 0, id, u32(ErrorCode.INTERNAL_ERROR)));
    }
  });
  const client = createH2Client({ hostname: "127.0.0.1", port: raw.port, connections: 1 });
  try {
    const processed = (e: unknown) => e instanceof H2ClientError ? e.processed : undefined;
    assert.equal(
      processed(await client.request(post("/1"), new Uint8Array(0)).catch((e) => e)),
      false,
    );
    assert.equal(
      processed(await client.request(post("/2"), new Uint8Array(0)).catch((e) => e)),
      false,
    );
    // After the GOAWAY, a new connection; a reset with another code may have been processed.
    assert.equal(
      processed(await client.request(post("/3"), new Uint8Array(0)).catch((e) => e)),
      true,
    );
    assert.equal(calls, 3);
  } finally {
    client.close();
    raw.close();
  }
});

Deno.test("createH2Client() drops a connection whose server sends a frame over 16 KiB", async () => {
  const raw = rawServer(async (id, write) => {
    await write(frame(FrameType.HEADERS, Flag.END_HEADERS, id, hpackEncode([[":status", "200"]])));
    await write(frame(FrameType.DATA, Flag.END_STREAM, id, new Uint8Array(20_000)));
  });
  const client = createH2Client({ hostname: "127.0.0.1", port: raw.port });
  try {
    await assert.rejects(
      client.request(post("/x"), new Uint8Array(0)),
      /maximum frame size/,
    );
  } finally {
    client.close();
    raw.close();
  }
});

Deno.test("createH2Client() talks to nghttp2's server (Node.js node:http2)", async () => {
  const script = `
    const http2 = require("node:http2");
    const server = http2.createServer();
    server.on("stream", (stream, headers) => {
      const chunks = [];
      stream.on("data", (c) => chunks.push(c));
      stream.on("end", () => {
        const body = Buffer.concat(chunks);
        stream.respond({ ":status": 200, "x-method": headers[":method"] }, { waitForTrailers: true });
        stream.on("wantTrailers", () => stream.sendTrailers({ "x-length": String(body.length) }));
        stream.end(body);
      });
    });
    server.listen(0, "127.0.0.1", () => console.log(server.address().port));
  `;
  const child = new Deno.Command("node", {
    args: ["-e", script],
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const port = Number((await reader.read()).value!.trim());
  const client = createH2Client({ hostname: "127.0.0.1", port });
  try {
    const big = new Uint8Array(300_000).map((_, i) => i % 7);
    const [small, large] = await Promise.all([
      client.request(post("/small"), new TextEncoder().encode("hi")),
      client.request(post("/large"), big),
    ]);
    assert.equal(small.status, 200);
    assert.deepEqual(small.headers.find(([n]) => n === "x-method"), ["x-method", "POST"]);
    assert.equal(new TextDecoder().decode(small.body), "hi");
    assert.deepEqual(small.trailers, [["x-length", "2"]]);
    assert.deepEqual(large.body, big);
  } finally {
    client.close();
    child.kill();
    await reader.cancel();
    await child.status;
  }
});

Deno.test("the client's header blocks decode as they were given", () => {
  const fields: HeaderField[] = [
    [":method", "POST"],
    ["authorization", `Bearer ${"x".repeat(400)}`],
    ["x-unicode", "é"],
  ];
  const decoded = new HpackDecoder().decode(hpackEncode(fields));
  // Values are latin1 strings of the UTF-8 bytes, as HTTP/2 servers see them.
  assert.deepEqual(decoded.slice(0, 2), fields.slice(0, 2));
  assert.equal(decoded[2]![1], "\u00c3\u00a9");
});
