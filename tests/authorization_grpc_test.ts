/**
 * The authorization matrix for direct gRPC callers (a stock @grpc/grpc-js client,
 * `authorization: Bearer ...` metadata), over every RPC of both services as the generated service
 * descriptors list them, including the RPCs the gateway does not route (VerifyClientSecret). The
 * cases are those of tests/authorization_test.ts, with gRPC codes: UNAUTHENTICATED,
 * PERMISSION_DENIED, NOT_FOUND, and a foreign `after` cursor answering exactly like a nonexistent
 * one (a foreign reference that the RPC ignores, as RecordClientKeyUse ignores a key that is gone,
 * answers as a nonexistent one and leaves the foreign record unchanged). Mass assignment over
 * gRPC: output-only fields of a resource are ignored (AIP-203) or refused (INVALID_ARGUMENT),
 * never stored; an update mask naming one is INVALID_ARGUMENT. The bad
 * credentials are also sent to each service's Connect listener (the gateway's way in), which must
 * refuse them just the same.
 */

import assert from "node:assert/strict";
import type { DescField, DescMethodUnary } from "@bufbuild/protobuf";
import { FieldBehavior } from "../gen/google/api/field_behavior_pb.ts";
import { CoreService } from "../gen/registry/core/v1/core_service_pb.ts";
import { OAuthRegistryService } from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { type GrpcFailure, grpcTestClient } from "../lib/testing/mod.ts";
import { httpClient } from "../lib/testing/mod.ts";
import { startStack } from "../lib/testing/mod.ts";
import {
  allMethods,
  allRoutes,
  badCredentials,
  baseCall,
  behaviors,
  buildWorld,
  type Call,
  type Case,
  caseRunner,
  cases,
  type Kind,
  namesRecords,
  nonexistent,
  outputOnlyFields,
  pool,
  protectedNames,
  readBackRoute,
  refSlots,
  resourceField,
  tenancy,
  toHttp,
  withoutId,
  withSlot,
  type World,
} from "./authorization_matrix.ts";

const code = { ok: 0, invalidArgument: 3, notFound: 5, permissionDenied: 7, unauthenticated: 16 };

/** A protobuf-es init object of the call. */
function toGrpc(call: Call): Record<string, unknown> {
  const init: Record<string, unknown> = {};
  for (const [name, value] of call.fields) {
    init[call.method.input.fields.find((f) => f.name === name)!.localName] = value;
  }
  if (call.resource) init[call.resource.field.localName] = call.resource.proto;
  return init;
}

function stringify(value: unknown): string {
  return JSON.stringify(value, (_k, v) => typeof v === "bigint" ? v.toString() : v);
}

/** Comparable form of a field value (timestamps by their seconds). */
function norm(value: unknown): string {
  if (value && typeof value === "object" && "seconds" in value) {
    return String((value as { seconds: bigint }).seconds);
  }
  return stringify(value);
}

function hostileProto(field: DescField, world: World, kind: Kind | undefined): unknown {
  if (field.fieldKind === "enum") return Math.max(...field.enum.values.map((v) => v.number));
  if (field.message?.typeName === "google.protobuf.Timestamp") {
    return { seconds: 946684800n, nanos: 0 }; // 2000-01-01
  }
  if (field.fieldKind === "scalar" && typeof field.scalar === "number") {
    switch (field.name) {
      case "id":
        return kind ? world.foreign.ids[kind] : nonexistent("client");
      case "project_id":
        return world.foreign.project;
      case "originator":
        return world.foreign.sub;
      default:
        return "hostile";
    }
  }
  throw new Error(`no hostile value for ${field.name}: extend the matrix`);
}

/** The RPC that gets one record by the request field `name` (GetClientKey for `key_id`). */
function getterOf(method: DescMethodUnary, name: string): DescMethodUnary | undefined {
  return method.parent.methods.find((m) =>
    m.name.startsWith("Get") &&
    m.input.fields.some((f) => f.name === name && behaviors(f).includes(FieldBehavior.REQUIRED))
  ) as DescMethodUnary | undefined;
}

