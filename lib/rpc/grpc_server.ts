/**
 * gRPC on our HTTP/2 server (lib/transport): connect-es's universal handlers for the gRPC
 * protocol, served to stock gRPC clients (grpc-js, grpcurl, C-core, any language). connect-es does
 * the protocol (framing, deadlines, status trailers, error details, unary and streaming methods);
 * this adapter maps an HTTP/2 stream onto a universal request and writes the universal response
 * back, and adds what a public port needs beyond the protocol:
 *
 * - a request that is not gRPC gets 405 (not POST; with `Allow: POST`) or 415 (not
 *   `application/grpc`) with a body saying what this port is (browsers, curl and h2spec expect a
 *   body); a gRPC call of messages other than protobuf (`application/grpc+json`) and an unknown
 *   method UNIMPLEMENTED;
 * - every request message's bytes are taken from the process's memory budget as they arrive, in the
 *   share of the connection and of the peer's address (RESOURCE_EXHAUSTED with ErrorInfo
 *   MEMORY_BUDGET_EXCEEDED when they do not fit); a health check's small message takes nothing;
 * - `grpc-message` is percent-encoded as PROTOCOL-HTTP2.md says ({@link encodeGrpcMessage}), so
 *   that every client reads exactly the message that was written;
 * - an error the handler throws that is not a ConnectError is answered INTERNAL "internal error"
 *   (connect-es's rule): its message never leaks.
 *
 * @module
 */

