/**
 * What the authorization matrix (tests/authorization_test.ts over the gateway,
 * tests/authorization_grpc_test.ts over gRPC) shares: the RPCs and routes, read from the generated
 * descriptors and the gateway's route table (never a hand list), a valid request for each built
 * from the request message's REQUIRED fields, the record references in each request, and a small
 * world of records per tenant.
 *
 * Nothing here is per endpoint: a field is filled by its name (`project_id`, `client_id`, ...), a
 * body by its message type. A new RPC whose fields or body type this module cannot fill fails the
 * suite with "no fixture for ...", so it cannot slip through the matrix unchecked.
 *
 * @module
 */

import {
  type DescField,
  type DescMessage,
  type DescMethodUnary,
  type DescService,
  getOption,
} from "@bufbuild/protobuf";
import { SignJWT } from "jose";
import { field_behavior, FieldBehavior } from "../gen/google/api/field_behavior_pb.ts";
import { CoreService } from "../gen/registry/core/v1/core_service_pb.ts";
import { ClientType } from "../gen/registry/oauth/v1/client_pb.ts";
import { OAuthRegistryService } from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { buildRoutes, type Route } from "../gateway/routes.ts";
import { idKind } from "../lib/platform/mod.ts";
import { httpClient, type HttpResult } from "../lib/testing/mod.ts";
import type { Stack } from "../lib/testing/mod.ts";

/** The services whose every RPC the matrix covers. */
export const services: DescService[] = [OAuthRegistryService, CoreService];

/**
 * The streaming RPCs, whose authorization is tested beside their streams (the change feed:
 * services/oauth/events_test.ts, services/core/events_test.ts), not by this matrix.
 */
const streamedElsewhere = new Set(["WatchEvents"]);

/** Every unary RPC of every service. */
export function allMethods(): DescMethodUnary[] {
  return services.flatMap((s) => s.methods).flatMap((m) => {
    if (m.methodKind === "unary") return [m as DescMethodUnary];
    if (streamedElsewhere.has(m.name)) return [];
    throw new Error(`${m.name} is not unary: extend the matrix`);
  });
}

/** The gateway's routes, built exactly as the gateway builds them. */
export function allRoutes(): Route[] {
  return buildRoutes(services);
}

/**
 * The matrix's cases, in the order they run. The owner's control request (with an
 * Idempotency-Key) runs after "mass assignment", and "idempotent replay" replays its key.
 */
export const cases = [
  "no token",
  "expired token",
  "alg none",
  "wrong key or algorithm",
  "malformed bearer",
  "bad claims",
  "another tenant",
  "foreign references",
  "mass assignment",
  "idempotent replay",
] as const;

/** A case of the matrix. */
export type Case = typeof cases[number];

/** What a matrix run counts: cases run and not applicable, and every failure found. */
export interface Tally {
  ran: Map<Case, number>;
  notApplicable: Map<Case, number>;
  failures: string[];
}

/**
 * Runs the cases of one route or RPC: a case whose body returns false did not apply (no record
 * to substitute); one that throws is a failure, recorded with the route's name.
 */
export function caseRunner(
  name: string,
  tally: Tally,
): (c: Case, body: () => Promise<boolean | void>) => Promise<void> {
  return async (c, body) => {
    try {
      if ((await body()) === false) {
        tally.notApplicable.set(c, (tally.notApplicable.get(c) ?? 0) + 1);
      } else tally.ran.set(c, (tally.ran.get(c) ?? 0) + 1);
    } catch (error) {
      tally.failures.push(`${name} [${c}]: ${(error as Error).message}`);
    }
  };
}

/** Kinds of record a request can name. */
export type Kind = "client" | "secret" | "key" | "installation" | "role" | "journey" | "unit";

const prefixes: Record<Kind, string> = {
  client: "cli",
  secret: "sec",
  key: "key",
  installation: "ins",
  role: "role",
  journey: "journey",
  unit: "unit",
};

/** A well-formed id of the kind that names no record. */
export function nonexistent(kind: Kind): string {
  return idKind(prefixes[kind]).generate().id;
}

/** Request fields that name a record, by field name. */
const refKinds: Record<string, Kind> = {
  client_id: "client",
  secret_id: "secret",
  key_id: "key",
  installation_id: "installation",
  role_id: "role",
  journey_id: "journey",
  unit_id: "unit",
  journey: "journey",
  parent: "journey",
};

