/**
 * The generic transcoder: `/v1` JSON over HTTP in, one RPC to the owning service, JSON out. Every
 * route comes from a `google.api.http` annotation; nothing here knows a particular endpoint.
 *
 * Order of checks: route (404/405) -> token (401) -> rate limit (429) -> body size (413) ->
 * content coding and type (415) -> JSON shape (400) -> preconditions of a POST (412, once its
 * collection reads: 403 and 404 first) -> the service (authorization 403, validation 400,
 * preconditions of a write 412, the rest). Status codes: POST 201, DELETE 204 without a body,
 * others 200. HEAD is GET without the body (RFC 9110 9.3.2): `Deno.serve` sends the head of the
 * same response, its `Content-Length` included. An `Idempotency-Key` header goes to the service
 * as `idempotency-key` metadata (lib/policy/idempotency.ts); a replayed outcome is answered with
 * `Idempotent-Replayed: true`.
 * A GET's `Cache-Control: no-cache` (RFC 9111 5.2.1.4) goes to the service as metadata, and the
 * answer comes from the source: neither this gateway's memory (./read_cache.ts) nor the service's.
 *
 * Conditional requests (RFC 9110 13.1, 13.2; ./conditions.ts) on every route:
 *
 * - GET evaluates `If-Match` (412) and then `If-None-Match` (304) against the answer's etag.
 * - A write (PATCH, PUT, DELETE) is made conditional on one version, in the service's one SQL
 *   statement (AIP-154's etag): an `If-Match` of one strong tag is that version. Any other
 *   condition (several tags, `If-None-Match`, `*` where a write creates) is evaluated here against
 *   the version the resource's GET reads (./routes.ts `readerOf`), and the write is then made
 *   conditional on that version: a concurrent change still gets 412, never a write the condition
 *   did not see. A condition found false is sent as an etag no version has (`noVersion`), so that
 *   the service's own checks (403, 404) come first and then ABORTED (412) changes nothing. "Only
 *   if absent" on a resource its write would create (the config) is the request's `create_only`,
 *   an insert that a concurrent creation makes fail.
 * - POST targets a collection, which exists and has no etag: `If-Match` with tags and
 *   `If-None-Match: *` are false, `If-Match: *` and `If-None-Match` with tags true. A false one
 *   is 412 without the POST being made, once the collection's GET, as the caller, has answered:
 *   its 403 or 404 (a project not in the token, a client that is not there) is what the POST
 *   would have been answered without the condition, and comes first (RFC 9110 13.2.1). A
 *   collection the body names (a unit's journey) is read with what the body gives.
 *
 * @module
 */

import {
  create,
  type DescField,
  type DescService,
  getOption,
  isFieldSet,
  type Message,
} from "@bufbuild/protobuf";
import { FieldMaskSchema } from "@bufbuild/protobuf/wkt";
import {
  type CallOptions,
  Code,
  ConnectError,
  createClient,
  type Transport,
} from "@connectrpc/connect";
import type { TokenVerifier } from "../lib/policy/mod.ts";
import {
  type Lease,
  type MemoryBudget,
  overBudgetRetrySeconds,
  smallRequestBytes,
} from "../lib/platform/mod.ts";
import { concat, GuardResponse } from "../lib/transport/mod.ts";
import type { FieldViolation } from "../lib/platform/mod.ts";
import type { Logger } from "../lib/platform/mod.ts";
import { keyHeader, replayedHeader } from "../lib/policy/mod.ts";
import {
  cacheControlHeader,
  forwardedForHeader,
  forwardedUserAgentHeader,
  noCache,
} from "../lib/platform/mod.ts";
import { field_behavior, FieldBehavior } from "../gen/google/api/field_behavior_pb.ts";
import { decodeAnswer, type GrpcTransport, isGrpcTransport, wireSizeOf } from "../lib/rpc/mod.ts";
import { anyVersion, isEtag, noVersion } from "../lib/resource/mod.ts";
import {
  type Condition,
  matches,
  maxConditionLength,
  noneMatches,
  parseCondition,
  strongTags,
} from "./conditions.ts";
import { errorResponse, methodNotAllowed, rpcErrorResponse } from "./http_errors.ts";
import {
  decodeMessage,
  decodeScalarParam,
  encodeMessage,
  maxBodyDepth,
  nestsDeeperThan,
  repeatedMember,
} from "./json_codec.ts";
import type { RateLimiter } from "./rate_limit.ts";
import type { ReadCache } from "./read_cache.ts";
import { wireJsonSupported, wireToJson } from "./wire_json.ts";
import {
  buildRoutes,
  conditional,
  type Match,
  matchRoute,
  type Reader,
  readerOf,
  type Route,
} from "./routes.ts";

