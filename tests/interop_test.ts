/**
 * Interoperability of the gRPC port with stock clients, against the real oauth-registry and core
 * processes: the C-core client (Debian's python3-grpcio, driven by tests/grpcio_client.py with
 * messages as bytes) makes authenticated calls on each service, reads a field violation's message
 * and its `grpc-status-details-bin`, checks health, and uses server reflection under both names
 * (`grpc.reflection.v1` and `grpc.reflection.v1alpha`); @grpc/grpc-js (lib/testing/grpc_client.ts)
 * must read the same violations' messages exactly as the services wrote them.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import {
  create,
  type DescFile,
  type DescMessage,
  type DescMethodUnary,
  type DescService,
  fromBinary,
  type MessageInitShape,
  type MessageShape,
  toBinary,
} from "@bufbuild/protobuf";
import { anyUnpack, FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { BadRequestSchema } from "../gen/google/rpc/error_details_pb.ts";
import { StatusSchema } from "../gen/google/rpc/status_pb.ts";
import { Health, HealthCheckResponse_ServingStatus } from "../gen/grpc/health/v1/health_pb.ts";
import * as reflectionV1 from "../gen/grpc/reflection/v1/reflection_pb.ts";
import * as reflectionV1alpha from "../gen/grpc/reflection/v1alpha/reflection_pb.ts";
import { CoreService } from "../gen/registry/core/v1/core_service_pb.ts";
import { ClientType } from "../gen/registry/oauth/v1/client_pb.ts";
import { OAuthRegistryService } from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { grpcFailure, grpcTestClient } from "../lib/testing/mod.ts";
import { startStack } from "../lib/testing/mod.ts";
import { ensurePackages, packages } from "../tools/debian.ts";

/** One call for tests/grpcio_client.py, messages as bytes. */
interface CoreCall {
  /** The kind of method. */
  kind: "unary" | "bidi_streaming";
  /** `/package.Service/Method`. */
  path: string;
  /** The serialized requests: exactly one for a unary call. */
  requests: Uint8Array[];
  /** Request metadata. */
  metadata?: Record<string, string>;
}

/** How a {@link CoreCall} ended, as the C-core client reported it. */
interface CoreOutcome {
  /** The serialized responses. */
  responses: Uint8Array[];
  /** The status code. */
  code: number;
  /** The status message, after C-core's percent-decoding. */
  details: string;
  /** The trailers C-core hands to the application (`-bin` values as bytes). */
  trailers: Map<string, (string | Uint8Array)[]>;
}

const script = new URL("./grpcio_client.py", import.meta.url).pathname;

