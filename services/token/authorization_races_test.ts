/**
 * The consent page's decisions and remembered consent when something else happens at once, on a
 * real Postgres with a registry whose answers the test holds open: the page's Allow and Deny of one
 * form (two tabs, Back), and a remembered consent that read the installation just before it was
 * revoked (its code names a revoked installation: it buys nothing).
 */

import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { base64Encode } from "@bufbuild/protobuf/wire";
import { ConnectError } from "@connectrpc/connect";
import { ClientSchema, ClientStatus, ClientType } from "../../gen/registry/oauth/v1/client_pb.ts";
import { OAuthConfigSchema } from "../../gen/registry/oauth/v1/config_pb.ts";
import {
  type Installation,
  InstallationSchema,
  InstallationStatus,
} from "../../gen/registry/oauth/v1/installation_pb.ts";
import {
  AuthorizationRequestSchema,
  Decision,
  IssueTokenRequestSchema,
  TokenService,
} from "../../gen/registry/token/v1/token_service_pb.ts";
import { connect, migrate, readMigrations } from "../../lib/db/mod.ts";
import { sha256 } from "../../lib/platform/mod.ts";
import { createTestDatabase, signedInCall } from "../../lib/testing/mod.ts";
import {
  type AuthorizationDeps,
  decideAuthorization,
  deriveCsrfKey,
  startAuthorization,
} from "./authorization.ts";
import { authorizationCode } from "./grants/authorization_code.ts";
import type { GrantDeps } from "./grants/context.ts";
import type { Registry } from "./registry.ts";
import { createDeviceCodeRepository } from "./repository/device_codes.ts";
import { createGrantRepository } from "./repository/grants.ts";
import { createUsedJtis } from "./repository/used_jtis.ts";

