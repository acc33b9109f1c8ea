/**
 * The OpenAPI 3.1 description of the gateway's HTTP API, built from the same descriptors that
 * drive it: the routes are ./routes.ts's table (the services' `google.api.http` annotations), the
 * schemas follow ./json_codec.ts's JSON dialect, statuses and the error body are ./http_errors.ts's
 * and ./transcoder.ts's, and the descriptions are the proto comments. `tools/protoc_gen_openapi.ts`
 * runs {@link describeApi} as a protoc plugin under `buf generate` (the comments only exist there),
 * and the gateway serves the committed result, `gen/openapi/openapi.json`, with {@link serveOpenApi}.
 *
 * How the dialect becomes JSON Schema (2020-12, OpenAPI 3.1's dialect):
 *
 * - a response record lists every field as required (the gateway writes every field; members of a
 *   real `oneof` only when set), `null` allowed for explicit-presence fields and singular messages,
 *   and no other key (`additionalProperties: false`);
 * - a request body leaves out output-only fields (sending one is a 400), requires the fields marked
 *   REQUIRED (PATCH bodies require nothing and also leave out IMMUTABLE fields: the keys present are
 *   the update mask), and refuses unknown keys;
 * - enums are the lower-case value names without the shared prefix, never the zero value;
 *   `google.protobuf.Timestamp` is an RFC 3339 `date-time`; 64-bit integers are numbers while safe
 *   and decimal strings beyond.
 *
 * @module
 */

import {
  type DescEnum,
  type DescField,
  type DescMessage,
  type DescMethodUnary,
  type DescService,
  getOption,
  ScalarType,
} from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import { Code } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { field_behavior, FieldBehavior } from "../gen/google/api/field_behavior_pb.ts";
import { maxMessageLength, truncationMark } from "../lib/platform/mod.ts";
import { maxConditionLength } from "./conditions.ts";
import { oauthOpenApiComponents, oauthOpenApiPaths } from "./oauth_openapi.ts";
import { enumPlan } from "./json_codec.ts";
import { buildRoutes, type Route } from "./routes.ts";

/** A JSON Schema (2020-12) or OpenAPI object: plain JSON. */
type Json = Record<string, unknown>;

/** What {@link describeApi} needs besides the services. */
export interface DescribeOptions {
  /** The API's version (`info.version`). */
  version: string;
  /** The leading comment of a descriptor, as written in its .proto file (empty when none). */
  comments(desc: DescService | DescMethodUnary | DescMessage | DescField | DescEnum): string;
  /**
   * The limits the services enforce on a field of a request (`maxLength`, `pattern`,
   * `maxItems`, `items`...), shown on request bodies and parameters; `false` for a field that a
   * create or replace refuses although its behaviour allows it (a client's `status`).
   */
  limits?(field: DescField, use: "input" | "patch" | "parameter"): Json | false;
}

/** The Connect error codes (the `code` of the error body). */
const errorCodes = Object.values(Code).filter((c) => typeof c === "number").map((c) =>
  codeToString(c as Code)
);