/** A backend: the services it serves and the transport that reaches it. */
export interface Backend {
  /** Its services. */
  services: DescService[];
  /** A Connect transport to it. */
  transport: Transport;
}

/** Options of {@link createTranscoder}. */
export interface TranscoderOptions {
  /** The backends. */
  backends: Backend[];
  /** Verifies bearer tokens (before any body is read). */
  verify: TokenVerifier;
  /** Logger. */
  log: Logger;
  /** Largest request body, in bytes (default 1 MiB). */
  maxBodyBytes?: number;
  /** Deadline of each RPC, in milliseconds (default 10 s). */
  rpcTimeoutMs?: number;
  /** Per-caller rate limit (gateway/rate_limit.ts): seconds to wait, or undefined to go on. */
  rateLimit?: RateLimiter | undefined;
  /** The process's memory budget, which every request body is taken from (lib/platform/budget.ts). */
  budget: MemoryBudget;
  /** Reads answered from memory (./read_cache.ts); unset: every read is a call. */
  reads?: ReadCache | undefined;
}

/**
 * What a byte of request body costs the gateway while the request is served: the bytes, the
 * decoded text, the parsed JSON, the request message and its binary encoding are alive together.
 */
export const bodyCostFactor = 5;

/** The largest request body the gateway reads (1 MiB); a larger one is 413. */
export const defaultMaxBodyBytes = 1024 * 1024;

const jsonContentType = /^application\/json\s*(;|$)/i;
/** A `charset` parameter of a media type (RFC 9110 8.3.1), its value possibly quoted. */
const charsetParameter = /;\s*charset\s*=\s*(?:"([^"]*)"|([^\s;]*))/i;
const charsetParameters = /;\s*charset\s*=/gi;

/**
 * What a 415 for the body's media type says was wanted: `Accept` (RFC 9110 15.5.16), and for a
 * PATCH `Accept-Patch` (RFC 5789 2.2), whose documents here are JSON objects of the fields to set.
 */
function acceptedTypes(req: Request): Record<string, string> {
  const json = "application/json";
  return req.method === "PATCH" ? { accept: json, "accept-patch": json } : { accept: json };
}
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: Code,
    message: string,
    readonly details: FieldViolation[] = [],
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

function invalid(violations: FieldViolation[], message?: string): HttpError {
  const text = message ??
    (violations.length === 1
      ? `Invalid ${violations[0]!.field || "request"}: ${violations[0]!.description}`
      : `The request has ${violations.length} invalid fields`);
  return new HttpError(400, Code.InvalidArgument, text, violations);
}

/** A declared body up to this size is read in one step, its budget taken before it is read. */
const oneReadBytes = 64 * 1024;

/**
 * Reads the body up to the limit, taking its bytes (times {@link bodyCostFactor}) from the memory
 * budget into `lease`. A small body of declared length is read in one step (the stream's reader
 * costs more than the read itself for a small body) with its budget taken first; any other body
 * takes its budget as its bytes arrive, so that a large length declared and never sent holds
 * nothing. Undefined when it is empty. A body that cannot be read to its end (the client went away
 * mid-body, or broke the chunked framing) is the client's fault: 400, never a 500 in the logs and
 * metrics.
 */
async function readBody(req: Request, max: number, lease: Lease): Promise<Uint8Array | undefined> {
  const declared = req.headers.get("content-length");
  if (declared !== null && Number(declared) > max) throw tooLarge(max);
  if (!req.body) {
    // Deno.serve hides the body of a GET; one that was sent is refused like any unwanted body.
    if ((declared !== null && declared !== "0") || req.headers.has("transfer-encoding")) {
      throw invalid([], "This operation takes no request body");
    }
    return undefined;
  }
  if (declared !== null && Number(declared) <= oneReadBytes) {
    const cost = Number(declared) * bodyCostFactor;
    if (!lease.grow(cost, cost <= smallRequestBytes)) throw overBudget();
    // A declared length is what the body is (Deno.serve refuses any other).
    let bytes: Uint8Array;
    try {
      bytes = await req.bytes();
    } catch {
      throw invalid([], "The request body could not be read to its end");
    }
    return bytes.length === 0 ? undefined : bytes;
  }
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for await (const chunk of req.body) {
      size += chunk.byteLength;
      if (size > max) throw tooLarge(max);
      if (!lease.grow(chunk.byteLength * bodyCostFactor)) throw overBudget();
      chunks.push(chunk);
    }
  } catch (error) {
    if (error instanceof HttpError) throw error;
    throw invalid([], "The request body could not be read to its end");
  }
  if (size === 0) return undefined;
  return concat(chunks);
}