/** Field names whose client-sent values must never take effect. */
export const protectedNames = [
  "id",
  "project_id",
  "created_at",
  "updated_at",
  "secret",
  "secret_hint",
  "private_jwk",
  "kid",
  "algorithm",
  "last_used_at",
  "account_id",
  "originator",
  "object",
];

/** The google.api.field_behavior annotations of a field. */
export function behaviors(field: DescField): FieldBehavior[] {
  return getOption(field, field_behavior) ?? [];
}

/** Whether a field is OUTPUT_ONLY. */
export function isOutputOnly(field: DescField): boolean {
  return behaviors(field).includes(FieldBehavior.OUTPUT_ONLY);
}

/** One tenant's identity and records. */
export interface Tenant {
  /** `sub`. */
  sub: string;
  /** `account_id`. */
  account: string;
  /** The project it administers. */
  project: string;
  /** Its core space. */
  space: string;
  /** A token with its own claims only. */
  token: string;
  /** Live records, by kind (the journey has neither units nor children). */
  ids: Record<Kind, string>;
  /** The journey that holds the unit. */
  unitJourney: string;
  /** Ids of records created and deleted again (cursors that stay valid in their own list). */
  deleted: Partial<Record<Kind, string>>;
  /** The plaintext of its client's secret. */
  secret: string;
}

/** The records of one route's run: the owner, another tenant, and tokens. */
export interface World {
  /** The caller whose records the requests name. */
  owner: Tenant;
  /** Another project, account and space. */
  foreign: Tenant;
  /** The owner's identity administering both projects (for cross-project references). */
  both: string;
  /** A valid token with no projects, no account_id and no space. */
  claimless: string;
  /** The owner's `sub`, account and space, but no longer any project. */
  lostAccess: string;
  /** Every id of the owner's records, for leak checks. */
  ownerIds: string[];
}

let unique = 0;

/** `iss` and `aud` every token carries, when the stack requires them (AUTH_ISSUER/AUDIENCE). */
export interface TokenScope {
  /** `iss`. */
  issuer?: string;
  /** `aud`. */
  audience?: string;
}

/** A valid body for a resource message, as gateway JSON and as a protobuf init object. */
export interface Resource {
  /** The request field that carries it. */
  field: DescField;
  /** The body sent through the gateway. */
  json: Record<string, unknown>;
  /** The same, as a protobuf-es init object. */
  proto: Record<string, unknown>;
}

function resourceFixture(
  field: DescField,
  verb: "create" | "update",
  t: Tenant,
): Resource {
  const n = ++unique;
  const typeName = field.message!.typeName;
  const both = (json: Record<string, unknown>, proto: Record<string, unknown>) => ({
    field,
    json,
    proto,
  });
  switch (typeName) {
    case "registry.oauth.v1.OAuthConfig":
      return both({ application_name: `App ${n}` }, { applicationName: `App ${n}` });
    case "registry.oauth.v1.Client":
      return verb === "create"
        ? both(
          { name: `Client ${n}`, type: "web", redirect_uris: ["https://app.example.com/cb"] },
          {
            name: `Client ${n}`,
            type: ClientType.WEB,
            redirectUris: ["https://app.example.com/cb"],
          },
        )
        : both({ name: `Renamed ${n}` }, { name: `Renamed ${n}` });
    case "registry.core.v1.Role":
      return both(
        { name: `Role ${n}`, resource_type: "project", permissions: ["units.read"] },
        { name: `Role ${n}`, resourceType: "project", permissions: ["units.read"] },
      );
    case "registry.core.v1.Journey":
      return both({ name: `Journey ${n}` }, { name: `Journey ${n}` });
    case "registry.core.v1.Unit":
      return both(
        { journey: t.unitJourney, title: `Unit ${n}` },
        { journey: t.unitJourney, title: `Unit ${n}` },
      );
    default:
      throw new Error(
        `no fixture for a ${typeName} body: add one to tests/authorization_matrix.ts`,
      );
  }
}

/** The value of a required scalar request field for the tenant, by the field's name. */
function valueOf(t: Tenant, name: string, method: DescMethodUnary): string {
  if (name === "project_id") return t.project;
  if (name === "secret") return t.secret;
  if (name === "journey") return t.unitJourney;
  if (name === "origin") return "https://app.example.com";
  const kind = refKinds[name];
  if (kind) return t.ids[kind];
  throw new Error(`no fixture for field ${name} of ${method.name}: extend the matrix`);
}

