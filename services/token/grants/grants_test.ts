/**
 * The grants' rules that need a clock: an authorization code lives 60 seconds and a refresh
 * token its lifetime, checked here against an injected clock with in-memory stand-ins for the
 * tables and the registry (the real ones are tested end to end in tests/authorization_code_test.ts).
 */

import { sha256 } from "../../../lib/platform/mod.ts";
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
import type { AccessClaims, AccessTokens, NewAccessToken } from "../access_tokens.ts";
import type { Registry } from "../registry.ts";
import type {
  CodeRow,
  FamilyRow,
  GrantRepository,
  Issued,
  RefreshRow,
  Spent,
} from "../repository/grants.ts";
import { authorizationCode } from "./authorization_code.ts";
import type { Grant, GrantDeps } from "./context.ts";
import { refreshToken } from "./refresh_token.ts";
import { accessTokenType, tokenExchange } from "./token_exchange.ts";
import { ErrorInfoSchema } from "../../../gen/google/rpc/error_details_pb.ts";
import { oauthError } from "../oauth_errors.ts";

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

/** The calls a grant made on the tables that write. */
type Writes = string[];

function deps(
  clock: { now: number },
  rows: { code?: CodeRow; refresh?: RefreshRow },
  writes: Writes = [],
  installationStatus = InstallationStatus.ACTIVE,
) {
  const grants = {
    findCode: () => Promise.resolve(rows.code ? { code: rows.code, family } : undefined),
    findRefreshToken: () =>
      Promise.resolve(rows.refresh ? { token: rows.refresh, family } : undefined),
    issue: () => (writes.push("issue"), Promise.resolve("issued")),
    revokeFamily: () => (writes.push("revokeFamily"), Promise.resolve(0)),
  } as unknown as GrantRepository;
  const registry = {
    getInstallation: () =>
      Promise.resolve(
        create(InstallationSchema, { id: "ins_1", status: installationStatus }),
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
    // The device code grant is tested against the stack (tests/device_flow_test.ts).
    devices: {} as GrantDeps["devices"],
    isRevoked: () => Promise.resolve(false),
    refreshTtlMs: 30 * 86_400_000,
    now: () => clock.now,
    dpopError: (code, description) => Promise.resolve(oauthError(code, description)),
    spendProof: () => Promise.resolve(),
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
    dpop_jkt: null,
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

Deno.test("authorization_code: a redeemed code presented again revokes its grant, verifier or not", async () => {
  const redeemed = { ...(await codeRow()), redeemed_at: new Date(t0) };
  /** What the grant answers `oac_x` at `now`, found as `code`, sent with `codeVerifier`. */
  const present = (now: number, code: CodeRow, writes: Writes, codeVerifier = "") =>
    authorizationCode(
      deps({ now }, { code }, writes),
      client,
      create(IssueTokenRequestSchema, {
        grantType: "authorization_code",
        code: "oac_x",
        redirectUri: "https://app.example/cb",
        codeVerifier,
      }),
    ).catch((e) => e);
  // Its own verifier, another well-formed one, none: each is a second use of the code.
  for (const codeVerifier of [verifier, "x".repeat(43), ""]) {
    const writes: Writes = [];
    const error = await present(t0 + 1000, redeemed, writes, codeVerifier);
    const what = codeVerifier === "" ? "without a verifier" : `verifier ${codeVerifier}`;
    assert.ok(error instanceof ConnectError, what);
    assert.match(error.rawMessage, /already used/, what);
    assert.deepEqual(writes, ["revokeFamily"], what);
  }
  // Past its expiry it is only expired, as node-oidc-provider answers: a code read later from a
  // browser's history or a log ends no grant.
  const staleWrites: Writes = [];
  const stale = await present(t0 + 60_000, redeemed, staleWrites);
  assert.match(stale.rawMessage, /has expired/);
  assert.deepEqual(staleWrites, []);
  // A code not yet redeemed, without a verifier: refused, and nothing written.
  const writes: Writes = [];
  const missing = await present(t0 + 1000, await codeRow(), writes);
  assert.equal(reasonOf(missing), "invalid_request");
  assert.deepEqual(writes, []);
});

function refreshRow(): RefreshRow {
  return {
    token_hash: new Uint8Array(32),
    family_id: "f1",
    client_id: "cli_a",
    scopes: ["a", "b"],
    account_id: "acct",
    principal_id: "prn_1",
    created_at: new Date(t0),
    expires_at: new Date(t0 + 1000),
    spent_at: null,
    dpop_jkt: null,
  };
}

Deno.test("refresh_token: a refresh token works until it expires", async () => {
  const refresh = refreshRow();
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

Deno.test("refresh_token: a refused refresh writes nothing; only its own client's reuse revokes", async () => {
  const other = create(ClientSchema, { ...client, id: "cli_b" });
  /** A refresh request's error and what it wrote. */
  const attempt = async (
    options: { refresh?: RefreshRow; by?: typeof client; scope?: string; revoked?: boolean },
  ) => {
    const writes: Writes = [];
    const grantDeps = deps(
      { now: t0 },
      options.refresh ? { refresh: options.refresh } : {},
      writes,
      options.revoked ? InstallationStatus.REVOKED : InstallationStatus.ACTIVE,
    );
    const request = create(IssueTokenRequestSchema, {
      grantType: "refresh_token",
      refreshToken: "ort_x",
      scope: options.scope ?? "",
    });
    const error = await refreshToken(grantDeps, options.by ?? client, request).then(
      () => undefined,
      (e) => e as ConnectError,
    );
    return { error, writes };
  };
  for (
    const [what, options] of [
      ["another client", { refresh: refreshRow(), by: other }],
      ["a wider scope", { refresh: refreshRow(), scope: "a c" }],
      ["a malformed scope", { refresh: refreshRow(), scope: "a  b" }],
      ["a revoked installation", { refresh: refreshRow(), revoked: true }],
      ["an unknown token", {}],
    ] as const
  ) {
    const { error, writes } = await attempt(options);
    assert.ok(error instanceof ConnectError, what);
    assert.deepEqual(writes, [], `${what}: nothing is written`);
  }
  const spent = { ...refreshRow(), spent_at: new Date(t0 - 1) };
  const reuse = await attempt({ refresh: spent });
  assert.match(reuse.error?.rawMessage ?? "", /already used/);
  assert.deepEqual(reuse.writes, ["revokeFamily"]);
  const byOther = await attempt({ refresh: spent, by: other });
  assert.deepEqual(byOther.writes, [], "another client's presentation of a spent token");
  // Spent, then expired while its grant lived on: only expired, as node-oidc-provider answers.
  // Whoever kept it that long ends no session with it.
  const stale = await attempt({ refresh: { ...spent, expires_at: new Date(t0) } });
  assert.match(stale.error?.rawMessage ?? "", /has expired/);
  assert.deepEqual(stale.writes, [], "a spent token past its expiry");
  assert.deepEqual((await attempt({ refresh: refreshRow() })).writes, ["issue"]);
});

/** Grant deps that keep what was signed and issued, for the DPoP bindings. */
function recordingDeps(rows: { code?: CodeRow; refresh?: RefreshRow }, subject?: AccessClaims) {
  const writes: Writes = [];
  const base = deps({ now: t0 }, rows, writes);
  const signed: NewAccessToken[] = [];
  const issued: Issued[] = [];
  const grants = {
    ...base.grants,
    issue: (_f: string, _s: Spent, _at: Date, what: Issued) => (
      writes.push("issue"), issued.push(what), Promise.resolve("issued")
    ),
  } as unknown as GrantRepository;
  const accessTokens: AccessTokens = {
    sign: (claims) => (signed.push(claims), base.accessTokens.sign(claims)),
    verify: () => Promise.resolve(subject),
  };
  const registry = {
    getInstallation: () =>
      Promise.resolve(
        create(InstallationSchema, {
          id: "ins_1",
          status: InstallationStatus.ACTIVE,
          scopes: ["a"],
          accountId: "acct",
          principalId: "prn_1",
        }),
      ),
  } as unknown as Registry;
  return {
    grantDeps: { ...base, grants, accessTokens, registry } satisfies GrantDeps,
    writes,
    signed,
    issued,
  };
}

/** The OAuth error code of a refusal. */
const reasonOf = (e: unknown) =>
  e instanceof ConnectError ? e.findDetails(ErrorInfoSchema)[0]?.reason : String(e);

const spa = create(ClientSchema, { ...client, type: ClientType.SPA });
const jkt = "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I";

Deno.test("DPoP: a proof binds the access token, and a public client's refresh token only", async () => {
  const code = { ...(await codeRow()), expires_at: new Date(t0 + 60_000) };
  const request = create(IssueTokenRequestSchema, {
    grantType: "authorization_code",
    code: "oac_x",
    redirectUri: "https://app.example/cb",
    codeVerifier: verifier,
  });
  for (const [who, c, refreshJkt] of [["web", client, null], ["spa", spa, jkt]] as const) {
    const r = recordingDeps({ code: { ...code, client_id: c.id } });
    const res = await authorizationCode(r.grantDeps, c, request, jkt);
    assert.equal(res.tokenType, "DPoP", who);
    assert.deepEqual(r.signed[0]!.cnf, { jkt }, who);
    assert.equal(r.issued[0]!.refresh.dpop_jkt, refreshJkt, who);
  }
  const bearer = recordingDeps({ code: { ...code, client_id: spa.id } });
  const res = await authorizationCode(bearer.grantDeps, spa, request);
  assert.equal(res.tokenType, "Bearer");
  assert.equal(bearer.signed[0]!.cnf, undefined);
  assert.equal(bearer.issued[0]!.refresh.dpop_jkt, null);
});

Deno.test("DPoP: a code bound to a key (dpop_jkt) needs a proof of it, and refusing it writes nothing", async () => {
  const code = { ...(await codeRow()), dpop_jkt: jkt };
  const request = create(IssueTokenRequestSchema, {
    grantType: "authorization_code",
    code: "oac_x",
    redirectUri: "https://app.example/cb",
    codeVerifier: verifier,
  });
  const without = recordingDeps({ code });
  assert.equal(
    await authorizationCode(without.grantDeps, client, request).then(() => "issued", reasonOf),
    "invalid_grant",
  );
  const other = recordingDeps({ code });
  assert.equal(
    await authorizationCode(other.grantDeps, client, request, "another-key").then(
      () => "issued",
      reasonOf,
    ),
    "invalid_grant",
  );
  assert.deepEqual([...without.writes, ...other.writes], []);
  const same = recordingDeps({ code });
  const res = await authorizationCode(same.grantDeps, client, request, jkt);
  assert.equal(res.tokenType, "DPoP");
  assert.deepEqual(same.signed[0]!.cnf, { jkt });
});

Deno.test("DPoP: a bound refresh token needs a proof of its key, and refusing it writes nothing", async () => {
  const request = create(IssueTokenRequestSchema, {
    grantType: "refresh_token",
    refreshToken: "ort_x",
  });
  const bound = { ...refreshRow(), dpop_jkt: jkt };
  const without = recordingDeps({ refresh: bound });
  assert.equal(
    await refreshToken(without.grantDeps, spa, request).then(() => "issued", reasonOf),
    "invalid_dpop_proof",
  );
  const other = recordingDeps({ refresh: bound });
  assert.equal(
    await refreshToken(other.grantDeps, spa, request, "another-key").then(() => "issued", reasonOf),
    "invalid_grant",
  );
  // Nobody without the key learns that a bound token was spent, nor revokes its family.
  const spent = recordingDeps({ refresh: { ...bound, spent_at: new Date(t0 - 1) } });
  assert.equal(
    await refreshToken(spent.grantDeps, spa, request, "another-key").then(() => "issued", reasonOf),
    "invalid_grant",
  );
  assert.deepEqual([...without.writes, ...other.writes, ...spent.writes], []);
  const same = recordingDeps({ refresh: bound });
  const res = await refreshToken(same.grantDeps, spa, request, jkt);
  assert.equal(res.tokenType, "DPoP");
  assert.equal(same.issued[0]!.refresh.dpop_jkt, jkt, "the new refresh token stays bound");
  assert.deepEqual(same.signed[0]!.cnf, { jkt });
  // A confidential client's refresh token is not bound: refreshed with or without a proof.
  const web = recordingDeps({ refresh: refreshRow() });
  assert.equal((await refreshToken(web.grantDeps, client, request, jkt)).tokenType, "DPoP");
  assert.equal(web.issued[0]!.refresh.dpop_jkt, null);
  const webBearer = recordingDeps({ refresh: refreshRow() });
  assert.equal((await refreshToken(webBearer.grantDeps, client, request)).tokenType, "Bearer");
});

Deno.test("DPoP: token exchange keeps a subject token's binding", async () => {
  const subject = (cnf?: { jkt: string }): AccessClaims => ({
    sub: "cli_a",
    aud: "p",
    exp: t0 / 1000 + 900,
    iat: t0 / 1000,
    jti: crypto.randomUUID(),
    client_id: "cli_a",
    scope: "",
    ...(cnf ? { cnf } : {}),
  });
  const request = create(IssueTokenRequestSchema, {
    grantType: "urn:ietf:params:oauth:grant-type:token-exchange",
    subjectToken: "jwt",
    subjectTokenType: accessTokenType,
    audience: "ins_1",
  });
  const boundSubject = subject({ jkt });
  const exchange = (s: AccessClaims, key?: string) => {
    const r = recordingDeps({}, s);
    return tokenExchange(r.grantDeps, client, request, key).then(
      (res) => ({ type: res.tokenType, cnf: r.signed[0]!.cnf }),
      (e) => reasonOf(e),
    );
  };
  assert.equal(await exchange(boundSubject), "invalid_dpop_proof");
  assert.equal(await exchange(boundSubject, "another-key"), "invalid_request");
  assert.deepEqual(await exchange(boundSubject, jkt), { type: "DPoP", cnf: { jkt } });
  assert.deepEqual(await exchange(subject()), { type: "Bearer", cnf: undefined });
  assert.deepEqual(await exchange(subject(), jkt), { type: "DPoP", cnf: { jkt } });
});

Deno.test("DPoP: the proof is spent once the code or token is found good, before any write", async () => {
  const refresh = create(IssueTokenRequestSchema, {
    grantType: "refresh_token",
    refreshToken: "ort_x",
  });
  const code = create(IssueTokenRequestSchema, {
    grantType: "authorization_code",
    code: "oac_x",
    redirectUri: "https://app.example/cb",
    codeVerifier: verifier,
  });
  const bound = { ...refreshRow(), dpop_jkt: jkt };
  /** What the grant answers with a proof of `key` whose spending is a replay or not, and the calls. */
  const run = async (
    grant: Grant,
    req: typeof refresh,
    rows: { code?: CodeRow; refresh?: RefreshRow },
    replayedProof = false,
    key = jkt,
  ) => {
    const writes: Writes = [];
    const grantDeps = {
      ...deps({ now: t0 }, rows, writes),
      spendProof: () => (
        writes.push("spendProof"),
          replayedProof
            ? Promise.reject(oauthError("invalid_dpop_proof", "The DPoP proof was already used"))
            : Promise.resolve()
      ),
    };
    const answer = await grant(grantDeps, spa, req, key).then(() => "issued", reasonOf);
    return { answer, writes };
  };
  // Nothing good found: the proof is not spent.
  for (
    const [what, grant, req, rows, key] of [
      ["an unknown refresh token", refreshToken, refresh, {}, jkt],
      ["another key's bound token", refreshToken, refresh, { refresh: bound }, "another-key"],
      ["an expired refresh token", refreshToken, refresh, {
        refresh: { ...refreshRow(), expires_at: new Date(t0) },
      }, jkt],
      ["an unknown code", authorizationCode, code, {}, jkt],
    ] as const
  ) {
    const { answer, writes } = await run(grant, req, rows, false, key);
    assert.equal(answer, "invalid_grant", what);
    assert.deepEqual(writes, [], what);
  }
  // Found good: spent first, then the grant writes.
  assert.deepEqual(await run(refreshToken, refresh, { refresh: bound }), {
    answer: "issued",
    writes: ["spendProof", "issue"],
  });
  assert.deepEqual(await run(authorizationCode, code, { code: await codeRow() }), {
    answer: "issued",
    writes: ["spendProof", "issue"],
  });
  const spent = { ...bound, spent_at: new Date(t0 - 1) };
  assert.deepEqual((await run(refreshToken, refresh, { refresh: spent })).writes, [
    "spendProof",
    "revokeFamily",
  ]);
  // A replayed proof: refused, and nothing written, not even the revocation of a reused token.
  for (const rows of [{ refresh: bound }, { refresh: spent }]) {
    assert.deepEqual(await run(refreshToken, refresh, rows, true), {
      answer: "invalid_dpop_proof",
      writes: ["spendProof"],
    });
  }
});