function overBudget(): HttpError {
  return new HttpError(
    503,
    Code.Unavailable,
    "The gateway is at its memory budget; retry later",
    [],
    { "retry-after": String(overBudgetRetrySeconds) },
  );
}

function tooLarge(max: number): HttpError {
  return new HttpError(413, Code.ResourceExhausted, `The request body exceeds ${max} bytes`);
}

function parseJson(req: Request, bytes: Uint8Array): unknown {
  // A body is read as it comes: a coding (gzip, ...) is refused, never read as identity (RFC 9110
  // 8.4, 15.5.16: 415 with the codings accepted).
  const coding = req.headers.get("content-encoding");
  if (coding !== null && coding.split(",").some((c) => !/^\s*(identity)?\s*$/i.test(c))) {
    throw new HttpError(
      415,
      Code.InvalidArgument,
      "The request body must not be content-coded (Content-Encoding: identity only)",
      [],
      { "accept-encoding": "identity" },
    );
  }
  const type = req.headers.get("content-type") ?? "";
  if (!jsonContentType.test(type)) {
    throw new HttpError(
      415,
      Code.InvalidArgument,
      "The request body must be application/json",
      [],
      acceptedTypes(req),
    );
  }
  // JSON is UTF-8 (RFC 8259 8.1): a body labelled with another charset is refused, not read as
  // UTF-8 regardless (as body-parser and Spring answer it: 415); so is one labelled with two
  // (which would a proxy in front have read?).
  const charset = charsetParameter.exec(type);
  if (
    charset &&
    ((charset[1] ?? charset[2] ?? "").toLowerCase() !== "utf-8" ||
      type.match(charsetParameters)!.length > 1)
  ) {
    throw new HttpError(
      415,
      Code.InvalidArgument,
      "The request body must be UTF-8 JSON (charset=utf-8 once, or no charset)",
      [],
      acceptedTypes(req),
    );
  }
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw invalid([], "The request body is not valid UTF-8");
  }
  if (nestsDeeperThan(text, maxBodyDepth)) {
    throw invalid([], `The request body nests objects and arrays more than ${maxBodyDepth} deep`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw invalid([], `The request body is not valid JSON: ${(error as Error).message}`);
  }
  const repeated = repeatedMember(text);
  if (repeated !== undefined) {
    throw invalid([{ field: repeated, description: "is given more than once" }]);
  }
  return parsed;
}

