/** The consent page's links: only what they say; its scopes: in the project's words. */

import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import {
  ConsentScopeSchema,
  ConsentScreenSchema,
} from "../gen/registry/token/v1/token_service_pb.ts";
import { consentPage, mailto } from "./consent_page.ts";

Deno.test("mailto() links exactly one address: no header fields, escapes or fragments", () => {
  assert.equal(mailto("help@photobook.example"), "mailto:help@photobook.example");
  assert.equal(mailto("o'brien+help@example.com"), "mailto:o'brien%2Bhelp@example.com");
  // What the registry refuses is still linked harmlessly (defence in depth).
  assert.equal(
    mailto("help?cc=x%40evil.example@example.com"),
    "mailto:help%3Fcc%3Dx%2540evil.example@example.com",
  );
  assert.equal(mailto("a#b@example.com"), "mailto:a%23b@example.com");
  const url = new URL(mailto("help?cc=x%40evil.example@example.com"));
  assert.equal(url.search, "");
  assert.equal(url.hash, "");
});

const params = {
  response_type: "code",
  client_id: "cli_x",
  redirect_uri: "https://app.example/cb",
  scope: "a b c",
  state: "",
  code_challenge: "x",
  code_challenge_method: "S256",
  request_uri: "",
  prompt: "",
  dpop_jkt: "",
};

/** The page's list of scopes, as HTML. */
async function listed(screen: Parameters<typeof create<typeof ConsentScreenSchema>>[1]) {
  const html = await (await consentPage(create(ConsentScreenSchema, screen), params, "/a")).text();
  return {
    list: /<ul class="scopes">(.*?)<\/ul>/s.exec(html)?.[1] ?? "",
    html,
  };
}

Deno.test("the consent page shows descriptions, marks sensitive scopes, escapes both", async () => {
  const { list, html } = await listed({
    applicationName: "App",
    scopes: ["a", "b", "c"],
    scopeDetails: [
      create(ConsentScopeSchema, { name: "b", description: "Read <your> mail", sensitive: true }),
      create(ConsentScopeSchema, { name: "c", description: "c", sensitive: false }),
    ],
    alreadyGranted: [create(ConsentScopeSchema, { name: "a", description: "See & say" })],
  });
  assert.match(list, /<span class="scope">Read &lt;your&gt; mail<\/span>/);
  assert.match(list, /<strong class="sensitive">Sensitive<\/strong>/);
  assert.match(list, /<small class="scope-name"><code>b<\/code><\/small>/);
  // No description declared: the name, once, and not marked.
  assert.match(list, /<li><code>c<\/code><\/li>/);
  assert.doesNotMatch(list, />a</);
  assert.match(html, /Already allowed: See &amp; say\./);
});

Deno.test("a screen without details lists the scopes' names", async () => {
  const { list, html } = await listed({ applicationName: "App", scopes: ["x.read"] });
  assert.equal(list, "<li><code>x.read</code></li>");
  assert.doesNotMatch(html, /Already allowed/);
  const none = await listed({ applicationName: "App" });
  assert.match(none.html, /no scopes were asked for/);
});