/** The error statuses, each a shared response: when the gateway answers it. */
const errorStatuses: Record<string, { name: string; description: string; retryAfter?: true }> = {
  "400": {
    name: "BadRequest",
    description: "Invalid input: one detail per bad field, named relative to the JSON body " +
      "(also unknown fields, output-only fields, malformed JSON, unknown or repeated query " +
      "parameters, a body on an operation that takes none).",
  },
  "401": {
    name: "Unauthenticated",
    description: "The bearer token is missing, malformed, badly signed or expired.",
  },
  "403": {
    name: "PermissionDenied",
    description: "The token does not cover the project (its `projects` claim), or the project " +
      "accepts consent only from its administrators.",
  },
  "404": {
    name: "NotFound",
    description: "No such resource, or one the caller may not see (another account's " +
      "installation, another space's record); also malformed ids.",
  },
  "409": {
    name: "Conflict",
    description: "The resource's state forbids the change (`failed_precondition`, " +
      "`already_exists`), or a request with the same `Idempotency-Key` is still running " +
      "(`aborted`: retry it), or completed but its response was lost and the record cannot " +
      "answer it again (`failed_precondition`, reason `IDEMPOTENCY_OUTCOME_LOST`: read the " +
      "record instead).",
  },
  "412": {
    name: "PreconditionFailed",
    description: "A precondition is false (`aborted`): no tag of `If-Match` (or the body's " +
      "`etag`) is the resource's current version, or there is none (a config not created yet); " +
      "or `If-None-Match` names the current version, or is `*` and the resource exists. Nothing " +
      "was changed; read it again and retry.",
  },
  "413": { name: "PayloadTooLarge", description: "The request body exceeds 1 MiB." },
  "415": {
    name: "UnsupportedMediaType",
    description: "The request body is not `application/json` (UTF-8: a `charset` other " +
      "than `utf-8` is refused), or is content-coded " +
      "(`Content-Encoding` other than `identity`: the answer's `Accept-Encoding: identity` " +
      "says so).",
  },
  "422": {
    name: "IdempotencyKeyReused",
    description: "The `Idempotency-Key` was used before with a different request.",
  },
  "429": {
    name: "TooManyRequests",
    description: "Over the caller's rate limit; retry after `Retry-After` seconds.",
    retryAfter: true,
  },
  "500": { name: "Internal", description: "An unexpected failure of the server." },
  "503": {
    name: "Unavailable",
    description: "A backend cannot be reached, or a process is at its memory budget; retry " +
      "after `Retry-After` seconds (a POST with the same `Idempotency-Key`: a connection that " +
      "broke during the call may have broken after the request ran).",
    retryAfter: true,
  },
  "504": {
    name: "GatewayTimeout",
    description: "A backend missed the deadline; the request may have run (retry a POST with " +
      "the same `Idempotency-Key` to learn its outcome).",
  },
};

/** The error statuses an operation can answer, by its HTTP method. */
function errorsOf(route: Route): string[] {
  // Every operation evaluates If-Match and If-None-Match (412).
  const statuses = ["400", "401", "403", "404", "412", "413", "415", "429", "500", "503", "504"];
  if (route.httpMethod !== "GET") statuses.push("409");
  if (route.httpMethod === "POST") statuses.push("422");
  return statuses.sort();
}

/**
 * The `If-Match` and `If-None-Match` parameters of an operation (RFC 9110 13.1.1, 13.1.2), as the
 * gateway evaluates them (./transcoder.ts).
 */
function conditionHeaders(route: Route): Json[] {
  const schema = { type: "string", minLength: 1, maxLength: maxConditionLength };
  const tags = '`*` or a list of entity tags (`ETag` values, as `"1234", "1240"`)';
  const [ifMatch, ifNoneMatch] = route.httpMethod === "POST"
    ? [
      "A collection has no etag: `*` holds (it exists), any list of tags is 412.",
      "A collection has no etag: any list of tags holds; `*` is 412 (it exists).",
    ]
    : route.httpMethod === "GET"
    ? [
      `${tags}: answer only if one of the tags is the current version (strong comparison: a ` +
      "weak tag never matches; a list has none), else 412. `*`: any current version.",
      `${tags}: 304 with no body when one of the tags is the current version (weak ` +
      "comparison: `W/` is ignored), or for `*`. A malformed value (one over " +
      `${maxConditionLength} characters too) is ignored.`,
    ]
    : [
      `${tags}: change only if one of the tags is the current version (strong comparison: ` +
      "a weak tag never matches), else 412 and nothing changes; of two writes with the same " +
      "tag one wins, the other gets 412. `*`: any current version (a config PATCH on a project " +
      "without one is 412). It overrides a body's `etag`. Without it (and without a body " +
      "`etag`) the write is unconditional.",
      `${tags}: change only if none of the tags is the current version (weak comparison), ` +
      "else 412 and nothing changes. `*`: only if the resource does not exist: on a project " +
      "without a config, a PATCH creates it only if no other request does first (412 then); " +
      "on anything else it is 412 (or 404 when absent, as without it). A malformed value " +
      "is 400.",
    ];
  return [
    {
      name: "If-Match",
      in: "header",
      required: false,
      description: `${ifMatch} A malformed value is 400.`,
      schema,
    },
    {
      name: "If-None-Match",
      in: "header",
      required: false,
      description: ifNoneMatch,
      // A GET ignores a malformed one, so it takes any value.
      schema: route.httpMethod === "GET" ? { type: "string" } : schema,
    },
  ];
}

