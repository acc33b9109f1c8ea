/**
 * The context of one call, for the servers of this library (lib/grpc_server.ts and the Connect
 * unary path of lib/connect_unary.ts): what connect's `createHandlerContext` makes, made for less.
 * Under gRPC load `createHandlerContext` took ~10% of a service's CPU, mostly copying `Headers`
 * through WebIDL, and a DOMException or ConnectError made (with its stack trace) at every call's
 * end.
 *
 * @module
 */

import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, createContextValues, type HandlerContext } from "@connectrpc/connect";

/**
 * The header map of a call: a `Headers` without the WebIDL checks and copies of the built-in one,
 * which took ~8% of a service's CPU under gRPC load (the fields come from our HPACK decoder, names
 * already lower case). Repeated names are joined with ", " as `Headers` does. It has every method of
 * `Headers`; cast to `Headers` only for `HandlerContext`'s type.
 */
export class CallHeaders {
  readonly #map = new Map<string, string>();

  /** Adds a value, without the whitespace around it (not part of a field value, RFC 9110 5.5). */
  append(name: string, value: string): void {
    const key = name.toLowerCase();
    value = value.trim();
    const had = this.#map.get(key);
    this.#map.set(key, had === undefined ? value : `${had}, ${value}`);
  }
  delete(name: string): void {
    this.#map.delete(name.toLowerCase());
  }
  get(name: string): string | null {
    return this.#map.get(name.toLowerCase()) ?? null;
  }
  getSetCookie(): string[] {
    const value = this.#map.get("set-cookie");
    return value === undefined ? [] : [value];
  }
  has(name: string): boolean {
    return this.#map.has(name.toLowerCase());
  }
  set(name: string, value: string): void {
    this.#map.set(name.toLowerCase(), value);
  }
  forEach(
    fn: (value: string, name: string, parent: CallHeaders) => void,
    thisArg?: unknown,
  ): void {
    for (const [name, value] of this.entries()) fn.call(thisArg, value, name, this);
  }
  *entries(): IterableIterator<[string, string]> {
    yield* [...this.#map].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  }
  *keys(): IterableIterator<string> {
    for (const [name] of this.entries()) yield name;
  }
  *values(): IterableIterator<string> {
    for (const [, value] of this.entries()) yield value;
  }
  [Symbol.iterator](): IterableIterator<[string, string]> {
    return this.entries();
  }
}

/** What a call's signal aborts with once the call is over (one instance: no stack trace each). */
const callEnded = new ConnectError("the call has ended", Code.Canceled);

/** What {@link createCallContext} needs. */
export interface CallInit {
  /** The service. */
  service: DescService;
  /** The method. */
  method: DescMethod;
  /** `grpc` or `connect`. */
  protocolName: string;
  /** The request path. */
  url: string;
  /** The request's headers (a `Headers`, or a {@link CallHeaders}). */
  requestHeader: Headers | CallHeaders;
  /** The deadline, from now, if the caller set one. */
  timeoutMs: number | undefined;
  /** Aborts when the caller goes away; the call is then CANCELED. */
  requestSignal: AbortSignal;
}

/** A call's context and its end. */
export interface Call {
  /** What the handler gets. */
  ctx: HandlerContext;
  /** Stops listening to the request's signal (before the server ends the request itself). */
  detach(): void;
  /** Ends the call: clears the deadline, detaches, aborts the handler's signal. */
  end(): void;
}

/** The longest delay setTimeout keeps; a longer one fires at once. */
const maxTimerMs = 2 ** 31 - 1;

/**
 * Makes the context of a call: its signal aborts with CANCELED when the caller goes away, with
 * DEADLINE_EXCEEDED at the deadline (as connect's handlers do), and when the call ends.
 */
export function createCallContext(init: CallInit): Call {
  const cancel = new AbortController();
  const onCancel = () => cancel.abort(new ConnectError("the call was cancelled", Code.Canceled));
  init.requestSignal.addEventListener("abort", onCancel, { once: true });
  const timeoutMs = init.timeoutMs;
  const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
  const expire = () =>
    cancel.abort(new ConnectError("the operation timed out", Code.DeadlineExceeded));
  // A deadline past setTimeout's range (2^31 - 1 ms, ~24.8 days) would fire at once: no call
  // lives that long, so it gets no timer (grpc-timeout allows up to 10^8 hours).
  const timer = timeoutMs === undefined || timeoutMs <= 0 || timeoutMs > maxTimerMs
    ? undefined
    : setTimeout(expire, timeoutMs);
  if (timeoutMs !== undefined && timeoutMs <= 0) expire();
  const ctx: HandlerContext = {
    service: init.service,
    method: init.method,
    protocolName: init.protocolName,
    requestMethod: "POST",
    url: init.url,
    requestHeader: init.requestHeader as unknown as Headers,
    responseHeader: new CallHeaders() as unknown as Headers,
    responseTrailer: new CallHeaders() as unknown as Headers,
    signal: cancel.signal,
    timeoutMs: () => deadline === undefined ? undefined : deadline - Date.now(),
    values: createContextValues(),
  };
  const detach = () => init.requestSignal.removeEventListener("abort", onCancel);
  return {
    ctx,
    detach,
    end() {
      clearTimeout(timer);
      detach();
      cancel.abort(callEnded);
    },
  };
}
