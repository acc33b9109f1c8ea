/**
 * Changing the server's own keys without invalidating what they protect (real processes, real
 * gRPC, real Postgres). The registry is started again with a new `CLIENT_SECRET_HMAC_KEY` and the
 * old one in `CLIENT_SECRET_HMAC_PREVIOUS_KEYS`: a secret made under the old key still verifies and
 * is hashed again under the new one, so that with the old key gone it still verifies, while a
 * secret not used meanwhile no longer does; each start logs how many secrets each key made. The
 * token service is started again with a new `TOKEN_KEY_ENCRYPTION_KEY` and the old one in
 * `TOKEN_KEY_ENCRYPTION_PREVIOUS_KEYS`: it signs with the same key, sealed again under the new one.
 * A service is started again with a new `AUTH_JWT_SECRET` and the old one in
 * `AUTH_JWT_PREVIOUS_SECRETS`: platform tokens signed with either verify, and with the old secret
 * gone, those signed with it no longer do.
 */

import assert from "node:assert/strict";
import { Code } from "@connectrpc/connect";
import postgres from "postgres";
import { ClientType } from "../gen/registry/oauth/v1/client_pb.ts";
import { OAuthRegistryService } from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { TokenService } from "../gen/registry/token/v1/token_service_pb.ts";
import { keyIdOf } from "../services/oauth/secrets.ts";
import { signToken } from "../lib/policy/mod.ts";
import {
  type GrpcTestClient,
  grpcTestClient,
  type Proc,
  spawn,
  type Stack,
  startStack,
  waitReady,
} from "../lib/testing/mod.ts";

const rpc = OAuthRegistryService.method;

/**
 * A confidential client of a new project `projectId`, made over gRPC by an administrator of it:
 * its id, a maker of its secrets, and the administrator's metadata.
 */
async function confidentialClient(stack: Stack, grpc: GrpcTestClient, projectId: string) {
  const admin = {
    authorization: `Bearer ${await stack.token({ sub: "admin", projects: [projectId] })}`,
  };
  await grpc.call(rpc.updateOAuthConfig, {
    projectId,
    config: { applicationName: projectId },
    updateMask: { paths: ["application_name"] },
  }, admin);
  const { client } = await grpc.call(rpc.createClient, {
    projectId,
    client: { name: "backend", type: ClientType.WEB },
  }, admin);
  const clientId = client!.id;
  const newSecret = async () =>
    (await grpc.call(rpc.createClientSecret, { projectId, clientId }, admin))
      .clientSecret!.plaintext.value!;
  return { clientId, newSecret, admin };
}

/**
 * The stack's component `name`, replaced by a process of its own on the same ports: `start(env)`
 * stops the one running and starts it again with `env` over the stack's environment for it.
 */
function replaceable(stack: Stack, name: "oauth" | "token") {
  const entry = `services/${name}/main.ts`;
  const base = stack.envOf(name);
  let proc: Proc | undefined;
  const stop = async () => {
    if (!proc) return;
    proc.child.kill("SIGTERM");
    await proc.child.status;
  };
  return {
    /** Starts it with `env`; waits until it reports ready unless `ready` is false. */
    async start(env: Record<string, string>, { ready = true } = {}): Promise<Proc> {
      if (proc) await stop();
      else await stack.kill(name);
      proc = spawn(entry, { ...base, ...env });
      if (ready) await waitReady(`http://127.0.0.1:${base.HTTP_PORT}`);
      return proc;
    },
    stop,
  };
}

/** The lines of `proc` that include `text`, once there are at least `n` (its log is written in batches). */
async function linesWith(proc: Proc, text: string, n = 1): Promise<string[]> {
  // Bounded (30 s) only so that a line that never comes fails the test; a busy machine waits.
  for (let i = 0; i < 600; i++) {
    const lines = proc.lines.filter((l) => l.includes(text));
    if (lines.length >= n) return lines;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`fewer than ${n} lines with "${text}" in:\n${proc.lines.join("\n")}`);
}

Deno.test("the client-secret key changes: secrets in use keep verifying, re-hashed under the new key", async () => {
  const stack = await startStack();
  const sql = postgres(stack.databaseUrl, { max: 1, onnotice: () => {} });
  const env = stack.envOf("oauth");
  const oldKey = env.CLIENT_SECRET_HMAC_KEY!;
  const newKey = crypto.randomUUID() + crypto.randomUUID();
  const registry = replaceable(stack, "oauth");
  let running: Proc | undefined;
  /** The registry, started again with `keys`: its start's count of secrets by key. */
  const restart = async (keys: Record<string, string>) => {
    running = await registry.start(keys);
    const [line] = await linesWith(running, "by hash key");
    return JSON.parse(line!) as Record<string, unknown>;
  };
  const grpc = grpcTestClient(stack.oauthGrpc);
  try {
    const { clientId, newSecret, admin } = await confidentialClient(stack, grpc, "rot");
    const used = await newSecret(); // used while both keys are configured
    const unused = await newSecret(); // not used until the old key is gone
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
    await linesWith(running!, "client secret hashed again under the current key");

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
    await registry.stop();
    await stack.stop();
  }
});