/** Whether a route answers one resource, which then carries an `etag` (and the `ETag` header). */
function versioned(route: Route): boolean {
  return route.responseBody?.message?.fields.some((f) => f.name === "etag") ?? false;
}

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });

/** Collapses a comment into the text of a description (paragraphs kept). */
function text(comment: string): string {
  return comment.split(/\n\s*\n/).map((p) => p.replace(/\s*\n\s*/g, " ").trim())
    .filter((p) => p !== "").join("\n\n");
}

/** The first sentence of a description, for an operation's summary. */
function firstSentence(description: string): string {
  const match = /^(.+?[.;:])(\s|$)/s.exec(description);
  return (match ? match[1]! : description).replace(/[.;:]$/, "");
}

/** The JSON name of every non-zero value of an enum (./json_codec.ts's). */
function enumNames(desc: DescEnum): string[] {
  return [...enumPlan(desc).byName.keys()];
}

const int32 = { type: "integer", format: "int32", minimum: -(2 ** 31), maximum: 2 ** 31 - 1 };
const uint32 = { type: "integer", format: "int32", minimum: 0, maximum: 2 ** 32 - 1 };
const int64 = {
  description: "A number while it is a safe integer, a decimal string beyond.",
  oneOf: [{ type: "integer" }, { type: "string", pattern: "^-?[0-9]+$" }],
};

function scalarSchema(scalar: ScalarType): Json {
  switch (scalar) {
    case ScalarType.STRING:
      return { type: "string" };
    case ScalarType.BOOL:
      return { type: "boolean" };
    case ScalarType.BYTES:
      return { type: "string", contentEncoding: "base64" };
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return { type: "number" };
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return { ...int32 };
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return { ...uint32 };
    default:
      return { ...int64 };
  }
}

/** How a body of a message is used: answered, or sent to create/replace, or to patch. */
type Use = "response" | "input" | "patch";

const wellKnown: Record<string, Json> = {
  "google.protobuf.Timestamp": {
    type: "string",
    format: "date-time",
    description: "RFC 3339, written in UTC with milliseconds.",
  },
  "google.protobuf.Duration": { type: "string", pattern: "^-?[0-9]+(\\.[0-9]{1,9})?s$" },
  "google.protobuf.FieldMask": { type: "string" },
  "google.protobuf.Struct": { type: "object" },
  "google.protobuf.Value": {},
  "google.protobuf.ListValue": { type: "array" },
  "google.protobuf.StringValue": { type: "string" },
  "google.protobuf.BoolValue": { type: "boolean" },
  "google.protobuf.Int32Value": int32,
  "google.protobuf.UInt32Value": uint32,
  "google.protobuf.Int64Value": int64,
  "google.protobuf.UInt64Value": int64,
  "google.protobuf.DoubleValue": { type: "number" },
  "google.protobuf.FloatValue": { type: "number" },
  "google.protobuf.BytesValue": { type: "string", contentEncoding: "base64" },
};

/** Adds limits to a field's schema (those of a list's items to its `items`). */
function withLimits(schema: Json, limits: Json): Json {
  const { items, ...rest } = limits;
  const out: Json = { ...schema, ...rest };
  if (items !== undefined && schema.items !== undefined) {
    out.items = { ...(schema.items as Json), ...(items as Json) };
  }
  return out;
}

/** Allows `null` besides what a schema allows. */
function orNull(schema: Json): Json {
  if (typeof schema.type === "string") {
    const out: Json = { ...schema, type: [schema.type, "null"] };
    if (Array.isArray(schema.enum)) out.enum = [...schema.enum, null];
    return out;
  }
  const { description, ...rest } = schema;
  // A schema that allows any value (google.protobuf.Value) allows null already: a `oneOf` with
  // null would match null twice, and so refuse it.
  if (Object.keys(rest).length === 0) return schema;
  return {
    ...(description === undefined ? {} : { description }),
    oneOf: [...("$ref" in rest ? [rest] : (rest.oneOf as Json[] | undefined) ?? [rest]), {
      type: "null",
    }],
  };
}

/** Builds the document's schemas, one per message and use, named on first need. */
class Schemas {
  readonly components: Record<string, Json> = {};
  readonly #names = new Map<string, string>();

  constructor(
    private readonly comments: DescribeOptions["comments"],
    private readonly limits: Required<DescribeOptions>["limits"],
  ) {}

