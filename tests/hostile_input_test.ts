/**
 * Hostile input against the running gateway, property-based (fast-check): for every `/v1` route
 * (read from the services' `google.api.http` annotations, so a new route is covered at once),
 * hundreds of generated requests that are each invalid by construction: malformed and truncated
 * JSON, invalid UTF-8, arrays and scalars as bodies, wrong JSON types for every field, unknown,
 * `__proto__`, `constructor` and output-only keys, strings of 10^6 characters, arrays of 10^5
 * items, nesting up to 5 x 10^5 levels deep, NUL and lone surrogates, `-0`, `1e309`, 2^53+1, wrong content
 * types, oversize bodies (with and without Content-Length), huge headers, bad percent-encoding in
 * paths and queries, unknown and repeated query parameters, and every limit at n+1.
 *
 * Property of every batch of cases: each answer is a 4xx with exactly the JSON error body
 * `{"error": {"code", "message", "details"}}` (the exact status where the case determines it, and
 * a violation of the right field where there is one), and no row of any table changed. At the end:
 * every process still runs, `/readyz` answers 200 and no component logged a server fault.
 *
 * `HOSTILE_SEED` replays a run (fast-check prints the seed and the path of a failure);
 * `HOSTILE_RUNS` sets the number of batches per route.
 */

import assert from "node:assert/strict";
import {
  type DescField,
  type DescMessage,
  getOption,
  hasOption,
  ScalarType,
} from "@bufbuild/protobuf";
import fc from "fast-check";
import { http } from "../gen/google/api/annotations_pb.ts";
import { field_behavior, FieldBehavior } from "../gen/google/api/field_behavior_pb.ts";
import { CoreService } from "../gen/registry/core/v1/core_service_pb.ts";
import { OAuthRegistryService } from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import {
  assertStackAlive,
  dbDigest,
  openDatabase,
  overLimits,
  serverFaults,
} from "../lib/testing/mod.ts";
import { httpClient, type HttpResult } from "../lib/testing/mod.ts";
import { startStack } from "../lib/testing/mod.ts";

const seed = Number(Deno.env.get("HOSTILE_SEED") ?? Math.floor(Math.random() * 2 ** 31));
const batchesPerRoute = Number(Deno.env.get("HOSTILE_RUNS") ?? 40);
const batchSize = 8;

// ---------------------------------------------------------------------------------------------
// The routes, from the annotations.

interface RouteInfo {
  /** `GET`, `POST`... */
  verb: string;
  /** `/v1/projects/{project_id}/clients/{client_id}` */
  template: string;
  /** Path variables, in order. */
  vars: string[];
  /** The JSON body's message, or undefined for routes without a body. */
  body: DescMessage | undefined;
  /** Query parameters the route accepts (request fields neither in the path nor in a body). */
  query: string[];
}

function routesOf(): RouteInfo[] {
  const out: RouteInfo[] = [];
  for (const service of [OAuthRegistryService, CoreService]) {
    for (const method of service.methods) {
      if (!hasOption(method, http)) continue;
      const rule = getOption(method, http);
      const verb = rule.pattern.case!.toUpperCase();
      const template = rule.pattern.value as string;
      const vars = [...template.matchAll(/\{([a-z_]+)\}/g)].map((m) => m[1]!);
      let body: DescMessage | undefined;
      if (rule.body === "*") body = method.input;
      else if (rule.body !== "") {
        body = method.input.fields.find((f) => f.name === rule.body)!.message;
      }
      const query = body === undefined
        // A delete's etag is the If-Match header on /v1, not a query parameter.
        ? method.input.fields.map((f) => f.name).filter((n) => !vars.includes(n) && n !== "etag")
        : [];
      out.push({ verb, template, vars, body, query });
    }
  }
  return out;
}

const keyOf = (r: { verb: string; template: string }) => `${r.verb} ${r.template}`;

// ---------------------------------------------------------------------------------------------
// Cases.

interface HttpCase {
  kind: string;
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: string | Uint8Array<ArrayBuffer> | (() => ReadableStream<Uint8Array<ArrayBuffer>>);
  /** The exact status, when the case determines it. */
  status?: number;
  /** A field the error must name (or a path below it), when the case determines it. */
  field?: string;
}

/** What fast-check prints for a case: its kind and a bounded view of it. */
function described(c: HttpCase): HttpCase {
  return Object.assign(c, {
    [fc.toStringMethod]: () => {
      const body = typeof c.body === "string"
        ? c.body
        : c.body instanceof Uint8Array
        ? `<${c.body.length} bytes>`
        : c.body
        ? "<stream>"
        : "";
      const headerSizes = Object.entries(c.headers).map(([k, v]) =>
        `${k.slice(0, 40)}(${v.length})`
      );
      return `${c.kind}: ${c.method} ${c.path.slice(0, 300)} [${headerSizes.join(" ")}] ` +
        `${body.slice(0, 300)}${body.length > 300 ? `... (${body.length} chars)` : ""}`;
    },
  });
}

/** A JSON object as ordered [key, raw JSON text] entries, so any key and any number text fits. */
type Entries = Array<[string, string]>;

const render = (entries: Entries) =>
  `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(",")}}`;

function withEntry(entries: Entries, key: string, raw: string): Entries {
  const out = entries.filter(([k]) => k !== key);
  const at = entries.findIndex(([k]) => k === key);
  out.splice(at < 0 ? out.length : at, 0, [key, raw]);
  return out;
}

const entriesOf = (value: Record<string, unknown>): Entries =>
  Object.entries(value).map(([k, v]) => [k, JSON.stringify(v)]);

/** Number texts JavaScript cannot hold exactly, or that JSON.stringify would never write. */
/** Whether a field holds a 32-bit integer (JSON numbers only; 0 is a value like any other). */
const isInt32 = (f: DescField) =>
  f.fieldKind === "scalar" &&
  [ScalarType.INT32, ScalarType.UINT32, ScalarType.SINT32, ScalarType.FIXED32, ScalarType.SFIXED32]
    .includes(f.scalar);

/**
 * Numbers no 32-bit integer field takes: fractions, and ones beyond the range (not `1e-400`,
 * which JSON reads as 0).
 */
const notInt32 = fc.constantFrom(
  "0.1",
  "1.5",
  "1e309",
  "-1e309",
  "1E400",
  "2147483648",
  "-2147483649",
  "4294967296",
  "9007199254740993",
  "123456789012345678901234567890",
);

const specialNumbers = [
  "-0",
  "1e309",
  "-1e309",
  "1E400",
  "9007199254740993",
  "-9007199254740993",
  "123456789012345678901234567890",
  "1e-400",
  "0.1",
  "-1",
  "0",
  "4294967296",
];

