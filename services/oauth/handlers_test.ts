/**
 * The oauth-registry's handlers and policy through its real interceptor list, in this process
 * (connect-es's router transport; lib/testing/in_process.ts): seconds, no listener. The wire and
 * the processes are tested by tests/oauth_grpc_test.ts and tests/oauth_http_test.ts.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Code, createClient } from "@connectrpc/connect";
import { type Timestamp, timestampFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import { ClientType } from "../../gen/registry/oauth/v1/client_pb.ts";
import { ClientSecretStatus } from "../../gen/registry/oauth/v1/client_secret_pb.ts";
import { Audience } from "../../gen/registry/oauth/v1/config_pb.ts";
import { OAuthRegistryService } from "../../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { fieldViolations, idKind } from "../../lib/platform/mod.ts";
import { listenTo, rejection, serveInProcess, untilWaitingForLock } from "../../lib/testing/mod.ts";
import { oauthRegistryService } from "./main.ts";

Deno.test("oauth-registry handlers, in process, through the real interceptors", async (t) => {
  const service = await serveInProcess(oauthRegistryService, {
    CLIENT_SECRET_HMAC_KEY: "in-process-test-key-".padEnd(40, "k"),
  });
  const api = createClient(OAuthRegistryService, service.transport);
  const admin = await service.bearer({ sub: "admin", projects: ["p"] });
  const user = await service.bearer({ sub: "user", projects: [] });
  try {
    await t.step("no token: UNAUTHENTICATED; another project: PERMISSION_DENIED", async () => {
      assert.equal(
        (await rejection(api.getOAuthConfig({ projectId: "p" }))).code,
        Code.Unauthenticated,
      );
      const err = await rejection(api.getOAuthConfig({ projectId: "p" }, { headers: user }));
      assert.equal(err.code, Code.PermissionDenied);
    });

    await t.step("config, then a client: created, read, listed, renamed, deleted", async () => {
      const { config } = await api.updateOAuthConfig({
        projectId: "p",
        config: { applicationName: "Demo" },
      }, { headers: admin });
      assert.equal(config?.applicationName, "Demo");
      assert.equal(config?.audience, Audience.EXTERNAL);

      const created = await api.createClient({
        projectId: "p",
        client: { name: "web app", type: ClientType.WEB, redirectUris: ["https://a.example/cb"] },
      }, { headers: admin });
      const id = created.client!.id;
      assert.match(id, /^cli_[0-9a-z]{26}$/);
      const got = await api.getClient({ projectId: "p", clientId: id }, { headers: admin });
      assert.deepEqual(got.client?.redirectUris, ["https://a.example/cb"]);
      const page = await api.listClients({ projectId: "p" }, { headers: admin });
      assert.deepEqual(page.data.map((c) => c.id), [id]);
      const renamed = await api.updateClient({
        projectId: "p",
        clientId: id,
        client: { name: "renamed" },
        updateMask: { paths: ["name"] },
      }, { headers: admin });
      assert.equal(renamed.client?.name, "renamed");
      await api.deleteClient({ projectId: "p", clientId: id }, { headers: admin });
      const gone = await rejection(
        api.getClient({ projectId: "p", clientId: id }, { headers: admin }),
      );
      assert.equal(gone.code, Code.NotFound);
    });

    await t.step("a bad field is INVALID_ARGUMENT and writes nothing", async () => {
      const err = await rejection(api.createClient({
        projectId: "p",
        client: { name: "", type: ClientType.WEB },
      }, { headers: admin }));
      assert.equal(err.code, Code.InvalidArgument);
      const [row] = await service.sql<{ count: number }[]>`
        select count(*)::int as count from oauth.clients`;
      assert.equal(row?.count, 0);
    });

    await t.step("one origin or one redirect URI written two ways is a duplicate", async () => {
      const duplicate = async (
        client: { type: ClientType; redirectUris?: string[]; javascriptOrigins?: string[] },
        field: string,
      ) => {
        const err = await rejection(
          api.createClient({ projectId: "p", client: { name: "dup", ...client } }, {
            headers: admin,
          }),
        );
        assert.equal(err.code, Code.InvalidArgument, JSON.stringify(client));
        assert.deepEqual(fieldViolations(err).map((v) => v.field), [field]);
        assert.match(fieldViolations(err)[0]!.description, /duplicates \(item 1 repeats item 0\)/);
      };
      // The origins a browser sends alike (RFC 6454 6.2), and the CORS lookup takes for one.
      for (
        const second of [
          "https://APP.example.com",
          "HTTPS://app.example.com",
          "https://app.example.com:443",
          "https://app.example.com:0443",
        ]
      ) {
        await duplicate({
          type: ClientType.SPA,
          javascriptOrigins: ["https://app.example.com", second],
        }, "client.javascript_origins");
      }
      // URIs equivalent by RFC 3986 6.2.2.1 and 6.2.3.
      for (
        const [first, second] of [
          ["https://app.example.com/cb", "https://App.Example.COM/cb"],
          ["https://app.example.com/cb", "Https://app.example.com/cb"],
          ["https://app.example.com/cb", "https://app.example.com:443/cb"],
          ["http://127.0.0.1:80/cb", "http://127.0.0.1/cb"],
          ["https://app.example.com", "https://app.example.com/"],
          ["https://app.example.com?x=1", "https://app.example.com/?x=1"],
        ]
      ) {
        await duplicate(
          { type: ClientType.WEB, redirectUris: [first!, second!] },
          "client.redirect_uris",
        );
      }
      await duplicate({
        type: ClientType.NATIVE,
        redirectUris: ["com.example.app:/cb", "COM.Example.App:/cb"],
      }, "client.redirect_uris");
      // What the authorization request must repeat exactly still tells two apart.
      const distinct = await api.createClient({
        projectId: "p",
        client: {
          name: "distinct",
          type: ClientType.WEB,
          redirectUris: [
            "https://app.example.com/cb",
            "https://app.example.com/cb/",
            "https://app.example.com/CB",
            "https://app.example.com/cb?x=1",
            "https://app.example.com:8443/cb",
            "https://app.example.com/c%62",
          ],
          javascriptOrigins: ["https://app.example.com", "https://app.example.com:8443"],
        },
      }, { headers: admin });
      await api.deleteClient({ projectId: "p", clientId: distinct.client!.id }, {
        headers: admin,
      });
    });

    await t.step(
      "a create replayed with its Idempotency-Key returns the first outcome",
      async () => {
        const headers = { ...admin, "idempotency-key": "create-once" };
        const call = () =>
          api.createClient({ projectId: "p", client: { name: "once", type: ClientType.SPA } }, {
            headers,
          });
        const first = await call();
        let replayed: string | null = null;
        const second = await api.createClient(
          { projectId: "p", client: { name: "once", type: ClientType.SPA } },
          { headers, onHeader: (h) => replayed = h.get("idempotent-replayed") },
        );
        assert.equal(second.client?.id, first.client?.id);
        assert.equal(replayed, "true");
        const [row] = await service.sql<{ count: number }[]>`
          select count(*)::int as count from oauth.clients where name = 'once'`;
        assert.equal(row?.count, 1);
      },
    );

    await t.step(
      "a consent replayed after the project became internal is refused like a first one",
      async () => {
        const headers = { ...user, "idempotency-key": "consent-once" };
        const first = await api.consentInstallation({ projectId: "p", scopes: ["openid"] }, {
          headers,
        });
        assert.equal(first.installation?.projectId, "p");
        assert.equal(first.created, true);
        const again = await api.consentInstallation({ projectId: "p", scopes: ["openid"] }, {
          headers: user,
        });
        assert.equal(again.created, false, "the live installation, updated");
        assert.equal(again.installation?.id, first.installation?.id);
        await api.updateOAuthConfig({
          projectId: "p",
          config: { audience: Audience.INTERNAL },
          updateMask: { paths: ["audience"] },
        }, { headers: admin });
        const err = await rejection(
          api.consentInstallation({ projectId: "p", scopes: ["openid"] }, { headers }),
        );
        assert.equal(err.code, Code.PermissionDenied);
        assert.match(err.rawMessage, /audience internal/);
      },
    );

    await t.step("a public client gets no secret: FAILED_PRECONDITION", async () => {
      for (const type of [ClientType.SPA, ClientType.NATIVE]) {
        const { client } = await api.createClient({
          projectId: "p",
          client: {
            name: "public",
            type,
            redirectUris: [
              type === ClientType.SPA ? "https://a.example/cb" : "com.example.app:/cb",
            ],
          },
        }, { headers: admin });
        const err = await rejection(
          api.createClientSecret({ projectId: "p", clientId: client!.id }, { headers: admin }),
        );
        assert.equal(err.code, Code.FailedPrecondition);
        assert.match(err.rawMessage, /public client/);
      }
      const [row] = await service.sql<{ count: number }[]>`
        select count(*)::int as count from oauth.client_secrets`;
      assert.equal(row?.count, 0);
    });

    await t.step("LookupClient: a token service finds any client; others only theirs", async () => {
      const tokenService = await service.bearer({ sub: "token-service", projects: ["*"] });
      const other = await service.bearer({ sub: "other", projects: ["q"] });
      const { client } = await api.createClient({
        projectId: "p",
        client: { name: "spa", type: ClientType.SPA, redirectUris: ["https://a.example/cb"] },
      }, { headers: admin });
      const found = await api.lookupClient({ clientId: client!.id }, { headers: tokenService });
      assert.equal(found.client?.projectId, "p");
      assert.equal(found.client?.type, ClientType.SPA);
      const mine = await api.lookupClient({ clientId: client!.id }, { headers: admin });
      assert.equal(mine.client?.id, client!.id);
      // Out of reach and unknown answer alike, naming no project.
      const hidden = await rejection(
        api.lookupClient({ clientId: client!.id }, { headers: other }),
      );
      const unknown = await rejection(
        api.lookupClient({ clientId: "cli_00000000000000000000000000" }, { headers: other }),
      );
      assert.equal(hidden.code, Code.PermissionDenied);
      assert.equal(unknown.code, Code.PermissionDenied);
      assert.equal(
        hidden.rawMessage.replace(client!.id, "x"),
        unknown.rawMessage.replace(/cli_0+/, "x"),
      );
      const missing = await rejection(
        api.lookupClient({ clientId: "cli_00000000000000000000000000" }, { headers: tokenService }),
      );
      assert.equal(missing.code, Code.NotFound);
    });

    await t.step("GetProjectInstallation: the project's admins see any account's", async () => {
      const account = await service.bearer({ sub: "someone", projects: ["p"] });
      const { installation } = await api.consentInstallation({ projectId: "p", scopes: ["a"] }, {
        headers: account,
      });
      const seen = await api.getProjectInstallation({
        projectId: "p",
        installationId: installation!.id,
      }, { headers: admin });
      assert.equal(seen.installation?.accountId, "someone");
      const elsewhere = await rejection(api.getProjectInstallation({
        projectId: "q",
        installationId: installation!.id,
      }, { headers: await service.bearer({ sub: "q-admin", projects: ["q"] }) }));
      assert.equal(elsewhere.code, Code.NotFound);
      const notAdmin = await rejection(api.getProjectInstallation({
        projectId: "p",
        installationId: installation!.id,
      }, { headers: user }));
      assert.equal(notAdmin.code, Code.PermissionDenied);
    });

    await t.step("consenting again adds scopes (the union), up to 100 in all", async () => {
      const account = await service.bearer({ sub: "grower", projects: ["p"] });
      const consent = (scopes: string[]) =>
        api.consentInstallation({ projectId: "p", scopes }, { headers: account });
      const first = (await consent(["b", "a"])).installation!;
      const second = (await consent(["c", "a"])).installation!;
      assert.equal(second.id, first.id);
      assert.equal(second.principalId, first.principalId);
      assert.deepEqual(second.scopes, ["b", "a", "c"]);
      const many = (await consent(Array.from({ length: 97 }, (_, i) => `s${i}`))).installation!;
      assert.equal(many.scopes.length, 100);
      const full = await rejection(consent(["one-more"]));
      assert.equal(full.code, Code.FailedPrecondition);
      // Scopes it holds already add nothing, and are no fault.
      assert.equal((await consent(["a", "s5"])).installation!.scopes.length, 100);
    });

    await t.step("the config's declared scopes: stored, read back, checked", async () => {
      const scopes = [
        { name: "photos.read", description: "See your photos", sensitive: false },
        { name: "photos.delete", description: "Delete your photos", sensitive: true },
      ];
      const { config } = await api.updateOAuthConfig({
        projectId: "p",
        config: { scopes },
        updateMask: { paths: ["scopes"] },
      }, { headers: admin });
      const plain = (c: typeof config) =>
        c?.scopes.map(({ name, description, sensitive }) => ({ name, description, sensitive }));
      assert.deepEqual(plain(config), scopes);
      assert.deepEqual(
        plain(
          (await api.getOAuthConfig({ projectId: "p" }, { headers: admin }))
            .config,
        ),
        scopes,
      );
      const bad = await rejection(api.updateOAuthConfig({
        projectId: "p",
        config: { scopes: [scopes[0]!, { ...scopes[0]!, description: "again" }] },
        updateMask: { paths: ["scopes"] },
      }, { headers: admin }));
      assert.equal(bad.code, Code.InvalidArgument);
      assert.match(bad.rawMessage, /must not declare a scope twice/);
      // Cleared: an empty list again.
      const cleared = await api.updateOAuthConfig({
        projectId: "p",
        config: {},
        updateMask: { paths: ["scopes"] },
      }, { headers: admin });
      assert.deepEqual(cleared.config?.scopes, []);
    });
    await t.step(
      "a full replacement (mask `*`) refuses another type, as no mask does",
      async () => {
        const { client } = await api.createClient({
          projectId: "p",
          client: { name: "typed", type: ClientType.WEB, redirectUris: ["https://a.example/cb"] },
        }, { headers: admin });
        const replace = (type: ClientType) =>
          api.updateClient({
            projectId: "p",
            clientId: client!.id,
            client: { ...client!, name: "replaced", type },
            updateMask: { paths: ["*"] },
          }, { headers: admin });
        const err = await rejection(replace(ClientType.SPA));
        assert.equal(err.code, Code.InvalidArgument);
        assert.deepEqual(fieldViolations(err).map((v) => v.field), ["client.type"]);
        assert.equal(
          (await api.getClient({ projectId: "p", clientId: client!.id }, { headers: admin })).client
            ?.name,
          "typed",
        );
        // Its own type, as a read-modify-write sends it back, is no change.
        assert.equal((await replace(ClientType.WEB)).client?.name, "replaced");
      },
    );

    await t.step(
      "a config's updated_at never goes back, also when a write that began later committed first",
      async () => {
        await api.updateOAuthConfig({ projectId: "p", config: { applicationName: "Clock" } }, {
          headers: admin,
        });
        // Another writer has the row: the update below begins, then waits for it; that writer's
        // change is made after the update began, and commits first.
        const { update, later } = await service.sql.begin(async (tx) => {
          await tx`select 1 from oauth.configs where project_id = 'p' for update`;
          const update = api.updateOAuthConfig({
            projectId: "p",
            config: { applicationName: "v3" },
            updateMask: { paths: ["application_name"] },
          }, { headers: admin });
          await untilWaitingForLock(service.sql, "the update to wait for the row");
          const [row] = await tx<{ updated_at: Date }[]>`
            update oauth.configs set application_name = 'v2', updated_at = clock_timestamp()
            where project_id = 'p' returning updated_at`;
          return { update: { call: update }, later: row!.updated_at.getTime() };
        });
        const { config } = await update.call;
        assert.equal(config!.applicationName, "v3");
        assert.ok(
          timestampMs(config!.updatedAt!) >= later,
          `updated_at went back: ${new Date(timestampMs(config!.updatedAt!)).toISOString()} ` +
            `after ${new Date(later).toISOString()}`,
        );
      },
    );
    await t.step(
      "an installation's authorized_at and revoked_at never go back behind a write committed first",
      async () => {
        const account = await service.bearer({ sub: "clocked", projects: ["p"] });
        const { installation } = await api.consentInstallation({ projectId: "p", scopes: ["a"] }, {
          headers: account,
        });
        const uuid = idKind("ins").toUuid(installation!.id)!;
        // Another writer has the row: the call below begins, then waits for it; that writer
        // consents (sets authorized_at) after the call began, and commits first.
        const behind = async <T>(call: () => Promise<T>) =>
          await service.sql.begin(async (tx) => {
            await tx`select 1 from oauth.installations where id = ${uuid} for update`;
            const pending = call();
            await untilWaitingForLock(service.sql, "the call to wait for the row");
            const [row] = await tx<{ authorized_at: Date }[]>`
              update oauth.installations set authorized_at = clock_timestamp()
              where id = ${uuid} returning authorized_at`;
            return { result: { pending }, later: row!.authorized_at.getTime() };
          });
        const consent = await behind(() =>
          api.consentInstallation({ projectId: "p", scopes: ["b"] }, { headers: account })
        );
        const consented = (await consent.result.pending).installation!;
        assert.ok(timestampMs(consented.authorizedAt!) >= consent.later, "authorized_at went back");
        const revoke = await behind(() =>
          api.revokeInstallation({ installationId: installation!.id }, { headers: account })
        );
        await revoke.result.pending;
        const { installation: revoked } = await api.getInstallation({
          installationId: installation!.id,
        }, { headers: account });
        assert.ok(
          timestampMs(revoked!.revokedAt!) >= timestampMs(revoked!.authorizedAt!),
          "revoked before it was last authorized",
        );
      },
    );
  } finally {
    await service.close();
  }
});

Deno.test("client secrets expire, the project caps their lifetime, and uses are recorded", async (t) => {
  // The service's clock, moved by the test (a second past the wall clock, so that ids, which
  // carry the wall clock's time, are never later than it).
  let clock = Date.now() + 1000;
  const service = await serveInProcess(oauthRegistryService, {
    CLIENT_SECRET_HMAC_KEY: "in-process-test-key-".padEnd(40, "k"),
    MAX_SECRETS_PER_CLIENT: "2",
  }, { now: () => clock });
  const api = createClient(OAuthRegistryService, service.transport);
  const admin = await service.bearer({ sub: "admin", projects: ["p"] });
  const tokenService = await service.bearer({ sub: "token-service", projects: ["*"] });
  const at = (ms: number) => timestampFromMs(ms);
  const ms = (t: Timestamp | undefined) => t === undefined ? undefined : timestampMs(t);
  try {
    await api.updateOAuthConfig({ projectId: "p", config: { applicationName: "Demo" } }, {
      headers: admin,
    });
    const newClient = async () =>
      (await api.createClient({
        projectId: "p",
        client: { name: "web", type: ClientType.WEB, redirectUris: ["https://a.example/cb"] },
      }, { headers: admin })).client!.id;
    /** A new secret of the client, with its plaintext as `secret`. */
    const create = async (clientId: string, fields: Record<string, unknown> = {}) => {
      const res = await api.createClientSecret({ projectId: "p", clientId, ...fields }, {
        headers: admin,
      });
      return { ...res.clientSecret!, secret: res.clientSecret!.plaintext.value ?? "" };
    };
    const list = async (clientId: string) =>
      (await api.listClientSecrets({ projectId: "p", clientId }, { headers: admin })).data;
    const verify = (clientId: string, secret: string) =>
      api.verifyClientSecret({ clientId, secret }, { headers: tokenService });
    const count = async () =>
      (await service.sql<{ n: number }[]>`select count(*)::int as n from oauth.client_secrets`)[0]!
        .n;

    await t.step(
      "expires_at must be in the future, and not given with lifetime_seconds",
      async () => {
        const client = await newClient();
        const cases: [Record<string, unknown>, string, RegExp][] = [
          [{ expiresAt: at(clock) }, "expires_at", /must be in the future/],
          [{ expiresAt: at(clock - 60_000) }, "expires_at", /must be in the future/],
          [
            { expiresAt: at(clock + 60_000), lifetimeSeconds: 60 },
            "lifetime_seconds",
            /cannot be given with expires_at/,
          ],
          [{ lifetimeSeconds: 0 }, "lifetime_seconds", /positive/],
          [{ lifetimeSeconds: -5 }, "lifetime_seconds", /positive/],
          [
            { expiresAt: { seconds: 253402300800n, nanos: 0 } },
            "expires_at",
            /between years 0001 and 9999/,
          ],
        ];
        for (const [fields, field, description] of cases) {
          const err = await rejection(create(client, fields));
          assert.equal(err.code, Code.InvalidArgument, JSON.stringify(fields, bigints));
          const violations = fieldViolations(err);
          assert.deepEqual(violations.map((v) => v.field), [field]);
          assert.match(violations[0]!.description, description);
        }
        assert.equal(await count(), 0, "nothing written");
      },
    );

    await t.step("a secret gets expires_at, lifetime_seconds from now, or none", async () => {
      const client = await newClient();
      const plain = await create(client);
      assert.equal(plain.expiresAt, undefined);
      assert.equal(plain.lastUsedAt, undefined);
      assert.equal(plain.status, ClientSecretStatus.ACTIVE);
      const dated = await create(client, { expiresAt: at(clock + 3_600_000) });
      assert.equal(ms(dated.expiresAt), clock + 3_600_000);
      await api.deleteClientSecret({ projectId: "p", clientId: client, secretId: plain.id }, {
        headers: admin,
      });
      const timed = await create(client, { lifetimeSeconds: 90 });
      assert.equal(ms(timed.expiresAt), clock + 90_000);
      assert.deepEqual(
        (await list(client)).map((s) => [s.id, ms(s.expiresAt), s.status]),
        [
          [dated.id, clock + 3_600_000, ClientSecretStatus.ACTIVE],
          [timed.id, clock + 90_000, ClientSecretStatus.ACTIVE],
        ],
      );
    });

    await t.step("an expires_at below the millisecond is kept to its millisecond", async () => {
      const client = await newClient();
      // The last instant a Timestamp holds: rounded to the nearest millisecond, it was the year
      // 10000, which Postgres refused (INTERNAL); an expiry is never later than the one asked.
      const last = await create(client, {
        expiresAt: { seconds: 253402300799n, nanos: 999_999_999 },
      });
      assert.equal(ms(last.expiresAt), 253402300799_999);
      const second = Math.floor(clock / 1000) + 60;
      const soon = await create(client, {
        expiresAt: { seconds: BigInt(second), nanos: 999_900_000 },
      });
      assert.equal(ms(soon.expiresAt), second * 1000 + 999);
    });

    await t.step("an expired secret is listed as expired and verifies no more", async () => {
      const client = await newClient();
      const short = await create(client, { lifetimeSeconds: 60 });
      const lasting = await create(client);
      const answer = await verify(client, short.secret);
      assert.equal(answer.valid, true);
      assert.equal(ms(answer.expiresAt), clock + 60_000, "the answer says when it expires");
      assert.equal((await verify(client, lasting.secret)).expiresAt, undefined);
      clock += 60_000; // expires_at itself: expired
      const expired = await verify(client, short.secret);
      assert.equal(expired.valid, false);
      assert.equal(expired.client, undefined);
      assert.equal(expired.expiresAt, undefined);
      assert.deepEqual(expired, await verify(client, "ocs_wrong"), "as a wrong secret answers");
      assert.equal((await verify(client, lasting.secret)).valid, true, "the other still works");
      assert.deepEqual(
        (await list(client)).map((s) => [s.id, s.status]),
        [[short.id, ClientSecretStatus.EXPIRED], [lasting.id, ClientSecretStatus.ACTIVE]],
      );
    });

    await t.step(
      "the limit counts live secrets; expired ones count only toward twice it",
      async () => {
        const client = await newClient();
        await create(client, { lifetimeSeconds: 10 });
        await create(client, { lifetimeSeconds: 10 });
        const full = await rejection(create(client));
        assert.equal(full.code, Code.FailedPrecondition);
        assert.match(full.rawMessage, /already has 2 live secrets/);
        clock += 10_000;
        await create(client, { lifetimeSeconds: 10 });
        await create(client, { lifetimeSeconds: 10 });
        clock += 10_000; // 4 expired, none live
        const all = await rejection(create(client));
        assert.equal(all.code, Code.FailedPrecondition);
        assert.match(all.rawMessage, /already has 4 secrets, expired ones included/);
        assert.equal((await list(client)).length, 4);
      },
    );

    await t.step(
      "the project's secret_max_lifetime_seconds: validated, a default, a cap",
      async () => {
        for (const value of [-1, 315_360_001, 2_147_483_647]) {
          const err = await rejection(api.updateOAuthConfig({
            projectId: "p",
            config: { secretMaxLifetimeSeconds: value },
            updateMask: { paths: ["secret_max_lifetime_seconds"] },
          }, { headers: admin }));
          assert.equal(err.code, Code.InvalidArgument);
          assert.deepEqual(fieldViolations(err).map((v) => v.field), [
            "config.secret_max_lifetime_seconds",
          ]);
        }
        const { config } = await api.updateOAuthConfig({
          projectId: "p",
          config: { secretMaxLifetimeSeconds: 3600 },
          updateMask: { paths: ["secret_max_lifetime_seconds"] },
        }, { headers: admin });
        assert.equal(config?.secretMaxLifetimeSeconds, 3600);
        assert.equal(config?.applicationName, "Demo", "the other fields kept");
        const client = await newClient();
        const defaulted = await create(client);
        assert.equal(ms(defaulted.expiresAt), clock + 3_600_000, "no expiry asked: the maximum");
        const before = await count();
        for (
          const [fields, field] of [
            [{ lifetimeSeconds: 3601 }, "lifetime_seconds"],
            [{ expiresAt: at(clock + 3_600_001) }, "expires_at"],
          ] as const
        ) {
          const err = await rejection(create(client, fields));
          assert.equal(err.code, Code.InvalidArgument);
          assert.deepEqual(fieldViolations(err).map((v) => v.field), [field]);
          assert.match(
            err.rawMessage,
            /at most 3600 seconds from now.*secret_max_lifetime_seconds/,
          );
        }
        assert.equal(await count(), before, "nothing written");
        const within = await create(client, { expiresAt: at(clock + 3_600_000) });
        assert.equal(ms(within.expiresAt), clock + 3_600_000, "exactly the maximum is allowed");
        await api.updateOAuthConfig({
          projectId: "p",
          config: {},
          updateMask: { paths: ["secret_max_lifetime_seconds"] },
        }, { headers: admin });
        assert.equal((await create(await newClient())).expiresAt, undefined);
      },
    );

    await t.step("a verification records last_used_at, at most once a minute", async () => {
      const client = await newClient();
      const { secret, id } = await create(client);
      const lastUsed = async () => ms((await list(client)).find((s) => s.id === id)!.lastUsedAt);
      assert.equal(await lastUsed(), undefined);
      // The change feed's channel hears nothing of a use (each follower would drop the client).
      const heard = await listenTo(service.sql, "oauth_registry_changes");
      try {
        const first = clock;
        assert.equal((await verify(client, secret)).valid, true);
        assert.equal(await lastUsed(), first);
        clock += 59_000;
        await verify(client, secret);
        assert.equal(await lastUsed(), first, "within the minute: not written again");
        clock += 2_000;
        await verify(client, secret);
        assert.equal(await lastUsed(), clock, "a minute later: written");
        await verify(client, "ocs_wrong");
        clock += 61_000;
        await verify(client, "ocs_wrong");
        assert.equal(await lastUsed(), clock - 61_000, "a failed verification is no use");
        assert.deepEqual(await heard.flush(), [], "two uses written, none heard");
        // A deletion is heard: the listener works.
        await api.deleteClientSecret({ projectId: "p", clientId: client, secretId: id }, {
          headers: admin,
        });
        assert.deepEqual(await heard.flush(), [`client:${idKind("cli").toUuid(client)}`]);
      } finally {
        await heard.close();
      }
    });
  } finally {
    await service.close();
  }
});

/** JSON.stringify's replacer for messages with bigints. */
function bigints(_key: string, value: unknown): unknown {
  return typeof value === "bigint" ? String(value) : value;
}