/** Makes `calls` one after another on one C-core channel to `address`. */
async function grpcio(address: string, calls: CoreCall[]): Promise<CoreOutcome[]> {
  const child = new Deno.Command("/usr/bin/python3", {
    args: [script],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(JSON.stringify({
    address,
    calls: calls.map((c) => ({
      kind: c.kind,
      path: c.path,
      requests: c.requests.map((r) => Buffer.from(r).toString("base64")),
      metadata: Object.fromEntries(Object.entries(c.metadata ?? {}).map(([k, v]) => [k, [v]])),
      timeoutMs: 10_000,
    })),
  })));
  await writer.close();
  const out = await child.output();
  if (!out.success) {
    throw new Error(`grpcio_client.py failed: ${new TextDecoder().decode(out.stderr)}`);
  }
  const answers = JSON.parse(new TextDecoder().decode(out.stdout)) as {
    responses: string[];
    code: number;
    details: string;
    metadata: Record<string, string[]>;
  }[];
  return answers.map((a) => ({
    responses: a.responses.map((r) => new Uint8Array(Buffer.from(r, "base64"))),
    code: a.code,
    details: a.details,
    trailers: new Map(
      Object.entries(a.metadata).map(([k, values]) => [
        k,
        k.endsWith("-bin") ? values.map((v) => new Uint8Array(Buffer.from(v, "base64"))) : values,
      ]),
    ),
  }));
}

/** A unary call of `method` for {@link grpcio}. */
function unary<I extends DescMessage, O extends DescMessage>(
  method: DescMethodUnary<I, O>,
  request: MessageInitShape<I>,
  metadata?: Record<string, string>,
): CoreCall {
  return {
    kind: "unary",
    path: `/${method.parent.typeName}/${method.name}`,
    requests: [toBinary(method.input, create(method.input, request))],
    ...(metadata ? { metadata } : {}),
  };
}

/** The response of a unary call that must have succeeded. */
function response<O extends DescMessage>(
  method: DescMethodUnary<DescMessage, O>,
  outcome: CoreOutcome,
): MessageShape<O> {
  assert.equal(outcome.code, 0, `${method.name}: ${outcome.code} ${outcome.details}`);
  assert.equal(outcome.responses.length, 1);
  return fromBinary(method.output, outcome.responses[0]!);
}

/** The file names a reflection answer for `file` must carry: the file and all it imports. */
function closure(file: DescFile): Set<string> {
  const names = new Set<string>();
  const visit = (f: DescFile) => {
    if (names.has(f.proto.name)) return;
    names.add(f.proto.name);
    f.dependencies.forEach(visit);
  };
  visit(file);
  return names;
}

/** A field violation the services answer, and the exact message they write for it. */
interface Violation<I extends DescMessage> {
  service: "oauth" | "core";
  method: DescMethodUnary<I, DescMessage>;
  request: MessageInitShape<I>;
  field: string;
  description: string;
  message: string;
}

Deno.test("stock C-core and grpc-js clients interoperate with the gRPC port", async (t) => {
  await ensurePackages([packages.grpcio]);
  const stack = await startStack();
  const address = { oauth: stack.oauthGrpc, core: stack.coreGrpc };
  const auth = {
    oauth: { authorization: `Bearer ${await stack.token({ sub: "svc", projects: ["g1"] })}` },
    core: { authorization: `Bearer ${await stack.token({ sub: "ann", space: "a" })}` },
  };
  try {
    await t.step("C-core: create then get on each service, with a bearer token", async () => {
      const oauth = OAuthRegistryService.method;
      // The project's config first (the update creates it): clients need it.
      const [config, anonymous, created] = await grpcio(address.oauth, [
        unary(oauth.updateOAuthConfig, {
          projectId: "g1",
          config: { applicationName: "Interop app", supportEmail: "ops@example.com" },
        }, auth.oauth),
        unary(oauth.getOAuthConfig, { projectId: "g1" }),
        unary(oauth.createClient, {
          projectId: "g1",
          client: { name: "interop", type: ClientType.WEB, redirectUris: ["https://x.test/cb"] },
        }, auth.oauth),
      ]);
      assert.equal(
        response(oauth.updateOAuthConfig, config!).config?.applicationName,
        "Interop app",
      );
      assert.equal(anonymous!.code, 16, "without the token: UNAUTHENTICATED");
      const client = response(oauth.createClient, created!).client!;
      assert.match(client.id, /^cli_/);
      const [gotConfig, gotClient] = await grpcio(address.oauth, [
        unary(oauth.getOAuthConfig, { projectId: "g1" }, auth.oauth),
        unary(oauth.getClient, { projectId: "g1", clientId: client.id }, auth.oauth),
      ]);
      assert.equal(
        response(oauth.getOAuthConfig, gotConfig!).config?.supportEmail,
        "ops@example.com",
      );
      const read = response(oauth.getClient, gotClient!).client!;
      assert.equal(read.id, client.id);
      assert.equal(read.name, "interop");
      assert.deepEqual(read.redirectUris, ["https://x.test/cb"]);

      const core = CoreService.method;
      const [journey] = await grpcio(address.core, [
        unary(core.createJourney, { journey: { name: "Interop ✓" } }, auth.core),
      ]);
      const id = response(core.createJourney, journey!).journey!.id;
      const [again] = await grpcio(address.core, [
        unary(core.getJourney, { journeyId: id }, auth.core),
      ]);
      const j = response(core.getJourney, again!).journey!;
      assert.equal(j.id, id);
      assert.equal(j.name, "Interop ✓");
      assert.equal(j.owner, "ann");
    });

    await t.step(
      "a field violation reaches C-core and grpc-js exactly as written, with a google.rpc.Status",
      async () => {
        const violations: Violation<DescMessage>[] = [
          {
            // The mask path is quoted in the message: non-ASCII text, a `%` and a `:`.
            service: "oauth",
            method: OAuthRegistryService.method.updateOAuthConfig,
            request: {
              projectId: "g1",
              config: { applicationName: "x" },
              updateMask: { paths: ["crème%20brûlée"] },
            },
            field: "config.crème%20brûlée",
            description: "unknown field",
            message: "Invalid config.crème%20brûlée: unknown field",
          } as Violation<typeof OAuthRegistryService.method.updateOAuthConfig.input>,
          {
            service: "core",
            method: CoreService.method.createRole,
            request: { role: { name: "Viewer", resourceType: "project", permissions: ["bad"] } },
            field: "role.permissions[0]",
            description: "must be resource.action: two or more dot-separated lower-case words " +
              "of letters, digits and '_'",
            message: "Invalid role.permissions[0]: must be resource.action: two or more " +
              "dot-separated lower-case words of letters, digits and '_'",
          } as Violation<typeof CoreService.method.createRole.input>,
        ];
        const checkStatus = (bytes: unknown, v: Violation<DescMessage>) => {
          assert.ok(bytes instanceof Uint8Array, "grpc-status-details-bin is present");
          const status = fromBinary(StatusSchema, bytes);
          assert.equal(status.code, 3);
          assert.equal(status.message, v.message);
          assert.equal(status.details.length, 1);
          assert.equal(
            status.details[0]!.typeUrl,
            `type.googleapis.com/${BadRequestSchema.typeName}`,
          );
          const badRequest = anyUnpack(status.details[0]!, BadRequestSchema);
          assert.deepEqual(
            badRequest?.fieldViolations.map((f) => [f.field, f.description]),
            [[v.field, v.description]],
          );
        };
        for (const v of violations) {
          const [core] = await grpcio(address[v.service], [
            unary(v.method, v.request, auth[v.service]),
          ]);
          assert.equal(core!.code, 3, `C-core, ${v.method.name}: ${core!.details}`);
          assert.equal(core!.details, v.message, "C-core reads the message as written");
          checkStatus(core!.trailers.get("grpc-status-details-bin")?.[0], v);

          const client = grpcTestClient(address[v.service]);
          try {
            const js = await grpcFailure(client.call(v.method, v.request, auth[v.service]));
            assert.equal(js.code, 3, `grpc-js, ${v.method.name}: ${js.details}`);
            assert.equal(js.details, v.message, "grpc-js reads the message as written");
            const [bin] = js.metadata.get("grpc-status-details-bin");
            checkStatus(bin === undefined ? undefined : new Uint8Array(bin as Uint8Array), v);
          } finally {
            client.close();
          }
        }
      },
    );

    await t.step("C-core: grpc.health.v1.Health/Check on each service", async () => {
      const services = { oauth: OAuthRegistryService, core: CoreService };
      for (
        const [name, service] of Object.entries(services) as [keyof typeof services, DescService][]
      ) {
        const [overall, named, unknown] = await grpcio(address[name], [
          unary(Health.method.check, {}),
          unary(Health.method.check, { service: service.typeName }),
          unary(Health.method.check, { service: "no.such.Service" }),
        ]);
        const serving = HealthCheckResponse_ServingStatus.SERVING;
        assert.equal(response(Health.method.check, overall!).status, serving, name);
        assert.equal(response(Health.method.check, named!).status, serving, name);
        assert.equal(unknown!.code, 5, `${name}: an unknown service is NOT_FOUND`);
      }
    });

    await t.step("C-core: server reflection as v1 and as v1alpha", async () => {
      const services = { oauth: OAuthRegistryService, core: CoreService };
      const versions = { v1: reflectionV1, v1alpha: reflectionV1alpha };
      for (
        const [name, service] of Object.entries(services) as [keyof typeof services, DescService][]
      ) {
        for (const [version, pb] of Object.entries(versions)) {
          const what = `${name}, ${version}`;
          const requests = [
            { host: "", messageRequest: { case: "listServices" as const, value: "*" } },
            {
              host: "",
              messageRequest: { case: "fileContainingSymbol" as const, value: service.typeName },
            },
            {
              host: "",
              messageRequest: {
                case: "fileContainingSymbol" as const,
                value: `${service.typeName}.${service.methods[0]!.name}`,
              },
            },
            {
              host: "",
              messageRequest: { case: "fileContainingSymbol" as const, value: "no.such.Symbol" },
            },
          ];
          const [outcome] = await grpcio(address[name], [{
            kind: "bidi_streaming",
            path: `/${pb.ServerReflection.typeName}/ServerReflectionInfo`,
            requests: requests.map((r) =>
              toBinary(
                pb.ServerReflectionRequestSchema,
                create(pb.ServerReflectionRequestSchema, r),
              )
            ),
          }]);
          assert.equal(outcome!.code, 0, `${what}: ${outcome!.details}`);
          const answers = outcome!.responses.map((b) =>
            fromBinary(pb.ServerReflectionResponseSchema, b)
          );
          assert.equal(answers.length, requests.length, what);
          answers.forEach((a, i) =>
            assert.deepEqual(a.originalRequest?.messageRequest, requests[i]!.messageRequest, what)
          );

          const [listed, byService, byMethod, missing] = answers;
          assert.equal(listed!.messageResponse.case, "listServicesResponse", what);
          assert.deepEqual(
            listed!.messageResponse.value!.service.map((s: { name: string }) => s.name).sort(),
            [
              service.typeName,
              Health.typeName,
              reflectionV1.ServerReflection.typeName,
              reflectionV1alpha.ServerReflection.typeName,
            ].sort(),
            what,
          );
          for (const found of [byService!, byMethod!]) {
            assert.equal(found.messageResponse.case, "fileDescriptorResponse", what);
            const files = (found.messageResponse.value as { fileDescriptorProto: Uint8Array[] })
              .fileDescriptorProto.map((b) => fromBinary(FileDescriptorProtoSchema, b));
            assert.equal(files[0]!.name, service.file.proto.name, what);
            assert.ok(
              files[0]!.service.some((s) => `${files[0]!.package}.${s.name}` === service.typeName),
              what,
            );
            assert.deepEqual(new Set(files.map((f) => f.name)), closure(service.file), what);
          }
          assert.equal(missing!.messageResponse.case, "errorResponse", what);
          assert.equal(
            (missing!.messageResponse.value as { errorCode: number }).errorCode,
            5,
            `${what}: an unknown symbol is NOT_FOUND`,
          );
        }
      }
    });
  } finally {
    await stack.stop();
  }
});
