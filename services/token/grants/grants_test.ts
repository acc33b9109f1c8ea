/**
 * The grants' rules that need a clock: an authorization code lives 60 seconds and a refresh
 * token its lifetime, checked here against an injected clock with in-memory stand-ins for the
 * tables and the registry (the real ones are tested end to end in tests/authorization_code_test.ts).
 */

import assert from "node:assert/strict";
import { ConnectError } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import {
  ClientSchema,
  ClientStatus,
  ClientType,
} from "../../../gen/registry/oauth/v1/client_pb.ts";
import {
  InstallationSchema,
  InstallationStatus,
} from "../../../gen/registry/oauth/v1/installation_pb.ts";
import { IssueTokenRequestSchema } from "../../../gen/registry/token/v1/token_service_pb.ts";
import type { AccessTokens } from "../access_tokens.ts";
import { sha256 } from "../opaque_tokens.ts";
import type { Registry } from "../registry.ts";
import type { CodeRow, FamilyRow, GrantRepository, RefreshRow } from "../repository/grants.ts";
import { authorizationCode } from "./authorization_code.ts";
import type { GrantDeps } from "./context.ts";
import { refreshToken } from "./refresh_token.ts";

const verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
const client = create(ClientSchema, {
  id: "cli_a",
  projectId: "p",
  type: ClientType.WEB,
  status: ClientStatus.ACTIVE,
  redirectUris: ["https://app.example/cb"],
});
const family: FamilyRow = {
  id: "f1",
  client_id: "cli_a",
  project_id: "p",
  installation_id: "ins_1",
  created_at: new Date(0),
  revoked_at: null,
  expires_at: new Date(0),
};

function deps(clock: { now: number }, rows: { code?: CodeRow; refresh?: RefreshRow }) {
  const grants = {
    redeemCode: () =>
      Promise.resolve(
        rows.code ? { kind: "redeemed", code: rows.code, family } : { kind: "unknown" },
      ),
    useRefreshToken: () =>
      Promise.resolve(
        rows.refresh ? { kind: "used", token: rows.refresh, family } : { kind: "unknown" },
      ),
    addAccessToken: () => Promise.resolve(),
    addRefreshToken: () => Promise.resolve(),
    revokeFamily: () => Promise.resolve(),
  } as unknown as GrantRepository;
  const registry = {
    getInstallation: () =>
      Promise.resolve(
        create(InstallationSchema, { id: "ins_1", status: InstallationStatus.ACTIVE }),
      ),
  } as unknown as Registry;
  const accessTokens = {
    sign: () =>
      Promise.resolve({
        jwt: "jwt",
        jti: crypto.randomUUID(),
        expiresIn: 900,
        expiresAt: new Date(),
      }),
  } as unknown as AccessTokens;
  return {
    accessTokens,
    grants,
    registry,
    isRevoked: () => Promise.resolve(false),
    refreshTtlMs: 30 * 86_400_000,
    now: () => clock.now,
  } satisfies GrantDeps;
}

const t0 = Date.UTC(2030, 0, 1);

async function codeRow(): Promise<CodeRow> {
  return {
    code_hash: await sha256("oac_x"),
    family_id: "f1",
    client_id: "cli_a",
    redirect_uri: "https://app.example/cb",
    code_challenge: challenge,
    scopes: ["a"],
    account_id: "acct",
    principal_id: "prn_1",
    expires_at: new Date(t0 + 60_000),
    redeemed_at: null,
  };
}

Deno.test("authorization_code: a code redeems within its 60 seconds, not after", async () => {
  const request = create(IssueTokenRequestSchema, {
    grantType: "authorization_code",
    code: "oac_x",
    redirectUri: "https://app.example/cb",
    codeVerifier: verifier,
  });
  const clock = { now: t0 + 59_999 };
  const ok = await authorizationCode(deps(clock, { code: await codeRow() }), client, request);
  assert.equal(ok.accessToken, "jwt");
  assert.match(ok.refreshToken, /^ort_/);
  clock.now = t0 + 60_000;
  const late = await authorizationCode(deps(clock, { code: await codeRow() }), client, request)
    .catch((e) => e);
  assert.ok(late instanceof ConnectError);
  assert.match(late.rawMessage, /expired/);
});

Deno.test("refresh_token: a refresh token works until it expires", async () => {
  const refresh: RefreshRow = {
    token_hash: await sha256("ort_x"),
    family_id: "f1",
    client_id: "cli_a",
    scopes: ["a", "b"],
    account_id: "acct",
    principal_id: "prn_1",
    created_at: new Date(t0),
    expires_at: new Date(t0 + 1000),
    spent_at: null,
  };
  const request = create(IssueTokenRequestSchema, {
    grantType: "refresh_token",
    refreshToken: "ort_x",
    scope: "a",
  });
  const clock = { now: t0 + 999 };
  const ok = await refreshToken(deps(clock, { refresh }), client, request);
  assert.equal(ok.scope, "a");
  clock.now = t0 + 1000;
  const late = await refreshToken(deps(clock, { refresh }), client, request).catch((e) => e);
  assert.ok(late instanceof ConnectError);
  assert.match(late.rawMessage, /expired/);
});