import type { DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, type Interceptor, type ServiceImpl } from "@connectrpc/connect";
import {
  createAsyncIterable,
  type UniversalHandler,
  type UniversalServerRequest,
} from "@connectrpc/connect/protocol";
import { parseTimeout, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import {
  boundedText,
  createMemoryBudget,
  type Deadline,
  deadlines,
  type Lease,
  type MemoryBudget,
  overBudget,
  peerHeader,
  smallRequestBytes,
} from "../platform/mod.ts";
import {
  bodyOverBudget,
  type H2Request,
  type H2Response,
  type H2Server,
  type HeaderField,
  release,
  serveH2,
} from "../transport/mod.ts";
import {
  type Binding,
  cancelled,
  createRouter,
  deadlineExceeded,
  dropDistantDeadline,
  invokeUnary,
  messageCostFactor,
  requestFault,
  type Routes,
  type UnaryRoute,
} from "./router.ts";
import { lengthPrefixed } from "./encode.ts";

/**
 * What a byte of gRPC request message costs: one more than on the Connect port, because
 * connect-es's envelope decoder copies each message once more out of the buffer this adapter
 * hands it.
 */
const grpcCostFactor = messageCostFactor + 1;

/**
 * Pairs a service with a partial implementation, type-checking the handlers it has (the methods
 * it lacks answer UNIMPLEMENTED): for tests and small servers; a service binds all its methods
 * with lib/rpc/router.ts's `bind`.
 */
export function bindGrpc<S extends DescService>(
  service: S,
  impl: Partial<ServiceImpl<S>>,
): Binding {
  return { service, impl: impl as Partial<ServiceImpl<DescService>> };
}

/** Options of {@link serveGrpc} and {@link serveGrpcRoutes}. */
export interface GrpcServerOptions {
  /** Port (0 = any free port). */
  port: number;
  /** Address (default 0.0.0.0). */
  hostname?: string;
  /** Largest request message accepted, in bytes (default 4 MiB). */
  maxReceiveMessageBytes?: number;
  /** The process's memory budget (default: unbounded). */
  budget?: MemoryBudget;
  /** Interceptors of every call, outermost first ({@link serveGrpc} only). */
  interceptors?: Interceptor[];
  /** Reports connection-level failures. */
  onError?: (error: unknown) => void;
}

/** A running gRPC server. */
export interface GrpcServer {
  /** The bound port. */
  port: number;
  /** Stops accepting calls and lets calls in flight finish, for at most `graceMs`. */
  close(graceMs: number): Promise<void>;
}

/** Serves the bindings through a connect-es router of their own (for tests and small servers). */
export function serveGrpc(bindings: Binding[], options: GrpcServerOptions): GrpcServer {
  const router = createRouter(bindings, {
    interceptors: options.interceptors ?? [],
    maxMessageBytes: options.maxReceiveMessageBytes ?? 4 * 1024 * 1024,
  });
  return serveGrpcRoutes(router, options);
}

/** Serves the gRPC protocol of connect-es routes on our HTTP/2 server. */
export function serveGrpcRoutes(served: Routes, options: GrpcServerOptions): GrpcServer {
  const routes = new Map<string, UniversalHandler>();
  for (const h of served.handlers) {
    if (h.protocolNames.includes("grpc")) routes.set(h.requestPath, h);
  }
  const budget = options.budget ?? createMemoryBudget(Number.MAX_SAFE_INTEGER);
  const maxBytes = options.maxReceiveMessageBytes ?? 4 * 1024 * 1024;
  const server: H2Server = serveH2({
    port: options.port,
    hostname: options.hostname ?? "0.0.0.0",
    handler: (req, res) => handle(routes, served.unary, budget, maxBytes, req, res),
    budget,
    ...(options.onError ? { onError: options.onError } : {}),
  });
  return { port: server.port, close: (graceMs) => server.close(graceMs) };
}

/** What `grpc-message` must percent-encode; see {@link encodeGrpcMessage}. */
const unsafeInGrpcMessage = /[^\x20-\x24\x26-\x7e]|^ | $/gu;
const utf8 = new TextEncoder();

/**
 * Percent-encodes a status message for `grpc-message` as gRPC's PROTOCOL-HTTP2.md specifies: the
 * UTF-8 bytes outside 0x20-0x7E, and `%` itself, become `%XX` (upper-case hex); every other
 * character is sent as it is. A space at either end is encoded too (HTTP/2 field values must not
 * begin or end with whitespace, and peers may strip it). Lone surrogates become U+FFFD.
 *
 * connect-es encodes with `encodeURIComponent`, which the grammar allows but which also encodes
 * space and `;/?:@&=+$,#`; @grpc/grpc-js decodes with `decodeURI`, which leaves the escapes of
 * `;/?:@&=+$,#` as they are, so its users would read `%3A` for `:`. With only the bytes the spec
 * requires encoded, every decoder in use returns the message as written: grpc-js's `decodeURI`,
 * connect-es's `decodeURIComponent`, C-core's and Go's percent-decoding.
 */
export function encodeGrpcMessage(message: string): string {
  return message.replace(unsafeInGrpcMessage, (ch) => {
    let out = "";
    for (const byte of utf8.encode(ch.toWellFormed())) {
      out += `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
    }
    return out;
  });
}

/** A gRPC call's content type, whatever its messages' format (`+json`, a custom one). */
const anyGrpcContentType = /^application\/grpc([+;]|$)/i;
/** The gRPC content types served: protobuf messages. */
const grpcContentType = /^application\/grpc(\+proto)?(;.*)?$/i;
const notGrpc = new TextEncoder().encode(
  "This is a gRPC server: requests are POST with content-type application/grpc.\n",
);
const baseHeaders: readonly HeaderField[] = [
  [":status", "200"],
  ["content-type", "application/grpc"],
  ["grpc-accept-encoding", "identity"],
];

function decodeMessage(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}

/**
 * The fields of a Headers object, with `grpc-message` re-encoded the spec's way and bounded as the
 * services' messages are (lib/platform's `boundedText`): a message this adapter or connect-es
 * writes may quote what the caller sent (a method's name, a `grpc-timeout`), and percent-encoded,
 * a long one grew past what clients take in trailers (Node's 64 KiB header list: grpc-js dropped
 * them and its call waited for its deadline).
 */
function fields(headers: Headers | undefined, out: HeaderField[]): HeaderField[] {
  headers?.forEach((value, name) => {
    if (name === "content-type" || name === "grpc-accept-encoding") return;
    if (name === "grpc-message") {
      const text = decodeMessage(value);
      if (text !== "") out.push([name, encodeGrpcMessage(boundedText(text))]);
      return;
    }
    out.push([name, value]);
  });
  return out;
}

/**
 * Replaces the status connect-es wrote in `trailer` with `error`'s. Its `grpc-status-details-bin`
 * goes too: setTrailerStatus writes one only for an error with details, and one left over would be
 * a google.rpc.Status of the old code and message, which connect-es clients read before
 * `grpc-status` (grpc-js and grpcio read `grpc-status`: the two would see different statuses).
 */
function replaceStatus(trailer: Headers, error: ConnectError): void {
  trailer.delete("grpc-status-details-bin");
  setTrailerStatus(trailer, error);
}

/** A status sent as trailers-only, before anything reached the handler. */
function trailersOnly(res: H2Response, req: H2Request, error: ConnectError): void {
  res.headers(fields(setTrailerStatus(new Headers(), error), [...baseHeaders]), true);
  drain(req);
}

async function handle(
  routes: Map<string, UniversalHandler>,
  unary: Map<string, UnaryRoute>,
  budget: MemoryBudget,
  maxBytes: number,
  req: H2Request,
  res: H2Response,
): Promise<void> {
  let path = "";
  let method = "";
  let contentType = "";
  const header = new Headers();
  try {
    for (const [name, value] of req.headers) {
      if (name === ":path") path = value;
      else if (name === ":method") method = value;
      else if (name.startsWith(":")) continue;
      else {
        if (name === "content-type") contentType = value;
        // Binary metadata is not read by any handler here; its base64 is not validated.
        if (!name.endsWith("-bin") && name !== peerHeader) header.append(name, value);
      }
    }
    // Who called, for the audit trail: the connection's peer, never what the caller claims.
    const peer = req.holders.find((h) => h.startsWith("addr:"));
    if (peer !== undefined) header.set(peerHeader, peer.slice(5));
  } catch {
    return trailersOnly(res, req, new ConnectError("malformed metadata", Code.InvalidArgument));
  }
  if (method !== "POST" || !anyGrpcContentType.test(contentType)) {
    // Another method is 405 with `Allow` (RFC 9110 15.5.6: gRPC is POST only); a POST of another
    // content type 415, as PROTOCOL-HTTP2.md asks.
    res.headers(
      method === "POST"
        ? [[":status", "415"], ["content-type", "text/plain"]]
        : [[":status", "405"], ["allow", "POST"], ["content-type", "text/plain"]],
    );
    void res.data(notGrpc, true);
    drain(req);
    return;
  }
  // A gRPC call in another message format is a gRPC client's, answered with a gRPC status (an
  // HTTP 415 reads as UNKNOWN to it).
  if (!grpcContentType.test(contentType)) {
    return trailersOnly(
      res,
      req,
      new ConnectError(
        `content-type ${contentType} is not served: messages are protobuf (application/grpc)`,
        Code.Unimplemented,
      ),
    );
  }
  const handler = routes.get(path);
  if (!handler) {
    return trailersOnly(
      res,
      req,
      new ConnectError(`${path.slice(1).replace("/", ".")} is not implemented`, Code.Unimplemented),
    );
  }
  // A client or bidirectional stream sends when its application has something to say.
  const kind = handler.method.methodKind;
  if (kind === "client_streaming" || kind === "bidi_streaming") req.patient();
  const lease = budget.take(0, req.holders);
  if (!lease) return trailersOnly(res, req, overBudget());
  let onCancel: (() => void) | undefined;
  let deadline: Deadline | undefined;
  try {
    let body: AsyncIterable<Uint8Array> = budgeted(
      req.body,
      { kind, maxBytes, lease, budget, path },
      req.holders,
    );
    const route = unary.get(path);
    if (route) {
      const messages: Uint8Array[] = [];
      for await (const message of body) messages.push(message);
      if (await answerUnary(route, messages, maxBytes, header, path, req.signal, res)) return;
      body = createAsyncIterable(messages);
    }
    // The stream's reset by the client or a lost connection: CANCELED for the handler (connect-es
    // passes the signal's reason on as it is, and a handler tells a cancel by its code).
    const cancel = new AbortController();
    onCancel = () => cancel.abort(cancelled);
    req.signal.addEventListener("abort", onCancel, { once: true });
    // The deadline ends the call DEADLINE_EXCEEDED however the handler ends, as gRPC's own servers
    // do: connect-es aborts the handler's signal at the deadline but answers OK when the handler
    // then returns normally (a stream that ends once its signal aborts, as a watch does).
    dropDistantDeadline(header);
    const timeout = parseTimeout(header.get("grpc-timeout"), Number.MAX_SAFE_INTEGER);
    if (timeout.timeoutMs !== undefined) {
      deadline = deadlines.after(timeout.timeoutMs, () => cancel.abort(deadlineExceeded));
    }
    const ureq: UniversalServerRequest = {
      httpVersion: "2.0",
      method,
      url: path,
      header,
      body,
      signal: cancel.signal,
    };
    const ures = await handler(ureq);
    const out: HeaderField[] = [[":status", String(ures.status)]];
    if (ures.status !== 200) {
      res.headers(out, true);
      drain(req);
      return;
    }
    let headersSent = false;
    const responseHeaders = ures.header instanceof Headers ? ures.header : new Headers(ures.header);
    const responseBody = ures.body;
    if (responseBody instanceof Uint8Array) throw new Error("a gRPC response body is a stream");
    if (responseBody) {
      for await (const chunk of responseBody) {
        if (cancel.signal.reason === deadlineExceeded) break;
        if (!headersSent) {
          headersSent = true;
          res.headers(fields(responseHeaders, [...baseHeaders]));
        }
        // Not awaited when queued at once, so the trailers below leave in the same write.
        const pending = res.data(chunk);
        if (pending) await pending;
      }
    }
    const trailer = ures.trailer instanceof Headers ? ures.trailer : new Headers(ures.trailer);
    if (cancel.signal.reason === deadlineExceeded) replaceStatus(trailer, deadlineExceeded);
    const status = trailer.get("grpc-status");
    if (status !== null && status !== "0") {
      const error = requestFault(Number(status), decodeMessage(trailer.get("grpc-message") ?? ""));
      if (error) replaceStatus(trailer, error);
    }
    if (headersSent) res.trailers(fields(trailer, []));
    else res.headers(fields(trailer, fields(responseHeaders, [...baseHeaders])), true);
  } catch (error) {
    const err = error instanceof ConnectError
      ? error
      : new ConnectError("internal error", Code.Internal);
    trailersOnly(res, req, err);
  } finally {
    if (onCancel) req.signal.removeEventListener("abort", onCancel);
    deadline?.cancel();
    lease.release();
  }
}

/**
 * Answers a well-formed unary call through {@link invokeUnary} (see there why): one uncompressed
 * message of at most `maxBytes`, complete, that parses, and a valid `grpc-timeout`. Anything else
 * returns false, unanswered, for connect-es's gRPC handler to answer exactly as it answers it.
 */
async function answerUnary(
  route: UnaryRoute,
  messages: Uint8Array[],
  maxBytes: number,
  header: Headers,
  url: string,
  signal: AbortSignal,
  res: H2Response,
): Promise<boolean> {
  const envelope = messages.length === 1 ? messages[0]! : undefined;
  if (envelope === undefined || envelope.length < 5 || envelope[0] !== 0) return false;
  const length = new DataView(envelope.buffer, envelope.byteOffset, 5).getUint32(1);
  if (length !== envelope.length - 5 || length > maxBytes) return false;
  const timeout = parseTimeout(header.get("grpc-timeout"), Number.MAX_SAFE_INTEGER);
  if (timeout.error) return false;
  const outcome = await invokeUnary(route, envelope.subarray(5), {
    protocolName: "grpc",
    url,
    header,
    timeoutMs: timeout.timeoutMs,
    signal,
  });
  if (outcome === undefined) return false;
  // The call has run: a request of a type without `bytes` fields holds no view of its message.
  if (route.bytesFree) release(envelope);
  const { output, trailer } = outcome;
  if (output === undefined) {
    setTrailerStatus(trailer, outcome.error);
    res.headers(fields(trailer, fields(outcome.header, [...baseHeaders])), true);
    return true;
  }
  const data = lengthPrefixed(output);
  res.headers(fields(outcome.header, [...baseHeaders]));
  // Not awaited when queued at once, so the trailers leave in the same write.
  const pending = res.data(data);
  if (pending) await pending;
  trailer.set("grpc-status", "0");
  res.trailers(fields(trailer, []));
  return true;
}

/** Health checks (`grpc.health.v1.Health`) are never refused for want of budget... */
const healthPath = "/grpc.health.v1.Health/";
/** ...as long as their messages are of the size a health check is (a service name). */
const maxHealthMessage = 1024;
/** The first buffer of a message; it grows (doubling) as the message's bytes arrive. */
const firstBuffer = 16 * 1024;

/**
 * The request body as whole messages: each one's cost is taken from the budget (in the share of
 * the connection's `holders`) as its bytes arrive, not when its 5-byte length prefix announces them,
 * so that a large length declared and never sent holds nothing (one over `maxBytes` is left to
 * connect-es, which refuses it at its prefix). Its bytes go straight into one buffer, grown by
 * doubling up to the message's size, and handed on once complete: the HTTP/2 server's read buffers
 * are never held by a message in transit, and no list of chunks is kept beside the joined copy.
 * For a stream of messages (client and bidi streaming), a message's share is given back when the
 * next one's prefix arrives. A health check's small message takes nothing from the budget.
 */
async function* budgeted(
  body: AsyncIterable<Uint8Array>,
  options: { kind: string; maxBytes: number; lease: Lease; budget: MemoryBudget; path: string },
  holders: readonly string[],
): AsyncGenerator<Uint8Array> {
  const { kind, maxBytes, budget } = options;
  const streaming = kind === "client_streaming" || kind === "bidi_streaming";
  const health = options.path.startsWith(healthPath);
  let current: Lease | undefined;
  const prefix = new Uint8Array(5);
  let prefixSize = 0;
  let message: Uint8Array | undefined; // prefix and body of the message being received
  let size = 0; // the message's whole size, prefix included
  let filled = 0;
  let free = false; // a health check's message: nothing taken
  try {
    for await (const chunk of body) {
      let offset = 0;
      while (offset < chunk.length) {
        if (message === undefined) {
          const take = Math.min(5 - prefixSize, chunk.length - offset);
          prefix.set(chunk.subarray(offset, offset + take), prefixSize);
          prefixSize += take;
          offset += take;
          if (prefixSize < 5) break;
          prefixSize = 0;
          // No compression is negotiated (we accept `identity` only): a compressed message
          // cannot be.
          if (prefix[0] === 1) {
            throw new ConnectError("compressed messages are not supported", Code.Unimplemented);
          }
          // PROTOCOL-HTTP2.md's Compressed-Flag is 0 or 1; any other bit (gRPC-web's trailer
          // flag 0x80 among them) would otherwise be read as an uncompressed message.
          if (prefix[0] !== 0) {
            throw new ConnectError(
              `protocol error: message flags 0x${prefix[0]!.toString(16)} are not defined`,
              Code.InvalidArgument,
            );
          }
          const length = new DataView(prefix.buffer).getUint32(1);
          if (length > maxBytes) {
            // connect-es refuses it at its prefix, without reading its body.
            yield prefix.slice();
            return;
          }
          free = health && length <= maxHealthMessage;
          if (streaming) {
            current?.release();
            current = budget.take(0, holders);
            if (!current) throw overBudget();
          }
          size = 5 + length;
          message = new Uint8Array(Math.min(size, firstBuffer));
          message.set(prefix);
          filled = 5;
        }
        const take = Math.min(size - filled, chunk.length - offset);
        const cost = take * grpcCostFactor;
        const small = (filled + take) * grpcCostFactor <= smallRequestBytes;
        if (!free && !(current ?? options.lease).grow(cost, small)) throw overBudget();
        if (filled + take > message.length) {
          const grown = new Uint8Array(Math.min(size, Math.max(message.length * 2, filled + take)));
          grown.set(message.subarray(0, filled));
          release(message);
          message = grown;
        }
        message.set(chunk.subarray(offset, offset + take), filled);
        filled += take;
        offset += take;
        if (filled === size) {
          const whole = message;
          message = undefined;
          yield whole;
        }
      }
      // Copied out, and the HTTP/2 server keeps no reference to a chunk it handed over.
      release(chunk);
    }
    // A cut-short message is handed on as far as it came: connect-es calls it incomplete.
    if (message !== undefined) yield message.subarray(0, filled);
    else if (prefixSize > 0) yield prefix.slice(0, prefixSize);
  } catch (error) {
    // The HTTP/2 server had no budget for the body's bytes: the same refusal as ours.
    throw error === bodyOverBudget ? overBudget() : error;
  } finally {
    current?.release();
  }
}

/** Reads and discards what is left of a request body. */
function drain(req: H2Request): void {
  (async () => {
    for await (const _ of req.body) { /* discard */ }
  })().catch(() => {});
}