const anyNumber = fc.oneof(
  fc.constantFrom(...specialNumbers),
  fc.integer().map(String),
  fc.double({ noNaN: true, noDefaultInfinity: true }).map((n) => JSON.stringify(n)),
);
const anyString = fc.string({ maxLength: 20 }).map((s) => JSON.stringify(s));
const anyBool = fc.boolean().map(String);
const anyArray = fc.array(fc.jsonValue({ maxDepth: 2 }), { maxLength: 3 }).map((v) =>
  JSON.stringify(v)
);
const anyObject = fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 1 }), {
  maxKeys: 3,
}).map((v) => JSON.stringify(v));
const nonStringArray = fc.tuple(
  fc.array(fc.constant('"a"'), { maxLength: 3 }),
  fc.oneof(anyNumber, anyBool, fc.constant("null"), anyArray, anyObject),
  fc.nat(3),
).map(([items, bad, at]) => {
  const out: string[] = [...items];
  out.splice(Math.min(at, out.length), 0, bad);
  return `[${out.join(",")}]`;
});
const badTimestamps = fc.constantFrom(
  '"2026-13-01T00:00:00Z"',
  '"2026-02-30T00:00:00Z"',
  '"0000-01-01T00:00:00Z"',
  '"10000-01-01T00:00:00Z"',
  '"2026-01-01"',
  '"2026-01-01T00:00:00"',
  '"2026-01-01T24:00:00Z"',
  '"2026-01-01 00:00:00Z"',
  '"2026-01-01T00:00:00+24:00"',
  '"1e309"',
  '""',
);

const isOutputOnly = (f: DescField) =>
  getOption(f, field_behavior).includes(FieldBehavior.OUTPUT_ONLY);

/** Raw JSON values of the wrong type for a body field (every value is rejected by the codec). */
function wrongValue(f: DescField): fc.Arbitrary<string> {
  if (isOutputOnly(f)) {
    return fc.oneof(anyString, anyNumber, anyBool, fc.constant("null"), anyArray, anyObject);
  }
  const nullable = f.fieldKind === "message" ||
    ((f.fieldKind === "scalar" || f.fieldKind === "enum") && f.presence === 1);
  const nul = nullable ? [] : [fc.constant("null")];
  if (f.fieldKind === "list") {
    return fc.oneof(anyString, anyNumber, anyBool, anyObject, nonStringArray, ...nul);
  }
  if (f.fieldKind === "message") {
    // Any JSON object is a google.protobuf.Struct (CreateClientKey's `jwk`): not a wrong type.
    if (f.message.typeName === "google.protobuf.Struct") {
      return fc.oneof(anyNumber, anyBool, anyArray, badTimestamps);
    }
    return fc.oneof(anyNumber, anyBool, anyArray, anyObject, badTimestamps);
  }
  if (f.fieldKind === "enum") {
    const names = new Set(
      f.enum.values.filter((v) => v.number !== 0).map((v) => v.localName.toLowerCase()),
    );
    const badName = fc.oneof(
      fc.constantFrom(
        ...f.enum.values.flatMap((v) => [v.name, v.localName, `${v.localName.toLowerCase()} `]),
        "unspecified",
        "",
      ),
      fc.string({ maxLength: 12 }),
    ).filter((s) => !names.has(s)).map((s) => JSON.stringify(s));
    return fc.oneof(anyNumber, anyBool, anyArray, anyObject, badName, ...nul);
  }
  if (f.fieldKind === "scalar" && f.scalar === 8 /* bool */) {
    return fc.oneof(anyNumber, anyString, anyArray, anyObject, ...nul);
  }
  if (isInt32(f)) return fc.oneof(notInt32, anyString, anyBool, anyArray, anyObject, ...nul);
  return fc.oneof(anyNumber, anyBool, anyArray, anyObject, ...nul);
}

/** Characters a string field can never hold: NUL and lone surrogates (in every position). */
const poison = fc.constantFrom("\u0000", "\ud800", "\udbff", "\udc00", "\udfff", "\udc00\ud800");

/** Content types that are not JSON. */
const notJson = fc.constantFrom(
  "text/plain",
  "text/plain; charset=utf-8",
  "application/x-www-form-urlencoded",
  "multipart/form-data; boundary=x",
  "application/jsonx",
  "application/json-patch+json",
  "application/merge-patch+json",
  "text/json",
  "application/xml",
  "json",
  "application/*",
  "*/*",
  " ",
  "application/ json",
  "application/json; charset=utf-16",
  'application/json;charset="ISO-8859-1"',
  "application/json; charset=",
);

/** A path segment that is not a valid percent-encoding. */
const badPercent = fc.oneof(
  fc.constantFrom("%", "%%", "%Z9", "%A", "%E0%A4%A", "%ff", "%C0%80", "%ED%A0%80", "%F4%90%80%80"),
  fc.tuple(fc.string({ maxLength: 6 }), fc.constantFrom("%", "%G", "%fx", "%c3")).map(
    ([s, bad]) => encodeURIComponent(s) + bad,
  ),
);

/** A hostile but well-encoded path segment. */
const oddSegment = fc.oneof(
  fc.constantFrom("%00", "a%00b", "%2F", "..%2F..", "%2e%2e", "%20", "cli_%00", "null", "-0"),
  fc.string({ unit: "binary", minLength: 1, maxLength: 40 }).map((s) =>
    encodeURIComponent(s.toWellFormed())
  ),
  fc.integer({ min: 1000, max: 8000 }).map((n) => "x".repeat(n)),
);

/** Whether a query value is a valid page size (the only values that must not appear). */
const validLimit = (s: string) => /^-?[0-9]+$/.test(s) && BigInt(s) >= 1n && BigInt(s) <= 100n;

/** The stack's fixture: ids of real records, so that only the hostile part can fail a request. */
interface Fixture {
  vars: Record<string, string>;
  token: string;
}

/**
 * Public keys to upload (RFC 8037 A.2's Ed25519 key, RFC 7515 A.3's P-256 key). A client holds a
 * `kid` once, so only the first create of each succeeds: a second is ALREADY_EXISTS, a 4xx.
 */
const publicJwks = [
  { kty: "OKP", crv: "Ed25519", x: "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo" },
  {
    kty: "EC",
    crv: "P-256",
    x: "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
    y: "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0",
  },
];

