/**
 * The oauth-registry's handlers and policy through its real interceptor list, in this process
 * (connect-es's router transport; lib/testing/in_process.ts): seconds, no listener. The wire and
 * the processes are tested by tests/oauth_grpc_test.ts and tests/oauth_http_test.ts.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Code, createClient } from "@connectrpc/connect";
import { ClientType } from "../../gen/registry/oauth/v1/client_pb.ts";
import { Audience } from "../../gen/registry/oauth/v1/config_pb.ts";
import { OAuthRegistryService } from "../../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { rejection, serveInProcess } from "../../lib/testing/mod.ts";
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
  } finally {
    await service.close();
  }
});
