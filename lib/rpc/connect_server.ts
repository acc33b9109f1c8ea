/**
 * The Connect protocol (and gRPC-web) on `Deno.serve`: connect-es's universal handlers through its
 * fetch adapter, each request's body read first, within the size limit and the process's memory
 * budget (the listener itself, lib/transport's guard, already refused a declared length that does
 * not fit). Errors outside a handler are answered as the Connect protocol answers them: its JSON
 * error body, and 503 for a refusal for memory (as the gateway and the guard answer it; Connect's
 * own mapping of resource_exhausted, 429, would tell the caller it sent too much).
 *
 * @module
 */

import type { DescMessage } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  createAsyncIterable,
  encodeEnvelope,
  readAllBytes,
  type UniversalHandler,
} from "@connectrpc/connect/protocol";
import {
  codeFromString,
  codeToHttpStatus,
  errorToJsonBytes,
  parseContentType,
  parseTimeout,
} from "@connectrpc/connect/protocol-connect";
import {
  contentTypeJson as grpcWebJson,
  parseContentType as parseGrpcWebContentType,
  setTrailerStatus,
  trailerFlag,
  trailerSerialize,
} from "@connectrpc/connect/protocol-grpc-web";
import {
  hasReason,
  invalidArgument,
  type Lease,
  type MemoryBudget,
  overBudget,
  overBudgetReason,
  peerHeader,
  smallRequestBytes,
} from "../platform/mod.ts";
import { concat } from "../transport/mod.ts";
import { holdsTimestamp, jsonBodyViolations } from "./json_timestamps.ts";
import {
  dropDistantDeadline,
  invokeUnary,
  messageCostFactor,
  requestFault,
  type Routes,
  type UnaryRoute,
} from "./router.ts";

/** Headers of the protocol, never copied from an error's metadata into the response. */
const protocolHeaders = /^(content-type|content-length|content-encoding|accept-encoding|connect-)/i;

/**
 * The Connect protocol's answer for an error: its status, its JSON body and its metadata as
 * headers. A refusal for memory is 503.
 */
export function connectErrorResponse(error: ConnectError, metadata?: [string, string][]): Response {
  const headers: [string, string][] = [["content-type", "application/json"]];
  if (metadata) headers.push(...metadata);
  error.metadata.forEach((value, name) => {
    if (!protocolHeaders.test(name)) headers.push([name, value]);
  });
  const status = hasReason(error, overBudgetReason) ? 503 : codeToHttpStatus(error.code);
  return new Response(errorToJsonBytes(error, {}) as Uint8Array<ArrayBuffer>, { status, headers });
}

/** A fetch handler per request path, for the handlers of the Connect and gRPC-web protocols. */
export function connectRoutes(
  served: Routes,
  options: { maxMessageBytes: number; budget: MemoryBudget },
): Map<string, (req: Request, peer: string) => Promise<Response>> {
  const routes = new Map<string, (req: Request, peer: string) => Promise<Response>>();
  for (const h of served.handlers) {
    const unary = served.unary.get(h.requestPath);
    routes.set(h.requestPath, (req, peer) => serveCall(h, unary, req, peer, options));
  }
  return routes;
}

/**
 * Answers a well-formed unary call through lib/rpc/router.ts's `invokeUnary` (see there why):
 * a POST of one binary message, uncompressed, that parses, with a valid `connect-timeout-ms`.
 * Anything else (JSON, GET, compression, a malformed message) returns undefined, for connect-es's
 * handler to answer exactly as it answers it.
 */
async function answerUnary(
  route: UnaryRoute,
  req: Request,
  header: Headers,
  chunks: Uint8Array[],
): Promise<Response | undefined> {
  const encoding = header.get("content-encoding");
  if (
    req.method !== "POST" || header.get("content-type") !== "application/proto" ||
    (encoding !== null && encoding !== "identity")
  ) return undefined;
  const timeout = parseTimeout(header.get("connect-timeout-ms"), Number.MAX_SAFE_INTEGER);
  if (timeout.error) return undefined;
  const outcome = await invokeUnary(route, concat(chunks), {
    protocolName: "connect",
    url: req.url,
    header,
    timeoutMs: timeout.timeoutMs,
    signal: req.signal,
  });
  if (outcome === undefined) return undefined;
  const metadata: [string, string][] = [];
  outcome.header.forEach((value, name) => metadata.push([name, value]));
  outcome.trailer.forEach((value, name) => metadata.push([`trailer-${name}`, value]));
  if (outcome.output === undefined) return connectErrorResponse(outcome.error!, metadata);
  metadata.push(["content-type", "application/proto"]);
  return new Response(outcome.output as Uint8Array<ArrayBuffer>, { headers: metadata });
}

/**
 * Serves one call: its body read first, within the size limit and the budget, then handed to the
 * universal handler as the chunks that arrived (connect-es joins them once, into a buffer of the
 * declared length).
 */
