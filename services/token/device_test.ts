/**
 * User codes (RFC 8628 6.1): the alphabet, uniform draws, how a typed code is read, and what a
 * wrong one counts against (RFC 8628 5.1).
 */

import assert from "node:assert/strict";
import {
  formatUserCode,
  guessAddress,
  guessKeys,
  newUserCode,
  normalizeUserCode,
  userCodeAlphabet,
} from "./device.ts";

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

Deno.test("guesses count against the user, all their sessions as one, and the address, an IPv6 one by its /64", () => {
  const hex = (keys: Uint8Array[]) => keys.map((k) => Array.from(k).join(","));
  // Two sessions of one user (a new sign-in, or one token written another way): one count.
  assert.deepEqual(hex(guessKeys("u-1", "")), hex(guessKeys("u-1", "")));
  assert.notDeepEqual(hex(guessKeys("u-1", "")), hex(guessKeys("u-2", "")));
  assert.equal(guessKeys("u-1", "").length, 1);
  assert.equal(guessKeys("u-1", "203.0.113.7").length, 2);
  // One network's addresses are one address.
  for (
    const same of [
      "2001:db8:1:2::1",
      "2001:db8:1:2:ffff:ffff:ffff:ffff",
      "2001:0DB8:0001:0002:0:0:0:7",
      "[2001:db8:1:2::9]",
      "2001:db8:1:2::9%eth0",
      "2001:db8:1:2:0:0:192.0.2.1",
    ]
  ) {
    assert.equal(guessAddress(same), "2001:db8:1:2::/64", same);
    assert.deepEqual(hex(guessKeys("u-1", same)), hex(guessKeys("u-1", "2001:db8:1:2::1")), same);
  }
  for (const other of ["2001:db8:1:3::1", "2001:db8::1", "::1"]) {
    assert.notEqual(guessAddress(other), "2001:db8:1:2::/64", other);
  }
  assert.equal(guessAddress("::1"), "0:0:0:0::/64");
  // IPv4, as given or mapped into IPv6, is the address itself.
  assert.equal(guessAddress("203.0.113.7"), "203.0.113.7");
  assert.equal(guessAddress("::ffff:203.0.113.7"), "203.0.113.7");
  assert.equal(guessAddress("::ffff:cb00:7107"), "203.0.113.7");
  assert.notEqual(guessAddress("203.0.113.8"), guessAddress("203.0.113.7"));
  // Anything else (no address a proxy or a socket gives) as given.
  for (const odd of ["", "unknown", "1::2::3", "1:2:3:4:5:6:7:8:9", "g::1"]) {
    assert.equal(guessAddress(odd), odd, odd);
  }
});
