import assert from "node:assert/strict";
import {
  create,
  createFileRegistry,
  type DescMessage,
  fromBinary,
  fromJson,
  type JsonValue,
  type Message,
  toBinary,
} from "@bufbuild/protobuf";
import {
  DescriptorProtoSchema,
  DurationSchema,
  FieldMaskSchema,
  file_google_protobuf_duration,
  file_google_protobuf_field_mask,
  file_google_protobuf_struct,
  file_google_protobuf_timestamp,
  file_google_protobuf_wrappers,
  FileDescriptorProtoSchema,
  type Timestamp,
  timestampDate,
  timestampFromDate,
  TimestampSchema,
  ValueSchema,
} from "@bufbuild/protobuf/wkt";
import {
  ClientSchema,
  ClientStatus,
  ClientType,
  TokenEndpointAuthMethod,
} from "../gen/registry/oauth/v1/client_pb.ts";
import { ClientKeySchema, ClientKeyStatus } from "../gen/registry/oauth/v1/client_key_pb.ts";
import { ClientSecretSchema } from "../gen/registry/oauth/v1/client_secret_pb.ts";
import { Audience, OAuthConfigSchema } from "../gen/registry/oauth/v1/config_pb.ts";
import {
  InstallationSchema,
  InstallationStatus,
} from "../gen/registry/oauth/v1/installation_pb.ts";
import {
  ConsentInstallationRequestSchema,
  CreateClientKeyRequestSchema,
  ListClientsRequestSchema,
  ListClientsResponseSchema,
} from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import {
  decodeMessage,
  decodeScalarParam,
  encodeMessage,
  isoMillis,
  maxBodyDepth,
  nestsDeeperThan,
  repeatedMember,
} from "./json_codec.ts";

const wkts = [
  file_google_protobuf_duration,
  file_google_protobuf_field_mask,
  file_google_protobuf_struct,
  file_google_protobuf_timestamp,
  file_google_protobuf_wrappers,
];

// A synthetic message with the field kinds the OAuth API does not use (built at run time from a
// FileDescriptorProto, so the codec is exercised on a schema it was not written for).
function field(
  name: string,
  number: number,
  type: string,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return { name, number, type: `TYPE_${type}`, label: "LABEL_OPTIONAL", ...extra };
}
function mapEntry(name: string, key: string, value: string): Record<string, unknown> {
  return {
    name,
    field: [field("key", 1, key), field("value", 2, value)],
    options: { mapEntry: true },
  };
}
const repeated = { label: "LABEL_REPEATED" };
const sampleFile = fromJson(FileDescriptorProtoSchema, {
  name: "test/sample.proto",
  package: "test.v1",
  syntax: "proto3",
  dependency: wkts.map((f) => f.proto.name),
  messageType: [{
    name: "Sample",
    field: [
      field("big", 1, "INT64"),
      field("small", 2, "UINT32"),
      field("ratio", 3, "DOUBLE"),
      field("f", 4, "FLOAT"),
      field("data", 5, "BYTES"),
      field("counts", 6, "MESSAGE", { ...repeated, typeName: ".test.v1.Sample.CountsEntry" }),
      field("names", 7, "MESSAGE", { ...repeated, typeName: ".test.v1.Sample.NamesEntry" }),
      field("a", 8, "STRING", { oneofIndex: 0 }),
      field("b", 9, "INT32", { oneofIndex: 0 }),
      field("ttl", 10, "MESSAGE", { typeName: ".google.protobuf.Duration" }),
      field("wrapped", 11, "MESSAGE", { typeName: ".google.protobuf.Int32Value" }),
      field("child", 12, "MESSAGE", { typeName: ".test.v1.Sample" }),
      field("children", 13, "MESSAGE", { ...repeated, typeName: ".test.v1.Sample" }),
      field("mask", 14, "MESSAGE", { typeName: ".google.protobuf.FieldMask" }),
      field("meta", 15, "MESSAGE", { typeName: ".google.protobuf.Struct" }),
      field("flag", 16, "BOOL"),
      field("at", 17, "MESSAGE", { typeName: ".google.protobuf.Timestamp" }),
      field("huge", 18, "UINT64"),
      field("val", 19, "MESSAGE", { typeName: ".google.protobuf.Value" }),
      field("metas", 20, "MESSAGE", { ...repeated, typeName: ".google.protobuf.Struct" }),
    ],
    nestedType: [
      mapEntry("CountsEntry", "STRING", "INT32"),
      mapEntry("NamesEntry", "INT64", "STRING"),
    ],
    oneofDecl: [{ name: "choice" }],
  }],
} as JsonValue);
const SampleSchema: DescMessage = createFileRegistry(
  sampleFile,
  (name) => wkts.find((f) => f.proto.name === name),
).getMessage("test.v1.Sample")!;

type Loose = Record<string, unknown>;
function decodeLoose(schema: DescMessage, json: unknown) {
  const result = decodeMessage(schema, json);
  return { ...result, message: result.message as unknown as Loose };
}
function violationsOf(schema: DescMessage, json: unknown) {
  return decodeMessage(schema, json).violations;
}
function encodeLoose(schema: DescMessage, init: Loose): Loose {
  const message = create(schema) as Message & Loose;
  Object.assign(message, init);
  return encodeMessage(schema, message);
}

const oauthConfigKeys = [
  "project_id",
  "application_name",
  "support_email",
  "logo_uri",
  "homepage_uri",
  "privacy_policy_uri",
  "terms_of_service_uri",
  "authorized_domains",
  "audience",
  "publishing_status",
  "created_at",
  "updated_at",
  "secret_max_lifetime_seconds",
  "scopes",
  "etag",
];

// ----- decoding: keys -------------------------------------------------------------------------

Deno.test("decode: a valid body sets fields by local name", () => {
  const { message, violations, keys } = decodeMessage(OAuthConfigSchema, {
    application_name: "Acme",
    support_email: "help@acme.example",
    authorized_domains: ["acme.example"],
    audience: "internal",
  });
  assert.deepEqual(violations, []);
  assert.deepEqual(keys, ["application_name", "support_email", "authorized_domains", "audience"]);
  assert.equal(message.applicationName, "Acme");
  assert.equal(message.supportEmail, "help@acme.example");
  assert.deepEqual(message.authorizedDomains, ["acme.example"]);
  assert.equal(message.audience, Audience.INTERNAL);
  assert.equal(message.logoUri, undefined);
});

