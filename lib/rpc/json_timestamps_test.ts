import assert from "node:assert/strict";
import { createFileRegistry, type DescMessage, fromJson, type JsonValue } from "@bufbuild/protobuf";
import { file_google_protobuf_timestamp, FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { HealthCheckRequestSchema } from "../../gen/grpc/health/v1/health_pb.ts";
import {
  CreateUnitRequestSchema,
  GetUnitRequestSchema,
  ListEventsRequestSchema,
  ListUnitsResponseSchema,
} from "../../gen/registry/core/v1/core_service_pb.ts";
import { timestampExpected } from "../platform/mod.ts";
import { holdsTimestamp, jsonBodyViolations, timestampViolations } from "./json_timestamps.ts";

const bad = "2027-02-30T00:00:00Z";
const good = "2027-02-28T00:00:00Z";
const paths = (desc: DescMessage, json: unknown) =>
  timestampViolations(desc, json).map((v) => v.field);

// A recursive type whose Timestamps are in a list, a map's values and a oneof, built at run time
// (with the JSON names protoc writes into a descriptor).
const Tree: DescMessage = createFileRegistry(
  fromJson(FileDescriptorProtoSchema, {
    name: "test/tree.proto",
    package: "test.v1",
    syntax: "proto3",
    dependency: ["google/protobuf/timestamp.proto"],
    messageType: [{
      name: "Tree",
      field: [
        {
          name: "seen_at",
          jsonName: "seenAt",
          number: 1,
          label: "LABEL_REPEATED",
          type: "TYPE_MESSAGE",
          typeName: ".google.protobuf.Timestamp",
        },
        {
          name: "children",
          jsonName: "children",
          number: 2,
          label: "LABEL_REPEATED",
          type: "TYPE_MESSAGE",
          typeName: ".test.v1.Tree",
        },
        {
          name: "by_name",
          jsonName: "byName",
          number: 3,
          label: "LABEL_REPEATED",
          type: "TYPE_MESSAGE",
          typeName: ".test.v1.Tree.ByNameEntry",
        },
        {
          name: "due_at",
          jsonName: "dueAt",
          number: 4,
          label: "LABEL_OPTIONAL",
          type: "TYPE_MESSAGE",
          typeName: ".google.protobuf.Timestamp",
          oneofIndex: 0,
        },
        { name: "title", number: 5, label: "LABEL_OPTIONAL", type: "TYPE_STRING" },
      ],
      nestedType: [{
        name: "ByNameEntry",
        field: [
          { name: "key", number: 1, label: "LABEL_OPTIONAL", type: "TYPE_STRING" },
          {
            name: "value",
            number: 2,
            label: "LABEL_OPTIONAL",
            type: "TYPE_MESSAGE",
            typeName: ".google.protobuf.Timestamp",
          },
        ],
        options: { mapEntry: true },
      }],
      oneofDecl: [{ name: "when" }],
    }],
  } as JsonValue),
  (name) =>
    name === file_google_protobuf_timestamp.proto.name ? file_google_protobuf_timestamp : undefined,
).getMessage("test.v1.Tree")!;

Deno.test("holdsTimestamp(): whether a type has a Timestamp at some depth", () => {
  assert.equal(holdsTimestamp(CreateUnitRequestSchema), true); // unit.due_at
  assert.equal(holdsTimestamp(ListEventsRequestSchema), true); // since, until
  assert.equal(holdsTimestamp(Tree), true);
  assert.equal(holdsTimestamp(GetUnitRequestSchema), false);
  assert.equal(holdsTimestamp(HealthCheckRequestSchema), false);
});

Deno.test("timestampViolations(): every Timestamp, by JSON or proto name, at its proto path", () => {
  // Each spelling protobuf-es reads; null is unset; what is not a string is not a Timestamp.
  for (const key of ["dueAt", "due_at"]) {
    assert.deepEqual(timestampViolations(CreateUnitRequestSchema, { unit: { [key]: bad } }), [
      { field: "unit.due_at", description: timestampExpected },
    ]);
    assert.deepEqual(paths(CreateUnitRequestSchema, { unit: { [key]: good } }), []);
  }
  assert.deepEqual(paths(CreateUnitRequestSchema, { unit: { dueAt: null } }), []);
  assert.deepEqual(paths(CreateUnitRequestSchema, { unit: null }), []);
  assert.deepEqual(paths(CreateUnitRequestSchema, { unit: { dueAt: 1803895200 } }), [
    "unit.due_at",
  ]);
  assert.deepEqual(
    paths(ListEventsRequestSchema, {
      since: "2027-04-31T00:00:00Z",
      until: "2027-01-01T24:00:00Z",
    }),
    ["since", "until"],
  );
  // Lists, map values, oneof members and recursion, at any depth.
  assert.deepEqual(
    paths(Tree, {
      seenAt: [good, bad, null],
      children: [{ title: "a" }, { by_name: { "a b": bad, c: good }, children: [{ dueAt: bad }] }],
      byName: { x: "2026-01-02T03:04:60Z" },
      due_at: good,
    }),
    ["seen_at[1]", 'by_name["x"]', 'children[1].by_name["a b"]', "children[1].children[0].due_at"],
  );
  // Output-only Timestamps of a response type are read as well (a list of units).
  assert.deepEqual(paths(ListUnitsResponseSchema, { data: [{}, { createdAt: bad }] }), [
    "data[1].created_at",
  ]);
  // The wrong shape around a Timestamp is connect-es's to refuse.
  for (const json of [[], "x", 1, null, { unit: [] }, { unit: "x" }]) {
    assert.deepEqual(paths(CreateUnitRequestSchema, json), [], JSON.stringify(json));
  }
  assert.deepEqual(
    paths(Tree, { seenAt: bad, byName: [bad], children: { a: { dueAt: bad } } }),
    [],
  );
  // Unknown keys and inherited names are not fields.
  assert.deepEqual(paths(CreateUnitRequestSchema, JSON.parse('{"__proto__":{"dueAt":"x"}}')), []);
});

Deno.test("jsonBodyViolations(): a body that is not JSON is left to connect-es", () => {
  const body = (text: string) => new TextEncoder().encode(text);
  assert.equal(
    jsonBodyViolations(CreateUnitRequestSchema, body(`{"unit":{"dueAt":"${good}"}}`)),
    undefined,
  );
  assert.equal(
    jsonBodyViolations(CreateUnitRequestSchema, body(`{"unit":{"dueAt":"${bad}"`)),
    undefined,
  );
  assert.deepEqual(
    jsonBodyViolations(CreateUnitRequestSchema, body(`{"unit":{"dueAt":"${bad}"}}`))?.map((v) =>
      v.field
    ),
    ["unit.due_at"],
  );
});
