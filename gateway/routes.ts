/**
 * The gateway's route table, read from the services' `google.api.http` annotations: one route per
 * annotated RPC, nothing written by hand. Templates use single-segment variables only
 * (`/v1/projects/{project_id}/clients/{client_id}`), which is all our API needs; a template the
 * table cannot serve stops the gateway at start-up rather than misrouting.
 *
 * @module
 */

import {
  type DescField,
  type DescMethodUnary,
  type DescService,
  getOption,
  hasOption,
} from "@bufbuild/protobuf";
import { http } from "../gen/google/api/annotations_pb.ts";

/** One HTTP route to one RPC. */
export interface Route {
  /** The HTTP method, upper case. */
  httpMethod: string;
  /** The path template, as annotated. */
  template: string;
  /** Literal segments (strings) and variables (fields of the request message). */
  segments: ReadonlyArray<string | DescField>;
  /** The service that serves the RPC. */
  service: DescService;
  /** The RPC. */
  method: DescMethodUnary;
  /** Where the JSON body goes: a field of the request, the whole request, or nowhere. */
  body: { kind: "field"; field: DescField } | { kind: "whole" } | { kind: "none" };
  /** The response field sent as the body, or undefined for the whole response message. */
  responseBody: DescField | undefined;
}

/** The result of matching a request against the table. */
export type Match =
  | { kind: "found"; route: Route; params: Map<DescField, string> }
  | { kind: "method_not_allowed"; allow: string[] }
  | { kind: "not_found" }
  | { kind: "bad_path"; segment: string };

function field(method: DescMethodUnary, name: string, where: string): DescField {
  const f = method.input.fields.find((f) => f.name === name);
  if (!f || f.fieldKind !== "scalar") {
    throw new Error(`Cannot route ${method.name}: ${where} ${name} is not a scalar request field`);
  }
  return f;
}

/** Builds the routes of the annotated RPCs of the given services. */
export function buildRoutes(services: DescService[]): Route[] {
  const routes: Route[] = [];
  for (const service of services) {
    for (const m of service.methods) {
      if (!hasOption(m, http)) continue;
      if (m.methodKind !== "unary") throw new Error(`Cannot route streaming ${m.name}`);
      const method = m as DescMethodUnary;
      const rule = getOption(method, http);
      const { case: verb, value: template } = rule.pattern;
      if (verb === undefined || verb === "custom") throw new Error(`Cannot route ${method.name}`);
      const segments = template.split("/").slice(1).map((s) => {
        const variable = /^\{([a-z_][a-z0-9_]*)\}$/.exec(s);
        if (variable) return field(method, variable[1]!, "path variable");
        if (!/^[A-Za-z0-9._~-]+$/.test(s)) throw new Error(`Cannot route template ${template}`);
        return s;
      });
      let body: Route["body"] = { kind: "none" };
      if (rule.body === "*") body = { kind: "whole" };
      else if (rule.body !== "") {
        const f = method.input.fields.find((f) => f.name === rule.body);
        if (!f || f.fieldKind !== "message") throw new Error(`Cannot route body of ${method.name}`);
        body = { kind: "field", field: f };
      }
      let responseBody: DescField | undefined;
      if (rule.responseBody !== "") {
        responseBody = method.output.fields.find((f) => f.name === rule.responseBody);
        if (!responseBody) throw new Error(`Cannot route response body of ${method.name}`);
      }
      routes.push({
        httpMethod: verb.toUpperCase(),
        template,
        segments,
        service,
        method,
        body,
        responseBody,
      });
    }
  }
  return routes;
}

/**
 * Whether a raw path is under `/v1/`, its first segment written as it is or with its unreserved
 * characters percent-encoded (`/%761/`), which RFC 3986 2.3 makes the same URI.
 */
export function isApiPath(path: string): boolean {
  return /^\/(?:v|%76)(?:1|%31)\//.test(path);
}

/** A percent-encoded segment decoded, or undefined when an escape is malformed. */
function decoded(segment: string): string | undefined {
  try {
    return decodeURIComponent(segment);
  } catch {
    return undefined;
  }
}

/**
 * Matches a method and a raw (percent-encoded) path against the routes. A literal segment matches
 * also with its characters (all unreserved) percent-encoded: `cl%69ents` is `clients` (RFC 3986
 * 2.3, 6.2.2.2; RFC 9110 4.2.3), as a variable's value is read decoded.
 */
export function matchRoute(routes: readonly Route[], httpMethod: string, path: string): Match {
  const raw = path.split("/").slice(1);
  const allow: string[] = [];
  for (const route of routes) {
    if (route.segments.length !== raw.length) continue;
    let params: Map<DescField, string> | undefined = new Map();
    for (let i = 0; i < raw.length && params; i++) {
      const segment = route.segments[i]!;
      const value = raw[i]!;
      if (typeof segment === "string") {
        if (segment !== value && (!value.includes("%") || decoded(value) !== segment)) {
          params = undefined;
        }
      } else if (value === "") {
        params = undefined;
      } else {
        let decoded: string;
        try {
          decoded = decodeURIComponent(value);
        } catch {
          return { kind: "bad_path", segment: value };
        }
        params.set(segment, decoded);
      }
    }
    if (!params) continue;
    if (route.httpMethod === httpMethod) return { kind: "found", route, params };
    allow.push(route.httpMethod);
  }
  return allow.length > 0 ? { kind: "method_not_allowed", allow } : { kind: "not_found" };
}

/**
 * Whether a route's write can be made conditional (AIP-154): its request, or the resource its
 * body is, has an `etag` field; the gateway takes it from `If-Match` (./transcoder.ts).
 */
export function conditional(route: Route): boolean {
  if (route.httpMethod !== "PATCH" && route.httpMethod !== "PUT" && route.httpMethod !== "DELETE") {
    return false;
  }
  const holder = route.body.kind === "field" ? route.body.field.message! : route.method.input;
  return holder.fields.some((f) => f.name === "etag");
}

/**
 * Where the gateway reads the current version of a route's resource, to evaluate a precondition
 * it cannot hand to the write as one etag (./transcoder.ts): the GET route of the same template;
 * for a resource that has none (a client's secret), the GET of its collection (the template
 * without its last variable), whose `data` holds every item (`has_more` is always false), found
 * by `id`. Undefined when there is neither.
 */
export interface Reader {
  /** The GET route. */
  route: Route;
  /** The write's path variable that names the item in the collection's `data`, if listed. */
  item: DescField | undefined;
}

/** The {@link Reader} of a route's resource, or undefined. */
export function readerOf(routes: readonly Route[], route: Route): Reader | undefined {
  const get = routes.find((r) => r.httpMethod === "GET" && r.template === route.template);
  if (get) return { route: get, item: undefined };
  const item = route.segments.at(-1);
  if (typeof item !== "object") return undefined;
  const parent = route.template.slice(0, route.template.lastIndexOf("/"));
  const list = routes.find((r) => r.httpMethod === "GET" && r.template === parent);
  const data = list?.method.output.fields.find((f) => f.name === "data");
  if (!list || list.responseBody || !data?.message?.fields.some((f) => f.name === "etag")) {
    return undefined;
  }
  return { route: list, item };
}