Deno.test("decode: unknown and camelCase keys are rejected", () => {
  assert.deepEqual(violationsOf(OAuthConfigSchema, { foo: 1, applicationName: "Acme" }), [
    { field: "foo", description: "unknown field" },
    { field: "applicationName", description: "unknown field" },
  ]);
});

Deno.test("decode: an own __proto__ key is an unknown field and pollutes nothing", () => {
  const json = JSON.parse('{"__proto__": {"polluted": true}, "application_name": "Acme"}');
  const { message, violations, keys } = decodeMessage(OAuthConfigSchema, json);
  assert.deepEqual(violations, [{ field: "__proto__", description: "unknown field" }]);
  assert.deepEqual(keys, ["application_name"]);
  assert.equal(({} as Loose).polluted, undefined);
  assert.equal((message as unknown as Loose).polluted, undefined);
  assert.equal(
    Object.getPrototypeOf(message),
    Object.getPrototypeOf(create(OAuthConfigSchema)),
  );
  // Other Object.prototype names are unknown fields too, not lookups on a plain object.
  assert.deepEqual(violationsOf(OAuthConfigSchema, { constructor: 1, toString: 1 }), [
    { field: "constructor", description: "unknown field" },
    { field: "toString", description: "unknown field" },
  ]);
});

Deno.test("decode: output-only fields are rejected", () => {
  assert.deepEqual(
    violationsOf(OAuthConfigSchema, {
      project_id: "p1",
      publishing_status: "testing",
      created_at: "2026-01-02T03:04:05Z",
    }),
    ["project_id", "publishing_status", "created_at"].map((f) => ({
      field: f,
      description: "is output only and cannot be set",
    })),
  );
  assert.deepEqual(violationsOf(ClientSecretSchema, { secret: "ocs_x" }), [
    { field: "secret", description: "is output only and cannot be set" },
  ]);
});

Deno.test("decode: keys lists the known keys present, in input order", () => {
  const { keys } = decodeMessage(OAuthConfigSchema, {
    audience: "external",
    bogus: 1,
    logo_uri: null,
    application_name: 5,
    project_id: "p",
  });
  assert.deepEqual(keys, ["audience", "logo_uri", "application_name", "project_id"]);
  assert.deepEqual(decodeMessage(OAuthConfigSchema, {}).keys, []);
});

Deno.test("decode: fieldPrefix prefixes every path", () => {
  const { violations } = decodeMessage(
    ClientSchema,
    { foo: 1, redirect_uris: [1] },
    { fieldPrefix: "client" },
  );
  assert.deepEqual(violations, [
    { field: "client.foo", description: "unknown field" },
    { field: "client.redirect_uris[0]", description: "must be a string" },
  ]);
});

Deno.test("decode: the body must be a JSON object", () => {
  for (const body of [[], [{}], "x", 1, null, true]) {
    const { violations, keys } = decodeMessage(OAuthConfigSchema, body);
    assert.deepEqual(
      violations,
      [{ field: "", description: "must be a JSON object" }],
      String(body),
    );
    assert.deepEqual(keys, []);
  }
  assert.deepEqual(decodeMessage(OAuthConfigSchema, [], { fieldPrefix: "config" }).violations, [
    { field: "config", description: "must be a JSON object" },
  ]);
});

// ----- decoding: null -------------------------------------------------------------------------

Deno.test("decode: null leaves explicit-presence fields unset and is rejected elsewhere", () => {
  const ok = decodeMessage(OAuthConfigSchema, { support_email: null, logo_uri: null });
  assert.deepEqual(ok.violations, []);
  assert.deepEqual(ok.keys, ["support_email", "logo_uri"]);
  assert.equal(ok.message.supportEmail, undefined);
  assert.equal(Object.hasOwn(ok.message, "supportEmail"), false);

  assert.deepEqual(
    violationsOf(OAuthConfigSchema, {
      application_name: null,
      authorized_domains: null,
      audience: null,
    }),
    ["application_name", "authorized_domains", "audience"].map((f) => ({
      field: f,
      description: "must not be null",
    })),
  );
  // Singular message fields take null as unset.
  const sample = decodeLoose(SampleSchema, { child: null, ttl: null });
  assert.deepEqual(sample.violations, []);
  assert.equal(sample.message.child, undefined);
});

// ----- decoding: scalars ----------------------------------------------------------------------

Deno.test("decode: wrong JSON types are rejected per field, all of them", () => {
  assert.deepEqual(
    violationsOf(ClientSchema, {
      name: 5,
      type: 1,
      redirect_uris: "https://a.example/cb",
      status: true,
      javascript_origins: [{}],
    }),
    [
      { field: "name", description: "must be a string" },
      { field: "type", description: 'must be one of "web", "spa", "native"' },
      { field: "redirect_uris", description: "must be an array" },
      { field: "status", description: 'must be one of "active", "suspended"' },
      { field: "javascript_origins[0]", description: "must be a string" },
    ],
  );
  assert.deepEqual(violationsOf(ListClientsResponseSchema, { has_more: "true" }), [
    { field: "has_more", description: "must be a boolean" },
  ]);
  assert.deepEqual(violationsOf(ListClientsResponseSchema, { has_more: 1 }), [
    { field: "has_more", description: "must be a boolean" },
  ]);
  assert.equal(decodeMessage(ListClientsResponseSchema, { has_more: true }).message.hasMore, true);
});

Deno.test("decode: enums are lower-case names without prefix, never the zero value", () => {
  const ok = decodeMessage(ClientSchema, { type: "web", status: "suspended" });
  assert.deepEqual(ok.violations, []);
  assert.equal(ok.message.type, ClientType.WEB);
  assert.equal(ok.message.status, ClientStatus.SUSPENDED);
  assert.equal(decodeMessage(ClientSchema, { type: "native" }).message.type, ClientType.NATIVE);
  for (const bad of ["WEB", "CLIENT_TYPE_WEB", "unspecified", "UNSPECIFIED", "Web", "", 1, 0]) {
    assert.deepEqual(
      violationsOf(ClientSchema, { type: bad }),
      [{ field: "type", description: 'must be one of "web", "spa", "native"' }],
      String(bad),
    );
  }
});

