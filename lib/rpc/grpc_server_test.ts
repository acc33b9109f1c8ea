/**
 * Tests of lib/rpc/grpc_server.ts with a stock @grpc/grpc-js client (on Node.js, through
 * lib/testing/grpc_client.ts's grpcChannel): every method kind, status details, metadata,
 * deadlines and cancels, message limits and reflection.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import {
  create,
  type DescFile,
  type DescMethod,
  type DescService,
  fromBinary,
  type MessageInitShape,
  type MessageShape,
  toBinary,
} from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { findTrailerError } from "@connectrpc/connect/protocol-grpc";
import { BadRequestSchema } from "../../gen/google/rpc/error_details_pb.ts";
import {
  Health,
  HealthCheckResponse_ServingStatus as Status,
} from "../../gen/grpc/health/v1/health_pb.ts";
import {
  ServerReflection,
  type ServerReflectionRequest,
  type ServerReflectionResponse,
} from "../../gen/grpc/reflection/v1/reflection_pb.ts";
import { bindGrpc, serveGrpc } from "./grpc_server.ts";
import { createH2Client, type H2Client } from "../transport/mod.ts";
import type { Binding } from "./router.ts";
import { OAuthRegistryService } from "../../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { createReflectionImpl } from "./reflection.ts";
import {
  type GrpcChannel,
  grpcChannel,
  type GrpcFailure,
  GrpcMetadata,
  type RawCall,
} from "../testing/mod.ts";

const status = { CANCELLED: 1, DEADLINE_EXCEEDED: 4, RESOURCE_EXHAUSTED: 8, UNIMPLEMENTED: 12 };
const INTERNAL = 13;
const UNAVAILABLE = 14;

type HealthImpl = Partial<ServiceImpl<typeof Health>>;

const health = (impl: HealthImpl): Binding => bindGrpc(Health, impl);

/** Starts a server on an ephemeral port, runs `fn` with a client, then closes both. */
async function withServer(
  bindings: Binding[],
  fn: (client: GrpcChannel) => Promise<void>,
): Promise<void> {
  const server = serveGrpc(bindings, { port: 0, hostname: "127.0.0.1" });
  const client = grpcChannel(`127.0.0.1:${server.port}`);
  try {
    await fn(client);
  } finally {
    client.close();
    await server.close(0);
  }
}

const pathOf = (m: DescMethod) => `/${m.parent.typeName}/${m.name}`;

/** A call's answer, or its failure (status code, message and trailers). */
interface Answered<T> {
  responses: T[];
  /** The status's trailers, also on success. */
  trailers: GrpcMetadata;
}

/** Makes a call of any kind; rejects with a {@link GrpcFailure} unless the status is OK. */
async function invoke<M extends DescMethod>(
  client: GrpcChannel,
  method: M,
  requests: MessageInitShape<M["input"]>[],
  options: Omit<RawCall, "path" | "requests" | "kind"> = {},
): Promise<Answered<MessageShape<M["output"]>>> {
  const out = await client.call({
    kind: method.methodKind,
    path: pathOf(method),
    requests: requests.map((r) => toBinary(method.input, create(method.input, r))),
    ...options,
  });
  const responses = out.responses.map((b) =>
    fromBinary(method.output, b) as MessageShape<M["output"]>
  );
  if (out.code !== 0) {
    throw Object.assign(
      new Error(`${out.code}: ${out.details}`),
      { code: out.code, details: out.details, metadata: out.metadata, responses },
    );
  }
  return { responses, trailers: out.metadata };
}

async function unary<M extends DescMethod & { methodKind: "unary" }>(
  client: GrpcChannel,
  method: M,
  request: MessageInitShape<M["input"]>,
  options: Omit<RawCall, "path" | "requests" | "kind"> = {},
): Promise<MessageShape<M["output"]>> {
  return (await invoke(client, method, [request], options)).responses[0]!;
}

/** A failed call's status, and the responses that came before it. */
type Failure = GrpcFailure & { responses: unknown[] };

/** Rejects with the call's failure. */
async function failure(call: Promise<unknown>): Promise<Failure> {
  try {
    await call;
  } catch (e) {
    return e as Failure;
  }
  throw new Error("call succeeded");
}

