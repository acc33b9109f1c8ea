/**
 * The authorization matrix through the gateway. Every route of the gateway's
 * route table (built from the google.api.http annotations, as the gateway builds it) meets every
 * case: no token, an expired token, `alg: none`, a wrong key or algorithm, a malformed bearer, bad
 * claims (all 401); another tenant (403 for a project not in the token, 404 for another account's
 * installation or another space's record, or a success that shows none of the owner's records);
 * foreign references in the path, the body, the query and the `after` cursor (404, and a foreign
 * cursor answers exactly like one that names nothing); and mass assignment of output-only fields
 * (400). After all of them the owner's view of what the route touches is unchanged, and then the
 * owner's own request succeeds, so no denial above was an accident of a broken fixture.
 *
 * The gRPC side of the same matrix is tests/authorization_grpc_test.ts.
 */

import assert from "node:assert/strict";
import type { Route } from "../gateway/routes.ts";
import { httpClient, type HttpResult } from "../lib/testing/mod.ts";
import { startStack } from "../lib/testing/mod.ts";
import {
  allMethods,
  allRoutes,
  badCredentials,
  baseCall,
  buildWorld,
  type Call,
  type Case,
  caseRunner,
  cases,
  type HttpRequest,
  isOutputOnly,
  type Kind,
  namesRecords,
  nonexistent,
  pool,
  protectedNames,
  readBackRoute,
  refSlots,
  tenancy,
  toHttp,
  withoutId,
  withSlot,
  type World,
} from "./authorization_matrix.ts";
import { hasOption } from "@bufbuild/protobuf";
import { http } from "../gen/google/api/annotations_pb.ts";

function assertError(res: HttpResult, status: number, code: string, what: string): void {
  assert.equal(res.status, status, `${what}: ${res.status} ${res.text}`);
  assert.equal(res.body?.error?.code, code, `${what}: ${res.text}`);
  assert.ok(typeof res.body.error.message === "string", `${what}: no message`);
  assert.ok(Array.isArray(res.body.error.details), `${what}: no details`);
}

function violates(res: HttpResult, field: string, what: string): void {
  assertError(res, 400, "invalid_argument", what);
  const fields = res.body.error.details.map((d: { field: string }) => d.field);
  assert.ok(fields.includes(field), `${what}: expected a violation of ${field}: ${res.text}`);
}

function hostileJson(name: string, world: World, kind: Kind | undefined): unknown {
  switch (name) {
    case "id":
      return kind ? world.foreign.ids[kind] : nonexistent("client");
    case "project_id":
      return world.foreign.project;
    case "account_id":
      return world.foreign.account;
    case "originator":
      return world.foreign.sub;
    case "created_at":
    case "updated_at":
      return "2000-01-01T00:00:00.000Z";
    case "secret":
      return "ocs_" + "A".repeat(43);
    case "secret_hint":
      return "ocs_****AAAA";
    case "object":
      return kind ?? "role";
    case "publishing_status":
      return "production";
    default:
      return "hostile";
  }
}

