import assert from "node:assert/strict";
import { createMemoryBudget } from "../platform/mod.ts";
import { RequestFraming, serveGuarded } from "./http_guard.ts";

const encode = (s: string) => new TextEncoder().encode(s);

/** Feeds `text` one byte at a time (the hardest split) and returns the phases seen after each. */
function feedBytes(framing: RequestFraming, text: string): string[] {
  const phases: string[] = [];
  for (const b of encode(text)) {
    framing.feed(new Uint8Array([b]));
    phases.push(framing.phase);
  }
  return phases;
}

Deno.test("RequestFraming follows heads, Content-Length bodies and chunked bodies, byte by byte", () => {
  const framing = new RequestFraming();
  assert.equal(framing.phase, "idle");
  const get = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n";
  const phases = feedBytes(framing, get);
  assert.deepEqual(new Set(phases.slice(0, -1)), new Set(["head"]));
  assert.equal(framing.phase, "idle");
  assert.equal(framing.completed, 1);

  feedBytes(framing, "POST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\n");
  assert.equal(framing.phase, "body");
  feedBytes(framing, "hell");
  assert.equal(framing.phase, "body");
  feedBytes(framing, "o");
  assert.equal(framing.phase, "idle");
  assert.equal(framing.completed, 2);

  feedBytes(framing, "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n");
  assert.equal(framing.phase, "body");
  feedBytes(framing, "10\r\n0123456789abcdef\r\n0\r\nTrailer: x\r\n");
  assert.equal(framing.phase, "body");
  feedBytes(framing, "\r\n");
  assert.equal(framing.phase, "idle");
  assert.equal(framing.completed, 3);
});

Deno.test("RequestFraming reads pipelined requests given in one chunk", () => {
  const framing = new RequestFraming();
  framing.feed(encode(
    "GET / HTTP/1.1\r\n\r\nPOST / HTTP/1.1\r\ncontent-length: 2\r\n\r\nokGET / HTTP/1.1\r\nA: b",
  ));
  assert.equal(framing.completed, 2);
  assert.equal(framing.phase, "head");
});

Deno.test("RequestFraming gives up on what it cannot follow, and Deno.serve answers it", () => {
  for (
    const head of [
      "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
      "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      "GET / HTTP/1.1\r\nX: " + "a".repeat(70 * 1024),
    ]
  ) {
    const framing = new RequestFraming();
    framing.feed(encode(head));
    assert.equal(framing.phase, "opaque", head.slice(0, 60));
  }
});

Deno.test("RequestFraming: blank lines between requests do not start a head", () => {
  const framing = new RequestFraming();
  framing.feed(encode("\r\n\r\n"));
  assert.equal(framing.phase, "idle");
  framing.feed(encode("GET / HTTP/1.1\r\n\r\n"));
  assert.equal(framing.completed, 1);
});

/** Reads until the server closes the connection (null) or `ms` pass (timeout). */
async function closedWithin(conn: Deno.Conn, ms: number): Promise<"closed" | "open"> {
  const buffer = new Uint8Array(1024);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<"open">((r) => timer = setTimeout(() => r("open"), ms));
  const read = (async () => {
    try {
      while ((await conn.read(buffer)) !== null) { /* discard */ }
    } catch { /* reset counts as closed */ }
    return "closed" as const;
  })();
  const result = await Promise.race([read, timeout]);
  clearTimeout(timer);
  return result;
}

Deno.test("serveGuarded closes a half-sent head, a stalled body and an idle connection", async () => {
  const server = serveGuarded(
    {
      port: 0,
      hostname: "127.0.0.1",
      headersTimeoutMs: 200,
      bodyTimeoutMs: 200,
      idleTimeoutMs: 400,
    },
    async (req) => new Response(await req.text().catch(() => "")),
  );
  try {
    const port = server.addr.port;
    const half = await Deno.connect({ port });
    await half.write(encode("GET / HTTP/1.1\r\nHost: x\r\n"));
    const body = await Deno.connect({ port });
    await body.write(encode("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc"));
    const idle = await Deno.connect({ port });
    // A complete request on the idle connection is answered; the connection then idles.
    await idle.write(encode("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok"));
    const answer = new Uint8Array(1024);
    const n = await idle.read(answer);
    assert.match(new TextDecoder().decode(answer.subarray(0, n ?? 0)), /^HTTP\/1.1 200[^]*ok$/);

    const results = await Promise.all([half, body, idle].map((c) => closedWithin(c, 5000)));
    assert.deepEqual(results, ["closed", "closed", "closed"]);
    assert.deepEqual(
      { headers: server.closedBy.headers, body: server.closedBy.body, idle: server.closedBy.idle },
      { headers: 1, body: 1, idle: 1 },
    );
    for (const c of [half, body, idle]) c.close();
  } finally {
    await server.shutdown();
  }
});

