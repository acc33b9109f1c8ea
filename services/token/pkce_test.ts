import assert from "node:assert/strict";
import { challengeProblem, s256, verifierMatches } from "./pkce.ts";

// RFC 7636 Appendix B.
const verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

Deno.test("s256() is RFC 7636's example", async () => {
  assert.equal(await s256(verifier), challenge);
});

Deno.test("verifierMatches() takes the verifier of the challenge only", async () => {
  assert.equal(await verifierMatches(verifier, challenge), true);
  assert.equal(await verifierMatches(verifier.replace("d", "e"), challenge), false);
  assert.equal(await verifierMatches("short", challenge), false);
  assert.equal(await verifierMatches(challenge, challenge), false); // plain would have matched
});

Deno.test("challengeProblem() wants S256 and a well-formed challenge", () => {
  assert.equal(challengeProblem(challenge, "S256"), undefined);
  assert.match(challengeProblem("", "S256")!, /required/);
  assert.match(challengeProblem(challenge, "")!, /plain/);
  assert.match(challengeProblem(challenge, "plain")!, /plain/);
  assert.match(challengeProblem(challenge, "s256")!, /must be S256/);
  // Only what S256 makes: 43 base64url characters, the last one of the 16 that end 32 bytes.
  for (
    const bad of [
      "a".repeat(42),
      "a b".repeat(20),
      "A".repeat(128),
      "~.~." + "A".repeat(39),
      challenge + "A",
      challenge.slice(0, -1) + "N",
      challenge.slice(0, -1) + "=",
    ]
  ) {
    assert.match(challengeProblem(bad, "S256")!, /base64url SHA-256/, bad);
  }
  assert.equal(challengeProblem("_".repeat(42) + "w", "S256"), undefined);
});
