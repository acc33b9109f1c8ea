/**
 * Checks HTTP responses against an OpenAPI 3.1 document: the operation (path template and
 * method), a documented status, the documented media type, the body against the response schema
 * (JSON Schema 2020-12, with Ajv: a field that is not described, a missing required field or a
 * wrong type is a violation), and the documented headers (required ones present, present ones
 * valid). The tests run the gateway with this on every response it sends
 * (./checked_gateway_main.ts), so the whole HTTP test suite is a check of the document.
 *
 * A request that matches no operation of the document is one the tests send on purpose outside
 * the contract (an unknown path, a wrong method): it is counted, and only its body is checked,
 * against the error schema when it is a JSON error. So is the one answer the document excepts, a
 * bare 400 (no body) from the HTTP server for a request it cannot parse.
 *
 * @module
 */

import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

/** A response that does not match the document. */
export interface Violation {
  /** `GET /v1/...`, with the operation's template when one matched. */
  request: string;
  /** The status answered. */
  status: number;
  /** What is wrong. */
  problem: string;
}

/** The outcome of checking one response. */
export type CheckOutcome = "checked" | "outside" | Violation;

// deno-lint-ignore no-explicit-any
type Json = any;

interface Operation {
  template: string;
  pattern: RegExp;
  /** The path parameters' names, in the order of the pattern's groups. */
  names: string[];
  method: string;
  /** The operation's place in the document (a JSON pointer). */
  pointer: string;
  parameters: Json[];
  requestBody: Json | undefined;
  responses: Record<string, Json>;
}

/** What the document says of a request: nothing against it, or why it refuses it. */
export type RequestVerdict = { refused: string | undefined } | "unchecked";

/** A request as the checker sees it: the body only when it was small enough to keep. */
export interface CheckedRequest {
  method: string;
  url: URL;
  headers: Headers;
  /** The body's text; undefined when it was not kept (too large, or of unknown length). */
  body: string | undefined;
}

const documentId = "openapi.json";

/** A JSON pointer's escaping of one reference token. */
const escape = (token: string) => token.replaceAll("~", "~0").replaceAll("/", "~1");

// deno-lint-ignore no-explicit-any
function explain(errors: any[] | null | undefined): string {
  return (errors ?? []).slice(0, 5).map((e) =>
    `${e.instancePath || "(root)"} ${e.message} ${JSON.stringify(e.params)}`
  ).join("; ");
}