/**
 * OPTIONAL request fields of which a valid request needs one, by name, with the value the matrix
 * gives them: CreateClientKey takes `jwk` or `generate` (not both), and the matrix asks the
 * registry to generate the key.
 */
const choices: Record<string, string> = { generate: "EdDSA" };

/** A request before it is rendered for HTTP or gRPC. */
export interface Call {
  /** The RPC. */
  method: DescMethodUnary;
  /** Top-level scalar fields by proto name. */
  fields: Map<string, string>;
  /** The resource body, if the request has one. */
  resource: Resource | undefined;
}

/**
 * The request field that carries a resource, if any: a message field of the API's own types (not
 * an update mask, nor an `expires_at` Timestamp or a `jwk` Struct, which are plain inputs).
 */
export function resourceField(method: DescMethodUnary): DescField | undefined {
  return method.input.fields.find((f) =>
    f.fieldKind === "message" && !f.message.typeName.startsWith("google.protobuf.")
  );
}

/** The owner's valid request: every REQUIRED field filled from the tenant's records. */
export function baseCall(method: DescMethodUnary, t: Tenant): Call {
  const fields = new Map<string, string>();
  let resource: Resource | undefined;
  for (const f of method.input.fields) {
    if (!behaviors(f).includes(FieldBehavior.REQUIRED)) continue;
    if (f.fieldKind === "message") {
      resource = resourceFixture(f, method.name.startsWith("Create") ? "create" : "update", t);
    } else if (f.fieldKind === "scalar") {
      fields.set(f.name, valueOf(t, f.name, method));
    } else {
      throw new Error(`no fixture for ${f.fieldKind} field ${f.name} of ${method.name}`);
    }
  }
  for (const f of method.input.fields) {
    const choice = choices[f.name];
    if (choice !== undefined && f.fieldKind === "scalar" && !fields.has(f.name)) {
      fields.set(f.name, choice);
    }
  }
  return { method, fields, resource };
}

/** Where a request names a record. */
export interface Slot {
  /** A top-level request field, or a field of the resource body. */
  where: "request" | "resource";
  /** Its proto name. */
  name: string;
  /** The kind of record it names. */
  kind: Kind;
  /** Whether it is a list's `after` cursor. */
  cursor: boolean;
}

/** How a request is scoped to its caller. */
export type Tenancy = "project" | "account" | "space" | "own-only";

/**
 * The tenancy of an RPC, from the REQUIRED fields of its request (the ones the matrix fills): an
 * optional `client_id` (CheckJavaScriptOrigin's) narrows an answer the caller gets without it.
 */
export function tenancy(method: DescMethodUnary): Tenancy {
  const names = method.input.fields.filter((f) => behaviors(f).includes(FieldBehavior.REQUIRED))
    .map((f) => f.name);
  if (names.includes("project_id") || names.includes("client_id")) return "project";
  if (names.includes("installation_id")) return "account";
  if (method.parent.typeName === CoreService.typeName) return "space";
  return "own-only";
}

/** The field that names the tenant itself (not a reference to check separately). */
function tenantKey(method: DescMethodUnary): string | undefined {
  const names = method.input.fields.map((f) => f.name);
  if (names.includes("project_id")) return "project_id";
  if (tenancy(method) === "project") return "client_id"; // VerifyClientSecret: the client's project
  if (tenancy(method) === "account") return "installation_id";
  return undefined;
}

/** Every place a request of the method names a record (path ids, body, query, `after`). */
export function refSlots(method: DescMethodUnary): Slot[] {
  const slots: Slot[] = [];
  const key = tenantKey(method);
  for (const f of method.input.fields) {
    if (f.fieldKind !== "scalar") continue;
    if (f.name === "after") {
      const item = method.output.fields.find((o) => o.name === "data")?.message;
      // An event's id is a position in the caller's own project's (or space's) trail: it names
      // nothing another tenant owns.
      if (item?.typeName === "registry.audit.v1.Event") continue;
      const kind = item?.name.toLowerCase() as Kind | undefined;
      if (!kind || !(kind in prefixes)) throw new Error(`no cursor kind for ${method.name}`);
      slots.push({ where: "request", name: f.name, kind, cursor: true });
    } else if (refKinds[f.name] && f.name !== key) {
      slots.push({ where: "request", name: f.name, kind: refKinds[f.name]!, cursor: false });
    } else if (f.name.endsWith("_id") && f.name !== "project_id" && f.name !== key) {
      throw new Error(`${method.name}.${f.name} names a record the matrix does not know`);
    }
  }
  const resource = resourceField(method);
  for (const f of resource?.message?.fields ?? []) {
    if (isOutputOnly(f) || f.fieldKind !== "scalar") continue;
    if (refKinds[f.name]) {
      slots.push({ where: "resource", name: f.name, kind: refKinds[f.name]!, cursor: false });
    } else if (f.name.endsWith("_id")) {
      throw new Error(`${resource!.message!.typeName}.${f.name} names an unknown record kind`);
    }
  }
  return slots;
}