Deno.test("decode: strings must be valid Unicode without NUL", () => {
  assert.deepEqual(violationsOf(ClientSchema, { name: "a\ud800b" }), [
    { field: "name", description: "must be valid Unicode" },
  ]);
  assert.deepEqual(violationsOf(ClientSchema, { name: "\udc00" }), [
    { field: "name", description: "must be valid Unicode" },
  ]);
  assert.deepEqual(violationsOf(ClientSchema, { name: "a\u0000b" }), [
    { field: "name", description: "must not contain NUL characters" },
  ]);
  assert.deepEqual(violationsOf(ClientSchema, { redirect_uris: ["ok", "\u0000"] }), [
    { field: "redirect_uris[1]", description: "must not contain NUL characters" },
  ]);
  const ok = decodeMessage(ClientSchema, { name: "Ünïcødé 😀 \u0001" });
  assert.deepEqual(ok.violations, []);
  assert.equal(ok.message.name, "Ünïcødé 😀 \u0001");
});

Deno.test("decode: list items are checked one by one with indexed paths", () => {
  const { violations, message } = decodeMessage(ClientSchema, {
    redirect_uris: ["https://a.example/cb", 5, null, "https://b.example/cb"],
  });
  assert.deepEqual(violations, [
    { field: "redirect_uris[1]", description: "must be a string" },
    { field: "redirect_uris[2]", description: "must not be null" },
  ]);
  assert.deepEqual(message.redirectUris, ["https://a.example/cb", "https://b.example/cb"]);
  assert.deepEqual(
    decodeMessage(ConsentInstallationRequestSchema, { scopes: ["a", "b"] }).message.scopes,
    ["a", "b"],
  );
});

Deno.test("decode: lists longer than 10000 items are rejected at once", () => {
  const long = new Array<unknown>(10_001).fill(5);
  assert.deepEqual(violationsOf(ConsentInstallationRequestSchema, { scopes: long }), [
    { field: "scopes", description: "must have at most 10000 items" },
  ]);
  const max = new Array<string>(10_000).fill("s");
  assert.deepEqual(violationsOf(ConsentInstallationRequestSchema, { scopes: max }), []);
});

Deno.test("decode: 32-bit integers are JSON integers in range", () => {
  const ok = decodeLoose(SampleSchema, { small: 4294967295, b: -0 });
  assert.deepEqual(ok.violations, []);
  assert.equal(ok.message.small, 4294967295);
  assert.ok(Object.is((ok.message.choice as { value: number }).value, 0));
  const range = "must be an integer between 0 and 4294967295";
  const cases: [unknown, string][] = [
    [1.5, "must be an integer"],
    [JSON.parse("1e309"), "must be an integer"],
    ["5", "must be an integer"],
    [-1, range],
    [4294967296, range],
  ];
  for (const [value, description] of cases) {
    assert.deepEqual(violationsOf(SampleSchema, { small: value }), [
      { field: "small", description },
    ], String(value));
  }
});

Deno.test("decode: 64-bit integers are safe numbers or decimal strings, as bigints", () => {
  const ok = decodeLoose(SampleSchema, { big: -9007199254740991, huge: "18446744073709551615" });
  assert.deepEqual(ok.violations, []);
  assert.equal(ok.message.big, -9007199254740991n);
  assert.equal(ok.message.huge, 18446744073709551615n);
  assert.equal(
    decodeLoose(SampleSchema, { big: "-9223372036854775808" }).message.big,
    -(2n ** 63n),
  );
  assert.equal(decodeLoose(SampleSchema, { big: "0".repeat(30) + "12" }).message.big, 12n);
  assert.equal(decodeLoose(SampleSchema, { big: "-0" }).message.big, 0n);
  const int64Range = "must be an integer between -9223372036854775808 and 9223372036854775807";
  const cases: [unknown, string][] = [
    ["9223372036854775808", int64Range],
    ["1" + "0".repeat(500), int64Range],
    ["1.0", "must be an integer"],
    ["1e3", "must be an integer"],
    [" 1", "must be an integer"],
    [1.5, "must be an integer"],
    [9007199254740992, "must be an integer; use a decimal string beyond ±9007199254740991"],
  ];
  for (const [value, description] of cases) {
    assert.deepEqual(violationsOf(SampleSchema, { big: value }), [
      { field: "big", description },
    ], String(value));
  }
  assert.deepEqual(violationsOf(SampleSchema, { huge: -1 }), [
    { field: "huge", description: "must be an integer between 0 and 18446744073709551615" },
  ]);
});

Deno.test("decode: floats, doubles and bytes", () => {
  const ok = decodeLoose(SampleSchema, { ratio: 0.25, f: -1.5, data: "AQID/w==" });
  assert.deepEqual(ok.violations, []);
  assert.equal(ok.message.ratio, 0.25);
  assert.deepEqual(ok.message.data, new Uint8Array([1, 2, 3, 255]));
  assert.deepEqual(
    decodeLoose(SampleSchema, { data: "AQID_w" }).message.data,
    new Uint8Array([1, 2, 3, 255]),
  );
  assert.deepEqual(
    violationsOf(SampleSchema, { ratio: "NaN", f: 1e39, data: "AQID/w=" }),
    [
      { field: "ratio", description: "must be a finite number" },
      { field: "f", description: "is out of range for a 32-bit float" },
      { field: "data", description: "must be a base64-encoded string" },
    ],
  );
  assert.deepEqual(decodeLoose(SampleSchema, { f: 3.4028234663852886e38 }).violations, []);
  assert.deepEqual(violationsOf(SampleSchema, { f: -3.5e38 }), [
    { field: "f", description: "is out of range for a 32-bit float" },
  ]);
  assert.deepEqual(violationsOf(SampleSchema, { data: "A" }), [
    { field: "data", description: "must be a base64-encoded string" },
  ]);
});

// ----- decoding: messages, maps, oneofs -------------------------------------------------------