/** Valid bodies per route: each hostile case breaks exactly one thing of such a body. */
function validBody(route: RouteInfo, fx: Fixture): fc.Arbitrary<Record<string, unknown>> {
  switch (keyOf(route)) {
    case "PATCH /v1/projects/{project_id}/config":
      return fc.record({
        application_name: fc.constantFrom("Hostile app", "Hostile — app"),
        support_email: fc.constantFrom("help@example.com", null),
        logo_uri: fc.constantFrom("https://example.com/logo.png", null),
        authorized_domains: fc.constantFrom([], ["example.com"]),
        audience: fc.constant("external"),
      }, { requiredKeys: ["application_name"] });
    case "POST /v1/projects/{project_id}/clients":
      return fc.record({
        name: fc.constantFrom("Web app", "Приложение"),
        type: fc.constant("web"),
        redirect_uris: fc.constantFrom([], ["https://app.example.com/cb"]),
        javascript_origins: fc.constantFrom([], ["https://app.example.com"]),
      }, { requiredKeys: ["name", "type"] });
    case "PATCH /v1/projects/{project_id}/clients/{client_id}":
      return fc.record({
        name: fc.constantFrom("Renamed", "Web app"),
        redirect_uris: fc.constantFrom([], ["https://app.example.com/cb"]),
        javascript_origins: fc.constantFrom(["https://app.example.com"]),
        status: fc.constant("active"),
      }, { requiredKeys: ["name"] });
    case "POST /v1/projects/{project_id}/clients/{client_id}/secrets":
      // A lifetime or an expiry, never both (the fixture's own create has no body).
      return fc.oneof(
        fc.record({ lifetime_seconds: fc.constantFrom(60, 86_400) }),
        fc.record({
          expires_at: fc.constantFrom("2999-01-01T00:00:00Z", "2999-06-30T12:00:00.5+02:00"),
        }),
      );
    case "POST /v1/projects/{project_id}/clients/{client_id}/keys":
      // A public JWK to upload or a key pair to generate, never both; an expiry or none.
      return fc.record({
        key: fc.oneof(
          fc.constantFrom("EdDSA", "ES256").map((generate) => ({ generate })),
          fc.constantFrom(...publicJwks).map((jwk) => ({ jwk })),
        ),
        expires_at: fc.option(fc.constant("2999-01-01T00:00:00Z"), { nil: undefined }),
      }).map(({ key, expires_at }) => ({
        ...key,
        ...(expires_at === undefined ? {} : { expires_at }),
      }));
    case "POST /v1/installations":
      return fc.record({
        project_id: fc.constant("p1"),
        scopes: fc.constantFrom([], ["openid", "email"]),
      }, { requiredKeys: ["project_id"] });
    case "POST /v1/core/roles":
    case "PUT /v1/core/roles/{role_id}":
      return fc.record({
        // Names are unique per space and resource type: the create and the replace differ.
        name: route.verb === "PUT"
          ? fc.constantFrom("Fixture", "Fixture role")
          : fc.constantFrom("Sanity role", "Rôle"),
        resource_type: fc.constant("project"),
        permissions: fc.constantFrom([], ["units.read"]),
        description: fc.constantFrom("d", null),
      }, { requiredKeys: ["name", "resource_type"] });
    case "POST /v1/core/journeys":
    case "PUT /v1/core/journeys/{journey_id}":
      return fc.record({
        name: fc.constantFrom("Launch", "Запуск"),
        description: fc.constantFrom("", "line\nbreak"),
        active: fc.boolean(),
        parent: fc.constant(null),
      }, { requiredKeys: ["name"] });
    case "POST /v1/core/units":
    case "PUT /v1/core/units/{unit_id}":
      return fc.record({
        journey: fc.constant(fx.vars.journey_id!),
        title: fc.constantFrom("Write", "Écrire"),
        status: fc.constantFrom("todo", "done"),
        priority: fc.constantFrom("none", "high"),
        assignee: fc.constantFrom("a1", null),
        description: fc.constantFrom("d", null),
        due_at: fc.constantFrom("2030-01-01T00:00:00Z", null),
      }, { requiredKeys: ["journey", "title"] });
    default:
      throw new Error(`no valid body for ${keyOf(route)}`);
  }
}

/** Base query parameters a route needs (ListUnits needs its journey). */
function baseQuery(route: RouteInfo, fx: Fixture): string {
  return keyOf(route) === "GET /v1/core/units" ? `journey=${fx.vars.journey_id}` : "";
}

/** Bad values of the query parameters of list routes (all rejected). */
function badQueryValue(name: string): fc.Arbitrary<string> {
  const enc = (a: fc.Arbitrary<string>) => a.map(encodeURIComponent);
  switch (name) {
    case "limit":
      return fc.oneof(
        fc.constantFrom(
          "0",
          "101",
          "-1",
          "-0",
          "1e2",
          "1.0",
          "%2B5",
          "+5",
          "%205",
          "0x10",
          "",
          "1e309",
          "9007199254740993",
          "NaN",
          "Infinity",
          "%ZZ",
          "%ff",
          "%00",
          "%D9%A1",
          "99999999999999999999999",
        ),
        enc(fc.string({ maxLength: 8 }).filter((s) => !validLimit(s))),
      );
    case "after":
      return fc.oneof(
        // Not an event number either (ListEvents' cursor is one).
        enc(fc.string({ minLength: 1, maxLength: 40 }).filter((x) => !/^[0-9]+$/.test(x))),
        fc.constantFrom("cli_00000000000000000000000000", "ins_7zzzzzzzzzzzzzzzzzzzzzzzzz", "%00"),
      );
    case "resource_type":
      return enc(
        fc.constantFrom("Project", "1abc", "a b", "a..b", ".a", "a.", "a\u0000", "r".repeat(256)),
      );
    case "active":
      return enc(fc.string({ maxLength: 6 }).filter((s) => s !== "true" && s !== "false"));
    case "status":
      return enc(
        fc.string({ maxLength: 12 }).filter((s) =>
          !["todo", "in_progress", "done", "canceled"].includes(s)
        ),
      );
    case "assignee":
      return enc(
        fc.constantFrom("a\u0000b", "a\u0001", "\u007f", "x".repeat(256), "é".repeat(256)),
      );
    case "resource":
      return enc(fc.constantFrom("r".repeat(4097), "é".repeat(4097)));
    case "method":
      return enc(fc.constantFrom("m".repeat(513)));
    case "actor":
      return enc(fc.constantFrom("a".repeat(1025)));
    case "since":
    case "until":
      return enc(fc.constantFrom("yesterday", "2026-13-01T00:00:00Z", "1", "2026-01-01", "Z"));
    case "parent":
    case "journey":
      return enc(fc.string({ minLength: 1, maxLength: 30 }));
    case "project_id":
      return enc(
        fc.oneof(
          fc.constantFrom("-p", ".p", "a b", "p/q", "p\u0000", "p".repeat(129), "é"),
          fc.string({ minLength: 1, maxLength: 12 }).filter((s) =>
            !/^[A-Za-z0-9][A-Za-z0-9._~-]{0,127}$/.test(s)
          ),
        ),
      );
    default:
      throw new Error(`no bad values for query parameter ${name}`);
  }
}