/** Builds the request message of a matched route from the path, the query and the body. */
async function buildRequest(
  route: Route,
  params: Map<DescField, string>,
  url: URL,
  req: Request,
  maxBodyBytes: number,
  lease: Lease,
): Promise<Message> {
  const input = create(route.method.input) as Message & Record<string, unknown>;
  const violations: FieldViolation[] = [];
  const bound = new Set<string>();

  for (const [field, raw] of params) {
    const result = decodeScalarParam(field, raw);
    if ("violation" in result) {
      violations.push({ field: field.name, description: result.violation });
    } else input[field.localName] = result.value;
    bound.add(field.name);
  }

  const bytes = await readBody(req, maxBodyBytes, lease);
  if (route.body.kind === "none") {
    // Any body is refused, `{}` included: a DELETE sent with one is a client that meant something
    // else (a body this route would ignore), and it must change nothing. Whatever its media type:
    // a 415 would name JSON as the type accepted.
    if (bytes !== undefined) throw invalid([], "This operation takes no request body");
  } else {
    const json = bytes === undefined ? undefined : parseJson(req, bytes);
    const target = route.body.kind === "field" ? route.body.field.message! : route.method.input;
    const decoded = decodeMessage(target, json === undefined ? {} : json);
    violations.push(...decoded.violations);
    if (route.body.kind === "field") {
      input[route.body.field.localName] = decoded.message;
      const mask = route.method.input.fields.find((f) => f.name === "update_mask");
      if (route.httpMethod === "PATCH" && mask?.message?.typeName === FieldMaskSchema.typeName) {
        input[mask.localName] = create(FieldMaskSchema, { paths: decoded.keys });
      }
    } else {
      for (const key of decoded.keys) {
        if (bound.has(key)) violations.push({ field: key, description: "is taken from the path" });
        else {
          const f = route.method.input.fields.find((f) => f.name === key)!;
          input[f.localName] = (decoded.message as Record<string, unknown>)[f.localName];
        }
      }
      for (const key of decoded.keys) bound.add(key);
    }
  }

  // A request without a query (most of them) makes no search parameters.
  if (url.search.length > 1) {
    // URLSearchParams turns a malformed escape into U+FFFD or keeps it as text; refuse it instead,
    // as a malformed path is refused (a Latin-1 `%E9` must not silently become another value).
    for (const part of url.search.slice(1).split("&")) {
      try {
        decodeURIComponent(part.replaceAll("+", " "));
      } catch {
        throw invalid([], "The query string has a malformed percent-encoding");
      }
    }
    // Each parameter is named once in the violations, however often it came: an unknown one as
    // unknown, a known one given twice or more as repeated.
    const seen = new Set<string>();
    const repeated = new Set<string>();
    for (const [key, raw] of url.searchParams) {
      const field = route.method.input.fields.find((f) => f.name === key);
      const known = field && !bound.has(key) && route.body.kind === "none" && key !== "etag";
      if (seen.has(key)) {
        if (known && !repeated.has(key)) {
          repeated.add(key);
          violations.push({ field: key, description: "must be given at most once" });
        }
      } else if (!known) {
        // A delete's etag comes from If-Match (the precondition header), never the query.
        violations.push({ field: key, description: "unknown query parameter" });
      } else {
        const result = decodeScalarParam(field, raw);
        if ("violation" in result) violations.push({ field: key, description: result.violation });
        else input[field.localName] = result.value;
      }
      seen.add(key);
    }
  }

  if (violations.length > 0) throw invalid(violations);
  return input;
}

/** A unary method of a connect-es client. */
type UnaryFn = (input: Message, options: CallOptions) => Promise<Message>;

/** The response headers of a call that sent none (never written to). */
const noHeaders = new Headers();

/** Correlation headers the gateway forwards to the services. */
export interface Correlation {
  /** The request id (`x-request-id`). */
  requestId: string;
  /** The gateway's span as a `traceparent` value. */
  traceparent: string;
  /** The client's address (CLIENT_ADDRESS_HEADER, else the peer's), for the audit trail. */
  clientAddress?: string;
}

/** What the transcoder answered, and the route template it matched (for logs and metrics). */
export interface Transcoded {
  /** The HTTP response. */
  response: Response;
  /** The matched template, e.g. `/v1/projects/{project_id}/clients`, or "unmatched". */
  route: string;
}