  /** A reference to the schema of a message as used for `use`. */
  message(desc: DescMessage, use: Use): Json {
    const known = wellKnown[desc.typeName];
    if (known !== undefined) return { ...known };
    const key = `${desc.typeName} ${use}`;
    let name = this.#names.get(key);
    if (name === undefined) {
      name = desc.name + (use === "input" ? "Input" : use === "patch" ? "Patch" : "");
      // Two packages' messages of one name: the second is named by its full name.
      if (name in this.components) {
        name = `${desc.typeName.replaceAll(".", "_")}${name.slice(desc.name.length)}`;
      }
      this.#names.set(key, name);
      this.components[name] = {}; // reserved before the fields, for recursive messages
      this.components[name] = this.object(desc, use);
    }
    return ref(name);
  }

  /** The object schema of a message: its fields, less those that do not appear in this use. */
  object(desc: DescMessage, use: Use, leaveOut: ReadonlySet<string> = new Set()): Json {
    const properties: Record<string, Json> = {};
    const required: string[] = [];
    for (const field of desc.fields) {
      if (leaveOut.has(field.name)) continue;
      const behaviors = getOption(field, field_behavior);
      const outputOnly = behaviors.includes(FieldBehavior.OUTPUT_ONLY);
      if (use !== "response" && outputOnly) continue;
      if (use === "patch" && behaviors.includes(FieldBehavior.IMMUTABLE)) continue;
      if (use !== "response" && this.limits(field, use) === false) continue;
      properties[field.name] = this.field(field, use);
      if (
        use === "response" ? field.oneof === undefined : use === "input" &&
          behaviors.includes(FieldBehavior.REQUIRED)
      ) {
        required.push(field.name);
      }
    }
    const description = text(this.comments(desc));
    return {
      type: "object",
      ...(description === "" ? {} : { description }),
      properties,
      ...(required.length === 0 ? {} : { required }),
      additionalProperties: false,
    };
  }

  /** The schema of one field's value. */
  field(field: DescField, use: Use): Json {
    let schema: Json;
    switch (field.fieldKind) {
      case "scalar":
        schema = scalarSchema(field.scalar);
        break;
      case "enum":
        schema = { type: "string", enum: enumNames(field.enum) };
        break;
      case "message":
        schema = this.message(field.message, use);
        break;
      case "list":
        schema = {
          type: "array",
          items: field.listKind === "scalar"
            ? scalarSchema(field.scalar)
            : field.listKind === "enum"
            ? { type: "string", enum: enumNames(field.enum) }
            : this.message(field.message, use),
        };
        break;
      case "map":
        schema = {
          type: "object",
          additionalProperties: field.mapKind === "scalar"
            ? scalarSchema(field.scalar)
            : field.mapKind === "enum"
            ? { type: "string", enum: enumNames(field.enum) }
            : this.message(field.message, use),
        };
        break;
    }
    // A member of a real oneof is left out when unset, never null.
    const nullable = field.oneof === undefined && (field.fieldKind === "message" ||
      ((field.fieldKind === "scalar" || field.fieldKind === "enum") &&
        field.presence === FeatureSet_FieldPresence.EXPLICIT));
    if (use !== "response" && field.fieldKind !== "message") {
      schema = withLimits(schema, this.limits(field, use) || {});
    }
    if (nullable) schema = orNull(schema);
    const description = text(this.comments(field));
    if (description !== "") {
      // A $ref takes its description from beside it (JSON Schema 2020-12 allows siblings).
      schema = { ...schema, description };
    }
    if (getOption(field, field_behavior).includes(FieldBehavior.OUTPUT_ONLY)) {
      schema = { ...schema, readOnly: true };
    }
    return schema;
  }
}

/** The header parameters and response headers every operation shares. */
const requestIdHeader = {
  description:
    "The request's id: the caller's `X-Request-Id` when it is a safe token, else a new " +
    "one. It is in the gateway's and the services' logs.",
  schema: { type: "string" },
};