/** Prepares a checker of responses for a document. */
export function createOpenApiChecker(document: Json): {
  check(method: string, path: string, res: {
    status: number;
    headers: Headers;
    body: string;
  }): CheckOutcome;
  checkRequest(req: CheckedRequest): RequestVerdict;
} {
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
  // The default import is the plugin function at run time; its CommonJS typings say otherwise.
  (addFormats as unknown as (ajv: Ajv2020) => void)(ajv);
  ajv.addFormat("int32", true);
  ajv.addSchema({ ...document, $id: documentId });
  const compiled = new Map<string, ValidateFunction>();
  const validator = (pointer: string): ValidateFunction => {
    let fn = compiled.get(pointer);
    if (fn === undefined) {
      fn = ajv.compile({ $ref: `${documentId}#${pointer}` });
      compiled.set(pointer, fn);
    }
    return fn;
  };

  const operations: Operation[] = [];
  for (const [template, item] of Object.entries<Json>(document.paths)) {
    const names = [...template.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]!);
    const pattern = new RegExp(
      "^" + template.replace(/[.]/g, "\\.").replace(/\{[^}]+\}/g, "([^/]+)") + "$",
    );
    for (const [method, op] of Object.entries<Json>(item)) {
      operations.push({
        template,
        pattern,
        names,
        method: method.toUpperCase(),
        pointer: `/paths/${escape(template)}/${method}`,
        parameters: op.parameters ?? [],
        requestBody: op.requestBody,
        responses: op.responses,
      });
    }
  }
  const find = (method: string, path: string) => {
    const lookup = method === "HEAD" ? "GET" : method;
    return operations.find((o) => o.method === lookup && o.pattern.test(path));
  };

  const resolve = (value: Json): Json => {
    let out = value;
    while (out && typeof out.$ref === "string") {
      const parts = out.$ref.replace(/^#\//, "").split("/").map((p: string) =>
        p.replaceAll("~1", "/").replaceAll("~0", "~")
      );
      out = parts.reduce((o: Json, p: string) => o?.[p], document);
    }
    return out;
  };

  /**
   * The schema of an error outside the document's operations: the one another method of the same
   * path documents for the status (a wrong method on an OAuth endpoint answers the RFC's error
   * body), else the API's error body.
   */
  const errorSchema = (path: string, status: number): string => {
    const sibling = operations.find((o) =>
      o.pattern.test(path) &&
      resolve(o.responses[String(status)])?.content?.["application/json"] !== undefined
    );
    return sibling
      ? `${sibling.pointer}/responses/${status}/content/application~1json/schema`
      : "/components/schemas/Error";
  };

  const checkError = (
    request: string,
    path: string,
    res: { status: number; headers: Headers; body: string },
  ) => {
    const { status, headers, body } = res;
    if (status === 400 && body === "" && !headers.has("content-type")) return "outside";
    if (status < 400) return "outside";
    let parsed: unknown;
    try {
      parsed = JSON.parse(body);
    } catch {
      return { request, status, problem: `an error body that is not JSON: ${body.slice(0, 200)}` };
    }
    const validate = validator(errorSchema(path, status));
    if (!validate(parsed)) {
      return { request, status, problem: `error body: ${explain(validate.errors)}` };
    }
    return "outside";
  };

  /** Why the document refuses a value of a parameter or body, or undefined. */
  const refuses = (pointer: string, value: unknown, what: string): string | undefined => {
    const validate = validator(pointer);
    return validate(value) ? undefined : `${what}: ${explain(validate.errors)}`;
  };

  /** A query or path value as the schema's type reads it; undefined when it cannot. */
  const typed = (schema: Json, raw: string): unknown => {
    const type = Array.isArray(schema?.type) ? schema.type[0] : schema?.type;
    if (type === "integer") return /^-?[0-9]+$/.test(raw) ? Number(raw) : undefined;
    if (type === "boolean") return raw === "true" ? true : raw === "false" ? false : undefined;
    return raw;
  };

  const verdict = (req: CheckedRequest): string | undefined => {
    const op = find(req.method, req.url.pathname)!;
    const values = op.pattern.exec(req.url.pathname)!.slice(1);
    const oauth = req.url.pathname.startsWith("/oauth2/");
    // Beside a pushed request's request_uri, the authorization endpoint reads client_id alone and
    // ignores every other parameter, however often it comes (RFC 9126 4, gateway/oauth.ts).
    const pushed = req.url.pathname === "/oauth2/authorize" &&
      req.url.searchParams.getAll("request_uri").some((v) => v !== "");
    const ignored = (name: string) => pushed && name !== "client_id" && name !== "request_uri";
    for (const [i, p] of op.parameters.entries()) {
      const parameter = resolve(p);
      const pointer = `${op.pointer}/parameters/${i}/schema`;
      const name: string = parameter.name;
      if (parameter.in === "path") {
        let value: string;
        try {
          value = decodeURIComponent(values[op.names.indexOf(name)]!);
        } catch {
          return `path ${name}: a malformed percent-encoding`;
        }
        const problem = refuses(pointer, typed(parameter.schema, value), `path ${name}`);
        if (problem) return problem;
      } else if (parameter.in === "query") {
        if (ignored(name)) continue;
        // At the OAuth endpoints a parameter without a value is as if omitted (RFC 6749 3.1),
        // so it neither counts nor repeats (gateway/oauth.ts).
        const all = req.url.searchParams.getAll(name).filter((v) => v !== "" || !oauth);
        if (all.length === 0) {
          if (parameter.required) return `query ${name} is required`;
          continue;
        }
        if (all.length > 1) return `query ${name} is repeated`;
        const value = typed(parameter.schema, all[0]!);
        if (value === undefined) return `query ${name}: not a ${parameter.schema.type}`;
        const problem = refuses(pointer, value, `query ${name}`);
        if (problem) return problem;
      } else if (parameter.in === "header") {
        const value = req.headers.get(name);
        if (value === null) {
          if (parameter.required) return `header ${name} is required`;
          continue;
        }
        const problem = refuses(pointer, value, `header ${name}`);
        if (problem) return problem;
      }
    }
    const declared = new Set(
      op.parameters.map(resolve).filter((p: Json) => p.in === "query").map((p: Json) => p.name),
    );
    for (const name of req.url.searchParams.keys()) {
      if (!declared.has(name)) return `query ${name} is not described`;
    }
    const body = resolve(op.requestBody);
    if (body === undefined || req.body === undefined) return undefined;
    if (req.body === "") return body.required ? "the body is required" : undefined;
    const type = (req.headers.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase();
    if (!(type in body.content)) return `a ${type || "body without a type"}, not described`;
    const pointer = `${op.pointer}/requestBody/content/${escape(type)}/schema`;
    if (type === "application/json") {
      let parsed: unknown;
      try {
        parsed = JSON.parse(req.body);
      } catch {
        return "the body is not JSON";
      }
      return refuses(pointer, parsed, "body");
    }
    if (type === "application/x-www-form-urlencoded") {
      // A field the form describes may come once, or as often as it likes when it is an array
      // (OpenAPI's default for a form: each item a field of its own); one it does not describe
      // is ignored however often it comes (RFC 6749 3.2, gateway/oauth.ts).
      const described = resolve(body.content[type].schema)?.properties ?? {};
      const form: Record<string, string | string[]> = {};
      for (const [name, value] of new URLSearchParams(req.body)) {
        if (value === "") continue; // omitted, as RFC 6749 3.2 reads it (gateway/oauth.ts too)
        const field = Object.hasOwn(described, name) ? resolve(described[name]) : undefined;
        if (field?.type === "array") {
          form[name] = [...(form[name] ?? []), value];
          continue;
        }
        if (name in form && field !== undefined) return `form ${name} is repeated`;
        form[name] = value;
      }
      return refuses(pointer, form, "form");
    }
    return undefined;
  };

  return {
    checkRequest(req) {
      if (find(req.method, req.url.pathname) === undefined) return "unchecked";
      return { refused: verdict(req) };
    },

    check(method, path, res) {
      const op = find(method, path);
      if (op === undefined) {
        return checkError(`${method} ${path}`, path, res);
      }
      // The HTTP server's bare 400 for a request it cannot parse never reaches the API.
      if (res.status === 400 && res.body === "" && !res.headers.has("content-type")) {
        return "outside";
      }
      const request = `${method} ${op.template}`;
      const documented = op.responses[String(res.status)] ?? op.responses.default;
      if (documented === undefined) {
        return { request, status: res.status, problem: `undocumented status ${res.status}` };
      }
      const response = resolve(documented);
      for (const [name, header] of Object.entries<Json>(response.headers ?? {})) {
        const value = res.headers.get(name);
        if (value === null) {
          if (header.required) {
            return { request, status: res.status, problem: `missing header ${name}` };
          }
          continue;
        }
        const schema = header.schema ?? {};
        const ok = ajv.validate(schema, value);
        if (!ok) {
          return {
            request,
            status: res.status,
            problem: `header ${name}: ${value}: ${explain(ajv.errors)}`,
          };
        }
      }
      const content = response.content as Record<string, Json> | undefined;
      if (content === undefined) {
        if (res.body !== "") {
          return { request, status: res.status, problem: "a body where none is documented" };
        }
        return "checked";
      }
      if (method === "HEAD") return "checked";
      const type = (res.headers.get("content-type") ?? "").split(";")[0]!.trim();
      const media = content[type];
      if (media === undefined) {
        return {
          request,
          status: res.status,
          problem: `content-type ${type || "(none)"}, documented: ${Object.keys(content)}`,
        };
      }
      if (type !== "application/json") return "checked";
      let parsed: unknown;
      try {
        parsed = JSON.parse(res.body);
      } catch {
        return { request, status: res.status, problem: "a JSON body that does not parse" };
      }
      // The schema's place in the document, whether it is inline or a $ref.
      const base = typeof documented.$ref === "string"
        ? documented.$ref.replace(/^#/, "")
        : `${op.pointer}/responses/${res.status in op.responses ? res.status : "default"}`;
      const pointer = `${base}/content/${type.replace("/", "~1")}/schema`;
      const validate = validator(pointer);
      if (!validate(parsed)) {
        return {
          request,
          status: res.status,
          problem: `body: ${explain(validate.errors)}: ${res.body.slice(0, 300)}`,
        };
      }
      return "checked";
    },
  };
}