/** Creates the `/v1` handler. */
export function createTranscoder(
  options: TranscoderOptions,
): (req: Request, url: URL, correlation: Correlation) => Promise<Transcoded> {
  const maxBodyBytes = options.maxBodyBytes ?? defaultMaxBodyBytes;
  const timeoutMs = options.rpcTimeoutMs ?? 10_000;
  // One connect-es client per service, called by method name (the routes are built from the
  // same descriptors, so every route's method is on its service's client).
  const clients = new Map<DescService, Record<string, UnaryFn>>();
  const transports = new Map<DescService, Transport>();
  for (const b of options.backends) {
    for (const s of b.services) {
      clients.set(s, createClient(s, b.transport) as unknown as Record<string, UnaryFn>);
      transports.set(s, b.transport);
    }
  }
  const routes = buildRoutes([...clients.keys()]);
  // Where each write reads its resource's version for a precondition it evaluates itself.
  const readers = new Map<Route, Reader>();
  for (const route of routes) {
    if (route.httpMethod === "GET" || route.httpMethod === "POST") continue;
    const reader = readerOf(routes, route);
    if (!conditional(route) || !reader) {
      throw new Error(`Cannot evaluate If-Match on ${route.httpMethod} ${route.template}`);
    }
    readers.set(route, reader);
  }
  // The list of each POST's collection, read when the POST's precondition is false, and the
  // fields the list requires beyond its path, which name the collection in the POST's body (a
  // unit's `journey`: its collection is that journey's units).
  const collections = new Map<Route, { list: Route; fromBody: [DescField, DescField][] }>();
  for (const route of routes) {
    if (route.httpMethod !== "POST") continue;
    const list = routes.find((r) => r.httpMethod === "GET" && r.template === route.template);
    if (list === undefined) continue;
    const body = route.body.kind === "field" ? route.body.field.message : route.method.input;
    const fromBody: [DescField, DescField][] = [];
    for (const field of list.method.input.fields) {
      if (
        list.segments.includes(field) ||
        !getOption(field, field_behavior).includes(FieldBehavior.REQUIRED)
      ) continue;
      const given = body?.fields.find((f) => f.name === field.name);
      if (given?.fieldKind === "scalar" && field.fieldKind === "scalar") {
        fromBody.push([field, given]);
      }
    }
    collections.set(route, { list, fromBody });
  }
  // The fields of each route's answer that hold a credential (debug_redact).
  const credentials = new Map<Route, DescField[]>();
  for (const route of routes) {
    const schema = route.responseBody ? route.responseBody.message : route.method.output;
    credentials.set(route, schema?.fields.filter((f) => f.proto.options?.debugRedact) ?? []);
  }
  // The reads whose answer becomes JSON straight from its bytes (./wire_json.ts): GETs of a whole
  // message (pages) that hold no credential, that this gateway does not keep, over a transport that
  // hands bytes over.
  const fromWire = new Map<Route, GrpcTransport>();
  for (const route of routes) {
    const transport = transports.get(route.service)!;
    if (
      route.httpMethod === "GET" && route.responseBody === undefined &&
      credentials.get(route)!.length === 0 && !(options.reads?.keeps(route.method) ?? false) &&
      isGrpcTransport(transport) && wireJsonSupported(route.method.output)
    ) {
      fromWire.set(route, transport);
    }
  }

  return async (req, url, correlation) => {
    // HEAD is GET without the body (RFC 9110 9.3.2): the same route, the same answer.
    const method = req.method === "HEAD" ? "GET" : req.method;
    const match = matchRoute(routes, method, url.pathname);
    if (match.kind !== "found") return { response: unmatched(match, req, url), route: "unmatched" };
    const { route, params } = match;
    return { response: await call(route, params, req, url, correlation), route: route.template };
  };

  function unmatched(match: Exclude<Match, { kind: "found" }>, req: Request, url: URL): Response {
    if (match.kind === "bad_path") {
      return errorResponse(400, Code.InvalidArgument, "The path has a malformed percent-encoding");
    }
    if (match.kind === "method_not_allowed") {
      return methodNotAllowed(
        req.method,
        match.allow.flatMap((m) => m === "GET" ? ["GET", "HEAD"] : [m]),
      );
    }
    return errorResponse(404, Code.NotFound, `No route for ${url.pathname}`);
  }

  async function call(
    route: Route,
    params: Map<DescField, string>,
    req: Request,
    url: URL,
    correlation: Correlation,
  ): Promise<Response> {
    const bodyField = route.body.kind === "field" ? route.body.field.name : undefined;
    // Every byte this request holds is taken from the budget, in the caller's share (one caller
    // cannot hold more than its share, whatever it sends); given back when it is answered.
    let lease: Lease | undefined;
    try {
      const authorization = req.headers.get("authorization");
      const caller = await options.verify(authorization);
      const wait = options.rateLimit?.(caller.subject);
      if (wait !== undefined) {
        return errorResponse(429, Code.ResourceExhausted, "Too many requests; retry later", [], {
          "retry-after": String(wait),
        });
      }
      lease = options.budget.take(0, [`sub:${caller.subject}`]);
      if (!lease) throw overBudget();
      const input = await buildRequest(route, params, url, req, maxBodyBytes, lease);
      const header: Record<string, string> = {
        authorization: authorization!,
        "x-request-id": correlation.requestId,
        traceparent: correlation.traceparent,
      };
      // Who called, from where, for the services' audit trails.
      if (correlation.clientAddress) header[forwardedForHeader] = correlation.clientAddress;
      const agent = req.headers.get("user-agent");
      if (agent !== null) header[forwardedUserAgentHeader] = agent;
      const conditions = conditionsOf(route, req);
      if (route.httpMethod === "POST") {
        await collectionPrecondition(route, params, input, conditions, header);
      } else if (route.httpMethod !== "GET") {
        await precondition(route, params, input, conditions, header);
      }
      const key = req.headers.get(keyHeader);
      if (key !== null) header[keyHeader] = key;
      // A read that must come from the source (RFC 9111 5.2.1.4): past this gateway's memory and
      // the service's.
      const fresh = route.httpMethod === "GET" && noCache(req.headers);
      if (fresh) header[cacheControlHeader] = "no-cache";
      let responseHeader = noHeaders;
      const invoke = () =>
        clients.get(route.service)![route.method.localName]!(input, {
          timeoutMs,
          headers: header,
          onHeader: (h) => responseHeader = h,
        });
      const reads = options.reads;
      const direct = fromWire.get(route);
      let message: Message | undefined;
      let json: Uint8Array<ArrayBuffer> | undefined;
      let wireSize: number;
      if (direct !== undefined) {
        const answer = await direct.unaryBytes(route.method, header, input, timeoutMs);
        wireSize = answer.bytes.length;
        json = wireToJson(route.method.output, answer.bytes);
        // Bytes the JSON is not written from directly are read the usual way.
        if (json === undefined) message = decodeAnswer(route.method.output, answer.bytes);
        responseHeader = answer.header;
      } else if (reads === undefined) message = await invoke();
      else if (route.httpMethod === "GET") {
        message = reads.keeps(route.method) && !fresh
          ? await reads.through(route.method, input, caller, invoke)
          : await invoke();
      } else {
        try {
          message = await invoke();
        } finally {
          reads.wrote(route.method, input);
        }
      }
      // The answer is held again while it becomes JSON: its bytes are taken too.
      wireSize ??= wireSizeOf(message!);
      const cost = wireSize * bodyCostFactor;
      if (!lease.grow(cost, lease.bytes + cost <= smallRequestBytes)) {
        throw overBudget();
      }
      if (route.httpMethod === "DELETE") return new GuardResponse(null, { status: 204 });
      const out = route.responseBody
        ? (message as Record<string, unknown>)[route.responseBody.localName] as Message
        : message;
      const schema = route.responseBody ? route.responseBody.message! : route.method.output;
      if (out === undefined && json === undefined) {
        throw new ConnectError(`${route.method.name} returned no ${bodyField}`, Code.Internal);
      }
      const headers = replayed(responseHeader);
      // A single resource's version, as its `ETag` (a strong validator, RFC 9110 8.8.3).
      const etag = route.responseBody ? (out as { etag?: unknown }).etag : undefined;
      const version = typeof etag === "string" && etag !== "" ? etag : undefined;
      if (version !== undefined) headers.etag = `"${version}"`;
      if (route.httpMethod === "GET") {
        // RFC 9110 13.2.2: If-Match first (412), then If-None-Match (304 for a GET).
        if (conditions.ifMatch !== undefined && !matches(conditions.ifMatch, version)) {
          throw ifMatchFailed();
        }
        if (conditions.ifNoneMatch !== undefined && !noneMatches(conditions.ifNoneMatch, version)) {
          return new GuardResponse(null, { status: 304, headers });
        }
      }
      if (json !== undefined) {
        headers["content-type"] = "application/json";
        return new GuardResponse(json, { status: 200, headers });
      }
      // A credential (a secret's plaintext, a generated private key) is stored by no cache.
      if (credentials.get(route)!.some((f) => isFieldSet(out!, f))) {
        headers["cache-control"] = "no-store";
      }
      // A POST creates, unless its answer says it updated what was there (`created: false`, a
      // consent given again).
      const created = route.httpMethod === "POST" &&
        (message as { created?: unknown }).created !== false;
      if (created) {
        // What was created is this collection's item of its id (RFC 9110 15.3.2, 10.2.2).
        const id = (out as { id?: unknown }).id;
        if (typeof id === "string" && id !== "") headers.location = `${url.pathname}/${id}`;
      }
      return GuardResponse.json(encodeMessage(schema, out!), {
        status: created ? 201 : 200,
        headers,
      });
    } catch (error) {
      if (error instanceof HttpError) {
        return errorResponse(error.status, error.code, error.message, error.details, error.headers);
      }
      const err = ConnectError.from(error);
      if (
        err.code === Code.Internal || err.code === Code.Unknown || err.code === Code.Unavailable
      ) {
        options.log.error("rpc failed", {
          rpc: `${route.service.typeName}/${route.method.name}`,
          code: Code[err.code],
          request_id: correlation.requestId,
          error: err.cause ?? err,
        });
      }
      const res = rpcErrorResponse(err, bodyField, req.headers.get("authorization"));
      for (const [name, value] of Object.entries(replayed(err.metadata))) {
        res.headers.set(name, value);
      }
      return res;
    } finally {
      lease?.release();
    }
  }

  /**
   * The preconditions of a write (PATCH, PUT, DELETE), turned into the one version the write is
   * conditional on (the resource's `etag` field for an update, the request's for a delete): see
   * the module's comment. Without `If-Match`, the body's `etag` (a PATCH's) is its one tag.
   */
  async function precondition(
    route: Route,
    params: Map<DescField, string>,
    input: Message,
    conditions: Conditions,
    header: Record<string, string>,
  ): Promise<void> {
    const target = route.body.kind === "field"
      ? (input as Record<string, unknown>)[route.body.field.localName] as Record<string, unknown>
      : input as unknown as Record<string, unknown>;
    const { ifNoneMatch } = conditions;
    let { ifMatch } = conditions;
    const bodyTag = ifMatch === undefined && typeof target.etag === "string" && target.etag !== ""
      ? target.etag
      : undefined;
    const fromBody = bodyTag !== undefined;
    if (fromBody) {
      // A malformed one is the service's 400.
      if (!isEtag(bodyTag)) return;
      ifMatch = [{ tag: bodyTag, weak: false }];
    }
    if (ifMatch === undefined && ifNoneMatch === undefined) return;
    // A write that creates when there is nothing (the config's) takes "only if absent" as a field.
    const createOnly = route.method.input.fields.find((f) => f.name === "create_only");
    if (ifNoneMatch === undefined) {
      if (ifMatch === "*") {
        // Any current version, decided by the write itself and not by a read before it, which a
        // concurrent change could make stale: a write that would create takes `anyVersion` (it
        // then updates only), any other none (it is refused, 404, when there is nothing).
        target.etag = createOnly ? anyVersion : "";
        return;
      }
      const tags = strongTags(ifMatch!);
      if (tags.length <= 1) {
        // A header's tag is a version only if a version could be it: `"*"` (quoted) is an entity
        // tag, never the wildcard the write's etag `*` is, and one longer than an etag is just
        // false (412), not the write's malformed etag field (400).
        const tag = tags[0];
        target.etag = tag !== undefined && (fromBody || (tag !== anyVersion && isEtag(tag)))
          ? tag
          : noVersion;
        return;
      }
    }
    const current = await currentVersion(route, params, header);
    if (current === undefined) {
      // Nothing there: If-Match is false; If-None-Match true, for a write that creates only.
      if (ifMatch === undefined && createOnly) {
        (input as Record<string, unknown>)[createOnly.localName] = true;
        target.etag = "";
      } else target.etag = noVersion;
      return;
    }
    const holds = (ifMatch === undefined || matches(ifMatch, current)) &&
      (ifNoneMatch === undefined || noneMatches(ifNoneMatch, current));
    target.etag = holds ? current : noVersion;
  }

  /**
   * The preconditions of a POST: 412 when false, once the collection's GET, read as the caller
   * (one item), has answered; its error (403, 404) is the answer instead, as the POST's own would
   * have been without the condition (RFC 9110 13.2.1).
   */
  async function collectionPrecondition(
    route: Route,
    params: Map<DescField, string>,
    request: Message,
    conditions: Conditions,
    header: Record<string, string>,
  ): Promise<void> {
    const failure = collectionConditionFailure(conditions);
    if (failure === undefined) return;
    const collection = collections.get(route);
    if (collection !== undefined) {
      const { list, fromBody } = collection;
      const input = readInput(list, params);
      const body = (route.body.kind === "field"
        ? (request as Record<string, unknown>)[route.body.field.localName]
        : request) as Record<string, unknown> | undefined;
      for (const [field, given] of fromBody) {
        const value = body?.[given.localName];
        if (value !== undefined) {
          input[field.localName] = value;
        }
      }
      const limit = list.method.input.fields.find((f) =>
        f.name === "limit"
      );
      if (limit?.fieldKind === "scalar") input[limit.localName] = 1;
      await clients.get(list.service)![list.method.localName]!(input, {
        timeoutMs,
        headers: header,
      });
    }
    throw failure;
  }

  /**
   * The current etag of a write's resource, read as the caller (./routes.ts `readerOf`) from the
   * source (`cache-control: no-cache`): a service's memory may not have heard of a change yet, and
   * the write would be made conditional on a version already replaced (a 412 the condition did not
   * call for); undefined when there is none (NOT_FOUND). Any other failure is the answer.
   */
  async function currentVersion(
    route: Route,
    params: Map<DescField, string>,
    header: Record<string, string>,
  ): Promise<string | undefined> {
    const reader = readers.get(route)!;
    const input = readInput(reader.route, params, reader.item);
    let message: Message;
    try {
      message = await clients.get(reader.route.service)![reader.route.method.localName]!(input, {
        timeoutMs,
        headers: { ...header, [cacheControlHeader]: "no-cache" },
      });
    } catch (error) {
      if (ConnectError.from(error).code === Code.NotFound) return undefined;
      throw error;
    }
    const resource = reader.item === undefined
      ? (message as Record<string, unknown>)[reader.route.responseBody!.localName]
      : ((message as Record<string, unknown>).data as { id: string }[]).find((i) =>
        i.id === params.get(reader.item!)
      );
    return (resource as { etag?: string } | undefined)?.etag;
  }
}