Deno.test("decode: nested messages report paths through their parents", () => {
  const { violations, message } = decodeLoose(SampleSchema, {
    child: { small: -1, child: { bogus: 1, flag: true } },
    children: [{ flag: true }, { flag: "no" }, 3],
  });
  assert.deepEqual(violations, [
    { field: "child.small", description: "must be an integer between 0 and 4294967295" },
    { field: "child.child.bogus", description: "unknown field" },
    { field: "children[1].flag", description: "must be a boolean" },
    { field: "children[2]", description: "must be a JSON object" },
  ]);
  const child = message.child as Loose;
  assert.equal((child.child as Loose).flag, true);
  assert.equal(((message.children as Loose[])[0]!).flag, true);
  assert.equal((child as Message).$typeName, "test.v1.Sample");
});

Deno.test("decode: nesting deeper than 32 objects is rejected without recursing further", () => {
  // DescriptorProto.nested_type is recursive: build {nested_type: [{nested_type: [...]}]}.
  function deep(levels: number): Loose {
    let json: Loose = { name: "leaf" };
    for (let i = 1; i < levels; i++) json = { nested_type: [json] };
    return json;
  }
  assert.deepEqual(violationsOf(DescriptorProtoSchema, deep(32)), []);
  const path = Array.from({ length: 32 }, () => "nested_type[0]").join(".");
  assert.deepEqual(violationsOf(DescriptorProtoSchema, deep(33)), [
    { field: path, description: "nested too deeply" },
  ]);
  // A hostile depth is cut at the limit too (and does not overflow the stack).
  assert.deepEqual(violationsOf(DescriptorProtoSchema, deep(200_000)), [
    { field: path, description: "nested too deeply" },
  ]);
  // The same through a singular message field of a synthetic schema.
  let json: Loose = {};
  for (let i = 0; i < 40; i++) json = { child: json };
  const violations = violationsOf(SampleSchema, json);
  assert.equal(violations.length, 1);
  assert.equal(violations[0]!.field, Array.from({ length: 32 }, () => "child").join("."));
  assert.equal(violations[0]!.description, "nested too deeply");
});

Deno.test("decode: maps check keys and values", () => {
  const json = JSON.parse(
    '{"counts": {"a": 1, "__proto__": 2, "bad": "x", "n": null}, "names": {"-5": "x", "007": "y", "z": "w", "99999999999999999999": "v"}}',
  );
  const { violations, message } = decodeLoose(SampleSchema, json);
  assert.deepEqual(violations, [
    { field: 'counts["bad"]', description: "must be an integer" },
    { field: 'counts["n"]', description: "must not be null" },
    { field: 'names["z"]', description: "key must be an integer" },
    {
      field: 'names["99999999999999999999"]',
      description: "key must be an integer between -9223372036854775808 and 9223372036854775807",
    },
  ]);
  const counts = message.counts as Loose;
  assert.deepEqual(Object.keys(counts), ["a", "__proto__"]);
  assert.equal(Object.getPrototypeOf(counts), Object.prototype);
  assert.equal(Object.getOwnPropertyDescriptor(counts, "__proto__")?.value, 2);
  assert.deepEqual({ ...(message.names as Loose) }, { "-5": "x", "7": "y" });
  assert.deepEqual(violationsOf(SampleSchema, { counts: [] }), [
    { field: "counts", description: "must be a JSON object" },
  ]);
});

Deno.test("decode: a Struct is a JSON object, read as the JsonObject its field holds", () => {
  const json = JSON.parse(
    '{"meta": {"a": 1, "b": [true, null, "x", {"c": -2.5}], "__proto__": {"z": 1}, "": {}}}',
  );
  const { message, violations } = decodeLoose(SampleSchema, json);
  assert.deepEqual(violations, []);
  const meta = message.meta as Loose;
  assert.equal(Object.getPrototypeOf(meta), Object.prototype, "a plain object, not a message");
  assert.equal(JSON.stringify(meta), JSON.stringify(json.meta));
  assert.notEqual(meta, json.meta, "a copy");
  assert.ok(Object.hasOwn(meta, "__proto__"), "__proto__ is a member, as data");
  assert.equal(({} as Loose).z, undefined, "no prototype touched");
  // It survives the wire as it is (protobuf-es's binary form of a Struct field).
  const sample = create(SampleSchema) as Message & Loose;
  Object.assign(sample, { meta });
  const back = fromBinary(SampleSchema, toBinary(SampleSchema, sample)) as Message & Loose;
  assert.equal(JSON.stringify(back.meta), JSON.stringify(json.meta));
  // An empty object is a Struct; null leaves the field unset; lists of Structs too.
  assert.deepEqual(decodeLoose(SampleSchema, { meta: {} }).message.meta, {});
  assert.equal(decodeLoose(SampleSchema, { meta: null }).message.meta, undefined);
  const list = decodeLoose(SampleSchema, { metas: [{ a: 1 }, { b: [2] }] });
  assert.deepEqual(list.violations, []);
  assert.deepEqual(list.message.metas, [{ a: 1 }, { b: [2] }]);
});

Deno.test("decode: a Struct must be an object of JSON values and valid strings", () => {
  for (const value of [[], [{}], "x", 1, true]) {
    assert.deepEqual(violationsOf(SampleSchema, { meta: value }), [
      { field: "meta", description: "must be a JSON object" },
    ], JSON.stringify(value));
  }
  assert.deepEqual(violationsOf(SampleSchema, { metas: [{}, 2, null] }), [
    { field: "metas[1]", description: "must be a JSON object" },
    { field: "metas[2]", description: "must not be null" },
  ]);
  assert.deepEqual(
    violationsOf(SampleSchema, {
      meta: { a: "nul\0", b: ["ok", "\ud800"], "k\0": 1, c: { d: "\udc00x" } },
    }),
    [
      { field: 'meta["k\\u0000"]', description: "key must not contain NUL characters" },
      { field: 'meta["a"]', description: "must not contain NUL characters" },
      { field: 'meta["c"]["d"]', description: "must be valid Unicode" },
      { field: 'meta["b"][1]', description: "must be valid Unicode" },
    ],
  );
  // Not JSON at all (a caller that did not JSON.parse): refused rather than copied.
  for (const value of [Number.NaN, undefined, () => 1, 1n, new Date(0)]) {
    assert.deepEqual(violationsOf(SampleSchema, { meta: { a: [value] } }), [
      { field: "meta", description: "must hold only JSON values" },
    ]);
  }
});

