/**
 * The gRPC client transport against our gRPC server: answers, errors with their details and
 * metadata, deadlines, and a server that is not there, as connect-es's `createClient` sees them.
 */

import assert from "node:assert/strict";
import { Code, ConnectError, createClient, type ServiceImpl } from "@connectrpc/connect";
import { BadRequestSchema } from "../../gen/google/rpc/error_details_pb.ts";
import {
  Health,
  HealthCheckResponse_ServingStatus as Status,
} from "../../gen/grpc/health/v1/health_pb.ts";
import { bindGrpc, serveGrpc } from "./grpc_server.ts";
import { createGrpcTransport, wireSizeOf } from "./grpc_transport.ts";

function serveHealth(check: NonNullable<ServiceImpl<typeof Health>["check"]>) {
  return serveGrpc([bindGrpc(Health, { check })], { port: 0, hostname: "127.0.0.1" });
}

Deno.test("createGrpcTransport(): a call, its metadata both ways and its size", async () => {
  let seen: string | null = null;
  const server = serveHealth((req, ctx) => {
    seen = ctx.requestHeader.get("x-request-id");
    ctx.responseHeader.set("x-answer", "yes");
    return { status: req.service === "up" ? Status.SERVING : Status.NOT_SERVING };
  });
  const client = createClient(
    Health,
    createGrpcTransport({ baseUrl: `http://127.0.0.1:${server.port}` }),
  );
  try {
    let header: Headers | undefined;
    const res = await client.check({ service: "up" }, {
      headers: { "x-request-id": "r1" },
      onHeader: (h) => header = h,
    });
    assert.equal(res.status, Status.SERVING);
    assert.equal(seen, "r1");
    assert.equal(header?.get("x-answer"), "yes");
    assert.equal(wireSizeOf(res), 5 + 2); // the envelope and `status: SERVING`
  } finally {
    await server.close(0);
  }
});

Deno.test("createGrpcTransport(): an error keeps its code, message, details and metadata", async () => {
  const server = serveHealth(() => {
    throw new ConnectError(
      "bad: é %",
      Code.InvalidArgument,
      { "retry-after": "3" },
      [{ desc: BadRequestSchema, value: { fieldViolations: [{ field: "x", description: "y" }] } }],
    );
  });
  const client = createClient(
    Health,
    createGrpcTransport({ baseUrl: `http://127.0.0.1:${server.port}` }),
  );
  try {
    const err = await client.check({}).catch((e) => e);
    assert.ok(err instanceof ConnectError);
    assert.equal(err.code, Code.InvalidArgument);
    assert.equal(err.rawMessage, "bad: é %");
    assert.equal(err.metadata.get("retry-after"), "3");
    const [violations] = err.findDetails(BadRequestSchema);
    assert.deepEqual(
      violations?.fieldViolations.map((v) => [v.field, v.description]),
      [["x", "y"]],
    );
  } finally {
    await server.close(0);
  }
});

Deno.test("createGrpcTransport(): past its deadline a call is DEADLINE_EXCEEDED", async () => {
  let aborted = false;
  const server = serveHealth(async (_req, ctx) => {
    await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve()));
    aborted = true;
    return { status: Status.SERVING };
  });
  const client = createClient(
    Health,
    createGrpcTransport({ baseUrl: `http://127.0.0.1:${server.port}`, defaultTimeoutMs: 100 }),
  );
  try {
    const err = await client.check({}).catch((e) => e);
    assert.ok(err instanceof ConnectError);
    assert.equal(err.code, Code.DeadlineExceeded);
    for (let i = 0; i < 100 && !aborted; i++) await new Promise((r) => setTimeout(r, 10));
    assert.ok(aborted, "the server's handler saw the call end");
  } finally {
    await server.close(0);
  }
});

Deno.test("createGrpcTransport(): a server that is not there is UNAVAILABLE", async () => {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  const client = createClient(
    Health,
    createGrpcTransport({ baseUrl: `http://127.0.0.1:${port}` }),
  );
  const err = await client.check({}, { timeoutMs: 5000 }).catch((e) => e);
  assert.ok(err instanceof ConnectError);
  assert.equal(err.code, Code.Unavailable);
});

Deno.test("createGrpcTransport() refuses a URL it cannot call", () => {
  assert.throws(() => createGrpcTransport({ baseUrl: "https://example.com" }), /only http/);
});