Deno.test("authorization matrix over the gateway: every route x every case", async () => {
  // Tokens must name this issuer and audience: the matrix runs with both checks switched on
  // (tests/authorization_grpc_test.ts runs without them).
  const scope = { issuer: "https://issuer.example.com", audience: "oauth-registry" };
  const stack = await startStack({
    env: { AUTH_ISSUER: scope.issuer, AUTH_AUDIENCE: scope.audience },
  });
  const api = httpClient(stack.gatewayUrl);
  const routes = allRoutes();
  const annotated = allMethods().filter((m) => hasOption(m, http));
  const failures: string[] = [];
  const ran = new Map<Case, number>();
  const notApplicable = new Map<Case, number>();
  let requests = 0;

  const send = async (
    req: HttpRequest,
    authorization: string | undefined,
    headers: Record<string, string> = {},
  ) => {
    requests++;
    return await api(req.method, req.path, {
      headers: { ...headers, ...(authorization !== undefined ? { authorization } : {}) },
      ...(req.json !== undefined ? { json: req.json } : {}),
    });
  };
  const bearer = (token: string) => `Bearer ${token}`;

  async function runRoute(route: Route, index: number): Promise<void> {
    const name = `${route.httpMethod} ${route.template}`;
    const world = await buildWorld(stack, route.method, `h${index}`, scope);
    const { owner } = world;
    const base = baseCall(route.method, owner);
    const req = toHttp(route, base);
    const back = readBackRoute(routes, route);
    assert.ok(back, `${name}: no GET shows what it changes`);
    const readBack = toHttp(back, baseCall(back.method, owner));
    const before = await send(readBack, bearer(owner.token));
    assert.equal(before.status, 200, `${name}: read-back ${readBack.path}: ${before.text}`);
    const credentials = await badCredentials(stack, owner, scope);

    const run = caseRunner(name, { ran, notApplicable, failures });

    for (const c of cases) {
      if (c === "idempotent replay") continue; // after the control
      await run(c, async () => {
        if (c in credentials) {
          for (const value of credentials[c as keyof typeof credentials]) {
            const res = await send(req, value);
            assertError(res, 401, "unauthenticated", `authorization ${JSON.stringify(value)}`);
            assert.match(res.headers.get("www-authenticate") ?? "", /^Bearer/);
          }
          return;
        }
        if (c === "another tenant") {
          // A fresh body: a create that another tenant may make in its own space must not
          // collide with the one replayed below.
          return await anotherTenant(world, route, toHttp(route, baseCall(route.method, owner)));
        }
        if (c === "foreign references") return await foreignReferences(world, route, base);
        return await massAssignment(world, route, base, req);
      });
    }

    // Nothing above changed what the owner sees.
    const after = await send(readBack, bearer(owner.token));
    try {
      assert.deepEqual(after.body, before.body);
    } catch {
      failures.push(`${name}: the owner's ${readBack.path} changed: ${after.text}`);
    }

    const key = { "idempotency-key": `matrix-${index}` };
    const control = await send(req, bearer(owner.token), key);
    // A POST whose answer says whether it created (a consent, given again here) may be a 200.
    const updates = route.method.output.fields.some((f) => f.name === "created");
    const expected = route.httpMethod === "POST" && !(updates && control.status === 200)
      ? 201
      : route.httpMethod === "DELETE"
      ? 204
      : 200;
    if (control.status !== expected) {
      failures.push(`${name}: the owner's own request answered ${control.status}: ${control.text}`);
    }

    // Whatever an Idempotency-Key stores, it never answers another caller.
    await run("idempotent replay", async () => {
      if (route.httpMethod === "POST") {
        const again = await send(req, bearer(owner.token), key);
        assert.equal(again.status, control.status, `the owner's replay: ${again.text}`);
        assert.equal(again.headers.get("idempotent-replayed"), "true", "the key was not stored");
      }
      await anotherTenant(world, route, req, key);
      if (route.segments.some((s) => typeof s !== "string" && s.name === "project_id")) {
        const res = await send(req, bearer(world.lostAccess), key);
        assertError(res, 403, "permission_denied", "the owner's identity without the project");
      }
    });
  }

  async function anotherTenant(
    world: World,
    route: Route,
    req: HttpRequest,
    headers: Record<string, string> = {},
  ): Promise<void> {
    const kind = tenancy(route.method);
    for (
      const [who, token] of [["foreign", world.foreign.token], ["claimless", world.claimless]]
    ) {
      const res = await send(req, bearer(token!), headers);
      const what = `${who} token`;
      if (kind === "project") assertError(res, 403, "permission_denied", what);
      else if (kind === "account") assertError(res, 404, "not_found", what);
      else if (kind === "space" && who === "claimless") {
        assertError(res, 403, "permission_denied", what);
      } else if (kind === "space" && namesRecords(route.method)) {
        assertError(res, 404, "not_found", what);
      } else {
        assert.ok(res.status >= 200 && res.status < 300, `${what}: ${res.status} ${res.text}`);
        for (const id of world.ownerIds) {
          assert.ok(!res.text.includes(id), `${what} sees the owner's ${id}: ${res.text}`);
        }
      }
    }
  }

  async function foreignReferences(world: World, route: Route, base: Call): Promise<boolean> {
    const slots = refSlots(route.method);
    if (slots.length === 0) return false;
    const token = bearer(tenancy(route.method) === "project" ? world.both : world.owner.token);
    for (const slot of slots) {
      const none = nonexistent(slot.kind);
      const nothing = await send(toHttp(route, withSlot(base, slot, none)), token);
      const foreignIds = [world.foreign.ids[slot.kind]];
      if (slot.cursor && world.foreign.deleted[slot.kind]) {
        foreignIds.push(world.foreign.deleted[slot.kind]!);
      }
      for (const id of foreignIds) {
        const res = await send(toHttp(route, withSlot(base, slot, id)), token);
        const what = `a foreign ${slot.kind} as ${slot.name}`;
        if (slot.cursor) {
          assertError(res, 400, "invalid_argument", what);
          assert.equal(res.status, nothing.status, `${what} answers unlike a nonexistent id`);
          assert.deepEqual(res.body, nothing.body, `${what} answers unlike a nonexistent id`);
        } else {
          assertError(res, 404, "not_found", what);
          assert.equal(
            withoutId(res.text, id),
            withoutId(nothing.text, none),
            `${what} answers unlike a nonexistent id`,
          );
        }
      }
      if (slot.cursor) {
        // The control: the owner's own records, present or deleted, are cursors of this list.
        for (const id of [world.owner.ids[slot.kind], world.owner.deleted[slot.kind]]) {
          if (!id) continue;
          const res = await send(toHttp(route, withSlot(base, slot, id)), token);
          assert.equal(res.status, 200, `the owner's ${id} as a cursor: ${res.text}`);
        }
      }
    }
    return true;
  }

  async function massAssignment(
    world: World,
    route: Route,
    base: Call,
    req: HttpRequest,
  ): Promise<void> {
    const target = route.body.kind === "field"
      ? route.body.field.message!
      : route.body.kind === "whole"
      ? route.method.input
      : undefined;
    const kind = target?.name.toLowerCase() as Kind | undefined;
    const names = new Set(protectedNames);
    for (const f of target?.fields ?? []) {
      if (isOutputOnly(f)) names.add(f.name);
      else names.delete(f.name); // a real input of this request (consent's project_id)
    }
    // A body-less GET takes its request's other fields from the query: those are its inputs
    // (ListInstallations' project_id), checked as foreign references, not as assignment.
    const queryInputs = new Set(
      route.body.kind === "none" && route.httpMethod === "GET"
        ? route.method.input.fields
          .filter((f) => !isOutputOnly(f) && !route.segments.includes(f))
          .map((f) => f.name)
        : [],
    );
    const token = bearer(world.owner.token);
    for (const name of names) {
      const value = hostileJson(name, world, kind && kind in world.owner.ids ? kind : undefined);
      if (target) {
        const res = await send({ ...req, json: { ...(req.json as object), [name]: value } }, token);
        violates(res, name, `${name} in the body`);
      } else if (route.httpMethod !== "GET") {
        const res = await send({ ...req, json: { [name]: value } }, token);
        assertError(res, 400, "invalid_argument", `${name} in a body of a body-less route`);
      }
      if (queryInputs.has(name)) continue;
      const res = await send(toHttp(route, base, [[name, String(value)]]), token);
      violates(res, name, `${name} in the query`);
    }
  }

  try {
    assert.ok(routes.length >= 29, `only ${routes.length} routes: the matrix would be empty`);
    assert.equal(routes.length, annotated.length, "every annotated RPC has a route");
    await pool(routes, 4, runRoute);
    const na = [...notApplicable.values()].reduce((a, b) => a + b, 0);
    assert.deepEqual(failures, [], `${failures.length} failures:\n${failures.join("\n")}`);
    // Exactly what the matrix defines: "foreign references" does not apply to a route whose
    // request names no record (no ref slot); every other route-case ran.
    const noReference = routes.filter((r) => refSlots(r.method).length === 0).length;
    assert.ok(noReference < routes.length / 2, `${noReference} routes name no record`);
    assert.deepEqual(
      Object.fromEntries(notApplicable),
      noReference > 0 ? { "foreign references": noReference } : {},
      "not applicable: only foreign references, for the routes that name no record",
    );
    assert.deepEqual(
      Object.fromEntries(ran),
      Object.fromEntries(
        cases.map((c) => [c, routes.length - (c === "foreign references" ? noReference : 0)]),
      ),
      "every route met every case",
    );
    // deno-lint-ignore no-console
    console.log(
      `authorization matrix (HTTP): ${routes.length} routes x ${cases.length} cases = ` +
        `${routes.length * cases.length} route-cases (${na} not applicable: no record ` +
        `reference to substitute), ${requests} HTTP requests checked`,
    );
  } finally {
    await stack.stop();
  }
});
