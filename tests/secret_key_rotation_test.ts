/**
 * Changing the client-secret key without invalidating secrets (real processes, real gRPC, real
 * Postgres): the registry is started again with a new `CLIENT_SECRET_HMAC_KEY` and the old one in
 * `CLIENT_SECRET_HMAC_PREVIOUS_KEYS`; a secret made under the old key still verifies and is hashed
 * again under the new one, so that with the old key gone it still verifies, while a secret not
 * used meanwhile no longer does. Each start logs how many secrets each key made.
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import { OAuthRegistryService } from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { keyIdOf } from "../services/oauth/secrets.ts";
import { grpcTestClient, type Proc, spawn, startStack, waitReady } from "../lib/testing/mod.ts";

const rpc = OAuthRegistryService.method;

Deno.test("the client-secret key changes: secrets in use keep verifying, re-hashed under the new key", async () => {
  const stack = await startStack();
  const sql = postgres(stack.databaseUrl, { max: 1, onnotice: () => {} });
  const env = stack.envOf("oauth");
  const oldKey = env.CLIENT_SECRET_HMAC_KEY!;
  const newKey = crypto.randomUUID() + crypto.randomUUID();
  let registry: Proc | undefined;
  /** The registry, started again (on the same ports) with `keys`. */
  const restart = async (keys: Record<string, string>) => {
    if (registry) {
      registry.child.kill("SIGTERM");
      await registry.child.status;
    } else await stack.kill("oauth");
    registry = spawn("services/oauth/main.ts", { ...env, ...keys });
    await waitReady(`http://127.0.0.1:${env.HTTP_PORT}`);
    // The start's count of secrets by key, logged once they are counted.
    for (let i = 0; i < 200; i++) {
      const line = registry.lines.find((l) => l.includes("client secrets") && l.includes("key"));
      if (line) return JSON.parse(line) as Record<string, unknown>;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`no count of secrets by key in:\n${registry.lines.join("\n")}`);
  };
  const grpc = grpcTestClient(stack.oauthGrpc);
  try {
    const admin = { authorization: `Bearer ${await stack.token({ sub: "a", projects: ["rot"] })}` };
    await grpc.call(rpc.updateOAuthConfig, {
      projectId: "rot",
      config: { applicationName: "Rotation" },
      updateMask: { paths: ["application_name"] },
    }, admin);
    const { client } = await grpc.call(rpc.createClient, {
      projectId: "rot",
      client: { name: "backend", type: 1 },
    }, admin);
    const clientId = client!.id;
    const secretOf = async () =>
      (await grpc.call(rpc.createClientSecret, { projectId: "rot", clientId }, admin))
        .clientSecret!.plaintext.value!;
    const used = await secretOf(); // used while both keys are configured
    const unused = await secretOf(); // not used until the old key is gone
    const verify = async (secret: string) =>
      (await grpc.call(rpc.verifyClientSecret, { clientId, secret }, admin)).valid;
    const stored = async () =>
      await sql<{ hash: string; key_id: string | null }[]>`
        select encode(secret_hash, 'hex') as hash, encode(hash_key_id, 'hex') as key_id
        from oauth.client_secrets order by id`;
    assert.equal(await verify(used), true);
    const before = await stored();
    assert.deepEqual(before.map((r) => r.key_id), [keyIdOf(oldKey), keyIdOf(oldKey)]);

    // The new key, with the old one kept: both secrets are counted under the previous key.
    const rotating = await restart({
      CLIENT_SECRET_HMAC_KEY: newKey,
      CLIENT_SECRET_HMAC_PREVIOUS_KEYS: ` ${oldKey} `,
    });
    assert.equal(rotating.level, "info", JSON.stringify(rotating));
    assert.equal(rotating.key_id, keyIdOf(newKey));
    assert.deepEqual(rotating.previous_key_ids, [keyIdOf(oldKey)]);
    assert.deepEqual(
      [rotating.current, rotating.previous, rotating.unstamped, rotating.unverifiable],
      [0, 2, 0, 0],
    );
    assert.equal(await verify(used), true, "a secret made under the previous key verifies");
    const during = await stored();
    assert.equal(during[0]!.key_id, keyIdOf(newKey), "and is hashed again under the new key");
    assert.notEqual(during[0]!.hash, before[0]!.hash);
    assert.deepEqual(during[1], before[1], "a secret not used keeps its hash");
    assert.equal(await verify(used), true, "and verifies under the new key");
    assert.equal(await verify(used.slice(0, -1) + (used.endsWith("A") ? "B" : "A")), false);
    assert.ok(
      registry!.lines.some((l) => l.includes("client secret hashed again under the current key")),
    );

    // The old key gone: the secret in use verifies; the one not used meanwhile does not, and the
    // start warns that a secret is under a key nobody has.
    const rotated = await restart({ CLIENT_SECRET_HMAC_KEY: newKey });
    assert.equal(rotated.level, "warn", JSON.stringify(rotated));
    assert.deepEqual(
      [rotated.current, rotated.previous, rotated.unstamped, rotated.unverifiable],
      [1, 0, 0, 1],
    );
    assert.equal(await verify(used), true);
    assert.equal(await verify(unused), false);
  } finally {
    grpc.close();
    await sql.end();
    if (registry) {
      registry.child.kill("SIGTERM");
      await registry.child.status;
    }
    await stack.stop();
  }
});
