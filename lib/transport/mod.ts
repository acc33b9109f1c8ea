/**
 * What carries bytes: our HTTP/2 server (the gRPC ports, written on `Deno.listen`) and
 * client (the gRPC calls between processes, on `Deno.connect`), their HPACK codec, and the guarded
 * HTTP/1.1 listeners (timeouts, connection caps, and the requests and answers their handlers
 * see). Nothing here knows of Protobuf, RPC methods or policy.
 *
 * @module
 */

export { concat, release } from "./bytes.ts";
export { FieldHeaders, GuardResponse } from "./guard_messages.ts";
export {
  Cancellation,
  type CancelSignal,
  createH2Client,
  type H2Client,
  H2ClientError,
  type H2ClientOptions,
  type H2ClientResponse,
} from "./h2_client.ts";
export { ErrorCode, Flag, frame, FrameType, preface, Setting, writeU32 } from "./h2_frame.ts";
export {
  bodyOverBudget,
  type H2Request,
  type H2Response,
  type H2Server,
  serveH2,
} from "./h2_server.ts";
export { type HeaderField, HpackDecoder, hpackEncode, HpackEncoder } from "./hpack.ts";
export { maxHeadBytes } from "./http1.ts";
export {
  connectErrorBody,
  type ErrorBody,
  type GuardConfig,
  guardSettings,
  serveGuarded,
} from "./http_guard.ts";