function caseArbitrary(route: RouteInfo, fx: Fixture): fc.Arbitrary<HttpCase> {
  const path = (override?: [string, string]) =>
    route.template.replace(
      /\{([a-z_]+)\}/g,
      (_, v: string) => override?.[0] === v ? override[1] : encodeURIComponent(fx.vars[v]!),
    );
  const base = baseQuery(route, fx);
  const url = (extra = "", override?: [string, string]) => {
    const q = [base, extra].filter((s) => s !== "").join("&");
    return path(override) + (q === "" ? "" : `?${q}`);
  };
  const auth = { authorization: `Bearer ${fx.token}` };
  const json = { ...auth, "content-type": "application/json" };
  const make = (c: Omit<HttpCase, "method">) => {
    // Deno.serve hides a GET's body: whatever it holds, the gateway can only refuse its presence
    // (400), after the token (401) and the declared size (413).
    if (route.verb === "GET" && c.body !== undefined && c.status !== undefined) {
      if (c.status !== 401 && c.status !== 413) c = { ...c, status: 400 };
    } else if (!route.body && c.body !== undefined && c.status === 415) {
      // A route that takes no body (a DELETE) refuses one however it is labelled: 400.
      c = { ...c, status: 400 };
    }
    return described({ method: route.verb, ...c });
  };
  const valid = route.body ? validBody(route, fx).map(entriesOf) : fc.constant<Entries>([]);
  const bodyFields = route.body?.fields ?? [];
  const stringFields = bodyFields.filter((f) =>
    !isOutputOnly(f) &&
    ((f.fieldKind === "scalar" && f.scalar === 9) || (f.fieldKind === "list" && f.scalar === 9))
  );
  const kinds: Array<{ weight: number; arbitrary: fc.Arbitrary<HttpCase> }> = [];
  const add = (weight: number, arbitrary: fc.Arbitrary<HttpCase>) =>
    kinds.push({ weight, arbitrary });

  // Malformed JSON: truncated, garbage text, invalid UTF-8.
  const sample = route.body ? valid.map(render) : fc.constant('{"a":[1,{"b":"c"}]}');
  add(
    3,
    fc.oneof(
      fc.tuple(sample, fc.double({ min: 0, max: 1, noNaN: true })).map(([text, at]) =>
        text.slice(0, Math.max(1, Math.min(text.length - 1, Math.floor(text.length * at))))
      ),
      fc.constantFrom(
        "{'a':1}",
        '{"a":1,}',
        '{"a":NaN}',
        '{"a":Infinity}',
        '{"a":"\\x"}',
        '{"a":"\\u12"}',
        '{"a":1}/*c*/',
        "{a:1}",
        '{"a":"\u0001"}',
        "\ufeff\ufeff{}",
        "{}{}",
        "{} 1",
        '{"a":01}',
        '{"a":.5}',
        '{"a":1.}',
        '{"a":-}',
        '{"a":+1}',
        "\u00a0{}",
      ),
      fc.string({ maxLength: 30 }),
    ).filter((text) => {
      if (text === "") return false; // no body at all
      try {
        JSON.parse(text);
        return false;
      } catch {
        return true;
      }
    }).map((body) =>
      make({ kind: "malformed JSON", path: url(), headers: json, body, status: 400 })
    ),
  );
  add(
    2,
    fc.tuple(
      sample,
      fc.nat(),
      fc.constantFrom([0xff], [0xc0, 0x80], [0xed, 0xa0, 0x80], [0x80], [
        0xf8,
        0x88,
        0x80,
        0x80,
        0x80,
      ], [0xe2, 0x82]),
    ).map(([text, at, bad]) => {
      const bytes = new TextEncoder().encode(text);
      const i = 1 + (at % Math.max(1, bytes.length - 1));
      const out = new Uint8Array([...bytes.subarray(0, i), ...bad, ...bytes.subarray(i)]);
      return make({ kind: "invalid UTF-8", path: url(), headers: json, body: out, status: 400 });
    }),
  );

  // Not an object (for routes without a body: anything but {} or nothing).
  add(
    2,
    fc.oneof(
      fc.jsonValue({ maxDepth: 3 }).filter((v) =>
        typeof v !== "object" || v === null || Array.isArray(v)
      ).map((v) => JSON.stringify(v)),
      valid.map((e) => `[${render(e)}]`),
      fc.constantFrom("null", "[]", '""', "0", "-0", "1e309", "true", " [ ] "),
    ).map((body) => make({ kind: "not an object", path: url(), headers: json, body, status: 400 })),
  );

  // Unknown keys, prototype keys, camelCase keys, output-only keys.
  const known = new Set(bodyFields.map((f) => f.name));
  const unknownKey = fc.oneof(
    fc.constantFrom(
      "__proto__",
      "constructor",
      "prototype",
      "toString",
      "valueOf",
      "hasOwnProperty",
      "__defineGetter__",
      "isAdmin",
      ...bodyFields.map((f) => f.jsonName),
      ...bodyFields.map((f) => f.name.toUpperCase()),
      ...bodyFields.map((f) => ` ${f.name}`),
    ),
    fc.string({ minLength: 1, maxLength: 20 }),
  ).filter((k) => !known.has(k));
  add(
    3,
    fc.tuple(valid, unknownKey, fc.oneof(anyString, anyNumber, anyObject, anyArray)).map((
      [e, key, raw],
    ) =>
      make({
        kind: "unknown key",
        path: url(),
        headers: json,
        body: render(withEntry(e, key, raw)),
        status: 400,
        ...(route.body ? { field: key } : {}),
      })
    ),
  );
  const outputOnly = bodyFields.filter(isOutputOnly);
  if (outputOnly.length > 0) {
    add(
      2,
      fc.tuple(valid, fc.constantFrom(...outputOnly), anyString).map(([e, f, raw]) =>
        make({
          kind: "output-only key",
          path: url(),
          headers: json,
          body: render(withEntry(e, f.name, raw)),
          status: 400,
          field: f.name,
        })
      ),
    );
  }

  if (route.body && bodyFields.length > 0) {
    // Wrong JSON types, for every field of the body.
    const wrong = fc.constantFrom(...bodyFields).chain((f) =>
      wrongValue(f).map((raw) => [f.name, raw] as const)
    );
    add(
      4,
      fc.tuple(valid, wrong).map(([e, [name, raw]]) =>
        make({
          kind: "wrong type",
          path: url(),
          headers: json,
          body: render(withEntry(e, name, raw)),
          status: 400,
          field: name,
        })
      ),
    );
    // Numbers JavaScript cannot hold, in any field (a number field may take 0, which `-0` and
    // `1e-400` are too; -1 is below every number field's range).
    add(
      2,
      fc.tuple(valid, fc.constantFrom(...bodyFields)).chain(([e, f]) =>
        fc.constantFrom(
          ...specialNumbers.filter((n) => !isInt32(f) || !["0", "-0", "1e-400"].includes(n)),
        ).map((n) => [e, f, n] as const)
      ).map((
        [e, f, n],
      ) =>
        make({
          kind: "special number",
          path: url(),
          headers: json,
          body: render(withEntry(e, f.name, n)),
          status: 400,
          field: f.name,
        })
      ),
    );
  }

  if (stringFields.length > 0) {
    // NUL and lone surrogates inside a string (or a list item), and inside a key.
    add(
      3,
      fc.tuple(
        valid,
        fc.constantFrom(...stringFields),
        fc.string({ maxLength: 10 }),
        poison,
        fc.nat(),
      )
        .map(([e, f, s, bad, at]) => {
          const i = at % (s.length + 1);
          const value = s.slice(0, i) + bad + s.slice(i);
          const raw = JSON.stringify(f.fieldKind === "list" ? [value] : value);
          return make({
            kind: "NUL or lone surrogate",
            path: url(),
            headers: json,
            body: render(withEntry(e, f.name, raw)),
            status: 400,
            field: f.name,
          });
        }),
    );
  }
  add(
    1,
    fc.tuple(valid, poison, fc.constantFrom(...(bodyFields.length ? bodyFields : [undefined])))
      .map(([e, bad, f]) =>
        make({
          kind: "poisoned key",
          path: url(),
          headers: json,
          body: render(withEntry(e, (f?.name ?? "k") + bad, "1")),
          status: 400,
        })
      ),
  );

  // 10^6 characters: in a field, in a key, or as the whole body.
  const hugeChar = fc.constantFrom("a", "é", "😀", "\\u0000", " ");
  const huge = fc.tuple(hugeChar, fc.integer({ min: 1_000_000, max: 1_000_010 })).map(
    ([c, n]) => `"${c.repeat(n)}"`,
  );
  add(
    1,
    fc.tuple(
      valid,
      huge,
      fc.constantFrom("field", "key", "body"),
      fc.constantFrom(...(stringFields.length ? stringFields : [undefined])),
    ).map(
      ([e, raw, where, f]) => {
        let body: string;
        if (where === "body") body = raw;
        else if (where === "key" || f === undefined) {
          body = render(withEntry(e, JSON.parse(raw), "1"));
        } else body = render(withEntry(e, f.name, f.fieldKind === "list" ? `[${raw}]` : raw));
        return make({ kind: "10^6 characters", path: url(), headers: json, body });
      },
    ),
  );

  // 10^5 items: in a field or as the whole body.
  add(
    1,
    fc.tuple(
      valid,
      fc.constantFrom('"a"', "1", "null", "{}", "[]", '"https://example.com/cb"'),
      fc.integer({ min: 100_000, max: 100_100 }),
      fc.constantFrom(...(bodyFields.length ? bodyFields.map((f) => f.name) : [undefined])),
    ).map(([e, item, n, name]) => {
      const list = `[${Array(n).fill(item).join(",")}]`;
      const body = name === undefined ? list : render(withEntry(e, name, list));
      const status = new TextEncoder().encode(body).length > 1024 * 1024 ? 413 : 400;
      return make({ kind: "10^5 items", path: url(), headers: json, body, status });
    }),
  );

  // Nesting: arrays or objects 100..520,000 levels deep (up to 1 MiB of `[`), as the body or in a
  // field.
  add(
    1,
    fc.tuple(
      valid,
      fc.constantFrom("[", '{"a":', '{"__proto__":'),
      fc.integer({ min: 100, max: 520_000 }),
      fc.constantFrom(...(bodyFields.length ? bodyFields.map((f) => f.name) : [undefined])),
    ).map(([e, open, depth, name]) => {
      const close = open === "[" ? "]" : "}";
      const nested = open.repeat(depth) + (open === "[" ? "" : "1") + close.repeat(depth);
      const body = name === undefined ? nested : render(withEntry(e, name, nested));
      return make({ kind: "deep nesting", path: url(), headers: json, body });
    }),
  );

  // A body that is not application/json (or has no content type at all).
  add(
    2,
    fc.tuple(valid, fc.option(notJson, { nil: undefined })).map(([e, type]) => {
      const text = route.body ? render(e) : "{}";
      return make({
        kind: "wrong content type",
        path: url(),
        headers: type === undefined ? auth : { ...auth, "content-type": type },
        body: type === undefined ? new TextEncoder().encode(text) : text,
        status: 415,
      });
    }),
  );

  // Over 1 MiB, with a Content-Length or streamed without one.
  add(
    1,
    fc.tuple(fc.integer({ min: 1, max: 4096 }), fc.boolean()).map(([extra, stream]) => {
      const text = `{"x":"${"a".repeat(1024 * 1024 + extra - 8)}"}`;
      const bytes = new TextEncoder().encode(text);
      return make({
        kind: stream ? "oversize body (streamed)" : "oversize body",
        path: url(),
        headers: json,
        body: stream
          ? () =>
            new ReadableStream({
              start(c) {
                for (let i = 0; i < bytes.length; i += 64 * 1024) {
                  c.enqueue(bytes.slice(i, i + 64 * 1024));
                }
                c.close();
              },
            })
          : text,
        // A body without a length is refused before it is read (lib/transport/http_guard.ts);
        // a GET's goes out with its length (fetch cannot send one: see `send`).
        status: stream && route.verb !== "GET" ? 411 : 413,
      });
    }),
  );

  // Every limit of the body at n+1.
  const limits = route.body ? overLimits[route.body.typeName] ?? [] : [];
  if (limits.length > 0) {
    add(
      4,
      fc.constantFrom(...limits).chain((limit) =>
        fc.tuple(valid, limit.value).map(([e, value]) =>
          make({
            kind: `limit n+1 ${limit.field}`,
            path: url(),
            headers: json,
            body: render(withEntry(e, limit.field, JSON.stringify(value))),
            status: 400,
            field: limit.field,
          })
        )
      ),
    );
  }

  // Path variables: bad percent-encoding (400), hostile but well-encoded segments (4xx).
  if (route.vars.length > 0) {
    const body = route.body ? valid.map(render) : fc.constant(undefined);
    add(
      3,
      fc.tuple(fc.constantFrom(...route.vars), badPercent, body).map(([v, seg, b]) =>
        make({
          kind: "bad percent-encoding in the path",
          path: url("", [v, seg]),
          headers: json,
          ...(b !== undefined ? { body: b } : {}),
          status: 400,
        })
      ),
    );
    add(
      3,
      fc.tuple(fc.constantFrom(...route.vars), oddSegment, body).filter(([v, seg]) => {
        try {
          return decodeURIComponent(seg) !== fx.vars[v];
        } catch {
          return true;
        }
      }).map(([v, seg, b]) =>
        make({
          kind: "hostile path segment",
          path: url("", [v, seg]),
          headers: json,
          ...(b !== undefined ? { body: b } : {}),
        })
      ),
    );
  }

  // Query strings: unknown, repeated, bad values, bad percent-encoding.
  const allowed = route.query;
  const queryKey = fc.oneof(
    fc.constantFrom(
      "__proto__",
      "constructor",
      "toString",
      "Limit",
      "limit[]",
      "%ZZ",
      "%ff",
      "a%00",
      ...route.vars,
      ...(route.body ? ["limit", "after"] : []),
    ),
    fc.string({ minLength: 1, maxLength: 12 }).map(encodeURIComponent),
  ).filter((k) => {
    try {
      return !allowed.includes(decodeURIComponent(k));
    } catch {
      return true;
    }
  });
  const body = route.body ? valid.map(render) : fc.constant(undefined);
  add(
    2,
    fc.tuple(queryKey, fc.string({ maxLength: 8 }), body).map(([k, v, b]) =>
      make({
        kind: "unknown query parameter",
        path: url(`${k}=${encodeURIComponent(v)}`),
        headers: json,
        ...(b !== undefined ? { body: b } : {}),
        status: 400,
      })
    ),
  );
  add(
    2,
    fc.tuple(
      fc.constantFrom(...allowed, "x", "__proto__"),
      badPercent,
      fc.boolean(),
      body,
    ).map(([k, bad, inName, b]) =>
      make({
        kind: "bad percent-encoding in the query",
        path: url(inName ? `${bad}=1` : `${k}=${bad}`),
        headers: json,
        ...(b !== undefined ? { body: b } : {}),
        status: 400,
      })
    ),
  );
  const filters = allowed.filter((q) => !(q === "journey" && base !== ""));
  if (allowed.length > 0) {
    add(
      3,
      fc.constantFrom(...filters).chain((q) =>
        badQueryValue(q).map((value) =>
          make({
            kind: `bad query value ${q}`,
            path: url(`${q}=${value}`),
            headers: auth,
            // An id that names nothing may be 400 or 404.
            ...(q === "parent" || q === "journey" ? {} : { status: 400 }),
          })
        )
      ),
    );
    add(
      1,
      fc.constantFrom(...allowed).map((q) =>
        make({
          kind: "repeated query parameter",
          path: url(q === "limit" ? "limit=5&limit=5" : `${q}=a&${q}=a`),
          headers: auth,
          status: 400,
        })
      ),
    );
  }

  // Huge headers (under the HTTP server's own limit): a huge token is 401, a huge non-JSON
  // content type 415; huge or many unrelated headers change nothing about a bad request.
  add(
    1,
    fc.tuple(
      fc.integer({ min: 8_000, max: 48_000 }),
      fc.constantFrom("token", "content-type", "x-request-id", "traceparent", "many"),
      body,
    ).map(([n, which, b]) => {
      const pad = "a".repeat(n);
      const headers: Record<string, string> = { ...json };
      let status = 400;
      let extra = "__proto__=1";
      if (which === "token") {
        headers.authorization = `Bearer ${pad}.${pad}.${pad}`.slice(0, n);
        status = 401;
        extra = "";
      } else if (which === "content-type") {
        headers["content-type"] = `text/plain; x=${pad}`;
        status = 415;
        extra = "";
      } else if (which === "many") {
        for (let i = 0; i < 80; i++) headers[`x-hostile-${i}`] = pad.slice(0, n / 100);
      } else headers[which] = pad;
      const payload = route.body ? b : "[]";
      return make({
        kind: `huge header ${which}`,
        path: url(extra),
        headers,
        ...(payload !== undefined ? { body: payload } : {}),
        status,
      });
    }),
  );

  return fc.oneof(...kinds);
}