/**
 * The request message of `read`, a GET the gateway makes for a precondition, from the path
 * parameters of the request it serves that `read` has too (`skip` left out: the item a list is
 * searched for).
 */
function readInput(
  read: Route,
  params: Map<DescField, string>,
  skip?: DescField,
): Message & Record<string, unknown> {
  const input = create(read.method.input) as Message & Record<string, unknown>;
  for (const [field, raw] of params) {
    const into = read.method.input.fields.find((f) => f.name === field.name);
    if (!into || field === skip) continue;
    const decoded = decodeScalarParam(into, raw);
    if ("value" in decoded) input[into.localName] = decoded.value;
  }
  return input;
}

/** `Idempotent-Replayed: true` when the service replayed a stored outcome. */
function replayed(header: Headers): Record<string, string> {
  return header.get(replayedHeader) === "true" ? { "idempotent-replayed": "true" } : {};
}

/** The request's preconditions, parsed. */
interface Conditions {
  ifMatch: Condition | undefined;
  ifNoneMatch: Condition | undefined;
}

/**
 * Reads `If-Match` and `If-None-Match`: a malformed `If-Match` is 400, as is a malformed
 * `If-None-Match` on a write (a guard the client counts on is never dropped); on a GET a
 * malformed `If-None-Match` is ignored, which only costs a full answer.
 */