Deno.test("unary Check returns SERVING", async () => {
  await withServer([health({ check: () => ({ status: Status.SERVING }) })], async (client) => {
    const res = await unary(client, Health.method.check, {});
    assert.equal(res.status, Status.SERVING);
  });
});

Deno.test("ConnectError with details arrives with code, message and status details", async () => {
  const check = () => {
    throw new ConnectError("bad", Code.InvalidArgument, undefined, [{
      desc: BadRequestSchema,
      value: { fieldViolations: [{ field: "x", description: "y" }] },
    }]);
  };
  await withServer([health({ check })], async (client) => {
    const err = await failure(unary(client, Health.method.check, {}));
    assert.equal(err.code, 3);
    assert.equal(err.details, "bad");
    const [bin] = err.metadata.get("grpc-status-details-bin");
    assert.ok(bin instanceof Buffer);
    const headers = new Headers({
      "grpc-status": String(err.code),
      "grpc-status-details-bin": bin.toString("base64"),
    });
    const decoded = findTrailerError(headers);
    assert.ok(decoded);
    assert.equal(decoded.code, Code.InvalidArgument);
    assert.equal(decoded.rawMessage, "bad");
    const [detail] = decoded.findDetails(BadRequestSchema);
    assert.deepEqual(
      detail?.fieldViolations.map((v) => [v.field, v.description]),
      [["x", "y"]],
    );
  });
});

Deno.test("a plain Error becomes INTERNAL without its message", async () => {
  const check = () => {
    throw new Error("secret db detail");
  };
  await withServer([health({ check })], async (client) => {
    const err = await failure(unary(client, Health.method.check, {}));
    assert.equal(err.code, INTERNAL);
    assert.equal(err.details, "internal error");
    assert.equal(err.metadata.get("grpc-status-details-bin").length, 0);
  });
});

Deno.test("metadata, deadline and response trailers reach the handler context", async () => {
  let authorization: string | null = null;
  let timeoutMs: number | undefined;
  let protocol = "";
  let peer: string | null = null;
  let forwarded: string | null = null;
  const check: HealthImpl["check"] = (_req, ctx) => {
    authorization = ctx.requestHeader.get("authorization");
    peer = ctx.requestHeader.get("x-peer-address");
    forwarded = ctx.requestHeader.get("x-forwarded-for");
    timeoutMs = ctx.timeoutMs();
    protocol = ctx.protocolName;
    ctx.responseTrailer.set("x-answer", "42");
    return { status: Status.SERVING };
  };
  await withServer([health({ check })], async (client) => {
    const { trailers } = await invoke(client, Health.method.check, [{}], {
      metadata: {
        authorization: "Bearer x",
        "x-peer-address": "203.0.113.9",
        "x-forwarded-for": "198.51.100.1",
      },
      timeoutMs: 5_000,
    });
    assert.equal(authorization, "Bearer x");
    // The peer is the connection's, whatever the caller claims; what it forwards stays a claim,
    // recorded beside the peer (lib/audit/events.ts).
    assert.equal(peer, "127.0.0.1");
    assert.equal(forwarded, "198.51.100.1");
    assert.equal(protocol, "grpc");
    assert.ok(timeoutMs !== undefined && timeoutMs > 0 && timeoutMs <= 5_000, `${timeoutMs}`);
    assert.deepEqual(trailers.get("x-answer"), ["42"]);
  });
});

Deno.test("no deadline means no timeout", async () => {
  let timeoutMs: number | undefined = 1;
  const check: HealthImpl["check"] = (_req, ctx) => {
    timeoutMs = ctx.timeoutMs();
    return {};
  };
  await withServer([health({ check })], async (client) => {
    await unary(client, Health.method.check, {});
    assert.equal(timeoutMs, undefined);
  });
});

Deno.test("server-streaming Watch yields two messages", async () => {
  const watch: HealthImpl["watch"] = async function* (req) {
    assert.equal(req.service, "svc");
    yield { status: Status.SERVING };
    yield create(Health.method.watch.output, { status: Status.NOT_SERVING });
  };
  await withServer([health({ watch })], async (client) => {
    const { responses } = await invoke(client, Health.method.watch, [{ service: "svc" }]);
    assert.deepEqual(responses.map((r) => r.status), [Status.SERVING, Status.NOT_SERVING]);
  });
});