/** Writes all of `bytes` (a socket write may take only part of them). */
async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  for (let at = 0; at < bytes.length;) at += await conn.write(bytes.subarray(at));
}

/**
 * One HTTP/1.1 request over a fresh connection, for what fetch refuses (a GET with a body). The
 * answer is read up to its Content-Length; the server may answer before it has read the body.
 */
async function rawRequest(
  port: number,
  method: string,
  path: string,
  headers: Record<string, string>,
  body: Uint8Array,
): Promise<HttpResult> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    const head = [`${method} ${path} HTTP/1.1`, "host: 127.0.0.1", "connection: close"];
    for (const [k, v] of Object.entries(headers)) head.push(`${k}: ${v}`);
    head.push(`content-length: ${body.length}`, "", "");
    const writing = (async () => {
      await writeAll(conn, new TextEncoder().encode(head.join("\r\n")));
      await writeAll(conn, body);
    })().catch(() => {}); // the server may answer and close before the body is sent
    let received = new Uint8Array(0);
    const buffer = new Uint8Array(65536);
    let end = -1;
    let length = -1;
    const latin1 = new TextDecoder("latin1");
    while (length < 0 || received.length < end + 4 + length) {
      const n = await conn.read(buffer);
      if (n === null) break;
      const joined = new Uint8Array(received.length + n);
      joined.set(received);
      joined.set(buffer.subarray(0, n), received.length);
      received = joined;
      if (end < 0) {
        end = latin1.decode(received).indexOf("\r\n\r\n");
        if (end >= 0) {
          const m = /\r\ncontent-length: *(\d+)/i.exec(latin1.decode(received.subarray(0, end)));
          assert.ok(m, "a response without Content-Length");
          length = Number(m[1]);
        }
      }
    }
    assert.ok(end >= 0, "no response");
    const lines = latin1.decode(received.subarray(0, end)).split("\r\n");
    const status = Number(lines[0]!.split(" ")[1]);
    const responseHeaders = new Headers();
    for (const line of lines.slice(1)) {
      const i = line.indexOf(":");
      responseHeaders.append(line.slice(0, i).trim(), line.slice(i + 1).trim());
    }
    const bodyText = new TextDecoder().decode(received.subarray(end + 4, end + 4 + length));
    let parsed: unknown;
    try {
      parsed = JSON.parse(bodyText);
    } catch {
      parsed = undefined;
    }
    conn.close();
    await writing;
    return { status, headers: responseHeaders, text: bodyText, body: parsed };
  } catch (error) {
    try {
      conn.close();
    } catch { /* already closed */ }
    throw error;
  }
}

