/**
 * Serves connect-es `ServiceImpl` objects to stock gRPC clients (grpc-js, grpcurl, any language)
 * over HTTP/2 cleartext: the same handlers as the Connect server, on the HTTP/2 server of
 * lib/h2/server.ts (see there why not node:http2).
 *
 * The gRPC protocol (grpc/grpc PROTOCOL-HTTP2.md): POST with `content-type: application/grpc`,
 * length-prefixed messages, `grpc-timeout`, status in trailers (`grpc-status`, `grpc-message`
 * percent-encoded as the spec says, and `grpc-status-details-bin` for error details, encoded as
 * connect's own gRPC protocol does).
 * Unary, server-streaming, client-streaming and bidi methods. Compressed messages are refused
 * (UNIMPLEMENTED; we advertise `grpc-accept-encoding: identity`). Errors that are not
 * `ConnectError`s are answered INTERNAL "internal error": their messages never leak.
 *
 * @module
 */

import {
  create,
  type DescMethod,
  type DescService,
  fromBinary,
  isMessage,
  type Message,
  toBinary,
} from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { parseTimeout, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { createMemoryBudget, type Lease, type MemoryBudget, overBudget } from "./budget.ts";
import { CallHeaders, createCallContext } from "./call_context.ts";
import { messageCostFactor } from "./connect_unary.ts";
import type { HeaderField } from "./h2/hpack.ts";
import { concat } from "./bytes.ts";
import { type H2Request, type H2Response, type H2Server, serveH2 } from "./h2/server.ts";

/** A service and the connect-es implementation serving it. */
export interface GrpcServiceBinding {
  /** The service descriptor. */
  service: DescService;
  /** Its handlers, keyed by method local name; missing methods answer UNIMPLEMENTED. */
  impl: Partial<ServiceImpl<DescService>>;
}

/** Pairs a service with its (possibly partial) implementation, type-checking the handlers. */
export function bindGrpc<S extends DescService>(
  service: S,
  impl: Partial<ServiceImpl<S>>,
): GrpcServiceBinding {
  return { service, impl: impl as Partial<ServiceImpl<DescService>> };
}

/** Options of {@link serveGrpc}. */
export interface GrpcServerOptions {
  /** Port (0 = any free port). */
  port: number;
  /** Address (default 0.0.0.0). */
  hostname?: string;
  /** Largest request message accepted, in bytes (default 4 MiB). */
  maxReceiveMessageBytes?: number;
  /**
   * The process's memory budget: a message's bytes are taken from it as soon as its length prefix
   * arrives (RESOURCE_EXHAUSTED when they do not fit), before its body is read.
   */
  budget?: MemoryBudget;
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

type MethodFn = (input: unknown, ctx: HandlerContext) => unknown;

interface Route {
  service: DescService;
  method: DescMethod;
  fn: MethodFn | undefined;
}

const grpcContentType = /^application\/grpc(\+proto)?(;.*)?$/i;

/** Starts serving every method of every binding. */
export function serveGrpc(bindings: GrpcServiceBinding[], options: GrpcServerOptions): GrpcServer {
  const routes = new Map<string, Route>();
  for (const { service, impl } of bindings) {
    for (const method of service.methods) {
      const fn = (impl as Record<string, MethodFn | undefined>)[method.localName];
      routes.set(`/${service.typeName}/${method.name}`, { service, method, fn });
    }
  }
  const maxBytes = options.maxReceiveMessageBytes ?? 4 * 1024 * 1024;
  const budget = options.budget ?? createMemoryBudget(Number.MAX_SAFE_INTEGER);
  const server: H2Server = serveH2({
    port: options.port,
    hostname: options.hostname ?? "0.0.0.0",
    handler: (req, res) => handle(routes, { maxBytes, budget }, req, res),
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
 * connect-es's `setTrailerStatus` encodes with `encodeURIComponent`, which the grammar allows but
 * which also encodes space and `;/?:@&=+$,#`; @grpc/grpc-js decodes with `decodeURI`, which
 * leaves the escapes of `;/?:@&=+$,#` as they are, so its users read `%3A` for `:`. With only the
 * bytes the spec requires encoded, every decoder in use returns the message as written: grpc-js's
 * `decodeURI`, connect-es's `decodeURIComponent`, C-core's and Go's percent-decoding.
 */
export function encodeGrpcMessage(message: string): string {
  return message.replace(unsafeInGrpcMessage, (ch) => {
    let out = "";
    for (const byte of utf8.encode(ch)) {
      out += `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
    }
    return out;
  });
}

/**
 * The status trailers of an error (or of success): connect's gRPC protocol writes `grpc-status`,
 * `grpc-status-details-bin` and the error's metadata; `grpc-message` is ours
 * ({@link encodeGrpcMessage}), and is left out when the message is empty (the grammar wants at
 * least one character, and clients read a missing message as empty).
 */
function statusFields(error: ConnectError | undefined): HeaderField[] {
  // setTrailerStatus runs encodeURIComponent on the message, which throws on a lone surrogate.
  if (error && !error.rawMessage.isWellFormed()) {
    const copy = new ConnectError(
      error.rawMessage.toWellFormed(),
      error.code,
      error.metadata,
      undefined,
      error.cause,
    );
    copy.details.push(...error.details);
    copy.isWireError = error.isWireError;
    error = copy;
  }
  const headers = setTrailerStatus(new Headers(), error);
  headers.delete("grpc-message");
  const out: HeaderField[] = [];
  headers.forEach((value, name) => out.push([name, value]));
  if (error && error.rawMessage !== "") {
    out.push(["grpc-message", encodeGrpcMessage(error.rawMessage)]);
  }
  return out;
}

/** The trailers of a call that succeeded (`grpc-status: 0`), made once. */
const okTrailers: readonly HeaderField[] = statusFields(undefined);

function normalise(error: unknown, ctx?: HandlerContext): ConnectError {
  if (error instanceof ConnectError) return error;
  const reason = ctx?.signal.reason;
  if (ctx?.signal.aborted && reason instanceof ConnectError) return reason;
  return new ConnectError("internal error", Code.Internal);
}

/**
 * Splits the request body into length-prefixed messages. Each message's bytes are taken into
 * `lease` when its prefix arrives; for a stream of messages (client and bidi streaming), a
 * message's share is given back when the next one is asked for.
 */
async function* messages(
  req: H2Request,
  method: DescMethod,
  maxBytes: number,
  lease: Lease,
  budget: MemoryBudget,
): AsyncGenerator<Message> {
  const streaming = method.methodKind === "client_streaming" ||
    method.methodKind === "bidi_streaming";
  let current: Lease | undefined;
  // A message's bytes go straight into one buffer of its size, allocated once its length prefix
  // is in (and its cost taken from the budget): no list of chunks joined at the end, which held
  // every byte twice.
  let head: Uint8Array[] = [];
  let headSize = 0; // bytes of the 5-byte prefix so far
  let body: Uint8Array | undefined;
  let filled = 0;
  try {
    for await (const chunk of req.body) {
      let offset = 0;
      for (;;) {
        if (body === undefined) {
          if (offset === chunk.length) break;
          const take = Math.min(5 - headSize, chunk.length - offset);
          head.push(chunk.subarray(offset, offset + take));
          headSize += take;
          offset += take;
          if (headSize < 5) break;
          const prefix = head.length === 1 ? head[0]! : concat(head);
          head = [];
          headSize = 0;
          if (prefix[0] !== 0) {
            throw new ConnectError("compressed messages are not supported", Code.Unimplemented);
          }
          const length = new DataView(prefix.buffer, prefix.byteOffset + 1, 4).getUint32(0);
          if (length > maxBytes) {
            throw new ConnectError(
              `message of ${length} bytes exceeds the limit of ${maxBytes}`,
              Code.ResourceExhausted,
            );
          }
          const cost = length * messageCostFactor;
          if (streaming) {
            current?.release();
            current = budget.take(cost);
            if (!current) throw overBudget();
          } else if (!lease.grow(cost)) throw overBudget();
          body = new Uint8Array(length);
          filled = 0;
        }
        const take = Math.min(body.length - filled, chunk.length - offset);
        body.set(chunk.subarray(offset, offset + take), filled);
        filled += take;
        offset += take;
        if (filled < body.length) break;
        const bytes = body;
        body = undefined;
        let message: Message;
        try {
          message = fromBinary(method.input, bytes);
        } catch {
          throw new ConnectError("cannot decode the request message", Code.InvalidArgument);
        }
        yield message;
      }
    }
    if (headSize > 0 || body !== undefined) {
      throw new ConnectError("truncated request message", Code.InvalidArgument);
    }
  } finally {
    current?.release();
  }
}

function frame(method: DescMethod, output: unknown): Uint8Array {
  const message = isMessage(output, method.output)
    ? output
    : create(method.output, output as Parameters<typeof create>[1]);
  const bytes = toBinary(method.output, message);
  const out = new Uint8Array(5 + bytes.length);
  new DataView(out.buffer).setUint32(1, bytes.length);
  out.set(bytes, 5);
  return out;
}

async function handle(
  routes: Map<string, Route>,
  limits: { maxBytes: number; budget: MemoryBudget },
  req: H2Request,
  res: H2Response,
): Promise<void> {
  const header = new CallHeaders();
  let path = "";
  let httpMethod = "";
  for (const [name, value] of req.headers) {
    if (name === ":path") path = value;
    else if (name === ":method") httpMethod = value;
    else if (!name.startsWith(":") && !name.endsWith("-bin")) {
      header.append(name, value);
    }
  }
  const responseHeaders: HeaderField[] = [
    [":status", "200"],
    ["content-type", "application/grpc"],
    ["grpc-accept-encoding", "identity"],
  ];
  const trailersOnly = (error: ConnectError) => {
    res.headers([...responseHeaders, ...statusFields(error)], true);
    drain(req);
  };
  if (httpMethod !== "POST" || !grpcContentType.test(header.get("content-type") ?? "")) {
    // A body says what this port is to whoever reached it by mistake (a browser, curl, h2spec,
    // which expects a DATA frame on every stream it opens).
    res.headers([[":status", "415"], ["content-type", "text/plain"]]);
    void res.data(notGrpc, true);
    drain(req);
    return;
  }
  const encoding = header.get("grpc-encoding");
  if (encoding !== null && encoding !== "identity") {
    return trailersOnly(
      new ConnectError(`grpc-encoding ${encoding} is not supported`, Code.Unimplemented),
    );
  }
  const route = routes.get(path);
  if (!route?.fn) {
    return trailersOnly(
      new ConnectError(`${path.slice(1).replace("/", ".")} is not implemented`, Code.Unimplemented),
    );
  }
  const timeout = parseTimeout(header.get("grpc-timeout"), Number.MAX_SAFE_INTEGER);
  if (timeout.error) return trailersOnly(timeout.error);
  // The stream's end, a reset by the client or a lost connection: CANCELED for the handler.
  const call = createCallContext({
    service: route.service,
    method: route.method,
    protocolName: "grpc",
    url: path,
    requestHeader: header,
    timeoutMs: timeout.timeoutMs,
    requestSignal: req.signal,
  });
  const ctx = call.ctx;
  const lease = limits.budget.take(0)!;
  let headersSent = false;
  const sendHeaders = () => {
    if (headersSent) return;
    headersSent = true;
    const extra: HeaderField[] = [];
    ctx.responseHeader.forEach((value, name) => extra.push([name, value]));
    res.headers([...responseHeaders, ...extra]);
  };
  try {
    const kind = route.method.methodKind;
    const input = messages(req, route.method, limits.maxBytes, lease, limits.budget);
    let request: unknown = input;
    if (kind === "unary" || kind === "server_streaming") {
      const first = await input.next();
      if (first.done) throw new ConnectError("missing request message", Code.InvalidArgument);
      if (!(await input.next()).done) {
        throw new ConnectError("more than one request message", Code.InvalidArgument);
      }
      request = first.value;
    }
    const result = route.fn(request, ctx);
    if (kind === "unary" || kind === "client_streaming") {
      // The deadline (or the client going away) ends the call even if the handler does not.
      const output = await Promise.race([
        result,
        new Promise((_, reject) => {
          const stop = () => reject(ctx.signal.reason);
          if (ctx.signal.aborted) stop();
          else ctx.signal.addEventListener("abort", stop, { once: true });
        }),
      ]);
      sendHeaders();
      // Not awaited when queued at once, so the trailers below leave in the same write.
      const pending = res.data(frame(route.method, output));
      if (pending) await pending;
    } else {
      for await (const output of result as AsyncIterable<unknown>) {
        sendHeaders();
        await res.data(frame(route.method, output));
      }
    }
    call.detach();
    const trailers = [...okTrailers];
    ctx.responseTrailer.forEach((value, name) => trailers.push([name, value]));
    if (!headersSent) {
      res.headers([...responseHeaders, ...trailers], true);
    } else {
      res.trailers(trailers);
    }
  } catch (error) {
    const err = normalise(error, ctx);
    if (headersSent) res.trailers(statusFields(err));
    else trailersOnly(err);
  } finally {
    call.end();
    lease.release();
  }
}

/** Reads and discards what is left of a request body. */
const notGrpc = new TextEncoder().encode(
  "This is a gRPC server: requests are POST with content-type application/grpc.\n",
);

function drain(req: H2Request): void {
  (async () => {
    for await (const _ of req.body) { /* discard */ }
  })().catch(() => {});
}
