import assert from "node:assert/strict";
import { ClientTypeSchema } from "../../gen/registry/oauth/v1/client_pb.ts";
import { UnitPrioritySchema, UnitStatusSchema } from "../../gen/registry/core/v1/unit_pb.ts";
import { enumName, enumNumber } from "./enums.ts";

Deno.test("enum values are spelled as their lower-case short names, both ways", () => {
  assert.equal(enumName(ClientTypeSchema, 1), "web");
  assert.equal(enumNumber(ClientTypeSchema, "web"), 1);
  for (const desc of [ClientTypeSchema, UnitStatusSchema, UnitPrioritySchema]) {
    for (const value of desc.values) {
      const name = enumName(desc, value.number);
      assert.equal(name, value.localName.toLowerCase());
      assert.equal(enumNumber(desc, name!), value.number);
    }
  }
});

Deno.test("unknown numbers and names, and other spellings, are undefined", () => {
  assert.equal(enumName(ClientTypeSchema, 999), undefined);
  assert.equal(enumNumber(ClientTypeSchema, "WEB"), undefined);
  assert.equal(enumNumber(ClientTypeSchema, "CLIENT_TYPE_WEB"), undefined);
  assert.equal(enumNumber(ClientTypeSchema, "constructor"), undefined);
  assert.equal(enumNumber(ClientTypeSchema, ""), undefined);
});