Deno.test("decode: a Struct nests at most 16 objects and arrays deep, without recursing", () => {
  /** A Struct of `levels` levels, objects and arrays in turn. */
  function deep(levels: number): Loose {
    let inner: unknown = "leaf";
    for (let i = 1; i < levels; i++) inner = i % 2 ? { a: inner } : [inner];
    return { top: inner };
  }
  assert.deepEqual(violationsOf(SampleSchema, { meta: deep(16) }), []);
  assert.equal(
    JSON.stringify(decodeLoose(SampleSchema, { meta: deep(16) }).message.meta),
    JSON.stringify(deep(16)),
  );
  const tooDeep = [{
    field: "meta",
    description: "nested too deeply: at most 16 levels of objects and arrays",
  }];
  assert.deepEqual(violationsOf(SampleSchema, { meta: deep(17) }), tooDeep);
  assert.deepEqual(violationsOf(SampleSchema, { meta: deep(200_000) }), tooDeep);
  // A wide Struct is fine, a huge list is refused before its items are read.
  const wide = Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`k${i}`, { v: [i] }]));
  assert.deepEqual(violationsOf(SampleSchema, { meta: wide }), []);
  assert.deepEqual(violationsOf(SampleSchema, { meta: { a: new Array(10_001).fill(0) } }), [
    { field: "meta", description: "holds a list of more than 10000 items" },
  ]);
});

Deno.test("CreateClientKeyRequest and ClientKey: jwk in, jwk and private_jwk out", () => {
  const jwk = { kty: "OKP", crv: "Ed25519", x: "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo" };
  const { message, violations } = decodeMessage(CreateClientKeyRequestSchema, {
    jwk,
    expires_at: "2030-01-02T03:04:05Z",
  });
  assert.deepEqual(violations, []);
  assert.deepEqual(message.jwk, jwk);
  assert.deepEqual(
    decodeMessage(CreateClientKeyRequestSchema, { generate: "EdDSA" }).violations,
    [],
  );
  assert.deepEqual(violationsOf(CreateClientKeyRequestSchema, { jwk: "x", id: "key_1" }), [
    { field: "jwk", description: "must be a JSON object" },
    { field: "id", description: "unknown field" },
  ]);
  const key = {
    id: "key_1",
    kid: "k1",
    algorithm: "EdDSA",
    jwk: { ...jwk, kid: "k1", alg: "EdDSA", use: "sig" },
    status: ClientKeyStatus.ACTIVE,
  };
  const listed = encodeMessage(ClientKeySchema, create(ClientKeySchema, key));
  assert.deepEqual(Object.keys(listed), [
    "id",
    "client_id",
    "kid",
    "algorithm",
    "jwk",
    "created_at",
    "expires_at",
    "last_used_at",
    "status",
    "etag",
  ]);
  assert.deepEqual(listed.jwk, key.jwk);
  assert.equal(listed.status, "active");
  const generated = encodeMessage(
    ClientKeySchema,
    create(ClientKeySchema, {
      ...key,
      privateKey: { case: "privateJwk", value: { ...key.jwk, d: "secret" } },
    }),
  );
  assert.deepEqual(generated.private_jwk, { ...key.jwk, d: "secret" });
  // Output only: a caller cannot send a key's public JWK back as a resource.
  assert.deepEqual(violationsOf(ClientKeySchema, { jwk: {} }), [
    { field: "jwk", description: "is output only and cannot be set" },
  ]);
});

Deno.test("decode: one member of a oneof at a time", () => {
  const ok = decodeLoose(SampleSchema, { a: "x" });
  assert.deepEqual(ok.violations, []);
  assert.deepEqual(ok.message.choice, { case: "a", value: "x" });
  const both = decodeLoose(SampleSchema, { b: 2, a: "x" });
  assert.deepEqual(both.violations, [{ field: "a", description: "only one of a, b may be set" }]);
  assert.deepEqual(both.message.choice, { case: "b", value: 2 });
  // null does not count as setting the oneof.
  assert.deepEqual(violationsOf(SampleSchema, { a: null, b: 2 }), []);
});

Deno.test("decode: well-known types", () => {
  const ok = decodeLoose(SampleSchema, {
    ttl: "-1.5s",
    wrapped: 7,
    mask: "name,redirect_uris,a.b_c",
  });
  assert.deepEqual(ok.violations, []);
  const ttl = ok.message.ttl as { seconds: bigint; nanos: number; $typeName: string };
  assert.equal(ttl.$typeName, DurationSchema.typeName);
  assert.equal(ttl.seconds, -1n);
  assert.equal(ttl.nanos, -500_000_000);
  assert.equal((ok.message.wrapped as Loose).value, 7);
  assert.deepEqual((ok.message.mask as Loose).paths, ["name", "redirect_uris", "a.b_c"]);
  assert.deepEqual((decodeLoose(SampleSchema, { mask: "" }).message.mask as Loose).paths, []);
  assert.deepEqual(
    violationsOf(SampleSchema, {
      ttl: "1.5",
      wrapped: "7",
      mask: "name, type",
      val: 1,
    }),
    [
      { field: "ttl", description: 'must be a duration in seconds such as "1.5s"' },
      { field: "wrapped", description: "must be an integer" },
      { field: "mask", description: "must be a comma-separated list of snake_case field paths" },
      { field: "val", description: "unsupported type" },
    ],
  );
  assert.deepEqual(violationsOf(SampleSchema, { mask: "redirectUris" }), [
    { field: "mask", description: "must be a comma-separated list of snake_case field paths" },
  ]);
});

