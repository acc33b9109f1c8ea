/**
 * End to end over gRPC: a stock @grpc/grpc-js client talks HTTP/2 cleartext to the real
 * oauth-registry process, as an internal caller would, without the gateway.
 */

import assert from "node:assert/strict";
import { fromBinary } from "@bufbuild/protobuf";
import { findTrailerError } from "@connectrpc/connect/protocol-grpc";
import { Health, HealthCheckResponse_ServingStatus } from "../gen/grpc/health/v1/health_pb.ts";
import { BadRequestSchema } from "../gen/google/rpc/error_details_pb.ts";
import { ClientStatus, ClientType } from "../gen/registry/oauth/v1/client_pb.ts";
import { Audience } from "../gen/registry/oauth/v1/config_pb.ts";
import { OAuthRegistryService } from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { grpcFailure, grpcTestClient } from "../lib/testing/mod.ts";
import { startStack } from "../lib/testing/mod.ts";

const rpc = OAuthRegistryService.method;

Deno.test("a stock gRPC client uses the oauth-registry service directly", async (t) => {
  const stack = await startStack();
  const client = grpcTestClient(stack.oauthGrpc);
  const admin = { authorization: `Bearer ${await stack.token({ sub: "svc", projects: ["g1"] })}` };
  const tokenService = {
    authorization: `Bearer ${await stack.token({ sub: "token-service", projects: ["*"] })}`,
  };
  try {
    await t.step("grpc.health.v1 answers SERVING without a token", async () => {
      const res = await client.call(Health.method.check, {});
      assert.equal(res.status, HealthCheckResponse_ServingStatus.SERVING);
      const named = await client.call(Health.method.check, {
        service: OAuthRegistryService.typeName,
      });
      assert.equal(named.status, HealthCheckResponse_ServingStatus.SERVING);
      assert.equal(
        (await grpcFailure(client.call(Health.method.check, { service: "nope" }))).code,
        5,
      );
    });

    await t.step(
      "a call without a token is UNAUTHENTICATED; a foreign project PERMISSION_DENIED",
      async () => {
        assert.equal(
          (await grpcFailure(client.call(rpc.getOAuthConfig, { projectId: "g1" }))).code,
          16,
        );
        const stranger = {
          authorization: `Bearer ${await stack.token({ sub: "x", projects: ["other"] })}`,
        };
        assert.equal(
          (await grpcFailure(client.call(rpc.getOAuthConfig, { projectId: "g1" }, stranger))).code,
          7,
        );
      },
    );

    await t.step("INVALID_ARGUMENT carries a google.rpc.BadRequest per bad field", async () => {
      const err = await grpcFailure(client.call(rpc.updateOAuthConfig, {
        projectId: "g1",
        config: { applicationName: "", logoUri: "ftp://example.com/logo" },
        updateMask: { paths: ["application_name", "logo_uri", "publishing_status"] },
      }, admin));
      assert.equal(err.code, 3);
      const headers = new Headers();
      for (const [k, v] of Object.entries(err.metadata.getMap())) {
        headers.set(k, typeof v === "string" ? v : v.toString("base64"));
      }
      headers.set("grpc-status", "3");
      const detail = findTrailerError(headers)!.details[0]!;
      assert.ok("type" in detail && detail.type === BadRequestSchema.typeName);
      const fields = fromBinary(BadRequestSchema, detail.value).fieldViolations.map((v) => v.field);
      assert.deepEqual(fields, ["config.publishing_status"]);
    });

    await t.step(
      "an etag never creates the config (ABORTED); create_only creates it only once",
      async () => {
        // No config yet: an etag names no version of it (AIP-154: ABORTED), and nothing is made.
        for (const etag of ["12345", "!", "*"]) {
          const err = await grpcFailure(client.call(rpc.updateOAuthConfig, {
            projectId: "g1",
            config: { applicationName: "Conditional", etag },
          }, admin));
          assert.equal(err.code, 10, err.details);
        }
        assert.equal(
          (await grpcFailure(client.call(rpc.getOAuthConfig, { projectId: "g1" }, admin))).code,
          5,
          "nothing was created",
        );
        // create_only with an etag contradicts itself.
        assert.equal(
          (await grpcFailure(client.call(rpc.updateOAuthConfig, {
            projectId: "g1",
            config: { applicationName: "Both", etag: "12345" },
            createOnly: true,
          }, admin))).code,
          3,
        );
        const made = await client.call(rpc.updateOAuthConfig, {
          projectId: "g1",
          config: { applicationName: "Created once" },
          createOnly: true,
        }, admin);
        assert.equal(made.config?.applicationName, "Created once");
        const again = await grpcFailure(client.call(rpc.updateOAuthConfig, {
          projectId: "g1",
          config: { applicationName: "Created twice" },
          createOnly: true,
        }, admin));
        assert.equal(again.code, 10, again.details);
        const now = await client.call(rpc.getOAuthConfig, { projectId: "g1" }, admin);
        assert.equal(now.config?.applicationName, "Created once");
        assert.equal(now.config?.etag, made.config?.etag, "unchanged");
        // `*`: whatever its version, it is updated (`If-Match: *`, decided by the write itself).
        const any = await client.call(rpc.updateOAuthConfig, {
          projectId: "g1",
          config: { applicationName: "Any version", etag: "*" },
        }, admin);
        assert.equal(any.config?.applicationName, "Any version");
        assert.notEqual(any.config?.etag, made.config?.etag);
      },
    );

    await t.step("without an update mask, the set fields are updated (AIP-134)", async () => {
      const res = await client.call(rpc.updateOAuthConfig, {
        projectId: "g1",
        config: { applicationName: "gRPC app", supportEmail: "ops@example.com" },
      }, admin);
      assert.equal(res.config?.applicationName, "gRPC app");
      assert.equal(res.config?.supportEmail, "ops@example.com");
      const bad = await grpcFailure(client.call(rpc.updateOAuthConfig, {
        projectId: "g1",
        config: { applicationName: "x".repeat(121) },
        updateMask: { paths: ["application_name"] },
      }, admin));
      assert.equal(bad.code, 3);
      // An empty mask is as none: the set fields change.
      const empty = await client.call(rpc.updateOAuthConfig, {
        projectId: "g1",
        config: { applicationName: "gRPC app 2" },
        updateMask: { paths: [] },
      }, admin);
      assert.equal(empty.config?.applicationName, "gRPC app 2");
      assert.equal(empty.config?.supportEmail, "ops@example.com");
    });

    await t.step("update mask `*` replaces the resource (AIP-134)", async () => {
      const res = await client.call(rpc.updateOAuthConfig, {
        projectId: "g1",
        config: { applicationName: "Replaced", audience: Audience.EXTERNAL },
        updateMask: { paths: ["*"] },
      }, admin);
      assert.equal(res.config?.applicationName, "Replaced");
      assert.equal(res.config?.supportEmail, undefined, "a field left out is cleared");
      // A required field left out is refused, and `*` goes alone.
      for (const paths of [["*"], ["*", "application_name"]]) {
        const err = await grpcFailure(client.call(rpc.updateOAuthConfig, {
          projectId: "g1",
          config: paths.length === 1 ? { supportEmail: "x@example.com" } : {
            applicationName: "x",
          },
          updateMask: { paths },
        }, admin));
        assert.equal(err.code, 3, paths.join());
      }
      assert.equal(
        (await client.call(rpc.getOAuthConfig, { projectId: "g1" }, admin)).config
          ?.applicationName,
        "Replaced",
      );
    });

    await t.step("create a client and a secret; VerifyClientSecret checks the pair", async () => {
      const { client: created } = await client.call(rpc.createClient, {
        projectId: "g1",
        client: { name: "backend", type: ClientType.WEB, redirectUris: ["https://example.com/cb"] },
      }, admin);
      assert.ok(created?.id.startsWith("cli_"));
      const clientId = created!.id;
      const first = await client.call(rpc.createClientSecret, { projectId: "g1", clientId }, admin);
      const second = await client.call(
        rpc.createClientSecret,
        { projectId: "g1", clientId },
        admin,
      );
      const s1 = first.clientSecret!.plaintext.value!;
      const s2 = second.clientSecret!.plaintext.value!;

      const verify = (secret: string, id = clientId) =>
        client.call(rpc.verifyClientSecret, { clientId: id, secret }, tokenService);
      assert.equal((await verify(s1)).valid, true);
      assert.equal((await verify(s2)).valid, true, "both secrets of a rotation verify");
      assert.equal((await verify(s1)).client?.id, clientId);
      assert.equal((await verify(s1.slice(0, -1) + (s1.endsWith("A") ? "B" : "A"))).valid, false);
      assert.equal((await verify("")).valid, false);
      assert.equal((await verify(s1, "cli_00000000000000000000000000")).valid, false);

      await client.call(rpc.updateClient, {
        projectId: "g1",
        clientId,
        client: { status: ClientStatus.SUSPENDED },
        updateMask: { paths: ["status"] },
      }, admin);
      assert.equal((await verify(s1)).valid, false, "a suspended client never verifies");
      await client.call(rpc.updateClient, {
        projectId: "g1",
        clientId,
        client: { status: ClientStatus.ACTIVE },
        updateMask: { paths: ["status"] },
      }, admin);
      assert.equal((await verify(s1)).valid, true);

      // Without a mask, the immutable type is ignored when it is the client's (a read-modify-write
      // sends it) and refused when it would change (AIP-203).
      const { client: got } = await client.call(
        rpc.getClient,
        { projectId: "g1", clientId },
        admin,
      );
      const renamed = await client.call(rpc.updateClient, {
        projectId: "g1",
        clientId,
        client: { ...got!, name: "backend 2", etag: "" },
      }, admin);
      assert.equal(renamed.client?.name, "backend 2");
      const retype = await grpcFailure(client.call(rpc.updateClient, {
        projectId: "g1",
        clientId,
        client: { name: "backend 3", type: ClientType.SPA },
      }, admin));
      assert.equal(retype.code, 3);
      assert.match(retype.details, /client\.type|changed after creation/);
      const { client: after } = await client.call(
        rpc.getClient,
        { projectId: "g1", clientId },
        admin,
      );
      assert.equal(after?.name, "backend 2");
      assert.equal(after?.type, ClientType.WEB);

      await client.call(rpc.deleteClientSecret, {
        projectId: "g1",
        clientId,
        secretId: first.clientSecret!.id,
      }, admin);
      assert.equal((await verify(s1)).valid, false, "a deleted secret never verifies");
      assert.equal((await verify(s2)).valid, true, "the other secret still verifies");

      const stranger = {
        authorization: `Bearer ${await stack.token({ sub: "x", projects: ["other"] })}`,
      };
      assert.equal(
        (await grpcFailure(client.call(rpc.verifyClientSecret, { clientId, secret: s2 }, stranger)))
          .code,
        7,
      );

      await client.call(rpc.deleteClient, { projectId: "g1", clientId }, admin);
      assert.equal((await verify(s2)).valid, false, "a deleted client never verifies");
    });

    await t.step("clients and installations: get, list, consent, revoke", async () => {
      const { client: created } = await client.call(rpc.createClient, {
        projectId: "g1",
        client: { name: "listed", type: ClientType.NATIVE, redirectUris: ["com.example.app:/cb"] },
      }, admin);
      const got = await client.call(
        rpc.getClient,
        { projectId: "g1", clientId: created!.id },
        admin,
      );
      assert.equal(got.client?.name, "listed");
      const page = await client.call(rpc.listClients, { projectId: "g1", limit: 100 }, admin);
      assert.ok(page.data.some((c) => c.id === created!.id));
      assert.equal(page.hasMore, false);
      const secrets = await client.call(
        rpc.listClientSecrets,
        { projectId: "g1", clientId: created!.id },
        admin,
      );
      assert.deepEqual(secrets.data, []);

      const user = {
        authorization: `Bearer ${await stack.token({ sub: "u", accountId: "acct" })}`,
      };
      const { installation } = await client.call(
        rpc.consentInstallation,
        { projectId: "g1", scopes: ["openid"] },
        user,
      );
      assert.equal(installation?.accountId, "acct");
      const listed = await client.call(rpc.listInstallations, {}, user);
      assert.deepEqual(listed.data.map((i) => i.id), [installation!.id]);
      await client.call(rpc.revokeInstallation, { installationId: installation!.id }, user);
      const after = await client.call(
        rpc.getInstallation,
        { installationId: installation!.id },
        user,
      );
      assert.ok(after.installation?.revokedAt !== undefined);
      assert.equal(
        (await grpcFailure(
          client.call(rpc.getInstallation, { installationId: installation!.id }, admin),
        ))
          .code,
        5,
      );
    });

    await t.step("hostile strings get INVALID_ARGUMENT, never INTERNAL", async () => {
      for (
        // (A lone surrogate cannot cross the wire: protobuf encodes it as U+FFFD.)
        const name of ["a\u0000b", "x".repeat(100_000), "tab\there", "\u007f"]
      ) {
        const err = await grpcFailure(client.call(rpc.createClient, {
          projectId: "g1",
          client: { name, type: ClientType.WEB },
        }, admin));
        assert.equal(err.code, 3, `${JSON.stringify(name.slice(0, 20))}: ${err.details}`);
      }
      const err = await grpcFailure(
        client.call(rpc.getOAuthConfig, { projectId: "bad\u0000id" }, tokenService),
      );
      assert.equal(err.code, 3);
    });

    await t.step("CreateClient ignores output-only fields and rejects a status", async () => {
      const { client: created } = await client.call(rpc.createClient, {
        projectId: "g1",
        client: { id: "cli_mine", projectId: "elsewhere", name: "n", type: ClientType.SPA },
      }, admin);
      assert.notEqual(created?.id, "cli_mine");
      assert.equal(created?.projectId, "g1");
      const err = await grpcFailure(client.call(rpc.createClient, {
        projectId: "g1",
        client: { name: "n", type: ClientType.SPA, status: ClientStatus.SUSPENDED },
      }, admin));
      assert.equal(err.code, 3);
    });
  } finally {
    client.close();
    await stack.stop();
  }
});
