/** The redirect URI rule of the authorization endpoint (RFC 9700 2.1, RFC 8252 7.3). */

import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { ClientSchema, ClientType } from "../../gen/registry/oauth/v1/client_pb.ts";
import { redirectMatches } from "./authorization.ts";

const native = create(ClientSchema, {
  type: ClientType.NATIVE,
  redirectUris: ["http://127.0.0.1/cb", "http://[::1]:8080/cb?x=1", "com.example.app:/cb"],
});

Deno.test("redirectMatches(): a native loopback URI may differ in its port, and only there", () => {
  for (
    const uri of [
      "http://127.0.0.1/cb",
      "http://127.0.0.1:53123/cb",
      "http://[::1]/cb?x=1",
      "http://[::1]:1/cb?x=1",
      "com.example.app:/cb",
    ]
  ) assert.ok(redirectMatches(native, uri), uri);
  for (
    const uri of [
      "http://evil@127.0.0.1:53123/cb",
      "http://127.1:53123/cb",
      "http://0x7f.0.0.1:53123/cb",
      "http://127.0.0.1:53123/x/../cb",
      "http://127.0.0.1:53123/cb?",
      "http://127.0.0.1:53123/cb#",
      "http://127.0.0.1:0/cb",
      "http://127.0.0.1:65536/cb",
      "http://127.0.0.1:/cb",
      "http://[::1]:53123/cb?x=1&",
      "http://[::1]:53123/cb",
      "com.example.app:/cb/",
      "com.example.app://cb",
    ]
  ) assert.ok(!redirectMatches(native, uri), uri);
});

Deno.test("redirectMatches(): other clients' loopback URIs match only exactly", () => {
  const spa = create(ClientSchema, { type: ClientType.SPA, redirectUris: ["http://127.0.0.1/cb"] });
  assert.ok(redirectMatches(spa, "http://127.0.0.1/cb"));
  assert.ok(!redirectMatches(spa, "http://127.0.0.1:5173/cb"));
});