Deno.test("decode: timestamps are strict RFC 3339", () => {
  function parse(text: string): { seconds: bigint; nanos: number } {
    const { message, violations } = decodeLoose(SampleSchema, { at: text });
    assert.deepEqual(violations, [], text);
    return message.at as { seconds: bigint; nanos: number };
  }
  const cases: [string, string][] = [
    ["2026-01-02T03:04:05Z", "2026-01-02T03:04:05.000Z"],
    ["2026-01-02T03:04:05.1Z", "2026-01-02T03:04:05.100Z"],
    ["2026-01-02T03:04:05.123456789Z", "2026-01-02T03:04:05.123Z"],
    ["2026-01-02T03:04:05+01:30", "2026-01-02T01:34:05.000Z"],
    ["2026-01-02T00:04:05-05:00", "2026-01-02T05:04:05.000Z"],
    ["2024-02-29T23:59:59.999Z", "2024-02-29T23:59:59.999Z"],
    ["2000-02-29T00:00:00Z", "2000-02-29T00:00:00.000Z"],
    ["0001-01-01T00:00:00Z", "0001-01-01T00:00:00.000Z"],
    ["9999-12-31T23:59:59.999999999Z", "9999-12-31T23:59:59.999Z"],
    ["1969-12-31T23:59:59.5Z", "1969-12-31T23:59:59.500Z"],
  ];
  for (const [input, output] of cases) {
    const at = parse(input);
    assert.equal(Number(at.seconds) * 1000 + Math.floor(at.nanos / 1e6), Date.parse(output), input);
    const ts = create(TimestampSchema, at);
    assert.equal(encodeLoose(SampleSchema, { at: ts }).at, output, input);
  }
  assert.equal(parse("2026-01-02T03:04:05.123456789Z").nanos, 123_456_789);

  const bad = [
    "2026-01-02 03:04:05Z",
    "2026-01-02t03:04:05z",
    "2026-01-02T03:04:05",
    "2026-01-02T03:04Z",
    "2026-1-02T03:04:05Z",
    "2026-01-02T03:04:05.Z",
    "2026-01-02T03:04:05.1234567890Z",
    "2026-01-02T03:04:05+0100",
    "2026-01-02T03:04:05+24:00",
    "2026-01-02T03:04:05+01:60",
    "2026-02-30T00:00:00Z",
    "2100-02-29T00:00:00Z",
    "2026-13-01T00:00:00Z",
    "2026-00-01T00:00:00Z",
    "2026-01-00T00:00:00Z",
    "2026-01-02T24:00:00Z",
    "2026-01-02T03:60:00Z",
    "2026-01-02T03:04:60Z",
    "0000-12-31T00:00:00Z",
    "0001-01-01T00:00:00+00:01",
    "9999-12-31T23:59:59-00:01",
    "+02026-01-02T03:04:05Z",
    "２026-01-02T03:04:05Z",
    "",
  ];
  for (const text of [...bad, 1767323045, null]) {
    const violations = violationsOf(SampleSchema, { at: text });
    if (text === null) assert.deepEqual(violations, []);
    else {
      assert.equal(violations.length, 1, String(text));
      assert.match(violations[0]!.description, /^must be an RFC 3339 timestamp/);
    }
  }
});

// ----- decodeScalarParam ----------------------------------------------------------------------

Deno.test("decodeScalarParam: integers", () => {
  const limit = ListClientsRequestSchema.field.limit!;
  assert.deepEqual(decodeScalarParam(limit, "20"), { value: 20 });
  assert.deepEqual(decodeScalarParam(limit, "-3"), { value: -3 });
  assert.deepEqual(decodeScalarParam(limit, "007"), { value: 7 });
  for (const raw of ["abc", "1.5", "", " 1", "1e3", "+1", "0x10", "٣"]) {
    assert.deepEqual(decodeScalarParam(limit, raw), { violation: "must be an integer" }, raw);
  }
  assert.deepEqual(decodeScalarParam(limit, "99999999999"), {
    violation: "must be an integer between -2147483648 and 2147483647",
  });
  const big = SampleSchema.field.big!;
  assert.deepEqual(decodeScalarParam(big, "9223372036854775807"), {
    value: 9223372036854775807n,
  });
  assert.ok("violation" in decodeScalarParam(big, "9223372036854775808"));
});

Deno.test("decodeScalarParam: strings, bools, enums and the rest", () => {
  const after = ListClientsRequestSchema.field.after!;
  assert.deepEqual(decodeScalarParam(after, "cli_1"), { value: "cli_1" });
  assert.deepEqual(decodeScalarParam(after, ""), { value: "" });
  assert.deepEqual(decodeScalarParam(after, "a\u0000"), {
    violation: "must not contain NUL characters",
  });
  assert.deepEqual(decodeScalarParam(after, "\ud800"), { violation: "must be valid Unicode" });

  const flag = SampleSchema.field.flag!;
  assert.deepEqual(decodeScalarParam(flag, "true"), { value: true });
  assert.deepEqual(decodeScalarParam(flag, "false"), { value: false });
  assert.deepEqual(decodeScalarParam(flag, "1"), { violation: "must be true or false" });

  const type = ClientSchema.field.type!;
  assert.deepEqual(decodeScalarParam(type, "spa"), { value: ClientType.SPA });
  assert.deepEqual(decodeScalarParam(type, "SPA"), {
    violation: 'must be one of "web", "spa", "native"',
  });
  assert.deepEqual(decodeScalarParam(type, "unspecified"), {
    violation: 'must be one of "web", "spa", "native"',
  });

  // A time (a list's `since`, `until`): RFC 3339, as in a JSON body.
  const at = SampleSchema.field.at!;
  const decoded = decodeScalarParam(at, "2026-01-02T03:04:05.5+01:00");
  assert.ok("value" in decoded);
  assert.equal(
    timestampDate(decoded.value as Timestamp).toISOString(),
    "2026-01-02T02:04:05.500Z",
  );
  for (const raw of ["yesterday", "", "2026-01-02", "2026-02-30T00:00:00Z", "1767322245"]) {
    assert.match((decodeScalarParam(at, raw) as { violation: string }).violation, /RFC 3339/, raw);
  }

  const cannot = { violation: "cannot be set in the query string" };
  for (const name of ["ratio", "data", "counts", "child", "children", "a"]) {
    assert.deepEqual(decodeScalarParam(SampleSchema.field[name]!, "1"), cannot, name);
  }
  assert.deepEqual(decodeScalarParam(ClientSchema.field.redirectUris!, "x"), cannot);
});

// ----- encoding -------------------------------------------------------------------------------