Deno.test("an error thrown mid-stream ends the stream with its status", async () => {
  const watch: HealthImpl["watch"] = async function* () {
    yield { status: Status.SERVING };
    throw new ConnectError("gone", Code.Unavailable, undefined, [{
      desc: BadRequestSchema,
      value: { fieldViolations: [{ field: "f" }] },
    }]);
  };
  await withServer([health({ watch })], async (client) => {
    const err = await failure(invoke(client, Health.method.watch, [{}]));
    assert.equal(err.responses.length, 1);
    assert.equal(err.code, UNAVAILABLE);
    assert.equal(err.details, "gone");
    const [bin] = err.metadata.get("grpc-status-details-bin");
    assert.ok(bin instanceof Buffer);
    const decoded = findTrailerError(
      new Headers({ "grpc-status": "14", "grpc-status-details-bin": bin.toString("base64") }),
    );
    assert.equal(decoded?.findDetails(BadRequestSchema)[0]?.fieldViolations[0]?.field, "f");
  });
});

Deno.test("not a gRPC call: 405 with Allow (a method), 415 (a type); another codec UNIMPLEMENTED", async () => {
  const server = serveGrpc([health({ check: () => ({ status: Status.SERVING }) })], {
    port: 0,
    hostname: "127.0.0.1",
  });
  const client = createH2Client({ hostname: "127.0.0.1", port: server.port });
  const ask = (method: string, contentType: string) =>
    client.request([
      [":method", method],
      [":path", pathOf(Health.method.check)],
      ["content-type", contentType],
      ["te", "trailers"],
    ], method === "GET" ? new Uint8Array() : new Uint8Array(5));
  try {
    for (const method of ["GET", "PUT"]) {
      const res = await ask(method, "application/grpc");
      assert.equal(res.status, 405, method);
      assert.equal(new Headers(res.headers).get("allow"), "POST");
    }
    assert.equal((await ask("POST", "application/json")).status, 415);
    assert.equal((await ask("POST", "application/grpc-web")).status, 415);
    // A gRPC call whose messages are not protobuf: a gRPC status, which a gRPC client reads.
    for (const type of ["application/grpc+json", "application/grpc+cbor; charset=utf-8"]) {
      const res = await ask("POST", type);
      assert.equal(res.status, 200, type);
      const fields = new Headers(res.trailers.length > 0 ? res.trailers : res.headers);
      assert.equal(fields.get("grpc-status"), String(Code.Unimplemented), type);
    }
  } finally {
    client.close();
    await server.close(0);
  }
});

Deno.test("a message flag other than 0 or 1 is refused, not read as a message", async () => {
  let called = false;
  const check = () => {
    called = true;
    return { status: Status.SERVING };
  };
  const server = serveGrpc([health({ check })], { port: 0, hostname: "127.0.0.1" });
  const client = createH2Client({ hostname: "127.0.0.1", port: server.port });
  try {
    for (const flags of [0x02, 0x80, 0x81]) {
      const res = await client.request([
        [":method", "POST"],
        [":path", pathOf(Health.method.check)],
        ["content-type", "application/grpc"],
        ["te", "trailers"],
      ], new Uint8Array([flags, 0, 0, 0, 0]));
      const headers = new Headers(res.trailers.length > 0 ? res.trailers : res.headers);
      assert.equal(headers.get("grpc-status"), String(Code.InvalidArgument), `flags ${flags}`);
    }
    assert.equal(called, false);
  } finally {
    client.close();
    await server.close(0);
  }
});

Deno.test("a status message that quotes a long request is bounded, so clients can read it", async () => {
  // The unknown method's name is quoted in its UNIMPLEMENTED status; percent-encoded, 20,000 é
  // were 120 kB of trailers, which grpc-js (Node's 64 KiB header list) dropped, and its call ran
  // to its deadline instead of failing at once.
  await withServer([health({})], async (client) => {
    const out = await client.call({
      kind: "unary",
      path: `/x.Y/${"é".repeat(20_000)}`,
      requests: [new Uint8Array()],
      timeoutMs: 3_000,
    });
    assert.equal(out.code, status.UNIMPLEMENTED, out.details);
    assert.ok(out.details.endsWith("… (truncated)"), out.details.slice(-40));
  });
});

