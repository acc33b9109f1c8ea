/**
 * A process's services as connect-es routers: one implementation and one interceptor list, turned
 * into the universal handlers that lib/rpc/grpc_server.ts serves on the gRPC port and
 * lib/rpc/connect_server.ts on the Connect port.
 *
 * @module
 */

import { type DescMessage, type DescService, fromBinary, ScalarType } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  type ConnectRouter,
  type ContextValues,
  createConnectRouter,
  createContextKey,
  createContextValues,
  createServiceImplSpec,
  type HandlerContext,
  type Interceptor,
  type MethodImplSpec,
  type ServiceImpl,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";
import { createMethodUrl, type UniversalHandler } from "@connectrpc/connect/protocol";
import { parseTimeout as parseConnectTimeout } from "@connectrpc/connect/protocol-connect";
import { parseTimeout as parseGrpcTimeout } from "@connectrpc/connect/protocol-grpc";
import { deadlines, maxTimerMs } from "../platform/mod.ts";
import { encodeMessage } from "./encode.ts";

const answerKey = createContextKey<unknown>(undefined, { description: "answer" });

/**
 * Answers a unary call from an interceptor without running its handler, while the response still
 * goes through the protocol's own headers and trailers (an interceptor that returned a response of
 * its own would replace them): the interceptor sets the answer, then calls `next`. Used for
 * replayed idempotent outcomes.
 */
export function answerWith(values: ContextValues, message: unknown): void {
  values.set(answerKey, message);
}

type UnaryFn = (req: unknown, ctx: HandlerContext) => unknown;

/** The implementation with each unary handler skipped when an interceptor has answered. */
function answerable(impl: Partial<ServiceImpl<DescService>>, service: DescService) {
  const out: Record<string, unknown> = { ...impl };
  for (const method of service.methods) {
    const fn = (impl as Record<string, UnaryFn | undefined>)[method.localName];
    if (method.methodKind !== "unary" || !fn) continue;
    out[method.localName] = (req: unknown, ctx: HandlerContext) => {
      const answer = ctx.values.get(answerKey);
      return answer === undefined ? fn.call(impl, req, ctx) : answer;
    };
  }
  return out as Partial<ServiceImpl<DescService>>;
}

/**
 * What a byte of request message costs a service while the call is served: the bytes and the
 * decoded message are alive together, and the handler copies fields into its queries.
 */
export const messageCostFactor = 3;

/**
 * connect-es answers a request message that does not parse as INTERNAL ("parse binary: ...", its
 * serialization serves requests and responses alike); a request that does not parse is the
 * caller's fault, INVALID_ARGUMENT, as everything else a caller gets wrong. Returns the error to
 * answer instead, or undefined when the status stands.
 */
export function requestFault(code: Code, message: string): ConnectError | undefined {
  if (code !== Code.Internal || !/^parse (binary|json): /.test(message)) return undefined;
  return new ConnectError(message, Code.InvalidArgument);
}

/** A service and its implementation. */
export interface Binding {
  /** The service descriptor. */
  service: DescService;
  /** Its handlers (missing ones answer UNIMPLEMENTED). */
  impl: Partial<ServiceImpl<DescService>>;
}

/** Binds an implementation to its service, keeping the types checked. */
export function bind<S extends DescService>(service: S, impl: ServiceImpl<S>): Binding {
  return { service, impl: impl as unknown as Partial<ServiceImpl<DescService>> };
}

/** Options of {@link createRouter}. */
export interface RouterOptions {
  /** Every call's interceptors, outermost first. */
  interceptors: Interceptor[];
  /** Largest request message accepted, in bytes. */
  maxMessageBytes: number;
  /**
   * `grpc` for the HTTP/2 port; `http` (Connect and gRPC-web) for `Deno.serve`, which cannot send
   * the HTTP trailers gRPC needs.
   */
  protocols?: "grpc" | "http";
}

/** A unary method as connect-es invokes it: its implementation and the interceptors around it. */
export interface UnaryRoute {
  /** The method and its implementation (connect-es's spec). */
  spec: Extract<MethodImplSpec, { kind: "unary" }>;
  /** The interceptors of its router, outermost first. */
  interceptors: Interceptor[];
  /**
   * Whether its request type has no `bytes` field at any depth ({@link holdsBytes}): a request
   * decoded from a message then holds no view of that message (but in unknown fields, which
   * nothing reads once the call has run), so the message may be freed when the call is over.
   */
  bytesFree: boolean;
}

/**
 * Whether messages of `desc` may have a `bytes` field, in themselves or in a message they hold
 * (Protobuf-ES decodes those as views of the bytes it read, not copies).
 */
