/**
 * How a process serves and calls RPCs: connect-es routers served on our transports (gRPC on the
 * HTTP/2 server, Connect on `Deno.serve`), the interceptors every call goes through, health and
 * reflection; and the gRPC transport that calls other processes over our HTTP/2 client. Nothing here knows of Postgres or of a particular service.
 *
 * @module
 */

export { bindGrpc, encodeGrpcMessage, serveGrpc } from "./grpc_server.ts";
export { encodeMessage } from "./encode.ts";
export {
  createGrpcTransport,
  decodeAnswer,
  type GrpcTransport,
  type GrpcTransportOptions,
  isGrpcTransport,
  type UndecodedAnswer,
  wireSizeOf,
} from "./grpc_transport.ts";
export { availability, deadline, logging, metering, tracing } from "./interceptors.ts";
export { answerWith, bind, type Binding, messageCostFactor, register } from "./router.ts";
export { type RunningServer, serve } from "./server.ts";
