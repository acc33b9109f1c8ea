/**
 * The memory budget on every path, against the real processes: a request that does not fit is
 * refused at once (HTTP 503 with `Retry-After` and the JSON error body; gRPC RESOURCE_EXHAUSTED),
 * nothing is written, and a request that fits is served as before.
 *
 * @module
 */

import assert from "node:assert/strict";
import { create, toBinary } from "@bufbuild/protobuf";
import {
  CreateClientRequestSchema,
  OAuthRegistryService,
} from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { ClientType } from "../gen/registry/oauth/v1/client_pb.ts";
import { grpcTestClient } from "../lib/testing/mod.ts";
import { httpClient } from "../lib/testing/mod.ts";
import { startStack } from "../lib/testing/mod.ts";

/** Cost factors: the gateway holds a body 5 times over, a service a message 3 times. */
const budgetMiB = 1;

Deno.test("a request past the memory budget is refused at once on every path; nothing is written", async () => {
  // Services with a 1 MiB budget; the gateway's is the default, so that a body it admits can be
  // refused by the service behind it.
  const stack = await startStack({ env: { MEMORY_BUDGET_MIB: String(budgetMiB) } });
  const grpc = grpcTestClient(stack.oauthGrpc);
  try {
    const token = await stack.token({ sub: "u", projects: ["m"] });
    const api = httpClient(stack.gatewayUrl);
    await api("PATCH", "/v1/projects/m/config", { token, json: { application_name: "M" } });
    const clients = async () =>
      (await api("GET", "/v1/projects/m/clients", { token })).body.data.length as number;

    // The gateway, at its own budget: 300 kB x 5 > 1 MiB.
    const big = { name: "n".repeat(300_000), type: "web" };
    const gatewayRefusal = await fetch(`${stack.gatewayUrl}/v1/projects/m/clients`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify(big),
    });
    assert.equal(gatewayRefusal.status, 503);
    assert.equal(gatewayRefusal.headers.get("retry-after"), "1");
    assert.equal((await gatewayRefusal.json()).error.code, "unavailable");

    // A service's Connect port: 400 kB x 3 > 1 MiB, refused before the body is read.
    const message = toBinary(
      CreateClientRequestSchema,
      create(CreateClientRequestSchema, { projectId: "m", client: { name: "n".repeat(400_000) } }),
    );
    const connect = await fetch(
      `${stack.oauthHttp}/${OAuthRegistryService.typeName}/CreateClient`,
      {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/proto" },
        body: message,
      },
    );
    assert.equal(connect.status, 503);
    assert.equal(connect.headers.get("retry-after"), "1");
    assert.deepEqual(await connect.json(), {
      code: "unavailable",
      message: "The server is at its memory budget; retry later",
    });

    // gRPC: the message's length prefix is enough to refuse it.
    await assert.rejects(
      grpc.call(
        OAuthRegistryService.method.createClient,
        { projectId: "m", client: { name: "n".repeat(400_000), type: ClientType.WEB } },
        { authorization: `Bearer ${token}` },
      ),
      (e: { code: number; details: string }) => {
        assert.equal(e.code, 8); // RESOURCE_EXHAUSTED
        assert.equal(e.details, "The server is at its memory budget; retry later");
        return true;
      },
    );
    assert.equal(await clients(), 0, "a refused request wrote nothing");

    // Requests that fit are served as before.
    const ok = await api("POST", "/v1/projects/m/clients", {
      token,
      json: { name: "fits", type: "web" },
    });
    assert.equal(ok.status, 201);
    assert.equal(await clients(), 1);

    // The refusals are counted where an operator looks.
    const metrics = await (await fetch(`${stack.oauthHttp}/metrics`)).text();
    const refusals = Number(/^memory_budget_refusals_total\{[^}]*\} (\d+)$/m.exec(metrics)?.[1]);
    assert.ok(refusals >= 2, `memory_budget_refusals_total ${refusals}`);
    assert.match(metrics, /^memory_budget_bytes\{state="limit",[^}]*\} 1048576$/m);
  } finally {
    grpc.close();
    await stack.stop();
  }
});