export function holdsBytes(desc: DescMessage, seen = new Set<DescMessage>()): boolean {
  if (seen.has(desc)) return false;
  seen.add(desc);
  return desc.fields.some((f) => {
    switch (f.fieldKind) {
      case "scalar":
        return f.scalar === ScalarType.BYTES;
      case "message":
        return holdsBytes(f.message, seen);
      case "list":
        return f.listKind === "scalar"
          ? f.scalar === ScalarType.BYTES
          : f.listKind === "message" && holdsBytes(f.message, seen);
      case "map":
        return f.mapKind === "scalar"
          ? f.scalar === ScalarType.BYTES
          : f.mapKind === "message" && holdsBytes(f.message, seen);
      default:
        return false;
    }
  });
}

/**
 * What a server serves: connect-es's universal handlers, one per method and protocol, and the
 * unary methods by request path, for a server that invokes a well-formed unary call without the
 * streaming pipeline (lib/rpc/grpc_server.ts).
 */
export interface Routes {
  /** connect-es's universal handlers. */
  handlers: UniversalHandler[];
  /** The unary methods, by request path (`/package.Service/Method`). */
  unary: Map<string, UnaryRoute>;
}

/** Registers the bindings on a connect-es router with the interceptors. */
export function createRouter(bindings: readonly Binding[], options: RouterOptions): Routes {
  const grpc = (options.protocols ?? "grpc") === "grpc";
  const router: ConnectRouter = createConnectRouter({
    grpc,
    connect: !grpc,
    grpcWeb: !grpc,
    interceptors: options.interceptors,
    readMaxBytes: options.maxMessageBytes,
    // An unknown field in a JSON request is INVALID_ARGUMENT, as the protobuf JSON mapping has it
    // and as `/v1` answers; connect-es ignores it by default, and a misspelled field of a PUT,
    // which replaces the whole record, then cleared that field.
    jsonOptions: { ignoreUnknownFields: false },
  });
  const unary = new Map<string, UnaryRoute>();
  for (const [service, impl] of register(router, bindings)) {
    for (const spec of Object.values(createServiceImplSpec(service, impl).methods)) {
      if (spec.kind !== "unary") continue;
      unary.set(createMethodUrl("/", spec.method), {
        spec,
        interceptors: options.interceptors,
        bytesFree: !holdsBytes(spec.method.input),
      });
    }
  }
  return { handlers: router.handlers, unary };
}

/**
 * Registers the bindings on a connect-es router, each unary handler skipped when an interceptor
 * has answered the call ({@link answerWith}); returns the implementations as registered. Also the
 * way to serve the bindings through connect-es's `createRouterTransport` (fast in-process tests).
 */
export function register(
  router: ConnectRouter,
  bindings: readonly Binding[],
): [DescService, Partial<ServiceImpl<DescService>>][] {
  return bindings.map((b) => {
    const impl = answerable(b.impl, b.service);
    router.service(b.service, impl);
    return [b.service, impl];
  });
}

/** A unary call as a server adapter received it. */
export interface UnaryCall {
  /** `grpc` or `connect`, for the handler context. */
  protocolName: string;
  /** The request URL (or path). */
  url: string;
  /** The request metadata, as received (not copied). */
  header: Headers;
  /** The caller's timeout, if it sent one. */
  timeoutMs: number | undefined;
  /** Aborts when the caller goes away. */
  signal: AbortSignal;
}

/** What a unary call answered: the response metadata and the message or the error. */
export interface UnaryOutcome {
  /** Response headers the interceptors and the handler set. */
  header: Headers;
  /** Response trailers the interceptors and the handler set. */
  trailer: Headers;
  /** The response message, serialized, when the call succeeded. */
  output?: Uint8Array;
  /** The error, when it failed (one that is not a ConnectError becomes INTERNAL). */
  error?: ConnectError;
}

/**
 * Drops a deadline header (`grpc-timeout`, `connect-timeout-ms`) further away than
 * {@link maxTimerMs} before connect-es's handlers read it: they arm a timer of that length, which
 * would fire at once and end the call DEADLINE_EXCEEDED (a stock client's deadline of a month on a
 * watch did). A malformed header stays, for connect-es to refuse.
 */
export function dropDistantDeadline(header: Headers): void {
  const grpc = header.get("grpc-timeout");
  if (grpc !== null && (parseGrpcTimeout(grpc, Infinity).timeoutMs ?? 0) > maxTimerMs) {
    header.delete("grpc-timeout");
  }
  const connect = header.get("connect-timeout-ms");
  if (connect !== null && (parseConnectTimeout(connect, Infinity).timeoutMs ?? 0) > maxTimerMs) {
    header.delete("connect-timeout-ms");
  }
}

/** What a call's signal aborts with when its caller goes away (one instance: no stack each time). */
export const cancelled = new ConnectError("the call was cancelled", Code.Canceled);
/** What a call's signal aborts with at its deadline; the call's status, however its handler ends. */
export const deadlineExceeded = new ConnectError(
  "the operation timed out",
  Code.DeadlineExceeded,
);