// ---------------------------------------------------------------------------------------------
// The check every answer must pass.

const codeNames = new Set([
  "canceled",
  "unknown",
  "invalid_argument",
  "deadline_exceeded",
  "not_found",
  "already_exists",
  "permission_denied",
  "resource_exhausted",
  "failed_precondition",
  "aborted",
  "out_of_range",
  "unimplemented",
  "internal",
  "unavailable",
  "data_loss",
  "unauthenticated",
]);

function assertJsonError(c: HttpCase, res: HttpResult): void {
  const what = `${fc.stringify(c)}\n-> ${res.status} ${res.text.slice(0, 500)}`;
  assert.ok(res.status >= 400 && res.status < 500, `not a 4xx: ${what}`);
  if (c.status !== undefined) assert.equal(res.status, c.status, what);
  assert.equal(res.headers.get("content-type"), "application/json", what);
  const body = res.body;
  assert.ok(typeof body === "object" && body !== null, `not a JSON object: ${what}`);
  assert.deepEqual(Object.keys(body), ["error"], what);
  assert.deepEqual(Object.keys(body.error), ["code", "message", "details"], what);
  assert.ok(codeNames.has(body.error.code), what);
  assert.ok(typeof body.error.message === "string" && body.error.message.length > 0, what);
  assert.ok(Array.isArray(body.error.details), what);
  for (const d of body.error.details) {
    assert.deepEqual(Object.keys(d), ["field", "description"], what);
    assert.ok(typeof d.field === "string" && typeof d.description === "string", what);
  }
  if (c.field !== undefined) {
    const f = c.field;
    assert.ok(
      body.error.details.some((d: { field: string }) =>
        d.field === f || d.field.startsWith(`${f}[`) || d.field.startsWith(`${f}.`)
      ),
      `expected a violation of ${JSON.stringify(f)}: ${what}`,
    );
  }
}

// ---------------------------------------------------------------------------------------------

