/**
 * Request correlation: the `x-request-id` that follows a call from the gateway into the services
 * and into every log line about it, and W3C Trace Context (`traceparent`) propagation.
 *
 * @module
 */

import { hexByte } from "./ids.ts";

/**
 * The peer's address, set by our gRPC and Connect servers on every call they hand a handler
 * (replacing whatever a caller sent under that name): who called, for the audit trail.
 */
export const peerHeader = "x-peer-address";
/** The caller's address as the gateway saw it (metadata the gateway sets on its calls). */
export const forwardedForHeader = "x-forwarded-for";
/** The caller's User-Agent as the gateway saw it (the gRPC `user-agent` is the gateway's own). */
export const forwardedUserAgentHeader = "x-forwarded-user-agent";

const requestIdPattern = /^[A-Za-z0-9._:-]{1,128}$/;
const traceparentPattern = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

// Random bytes drawn 4 KiB at a time: one getRandomValues call per ~170 spans, not two per span.
const pool = new Uint8Array(4096);
let poolAt = pool.length;

/** `bytes` random bytes as hex (trace and span ids). */
function hex(bytes: number): string {
  if (poolAt + bytes > pool.length) {
    crypto.getRandomValues(pool);
    poolAt = 0;
  }
  let out = "";
  for (let i = 0; i < bytes; i++) out += hexByte[pool[poolAt++]!];
  return out;
}

/**
 * The caller's `x-request-id` if it is a safe token (letters, digits, `._:-`, up to 128), else
 * undefined: what the services log and record of a request id, so that a direct caller's id is
 * kept as the gateway keeps one, and any other is not (the gateway sends only ids of this form).
 */
export function givenRequestId(headers: Headers): string | undefined {
  const given = headers.get("x-request-id");
  return given !== null && requestIdPattern.test(given) ? given : undefined;
}

/** The caller's request id if it is a safe token ({@link givenRequestId}), else a new one. */
export function requestIdOf(headers: Headers): string {
  return givenRequestId(headers) ?? crypto.randomUUID();
}

/** A position in a trace. */
export interface TraceContext {
  /** 32 hex digits shared by every span of the trace. */
  traceId: string;
  /** 16 hex digits naming this span. */
  spanId: string;
  /** The trace flags (01 = sampled). */
  flags: string;
}

/** Reads a valid `traceparent` header, or undefined. */
export function parseTraceparent(value: string | null): TraceContext | undefined {
  const match = value === null ? null : traceparentPattern.exec(value);
  if (!match || /^0+$/.test(match[1]!) || /^0+$/.test(match[2]!)) return undefined;
  return { traceId: match[1]!, spanId: match[2]!, flags: match[3]! };
}

/** Starts a span: a child of the incoming trace context, or the root of a new trace. */
export function startSpan(headers: Headers): TraceContext {
  const parent = parseTraceparent(headers.get("traceparent"));
  return { traceId: parent?.traceId ?? hex(16), spanId: hex(8), flags: parent?.flags ?? "01" };
}

/** Formats a trace context as a `traceparent` header value. */
export function formatTraceparent(span: TraceContext): string {
  return `00-${span.traceId}-${span.spanId}-${span.flags}`;
}
