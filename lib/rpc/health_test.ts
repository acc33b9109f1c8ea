import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createHandlerContext } from "@connectrpc/connect";
import {
  Health,
  HealthCheckRequestSchema,
  HealthCheckResponse_ServingStatus as Status,
} from "../../gen/grpc/health/v1/health_pb.ts";
import { createHealthImpl } from "./health.ts";

const ctx = createHandlerContext({
  service: Health,
  method: Health.method.check,
  protocolName: "test",
  requestMethod: "POST",
  url: "/grpc.health.v1.Health/Check",
});

Deno.test("createHealthImpl(): the process is live while a service is not ready", async () => {
  let ready = false;
  const health = createHealthImpl({ services: ["x.v1.S"], ready: () => Promise.resolve(ready) });
  const check = async (service: string) =>
    (await health.check(create(HealthCheckRequestSchema, { service }), ctx)).status;
  assert.equal(await check(""), Status.SERVING);
  assert.equal(await check("x.v1.S"), Status.NOT_SERVING);
  ready = true;
  assert.equal(await check("x.v1.S"), Status.SERVING);
  await assert.rejects(
    check("y.v1.T"),
    (e) => e instanceof ConnectError && e.code === Code.NotFound,
  );
});