Deno.test("hostile input through the gateway: always a 4xx JSON error, nothing written", async (t) => {
  const started = performance.now();
  const stack = await startStack();
  const api = httpClient(stack.gatewayUrl);
  const sql = openDatabase(stack);
  const token = await stack.token({
    sub: "hostile",
    projects: ["p1"],
    accountId: "acct-h",
    space: "s1",
  });
  const routes = routesOf();
  const counts = new Map<string, number>();
  let framing = 0;
  let failures = 0;
  const step = async (name: string, fn: () => Promise<void>) => {
    if (!(await t.step(name, fn))) failures++;
  };
  const gatewayPort = Number(new URL(stack.gatewayUrl).port);
  const send = async (c: HttpCase): Promise<HttpResult> => {
    if (c.method === "GET" && c.body !== undefined) {
      // fetch cannot send a GET with a body; a raw client can.
      const bytes = typeof c.body === "string"
        ? new TextEncoder().encode(c.body)
        : c.body instanceof Uint8Array
        ? c.body
        : new Uint8Array(await new Response(c.body()).arrayBuffer());
      return await rawRequest(gatewayPort, c.method, c.path, c.headers, bytes);
    }
    const raw = typeof c.body === "function" ? c.body() : c.body;
    return await api(c.method, c.path, {
      headers: c.headers,
      ...(raw !== undefined ? { raw } : {}),
    });
  };
  try {
    // The fixture: one record of every kind, so that ids in paths name real records.
    const ok = async (method: string, path: string, json?: unknown) => {
      const res = await api(method, path, { token, ...(json !== undefined ? { json } : {}) });
      assert.ok(res.status < 300, `${method} ${path}: ${res.status} ${res.text}`);
      return res.body;
    };
    await ok("PATCH", "/v1/projects/p1/config", { application_name: "Hostile" });
    const client = await ok("POST", "/v1/projects/p1/clients", {
      name: "Fixture",
      type: "web",
      redirect_uris: ["https://app.example.com/cb"],
    });
    const secret = await ok("POST", `/v1/projects/p1/clients/${client.id}/secrets`);
    const key = await ok("POST", `/v1/projects/p1/clients/${client.id}/keys`, {
      generate: "EdDSA",
    });
    const installation = await ok("POST", "/v1/installations", { project_id: "p1" });
    const role = await ok("POST", "/v1/core/roles", { name: "Fixture", resource_type: "project" });
    const journey = await ok("POST", "/v1/core/journeys", { name: "Fixture" });
    const unit = await ok("POST", "/v1/core/units", { journey: journey.id, title: "Fixture" });
    const fx: Fixture = {
      token,
      vars: {
        project_id: "p1",
        client_id: client.id,
        secret_id: secret.id,
        key_id: key.id,
        installation_id: installation.id,
        role_id: role.id,
        journey_id: journey.id,
        unit_id: unit.id,
      },
    };

    await step("control: the valid requests the cases start from succeed", async () => {
      assert.ok(routes.length >= 29, `only ${routes.length} routes`);
      for (const route of routes) {
        if (route.verb === "DELETE") continue;
        const path = route.template.replace(/\{([a-z_]+)\}/g, (_, v: string) => fx.vars[v]!);
        const q = baseQuery(route, fx);
        const url = path + (q ? `?${q}` : "");
        const [json] = route.body ? fc.sample(validBody(route, fx), { numRuns: 1, seed }) : [];
        await ok(route.verb, url, json);
      }
    });

    await step("wrong JSON types for every field of every body", async () => {
      const baseline = await dbDigest(sql);
      for (const route of routes.filter((r) => r.body)) {
        const [valid] = fc.sample(validBody(route, fx), { numRuns: 1, seed });
        const path = route.template.replace(/\{([a-z_]+)\}/g, (_, v: string) => fx.vars[v]!);
        const cases = route.body!.fields.flatMap((f) =>
          fc.sample(wrongValue(f), { numRuns: 6, seed }).map((raw) =>
            described({
              kind: "wrong type (every field)",
              method: route.verb,
              path,
              headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
              body: render(withEntry(entriesOf(valid!), f.name, raw)),
              status: 400,
              field: f.name,
            })
          )
        );
        await Promise.all(cases.map(async (c) => assertJsonError(c, await send(c))));
        counts.set(keyOf(route), (counts.get(keyOf(route)) ?? 0) + cases.length);
      }
      assert.equal(await dbDigest(sql), baseline, "a rejected request wrote to the database");
    });

    for (const route of routes) {
      await step(`${keyOf(route)}: generated hostile requests`, async () => {
        const arbitrary = fc.array(caseArbitrary(route, fx), {
          minLength: batchSize / 2,
          maxLength: batchSize,
        });
        await fc.assert(
          fc.asyncProperty(arbitrary, async (cases) => {
            const before = await dbDigest(sql);
            const results = await Promise.all(cases.map(send));
            counts.set(keyOf(route), (counts.get(keyOf(route)) ?? 0) + cases.length);
            cases.forEach((c, i) => assertJsonError(c, results[i]!));
            const after = await dbDigest(sql);
            assert.equal(
              after,
              before,
              `rejected requests wrote to the database:\n${
                cases.map((c) => fc.stringify(c)).join("\n")
              }`,
            );
          }),
          { numRuns: batchesPerRoute, seed },
        );
      });
    }

    await step(
      "a body cut short by the client reaches no handler and is no server fault",
      async () => {
        // The client declares a length, sends part of the body and goes away: the gateway hands a
        // request to its handler only once its body is whole, so nothing runs, nothing is
        // written, and nothing in the log calls it a server fault. A request sent after it on
        // another connection is logged; by then the cut one would have been too.
        const bodyRoutes = routes.filter((r) => r.body !== undefined);
        const cut = fc.tuple(
          fc.constantFrom(...bodyRoutes),
          fc.double({ min: 0, max: 0.99, noNaN: true }),
          fc.nat(),
        );
        const before = await dbDigest(sql);
        await fc.assert(
          fc.asyncProperty(cut, async ([route, at, n]) => {
            const [valid] = fc.sample(validBody(route, fx), { numRuns: 1, seed: n });
            const bytes = new TextEncoder().encode(JSON.stringify(valid));
            const path = route.template.replace(/\{([a-z_]+)\}/g, (_, v: string) => fx.vars[v]!);
            const requestId = `hostile-cut-${n}-${crypto.randomUUID()}`;
            const conn = await Deno.connect({ hostname: "127.0.0.1", port: gatewayPort });
            const head = [
              `${route.verb} ${path} HTTP/1.1`,
              "host: 127.0.0.1",
              `authorization: Bearer ${token}`,
              "content-type: application/json",
              `content-length: ${bytes.length}`,
              `x-request-id: ${requestId}`,
              "",
              "",
            ].join("\r\n");
            await writeAll(conn, new TextEncoder().encode(head));
            await writeAll(conn, bytes.subarray(0, Math.floor(bytes.length * at)));
            await new Promise((r) => setTimeout(r, 20));
            conn.close();
            const after = `${requestId}-after`;
            const answered = await fetch(`http://127.0.0.1:${gatewayPort}${path}`, {
              method: "GET",
              headers: { authorization: `Bearer ${token}`, "x-request-id": after },
            });
            await answered.body?.cancel();
            const logged = () =>
              stack.procs.gateway.lines.map((l) => {
                try {
                  return JSON.parse(l);
                } catch {
                  return undefined;
                }
              }).filter((e) => e?.msg === "request");
            for (let i = 0; i < 500 && !logged().some((e) => e.request_id === after); i++) {
              await new Promise((r) => setTimeout(r, 10));
            }
            counts.set(keyOf(route), (counts.get(keyOf(route)) ?? 0) + 1);
            assert.ok(
              logged().some((e) => e.request_id === after),
              `no access log line for ${after}`,
            );
            const cutLines = logged().filter((e) => e.request_id === requestId);
            assert.deepEqual(cutLines, [], "a request whose body never came whole was handled");
          }),
          { numRuns: 30, seed },
        );
        assert.equal(await dbDigest(sql), before, "a body cut short wrote to the database");
      },
    );

    await step(
      "requests past the HTTP server's own limits: a 4xx with the JSON error body, never a 5xx",
      async () => {
        // The listener answers these itself, before the gateway's handler runs, with its JSON
        // error body (431 for a head over 64 KiB or 100 fields, 400 for one it cannot read), and
        // closes.
        const pad = (n: number) => "a".repeat(n);
        const cases: Array<[string, string]> = [
          ["a 100 KB header", `GET /v1/core/roles HTTP/1.1\r\nhost: x\r\nx-big: ${pad(100_000)}`],
          ["a 1 MB header", `GET /v1/core/roles HTTP/1.1\r\nhost: x\r\nx-big: ${pad(1_000_000)}`],
          [
            "200 headers",
            `GET /v1/core/roles HTTP/1.1\r\nhost: x${
              Array.from({ length: 200 }, (_, i) => `\r\nx-h${i}: v`).join("")
            }`,
          ],
          ["a 100 KB path", `GET /v1/core/roles/${pad(100_000)} HTTP/1.1\r\nhost: x`],
          ["a garbage request line", "\u0000\u0001\u0002 garbage"],
          ["a request line with two spaces", "GET /v1/core/roles  HTTP/1.1\r\nhost: x"],
          ["a NUL in a header", "GET /v1/core/roles HTTP/1.1\r\nhost: x\r\nx-a: a\u0000b"],
          ["an unknown HTTP version", "GET /v1/core/roles HTTP/7.0\r\nhost: x"],
        ];
        for (const [name, head] of cases) {
          const conn = await Deno.connect({ hostname: "127.0.0.1", port: gatewayPort });
          const writing = writeAll(
            conn,
            new TextEncoder().encode(`${head}\r\nconnection: close\r\n\r\n`),
          )
            .catch(() => 0);
          // The server may also reset the connection while the request is still arriving.
          const text = new TextDecoder().decode(
            await new Response(conn.readable).arrayBuffer().catch(() => new ArrayBuffer(0)),
          );
          await writing;
          const status = Number(text.split(" ")[1]);
          framing++;
          assert.ok(status >= 400 && status < 500, `${name}: ${text.slice(0, 200)}`);
          const body = JSON.parse(text.slice(text.indexOf("\r\n\r\n") + 4));
          assert.equal(body.error.code, "invalid_argument", name);
        }
        await assertStackAlive(stack);
      },
    );

    await step("every process survived; /readyz is 200; no server fault was logged", async () => {
      await assertStackAlive(stack);
      assert.deepEqual(serverFaults(stack), []);
    });
  } finally {
    await sql.end();
    await stack.stop();
    const total = [...counts.values()].reduce((a, b) => a + b, framing);
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    // deno-lint-ignore no-console
    console.log(
      `hostile input (HTTP): ${total} cases over ${counts.size} routes ` +
        `(+${framing} past the HTTP server's limits), ${failures} failures, in ${seconds} s, ` +
        `seed ${seed}`,
    );
  }
});

