/** User codes (RFC 8628 6.1): the alphabet, uniform draws, and how a typed code is read. */

import assert from "node:assert/strict";
import { formatUserCode, newUserCode, normalizeUserCode, userCodeAlphabet } from "./device.ts";

Deno.test("user codes: 8 of the 20 consonants, drawn without modulo bias", () => {
  const counts = new Map<string, number>();
  const n = 20_000;
  for (let i = 0; i < n; i++) {
    const code = newUserCode();
    assert.match(code, /^[BCDFGHJKLMNPQRSTVWXZ]{8}$/);
    for (const c of code) counts.set(c, (counts.get(c) ?? 0) + 1);
  }
  assert.equal(counts.size, 20);
  assert.equal(userCodeAlphabet.length, 20);
  // A byte taken modulo 20 would draw the first 16 letters 13 times in 256 and the last 4 only
  // 12: the last four 7.7% less often. Uniform, the two averages agree within about 0.6%.
  const average = (letters: string) =>
    [...letters].reduce((sum, c) => sum + counts.get(c)!, 0) / letters.length;
  const ratio = average(userCodeAlphabet.slice(16)) / average(userCodeAlphabet.slice(0, 16));
  assert.ok(ratio > 0.97 && ratio < 1.03, `ratio ${ratio}`);
});

Deno.test("a typed user code: case, hyphens and spaces do not matter; nothing else is one", () => {
  assert.equal(formatUserCode("BCDFGHJK"), "BCDF-GHJK");
  for (const typed of ["BCDF-GHJK", "bcdf-ghjk", "BCDFGHJK", " bcdf ghjk ", "Bc-Df-Gh-Jk"]) {
    assert.equal(normalizeUserCode(typed), "BCDFGHJK", typed);
  }
  for (const typed of ["", "BCDF-GHJ", "BCDF-GHJKL", "ABCD-EFGH", "BCDF-GHJ1", "BCDF_GHJK"]) {
    assert.equal(normalizeUserCode(typed), undefined, typed);
  }
});
