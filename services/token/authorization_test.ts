/** The redirect URI rule of the authorization endpoint (RFC 9700 2.1, RFC 8252 7.3). */

import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { ClientSchema, ClientType } from "../../gen/registry/oauth/v1/client_pb.ts";
import { redirectMatches, redirectWith } from "./authorization.ts";

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

Deno.test("redirectWith() keeps the registered URI byte for byte and adds to its query", () => {
  const p: [string, string][] = [["code", "a b"], ["state", "s&t"]];
  for (
    const [uri, expected] of [
      ["https://app.example/cb", "https://app.example/cb?code=a+b&state=s%26t"],
      [
        "https://app.example/cb?x=1&y=a%20b",
        "https://app.example/cb?x=1&y=a%20b&code=a+b&state=s%26t",
      ],
      ["https://app.example/cb?flag", "https://app.example/cb?flag&code=a+b&state=s%26t"],
      ["https://app.example/cb?", "https://app.example/cb?code=a+b&state=s%26t"],
      ["https://app.example/cb?x=1&", "https://app.example/cb?x=1&code=a+b&state=s%26t"],
      ["http://127.0.0.1:00080/cb", "http://127.0.0.1:00080/cb?code=a+b&state=s%26t"],
      ["com.example.app:/cb", "com.example.app:/cb?code=a+b&state=s%26t"],
    ] as const
  ) {
    assert.equal(redirectWith(uri, p), expected, uri);
  }
});