Deno.test("condition headers past their 1,024 characters: 400 on a write, ignored by a GET", async (t) => {
  // The OpenAPI document bounds `If-Match` and `If-None-Match` to 1,024 characters; a longer one
  // is malformed, however well-formed its tags: refused where a malformed one is (400, nothing
  // written), ignored by a GET's If-None-Match (a full answer, never a 304).
  const stack = await startStack();
  const api = httpClient(stack.gatewayUrl);
  const sql = openDatabase(stack);
  const token = await stack.token({ sub: "hostile", projects: ["p1"], space: "s1" });
  try {
    const created = await api("POST", "/v1/core/roles", {
      token,
      json: { name: "Long tags", resource_type: "project" },
    });
    assert.equal(created.status, 201, created.text);
    const role = created.body;
    const path = `/v1/core/roles/${role.id}`;
    // The current etag first, then other tags up to past the limit: a list that would hold.
    const list = (first: string) => {
      const tags = [`"${first}"`];
      while (tags.join(", ").length <= 1024) tags.push(`"t${tags.length}"`);
      return tags.join(", ");
    };
    const current = list(role.etag);
    const other = list("stale");
    assert.ok(current.length > 1024 && current.length < 1100);
    const before = await dbDigest(sql);
    const cases: Array<[string, string, Record<string, string>, unknown?]> = [
      ["PUT", path, { "if-match": current }, { name: "Renamed", resource_type: "project" }],
      ["PUT", path, { "if-none-match": other }, { name: "Renamed", resource_type: "project" }],
      ["DELETE", path, { "if-match": current }],
      ["DELETE", path, { "if-none-match": other }],
      ["POST", "/v1/core/roles", { "if-none-match": other }, { name: "New", resource_type: "p" }],
      ["POST", "/v1/core/roles", { "if-match": `"${"a".repeat(1100)}"` }, {
        name: "New",
        resource_type: "p",
      }],
      ["GET", path, { "if-match": current }],
    ];
    for (const [method, url, headers, json] of cases) {
      await t.step(`${method} ${Object.keys(headers)[0]}`, async () => {
        const res = await api(method, url, {
          token,
          headers,
          ...(json !== undefined ? { json } : {}),
        });
        assert.equal(res.status, 400, `${method} ${url}: ${res.status} ${res.text}`);
        assert.equal(res.body.error.code, "invalid_argument");
        assert.match(res.body.error.message, /1,?024 characters/);
      });
    }
    assert.equal(await dbDigest(sql), before, "a refused condition wrote to the database");
    await t.step("a GET ignores an If-None-Match past the limit", async () => {
      const res = await api("GET", path, { token, headers: { "if-none-match": current } });
      assert.equal(res.status, 200, res.text);
      assert.equal(res.body.id, role.id);
      const held = await api("GET", path, {
        token,
        headers: { "if-none-match": `"${role.etag}"` },
      });
      assert.equal(held.status, 304);
    });
    await assertStackAlive(stack);
  } finally {
    await sql.end();
    await stack.stop();
  }
});
