import assert from "node:assert/strict";
import type { HandlerContext } from "@connectrpc/connect";
import { csrfToken, csrfTtlMs, csrfValid } from "./csrf.ts";
import { deriveCsrfKey } from "./authorization.ts";

const session = (authorization: string) =>
  ({ requestHeader: new Headers({ authorization }) }) as unknown as HandlerContext;

Deno.test("a CSRF token is bound to its session, its values and its time, and made with the first key, checked with each", async () => {
  const now = Date.UTC(2030, 0, 1);
  const old = deriveCsrfKey("o".repeat(32));
  const current = deriveCsrfKey("n".repeat(32));
  const alice = session("Bearer alice");
  const made = await csrfToken({ csrfKeys: [old], now: () => now }, alice, ["a", "b"]);
  const check = (keys: Promise<CryptoKey>[], ctx = alice, bound = ["a", "b"], at = now) =>
    csrfValid({ csrfKeys: keys, now: () => at }, ctx, made, bound);
  assert.equal(await check([old]), true);
  assert.equal(await check([old], session("Bearer bob")), false, "another session");
  assert.equal(await check([old], alice, ["a", "c"]), false, "other values");
  assert.equal(await check([old], alice, ["a", "b"], now + csrfTtlMs + 1), false, "expired");
  // The secret changed, the old one kept as a previous one: a page made before still posts.
  assert.equal(await check([current, old]), true);
  assert.equal(await check([current]), false, "not once the old one is gone");
  // New pages are made with the current key only.
  const next = await csrfToken({ csrfKeys: [current, old], now: () => now }, alice, ["a", "b"]);
  assert.equal(
    await csrfValid({ csrfKeys: [current], now: () => now }, alice, next, ["a", "b"]),
    true,
  );
  assert.equal(
    await csrfValid({ csrfKeys: [old], now: () => now }, alice, next, ["a", "b"]),
    false,
  );
});