Deno.test("consent decisions and remembered consent, raced", async (t) => {
  const db = await createTestDatabase();
  const sql = connect(db.url, { applicationName: "authorization-races-test", max: 8 });
  try {
    await migrate(sql, "token", await readMigrations(new URL("./migrations/", import.meta.url)));
    const redirectUri = "https://app.example/cb";
    const client = create(ClientSchema, {
      id: "cli_web",
      projectId: "p1",
      type: ClientType.WEB,
      status: ClientStatus.ACTIVE,
      redirectUris: [redirectUri],
    });
    let installation: Installation | undefined;
    /** The consents the registry recorded. */
    const consents: string[][] = [];
    /** A call the registry holds open until the test says (its name, entered, released). */
    let hold: { call: string; entered: () => void; release: Promise<void> } | undefined;
    const held = async (call: string) => {
      const h = hold;
      if (h?.call !== call) return;
      hold = undefined;
      h.entered();
      await h.release;
    };
    const registry = {
      lookupClient: () => Promise.resolve(client),
      getConfig: () => Promise.resolve(create(OAuthConfigSchema, { applicationName: "Photos" })),
      async liveInstallation() {
        const live = installation?.status === InstallationStatus.ACTIVE ? installation : undefined;
        await held("liveInstallation");
        return live;
      },
      getInstallation: () => Promise.resolve(installation),
      async consent(_call: Headers, _projectId: string, scopes: string[]) {
        await held("consent");
        consents.push(scopes);
        installation = create(InstallationSchema, {
          id: "ins_1",
          projectId: "p1",
          accountId: "acct-1",
          principalId: "prn_1",
          status: InstallationStatus.ACTIVE,
          scopes,
        });
        return installation;
      },
    } as unknown as Registry;
    const events: string[] = [];
    const grants = createGrantRepository(sql);
    const deps: AuthorizationDeps = {
      registry,
      grants,
      issuer: "https://issuer.example",
      csrfKeys: [deriveCsrfKey("a secret of at least thirty-two characters")],
      now: Date.now,
      recordEvent: (_audit, event) => Promise.resolve(void events.push(event.result)),
      requirePar: false,
      usedJtis: createUsedJtis(sql),
    };
    const ctx = await signedInCall(TokenService.method.decideAuthorization);
    const verifier = "v".repeat(43);
    const request = create(AuthorizationRequestSchema, {
      responseType: "code",
      clientId: client.id,
      redirectUri,
      scope: "photos.read",
      state: "st",
      codeChallenge: base64Encode(sha256(verifier), "url"),
      codeChallengeMethod: "S256",
    });
    const decide = (csrf: string, decision: Decision, req = request) =>
      decideAuthorization(deps, req, decision, csrf, ctx, () => Promise.resolve());
    const answeredAlready = (error: unknown) =>
      error instanceof ConnectError && /answered already/.test(error.rawMessage);

    await t.step("Deny of the form while its Allow records the consent: refused", async () => {
      const page = await startAuthorization(deps, request, ctx);
      assert.ok("consent" in page);
      const csrf = page.consent.csrfToken;
      const entered = Promise.withResolvers<void>();
      const release = Promise.withResolvers<void>();
      hold = { call: "consent", entered: entered.resolve, release: release.promise };
      const allow = decide(csrf, Decision.ALLOW);
      await entered.promise;
      // The form's token was spent before the consent was asked for: the Deny is answered with a
      // page while the Allow is still recording, and contradicts nothing.
      await assert.rejects(decide(csrf, Decision.DENY), answeredAlready);
      release.resolve();
      const location = new URL(await allow);
      assert.ok(location.searchParams.get("code"));
      assert.deepEqual(consents, [["photos.read"]]);
      assert.deepEqual(events, []);
      // And the other way round: a Deny that spent the form first leaves Allow nothing to record.
      const second = await startAuthorization(deps, { ...request, state: "st2" }, ctx);
      assert.ok("redirectTo" in second, "consent is remembered now");
      const asked = { ...request, prompt: "consent" };
      const again = await startAuthorization(deps, asked, ctx);
      assert.ok("consent" in again);
      const denied = await decide(again.consent.csrfToken, Decision.DENY, asked);
      assert.equal(new URL(denied).searchParams.get("error"), "access_denied");
      await assert.rejects(decide(again.consent.csrfToken, Decision.ALLOW, asked), answeredAlready);
      assert.deepEqual(consents, [["photos.read"]]);
      assert.deepEqual(events, ["denied"]);
    });

    await t.step(
      "a remembered consent raced by the installation's revocation: its code buys nothing",
      async () => {
        const entered = Promise.withResolvers<void>();
        const release = Promise.withResolvers<void>();
        hold = { call: "liveInstallation", entered: entered.resolve, release: release.promise };
        const authorized = startAuthorization(deps, request, ctx);
        await entered.promise;
        // Revoked after the authorization read it live, before the code is written.
        installation = create(InstallationSchema, {
          ...installation!,
          status: InstallationStatus.REVOKED,
        });
        release.resolve();
        const answer = await authorized;
        assert.ok("redirectTo" in answer);
        const code = new URL(answer.redirectTo).searchParams.get("code")!;
        assert.ok(code, "the code was written for the installation read live");
        const grantDeps = {
          grants,
          devices: createDeviceCodeRepository(sql),
          registry,
          accessTokens: {
            sign: () => Promise.reject(new Error("no token may be signed")),
          },
          isRevoked: () => Promise.resolve(false),
          refreshTtlMs: 86_400_000,
          now: Date.now,
          spendProof: () => Promise.resolve(),
        } as unknown as GrantDeps;
        const exchange = create(IssueTokenRequestSchema, {
          grantType: "authorization_code",
          code,
          redirectUri,
          codeVerifier: verifier,
        });
        await assert.rejects(
          authorizationCode(grantDeps, client, exchange),
          (e) => e instanceof ConnectError && /installation was revoked/.test(e.rawMessage),
        );
        // Refused before anything was written: the code is unspent, the family holds no token.
        const found = await grants.findCode(sha256(code));
        assert.equal(found?.code.redeemed_at, null);
        const [{ n }] = await sql<{ n: number }[]>`
          select count(*)::int as n from token.refresh_tokens
          where family_id = ${found!.family.id}` as unknown as [{ n: number }];
        assert.equal(n, 0);
      },
    );
  } finally {
    await sql.end();
    await db.drop();
  }
});
