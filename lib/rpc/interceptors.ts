/**
 * The interceptors of the RPC layer, each one concern, in connect-es's `Interceptor` form: a
 * service's `main.ts` lists them, with the policy's (lib/policy), in the order every call goes
 * through them. None of them needs a caller; the policy's come after.
 *
 * @module
 */

import {
  Code,
  ConnectError,
  createContextKey,
  type Interceptor,
  type UnaryResponse,
} from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import {
  givenRequestId,
  type Logger,
  type Metrics,
  parseTraceparent,
  toConnectError,
} from "../platform/mod.ts";

/** What the gateway (or another caller) sent to correlate a call: request id and trace context. */
export interface CallTrace {
  /** `x-request-id`, if sent and a safe token (lib/platform's `givenRequestId`). */
  requestId: string | undefined;
  /** The trace id of `traceparent`, if a valid one was sent. */
  traceId: string | undefined;
  /** The caller's span id (our parent), if sent. */
  parentSpanId: string | undefined;
}

const traceKey = createContextKey<CallTrace>(
  { requestId: undefined, traceId: undefined, parentSpanId: undefined },
  { description: "trace" },
);

const rpcNames = new WeakMap<object, string>();

/** The `rpc` label of a call: `package.Service/Method` (built once per method). */
function rpcName(req: { service: { typeName: string }; method: { name: string } }): string {
  let name = rpcNames.get(req.method);
  if (name === undefined) {
    name = `${req.service.typeName}/${req.method.name}`;
    rpcNames.set(req.method, name);
  }
  return name;
}

/** The protocol a call came in with, from its content type. */
function protocolOf(header: Headers): string {
  const type = header.get("content-type") ?? "";
  return type.startsWith("application/grpc-web")
    ? "grpc-web"
    : type.startsWith("application/grpc")
    ? "grpc"
    : "connect";
}

/**
 * Tracing: reads the request id and W3C trace context the caller sent into the call's context,
 * for the log line and for calls the handler makes.
 */
export function tracing(): Interceptor {
  return (next) => (req) => {
    const trace = parseTraceparent(req.header.get("traceparent"));
    req.contextValues.set(traceKey, {
      requestId: givenRequestId(req.header),
      traceId: trace?.traceId,
      parentSpanId: trace?.spanId,
    });
    return next(req);
  };
}

/**
 * Logging: one line per call (rpc, protocol, code, duration, request and trace ids); a server
 * fault (INTERNAL, UNAVAILABLE) is logged at error level with its cause, which is never sent. Any
 * error that is not a ConnectError leaves here as one whose message is safe to send
 * (lib/platform's `toConnectError`).
 */
export function logging(log: Logger): Interceptor {
  return (next) => async (req) => {
    const started = performance.now();
    let failure: ConnectError | undefined;
    try {
      return await next(req);
    } catch (error) {
      failure = toConnectError(error);
      throw failure;
    } finally {
      const serverFault = failure !== undefined &&
        (failure.code === Code.Internal || failure.code === Code.Unavailable);
      // The fields are built only when the line is written.
      if (serverFault || log.enabled("info")) {
        const trace = req.contextValues.get(traceKey);
        (serverFault ? log.error : log.info)("rpc", {
          rpc: rpcName(req),
          protocol: protocolOf(req.header),
          code: failure ? codeToString(failure.code) : "ok",
          duration_ms: Math.round((performance.now() - started) * 1e3) / 1e3,
          request_id: trace.requestId,
          trace_id: trace.traceId,
          parent_span_id: trace.parentSpanId,
          ...(serverFault ? { error: failure!.cause ?? failure } : {}),
        });
      }
    }
  };
}

/** Metrics: every call counted and timed by rpc, protocol and code. */
export function metering(metrics: Metrics): Interceptor {
  // One label set per rpc, protocol and code, made once: prom-client hashes a label object on
  // every update otherwise.
  const series = new Map<string, { count: () => void; time: (seconds: number) => void }>();
  const seriesOf = (rpc: string, protocol: string, code: string) => {
    const key = `${rpc} ${protocol} ${code}`;
    let s = series.get(key);
    if (s === undefined) {
      const labels = { rpc, protocol, code };
      const counter = metrics.rpcs.labels(labels);
      const histogram = metrics.rpcSeconds.labels(labels);
      s = { count: () => counter.inc(), time: (seconds) => histogram.observe(seconds) };
      series.set(key, s);
    }
    return s;
  };
  return (next) => async (req) => {
    const started = performance.now();
    let code = "ok";
    try {
      return await next(req);
    } catch (error) {
      code = codeToString(toConnectError(error).code);
      throw error;
    } finally {
      const s = seriesOf(rpcName(req), protocolOf(req.header), code);
      s.count();
      s.time((performance.now() - started) / 1000);
    }
  };
}

/**
 * Deadline: a unary call ends at its deadline (DEADLINE_EXCEEDED) or when its caller goes away
 * (CANCELED), even if the handler has not finished: connect-es aborts the call's signal then, and
 * this answers at once instead of waiting for a handler that does not listen to it.
 */
export function deadline(): Interceptor {
  return (next) => (req) => {
    if (req.stream) return next(req);
    const signal = req.signal;
    if (signal.aborted) return Promise.reject(abortReason(signal));
    let stop: () => void = () => {};
    const aborted = new Promise<never>((_, reject) => {
      stop = () => reject(abortReason(signal));
      signal.addEventListener("abort", stop, { once: true });
    });
    return Promise.race([next(req) as Promise<UnaryResponse>, aborted]).finally(() =>
      signal.removeEventListener("abort", stop)
    );
  };
}

function abortReason(signal: AbortSignal): ConnectError {
  const reason = signal.reason;
  return reason instanceof ConnectError
    ? reason
    : new ConnectError("the call was cancelled", Code.Canceled);
}

/**
 * Availability: while `notNow()` says why the process cannot take calls (e.g. its schema is being
 * migrated), every call is answered UNAVAILABLE with that reason, before anything else runs.
 */
export function availability(notNow: () => string | undefined): Interceptor {
  return (next) => (req) => {
    const reason = notNow();
    if (reason !== undefined) return Promise.reject(new ConnectError(reason, Code.Unavailable));
    return next(req);
  };
}
