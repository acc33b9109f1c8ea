/**
 * The transport under the gateway's connect-es clients (gateway/transcoder.ts calls each service
 * through `createClient`): unary calls of the Connect protocol with binary messages over `fetch`
 * (HTTP/1.1 keep-alive to `Deno.serve`: ~10,400-11,400 req/s for an echo service on our 2-core
 * machines, the fastest pairing measured; gRPC pairings did 3,400-8,500, and gRPC over our own
 * HTTP/2 client measured slower than this too: 2,239 vs 2,543 gateway GETs/s in one session).
 * connect-es's helpers read the protocol's answers (`errorFromJsonBytes`, `trailerDemux`,
 * `codeFromHttpStatus`).
 *
 * Why not connect-es's own Connect transport over its fetch client: it streams the request body
 * (chunked, so the service cannot size it from its length), and per call it runs a generic
 * pipeline of async iterables and two linked AbortControllers, one aborted without a reason (a
 * DOMException with its stack): ~5% of the gateway's CPU around a call that is one POST in and one
 * body out, when the gateway is the bottleneck of every request. The wire format is the same, so
 * the services cannot tell.
 *
 * Failures: a connection failure, or a backend that dies before its body is complete, is
 * UNAVAILABLE (HTTP 503), never UNKNOWN (500); a call past its deadline is DEADLINE_EXCEEDED; a
 * backend's error answer is read as connect reads it (the JSON error body, or the HTTP status).
 *
 * @module
 */

import { create, fromBinary, isMessage, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, type Transport } from "@connectrpc/connect";
import {
  codeFromHttpStatus,
  errorFromJsonBytes,
  trailerDemux,
} from "@connectrpc/connect/protocol-connect";

/**
 * The size on the wire of each response message the transport returned, for the gateway's memory
 * budget (a list page can be a megabyte, held again as JSON while it is answered).
 */
export const wireSizes: WeakMap<object, number> = new WeakMap();

/** A transport to one service at `baseUrl` (unary methods only; the gateway has no others). */
export function backendTransport(baseUrl: string): Transport {
  const base = baseUrl.replace(/\/$/, "");
  return {
    async unary(method, signal, timeoutMs, header, input) {
      // A plain record: fetch converts it once (a Headers built here would be converted again).
      const headers: Record<string, string> = {};
      if (header instanceof Headers) header.forEach((value, name) => headers[name] = value);
      else if (Array.isArray(header)) {
        for (const [name, value] of header) {
          headers[name!] = value!;
        }
      } else if (header) Object.assign(headers, header);
      headers["content-type"] = "application/proto";
      headers["connect-protocol-version"] = "1";
      const deadline = new AbortController();
      let timer: ReturnType<typeof setTimeout> | undefined;
      if (timeoutMs !== undefined) {
        headers["connect-timeout-ms"] = String(timeoutMs);
        timer = setTimeout(() => deadline.abort(), timeoutMs);
      }
      const onAbort = () => deadline.abort();
      signal?.addEventListener("abort", onAbort, { once: true });
      const body = toBinary(
        method.input,
        isMessage(input, method.input) ? input : create(method.input, input),
      );
      let status: number;
      let responseHeaders: Headers;
      let bytes: Uint8Array;
      try {
        const res = await fetch(`${base}/${method.parent.typeName}/${method.name}`, {
          method: "POST",
          headers,
          body: body as Uint8Array<ArrayBuffer>,
          signal: deadline.signal,
        });
        // Read whole here: a body cut short by a dying backend fails this call as UNAVAILABLE.
        bytes = new Uint8Array(await res.arrayBuffer());
        status = res.status;
        responseHeaders = res.headers;
      } catch (error) {
        if (signal?.aborted) {
          throw new ConnectError(
            "the call was cancelled",
            Code.Canceled,
            undefined,
            undefined,
            error,
          );
        }
        if (deadline.signal.aborted) {
          throw new ConnectError(
            "The backend service did not answer in time",
            Code.DeadlineExceeded,
            undefined,
            undefined,
            error,
          );
        }
        throw new ConnectError(
          "The backend service is unreachable",
          Code.Unavailable,
          undefined,
          undefined,
          error,
        );
      } finally {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
      }
      if (status !== 200) {
        const [responseHeader, trailer] = trailerDemux(responseHeaders);
        const metadata = new Headers(responseHeader);
        trailer.forEach((value, name) => metadata.append(name, value));
        const fallback = new ConnectError(
          `HTTP ${status} from the backend service`,
          codeFromHttpStatus(status),
          metadata,
        );
        if (!(responseHeaders.get("content-type") ?? "").startsWith("application/json")) {
          throw fallback;
        }
        try {
          throw errorFromJsonBytes(bytes, metadata, fallback);
        } catch (error) {
          throw error instanceof ConnectError ? error : fallback;
        }
      }
      let message;
      try {
        message = fromBinary(method.output, bytes);
        wireSizes.set(message, bytes.length);
      } catch (error) {
        throw new ConnectError(
          "The backend service answered with a malformed message",
          Code.Internal,
          undefined,
          undefined,
          error,
        );
      }
      // The gateway reads no trailers of a success: the headers are passed on as they came.
      return {
        stream: false,
        service: method.parent,
        method,
        header: responseHeaders,
        message,
        trailer: new Headers(),
      };
    },
    stream() {
      return Promise.reject(
        new ConnectError("The gateway makes no streaming calls", Code.Unimplemented),
      );
    },
  };
}
