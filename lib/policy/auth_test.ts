import assert from "node:assert/strict";
import { Code, ConnectError } from "@connectrpc/connect";
import { SignJWT, UnsecuredJWT } from "jose";
import { administers, createTokenVerifier } from "./auth.ts";
import { signToken } from "./tokens.ts";
import { createMemoryBudget } from "../platform/mod.ts";

const secret = "s".repeat(32);
const verify = createTokenVerifier({ jwtSecret: secret });

async function rejects(authorization: string | null, pattern: RegExp): Promise<void> {
  await assert.rejects(verify(authorization), (e: unknown) => {
    assert.ok(e instanceof ConnectError);
    assert.equal(e.code, Code.Unauthenticated);
    assert.match(e.rawMessage, pattern);
    return true;
  });
}

Deno.test("createTokenVerifier() accepts a valid HS256 token and reads its claims", async () => {
  const token = await signToken(secret, { sub: "u1", projects: ["p1", "p2"], accountId: "acc" });
  const caller = await verify(`Bearer ${token}`);
  assert.equal(caller.subject, "u1");
  assert.equal(caller.accountId, "acc");
  assert.ok(administers(caller, "p1"));
  assert.ok(!administers(caller, "p3"));
});

Deno.test("createTokenVerifier() defaults account_id to sub and reads projects '*'", async () => {
  const caller = await verify(`Bearer ${await signToken(secret, { sub: "u1", projects: ["*"] })}`);
  assert.equal(caller.accountId, "u1");
  assert.ok(administers(caller, "anything"));
});

Deno.test("createTokenVerifier() rejects missing, malformed, expired, unsigned and foreign tokens", async () => {
  await rejects(null, /Missing bearer token/);
  await rejects("Basic abc", /Malformed/);
  await rejects(`Bearer ${await signToken(secret, { sub: "u1", ttlSeconds: -60 })}`, /expired/);
  await rejects(`Bearer ${await signToken("x".repeat(32), { sub: "u1" })}`, /Invalid token/);
  const none = new UnsecuredJWT({ projects: ["*"] }).setSubject("u1").setExpirationTime("1h")
    .encode();
  await rejects(`Bearer ${none}`, /Invalid token/);
  const noExp = await new SignJWT({}).setProtectedHeader({ alg: "HS256" }).setSubject("u1")
    .sign(new TextEncoder().encode(secret));
  await rejects(`Bearer ${noExp}`, /exp/);
  const badProjects = await new SignJWT({ projects: "p1" }).setProtectedHeader({ alg: "HS256" })
    .setSubject("u1").setExpirationTime("1h").sign(new TextEncoder().encode(secret));
  await rejects(`Bearer ${badProjects}`, /projects/);
});

Deno.test("createTokenVerifier() refuses identifiers with control or invisible characters", async () => {
  const sign = (claims: Record<string, unknown>, sub: string) =>
    new SignJWT(claims).setProtectedHeader({ alg: "HS256" }).setSubject(sub)
      .setExpirationTime("1h").sign(new TextEncoder().encode(secret));
  // C0, DEL, C1 (NEL), a zero width space, a right-to-left override, the BOM, a line separator.
  for (const unseen of ["\u0007", "\u007f", "\u0085", "\u200b", "\u202e", "\ufeff", "\u2028"]) {
    await rejects(`Bearer ${await sign({}, `admin${unseen}`)}`, /sub .*invisible/);
    await rejects(`Bearer ${await sign({ account_id: `a${unseen}` }, "u1")}`, /account_id/);
    await rejects(`Bearer ${await sign({ space: `s${unseen}` }, "u1")}`, /space/);
  }
  // Letters of any script, and marks, are identifiers.
  const caller = await verify(`Bearer ${await sign({ space: "équipe" }, "用户-é")}`);
  assert.equal(caller.subject, "用户-é");
});

Deno.test("createTokenVerifier() checks issuer and audience when configured", async () => {
  const strict = createTokenVerifier({ jwtSecret: secret, issuer: "iss", audience: "aud" });
  const good = await signToken(secret, { sub: "u1", issuer: "iss", audience: "aud" });
  assert.equal((await strict(`Bearer ${good}`)).subject, "u1");
  const wrong = await signToken(secret, { sub: "u1", issuer: "other", audience: "aud" });
  await assert.rejects(strict(`Bearer ${wrong}`), /iss/);
});

Deno.test("createTokenVerifier() accepts tokens of a previous secret while it is listed, and only then", async () => {
  const next = "n".repeat(32);
  const rotating = createTokenVerifier({ jwtSecret: next, previousJwtSecrets: [secret] });
  const old = await signToken(secret, { sub: "old" });
  const fresh = await signToken(next, { sub: "new" });
  assert.equal((await rotating(`Bearer ${old}`)).subject, "old");
  assert.equal((await rotating(`Bearer ${fresh}`)).subject, "new");
  // A previous secret's token is checked as any other: an expired one is expired, not invalid.
  const expired = await signToken(secret, { sub: "old", ttlSeconds: -60 });
  await assert.rejects(rotating(`Bearer ${expired}`), /expired/);
  const foreign = await signToken("x".repeat(32), { sub: "u1" });
  await assert.rejects(rotating(`Bearer ${foreign}`), /Invalid token/);
  // The previous secret gone, its tokens are refused.
  const rotated = createTokenVerifier({ jwtSecret: next });
  await assert.rejects(rotated(`Bearer ${old}`), /Invalid token/);
  assert.equal((await rotated(`Bearer ${fresh}`)).subject, "new");
  assert.throws(
    () => createTokenVerifier({ jwtSecret: next, previousJwtSecrets: ["short"] }),
    /at least 32/,
  );
  assert.throws(
    () =>
      createTokenVerifier({ jwksUrl: "https://example.com/jwks", previousJwtSecrets: [secret] }),
    /AUTH_JWT_PREVIOUS_SECRETS without AUTH_JWT_SECRET/,
  );
});

Deno.test("createTokenVerifier() refuses a short secret", () => {
  assert.throws(() => createTokenVerifier({ jwtSecret: "short" }), /at least 32/);
  assert.throws(() => createTokenVerifier({}), /exactly one/);
});

Deno.test("createTokenVerifier() remembers verified tokens within its bytes, counted in the memory budget", async () => {
  const budget = createMemoryBudget(1024 * 1024);
  const remembering = createTokenVerifier({ jwtSecret: secret, cacheBytes: 4096, budget });
  const tokens = await Promise.all(
    Array.from({ length: 20 }, (_, i) => signToken(secret, { sub: `u${i}`, projects: ["p1"] })),
  );
  await remembering(`Bearer ${tokens[0]}`);
  const one = budget.heldBy("cache");
  assert.ok(one > tokens[0]!.length, `${one}`);
  for (const token of tokens) await remembering(`Bearer ${token}`);
  // Bounded: the oldest went; what is held is in the budget, never more than the bound.
  const held = budget.heldBy("cache");
  assert.ok(held <= 4096 && held >= one, `${held}`);
  assert.equal((await remembering(`Bearer ${tokens[0]}`)).subject, "u0"); // verified again
});