async function serveCall(
  handler: UniversalHandler,
  unary: UnaryRoute | undefined,
  req: Request,
  peer: string,
  options: { maxMessageBytes: number; budget: MemoryBudget },
): Promise<Response> {
  // This listener writes an answer once it is whole (lib/transport/http1.ts), so a server stream
  // (WatchEvents) would never send a byte, and would read its source without end: refused, before
  // a byte of the request is read. Streams are served on the gRPC port.
  if (handler.method.methodKind !== "unary") {
    return connectErrorResponse(
      new ConnectError(
        `${handler.method.name} streams: call it over gRPC (the service's GRPC_PORT); this port ` +
          "answers unary calls only",
        Code.Unimplemented,
      ),
    );
  }
  const lease = options.budget.take(0)!;
  // Who called, for the audit trail: the connection's peer, never what the caller claims.
  const header = new Headers(req.headers);
  header.set(peerHeader, peer);
  try {
    let chunks: Uint8Array[];
    try {
      chunks = await readBounded(req, options.maxMessageBytes, lease);
    } catch (e) {
      return connectErrorResponse(
        e instanceof ConnectError
          ? e
          // The client went away mid-body or broke the chunked framing: its fault, not INTERNAL.
          : new ConnectError("the request body could not be read", Code.InvalidArgument),
      );
    }
    if (unary) {
      const answer = await answerUnary(unary, req, header, chunks);
      if (answer) return answer;
    }
    if (holdsTimestamp(handler.method.input)) {
      const refused = refuseBadTimestamps(handler.method.input, req, header, chunks);
      if (refused) return refused;
    }
    dropDistantDeadline(header);
    const res = await handler({
      httpVersion: "1.1",
      method: req.method,
      url: req.url,
      header,
      body: createAsyncIterable(chunks),
      signal: req.signal,
    });
    // A unary answer is one small body: sent whole, with its length, not streamed chunked.
    const body: Uint8Array | undefined = res.body === undefined || res.body instanceof Uint8Array
      ? res.body
      : await readAllBytes(res.body as AsyncIterable<Uint8Array>, Number.MAX_SAFE_INTEGER);
    if (res.status === 500 && body !== undefined) {
      const fault = parseFault(body);
      if (fault) return connectErrorResponse(fault);
    }
    return new Response(body as Uint8Array<ArrayBuffer> | undefined, {
      status: res.status,
      headers: res.header ?? [],
    });
  } finally {
    lease.release();
  }
}

/**
 * A JSON call (Connect's `application/json`, gRPC-web's `application/grpc-web+json`) whose message
 * has a Timestamp that does not exist or is out of range, refused INVALID_ARGUMENT as its protocol
 * answers an error; undefined for any other call, for connect-es to answer. Why: protobuf-es's
 * `fromJson`, which connect-es reads JSON with, reads a Timestamp with `Date.parse`, which rolls
 * an impossible date over (`2027-02-30` is March 2) where `/v1` refuses it: see
 * ./json_timestamps.ts. Binary calls carry seconds and nanos, no date, and are left alone.
 */
function refuseBadTimestamps(
  input: DescMessage,
  req: Request,
  header: Headers,
  chunks: Uint8Array[],
): Response | undefined {
  if (req.method !== "POST") return undefined;
  const contentType = header.get("content-type");
  const connect = parseContentType(contentType);
  if (connect !== undefined && !connect.stream && !connect.binary) {
    const violations = jsonBodyViolations(input, concat(chunks));
    return violations && connectErrorResponse(invalidArgument(violations));
  }
  const grpcWeb = parseGrpcWebContentType(contentType);
  if (grpcWeb === undefined || grpcWeb.text || grpcWeb.binary) return undefined;
  // A unary call is one envelope: flags 0 (no compression is accepted here), the message's length
  // in 4 bytes, the message. Anything else is connect-es's to refuse.
  const body = concat(chunks);
  if (body.length < 5 || body[0] !== 0) return undefined;
  const end = 5 + new DataView(body.buffer, body.byteOffset, body.byteLength).getUint32(1);
  if (end > body.length) return undefined;
  const violations = jsonBodyViolations(input, body.subarray(5, end));
  if (violations === undefined) return undefined;
  // As connect-es's gRPC-web handler answers an error: 200, the status in a trailer frame.
  const trailer = new Headers();
  setTrailerStatus(trailer, invalidArgument(violations));
  return new Response(
    encodeEnvelope(trailerFlag, trailerSerialize(trailer)) as Uint8Array<ArrayBuffer>,
    { headers: { "content-type": grpcWebJson } },
  );
}

/** A request fault connect-es answered as INTERNAL (see lib/rpc/router.ts's `requestFault`). */
function parseFault(body: Uint8Array): ConnectError | undefined {
  try {
    const { code, message } = JSON.parse(new TextDecoder().decode(body));
    const known = typeof code === "string" ? codeFromString(code) : undefined;
    return known === undefined ? undefined : requestFault(known, String(message ?? ""));
  } catch {
    return undefined;
  }
}

/** A declared body up to this size is read in one step, its budget taken before it is read. */
const oneReadBytes = 64 * 1024;

/**
 * Reads a body into `lease`, refusing it as soon as it exceeds `max` bytes or the budget. A small
 * body of declared length is read in one step, not through the stream, whose reader costs more
 * than the read itself for a small message; its budget is taken first. Any other body takes its
 * budget as its bytes arrive, so that a large length declared and never sent holds nothing.
 */
async function readBounded(req: Request, max: number, lease: Lease): Promise<Uint8Array[]> {
  const length = req.headers.get("content-length");
  const declared = Number(length ?? 0);
  if (declared > max) throw tooLarge(declared, max);
  if (req.body === null || (length !== null && declared <= oneReadBytes)) {
    const cost = declared * messageCostFactor;
    if (!lease.grow(cost, cost <= smallRequestBytes)) throw overBudget();
    return [await req.bytes()];
  }
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of req.body) {
    size += chunk.byteLength;
    if (size > max) throw tooLarge(size, max);
    if (!lease.grow(chunk.byteLength * messageCostFactor)) throw overBudget();
    chunks.push(chunk);
  }
  return chunks;
}

function tooLarge(size: number, max: number): ConnectError {
  return new ConnectError(
    `message size ${size} is larger than configured readMaxBytes ${max}`,
    Code.ResourceExhausted,
  );
}