Deno.test("a method missing from the impl answers UNIMPLEMENTED", async () => {
  await withServer([health({ check: () => ({}) })], async (client) => {
    const err = await failure(unary(client, Health.method.list, {}));
    assert.equal(err.code, status.UNIMPLEMENTED);
    assert.equal(err.details, "grpc.health.v1.Health.List is not implemented");
  });
});

Deno.test("a client deadline or cancel aborts a streaming handler", async () => {
  const ended: unknown[] = [];
  const watch: HealthImpl["watch"] = async function* (_req, ctx) {
    yield { status: Status.SERVING };
    await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve, { once: true }));
    ended.push(ctx.signal.reason instanceof ConnectError ? ctx.signal.reason.code : "?");
  };
  await withServer([health({ watch })], async (client) => {
    const err = await failure(invoke(client, Health.method.watch, [{}], { timeoutMs: 200 }));
    assert.equal(err.code, status.DEADLINE_EXCEEDED);

    // Cancelled by the client once the first message arrived.
    const cancelled = await failure(invoke(client, Health.method.watch, [{}], { cancelAfter: 1 }));
    assert.equal(cancelled.code, status.CANCELLED);
    assert.equal(cancelled.responses.length, 1);
    for (let i = 0; i < 50 && ended.length < 2; i++) await new Promise((r) => setTimeout(r, 10));
    // Both handlers were aborted; which reason the deadline shows depends on which side's timer
    // fires first (the client's reset, or the server's deadline).
    assert.equal(ended.length, 2);
    assert.ok(ended.includes(Code.Canceled));
    assert.ok(ended.every((c) => c === Code.Canceled || c === Code.DeadlineExceeded));
  });
});

/**
 * Calls `method` with an empty message and `grpc-timeout` from a raw HTTP/2 client, which keeps
 * no timer of its own (a gRPC client ends the call at its deadline itself); returns `grpc-status`.
 */
async function rawStatus(
  client: H2Client,
  method: DescMethod,
  timeout: string,
): Promise<string | undefined> {
  const res = await client.request([
    [":method", "POST"],
    [":path", pathOf(method)],
    ["content-type", "application/grpc"],
    ["te", "trailers"],
    ["grpc-timeout", timeout],
  ], new Uint8Array(5));
  const fields = res.trailers.length > 0 ? res.trailers : res.headers;
  return fields.find(([name]) => name === "grpc-status")?.[1];
}

Deno.test("past its deadline a call answers DEADLINE_EXCEEDED, however its handler ends", async () => {
  // The handlers see the deadline abort their signal and then end normally: a watch that stops, a
  // check that answers after all. The status is still DEADLINE_EXCEEDED, decided by the server.
  const abortedSignal = (signal: AbortSignal) =>
    new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
  const watch: HealthImpl["watch"] = async function* (_req, ctx) {
    yield { status: Status.SERVING };
    await abortedSignal(ctx.signal);
  };
  const check: HealthImpl["check"] = async (_req, ctx) => {
    await abortedSignal(ctx.signal);
    return { status: Status.SERVING };
  };
  const server = serveGrpc([health({ watch, check })], { port: 0, hostname: "127.0.0.1" });
  const client = createH2Client({ hostname: "127.0.0.1", port: server.port });
  try {
    for (const method of [Health.method.watch, Health.method.check]) {
      const grpcStatus = await rawStatus(client, method, "20m");
      assert.equal(grpcStatus, String(status.DEADLINE_EXCEEDED), method.name);
    }
  } finally {
    client.close();
    await server.close(0);
  }
});

