/**
 * A connect-es `Transport` that makes gRPC calls over our HTTP/2 client (lib/transport): what the
 * gateway calls the services with, and the token service the oauth-registry. connect-es's
 * `createClient` sits on top, so callers use the generated service types as with any transport;
 * connect-es's gRPC helpers read the answers (`findTrailerError`: status, message and error
 * details from `grpc-status-details-bin`; the HTTP-status mapping).
 *
 * Why not connect-es's own gRPC transport (`@connectrpc/connect-node`): it runs on `node:http2`,
 * whose client in Deno 2.9 can abort the whole process when connections close (the bug that made
 * us write our own server), and per call it runs a pipeline of async iterables and linked
 * AbortControllers: with it, the gateway served 1,692-1,742 GETs/s where Connect over `fetch`
 * served 2,239-2,543 (one session on our 2-core machines). This transport makes unary calls only,
 * which is all the gateway and the token service make.
 *
 * Failures: a backend that cannot be reached, or whose connection fails during a call, is
 * UNAVAILABLE; a call the server did not process (a refused stream, a stream above a GOAWAY's last
 * id) is sent once more on another connection; a call past its deadline is DEADLINE_EXCEEDED and
 * its stream is reset.
 *
 * @module
 */

import {
  type DescMessage,
  type DescMethod,
  fromBinary,
  type Message,
  type MessageInitShape,
  type MessageShape,
} from "@bufbuild/protobuf";
import { encodeMessage, lengthPrefixed } from "./encode.ts";
import { Code, ConnectError, type Transport } from "@connectrpc/connect";
import { codeFromHttpStatus, findTrailerError } from "@connectrpc/connect/protocol-grpc";
import { deadlines } from "../platform/mod.ts";
import {
  Cancellation,
  createH2Client,
  H2ClientError,
  type H2ClientResponse,
  type HeaderField,
} from "../transport/mod.ts";

/** Options of {@link createGrpcTransport}. */
export interface GrpcTransportOptions {
  /** The server, `http://host:port` (h2c with prior knowledge). */
  baseUrl: string;
  /** Connections kept at most (default 2). */
  connections?: number;
  /** The largest response message accepted (default 8 MiB). */
  maxResponseBytes?: number;
  /** The deadline of a call that names none. */
  defaultTimeoutMs?: number;
}

/** What a call that is late or abandoned is answered with (made once: no stack per call). */
const timedOut = new ConnectError(
  "The backend service did not answer in time",
  Code.DeadlineExceeded,
);
const abandoned = new ConnectError("the call was cancelled", Code.Canceled);

/**
 * The size on the wire of each response message the transport returned (a list page can be a
 * megabyte, which the gateway holds again as JSON and takes from its memory budget).
 */
const wireSizes = new WeakMap<object, number>();

/** The size on the wire of a message a {@link createGrpcTransport} transport returned. */
export function wireSizeOf(message: object): number {
  return wireSizes.get(message) ?? 0;
}

const postField: HeaderField = [":method", "POST"];
const contentTypeField: HeaderField = ["content-type", "application/grpc+proto"];
const teField: HeaderField = ["te", "trailers"];

/** The `grpc-timeout` of a deadline in milliseconds (at most 8 digits, gRPC's limit). */
function grpcTimeout(ms: number): string {
  return `${Math.min(Math.max(1, Math.ceil(ms)), 99_999_999)}m`;
}

function headerFields(header: HeadersInit | undefined, out: HeaderField[]): void {
  if (header === undefined) return;
  if (header instanceof Headers) header.forEach((value, name) => out.push([name, value]));
  else if (Array.isArray(header)) {
    for (const [name, value] of header) out.push([name!.toLowerCase(), value!]);
  } else {
    const record = header as Record<string, string>;
    for (const name in record) {
      if (Object.hasOwn(record, name)) out.push([name.toLowerCase(), record[name]!]);
    }
  }
}