/** Copies one set of headers over another (connect-es's `copyHeaders`). */
function copyHeaders(from: Headers, to: Headers): void {
  if (from === to) return;
  for (const key of [...to.keys()]) to.delete(key);
  from.forEach((value, key) => to.set(key, value));
}

/**
 * connect-es's `invokeUnaryImplementation`, but the handler's answer is not made a message first
 * (connect-es's `normalize`, a `create` that copies every object of a page): ./encode.ts writes
 * initializers as they are. An interceptor that reads the answer gets what the handler returned.
 */
async function invokeImplementation(
  spec: UnaryRoute["spec"],
  context: HandlerContext,
  input: unknown,
  interceptors: Interceptor[],
): Promise<unknown> {
  const service = spec.method.parent;
  const handler = async (req: UnaryRequest): Promise<UnaryResponse> => ({
    stream: false,
    service,
    method: spec.method,
    header: context.responseHeader,
    trailer: context.responseTrailer,
    message: await spec.impl(req.message as never, {
      ...context,
      service: req.service,
      requestHeader: req.header,
      signal: req.signal,
      values: req.contextValues,
    }) as UnaryResponse["message"],
  });
  let next = handler as (req: UnaryRequest) => Promise<UnaryResponse>;
  for (let i = interceptors.length - 1; i >= 0; i--) {
    next = interceptors[i]!(next as never) as typeof next;
  }
  const res = await next({
    stream: false,
    service,
    method: spec.method,
    requestMethod: context.requestMethod,
    url: context.url,
    signal: context.signal,
    header: context.requestHeader,
    contextValues: context.values,
    message: input as UnaryRequest["message"],
  });
  copyHeaders(res.header, context.responseHeader);
  copyHeaders(res.trailer, context.responseTrailer);
  return res.message;
}

/**
 * Invokes a well-formed unary call as connect-es's handlers invoke it (its interceptors, its
 * `invokeUnaryImplementation`, errors that are not ConnectErrors become INTERNAL "internal error")
 * but without the rest of their per-call machinery, which the services' CPU profiles under load
 * showed among the largest costs of an RPC (with every call through it, gRPC GetClient ran at
 * 4,669 req/s against the hand-written server's 8,780): the gRPC handler's pipeline of async generators that split,
 * parse, serialize and join one message, and in both protocols three AbortControllers, three
 * Headers copies and an aborted signal's DOMException per call. The context's signal aborts when
 * the caller goes away (CANCELED) or at the deadline (DEADLINE_EXCEEDED); a call past its deadline
 * answers DEADLINE_EXCEEDED even when its handler returns a result after all, as gRPC's own servers
 * do (connect-es would answer OK).
 *
 * Returns undefined, having run nothing, when the request message does not parse: the adapter
 * then hands the call to connect-es's handler, which answers it as it answers every malformed call.
 */
export async function invokeUnary(
  route: UnaryRoute,
  message: Uint8Array,
  call: UnaryCall,
): Promise<UnaryOutcome | undefined> {
  const { spec, interceptors } = route;
  let input;
  try {
    input = fromBinary(spec.method.input, message);
  } catch {
    return undefined;
  }
  const controller = new AbortController();
  const onAbort = () => controller.abort(cancelled);
  if (call.signal.aborted) onAbort();
  else call.signal.addEventListener("abort", onAbort, { once: true });
  const { timeoutMs } = call;
  const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
  // A deadline further away than a timer can wait arms none: the call runs as one without a
  // deadline, which it cannot tell apart within a process's life.
  const timer = timeoutMs === undefined || timeoutMs > maxTimerMs
    ? undefined
    : deadlines.after(timeoutMs, () => controller.abort(deadlineExceeded));
  const context: HandlerContext = {
    method: spec.method,
    service: spec.method.parent,
    requestMethod: "POST",
    protocolName: call.protocolName,
    url: call.url,
    signal: controller.signal,
    timeoutMs: () => deadline === undefined ? undefined : deadline - Date.now(),
    requestHeader: call.header,
    responseHeader: new Headers(),
    responseTrailer: new Headers(),
    values: createContextValues(),
  };
  try {
    const output = await invokeImplementation(spec, context, input, interceptors);
    if (controller.signal.reason === deadlineExceeded) throw deadlineExceeded;
    return {
      header: context.responseHeader,
      trailer: context.responseTrailer,
      output: encodeMessage(spec.method.output, output as never),
    };
  } catch (error) {
    return {
      header: context.responseHeader,
      trailer: context.responseTrailer,
      error: error instanceof ConnectError
        ? error
        : new ConnectError("internal error", Code.Internal, undefined, undefined, error),
    };
  } finally {
    timer?.cancel();
    call.signal.removeEventListener("abort", onAbort);
  }
}