Deno.test("a stream that fails past its deadline: its details leave with its status", async () => {
  // The handler's error comes after the deadline: the status is DEADLINE_EXCEEDED, and the
  // handler's grpc-status-details-bin (a google.rpc.Status of its own code) must not stay beside
  // it, or connect-es, which reads that first, sees another status than grpc-js and grpcio do.
  const watch: HealthImpl["watch"] = async function* (_req, ctx) {
    yield { status: Status.SERVING };
    await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve, { once: true }));
    throw new ConnectError("bad", Code.InvalidArgument, undefined, [{
      desc: BadRequestSchema,
      value: { fieldViolations: [{ field: "x", description: "y" }] },
    }]);
  };
  const server = serveGrpc([health({ watch })], { port: 0, hostname: "127.0.0.1" });
  const client = createH2Client({ hostname: "127.0.0.1", port: server.port });
  try {
    const res = await client.request([
      [":method", "POST"],
      [":path", pathOf(Health.method.watch)],
      ["content-type", "application/grpc"],
      ["te", "trailers"],
      ["grpc-timeout", "20m"],
    ], new Uint8Array(5));
    const trailers = new Headers(res.trailers as [string, string][]);
    assert.equal(trailers.get("grpc-status"), String(status.DEADLINE_EXCEEDED));
    assert.equal(findTrailerError(trailers)?.code, Code.DeadlineExceeded);
  } finally {
    client.close();
    await server.close(0);
  }
});

Deno.test("a deadline further away than a timer can wait does not end the call at once", async () => {
  // 99,999,999 hours (the longest grpc-timeout) and 600 hours are past 2^31 - 1 ms, the longest
  // timer: armed as it is, such a timer fires at once. The handlers take a moment, so that a
  // deadline that fired at once would be seen.
  const moment = () => new Promise((r) => setTimeout(r, 20));
  let remaining: number | undefined;
  const watch: HealthImpl["watch"] = async function* () {
    await moment();
    yield { status: Status.SERVING };
  };
  const check: HealthImpl["check"] = async (_req, ctx) => {
    await moment();
    remaining = ctx.timeoutMs();
    return { status: Status.SERVING };
  };
  const server = serveGrpc([health({ watch, check })], { port: 0, hostname: "127.0.0.1" });
  const client = createH2Client({ hostname: "127.0.0.1", port: server.port });
  try {
    for (const timeout of ["99999999H", "600H"]) {
      for (const method of [Health.method.watch, Health.method.check]) {
        assert.equal(await rawStatus(client, method, timeout), "0", `${method.name} ${timeout}`);
      }
      // The handler still sees how far away its deadline is.
      assert.ok(remaining !== undefined && remaining > 2 ** 31, `${remaining}`);
    }
  } finally {
    client.close();
    await server.close(0);
  }
});

Deno.test("client streaming (the reflection method re-declared as client-streaming)", async () => {
  const info = ServerReflection.method.serverReflectionInfo;
  const method = { ...info, methodKind: "client_streaming" } as DescMethod;
  const service = { ...ServerReflection, methods: [method] } as DescService;
  const impl = {
    async serverReflectionInfo(requests: AsyncIterable<ServerReflectionRequest>) {
      const hosts: string[] = [];
      for await (const req of requests) hosts.push(req.host);
      return { validHost: hosts.join(",") };
    },
  } as unknown as ServiceImpl<DescService>;
  await withServer([{ service, impl }], async (client) => {
    const { responses } = await invoke(client, method, [{ host: "a" }, { host: "b" }]);
    assert.equal(responses.length, 1);
    assert.equal((responses[0] as ServerReflectionResponse).validHost, "a,b");
  });
});

Deno.test("maxReceiveMessageBytes rejects larger requests", async () => {
  const server = serveGrpc([health({ check: () => ({}) })], {
    port: 0,
    hostname: "127.0.0.1",
    maxReceiveMessageBytes: 16,
  });
  const client = grpcChannel(`127.0.0.1:${server.port}`);
  try {
    await unary(client, Health.method.check, { service: "short" });
    const err = await failure(unary(client, Health.method.check, { service: "x".repeat(64) }));
    assert.equal(err.code, status.RESOURCE_EXHAUSTED);
  } finally {
    client.close();
    await server.close(0);
  }
});

type ReflectionRequest = NonNullable<
  MessageInitShape<typeof ServerReflection.method.serverReflectionInfo.input>["messageRequest"]
>;

