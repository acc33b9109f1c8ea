/**
 * An idempotency key whose outcome was lost (the handler's write committed, storing its answer
 * failed) never runs its create again: each create marks its key in its own statement, and a retry
 * answers the resource as it is now, without a one-time secret or private key, or says that the
 * request completed when it cannot.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { toBinary } from "@bufbuild/protobuf";
import { Code, createClient } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.ts";
import { ClientType } from "../../gen/registry/oauth/v1/client_pb.ts";
import {
  CreateClientSecretResponseSchema,
  OAuthRegistryService,
} from "../../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { losingOutcomes, rejection, serveInProcess } from "../../lib/testing/mod.ts";
import { oauthRegistryService } from "./main.ts";

const service = OAuthRegistryService.typeName;

Deno.test("an oauth create whose outcome was lost is answered, not run again", async (t) => {
  const served = await serveInProcess(oauthRegistryService, {
    CLIENT_SECRET_HMAC_KEY: "in-process-test-key-".padEnd(40, "k"),
  });
  const api = createClient(OAuthRegistryService, served.transport);
  const admin = await served.bearer({ sub: "alice", projects: ["p"] });
  let keys = 0;
  /** A call's options with a new key, and where its `idempotent-replayed` lands. */
  const keyed = () => {
    const seen = { key: `lost-${++keys}`, replayed: null as string | null };
    const options = () => ({
      headers: { ...admin, "idempotency-key": seen.key },
      onHeader: (h: Headers) => seen.replayed = h.get("idempotent-replayed"),
    });
    return { seen, options };
  };
  const count = async (table: string, where = "true") => {
    const [row] = await served.sql.unsafe<{ n: number }[]>(
      `select count(*)::int as n from oauth.${table} where ${where}`,
    );
    return row!.n;
  };
  const events = (method: string) => count("events", `method = '${service}/${method}'`);
  /** Runs `call` twice under one key, the first one's outcome lost and its lock expired. */
  const lostThenRetried = async <T>(call: (options: object) => Promise<T>) => {
    await served.sql`delete from oauth.idempotency_keys`;
    const { seen, options } = keyed();
    const lost = await losingOutcomes(served.sql, "oauth");
    const first = await call(options());
    await lost.heal();
    assert.equal(await count("idempotency_keys", "completed_at is null"), 1, "not lost");
    await lost.expireLocks();
    const again = await call(options());
    return { first, again, replayed: seen.replayed };
  };
  try {
    await api.updateOAuthConfig({ projectId: "p", config: { applicationName: "Demo" } }, {
      headers: admin,
    });
    const { client: base } = await api.createClient({
      projectId: "p",
      client: { name: "Base", type: ClientType.WEB, redirectUris: [] },
    }, { headers: admin });

    await t.step("CreateClient: the retry answers the first client", async () => {
      const { first, again, replayed } = await lostThenRetried((o) =>
        api.createClient({
          projectId: "p",
          client: { name: "Lost", type: ClientType.WEB, redirectUris: ["https://a.example/cb"] },
        }, o)
      );
      assert.deepEqual(again.client, first.client);
      assert.equal(await count("clients", "name = 'Lost'"), 1, "the create ran again");
      assert.equal(await events("CreateClient"), 2, "one creation event (and Base's)");
      assert.equal(replayed, "true");
    });

    await t.step(
      "CreateClientSecret: the retry answers the secret, never its plaintext",
      async () => {
        const before = await count("client_secrets");
        const { first, again, replayed } = await lostThenRetried((o) =>
          api.createClientSecret({ projectId: "p", clientId: base!.id }, o)
        );
        assert.equal(first.clientSecret!.plaintext.case, "secret");
        const secret = first.clientSecret!.plaintext.value!;
        assert.equal(again.clientSecret!.id, first.clientSecret!.id, "the create ran again");
        assert.equal(again.clientSecret!.plaintext.case, undefined, "the secret was shown again");
        assert.deepEqual(again.clientSecret, {
          ...first.clientSecret,
          plaintext: { case: undefined },
        });
        const answered = toBinary(CreateClientSecretResponseSchema, again);
        assert.equal(Buffer.from(answered).includes(secret), false, "the plaintext was answered");
        assert.equal(await count("client_secrets"), before + 1);
        assert.equal(await events("CreateClientSecret"), 1, "one creation event");
        assert.equal(replayed, "true");
      },
    );

    await t.step("CreateClientKey: the retry answers the key, never its private part", async () => {
      const { first, again, replayed } = await lostThenRetried((o) =>
        api.createClientKey({ projectId: "p", clientId: base!.id, generate: "EdDSA" }, o)
      );
      assert.equal(first.clientKey!.privateKey.case, "privateJwk");
      assert.equal(again.clientKey!.id, first.clientKey!.id, "the create ran again");
      assert.equal(again.clientKey!.privateKey.case, undefined, "the private key was shown again");
      assert.deepEqual(again.clientKey, { ...first.clientKey, privateKey: { case: undefined } });
      assert.equal(await count("client_keys"), 1);
      assert.equal(await events("CreateClientKey"), 1, "one creation event");
      assert.equal(replayed, "true");
    });

    await t.step("a client deleted since: the retry says the request completed", async () => {
      const { seen, options } = keyed();
      const create = () =>
        api.createClient({
          projectId: "p",
          client: { name: "Gone", type: ClientType.WEB, redirectUris: [] },
        }, options());
      const lost = await losingOutcomes(served.sql, "oauth");
      const { client } = await create();
      await lost.heal();
      await api.deleteClient({ projectId: "p", clientId: client!.id }, { headers: admin });
      await lost.expireLocks();
      const error = await rejection(create());
      assert.equal(error.code, Code.FailedPrecondition, error.message);
      const [info] = error.findDetails(ErrorInfoSchema);
      assert.equal(info?.reason, "IDEMPOTENCY_OUTCOME_LOST");
      assert.equal(info?.metadata.resource, `projects/p/clients/${client!.id}`);
      assert.equal(seen.replayed, null);
      assert.equal(await count("clients", "name = 'Gone'"), 0, "the create ran again");
    });
  } finally {
    await served.close();
  }
});