/** A copy of the call with one slot naming `id`. */
export function withSlot(call: Call, slot: Slot, id: string): Call {
  const fields = new Map(call.fields);
  let resource = call.resource;
  if (slot.where === "request") fields.set(slot.name, id);
  else {
    const f = resource!.field.message!.fields.find((f) => f.name === slot.name)!;
    resource = {
      ...resource!,
      json: { ...resource!.json, [slot.name]: id },
      proto: { ...resource!.proto, [f.localName]: id },
    };
  }
  return { ...call, fields, resource };
}

/** Whether the owner's request names any record (path id, body or query reference). */
export function namesRecords(method: DescMethodUnary): boolean {
  return refSlots(method).some((s) => !s.cursor && isRequired(method, s)) ||
    (tenantKey(method) !== undefined && tenantKey(method) !== "project_id");
}

function isRequired(method: DescMethodUnary, slot: Slot): boolean {
  const fields = slot.where === "request"
    ? method.input.fields
    : resourceField(method)!.message!.fields;
  const f = fields.find((f) => f.name === slot.name)!;
  return behaviors(f).includes(FieldBehavior.REQUIRED);
}

/** Output-only fields of a message. */
export function outputOnlyFields(message: DescMessage): DescField[] {
  return message.fields.filter(isOutputOnly);
}

// ---------------------------------------------------------------------------------------------
// HTTP rendering

/** An HTTP request. */
export interface HttpRequest {
  /** Method. */
  method: string;
  /** Path with query. */
  path: string;
  /** JSON body. */
  json?: unknown;
}

/** Renders a call for the gateway along its route. */
export function toHttp(
  route: Route,
  call: Call,
  extraQuery: [string, string][] = [],
): HttpRequest {
  const pathNames = new Set<string>();
  const path = "/" + route.segments.map((s) => {
    if (typeof s === "string") return s;
    pathNames.add(s.name);
    const value = call.fields.get(s.name);
    if (value === undefined) throw new Error(`${route.template}: no value for ${s.name}`);
    return encodeURIComponent(value);
  }).join("/");
  const rest = [...call.fields].filter(([k]) => !pathNames.has(k));
  const query = new URLSearchParams();
  let json: unknown;
  if (route.body.kind === "field") {
    if (rest.length > 0) throw new Error(`${route.template}: ${rest[0]![0]} has no place`);
    json = call.resource!.json;
  } else if (route.body.kind === "whole") {
    json = Object.fromEntries(rest);
  } else {
    for (const [k, v] of rest) query.set(k, v);
  }
  for (const [k, v] of extraQuery) query.append(k, v);
  const qs = query.toString();
  return { method: route.httpMethod, path: qs ? `${path}?${qs}` : path, ...(json ? { json } : {}) };
}

/** The GET that shows what a route changes: the same template, else its collection. */
export function readBackRoute(routes: Route[], route: Route): Route | undefined {
  const same = routes.find((r) => r.httpMethod === "GET" && r.template === route.template);
  if (same) return same;
  const parent = route.template.slice(0, route.template.lastIndexOf("/"));
  return routes.find((r) => r.httpMethod === "GET" && r.template === parent);
}

// ---------------------------------------------------------------------------------------------
// Tokens

const enc = new TextEncoder();

