/**
 * Unary calls of the Connect protocol with binary messages (`POST`, `content-type:
 * application/proto`, no compression): the only kind of call the gateway makes, served here without
 * connect's universal handler. Everything else (JSON, GET, compression, streaming) goes to connect's
 * router, which this path answers exactly like: same status codes, the same JSON error body, and
 * response trailers as `trailer-` headers.
 *
 * Why: under load through the gateway, connect's fetch handler (universal request and response
 * objects, async iterables for one message, `createHandlerContext` copying Headers) took ~14% of a
 * service's CPU for a call whose protocol is a body in and a body out.
 *
 * @module
 */

import {
  create,
  type DescMethod,
  type DescService,
  fromBinary,
  isMessage,
  toBinary,
} from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import {
  codeToHttpStatus,
  errorToJsonBytes,
  parseTimeout,
} from "@connectrpc/connect/protocol-connect";
import { type Lease, type MemoryBudget, overBudget, overBudgetReason } from "./budget.ts";
import { concat } from "./bytes.ts";
import { createCallContext } from "./call_context.ts";
import { hasReason } from "./errors.ts";

/**
 * What a byte of request message costs a service while the call is served: the bytes and the
 * decoded message are alive together, and the handler copies fields into its queries.
 */
export const messageCostFactor = 3;

type UnaryFn = (input: unknown, ctx: HandlerContext) => unknown;

/** A unary method and its handler. */
export interface UnaryRoute {
  /** The service. */
  service: DescService;
  /** The method. */
  method: DescMethod;
  /** The handler. */
  fn: UnaryFn;
}

/** The unary methods of the bindings, by request path (`/pkg.Service/Method`). */
export function unaryRoutes(
  bindings: ReadonlyArray<{ service: DescService; impl: ServiceImpl<DescService> }>,
): Map<string, UnaryRoute> {
  const routes = new Map<string, UnaryRoute>();
  for (const { service, impl } of bindings) {
    for (const method of service.methods) {
      const fn = (impl as Record<string, UnaryFn | undefined>)[method.localName];
      if (method.methodKind === "unary" && fn) {
        routes.set(`/${service.typeName}/${method.name}`, { service, method, fn: fn.bind(impl) });
      }
    }
  }
  return routes;
}

/** Headers of the protocol, never copied from an error's metadata into the response. */
const protocolHeaders = /^(content-type|content-length|content-encoding|accept-encoding|connect-)/i;

/**
 * Serves one call, or returns undefined when the request is not a binary unary Connect call (the
 * caller then hands it to connect's router).
 */
export async function serveConnectUnary(
  route: UnaryRoute,
  req: Request,
  maxBytes: number,
  budget: MemoryBudget,
): Promise<Response | undefined> {
  if (req.method !== "POST" || req.headers.get("content-type") !== "application/proto") {
    return undefined;
  }
  const encoding = req.headers.get("content-encoding");
  if (encoding !== null && encoding !== "identity") return undefined;
  const timeout = parseTimeout(req.headers.get("connect-timeout-ms"), Number.MAX_SAFE_INTEGER);
  const call = createCallContext({
    service: route.service,
    method: route.method,
    protocolName: "connect",
    url: req.url,
    requestHeader: req.headers,
    timeoutMs: timeout.timeoutMs,
    requestSignal: req.signal,
  });
  const { ctx } = call;
  const headers: [string, string][] = [];
  let status = 200;
  let body: Uint8Array;
  // The request's bytes are taken from the process's budget before they are read.
  const lease = budget.take(0)!;
  try {
    if (timeout.error) throw timeout.error;
    const length = req.headers.get("content-length");
    const declared = Number(length ?? 0);
    if (declared > maxBytes) throw tooLarge(declared, maxBytes);
    if (!lease.grow(declared * messageCostFactor)) throw overBudget();
    // With a Content-Length the body cannot be longer; without one (chunked) it is read only up
    // to the limit: read whole first, 200 MB took a service to ~300 MB resident (256 Mi in k8s).
    let bytes: Uint8Array;
    try {
      bytes = length !== null
        ? new Uint8Array(await req.arrayBuffer())
        : await readBounded(req, maxBytes, lease);
    } catch (error) {
      if (error instanceof ConnectError) throw error;
      // The client went away mid-body or broke the chunked framing: its fault, not INTERNAL.
      throw new ConnectError("the request body could not be read", Code.InvalidArgument);
    }
    if (bytes.length > maxBytes) throw tooLarge(bytes.length, maxBytes);
    let input: unknown;
    try {
      input = fromBinary(route.method.input, bytes);
    } catch (error) {
      throw new ConnectError(
        `parse binary: ${error instanceof Error ? error.message : String(error)}`,
        Code.InvalidArgument,
      );
    }
    const output = await route.fn(input, ctx);
    const message = isMessage(output, route.method.output)
      ? output
      : create(route.method.output, output as Parameters<typeof create>[1]);
    body = toBinary(route.method.output, message);
    headers.push(["content-type", "application/proto"]);
  } catch (e) {
    const error = e instanceof ConnectError
      ? e
      : new ConnectError("internal error", Code.Internal, undefined, undefined, e);
    ({ status, body } = connectError(error, headers));
  } finally {
    call.end();
    lease.release();
  }
  ctx.responseHeader.forEach((value, name) => {
    if (name !== "content-type") headers.push([name, value]);
  });
  ctx.responseTrailer.forEach((value, name) => headers.push([`trailer-${name}`, value]));
  return new Response(body as Uint8Array<ArrayBuffer>, { status, headers });
}

/**
 * The Connect protocol's answer for an error: its status, its JSON body, and its metadata added to
 * `headers` (with the content type). A refusal for memory is 503, as at the listener
 * (lib/http_guard.ts) and the gateway: the Connect mapping of resource_exhausted (429) would tell
 * the caller it sent too much.
 */
export function connectError(
  error: ConnectError,
  headers: [string, string][],
): { status: number; body: Uint8Array } {
  headers.push(["content-type", "application/json"]);
  error.metadata.forEach((value, name) => {
    if (!protocolHeaders.test(name)) headers.push([name, value]);
  });
  return {
    status: hasReason(error, overBudgetReason) ? 503 : codeToHttpStatus(error.code),
    body: errorToJsonBytes(error, {}),
  };
}

/**
 * Reads a body of unknown length into `lease`, refusing it as soon as it exceeds `max` bytes or
 * the budget.
 */
export async function readBounded(req: Request, max: number, lease: Lease): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of req.body ?? []) {
    size += chunk.byteLength;
    if (size > max) throw tooLarge(size, max);
    if (!lease.grow(chunk.byteLength * messageCostFactor)) throw overBudget();
    chunks.push(chunk);
  }
  return chunks.length === 0 ? new Uint8Array(0) : concat(chunks);
}

function tooLarge(size: number, max: number): ConnectError {
  return new ConnectError(
    `message size ${size} is larger than configured readMaxBytes ${max}`,
    Code.ResourceExhausted,
  );
}
