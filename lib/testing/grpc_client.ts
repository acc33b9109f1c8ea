/**
 * gRPC calls with a stock @grpc/grpc-js client over HTTP/2 cleartext, using the protobuf-es
 * schemas as (de)serializers: what an internal caller in any language would do.
 *
 * The client runs on Node.js, one long-lived child process per channel
 * (lib/testing/grpc_channel.mjs), not in this process: under Deno, grpc-js runs on Deno's
 * node:http2 client, which now and then aborts its whole process (nghttp2's assertion
 * `stream->closed_next == NULL` in find_stream_on_goaway_func, or SIGSEGV), and a test file with
 * it. Calls and answers cross as JSON lines on the child's stdin and stdout.
 *
 * @module
 */

import {
  create,
  type DescMessage,
  type DescMethodUnary,
  fromBinary,
  type MessageInitShape,
  type MessageShape,
  toBinary,
} from "@bufbuild/protobuf";
import { Buffer } from "node:buffer";

/** A metadata value: text, or bytes (a Buffer) for keys ending in `-bin`. */
export type GrpcMetadataValue = string | Buffer;

/**
 * Metadata as grpc-js shows it (the subset the tests read): keys in lower case, each with its
 * values in the order they arrived; values of keys ending in `-bin` are Buffers.
 */
export class GrpcMetadata {
  readonly #entries: Map<string, GrpcMetadataValue[]>;

  /** Metadata with these keys and values. */
  constructor(entries: Record<string, GrpcMetadataValue[]> = {}) {
    this.#entries = new Map(Object.entries(entries).map(([k, v]) => [k.toLowerCase(), [...v]]));
  }

