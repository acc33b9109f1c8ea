/**
 * Client keys (`private_key_jwt`) and the clients' token_endpoint_auth_method and
 * dpop_bound_access_tokens, through the oauth-registry's real interceptors in this process
 * (lib/testing/in_process.ts), on a real Postgres. The JSON API is tested by
 * tests/client_keys_http_test.ts.
 *
 * @module
 */

import assert from "node:assert/strict";
import { type Timestamp, timestampFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import { Code, createClient } from "@connectrpc/connect";
import * as jose from "jose";
import { ClientKeyStatus } from "../../gen/registry/oauth/v1/client_key_pb.ts";
import {
  ClientStatus,
  ClientType,
  TokenEndpointAuthMethod,
} from "../../gen/registry/oauth/v1/client_pb.ts";
import { OAuthRegistryService } from "../../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { fieldViolations, idKind } from "../../lib/platform/mod.ts";
import { listenTo, rejection, serveInProcess } from "../../lib/testing/mod.ts";
import { oauthRegistryService } from "./main.ts";

const Method = TokenEndpointAuthMethod;
const cli = idKind("cli");

/** RFC 8037 A.2's Ed25519 public key. */
const ed25519 = { kty: "OKP", crv: "Ed25519", x: "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo" };

/** A public JWK of a new key pair, as WebCrypto exports it. */
async function publicJwk(params: Algorithm | EcKeyGenParams | RsaHashedKeyGenParams) {
  const pair = await crypto.subtle.generateKey(params, true, ["sign", "verify"]) as CryptoKeyPair;
  return await crypto.subtle.exportKey("jwk", pair.publicKey) as Record<string, unknown>;
}
const rsa = (modulusLength: number): RsaHashedKeyGenParams => ({
  name: "RSASSA-PKCS1-v1_5",
  modulusLength,
  publicExponent: new Uint8Array([1, 0, 1]),
  hash: "SHA-256",
});

Deno.test("client keys and authentication methods, in process, through the real interceptors", async (t) => {
  // The service's clock, moved by the test (a second past the wall clock, so that ids, which
  // carry the wall clock's time, are never later than it).
  let clock = Date.now() + 1000;
  const service = await serveInProcess(oauthRegistryService, {
    CLIENT_SECRET_HMAC_KEY: "in-process-test-key-".padEnd(40, "k"),
  }, { now: () => clock });
  const api = createClient(OAuthRegistryService, service.transport);
  const admin = await service.bearer({ sub: "admin", projects: ["p"] });
  const other = await service.bearer({ sub: "other", projects: ["q"] });
  const tokenService = await service.bearer({ sub: "token-service", projects: ["*"] });
  const ms = (t: Timestamp | undefined) => t === undefined ? undefined : timestampMs(t);
  const count = async (table: "client_keys" | "clients") =>
    (await (table === "clients"
      ? service.sql<{ n: number }[]>`select count(*)::int as n from oauth.clients`
      : service.sql<{ n: number }[]>`select count(*)::int as n from oauth.client_keys`))[0]!.n;
  try {
    await api.updateOAuthConfig({ projectId: "p", config: { applicationName: "Demo" } }, {
      headers: admin,
    });
    await api.updateOAuthConfig({ projectId: "q", config: { applicationName: "Q" } }, {
      headers: other,
    });
    const newClient = async (
      fields: { type?: ClientType; tokenEndpointAuthMethod?: TokenEndpointAuthMethod } = {},
    ) => {
      const type = fields.type ?? ClientType.WEB;
      return (await api.createClient({
        projectId: "p",
        client: {
          name: "c",
          type,
          redirectUris: [
            type === ClientType.NATIVE ? "com.example.app:/cb" : "https://a.example/cb",
          ],
          ...fields,
        },
      }, { headers: admin })).client!;
    };
    const createKey = async (clientId: string, fields: Record<string, unknown>) =>
      (await api.createClientKey({ projectId: "p", clientId, ...fields }, { headers: admin }))
        .clientKey!;
    const listKeys = async (clientId: string) =>
      (await api.listClientKeys({ projectId: "p", clientId }, { headers: admin })).data;
    const getKey = async (clientId: string, keyId: string) =>
      (await api.getClientKey({ projectId: "p", clientId, keyId }, { headers: admin })).clientKey!;

    await t.step(
      "token_endpoint_auth_method: each type's default, and what it allows",
      async () => {
        const web = await newClient();
        assert.equal(web.tokenEndpointAuthMethod, Method.CLIENT_SECRET_BASIC);
        assert.equal(web.dpopBoundAccessTokens, false);
        for (const type of [ClientType.SPA, ClientType.NATIVE]) {
          const client = await newClient({ type });
          assert.equal(client.tokenEndpointAuthMethod, Method.NONE);
          const none = await newClient({ type, tokenEndpointAuthMethod: Method.NONE });
          assert.equal(none.tokenEndpointAuthMethod, Method.NONE);
        }
        for (const method of [Method.CLIENT_SECRET_POST, Method.PRIVATE_KEY_JWT]) {
          assert.equal(
            (await newClient({ tokenEndpointAuthMethod: method })).tokenEndpointAuthMethod,
            method,
          );
        }
        const dpop = (await api.createClient({
          projectId: "p",
          client: { name: "dpop", type: ClientType.WEB, dpopBoundAccessTokens: true },
        }, { headers: admin })).client!;
        assert.equal(dpop.dpopBoundAccessTokens, true);

        const before = await count("clients");
        const refusals: [ClientType, TokenEndpointAuthMethod, RegExp][] = [
          [ClientType.WEB, Method.NONE, /cannot be "none" for a web client/],
          [ClientType.SPA, Method.CLIENT_SECRET_BASIC, /must be "none" for a spa client/],
          [ClientType.SPA, Method.PRIVATE_KEY_JWT, /must be "none" for a spa client/],
          [ClientType.NATIVE, Method.CLIENT_SECRET_POST, /must be "none" for a native client/],
          [ClientType.WEB, 9 as TokenEndpointAuthMethod, /must be one of "client_secret_basic"/],
        ];
        for (const [type, method, description] of refusals) {
          const err = await rejection(newClient({ type, tokenEndpointAuthMethod: method }));
          assert.equal(err.code, Code.InvalidArgument);
          const violations = fieldViolations(err);
          assert.deepEqual(violations.map((v) => v.field), ["client.token_endpoint_auth_method"]);
          assert.match(violations[0]!.description, description);
        }
        assert.equal(await count("clients"), before, "nothing written");
      },
    );

    await t.step("both fields in every answer, and UpdateClient changes them", async () => {
      const { id } = await newClient();
      const update = (client: Record<string, unknown>, paths: string[]) =>
        api.updateClient({ projectId: "p", clientId: id, client, updateMask: { paths } }, {
          headers: admin,
        });
      const changed = (await update(
        { tokenEndpointAuthMethod: Method.PRIVATE_KEY_JWT, dpopBoundAccessTokens: true },
        ["token_endpoint_auth_method", "dpop_bound_access_tokens"],
      )).client!;
      assert.equal(changed.tokenEndpointAuthMethod, Method.PRIVATE_KEY_JWT);
      assert.equal(changed.dpopBoundAccessTokens, true);
      const got = (await api.getClient({ projectId: "p", clientId: id }, { headers: admin }))
        .client!;
      assert.equal(got.tokenEndpointAuthMethod, Method.PRIVATE_KEY_JWT);
      assert.equal(got.dpopBoundAccessTokens, true);
      const listed = (await api.listClients({ projectId: "p", limit: 100 }, { headers: admin }))
        .data.find((c) => c.id === id)!;
      assert.equal(listed.tokenEndpointAuthMethod, Method.PRIVATE_KEY_JWT);
      const looked = (await api.lookupClient({ clientId: id }, { headers: tokenService })).client!;
      assert.equal(looked.tokenEndpointAuthMethod, Method.PRIVATE_KEY_JWT);
      assert.equal(looked.dpopBoundAccessTokens, true);
      // Without a mask: the fields set to non-default values.
      const implicit = (await api.updateClient({
        projectId: "p",
        clientId: id,
        client: { tokenEndpointAuthMethod: Method.CLIENT_SECRET_POST },
      }, { headers: admin })).client!;
      assert.equal(implicit.tokenEndpointAuthMethod, Method.CLIENT_SECRET_POST);
      assert.equal(implicit.dpopBoundAccessTokens, true, "false is the default: not taken");
      assert.equal(
        (await update({ dpopBoundAccessTokens: false }, ["dpop_bound_access_tokens"])).client!
          .dpopBoundAccessTokens,
        false,
      );
      // Refusals: a method the type does not allow, or none at all when the mask names it.
      for (
        const [client, description] of [
          [{ tokenEndpointAuthMethod: Method.NONE }, /cannot be "none" for a web client/],
          [{}, /is required/],
        ] as const
      ) {
        const err = await rejection(update(client, ["token_endpoint_auth_method"]));
        assert.equal(err.code, Code.InvalidArgument);
        assert.deepEqual(fieldViolations(err).map((v) => v.field), [
          "client.token_endpoint_auth_method",
        ]);
        assert.match(fieldViolations(err)[0]!.description, description);
      }
      const spa = await newClient({ type: ClientType.SPA });
      const err = await rejection(api.updateClient({
        projectId: "p",
        clientId: spa.id,
        client: { tokenEndpointAuthMethod: Method.PRIVATE_KEY_JWT },
        updateMask: { paths: ["token_endpoint_auth_method"] },
      }, { headers: admin }));
      assert.equal(err.code, Code.InvalidArgument);
      assert.match(fieldViolations(err)[0]!.description, /must be "none" for a spa client/);
    });

    await t.step("VerifyClientSecret is false for a client registered for a key", async () => {
      const { id } = await newClient();
      const { clientSecret } = await api.createClientSecret({ projectId: "p", clientId: id }, {
        headers: admin,
      });
      const secret = clientSecret!.plaintext.value!;
      const verify = () =>
        api.verifyClientSecret({ clientId: id, secret }, { headers: tokenService });
      const setMethod = (method: TokenEndpointAuthMethod) =>
        api.updateClient({
          projectId: "p",
          clientId: id,
          client: { tokenEndpointAuthMethod: method },
          updateMask: { paths: ["token_endpoint_auth_method"] },
        }, { headers: admin });
      const valid = await verify();
      assert.equal(valid.valid, true);
      assert.equal(valid.client?.tokenEndpointAuthMethod, Method.CLIENT_SECRET_BASIC);
      await setMethod(Method.PRIVATE_KEY_JWT);
      const refused = await verify();
      assert.equal(refused.valid, false);
      assert.equal(refused.client, undefined);
      assert.deepEqual(
        refused,
        await api.verifyClientSecret({ clientId: id, secret: "ocs_wrong" }, {
          headers: tokenService,
        }),
        "as a wrong secret answers",
      );
      await setMethod(Method.CLIENT_SECRET_POST);
      assert.equal((await verify()).valid, true, "post is a secret method too");
    });

    await t.step("uploads: Ed25519, P-256 and RSA keys, with their thumbprint as kid", async () => {
      const { id } = await newClient({ tokenEndpointAuthMethod: Method.PRIVATE_KEY_JWT });
      const ec = await publicJwk({ name: "ECDSA", namedCurve: "P-256" });
      const rsaKey = await publicJwk(rsa(2048));
      const uploads: [Record<string, unknown>, string][] = [
        [ed25519, "EdDSA"],
        [ec, "ES256"],
        [rsaKey, "RS256"],
      ];
      const ids: string[] = [];
      for (const [jwk, algorithm] of uploads) {
        const key = await createKey(id, { jwk });
        assert.match(key.id, /^key_[0-9a-z]{26}$/);
        assert.equal(key.clientId, id);
        assert.equal(key.algorithm, algorithm);
        assert.equal(key.kid, await jose.calculateJwkThumbprint(jwk as jose.JWK, "sha256"));
        assert.equal(key.status, ClientKeyStatus.ACTIVE);
        assert.equal(key.expiresAt, undefined);
        assert.equal(key.lastUsedAt, undefined);
        assert.equal(key.privateKey.case, undefined, "an upload has no private part");
        const expected: Record<string, unknown> = { kty: jwk.kty };
        for (const m of ["crv", "x", "y", "n", "e"]) if (jwk[m] !== undefined) expected[m] = jwk[m];
        assert.deepEqual(key.jwk, { ...expected, kid: key.kid, alg: algorithm, use: "sig" });
        assert.deepEqual(await getKey(id, key.id), key);
        ids.push(key.id);
      }
      assert.deepEqual((await listKeys(id)).map((k) => k.id), ids, "oldest first");
      const page = await api.listClientKeys({ projectId: "p", clientId: id }, { headers: admin });
      assert.equal(page.hasMore, false);
      // A kid of its own, and an expiry in the future.
      const named = await createKey(id, {
        jwk: { ...(await publicJwk({ name: "Ed25519" })), kid: "2026-rotation", alg: "Ed25519" },
        expiresAt: timestampFromMs(clock + 3_600_000),
      });
      assert.equal(named.kid, "2026-rotation");
      assert.equal(named.algorithm, "EdDSA");
      assert.equal(ms(named.expiresAt), clock + 3_600_000);
    });

    await t.step(
      "refused uploads write nothing: private members, RSA 1024, bad requests",
      async () => {
        const { id } = await newClient();
        const before = await count("client_keys");
        const generated = await api.createClientKey(
          { projectId: "p", clientId: id, generate: "EdDSA" },
          { headers: admin },
        );
        const privateJwk = generated.clientKey!.privateKey.value!;
        await api.deleteClientKey(
          { projectId: "p", clientId: id, keyId: generated.clientKey!.id },
          {
            headers: admin,
          },
        );
        const ec = await crypto.subtle.generateKey(
          { name: "ECDSA", namedCurve: "P-256" },
          true,
          ["sign"],
        ) as CryptoKeyPair;
        const ecPrivate = await crypto.subtle.exportKey("jwk", ec.privateKey);
        for (const jwk of [privateJwk, ecPrivate, { ...ed25519, k: "c2VjcmV0" }]) {
          const err = await rejection(createKey(id, { jwk }));
          assert.equal(err.code, Code.InvalidArgument);
          assert.match(err.rawMessage, /holds private members/);
          assert.match(err.rawMessage, /only the public key is uploaded/);
          assert.deepEqual(fieldViolations(err).map((v) => v.field), ["jwk"]);
          assert.ok(!err.rawMessage.includes((jwk as { d?: string }).d ?? "c2VjcmV0"));
        }
        const cases: [Record<string, unknown>, string, RegExp][] = [
          [{ jwk: await publicJwk(rsa(1024)) }, "jwk.n", /2048 to 8192 bits, not 1024/],
          [{ jwk: { ...ed25519, crv: "X25519" } }, "jwk.crv", /must be "Ed25519"/],
          [{ jwk: { kty: "oct" } }, "jwk.kty", /must be "OKP"/],
          [{ jwk: ed25519, generate: "EdDSA" }, "generate", /cannot be given with jwk/],
          [{}, "jwk", /is required/],
          [{ generate: "RS256" }, "generate", /must be "EdDSA" or "ES256"/],
          [{ jwk: ed25519, expiresAt: timestampFromMs(clock) }, "expires_at", /in the future/],
          [{ generate: "ES256", expiresAt: timestampFromMs(clock - 1) }, "expires_at", /future/],
        ];
        for (const [fields, field, description] of cases) {
          const err = await rejection(createKey(id, fields));
          assert.equal(err.code, Code.InvalidArgument, field);
          const violations = fieldViolations(err);
          assert.deepEqual(violations.map((v) => v.field), [field]);
          assert.match(violations[0]!.description, description);
        }
        assert.equal(await count("client_keys"), before, "nothing written");
        assert.deepEqual(await listKeys(id), []);
      },
    );

    await t.step(
      "generated keys: the private JWK, once, signs what the stored key verifies",
      async () => {
        const { id } = await newClient({ tokenEndpointAuthMethod: Method.PRIVATE_KEY_JWT });
        for (const algorithm of ["EdDSA", "ES256"] as const) {
          const headers = { ...admin, "idempotency-key": `generate-${algorithm}` };
          const created = (await api.createClientKey(
            { projectId: "p", clientId: id, generate: algorithm },
            { headers },
          )).clientKey!;
          assert.equal(created.algorithm, algorithm);
          assert.equal(created.privateKey.case, "privateJwk");
          const privateJwk = created.privateKey.value! as jose.JWK;
          assert.equal(typeof privateJwk.d, "string");
          assert.equal(privateJwk.kid, created.kid);
          assert.equal(privateJwk.alg, algorithm);
          assert.equal(privateJwk.use, "sig");
          assert.equal(created.kid, await jose.calculateJwkThumbprint(created.jwk as jose.JWK));
          // What is stored, and listed, has no private part.
          const stored = await getKey(id, created.id);
          assert.equal(stored.privateKey.case, undefined);
          assert.equal("d" in stored.jwk!, false);
          assert.ok((await listKeys(id)).every((k) => k.privateKey.case === undefined));
          // The private JWK signs a client assertion that the stored public JWK verifies.
          const assertion = await new jose.SignJWT({})
            .setProtectedHeader({ alg: algorithm, kid: created.kid })
            .setIssuer(id)
            .setSubject(id)
            .setAudience("https://as.example/token")
            .setIssuedAt()
            .setExpirationTime("1m")
            .setJti(crypto.randomUUID())
            .sign(await jose.importJWK(privateJwk, algorithm));
          const verified = await jose.jwtVerify(
            assertion,
            await jose.importJWK(stored.jwk as jose.JWK, stored.algorithm),
            { issuer: id, audience: "https://as.example/token" },
          );
          assert.equal(verified.payload.sub, id);
          // A replay under the same idempotency key: the same key, without its private part.
          let replayed: string | null = null;
          const again = (await api.createClientKey(
            { projectId: "p", clientId: id, generate: algorithm },
            { headers, onHeader: (h) => replayed = h.get("idempotent-replayed") },
          )).clientKey!;
          assert.equal(replayed, "true");
          assert.equal(again.id, created.id);
          assert.equal(again.kid, created.kid);
          assert.equal(again.privateKey.case, undefined);
          // The private part is nowhere in the database.
          const d = privateJwk.d!;
          const [found] = await service.sql<{ n: number }[]>`
          select (select count(*) from oauth.client_keys where jwk::text like ${`%${d}%`}
            or jwk ? 'd')::int
            + (select count(*) from oauth.idempotency_keys
              where position(convert_to(${d}, 'UTF8') in response) > 0)::int as n`;
          assert.equal(found?.n, 0);
        }
        assert.equal((await listKeys(id)).length, 2, "a replay creates nothing");
      },
    );

    await t.step(
      "a duplicate kid, or the same key again, is ALREADY_EXISTS; a public client FAILED_PRECONDITION",
      async () => {
        const { id } = await newClient();
        await createKey(id, { jwk: { ...ed25519, kid: "one" } });
        const dup = await rejection(
          createKey(id, { jwk: { ...(await publicJwk({ name: "Ed25519" })), kid: "one" } }),
        );
        assert.equal(dup.code, Code.AlreadyExists);
        assert.match(dup.rawMessage, /already has a key with kid "one"/);
        // The same public key under another kid, or under its thumbprint: held once, or deleting
        // it by one kid would leave it verifying under the other.
        for (const jwk of [{ ...ed25519, kid: "two" }, ed25519, { ...ed25519, alg: "Ed25519" }]) {
          const again = await rejection(createKey(id, { jwk }));
          assert.equal(again.code, Code.AlreadyExists);
          assert.match(again.rawMessage, /already has this key, under kid "one"/);
        }
        const fresh = await newClient();
        const same = await rejection(
          createKey(fresh.id, { jwk: ed25519 }).then(() => createKey(fresh.id, { jwk: ed25519 })),
        );
        assert.equal(same.code, Code.AlreadyExists, "the same key again (its thumbprint)");
        const before = await count("client_keys");
        for (const type of [ClientType.SPA, ClientType.NATIVE]) {
          const client = await newClient({ type });
          const err = await rejection(createKey(client.id, { generate: "EdDSA" }));
          assert.equal(err.code, Code.FailedPrecondition);
          assert.match(err.rawMessage, /public client/);
        }
        assert.equal(await count("client_keys"), before);
        const missing = await rejection(
          createKey("cli_00000000000000000000000000", { generate: "EdDSA" }),
        );
        assert.equal(missing.code, Code.NotFound);
      },
    );

    await t.step(
      "10 live keys at most (the default), 20 in all, expired ones included",
      async () => {
        const { id } = await newClient();
        for (let i = 0; i < 10; i++) {
          await createKey(id, { generate: "EdDSA", expiresAt: timestampFromMs(clock + 10_000) });
        }
        const full = await rejection(createKey(id, { generate: "EdDSA" }));
        assert.equal(full.code, Code.FailedPrecondition);
        assert.match(full.rawMessage, /already has 10 live keys/);
        clock += 10_000; // all 10 expired
        for (let i = 0; i < 10; i++) {
          await createKey(id, { generate: "ES256", expiresAt: timestampFromMs(clock + 10_000) });
        }
        clock += 10_000;
        const all = await rejection(createKey(id, { generate: "EdDSA" }));
        assert.equal(all.code, Code.FailedPrecondition);
        assert.match(all.rawMessage, /already has 20 keys, expired ones included/);
        const listed = await listKeys(id);
        assert.equal(listed.length, 20);
        assert.ok(listed.every((k) => k.status === ClientKeyStatus.EXPIRED));
      },
    );

    await t.step(
      "an expired key is listed as expired, and LookupClientKeys leaves it out",
      async () => {
        const client = await newClient({ tokenEndpointAuthMethod: Method.PRIVATE_KEY_JWT });
        const short = await createKey(client.id, {
          generate: "EdDSA",
          expiresAt: timestampFromMs(clock + 60_000),
        });
        const lasting = await createKey(client.id, { jwk: ed25519 });
        const lookup = () =>
          api.lookupClientKeys({ clientId: client.id }, { headers: tokenService });
        const live = await lookup();
        assert.equal(live.client?.id, client.id);
        assert.equal(live.client?.tokenEndpointAuthMethod, Method.PRIVATE_KEY_JWT);
        assert.deepEqual(live.keys.map((k) => k.id), [short.id, lasting.id]);
        assert.deepEqual(live.keys[1], lasting);
        clock += 60_000; // expires_at itself: expired
        assert.deepEqual((await lookup()).keys.map((k) => k.id), [lasting.id]);
        assert.deepEqual(
          (await listKeys(client.id)).map((k) => [k.id, k.status]),
          [[short.id, ClientKeyStatus.EXPIRED], [lasting.id, ClientKeyStatus.ACTIVE]],
        );
        assert.equal((await getKey(client.id, short.id)).status, ClientKeyStatus.EXPIRED);
        // Access as LookupClient: the project's admins too; others as for an unknown client.
        assert.equal(
          (await api.lookupClientKeys({ clientId: client.id }, { headers: admin })).keys.length,
          1,
        );
        const hidden = await rejection(
          api.lookupClientKeys({ clientId: client.id }, { headers: other }),
        );
        const unknown = await rejection(
          api.lookupClientKeys({ clientId: "cli_00000000000000000000000000" }, { headers: other }),
        );
        assert.equal(hidden.code, Code.PermissionDenied);
        assert.equal(unknown.code, Code.PermissionDenied);
        assert.equal(
          hidden.rawMessage.replace(client.id, "x"),
          unknown.rawMessage.replace(/cli_0+/, "x"),
        );
        const missing = await rejection(
          api.lookupClientKeys({ clientId: "cli_00000000000000000000000000" }, {
            headers: tokenService,
          }),
        );
        assert.equal(missing.code, Code.NotFound);
        // A client without keys: itself, and none.
        const bare = await newClient();
        assert.deepEqual(
          (await api.lookupClientKeys({ clientId: bare.id }, { headers: admin })).keys,
          [],
        );
      },
    );

    await t.step("the project's keys are its admins': others PERMISSION_DENIED", async () => {
      const { id } = await newClient();
      const key = await createKey(id, { jwk: ed25519 });
      const calls = [
        () =>
          api.createClientKey({ projectId: "p", clientId: id, generate: "EdDSA" }, {
            headers: other,
          }),
        () => api.listClientKeys({ projectId: "p", clientId: id }, { headers: other }),
        () => api.getClientKey({ projectId: "p", clientId: id, keyId: key.id }, { headers: other }),
        () =>
          api.deleteClientKey({ projectId: "p", clientId: id, keyId: key.id }, { headers: other }),
      ];
      for (const call of calls) {
        assert.equal((await rejection(call())).code, Code.PermissionDenied);
      }
      // Another project's admin, naming its own project, finds nothing.
      const elsewhere = await rejection(
        api.getClientKey({ projectId: "q", clientId: id, keyId: key.id }, { headers: other }),
      );
      assert.equal(elsewhere.code, Code.NotFound);
    });

    await t.step(
      "delete: then get and delete are NOT_FOUND; the change feed hears both",
      async () => {
        const { id } = await newClient();
        const uuid = cli.toUuid(id);
        const heard = await listenTo(service.sql, "oauth_registry_changes");
        try {
          const key = await createKey(id, { generate: "ES256" });
          assert.deepEqual(await heard.flush(), [`client:${uuid}`], "a new key is heard at once");
          await api.deleteClientKey({ projectId: "p", clientId: id, keyId: key.id }, {
            headers: admin,
          });
          assert.deepEqual(await heard.flush(), [`client:${uuid}`], "a deleted key is heard");
          const gone = [
            () =>
              api.getClientKey({ projectId: "p", clientId: id, keyId: key.id }, { headers: admin }),
            () =>
              api.deleteClientKey({ projectId: "p", clientId: id, keyId: key.id }, {
                headers: admin,
              }),
            () =>
              api.getClientKey({ projectId: "p", clientId: id, keyId: "key_nonsense" }, {
                headers: admin,
              }),
            () =>
              api.listClientKeys({ projectId: "p", clientId: "cli_00000000000000000000000000" }, {
                headers: admin,
              }),
          ];
          for (const call of gone) assert.equal((await rejection(call())).code, Code.NotFound);
          assert.deepEqual(await heard.flush(), [], "nothing else");
        } finally {
          await heard.close();
        }
      },
    );

    await t.step(
      "RecordClientKeyUse: last_used_at at most once a minute, heard by nobody",
      async () => {
        const { id } = await newClient({ tokenEndpointAuthMethod: Method.PRIVATE_KEY_JWT });
        const key = await createKey(id, { generate: "EdDSA" });
        const lastUsed = async () => ms((await getKey(id, key.id)).lastUsedAt);
        const use = (keyId = key.id, clientId = id, headers = tokenService) =>
          api.recordClientKeyUse({ clientId, keyId }, { headers });
        assert.equal(await lastUsed(), undefined);
        const heard = await listenTo(service.sql, "oauth_registry_changes");
        try {
          const first = clock;
          await use();
          assert.equal(await lastUsed(), first);
          clock += 59_000;
          await use();
          assert.equal(await lastUsed(), first, "within the minute: not written again");
          clock += 2_000;
          await use(key.id, id, admin);
          assert.equal(await lastUsed(), clock, "a minute later: written (by the project's admin)");
          assert.deepEqual(await heard.flush(), [], "two uses written, none heard");
        } finally {
          await heard.close();
        }
        // Gone keys are ignored; a key of another client is not that client's.
        const other2 = await newClient();
        clock += 61_000;
        await use(key.id, other2.id);
        assert.equal(await lastUsed(), clock - 61_000, "not recorded through another client");
        await use("key_00000000000000000000000000");
        await use("not-a-key");
        await use(key.id, "cli_00000000000000000000000000");
        const out = await rejection(use(key.id, id, other));
        assert.equal(out.code, Code.PermissionDenied);
        assert.equal(await lastUsed(), clock - 61_000);
      },
    );

    await t.step(
      "a suspended client is still looked up with its keys (the caller decides)",
      async () => {
        const { id } = await newClient({ tokenEndpointAuthMethod: Method.PRIVATE_KEY_JWT });
        await createKey(id, { jwk: ed25519 });
        await api.updateClient({
          projectId: "p",
          clientId: id,
          client: { status: ClientStatus.SUSPENDED },
          updateMask: { paths: ["status"] },
        }, { headers: admin });
        const found = await api.lookupClientKeys({ clientId: id }, { headers: tokenService });
        assert.equal(found.client?.status, ClientStatus.SUSPENDED);
        assert.equal(found.keys.length, 1);
      },
    );
  } finally {
    await service.close();
  }
});

Deno.test("MAX_KEYS_PER_CLIENT sets the limit (twice as many in all)", async () => {
  const service = await serveInProcess(oauthRegistryService, {
    CLIENT_SECRET_HMAC_KEY: "in-process-test-key-".padEnd(40, "k"),
    MAX_KEYS_PER_CLIENT: "2",
  });
  const api = createClient(OAuthRegistryService, service.transport);
  const admin = await service.bearer({ sub: "admin", projects: ["p"] });
  try {
    await api.updateOAuthConfig({ projectId: "p", config: { applicationName: "Demo" } }, {
      headers: admin,
    });
    const { client } = await api.createClient({
      projectId: "p",
      client: { name: "web", type: ClientType.WEB },
    }, { headers: admin });
    const create = () =>
      api.createClientKey({ projectId: "p", clientId: client!.id, generate: "EdDSA" }, {
        headers: admin,
      });
    await create();
    await create();
    const err = await rejection(create());
    assert.equal(err.code, Code.FailedPrecondition);
    assert.match(err.rawMessage, /already has 2 live keys/);
  } finally {
    await service.close();
  }
});