Deno.test("authorization matrix over gRPC: every RPC x every case", async () => {
  const stack = await startStack();
  const api = httpClient(stack.gatewayUrl);
  const clients = {
    oauth: grpcTestClient(stack.oauthGrpc),
    core: grpcTestClient(stack.coreGrpc),
  };
  const methods = allMethods();
  const routes = allRoutes();
  const failures: string[] = [];
  const ran = new Map<Case, number>();
  const notApplicable = new Map<Case, number>();
  let calls = 0;
  let connectCalls = 0;

  const isCore = (m: DescMethodUnary) => m.parent.typeName === CoreService.typeName;

  /** Calls; resolves with the code and the response or failure. */
  async function call(
    method: DescMethodUnary,
    init: Record<string, unknown>,
    authorization: string | undefined,
    metadata: Record<string, string> = {},
  ): Promise<{ code: number; response?: Record<string, unknown>; failure?: GrpcFailure }> {
    calls++;
    const client = isCore(method) ? clients.core : clients.oauth;
    try {
      const response = await client.call(
        method,
        init,
        { ...metadata, ...(authorization === undefined ? {} : { authorization }) },
      );
      return { code: 0, response: response as Record<string, unknown> };
    } catch (error) {
      const failure = error as GrpcFailure;
      if (typeof failure.code !== "number") throw error;
      return { code: failure.code, failure };
    }
  }
  const bearer = (token: string) => `Bearer ${token}`;
  const describe = (r: Awaited<ReturnType<typeof call>>) =>
    r.failure ? `code ${r.code}: ${r.failure.details}` : `OK ${stringify(r.response)}`;

  async function runMethod(method: DescMethodUnary, index: number): Promise<void> {
    const name = `${method.parent.name}/${method.name}`;
    const world = await buildWorld(stack, method, `g${index}`);
    const { owner } = world;
    const base = baseCall(method, owner);
    const init = toGrpc(base);
    const route = routes.find((r) => r.method === method);
    const back = route && readBackRoute(routes, route);
    const readBack = back && toHttp(back, baseCall(back.method, owner));
    const before = readBack && await api("GET", readBack.path, { token: owner.token });
    if (before) assert.equal(before.status, 200, `${name}: read-back: ${before.text}`);
    const credentials = await badCredentials(stack, owner);

    const run = caseRunner(name, { ran, notApplicable, failures });

    for (const c of cases) {
      if (c === "idempotent replay") continue; // after the control
      if (c === "mass assignment") {
        // What the denials did not change, before mass assignment may legitimately update.
        if (readBack) {
          const after = await api("GET", readBack.path, { token: owner.token });
          try {
            assert.deepEqual(after.body, before!.body);
          } catch {
            failures.push(`${name}: the owner's ${readBack.path} changed: ${after.text}`);
          }
        }
      }
      await run(c, async () => {
        if (c in credentials) {
          const connectUrl = `${
            isCore(method) ? stack.coreHttp : stack.oauthHttp
          }/${method.parent.typeName}/${method.name}`;
          for (const value of credentials[c as keyof typeof credentials]) {
            const res = await call(method, init, value);
            assert.equal(
              res.code,
              code.unauthenticated,
              `authorization ${JSON.stringify(value)}: ${describe(res)}`,
            );
            connectCalls++;
            const connect = await fetch(connectUrl, {
              method: "POST",
              headers: {
                "content-type": "application/json",
                ...(value === undefined ? {} : { authorization: value }),
              },
              body: stringify(init),
            });
            const text = await connect.text();
            assert.equal(connect.status, 401, `Connect, ${JSON.stringify(value)}: ${text}`);
            assert.equal(JSON.parse(text).code, "unauthenticated", text);
          }
          return;
        }
        if (c === "another tenant") return await anotherTenant(world, method, init);
        if (c === "foreign references") return await foreignReferences(world, method, base);
        return await massAssignment(world, method);
      });
    }

    const key = { "idempotency-key": `matrix-${index}` };
    const controlInit = toGrpc(baseCall(method, owner));
    const control = await call(method, controlInit, bearer(owner.token), key);
    if (control.code !== code.ok) {
      failures.push(`${name}: the owner's own call failed: ${describe(control)}`);
    } else if (method.name === "VerifyClientSecret" && control.response!.valid !== true) {
      failures.push(`${name}: the owner's own secret did not verify`);
    }

    // Whatever an idempotency key stores, it never answers another caller.
    await run("idempotent replay", async () => {
      if (route?.httpMethod === "POST") {
        const again = await call(method, controlInit, bearer(owner.token), key);
        const id = (r: typeof again) =>
          stringify(Object.values(r.response ?? {}).find((v) => v && typeof v === "object"))
            .match(/"id":"([^"]+)"/)?.[1];
        assert.equal(again.code, code.ok, `the owner's replay: ${describe(again)}`);
        assert.equal(id(again), id(control), "the owner's replay is not the stored outcome");
      }
      await anotherTenant(world, method, controlInit, key);
      if (route?.segments.some((s) => typeof s !== "string" && s.name === "project_id")) {
        const res = await call(method, controlInit, bearer(world.lostAccess), key);
        assert.equal(res.code, code.permissionDenied, `without the project: ${describe(res)}`);
      }
    });
  }

  async function anotherTenant(
    world: World,
    method: DescMethodUnary,
    init: Record<string, unknown>,
    metadata: Record<string, string> = {},
  ): Promise<void> {
    const kind = tenancy(method);
    for (
      const [who, token] of [["foreign", world.foreign.token], ["claimless", world.claimless]]
    ) {
      const res = await call(method, init, bearer(token!), metadata);
      const what = `${who} token: ${describe(res)}`;
      if (kind === "project") assert.equal(res.code, code.permissionDenied, what);
      else if (kind === "account") assert.equal(res.code, code.notFound, what);
      else if (kind === "space" && who === "claimless") {
        assert.equal(res.code, code.permissionDenied, what);
      } else if (kind === "space" && namesRecords(method)) {
        assert.equal(res.code, code.notFound, what);
      } else {
        assert.equal(res.code, code.ok, what);
        const text = stringify(res.response);
        for (const id of world.ownerIds) assert.ok(!text.includes(id), `${what} shows ${id}`);
      }
    }
    if (kind === "project" && !method.input.fields.some((f) => f.name === "project_id")) {
      // The project comes from a record (VerifyClientSecret's client): an id that names nothing
      // must answer like a record of a project the token does not cover, or existence leaks.
      const none = await call(
        method,
        { ...init, clientId: nonexistent("client") },
        bearer(world.foreign.token),
      );
      assert.equal(
        none.code,
        code.permissionDenied,
        `an unknown client answers unlike another project's: ${describe(none)}`,
      );
    }
  }

  async function foreignReferences(
    world: World,
    method: DescMethodUnary,
    base: Call,
  ): Promise<boolean> {
    const slots = refSlots(method);
    if (slots.length === 0) return false;
    const token = bearer(tenancy(method) === "project" ? world.both : world.owner.token);
    for (const slot of slots) {
      const none = nonexistent(slot.kind);
      const nothing = await call(method, toGrpc(withSlot(base, slot, none)), token);
      const foreignIds = [world.foreign.ids[slot.kind]];
      if (slot.cursor && world.foreign.deleted[slot.kind]) {
        foreignIds.push(world.foreign.deleted[slot.kind]!);
      }
      // An RPC that ignores a reference naming nothing (RecordClientKeyUse ignores a key that is
      // gone) must ignore a foreign record alike: the same answer, and the record unchanged as
      // its own tenant sees it (read with the RPC that gets one record of the kind).
      const ignores = !slot.cursor && nothing.code === code.ok;
      const reader = ignores ? getterOf(method, slot.name) : undefined;
      if (ignores && !reader) {
        throw new Error(
          `${method.name} ignores a ${slot.kind} that names nothing, and no RPC ` +
            "reads one: the matrix cannot check a foreign one is left alone",
        );
      }
      const foreignView = async () => {
        const res = await call(
          reader!,
          toGrpc(baseCall(reader!, world.foreign)),
          bearer(world.foreign.token),
        );
        assert.equal(res.code, code.ok, `the foreign tenant reads its ${slot.kind}`);
        return stringify(res.response);
      };
      for (const id of foreignIds) {
        const was = ignores ? await foreignView() : undefined;
        const res = await call(method, toGrpc(withSlot(base, slot, id)), token);
        const what = `a foreign ${slot.kind} as ${slot.name}: ${describe(res)}`;
        if (ignores) {
          assert.equal(res.code, code.ok, `${what} vs nonexistent: ${describe(nothing)}`);
          assert.equal(stringify(res.response), stringify(nothing.response), what);
          assert.equal(await foreignView(), was, `${what}: the foreign ${slot.kind} changed`);
        } else if (slot.cursor) {
          assert.equal(res.code, code.invalidArgument, what);
          assert.equal(res.code, nothing.code, `${what} vs nonexistent: ${describe(nothing)}`);
          assert.equal(res.failure!.details, nothing.failure!.details, what);
        } else {
          assert.equal(res.code, code.notFound, what);
          assert.equal(
            withoutId(res.failure!.details, id),
            withoutId(nothing.failure!.details, none),
            `${what} vs nonexistent: ${describe(nothing)}`,
          );
        }
      }
      if (slot.cursor) {
        for (const id of [world.owner.ids[slot.kind], world.owner.deleted[slot.kind]]) {
          if (!id) continue;
          const res = await call(method, toGrpc(withSlot(base, slot, id)), token);
          assert.equal(res.code, code.ok, `the owner's ${id} as a cursor: ${describe(res)}`);
        }
      }
    }
    return true;
  }

  /** Optional filters of lists that only ever hold the caller's own records. */
  const ownListFilters = new Set(["ListInstallations.project_id"]);

  async function massAssignment(world: World, method: DescMethodUnary): Promise<void> {
    const token = bearer(world.owner.token);
    const resource = resourceField(method);
    if (!resource) {
      // Nothing to assign: the request carries no protected field but REQUIRED inputs of the
      // call itself (a path's project_id, VerifyClientSecret's secret), and the filters of a list
      // that is the caller's own whatever they say (ListInstallations' project_id narrows the
      // caller's account's installations to one project's).
      const carried = method.input.fields.filter((f) =>
        protectedNames.includes(f.name) && !behaviors(f).includes(FieldBehavior.REQUIRED) &&
        !ownListFilters.has(`${method.name}.${f.name}`)
      ).map((f) => f.name);
      assert.deepEqual(carried, [], `the request carries ${carried.join(", ")}`);
      return;
    }
    const message = resource.message!;
    const kind = message.name.toLowerCase() as Kind;
    const known = kind in world.owner.ids ? kind : undefined;
    const get = method.parent.methods.find((m) =>
      m.name === method.name.replace(/^Update/, "Get") && m.name !== method.name
    ) as DescMethodUnary | undefined;
    const outputField = () =>
      method.output.fields.find((f) => f.message?.typeName === message.typeName)!.localName;
    for (const field of outputOnlyFields(message)) {
      const hostile = hostileProto(field, world, known);
      const before = get ? await call(get, toGrpc(baseCall(get, world.owner)), token) : undefined;
      const fresh = toGrpc(baseCall(method, world.owner)); // a create needs a new name each time
      const probe = {
        ...fresh,
        [resource.localName]: {
          ...(fresh[resource.localName] as object),
          [field.localName]: hostile,
        },
      };
      const res = await call(method, probe, token);
      const what = `${field.name} = ${stringify(hostile)}: ${describe(res)}`;
      if (res.code === code.invalidArgument) continue; // refused: fine
      assert.equal(res.code, code.ok, what);
      const stored = res.response![outputField()] as Record<string, unknown>;
      assert.notEqual(norm(stored[field.localName]), norm(hostile), `${what}: it took effect`);
      if (before) {
        // An update changes no output-only field but updated_at.
        const was = before.response![outputField()] as Record<string, unknown>;
        for (const f of outputOnlyFields(message)) {
          if (f.name === "updated_at") continue;
          assert.equal(norm(stored[f.localName]), norm(was[f.localName]), `${what}: ${f.name}`);
        }
      }
      // And a mask naming the field is refused.
      if (method.input.fields.some((f) => f.name === "update_mask")) {
        const masked = await call(
          method,
          { ...probe, updateMask: { paths: [field.name] } },
          token,
        );
        assert.equal(masked.code, code.invalidArgument, `mask ${field.name}: ${describe(masked)}`);
      }
    }
  }

  try {
    assert.ok(methods.length >= 30, `only ${methods.length} RPCs: the matrix would be empty`);
    assert.equal(
      methods.length,
      [...OAuthRegistryService.methods, ...CoreService.methods]
        .filter((m) => m.methodKind === "unary").length,
      "every unary RPC of both services (the change feed's are tested with its streams)",
    );
    await pool(methods, 4, runMethod);
    const na = [...notApplicable.values()].reduce((a, b) => a + b, 0);
    assert.deepEqual(failures, [], `${failures.length} failures:\n${failures.join("\n")}`);
    // Exactly what the matrix defines: "foreign references" does not apply to an RPC whose
    // request names no record (no ref slot); every other RPC-case ran.
    const noReference = methods.filter((m) => refSlots(m).length === 0).length;
    assert.ok(noReference < methods.length / 2, `${noReference} RPCs name no record`);
    assert.deepEqual(
      Object.fromEntries(notApplicable),
      noReference > 0 ? { "foreign references": noReference } : {},
      "not applicable: only foreign references, for the RPCs that name no record",
    );
    assert.deepEqual(
      Object.fromEntries(ran),
      Object.fromEntries(
        cases.map((c) => [c, methods.length - (c === "foreign references" ? noReference : 0)]),
      ),
      "every RPC met every case",
    );
    // deno-lint-ignore no-console
    console.log(
      `authorization matrix (gRPC): ${methods.length} RPCs x ${cases.length} cases = ` +
        `${methods.length * cases.length} RPC-cases (${na} not applicable: no record reference ` +
        `to substitute), ${calls} gRPC calls and ${connectCalls} Connect calls checked`,
    );
  } finally {
    clients.oauth.close();
    clients.core.close();
    await stack.stop();
  }
});