function headersOf(fields: readonly HeaderField[]): Headers {
  const headers = new Headers();
  for (const [name, value] of fields) headers.append(name, value);
  return headers;
}

/** The `grpc-status` among fields, if there is one. */
function statusOf(fields: readonly HeaderField[]): string | undefined {
  for (const [name, value] of fields) if (name === "grpc-status") return value;
  return undefined;
}

/**
 * The error of an answer that is not a success: its HTTP status, else the status in its headers
 * (trailers-only, as our servers send errors) or its trailers, with the headers as metadata.
 */
function failure(res: H2ClientResponse): ConnectError {
  const responseHeader = headersOf(res.headers);
  if (res.status !== 200) {
    return new ConnectError(
      `HTTP ${res.status} from the backend service`,
      codeFromHttpStatus(res.status),
      responseHeader,
    );
  }
  const headerError = findTrailerError(responseHeader);
  if (headerError) return headerError;
  const trailerError = findTrailerError(headersOf(res.trailers));
  if (trailerError) {
    responseHeader.forEach((value, name) => trailerError.metadata.append(name, value));
    return trailerError;
  }
  return new ConnectError("The backend service answered with a malformed response", Code.Internal);
}

/** An answer whose message was not decoded (see {@link GrpcTransport.unaryBytes}). */
export interface UndecodedAnswer {
  /** The message's Protobuf bytes. */
  bytes: Uint8Array;
  /** The response headers. */
  readonly header: Headers;
}

/** A connect-es transport that can also hand over an answer undecoded. */
export interface GrpcTransport extends Transport {
  /**
   * A unary call whose answer is not decoded, for a caller that reads the bytes itself (the
   * gateway writes some answers' JSON straight from them); {@link decodeAnswer} decodes them as
   * `unary` does. Fails as `unary` fails.
   */
  unaryBytes(
    method: DescMethod,
    header: HeadersInit | undefined,
    input: Message,
    timeoutMs: number | undefined,
  ): Promise<UndecodedAnswer>;
}

/** Whether a transport is a {@link GrpcTransport}. */
export function isGrpcTransport(transport: Transport): transport is GrpcTransport {
  return typeof (transport as Partial<GrpcTransport>).unaryBytes === "function";
}

/** An answer's message from its bytes; INTERNAL when they are not one. */
export function decodeAnswer<Desc extends DescMessage>(
  schema: Desc,
  bytes: Uint8Array,
): MessageShape<Desc> {
  try {
    return fromBinary(schema, bytes);
  } catch (error) {
    throw new ConnectError(
      "The backend service answered with a malformed message",
      Code.Internal,
      undefined,
      undefined,
      error,
    );
  }
}