/** Sends reflection requests on one stream and returns the answers. */
async function reflect(
  services: Array<DescService | DescFile>,
  requests: ReflectionRequest[],
) {
  const reflection = bindGrpc(ServerReflection, createReflectionImpl(services));
  const responses: ServerReflectionResponse[] = [];
  await withServer([reflection], async (client) => {
    const method = ServerReflection.method.serverReflectionInfo;
    const answered = await invoke(
      client,
      method,
      requests.map((messageRequest) => ({ host: "h", messageRequest })),
    );
    responses.push(...answered.responses);
  });
  assert.equal(responses.length, requests.length);
  return responses;
}

/** The names of the files in a file_descriptor_response. */
function fileNames(r: ServerReflectionResponse | undefined): string[] {
  const answer = r?.messageResponse;
  assert.equal(answer?.case, "fileDescriptorResponse");
  return answer.value.fileDescriptorProto.map((b) => fromBinary(FileDescriptorProtoSchema, b).name);
}

Deno.test("reflection lists services and finds files by symbol", async () => {
  const responses = await reflect([Health, ServerReflection], [
    { case: "listServices", value: "" },
    { case: "fileContainingSymbol", value: "grpc.health.v1.Health" },
    { case: "fileContainingSymbol", value: "grpc.health.v1.Health.Check" },
    { case: "fileContainingSymbol", value: "grpc.health.v1.HealthCheckRequest.service" },
    { case: "fileByFilename", value: "grpc/reflection/v1/reflection.proto" },
    { case: "fileContainingSymbol", value: "no.such.Symbol" },
    { case: "fileByFilename", value: "no/such.proto" },
    { case: "allExtensionNumbersOfType", value: "no.such.Message" },
    { case: "allExtensionNumbersOfType", value: "grpc.health.v1.HealthCheckRequest" },
  ]);
  const noExtensions = responses.pop();
  const [list, bySymbol, byMethod, byField, byFile, ...notFound] = responses;
  assert.equal(noExtensions?.messageResponse.case, "allExtensionNumbersResponse");
  assert.deepEqual(noExtensions.messageResponse.value.extensionNumber, []);
  assert.equal(list?.validHost, "h");
  assert.equal(bySymbol?.originalRequest?.messageRequest.value, "grpc.health.v1.Health");
  assert.equal(list?.messageResponse.case, "listServicesResponse");
  assert.deepEqual(list.messageResponse.value.service.map((s) => s.name).sort(), [
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
  ]);
  assert.deepEqual(fileNames(bySymbol), ["grpc/health/v1/health.proto"]);
  assert.deepEqual(fileNames(byMethod), ["grpc/health/v1/health.proto"]);
  assert.deepEqual(fileNames(byField), ["grpc/health/v1/health.proto"]);
  assert.deepEqual(fileNames(byFile), ["grpc/reflection/v1/reflection.proto"]);
  assert.equal(notFound.length, 3);
  for (const r of notFound) {
    assert.equal(r.messageResponse.case, "errorResponse");
    assert.equal(r.messageResponse.value.errorCode, 5);
  }
});

Deno.test("reflection answers with transitive dependencies and extensions", async () => {
  const [service, extension, numbers] = await reflect([OAuthRegistryService], [
    { case: "fileContainingSymbol", value: OAuthRegistryService.typeName },
    {
      case: "fileContainingExtension",
      value: { containingType: "google.protobuf.MethodOptions", extensionNumber: 72295728 },
    },
    { case: "allExtensionNumbersOfType", value: "google.protobuf.MethodOptions" },
  ]);
  const names = fileNames(service);
  assert.equal(names[0], OAuthRegistryService.file.proto.name);
  for (const dep of ["google/api/annotations.proto", "google/protobuf/descriptor.proto"]) {
    assert.ok(names.includes(dep), `${dep} in ${names}`);
  }
  assert.equal(new Set(names).size, names.length);
  assert.equal(fileNames(extension)[0], "google/api/annotations.proto");
  assert.equal(numbers?.messageResponse.case, "allExtensionNumbersResponse");
  assert.ok(numbers.messageResponse.value.extensionNumber.includes(72295728));
});

Deno.test("reflection built from files lists all their services", async () => {
  const [list] = await reflect([Health.file], [{ case: "listServices", value: "" }]);
  assert.equal(list?.messageResponse.case, "listServicesResponse");
  assert.deepEqual(list.messageResponse.value.service.map((s) => s.name), [Health.typeName]);
});