Deno.test("encode: an OAuthConfig has exactly its 15 keys, null for unset optionals", () => {
  const config = create(OAuthConfigSchema, {
    projectId: "p1",
    applicationName: "Acme",
    audience: Audience.EXTERNAL,
    createdAt: timestampFromDate(new Date("2026-11-21T10:00:00Z")),
  });
  const json = encodeMessage(OAuthConfigSchema, config);
  assert.deepEqual(Object.keys(json), oauthConfigKeys);
  assert.deepEqual(json, {
    project_id: "p1",
    application_name: "Acme",
    support_email: null,
    logo_uri: null,
    homepage_uri: null,
    privacy_policy_uri: null,
    terms_of_service_uri: null,
    authorized_domains: [],
    audience: "external",
    publishing_status: null,
    created_at: "2026-11-21T10:00:00.000Z",
    updated_at: null,
    secret_max_lifetime_seconds: 0,
    scopes: [],
    etag: "",
  });
  // Empty values of set optionals are kept, not nulled.
  const empty = encodeMessage(OAuthConfigSchema, create(OAuthConfigSchema, { supportEmail: "" }));
  assert.equal(empty.support_email, "");
  assert.equal(empty.application_name, "");
  assert.equal(empty.audience, null);
  assert.equal(JSON.stringify(empty).length > 0, true);
});

Deno.test("encode: a ClientSecret's plaintext key appears only when set", () => {
  const base = {
    id: "sec_1",
    clientId: "cli_1",
    secretHint: "ocs_****abcd",
    createdAt: timestampFromDate(new Date("2026-01-02T03:04:05.678Z")),
  };
  const listed = encodeMessage(ClientSecretSchema, create(ClientSecretSchema, base));
  assert.deepEqual(listed, {
    id: "sec_1",
    client_id: "cli_1",
    secret_hint: "ocs_****abcd",
    created_at: "2026-01-02T03:04:05.678Z",
    expires_at: null,
    last_used_at: null,
    status: null,
    etag: "",
  });
  const created = encodeMessage(
    ClientSecretSchema,
    create(ClientSecretSchema, { ...base, plaintext: { case: "secret", value: "ocs_abcd" } }),
  );
  assert.deepEqual(Object.keys(created), [
    "id",
    "client_id",
    "secret_hint",
    "created_at",
    "expires_at",
    "last_used_at",
    "status",
    "secret",
    "etag",
  ]);
  assert.equal(created.secret, "ocs_abcd");
});

Deno.test("encode: Client and Installation enums, lists and nulls", () => {
  const client = encodeMessage(
    ClientSchema,
    create(ClientSchema, {
      id: "cli_1",
      name: "App",
      type: ClientType.NATIVE,
      redirectUris: ["com.example.app:/cb"],
      status: ClientStatus.ACTIVE,
    }),
  );
  assert.deepEqual(client, {
    id: "cli_1",
    project_id: "",
    name: "App",
    type: "native",
    redirect_uris: ["com.example.app:/cb"],
    javascript_origins: [],
    status: "active",
    created_at: null,
    updated_at: null,
    token_endpoint_auth_method: null,
    dpop_bound_access_tokens: false,
    require_pushed_authorization_requests: false,
    etag: "",
  });
  const installation = encodeMessage(
    InstallationSchema,
    create(InstallationSchema, { status: InstallationStatus.REVOKED, scopes: ["a"] }),
  );
  assert.deepEqual(Object.keys(installation), [
    "id",
    "project_id",
    "account_id",
    "principal_id",
    "application_name",
    "scopes",
    "status",
    "authorized_by_id",
    "authorized_at",
    "created_at",
    "revoked_at",
    "etag",
  ]);
  assert.equal(installation.principal_id, null);
  assert.equal(installation.status, "revoked");
  assert.deepEqual(installation.scopes, ["a"]);
  assert.equal(installation.revoked_at, null);
  // An enum number the schema does not know is written as the number.
  assert.equal(
    encodeMessage(ClientSchema, create(ClientSchema, { type: 9 as ClientType })).type,
    9,
  );
});

Deno.test("encode: nested lists of messages (ListClientsResponse)", () => {
  const json = encodeMessage(
    ListClientsResponseSchema,
    create(ListClientsResponseSchema, {
      data: [create(ClientSchema, { id: "cli_1", type: ClientType.WEB })],
      hasMore: false,
    }),
  );
  assert.deepEqual(Object.keys(json), ["data", "has_more"]);
  assert.equal(json.has_more, false);
  const data = json.data as Loose[];
  assert.equal(data.length, 1);
  assert.equal(data[0]!.type, "web");
  assert.equal(data[0]!.created_at, null);
});

Deno.test("encode: scalars and well-known types of a synthetic schema", () => {
  const json = encodeLoose(SampleSchema, {
    big: 2n ** 53n,
    huge: 5n,
    ratio: Number.NaN,
    f: Number.NEGATIVE_INFINITY,
    data: new Uint8Array([1, 2, 3, 255]),
    counts: JSON.parse('{"x": 1, "__proto__": 2}'),
    names: { "7": "seven" },
    choice: { case: "b", value: 3 },
    ttl: create(DurationSchema, { seconds: -1n, nanos: -500_000_000 }),
    wrapped: create((SampleSchema.field.wrapped!).message!, { value: 4 }),
    child: create(SampleSchema, { flag: true }),
    mask: create(FieldMaskSchema, { paths: ["a", "b.c"] }),
  });
  assert.deepEqual(Object.keys(json), [
    "big",
    "small",
    "ratio",
    "f",
    "data",
    "counts",
    "names",
    "b",
    "ttl",
    "wrapped",
    "child",
    "children",
    "mask",
    "meta",
    "flag",
    "at",
    "huge",
    "val",
    "metas",
  ]);
  assert.equal(json.big, "9007199254740992");
  assert.equal(json.huge, 5);
  assert.equal(json.ratio, "NaN");
  assert.equal(json.f, "-Infinity");
  assert.equal(json.data, "AQID/w==");
  assert.equal(JSON.stringify(json.counts), '{"x":1,"__proto__":2}');
  assert.deepEqual(json.names, { "7": "seven" });
  assert.equal(json.b, 3);
  assert.equal(json.ttl, "-1.500s");
  const ttl = (seconds: bigint, nanos: number) =>
    encodeLoose(SampleSchema, { ttl: create(DurationSchema, { seconds, nanos }) }).ttl;
  assert.equal(ttl(3n, 0), "3s");
  assert.equal(ttl(0n, -1000), "-0.000001s");
  assert.equal(ttl(1n, 1), "1.000000001s");
  assert.equal(json.wrapped, 4);
  assert.equal((json.child as Loose).flag, true);
  assert.equal((json.child as Loose).child, null);
  assert.deepEqual(json.children, []);
  assert.equal(json.mask, "a,b.c");
  assert.equal(json.meta, null);
  assert.equal(json.at, null);
  assert.equal(json.val, null);
  assert.deepEqual(json.metas, []);
  // A Struct is written as the object it is; a Value with the canonical mapping.
  const structs = encodeLoose(SampleSchema, {
    meta: { a: [1, { b: null }], "": "x" },
    metas: [{ c: true }],
    val: create(ValueSchema, { kind: { case: "stringValue", value: "v" } }),
  });
  assert.deepEqual(structs.meta, { a: [1, { b: null }], "": "x" });
  assert.deepEqual(structs.metas, [{ c: true }]);
  assert.equal(structs.val, "v");
  assert.equal(encodeLoose(SampleSchema, { big: -(2n ** 53n) + 1n }).big, -9007199254740991);
  assert.throws(
    () => encodeLoose(SampleSchema, { at: create(TimestampSchema, { seconds: 253402300800n }) }),
    /out of range/,
  );
});