/** Creates a gRPC transport to one server. */
export function createGrpcTransport(options: GrpcTransportOptions): GrpcTransport {
  const url = new URL(options.baseUrl);
  if (url.protocol !== "http:") {
    throw new Error(`Cannot call ${options.baseUrl}: only http:// (h2c) is supported`);
  }
  const client = createH2Client({
    hostname: url.hostname.replace(/^\[(.*)\]$/, "$1"),
    port: Number(url.port || 80),
    connections: options.connections ?? 2,
    maxResponseBytes: (options.maxResponseBytes ?? 8 * 1024 * 1024) + 64 * 1024,
  });
  const prefix = url.pathname.replace(/\/$/, "");
  // The fields every call sends, made once (the HTTP/2 client only reads them).
  const paths = new WeakMap<object, HeaderField>();
  let lastTimeout: { ms: number; field: HeaderField } = { ms: -1, field: ["grpc-timeout", ""] };

  async function send(
    fields: HeaderField[],
    body: Uint8Array,
    signal: Cancellation,
  ): Promise<H2ClientResponse> {
    try {
      return await client.request(fields, body, signal);
    } catch (error) {
      // Not processed (a connection retired or refused meanwhile): once more, on another one.
      if (error instanceof H2ClientError && !error.processed && !signal.aborted) {
        return await client.request(fields, body, signal);
      }
      throw error;
    }
  }

  /** A unary call: the answer's message bytes (without the length prefix), and the fields. */
  async function call(
    method: DescMethod,
    signal: AbortSignal | undefined,
    callTimeoutMs: number | undefined,
    header: HeadersInit | undefined,
    input: unknown,
  ): Promise<{ bytes: Uint8Array; res: H2ClientResponse }> {
    const timeoutMs = callTimeoutMs ?? options.defaultTimeoutMs;
    let path = paths.get(method);
    if (path === undefined) {
      paths.set(method, path = [":path", `${prefix}/${method.parent.typeName}/${method.name}`]);
    }
    const fields: HeaderField[] = [postField, path, contentTypeField, teField];
    if (timeoutMs !== undefined) {
      // Callers give the same timeout call after call: its field is made once.
      if (timeoutMs !== lastTimeout.ms) {
        lastTimeout = { ms: timeoutMs, field: ["grpc-timeout", grpcTimeout(timeoutMs)] };
      }
      fields.push(lastTimeout.field);
    }
    headerFields(header, fields);
    const body = lengthPrefixed(
      encodeMessage(method.input, input as MessageInitShape<DescMessage>),
    );

    const cancellation = new Cancellation();
    const timer = timeoutMs === undefined
      ? undefined
      : deadlines.after(timeoutMs, () => cancellation.abort(timedOut));
    const onAbort = () => cancellation.abort(abandoned);
    if (signal?.aborted) onAbort();
    else signal?.addEventListener("abort", onAbort, { once: true });
    let res: H2ClientResponse;
    try {
      res = await send(fields, body, cancellation);
    } catch (error) {
      if (error === timedOut || error === abandoned) {
        const known = error as ConnectError;
        throw new ConnectError(known.rawMessage, known.code);
      }
      throw new ConnectError(
        "The backend service is unreachable",
        Code.Unavailable,
        undefined,
        undefined,
        error,
      );
    } finally {
      timer?.cancel();
      signal?.removeEventListener("abort", onAbort);
    }

    // A success (200, no status among the headers, grpc-status 0 in the trailers) is read from
    // the fields as they came: Headers objects are made only if the caller asks for them.
    if (
      res.status !== 200 || statusOf(res.headers) !== undefined || statusOf(res.trailers) !== "0"
    ) {
      throw failure(res);
    }
    const bytes = res.body;
    const length = bytes.length >= 5
      ? new DataView(bytes.buffer, bytes.byteOffset, 5).getUint32(1)
      : -1;
    if (bytes[0] !== 0 || length !== bytes.length - 5) {
      throw new ConnectError(
        "The backend service answered with a malformed response",
        Code.Internal,
      );
    }
    return { bytes: bytes.subarray(5), res };
  }

  return {
    async unaryBytes(method, header, input, timeoutMs) {
      const { bytes, res } = await call(method, undefined, timeoutMs, header, input);
      let responseHeader: Headers | undefined;
      return {
        bytes,
        get header() {
          return responseHeader ??= headersOf(res.headers);
        },
      };
    },
    async unary(method, signal, callTimeoutMs, header, input) {
      const { bytes, res } = await call(method, signal, callTimeoutMs, header, input);
      const output = decodeAnswer(method.output, bytes);
      wireSizes.set(output, bytes.length + 5);
      let responseHeader: Headers | undefined;
      let responseTrailer: Headers | undefined;
      return {
        stream: false,
        service: method.parent,
        method,
        get header() {
          return responseHeader ??= headersOf(res.headers);
        },
        message: output,
        get trailer() {
          return responseTrailer ??= headersOf(res.trailers);
        },
      };
    },
    stream() {
      return Promise.reject(
        new ConnectError("This transport makes no streaming calls", Code.Unimplemented),
      );
    },
  };
}
