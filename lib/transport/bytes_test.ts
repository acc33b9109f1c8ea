import assert from "node:assert/strict";
import { concat, release } from "./bytes.ts";

Deno.test("concat: the parts in order, the part itself when there is one", () => {
  const one = new Uint8Array([1, 2]);
  assert.equal(concat([one]), one);
  assert.deepEqual(
    concat([one, new Uint8Array([]), new Uint8Array([3])]),
    new Uint8Array([1, 2, 3]),
  );
});

Deno.test("release: frees a buffer viewed whole, leaves a part of one and what cannot be freed", () => {
  const whole = new Uint8Array(64 * 1024);
  const view = new Uint8Array(whole.buffer);
  release(whole);
  assert.ok(whole.buffer.detached);
  assert.equal(view.length, 0, "every view of a released buffer reads as empty");
  release(whole); // twice: nothing more happens

  const backing = new Uint8Array(16);
  const part = backing.subarray(4, 8);
  release(part);
  assert.equal(backing.buffer.detached, false, "a view of part of a buffer frees nothing");
  assert.equal(part.length, 4);

  // Shared and WebAssembly memories cannot be detached: left alone, without an error.
  const shared = new Uint8Array(new SharedArrayBuffer(8));
  release(shared);
  assert.equal(shared.length, 8);
  const memory = new WebAssembly.Memory({ initial: 1 });
  const wasm = new Uint8Array(memory.buffer);
  release(wasm);
  assert.equal(wasm.length, 64 * 1024);
});