Deno.test("serveGuarded answers past maxConnections with 503, Retry-After and the JSON error body", async () => {
  const server = serveGuarded(
    { port: 0, hostname: "127.0.0.1", maxConnections: 2 },
    () => new Response("ok"),
  );
  const held: Deno.Conn[] = [];
  try {
    const port = server.addr.port;
    for (let i = 0; i < 2; i++) held.push(await Deno.connect({ port }));
    while (server.connections < 2) await new Promise((r) => setTimeout(r, 10));
    const res = await fetch(`http://127.0.0.1:${port}/`);
    assert.equal(res.status, 503);
    assert.equal(res.headers.get("retry-after"), "1");
    const body = await res.json();
    assert.equal(body.error.code, "unavailable");
    assert.equal(server.closedBy.cap, 1);
    // Once a held connection goes, a new one is served.
    held.pop()!.close();
    while (server.connections > 1) await new Promise((r) => setTimeout(r, 10));
    const ok = await fetch(`http://127.0.0.1:${port}/`);
    assert.equal(await ok.text(), "ok");
  } finally {
    for (const c of held) c.close();
    await server.shutdown();
  }
});

Deno.test("serveGuarded relays keep-alive requests, large bodies and chunked uploads unchanged", async () => {
  const server = serveGuarded(
    { port: 0, hostname: "127.0.0.1" },
    async (req) => {
      const bytes = new Uint8Array(await req.arrayBuffer());
      let sum = 0;
      for (const b of bytes) sum = (sum + b) % 65_521;
      return Response.json({ method: req.method, length: bytes.length, sum });
    },
  );
  try {
    const url = `http://127.0.0.1:${server.addr.port}/echo`;
    const random = crypto.getRandomValues(new Uint8Array(64 * 1024));
    const large = new Uint8Array(3 * 1024 * 1024 + 7);
    for (let i = 0; i < large.length; i += random.length) {
      large.set(random.subarray(0, large.length - i), i);
    }
    let sum = 0;
    for (const b of large) sum = (sum + b) % 65_521;
    for (let i = 0; i < 3; i++) {
      const res = await fetch(url, { method: "POST", body: large });
      assert.deepEqual(await res.json(), { method: "POST", length: large.length, sum });
    }
    const chunked = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(encode("hello, "));
        c.enqueue(encode("world"));
        c.close();
      },
    });
    const res = await fetch(url, { method: "PUT", body: chunked });
    const expected = [...encode("hello, world")].reduce((s, b) => (s + b) % 65_521, 0);
    assert.deepEqual(await res.json(), { method: "PUT", length: 12, sum: expected });
  } finally {
    await server.shutdown();
  }
});

Deno.test("serveGuarded takes held heads from the budget and answers 503 past it", async () => {
  const budget = createMemoryBudget(4 * 1024);
  const server = serveGuarded(
    { port: 0, hostname: "127.0.0.1", budget },
    () => new Response("ok"),
  );
  try {
    const conn = await Deno.connect({ port: server.addr.port });
    await conn.write(encode("GET / HTTP/1.1\r\nX: " + "a".repeat(3 * 1024) + "\r\n"));
    while (budget.held === 0) await new Promise((r) => setTimeout(r, 10));
    assert.ok(budget.held >= 3 * 1024, `held ${budget.held}`);
    await conn.write(encode("Y: " + "b".repeat(2 * 1024) + "\r\n"));
    const answer = new Uint8Array(4096);
    let text = "";
    for (let n = await conn.read(answer); n !== null; n = await conn.read(answer)) {
      text += new TextDecoder().decode(answer.subarray(0, n));
    }
    assert.match(text, /^HTTP\/1.1 503 [^]*retry-after: 1[^]*memory budget/);
    conn.close();
    while (budget.held > 0) await new Promise((r) => setTimeout(r, 10));
    // A whole head is passed on and the budget given back.
    assert.equal(await (await fetch(`http://127.0.0.1:${server.addr.port}/`)).text(), "ok");
    assert.equal(budget.held, 0);
  } finally {
    await server.shutdown();
  }
});