function conditionsOf(route: Route, req: Request): Conditions {
  const read = (name: string, ignoreMalformed: boolean): Condition | undefined => {
    const value = req.headers.get(name);
    if (value === null) return undefined;
    const condition = parseCondition(value);
    if (condition !== undefined || ignoreMalformed) return condition;
    throw new HttpError(
      400,
      Code.InvalidArgument,
      `${name} must be * or a list of entity tags ("...", as the ETag header gives them, or ` +
        `W/"..."), at most ${maxConditionLength.toLocaleString("en-US")} characters`,
    );
  };
  return {
    ifMatch: read("If-Match", false),
    ifNoneMatch: read("If-None-Match", route.httpMethod === "GET"),
  };
}

function ifMatchFailed(): HttpError {
  return new HttpError(
    412,
    Code.Aborted,
    "If-Match names no current version of the resource; read it again and retry",
  );
}

/**
 * The failure of a POST's preconditions, or undefined when they hold: its target is a collection,
 * which exists and has no etag, so `If-Match` holds only as `*`, and `If-None-Match` only as tags
 * (RFC 9110 13.1.1, 13.1.2).
 */
function collectionConditionFailure(conditions: Conditions): HttpError | undefined {
  const { ifMatch, ifNoneMatch } = conditions;
  if (ifMatch !== undefined && !matches(ifMatch, undefined)) return ifMatchFailed();
  if (ifNoneMatch !== undefined && !noneMatches(ifNoneMatch, undefined)) {
    return new HttpError(
      412,
      Code.Aborted,
      "If-None-Match: * is false for a collection, which exists; a POST adds to it",
    );
  }
  return undefined;
}
