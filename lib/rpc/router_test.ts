import assert from "node:assert/strict";
import {
  AnySchema,
  BytesValueSchema,
  FileDescriptorSetSchema,
  StringValueSchema,
  StructSchema,
} from "@bufbuild/protobuf/wkt";
import { OAuthRegistryService } from "../../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { holdsBytes } from "./router.ts";

Deno.test("holdsBytes: a bytes field at any depth, through lists, maps and cycles", () => {
  assert.equal(holdsBytes(StringValueSchema), false);
  assert.equal(holdsBytes(BytesValueSchema), true, "a bytes field");
  assert.equal(holdsBytes(AnySchema), true, "a bytes field beside a string");
  // Struct -> map of Value -> ListValue -> list of Value -> Struct: a cycle, and no bytes.
  assert.equal(holdsBytes(StructSchema), false);
  // Deep down: FileDescriptorSet -> FileDescriptorProto -> FileOptions -> UninterpretedOption's
  // `bytes string_value`.
  assert.equal(holdsBytes(FileDescriptorSetSchema), true);
  // The registry's requests: none has one (their messages are freed after the call).
  for (const method of Object.values(OAuthRegistryService.method)) {
    assert.equal(holdsBytes(method.input), false, method.name);
  }
});