function b64url(value: unknown): string {
  return btoa(JSON.stringify(value)).replace(/=+$/, "").replace(/\+/g, "-").replace(/\//g, "_");
}

/** The owner's claims as a JWT payload. */
function payloadOf(
  t: Tenant,
  scope: TokenScope,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  const now = Math.floor(Date.now() / 1000);
  return {
    ...(scope.issuer === undefined ? {} : { iss: scope.issuer }),
    ...(scope.audience === undefined ? {} : { aud: scope.audience }),
    sub: t.sub,
    account_id: t.account,
    projects: [t.project],
    space: t.space,
    iat: now,
    exp: now + 3600,
    ...extra,
  };
}

async function sign(
  secret: string,
  payload: Record<string, unknown>,
  alg = "HS256",
): Promise<string> {
  return await new SignJWT(payload).setProtectedHeader({ alg, typ: "JWT" }).sign(
    enc.encode(secret),
  );
}

/** `authorization` values that must all be refused (401 / UNAUTHENTICATED), by case. */
export async function badCredentials(
  stack: Stack,
  t: Tenant,
  scope: TokenScope = {},
): Promise<
  Record<
    Exclude<
      Case,
      "another tenant" | "foreign references" | "mass assignment" | "idempotent replay"
    >,
    (string | undefined)[]
  >
> {
  const now = Math.floor(Date.now() / 1000);
  const good = await sign(stack.jwtSecret, payloadOf(t, scope));
  const [, goodPayload, goodSig] = good.split(".");
  const noneHeader = (alg: string) => b64url({ alg, typ: "JWT" });
  const forged = b64url(payloadOf(t, scope, { projects: ["*"], space: "any" }));
  const without = (claim: string) => {
    const p = payloadOf(t, scope);
    delete p[claim];
    return sign(stack.jwtSecret, p);
  };
  return {
    "no token": [undefined, ""],
    "expired token": [
      await sign(stack.jwtSecret, payloadOf(t, scope, { iat: now - 7200, exp: now - 10 })).then(
        bearer,
      ),
    ],
    "alg none": [
      `${noneHeader("none")}.${b64url(payloadOf(t, scope))}.`,
      `${noneHeader("none")}.${goodPayload}.${goodSig}`,
      `${noneHeader("NONE")}.${b64url(payloadOf(t, scope))}.`,
      `${noneHeader("none")}.${b64url(payloadOf(t, scope))}`,
    ].map(bearer),
    "wrong key or algorithm": [
      await sign("a-different-secret-of-at-least-32-characters!", payloadOf(t, scope)),
      await sign(stack.jwtSecret, payloadOf(t, scope), "HS512"),
      await sign(stack.jwtSecret, payloadOf(t, scope), "HS384"),
      `${good.split(".")[0]}.${forged}.${goodSig}`, // claims changed after signing
    ].map(bearer),
    "malformed bearer": [
      "Bearer",
      "Bearer ",
      good,
      `Basic ${btoa("user:password")}`,
      `Token ${good}`,
      `Bearer ${good} ${good}`,
      `Bearer ${good}, Bearer ${good}`,
      `Bearer "${good}"`,
      "Bearer not.a.jwt",
      `Bearer ${good.split(".").slice(0, 2).join(".")}`,
      `Bearer ${good}.${goodSig}`,
    ],
    "bad claims": [
      await without("sub"),
      await without("exp"),
      await sign(stack.jwtSecret, payloadOf(t, scope, { sub: 42 })),
      await sign(stack.jwtSecret, payloadOf(t, scope, { sub: "" })),
      await sign(stack.jwtSecret, payloadOf(t, scope, { projects: t.project })),
      await sign(stack.jwtSecret, payloadOf(t, scope, { space: "" })),
      await sign(stack.jwtSecret, payloadOf(t, scope, { account_id: ["a", "b"] })),
      await sign(stack.jwtSecret, payloadOf(t, scope, { nbf: now + 600 })),
      await sign(stack.jwtSecret, payloadOf(t, scope, { exp: "never" })),
      ...(scope.issuer === undefined ? [] : [
        await without("iss"),
        await sign(stack.jwtSecret, payloadOf(t, scope, { iss: `${scope.issuer}.evil` })),
      ]),
      ...(scope.audience === undefined ? [] : [
        await without("aud"),
        await sign(stack.jwtSecret, payloadOf(t, scope, { aud: "another-service" })),
      ]),
    ].map(bearer),
  };
}

function bearer(token: string): string {
  return `Bearer ${token}`;
}

// ---------------------------------------------------------------------------------------------
// The world

function ok(res: HttpResult, what: string): HttpResult {
  if (res.status < 200 || res.status > 299) {
    throw new Error(`setup: ${what} answered ${res.status}: ${res.text}`);
  }
  return res;
}

async function tenantOf(
  stack: Stack,
  name: string,
  area: "oauth" | "core",
  scope: TokenScope,
): Promise<Tenant> {
  const api = httpClient(stack.gatewayUrl);
  const t: Tenant = {
    sub: `${name}-user`,
    account: `${name}-account`,
    project: `${name}-project`,
    space: `${name}-space`,
    token: "",
    ids: { client: "", secret: "", key: "", installation: "", role: "", journey: "", unit: "" },
    unitJourney: "",
    deleted: {},
    secret: "",
  };
  t.token = await stack.token({
    ...scope,
    sub: t.sub,
    accountId: t.account,
    projects: [t.project],
    space: t.space,
  });
  const call = async (method: string, path: string, json?: unknown) =>
    ok(await api(method, path, { token: t.token, ...(json ? { json } : {}) }), `${method} ${path}`)
      .body;
  const createAndDelete = async (collection: string, json: unknown) => {
    const id = (await call("POST", collection, json)).id as string;
    await call("DELETE", `${collection}/${id}`);
    return id;
  };
  if (area === "oauth") {
    const p = `/v1/projects/${t.project}`;
    await call("PATCH", `${p}/config`, { application_name: "App", audience: "internal" });
    const client = { name: "c", type: "web", redirect_uris: ["https://app.example.com/cb"] };
    t.ids.client = (await call("POST", `${p}/clients`, client)).id;
    t.deleted.client = await createAndDelete(`${p}/clients`, client);
    const secret = await call("POST", `${p}/clients/${t.ids.client}/secrets`);
    t.ids.secret = secret.id;
    t.secret = secret.secret;
    t.ids.key = (await call("POST", `${p}/clients/${t.ids.client}/keys`, { generate: "EdDSA" }))
      .id;
    t.ids.installation =
      (await call("POST", "/v1/installations", { project_id: t.project, scopes: ["openid"] })).id;
  } else {
    t.unitJourney = (await call("POST", "/v1/core/journeys", { name: "with units" })).id;
    t.ids.unit = (await call("POST", "/v1/core/units", { journey: t.unitJourney, title: "u" })).id;
    t.deleted.unit = await createAndDelete("/v1/core/units", {
      journey: t.unitJourney,
      title: "gone",
    });
    t.ids.journey = (await call("POST", "/v1/core/journeys", { name: "leaf" })).id;
    t.deleted.journey = await createAndDelete("/v1/core/journeys", { name: "gone" });
    const role = { name: "r", resource_type: "project", permissions: ["units.read"] };
    t.ids.role = (await call("POST", "/v1/core/roles", role)).id;
    t.deleted.role = await createAndDelete("/v1/core/roles", { ...role, name: "gone" });
  }
  return t;
}

/** Creates the owner's and another tenant's records for one route or RPC (index `i`). */
export async function buildWorld(
  stack: Stack,
  method: DescMethodUnary,
  label: string,
  scope: TokenScope = {},
): Promise<World> {
  const area = method.parent.typeName === CoreService.typeName ? "core" : "oauth";
  const [owner, foreign] = await Promise.all([
    tenantOf(stack, `${label}-own`, area, scope),
    tenantOf(stack, `${label}-other`, area, scope),
  ]);
  return {
    owner,
    foreign,
    both: await stack.token({
      ...scope,
      sub: owner.sub,
      accountId: owner.account,
      projects: [owner.project, foreign.project],
      space: owner.space,
    }),
    claimless: await stack.token({ ...scope, sub: `${label}-nobody` }),
    lostAccess: await stack.token({
      ...scope,
      sub: owner.sub,
      accountId: owner.account,
      space: owner.space,
    }),
    ownerIds: [
      ...Object.values(owner.ids),
      owner.unitJourney,
      ...Object.values(owner.deleted),
    ].filter((id): id is string => !!id),
  };
}

/** Runs `fn` over the items with at most `n` at a time. */
export async function pool<T>(
  items: T[],
  n: number,
  fn: (item: T, index: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(n, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        await fn(items[i]!, i);
      }
    }),
  );
}

/** Replaces every occurrence of `id` so two answers about different ids can be compared. */
export function withoutId(text: string, id: string): string {
  return text.split(id).join("<id>");
}