Deno.test("the signing keys' sealing secret changes: the token service signs with the same key, sealed again", async () => {
  const stack = await startStack();
  const env = stack.envOf("token");
  const service = replaceable(stack, "token");
  const grpc = grpcTestClient(stack.tokenGrpc);
  try {
    const registry = grpcTestClient(stack.oauthGrpc);
    const { clientId, newSecret } = await confidentialClient(stack, registry, "seal");
    const secret = await newSecret();
    registry.close();
    /** The kid in the header of a client_credentials access token. */
    const kid = async () => {
      const { accessToken } = await grpc.call(TokenService.method.issueToken, {
        client: { clientId, clientSecret: secret },
        grantType: "client_credentials",
      });
      return JSON.parse(atob(accessToken.split(".")[0]!)).kid as string;
    };
    const before = await kid();

    const token = await service.start({
      TOKEN_KEY_ENCRYPTION_KEY: crypto.randomUUID() + crypto.randomUUID(),
      TOKEN_KEY_ENCRYPTION_PREVIOUS_KEYS: env.TOKEN_KEY_ENCRYPTION_KEY!,
    });
    assert.equal(await kid(), before, "the same key signs");
    const resealed = await linesWith(token, "signing key sealed again", 2);
    assert.equal(resealed.length, 2, "the current key and the next one, each once");

    // A secret that opens none of the keys (the previous one forgotten): the replica never
    // reports ready, so that a rollout stops at it rather than replace replicas that sign, and its
    // log says why.
    const wrong = await service.start(
      { TOKEN_KEY_ENCRYPTION_KEY: crypto.randomUUID() + crypto.randomUUID() },
      { ready: false },
    );
    const readyz = `http://127.0.0.1:${env.HTTP_PORT}/readyz`;
    const cannotOpen = () => wrong.lines.some((l) => l.includes("Cannot open signing key"));
    // Bounded (30 s) only so that a line that never comes fails the test; a busy machine waits.
    for (let i = 0; i < 600 && !cannotOpen(); i++) {
      const status = await fetch(readyz).then(async (res) => (await res.body?.cancel(), res.status))
        .catch(() => undefined); // not listening yet
      assert.notEqual(status, 200, "ready without a signing key");
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(cannotOpen(), `no "Cannot open signing key" in:\n${wrong.lines.join("\n")}`);
    const res = await fetch(readyz);
    assert.equal(res.status, 503);
    assert.deepEqual(await res.json(), { status: "not ready" });
  } finally {
    grpc.close();
    await service.stop();
    await stack.stop();
  }
});

Deno.test("the platform tokens' secret changes: a service takes tokens of the previous one while it is listed", async () => {
  const stack = await startStack();
  const oldSecret = stack.envOf("oauth").AUTH_JWT_SECRET!;
  const newSecret = crypto.randomUUID() + crypto.randomUUID();
  const registry = replaceable(stack, "oauth");
  const grpc = grpcTestClient(stack.oauthGrpc);
  /** A read of the project's config with a token signed with `secret`: its gRPC code (0: ok). */
  const readWith = async (secret: string) => {
    const token = await signToken(secret, { sub: "admin", projects: ["jwt"] });
    try {
      await grpc.call(rpc.getOAuthConfig, { projectId: "jwt" }, {
        authorization: `Bearer ${token}`,
      });
      return 0;
    } catch (error) {
      return (error as { code: number }).code;
    }
  };
  const notFound = Code.NotFound, unauthenticated = Code.Unauthenticated;
  try {
    // No config yet: a caller the registry believes is told NOT_FOUND, one it does not UNAUTHENTICATED.
    assert.equal(await readWith(oldSecret), notFound);
    assert.equal(await readWith(newSecret), unauthenticated);
    await registry.start({ AUTH_JWT_SECRET: newSecret, AUTH_JWT_PREVIOUS_SECRETS: oldSecret });
    assert.equal(await readWith(oldSecret), notFound, "a token of the previous secret verifies");
    assert.equal(await readWith(newSecret), notFound);
    await registry.start({ AUTH_JWT_SECRET: newSecret });
    assert.equal(await readWith(oldSecret), unauthenticated, "and not once it is gone");
    assert.equal(await readWith(newSecret), notFound);
  } finally {
    grpc.close();
    await registry.stop();
    await stack.stop();
  }
});
