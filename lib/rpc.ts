/**
 * What every authenticated RPC of every service goes through, whichever server (gRPC or Connect)
 * received it: the token is verified and the caller stored in the context, and whatever the
 * handler throws becomes a ConnectError that is safe to send (internal causes are logged, never
 * sent).
 *
 * @module
 */

import type { DescService } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createContextKey,
  type HandlerContext,
  type ServiceImpl,
} from "@connectrpc/connect";
import type { Caller, TokenVerifier } from "./auth.ts";
import { codeName, toConnectError } from "./errors.ts";
import type { Logger } from "./log.ts";
import type { Metrics } from "./metrics.ts";
import { parseTraceparent } from "./trace.ts";

const callerKey = createContextKey<Caller | undefined>(undefined, { description: "caller" });

/** Returns the authenticated caller of the current RPC. */
export function callerOf(ctx: HandlerContext): Caller {
  const caller = ctx.values.get(callerKey);
  if (!caller) throw new ConnectError("No authenticated caller", Code.Internal);
  return caller;
}

/** Options of {@link secureService}. */
export interface SecureServiceOptions {
  /** Verifies the `authorization` header. */
  verify: TokenVerifier;
  /** Where every RPC is logged (errors with their cause). */
  log: Logger;
  /** Where every RPC is counted and timed. */
  metrics?: Metrics;
  /**
   * Why the service cannot take calls now (they are answered UNAVAILABLE with this message), e.g.
   * until its schema is migrated; undefined when it can.
   */
  unavailable?: () => string | undefined;
}

/**
 * Wraps every unary method of a service implementation: authenticate, then run the handler, then
 * normalise errors; every call is logged (with the request id and trace id the gateway sent) and
 * counted. A handler that needs no caller does not exist in this product; health and reflection
 * are registered without this wrapper.
 */
export function secureService<S extends DescService>(
  service: S,
  impl: ServiceImpl<S>,
  options: SecureServiceOptions,
): ServiceImpl<S> {
  const wrapped: Record<string, unknown> = {};
  for (const method of service.methods) {
    if (method.methodKind !== "unary") {
      throw new Error(`Cannot secure ${method.name}: only unary methods are supported`);
    }
    const handler = (impl as Record<string, (req: unknown, ctx: HandlerContext) => unknown>)[
      method.localName
    ]!;
    const rpc = `${service.typeName}/${method.name}`;
    wrapped[method.localName] = async (req: unknown, ctx: HandlerContext) => {
      const started = performance.now();
      let code = "ok";
      let failure: ConnectError | undefined;
      try {
        const notNow = options.unavailable?.();
        if (notNow !== undefined) throw new ConnectError(notNow, Code.Unavailable);
        ctx.values.set(callerKey, await options.verify(ctx.requestHeader.get("authorization")));
        return await handler(req, ctx);
      } catch (error) {
        failure = toConnectError(error);
        code = codeName(failure.code);
        throw failure;
      } finally {
        const seconds = (performance.now() - started) / 1000;
        const labels = { rpc, protocol: ctx.protocolName, code };
        options.metrics?.rpcs.inc(labels);
        options.metrics?.rpcSeconds.observe(labels, seconds);
        const serverFault = failure !== undefined &&
          (failure.code === Code.Internal || failure.code === Code.Unavailable);
        const trace = parseTraceparent(ctx.requestHeader.get("traceparent"));
        (serverFault ? options.log.error : options.log.info)("rpc", {
          rpc,
          protocol: ctx.protocolName,
          code,
          duration_ms: Math.round(seconds * 1e6) / 1e3,
          request_id: ctx.requestHeader.get("x-request-id") ?? undefined,
          trace_id: trace?.traceId,
          parent_span_id: trace?.spanId,
          ...(serverFault ? { error: failure!.cause ?? failure } : {}),
        });
      }
    };
  }
  return wrapped as ServiceImpl<S>;
}