Deno.test("encode: proto2 optional fields are null unless set, even to their default", () => {
  const unset = encodeMessage(DescriptorProtoSchema, create(DescriptorProtoSchema));
  assert.equal(unset.name, null);
  assert.equal(unset.options, null);
  assert.deepEqual(unset.field, []);
  const set = encodeMessage(DescriptorProtoSchema, create(DescriptorProtoSchema, { name: "" }));
  assert.equal(set.name, "");
});

Deno.test("encode then decode round-trips an input message", () => {
  const original = create(ClientSchema, {
    name: "App",
    type: ClientType.SPA,
    redirectUris: ["https://a.example/cb"],
    javascriptOrigins: ["https://a.example"],
    status: ClientStatus.SUSPENDED,
    tokenEndpointAuthMethod: TokenEndpointAuthMethod.NONE,
    dpopBoundAccessTokens: true,
  });
  const json = encodeMessage(ClientSchema, original);
  assert.equal(json.token_endpoint_auth_method, "none");
  assert.equal(json.dpop_bound_access_tokens, true);
  for (const key of ["id", "project_id", "created_at", "updated_at"]) delete json[key];
  const { message, violations } = decodeMessage(ClientSchema, JSON.parse(JSON.stringify(json)));
  assert.deepEqual(violations, []);
  assert.deepEqual(message, original);
});

Deno.test("isoMillis writes what Date.prototype.toISOString writes, at every year and hour", () => {
  const samples = [-62_135_596_800_000, -1, 0, 1, 999, 86_399_999, 86_400_000, 253_402_300_799_999];
  // A pseudo-random walk over the whole range, crossing days back and forth (the cache's edges).
  let x = 1_795_231_394_589;
  for (let i = 0; i < 20_000; i++) {
    x = (x * 48_271 + 12_345) % 253_402_300_799_999;
    samples.push(x - (i % 2 ? 62_135_596_800_000 : 0), x + 86_400_000 * (i % 3) - 1);
  }
  for (const ms of samples) assert.equal(isoMillis(ms), new Date(ms).toISOString(), String(ms));
});

Deno.test("repeatedMember() finds a name its object already has, at any depth, as decoded", () => {
  for (
    const [text, path] of [
      ['{"name":"a","type":"spa","type":"web"}', "type"],
      ['{"a":{"b":[1,{"c":1,"d":2,"c":3}]}}', "a.b[1].c"],
      ['{"meta":{"a b":1,"a b":2}}', 'meta["a b"]'],
      ['{"x":1,"\\u0078":2}', "x"],
      ['[{"k":1},{"k":2,"k":3}]', "[1].k"],
      ['{"s":"{\\"t\\":1,\\"t\\":2}","t":1}', undefined],
      ['{"a":{"k":1},"b":{"k":1},"k":[{"k":1}]}', undefined],
      ['[{},[""]]', undefined],
      ['{"a":{},"b":"a","a":1}', "a"],
      ['{"a":[{}],"b":["a"],"c":{"":[]},"c":1}', "c"],
      ['{"":1,"__proto__":2}', undefined],
      ["[]", undefined],
      ['"x"', undefined],
      ["{}", undefined],
    ] as const
  ) {
    JSON.parse(text); // each is JSON
    assert.equal(repeatedMember(text), path, text);
  }
  // Any depth, without recursion.
  const deep = "[".repeat(100_000) + "]".repeat(100_000);
  assert.equal(repeatedMember(deep), undefined);
  assert.equal(repeatedMember('[[{"a":[{},{"b":1,"b":2}]}]]'), "[0][0].a[1].b");
});

Deno.test("nestsDeeperThan() counts objects and arrays, not brackets in strings", () => {
  assert.equal(nestsDeeperThan("[".repeat(32) + "]".repeat(32), maxBodyDepth), false);
  assert.equal(nestsDeeperThan("[".repeat(33) + "]".repeat(33), maxBodyDepth), true);
  assert.equal(nestsDeeperThan('{"a":{"b":[1,[2]]}}', 3), true);
  assert.equal(nestsDeeperThan('{"a":{"b":[1,2]},"c":[[]]}', 3), false);
  assert.equal(nestsDeeperThan(`{"s":"${"[".repeat(100)}\\"}`, 1), false);
  assert.equal(nestsDeeperThan(`{"s":"\\"${"[".repeat(100)}"}`, 1), false);
  assert.equal(nestsDeeperThan(`{"s":"\\\\"${"[".repeat(100)}}`, 1), true); // the string ends
  assert.equal(nestsDeeperThan("[".repeat(520_000), maxBodyDepth), true); // not JSON: still counted
  assert.equal(nestsDeeperThan('"unterminated [[[[', 1), false);
});