function errorResponses(): Record<string, Json> {
  const out: Record<string, Json> = {};
  for (const [status, { name, description, retryAfter }] of Object.entries(errorStatuses)) {
    out[name] = {
      description,
      headers: {
        "X-Request-Id": requestIdHeader,
        ...(retryAfter
          ? {
            "Retry-After": {
              description: "Seconds to wait before retrying.",
              required: true,
              schema: { type: "string", pattern: "^[0-9]+$" },
            },
          }
          : {}),
        ...(status === "415"
          ? {
            "Accept-Encoding": {
              description: "`identity` when the body was refused for its `Content-Encoding`.",
              schema: { type: "string", enum: ["identity"] },
            },
          }
          : {}),
      },
      content: {
        "application/json": {
          schema: ref("Error"),
          example: {
            error: {
              code: status === "400" ? "invalid_argument" : errorExampleCode[status],
              message: status === "400" ? "Invalid client" : description.split(/[;:(]/)[0]!,
              details: status === "400"
                ? [{
                  field: "redirect_uris[0]",
                  description: "must use https, or http on a loopback host",
                }]
                : [],
            },
          },
        },
      },
    };
  }
  return out;
}

const errorExampleCode: Record<string, string> = {
  "401": "unauthenticated",
  "403": "permission_denied",
  "404": "not_found",
  "409": "failed_precondition",
  "412": "aborted",
  "413": "resource_exhausted",
  "415": "invalid_argument",
  "422": "invalid_argument",
  "429": "resource_exhausted",
  "500": "internal",
  "503": "unavailable",
  "504": "deadline_exceeded",
};

const errorSchema: Json = {
  type: "object",
  description: "Every error of the API (every 4xx and 5xx but a bare 400 from the HTTP server " +
    "for a request it cannot parse).",
  properties: {
    error: {
      type: "object",
      properties: {
        code: {
          type: "string",
          enum: errorCodes,
          description: "The Connect (gRPC) code name of the failure.",
        },
        message: {
          type: "string",
          maxLength: maxMessageLength + truncationMark.length,
          description:
            `What went wrong, for a person to read; a longer one is cut at ${maxMessageLength} characters and ends with "${truncationMark}".`,
        },
        details: {
          type: "array",
          description: "One entry per bad field (`invalid_argument`); empty otherwise.",
          items: {
            type: "object",
            properties: {
              field: {
                type: "string",
                description: "The field's path relative to the JSON body, e.g. " +
                  "`redirect_uris[0]`; empty for the body as a whole.",
              },
              description: { type: "string", description: "What is wrong with it." },
            },
            required: ["field", "description"],
            additionalProperties: false,
          },
        },
      },
      required: ["code", "message", "details"],
      additionalProperties: false,
    },
  },
  required: ["error"],
  additionalProperties: false,
};

/** Builds the operation of one route. */
function operation(
  route: Route,
  schemas: Schemas,
  options: DescribeOptions,
  operationId: string,
): Json {
  const limits = (field: DescField) => options.limits?.(field, "parameter") || {};
  const description = text(options.comments(route.method));
  const input = route.method.input;
  const parameters: Json[] = [];
  const inPath = new Set<string>();
  for (const segment of route.segments) {
    if (typeof segment === "string") continue;
    inPath.add(segment.name);
    parameters.push({
      name: segment.name,
      in: "path",
      required: true,
      description: text(options.comments(segment)),
      schema: withLimits(
        segment.fieldKind === "scalar" && segment.scalar !== ScalarType.STRING
          ? scalarSchema(segment.scalar)
          : { type: "string", minLength: 1 },
        limits(segment),
      ),
    });
  }
  if (route.body.kind === "none") {
    for (const field of input.fields) {
      // A delete's `etag` is the `If-Match` header on /v1, not a query parameter.
      if (inPath.has(field.name) || field.name === "etag") continue;
      if (field.oneof !== undefined) continue;
      let schema: Json;
      if (field.fieldKind === "enum") {
        schema = withLimits({ type: "string", enum: enumNames(field.enum) }, limits(field));
      } else if (field.fieldKind === "scalar") {
        schema = withLimits(scalarSchema(field.scalar), limits(field));
      } else if (
        field.fieldKind === "message" && field.message.typeName === "google.protobuf.Timestamp"
      ) {
        schema = { type: "string", format: "date-time" };
      } else continue;
      parameters.push({
        name: field.name,
        in: "query",
        required: getOption(field, field_behavior).includes(FieldBehavior.REQUIRED),
        description: text(options.comments(field)),
        schema,
      });
    }
  }
  if (route.httpMethod === "POST") {
    parameters.push({
      name: "Idempotency-Key",
      in: "header",
      required: false,
      description: "Makes a retry safe: the same key with the same request within 24 hours " +
        "replays the first outcome (with `Idempotent-Replayed: true`; one whose response was " +
        "lost after the create committed is answered from the record as it is now, without a " +
        "secret or private key, or is 409 `failed_precondition` when the record is gone); with " +
        "another request it is 422; while the first request runs, 409 `aborted`. Sent once, " +
        "1..255 printable ASCII " +
        'characters other than the comma, bare (`k`) or as an RFC 8941 string (`"k"`, the ' +
        "same key).",
      schema: {
        type: "string",
        anyOf: [
          // Bare: 1..255 characters, not starting with a quote.
          {
            maxLength: 255,
            pattern: "^[\\x20\\x21\\x23-\\x2b\\x2d-\\x7e][\\x20-\\x2b\\x2d-\\x7e]*$",
          },
          // An sf-string of 1..255 characters, `"` and `\` escaped.
          { pattern: '^"(?:[\\x20\\x21\\x23-\\x2b\\x2d-\\x5b\\x5d-\\x7e]|\\\\["\\\\]){1,255}"$' },
        ],
      },
    });
  }

  parameters.push(...conditionHeaders(route));

  const op: Json = {
    operationId,
    tags: [route.service.name],
    summary: firstSentence(description),
    description,
  };
  if (parameters.length > 0) op.parameters = parameters;
  if (route.body.kind !== "none") {
    const use: Use = route.httpMethod === "PATCH" ? "patch" : "input";
    const schema = route.body.kind === "field"
      ? schemas.message(route.body.field.message!, use)
      : schemas.object(input, use, inPath);
    op.requestBody = {
      required: route.body.kind === "field" && route.httpMethod !== "PATCH",
      content: { "application/json": { schema } },
    };
  }

  const headers: Json = { "X-Request-Id": requestIdHeader };
  if (route.httpMethod === "POST") {
    headers.Location = {
      description: "The path of what was created: this collection's path and the new id.",
      schema: { type: "string" },
    };
    headers["Idempotent-Replayed"] = {
      description: "`true` when this is the stored outcome of an earlier request with the same " +
        "`Idempotency-Key`.",
      schema: { type: "string", enum: ["true"] },
    };
  }
  if (versioned(route)) {
    headers.ETag = {
      description: "The resource's version, its `etag` quoted: send it as `If-Match` to change " +
        "it safely, or as `If-None-Match` to read it only if it changed.",
      schema: { type: "string", pattern: '^"[\\x21\\x23-\\x7e]*"$' },
    };
  }
  if (route.responseBody?.message?.fields.some((f) => f.proto.options?.debugRedact)) {
    headers["Cache-Control"] = {
      description: "`no-store` on an answer that holds a credential (a secret's plaintext, a " +
        "generated private key): no cache keeps it.",
      schema: { type: "string", enum: ["no-store"] },
    };
  }
  const responses: Record<string, Json> = {};
  if (route.httpMethod === "GET") {
    responses["304"] = versioned(route)
      ? {
        description: "Not modified: the resource is still at an `If-None-Match` version.",
        headers: { "X-Request-Id": requestIdHeader, ETag: headers.ETag },
      }
      : {
        description: "Not modified: `If-None-Match: *` (the list exists; it has no etag).",
        headers: { "X-Request-Id": requestIdHeader },
      };
  }
  if (route.httpMethod === "DELETE") {
    responses["204"] = { description: "Done; no body.", headers };
  } else {
    const schema = route.responseBody !== undefined
      ? schemas.field(route.responseBody, "response")
      : schemas.message(route.method.output, "response");
    const content = { "application/json": { schema: withoutNull(schema) } };
    responses[route.httpMethod === "POST" ? "201" : "200"] = {
      description: route.httpMethod === "POST" ? "Created." : "OK.",
      headers,
      content,
    };
    // A POST whose answer says whether it created (a consent) is 200 when it updated.
    if (
      route.httpMethod === "POST" && route.method.output.fields.some((f) => f.name === "created")
    ) {
      const { Location: _, ...updated } = headers;
      responses["200"] = { description: "Updated what was there.", headers: updated, content };
    }
  }
  for (const status of errorsOf(route)) {
    responses[status] = { $ref: `#/components/responses/${errorStatuses[status]!.name}` };
  }
  op.responses = responses;
  return op;
}

/** A response body is never `null`: the nullable wrapper of a message field taken off. */
function withoutNull(schema: Json): Json {
  if (Array.isArray(schema.oneOf)) {
    const rest = (schema.oneOf as Json[]).filter((s) => s.type !== "null");
    if (rest.length === 1) return rest[0]!;
  }
  return schema;
}

/** The endpoints every gateway answers without a token. */
function operationalPaths(): Record<string, Json> {
  const status = (value: string, description: string): Json => ({
    description,
    content: {
      "application/json": {
        schema: {
          type: "object",
          properties: { status: { type: "string", enum: [value] } },
          required: ["status"],
          additionalProperties: false,
        },
      },
    },
  });
  return {
    "/healthz": {
      get: {
        operationId: "healthz",
        tags: ["Operations"],
        summary: "Liveness",
        description: "200 while the gateway process runs.",
        security: [],
        responses: { "200": status("ok", "Alive.") },
      },
    },
    "/readyz": {
      get: {
        operationId: "readyz",
        tags: ["Operations"],
        summary: "Readiness",
        description: "200 when every backend service answers its health check, 503 otherwise " +
          "(and while the gateway drains before it stops).",
        security: [],
        responses: {
          "200": status("ready", "Every backend is serving."),
          "503": status("not ready", "A backend does not answer, or the gateway is draining."),
        },
      },
    },
    "/metrics": {
      get: {
        operationId: "metrics",
        tags: ["Operations"],
        summary: "Metrics",
        description: "Prometheus metrics of this gateway replica (requests by route and status, " +
          "latency, in-flight requests, the memory budget).",
        security: [],
        responses: {
          "200": {
            description: "The Prometheus text format.",
            content: { "text/plain": { schema: { type: "string" } } },
          },
        },
      },
    },
    "/openapi.json": {
      get: {
        operationId: "openapi",
        tags: ["Operations"],
        summary: "This document",
        description: "The OpenAPI 3.1 description of the API, generated from its Protobuf " +
          "definitions. Cacheable: it has an `ETag` and answers `If-None-Match` with 304.",
        security: [],
        responses: {
          "200": {
            description: "The document.",
            headers: { ETag: { schema: { type: "string" } } },
            content: { "application/json": { schema: { type: "object" } } },
          },
          "304": { description: "Not modified (the `If-None-Match` matched)." },
        },
      },
    },
    "/docs": {
      get: {
        operationId: "docs",
        tags: ["Operations"],
        summary: "API reference page",
        description: "A human-readable reference rendered from this document; it loads nothing " +
          "from another origin.",
        security: [],
        responses: {
          "200": {
            description: "The page.",
            content: { "text/html": { schema: { type: "string" } } },
          },
          "304": { description: "Not modified (the `If-None-Match` matched)." },
        },
      },
    },
  };
}

/** Builds the OpenAPI 3.1 document of the annotated RPCs of the given services. */
export function describeApi(services: DescService[], options: DescribeOptions): Json {
  const schemas = new Schemas(options.comments, options.limits ?? (() => ({})));
  // In one order whatever the caller's, so that a name two packages share (each service's
  // ListEventsResponse) goes to the same message in every build of the document.
  const routes = buildRoutes([...services].sort((a, b) => a.typeName < b.typeName ? -1 : 1));
  // An RPC name two services share (ListEvents) is told apart by its service in operationId.
  const seen = new Map<string, number>();
  for (const r of routes) seen.set(r.method.name, (seen.get(r.method.name) ?? 0) + 1);
  const paths: Record<string, Json> = {};
  for (const route of routes) {
    // A template's variables are already OpenAPI's `{name}`.
    const path = (paths[route.template] ??= {});
    const name = seen.get(route.method.name)! > 1
      ? route.service.name.replace(/Service$/, "") + route.method.name
      : route.method.name;
    path[route.httpMethod.toLowerCase()] = operation(
      route,
      schemas,
      options,
      name.charAt(0).toLowerCase() + name.slice(1),
    );
  }
  const tags: Json[] = services
    .filter((s) => routes.some((r) => r.service === s))
    .map((s) => ({
      name: s.name,
      // A display name for renderers that read it (Redoc's menu; Swagger UI, which /docs uses,
      // shows the tag's name): `OAuthRegistryService` is "OAuth Registry".
      "x-displayName": s.name.replace(/Service$/, "").replace(/([a-z])([A-Z])/g, "$1 $2"),
      description: text(options.comments(s)),
    }));
  tags.push({
    name: "OAuth 2",
    description: "The authorization server (RFC 6749, 7636, 7009, 7662, 8414, 8693, 9207): " +
      "what stock OAuth clients use. Form-encoded requests, the RFCs' JSON answers.",
  }, {
    name: "Operations",
    description: "Health, readiness, metrics and this description; no token needed.",
  });
  Object.assign(paths, oauthOpenApiPaths(), operationalPaths());
  return {
    openapi: "3.1.0",
    info: {
      title: "OAuth client registry",
      version: options.version,
      description: "OAuth client registration, consent-screen branding and installations per " +
        "project, and a small core work area (roles, journeys, units), as JSON over HTTP. " +
        "Generated from the Protobuf definitions of the services; every `/v1` operation is one " +
        "RPC (also callable over gRPC and Connect).\n\n" +
        "Conventions: fields are snake_case and every field is present (`null` when unset; " +
        "the one exception, a client secret's `secret`, is only in the response that creates " +
        "it); " +
        "timestamps are RFC 3339 UTC with milliseconds; ids are TypeIDs (a prefix and 26 " +
        "base32 characters) that sort by creation time; lists are oldest first, `limit` " +
        "1..100 (default 20), `after` the last `id` of the previous page, `has_more` true iff " +
        'more follow. Every error has the body `{"error": {"code", "message", ' +
        '"details"}}`. Every `GET` also answers `HEAD`: the same status and headers ' +
        "(`ETag`, `Content-Type`, `Content-Length`), no body. Request bodies are " +
        "`application/json` without a `Content-Encoding`.",
    },
    servers: [{ url: "/", description: "The gateway that serves this document." }],
    security: [{ bearer: [] }],
    tags,
    paths,
    components: {
      securitySchemes: {
        bearer: {
          type: "http",
          scheme: "bearer",
          bearerFormat: "JWT",
          description: "A platform token (JWT) with `sub`, `exp`, and `projects` (project ids " +
            'the caller administers, or `"*"`); `account_id` defaults to `sub`; the core ' +
            "area also needs `space`.",
        },
        ...oauthOpenApiComponents.securitySchemes,
      },
      schemas: {
        Error: errorSchema,
        ...oauthOpenApiComponents.schemas,
        ...sortedKeys(schemas.components),
      },
      responses: errorResponses(),
    },
  };
}

function sortedKeys<T>(record: Record<string, T>): Record<string, T> {
  return Object.fromEntries(Object.entries(record).sort(([a], [b]) => a.localeCompare(b)));
}

/**
 * Serves a document at `GET /openapi.json` (and HEAD): compact JSON with a strong `ETag` (its
 * SHA-256), 304 for a matching `If-None-Match`, cacheable for a minute then revalidated. Returns
 * undefined for other paths and methods.
 */
export function serveOpenApi(document: unknown): (req: Request, url: URL) => Promise<
  Response | undefined
> {
  const body = new TextEncoder().encode(JSON.stringify(document));
  const etag = crypto.subtle.digest("SHA-256", body).then((hash) =>
    `"${
      Array.from(new Uint8Array(hash).slice(0, 16), (b) => b.toString(16).padStart(2, "0")).join("")
    }"`
  );
  return async (req, url) => {
    if (url.pathname !== "/openapi.json" || (req.method !== "GET" && req.method !== "HEAD")) {
      return undefined;
    }
    const tag = await etag;
    const headers = {
      "content-type": "application/json",
      etag: tag,
      "cache-control": "public, max-age=60",
      "access-control-allow-origin": "*",
    };
    const match = req.headers.get("if-none-match");
    if (match !== null && match.split(",").some((t) => t.trim() === tag || t.trim() === "*")) {
      return new Response(null, { status: 304, headers });
    }
    // A HEAD's Content-Length is the GET's (RFC 9110 9.3.2), not its own empty body's.
    return new Response(req.method === "HEAD" ? null : body, {
      headers: { ...headers, "content-length": String(body.byteLength) },
    });
  };
}
