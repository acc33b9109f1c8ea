import assert from "node:assert/strict";
import { createSecretHasher, keyIdOf, type StoredHash } from "./secrets.ts";

const hex = (bytes: Uint8Array) =>
  Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");

const oldKey = "o".repeat(32);
const newKey = "n".repeat(32);

Deno.test("a secret matches its own stored hash, among others (which one is said), and nothing else does", () => {
  const hasher = createSecretHasher("k".repeat(32));
  const other = createSecretHasher("j".repeat(32));
  const stored = (hash: Uint8Array): StoredHash => ({ hash: hex(hash), keyId: hasher.keyId });
  const a = hasher.generate();
  const b = hasher.generate();
  assert.match(a.secret, /^ocs_[A-Za-z0-9_-]{43}$/);
  assert.equal(a.hint, `ocs_****${a.secret.slice(-4)}`);
  assert.deepEqual(hasher.match(a.secret, [stored(a.hash)]), { index: 0, current: true });
  assert.equal(hasher.match(a.secret, [stored(b.hash), stored(a.hash)]).index, 1, "either hash");
  assert.equal(hasher.match(b.secret, [stored(b.hash), stored(a.hash)]).index, 0);
  assert.equal(hasher.match(b.secret, [stored(a.hash)]).index, -1);
  assert.equal(hasher.match(a.secret.slice(0, -1), [stored(a.hash)]).index, -1);
  assert.equal(hasher.match(a.secret, []).index, -1);
  assert.equal(other.match(a.secret, [stored(a.hash)]).index, -1, "another key");
  assert.equal(
    other.match(a.secret, [{ hash: hex(a.hash), keyId: null }]).index,
    -1,
    "another key, the hash's key unknown",
  );
  const cut = hex(a.hash).slice(2);
  assert.equal(
    hasher.match(a.secret, [{ hash: cut, keyId: null }, { hash: "zz" + cut, keyId: null }]).index,
    -1,
  );
  assert.deepEqual(hasher.hash(a.secret), a.hash);
});

Deno.test("a key's id is stable, tells keys apart, and is not the key", () => {
  assert.equal(keyIdOf(oldKey), keyIdOf(oldKey));
  assert.notEqual(keyIdOf(oldKey), keyIdOf(newKey));
  assert.match(keyIdOf(oldKey), /^[0-9a-f]{16}$/);
  assert.equal(createSecretHasher(oldKey).keyId, keyIdOf(oldKey));
  assert.deepEqual(createSecretHasher(newKey, [oldKey, newKey, oldKey]).previousKeyIds, [
    keyIdOf(oldKey),
  ]);
});

Deno.test("after the key changes, a secret hashed under the previous key verifies, and is to be hashed again", () => {
  const before = createSecretHasher(oldKey);
  const { secret, hash } = before.generate();
  const underOld: StoredHash = { hash: hex(hash), keyId: before.keyId };

  const rotated = createSecretHasher(newKey, [oldKey]);
  assert.deepEqual(rotated.match(secret, [underOld]), { index: 0, current: false });
  // What the caller stores instead: the hash under the new key, which then verifies as current.
  const again: StoredHash = { hash: hex(rotated.hash(secret)), keyId: rotated.keyId };
  assert.notEqual(again.hash, underOld.hash);
  assert.deepEqual(rotated.match(secret, [again]), { index: 0, current: true });
  // Once the old key is gone, the re-hashed secret verifies, and one never used meanwhile does not.
  const after = createSecretHasher(newKey);
  assert.deepEqual(after.match(secret, [again]), { index: 0, current: true });
  assert.equal(after.match(secret, [underOld]).index, -1);
  // A hash is tried under the key its id names only: another key's hash does not pass as it.
  assert.equal(rotated.match(secret, [{ hash: underOld.hash, keyId: rotated.keyId }]).index, -1);
});

Deno.test("a hash stored without a key id is tried under every key, and is to be stamped with the matching one's", () => {
  const { secret, hash } = createSecretHasher(oldKey).generate();
  const legacy: StoredHash = { hash: hex(hash), keyId: null };
  assert.deepEqual(createSecretHasher(oldKey).match(secret, [legacy]), {
    index: 0,
    current: false,
  });
  assert.deepEqual(createSecretHasher(newKey, [oldKey]).match(secret, [legacy]), {
    index: 0,
    current: false,
  });
  assert.equal(createSecretHasher(newKey).match(secret, [legacy]).index, -1);
});

Deno.test("every key must be at least 32 characters", () => {
  assert.throws(() => createSecretHasher("short"), /at least 32 characters/);
  assert.throws(() => createSecretHasher(newKey, ["short"]), /at least 32 characters/);
});
