/** The consent page's links: only what they say. */

import assert from "node:assert/strict";
import { mailto } from "./consent_page.ts";

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
