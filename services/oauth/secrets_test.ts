import assert from "node:assert/strict";
import { createSecretHasher } from "./secrets.ts";

const hex = (bytes: Uint8Array) =>
  Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");

Deno.test("a secret matches its own stored hash, among others (which one is said), and nothing else does", () => {
  const hasher = createSecretHasher("k".repeat(32));
  const other = createSecretHasher("j".repeat(32));
  const a = hasher.generate();
  const b = hasher.generate();
  assert.match(a.secret, /^ocs_[A-Za-z0-9_-]{43}$/);
  assert.equal(a.hint, `ocs_****${a.secret.slice(-4)}`);
  assert.equal(hasher.match(a.secret, [hex(a.hash)]), 0);
  assert.equal(hasher.match(a.secret, [hex(b.hash), hex(a.hash)]), 1, "rotation: either hash");
  assert.equal(hasher.match(b.secret, [hex(b.hash), hex(a.hash)]), 0);
  assert.equal(hasher.match(b.secret, [hex(a.hash)]), -1);
  assert.equal(hasher.match(a.secret.slice(0, -1), [hex(a.hash)]), -1);
  assert.equal(hasher.match(a.secret, []), -1);
  assert.equal(other.match(a.secret, [hex(a.hash)]), -1, "another key");
  assert.equal(hasher.match(a.secret, [hex(a.hash).slice(2), "zz" + hex(a.hash).slice(2)]), -1);
});