  /** Every value of `key` (none: an empty array). */
  get(key: string): GrpcMetadataValue[] {
    return [...(this.#entries.get(key.toLowerCase()) ?? [])];
  }

  /** The first value of each key. */
  getMap(): Record<string, GrpcMetadataValue> {
    const out: Record<string, GrpcMetadataValue> = {};
    for (const [k, v] of this.#entries) if (v.length > 0) out[k] = v[0]!;
    return out;
  }

  /** Every key with all its values. */
  toJSON(): Record<string, GrpcMetadataValue[]> {
    return Object.fromEntries([...this.#entries].map(([k, v]) => [k, [...v]]));
  }
}

/** A gRPC failure: the status code, message and trailing metadata. */
export interface GrpcFailure {
  /** The gRPC status code. */
  code: number;
  /** The status message. */
  details: string;
  /** Trailers, including `grpc-status-details-bin` when the server sent details. */
  metadata: GrpcMetadata;
}

const statusNames = [
  "OK",
  "CANCELLED",
  "UNKNOWN",
  "INVALID_ARGUMENT",
  "DEADLINE_EXCEEDED",
  "NOT_FOUND",
  "ALREADY_EXISTS",
  "PERMISSION_DENIED",
  "RESOURCE_EXHAUSTED",
  "FAILED_PRECONDITION",
  "ABORTED",
  "OUT_OF_RANGE",
  "UNIMPLEMENTED",
  "INTERNAL",
  "UNAVAILABLE",
  "DATA_LOSS",
  "UNAUTHENTICATED",
];

/** The error a failed call rejects with: a {@link GrpcFailure}, and an Error for the test log. */
/** The failure of a call that must fail (an Error when it succeeds instead). */
export async function grpcFailure(call: Promise<unknown>): Promise<GrpcFailure> {
  try {
    await call;
  } catch (error) {
    return error as GrpcFailure;
  }
  throw new Error("expected the call to fail");
}

export class GrpcCallError extends Error implements GrpcFailure {
  /** The gRPC status code. */
  readonly code: number;
  /** The status message. */
  readonly details: string;
  /** The trailers. */
  readonly metadata: GrpcMetadata;

  /** A failure with this status (the message reads like grpc-js's: `5 NOT_FOUND: details`). */
  constructor(code: number, details: string, metadata: GrpcMetadata) {
    super(`${code} ${statusNames[code] ?? "UNKNOWN"}: ${details}`);
    this.name = "GrpcCallError";
    this.code = code;
    this.details = details;
    this.metadata = metadata;
  }
}

/** Metadata sent with a call: a value or several per key; `-bin` keys take bytes. */
export type OutgoingMetadata = Record<
  string,
  string | Uint8Array | ReadonlyArray<string | Uint8Array>
>;

/** One call on a {@link GrpcChannel}, with messages as bytes. */
export interface RawCall {
  /** The kind of method (unary unless said). */
  kind?: "unary" | "server_streaming" | "client_streaming" | "bidi_streaming";
  /** `/package.Service/Method`. */
  path: string;
  /** The serialized request messages: exactly one for unary and server-streaming calls. */
  requests: Uint8Array[];
  /** Request metadata. */
  metadata?: OutgoingMetadata;
  /** A deadline this many milliseconds after the call starts (none if not given). */
  timeoutMs?: number;
  /** Cancels the call once this many responses arrived. */
  cancelAfter?: number;
}

/** How a {@link RawCall} ended. */
export interface RawOutcome {
  /** The responses received, serialized. */
  responses: Buffer[];
  /** The status code (0: OK). */
  code: number;
  /** The status message. */
  details: string;
  /** The trailers (for a trailers-only answer, its headers). */
  metadata: GrpcMetadata;
}

/** One stock grpc-js channel, on Node.js, to one server. */
export interface GrpcChannel {
  /** Makes a call; resolves with its outcome whatever the status, rejects if it was not made. */
  call(call: RawCall): Promise<RawOutcome>;
  /** Closes the channel: calls under way still get their answers, new calls are refused. */
  close(): void;
  /**
   * What the channel's process wrote on stderr lately (its last 8,000 characters): grpc-js's
   * `transport` trace, which names each connection made and why one ended (a GOAWAY and its code,
   * a socket closed, an error). For a test to show when a call failed with UNAVAILABLE.
   */
  log(): string;
}

interface Answer {
  id: number | null;
  error?: string;
  responses?: string[];
  code?: number;
  details?: string;
  metadata?: Record<string, string[]>;
}

function encodeMetadata(metadata: OutgoingMetadata): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [key, value] of Object.entries(metadata)) {
    const values = typeof value === "string" || value instanceof Uint8Array ? [value] : value;
    out[key] = values.map((v) => {
      if (key.endsWith("-bin")) {
        return Buffer.from(typeof v === "string" ? new TextEncoder().encode(v) : v).toString(
          "base64",
        );
      }
      if (typeof v !== "string") throw new TypeError(`metadata ${key}: bytes need a -bin key`);
      return v;
    });
  }
  return out;
}

function decodeMetadata(metadata: Record<string, string[]> = {}): GrpcMetadata {
  return new GrpcMetadata(
    Object.fromEntries(
      Object.entries(metadata).map((
        [k, v],
      ) => [k, k.endsWith("-bin") ? v.map((b) => Buffer.from(b, "base64")) : v]),
    ),
  );
}

/**
 * Opens a channel to `host:port` (no TLS): a Node.js child process running stock grpc-js
 * (lib/testing/grpc_channel.mjs), which lives until {@link GrpcChannel.close}. If that process
 * dies, every call under way and every later call rejects with what it wrote on stderr. grpc-js
 * traces its connections there (a few lines per connection, see {@link GrpcChannel.log}).
 */
export function grpcChannel(address: string): GrpcChannel {
  const child = new Deno.Command("node", {
    args: [new URL("./grpc_channel.mjs", import.meta.url).pathname, address],
    env: { GRPC_TRACE: "transport", GRPC_VERBOSITY: "DEBUG" },
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  const encoder = new TextEncoder();
  const waiting = new Map<
    number,
    { resolve: (a: Answer) => void; reject: (e: Error) => void }
  >();
  let nextId = 1;
  let closed = false;
  let gone: Error | undefined;
  let stderr = "";

  const readStderr = (async () => {
    for await (const text of child.stderr.pipeThrough(new TextDecoderStream())) {
      stderr = (stderr + text).slice(-8000);
    }
  })();
  (async () => {
    let buffered = "";
    for await (const text of child.stdout.pipeThrough(new TextDecoderStream())) {
      buffered += text;
      for (let nl = buffered.indexOf("\n"); nl >= 0; nl = buffered.indexOf("\n")) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        if (line.trim() === "") continue;
        const answer = JSON.parse(line) as Answer;
        const entry = answer.id === null ? undefined : waiting.get(answer.id);
        if (!entry) continue;
        waiting.delete(answer.id!);
        if (answer.error !== undefined) {
          entry.reject(new Error(`grpc_channel.mjs: ${answer.error}`));
        } else entry.resolve(answer);
      }
    }
  })().catch(() => {}).finally(async () => {
    const status = await child.status;
    await readStderr.catch(() => {});
    if (waiting.size > 0 || !closed) {
      gone = new Error(
        `grpc_channel.mjs (${address}) ended (exit code ${status.code}, signal ${status.signal})` +
          (stderr ? `:\n${stderr}` : ""),
      );
    }
    for (const entry of waiting.values()) entry.reject(gone!);
    waiting.clear();
  });

  return {
    call(call) {
      if (closed) return Promise.reject(new Error(`the channel to ${address} is closed`));
      if (gone) return Promise.reject(gone);
      const id = nextId++;
      const line = JSON.stringify({
        id,
        kind: call.kind ?? "unary",
        path: call.path,
        requests: call.requests.map((r) => Buffer.from(r).toString("base64")),
        metadata: encodeMetadata(call.metadata ?? {}),
        ...(call.timeoutMs === undefined ? {} : { timeoutMs: call.timeoutMs }),
        ...(call.cancelAfter === undefined ? {} : { cancelAfter: call.cancelAfter }),
      }) + "\n";
      return new Promise<Answer>((resolve, reject) => {
        waiting.set(id, { resolve, reject });
        writer.write(encoder.encode(line)).catch((error) => {
          waiting.delete(id);
          reject(gone ?? error);
        });
      }).then((answer) => ({
        responses: (answer.responses ?? []).map((b) => Buffer.from(b, "base64")),
        code: answer.code ?? 2,
        details: answer.details ?? "",
        metadata: decodeMetadata(answer.metadata),
      }));
    },
    close() {
      if (closed) return;
      closed = true;
      writer.close().catch(() => {});
    },
    log: () => stderr,
  };
}

/** Makes unary calls to one server. */
export interface GrpcTestClient {
  /** Calls a method; resolves with the response or rejects with a {@link GrpcFailure}. */
  call<I extends DescMessage, O extends DescMessage>(
    method: DescMethodUnary<I, O>,
    request: MessageInitShape<I>,
    metadata?: Record<string, string>,
  ): Promise<MessageShape<O>>;
  /** Closes the channel. */
  close(): void;
}

/** Connects to `host:port` without TLS; each call has a 10 s deadline. */
export function grpcTestClient(address: string): GrpcTestClient {
  const channel = grpcChannel(address);
  return {
    async call(method, request, metadata = {}) {
      const outcome = await channel.call({
        path: `/${method.parent.typeName}/${method.name}`,
        requests: [toBinary(method.input, create(method.input, request))],
        metadata,
        timeoutMs: 10_000,
      });
      if (outcome.code !== 0) {
        throw new GrpcCallError(outcome.code, outcome.details, outcome.metadata);
      }
      return fromBinary(method.output, outcome.responses[0]!);
    },
    close() {
      channel.close();
    },
  };
}

/** What {@link grpcChurn} does: channels opened, used and closed, round after round. */
export interface ChurnOptions<I extends DescMessage> {
  /** `host:port`. */
  address: string;
  /** The method called. */
  method: DescMethodUnary<I, DescMessage>;
  /** Its request. */
  request: MessageInitShape<I>;
  /** Metadata sent with every call. */
  metadata?: Record<string, string>;
  /** Rounds. */
  rounds: number;
  /** Channels per round, all at once. */
  clients: number;
  /** Calls per channel, one after another, before it closes. */
  calls: number;
}

/**
 * Connection churn from stock @grpc/grpc-js running on Node.js (lib/testing/grpc_churn.mjs, see
 * there why not in this process): resolves with the number of calls answered and their codes.
 */
export async function grpcChurn<I extends DescMessage>(
  options: ChurnOptions<I>,
): Promise<{ calls: number; codes: Record<string, number> }> {
  const child = new Deno.Command("node", {
    args: [new URL("./grpc_churn.mjs", import.meta.url).pathname],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(JSON.stringify({
    address: options.address,
    path: `/${options.method.parent.typeName}/${options.method.name}`,
    requestBase64: Buffer.from(
      toBinary(options.method.input, create(options.method.input, options.request)),
    )
      .toString("base64"),
    metadata: options.metadata ?? {},
    rounds: options.rounds,
    clients: options.clients,
    calls: options.calls,
  })));
  await writer.close();
  const out = await child.output();
  if (!out.success) {
    throw new Error(`grpc_churn.mjs failed: ${new TextDecoder().decode(out.stderr)}`);
  }
  return JSON.parse(new TextDecoder().decode(out.stdout));
}
