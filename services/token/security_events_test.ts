/**
 * The token service's security events, in process: its real handlers and its real client
 * authentication interceptor (as ./main.ts lists them) through connect-es's router transport, on a
 * real Postgres migrated with the token schema's migrations, with an in-memory stand-in for the
 * oauth-registry. Each kind of event is recorded once, with its result, resource and actor, in the
 * flows that make it; a flood of bad client credentials gives one summary row per client and
 * window (on an injected clock); ListEvents filters and is authorized; WatchEvents follows; and no
 * token, code, secret, assertion or CSRF token is in any event.
 */

import assert from "node:assert/strict";
import { create, getOption, hasOption, toJson } from "@bufbuild/protobuf";
import { Code, createClient, createRouterTransport } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { http } from "../../gen/google/api/annotations_pb.ts";
import { EventSchema } from "../../gen/registry/audit/v1/event_pb.ts";
import {
  type Client,
  ClientSchema,
  ClientStatus,
  ClientType,
} from "../../gen/registry/oauth/v1/client_pb.ts";
import { type OAuthConfig, OAuthConfigSchema } from "../../gen/registry/oauth/v1/config_pb.ts";
import {
  type Installation,
  InstallationSchema,
  InstallationStatus,
} from "../../gen/registry/oauth/v1/installation_pb.ts";
import {
  ClientAuthMethod,
  Decision,
  TokenService,
} from "../../gen/registry/token/v1/token_service_pb.ts";
import { createEventFeed, numberEvents } from "../../lib/audit/mod.ts";
import { connect, migrate, readMigrations } from "../../lib/db/mod.ts";
import { createLogger, idKind, oauthPaths } from "../../lib/platform/mod.ts";
import { authOptions, createTokenVerifier, signToken } from "../../lib/policy/mod.ts";
import { bind, register } from "../../lib/rpc/mod.ts";
import { createTestDatabase, rejection } from "../../lib/testing/mod.ts";
import { createAccessTokens } from "./access_tokens.ts";
import { createAuthFailures } from "./auth_failures.ts";
import { createMemoryBudget } from "../../lib/platform/mod.ts";
import { deriveCsrfKey } from "./authorization.ts";
import { createAssertionVerifier, jwtBearerAssertionType } from "./client_assertion.ts";
import { clientAuthentication, clientRules } from "./client_auth.ts";
import { createDpop } from "./dpop.ts";
import { createKeyRing } from "./keys.ts";
import { createPushed } from "./pushed.ts";
import type { Registry } from "./registry.ts";
import { createPushedRequests } from "./repository/pushed_requests.ts";
import { createUsedJtis } from "./repository/used_jtis.ts";
import { uncachedRevocations } from "./revocations.ts";
import { createTokenService } from "./service.ts";

const method = (name: string) => `${TokenService.typeName}/${name}`;
const issuer = "https://issuer.example";
const verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
const clientIds = idKind("cli");
const installationIds = idKind("ins");

/** The registry, in memory: clients, their one secret, configs, and consent per user. */
function memoryRegistry() {
  const clients = new Map<string, Client>();
  const secrets = new Map<string, string>();
  const configs = new Map<string, OAuthConfig>();
  const installations = new Map<string, Installation>();
  const consents = new Map<string, Installation>();
  const registry: Registry = {
    verifySecret: (clientId, secret) => {
      const client = clients.get(clientId);
      const ok = client && client.status === ClientStatus.ACTIVE &&
        secrets.get(clientId) === secret;
      return Promise.resolve(ok ? { client, expiresAt: undefined } : undefined);
    },
    lookupClientKeys: () => Promise.resolve(undefined),
    recordKeyUse: () => Promise.resolve(),
    getClient: (projectId, clientId) => {
      const client = clients.get(clientId);
      return Promise.resolve(client?.projectId === projectId ? client : undefined);
    },
    lookupClient: (clientId) => Promise.resolve(clients.get(clientId)),
    getConfig: (projectId) => Promise.resolve(configs.get(projectId)),
    getInstallation: (projectId, id) => {
      const found = installations.get(id);
      return Promise.resolve(found?.projectId === projectId ? found : undefined);
    },
    consent: (call, projectId, scopes) => {
      const key = `${call.get("authorization")} ${projectId}`;
      const held = consents.get(key);
      const installation = create(InstallationSchema, {
        id: held?.id ?? installationIds.generate().id,
        projectId,
        accountId: "acct-1",
        principalId: "prn_user1",
        status: InstallationStatus.ACTIVE,
        scopes: [...new Set([...(held?.scopes ?? []), ...scopes])],
      });
      consents.set(key, installation);
      installations.set(installation.id, installation);
      return Promise.resolve(installation);
    },
    liveInstallation: (authorization, _accountId, projectId) =>
      Promise.resolve(consents.get(`${authorization} ${projectId}`)),
    registersOrigin: () => Promise.resolve(false),
  };
  const addClient = (projectId: string, type: ClientType, redirectUris: string[]) => {
    const client = create(ClientSchema, {
      id: clientIds.generate().id,
      projectId,
      name: `${ClientType[type]} of ${projectId}`,
      type,
      status: ClientStatus.ACTIVE,
      redirectUris,
    });
    clients.set(client.id, client);
    return client;
  };
  const addConfig = (projectId: string) =>
    configs.set(projectId, create(OAuthConfigSchema, { applicationName: `App ${projectId}` }));
  return { registry, addClient, addConfig, secrets };
}

/** A row of token.events, as the tests read it. */
interface Row {
  parent: string;
  seq: string;
  method: string;
  resource: string;
  actor_sub: string;
  actor_client_id: string | null;
  source_ip: string;
  changes: { field: string; new?: unknown }[];
  result: string;
}

/** The `new` value of a field of an event's changes. */
const field = (row: Row, name: string) => row.changes.find((c) => c.field === name)?.new;

Deno.test("security events: each kind once, failures summarised, listed and followed, no secret", async (t) => {
  const db = await createTestDatabase();
  const sql = connect(db.url, { applicationName: "token-security-events-test", max: 8 });
  const jwtSecret = crypto.randomUUID();
  const log = createLogger("token-service", "error");
  /** The clock of the failure windows; the rest runs on the real one. */
  const clock = { now: Date.UTC(2030, 0, 1, 12, 0, 0) };
  const feed = createEventFeed(sql, "token", { maxWatchers: 4 });
  try {
    await migrate(sql, "token", await readMigrations(new URL("./migrations/", import.meta.url)));
    const { registry, addClient, addConfig, secrets } = memoryRegistry();
    addConfig("p1");
    addConfig("p2");
    const web = addClient("p1", ClientType.WEB, ["https://app.example/cb"]);
    const webSecret = "wsec_" + crypto.randomUUID();
    secrets.set(web.id, webSecret);
    const native = addClient("p1", ClientType.NATIVE, ["http://127.0.0.1/cb"]);
    const other = addClient("p2", ClientType.WEB, ["https://other.example/cb"]);
    secrets.set(other.id, "wsec_" + crypto.randomUUID());

    const now = Date.now;
    const keys = createKeyRing({
      sql,
      encryptionKey: "security-events-test-key-".padEnd(40, "k"),
      rotationMs: 720 * 3_600_000,
      tokenLifetimeMs: 960_000,
      now,
    });
    const usedJtis = createUsedJtis(sql);
    const failures = createAuthFailures({
      sql,
      lookupClient: (id) => registry.lookupClient(id),
      now: () => clock.now,
      log,
    });
    const impl = createTokenService({
      sql,
      keys,
      accessTokens: createAccessTokens({ keys, issuer, ttlSeconds: 900, now }),
      registry,
      revocations: uncachedRevocations(sql),
      issuer,
      refreshTokenTtlSeconds: 3600,
      jwksMaxAgeSeconds: 300,
      csrfKeys: [deriveCsrfKey("security-events-test-key-".padEnd(40, "k"))],
      dpop: createDpop({ usedJtis, nonceKey: undefined, now }),
      pushed: createPushed({ repository: createPushedRequests(sql), now }),
      usedJtis,
      requirePar: false,
      now,
      feed,
    });
    const transport = createRouterTransport(
      (router) => register(router, [bind(TokenService, impl)]),
      {
        router: {
          interceptors: [
            clientAuthentication({
              issuer,
              registry,
              assertions: createAssertionVerifier({
                registry,
                usedJtis,
                audiences: [issuer, issuer + oauthPaths.token],
                now,
              }),
              verify: createTokenVerifier(authOptions({ AUTH_JWT_SECRET: jwtSecret })),
              service: TokenService,
              rules: clientRules,
              now,
              failures,
            }),
          ],
        },
      },
    );
    const api = createClient(TokenService, transport);
    const bearer = async (claims: Parameters<typeof signToken>[1]) => ({
      authorization: `Bearer ${await signToken(jwtSecret, claims)}`,
    });
    const user = await bearer({ sub: "user-1", accountId: "acct-1", projects: [] });
    const admin = await bearer({ sub: "admin-1", projects: ["p1"] });
    const root = await bearer({ sub: "root", projects: ["*"] });
    const webCredentials = {
      clientId: web.id,
      clientSecret: webSecret,
      method: ClientAuthMethod.CLIENT_SECRET_POST,
    };

    /** Everything that must never be in an event. */
    const secretValues = new Set<string>([webSecret, verifier, ...Object.values(user)]);
    const keep = (...values: string[]) => {
      for (const value of values) if (value !== "") secretValues.add(value);
      return values;
    };
    // What has committed, numbered (as ListEvents and the feed number it before they read).
    const events = async (parent = "p1") => {
      await numberEvents(sql, "token");
      return await sql<Row[]>`
        select parent, e.seq::text as seq, method, resource, actor_sub, actor_client_id,
          source_ip, changes, result
        from token.events e where parent = ${parent} order by e.seq`;
    };
    const only = async (result: string, parent = "p1") =>
      (await events(parent)).filter((e) => e.result === result);

    const authorizationRequest = (scope: string, prompt = "") => ({
      responseType: "code",
      clientId: web.id,
      redirectUri: "https://app.example/cb",
      scope,
      state: "st-1",
      codeChallenge: challenge,
      codeChallengeMethod: "S256",
      prompt,
    });
    /** The code a redirect carries (kept as a secret). */
    const codeOf = (redirectTo: string) => {
      const code = new URL(redirectTo).searchParams.get("code");
      assert.ok(code, redirectTo);
      keep(code);
      return code;
    };
    /** The page, and the user's decision on it: the redirect. */
    const decide = async (scope: string, decision: Decision, prompt = "") => {
      const request = authorizationRequest(scope, prompt);
      const started = await api.startAuthorization({ request }, { headers: user });
      assert.equal(started.outcome.case, "consent", "the page is shown");
      const csrfToken = started.outcome.value.csrfToken;
      keep(csrfToken);
      return (await api.decideAuthorization({ request, decision, csrfToken }, { headers: user }))
        .redirectTo;
    };
    /** A code of remembered consent (no page, no decision). */
    const rememberedCode = async (scope: string) => {
      const started = await api.startAuthorization({ request: authorizationRequest(scope) }, {
        headers: user,
      });
      assert.equal(started.outcome.case, "redirectTo", "consent is remembered");
      return codeOf(started.outcome.value);
    };
    const redeem = async (code: string) => {
      const issued = await api.issueToken({
        client: webCredentials,
        grantType: "authorization_code",
        code,
        redirectUri: "https://app.example/cb",
        codeVerifier: verifier,
      });
      keep(issued.accessToken, issued.refreshToken);
      return issued;
    };

    let installationId = "";
    let allowedCode = "";

    await t.step("consent allowed: one event, the user's, about the client", async () => {
      allowedCode = codeOf(await decide("read", Decision.ALLOW));
      const [allowed, ...more] = await only("allowed");
      assert.equal(more.length, 0);
      assert.equal(allowed!.method, method("DecideAuthorization"));
      assert.equal(allowed!.resource, `projects/p1/clients/${web.id}`);
      assert.equal(allowed!.actor_sub, "user-1");
      assert.deepEqual(field(allowed!, "scopes"), ["read"]);
      installationId = field(allowed!, "installation_id") as string;
      assert.match(installationId, /^ins_/);
    });

    await t.step("a code replayed: code_replayed, once, the client's", async () => {
      const code = allowedCode;
      const issued = await redeem(code);
      assert.ok(issued.refreshToken.startsWith("ort_"));
      for (let i = 0; i < 3; i++) {
        const replay = await rejection(redeem(code));
        assert.equal(replay.code, Code.InvalidArgument);
      }
      const [replayed, ...again] = await only("code_replayed");
      assert.equal(again.length, 0, "a family is revoked, and recorded, once");
      assert.equal(replayed!.method, method("IssueToken"));
      assert.equal(replayed!.resource, `projects/p1/installations/${installationId}`);
      assert.equal(replayed!.actor_sub, web.id);
      assert.equal(replayed!.actor_client_id, web.id);
      assert.equal(field(replayed!, "grant_type"), "authorization_code");
      assert.equal(field(replayed!, "revoked_access_tokens"), 1);
    });

    await t.step("consent denied: one event, with the scopes refused", async () => {
      const redirect = new URL(await decide("write", Decision.DENY));
      assert.equal(redirect.searchParams.get("error"), "access_denied");
      const [denied, ...more] = await only("denied");
      assert.equal(more.length, 0);
      assert.equal(denied!.method, method("DecideAuthorization"));
      assert.equal(denied!.resource, `projects/p1/clients/${web.id}`);
      assert.equal(denied!.actor_sub, "user-1");
      assert.deepEqual(field(denied!, "scopes"), ["write"]);
      assert.equal(field(denied!, "installation_id"), undefined);
    });

    await t.step("a refresh token reused: refresh_token_reused, once", async () => {
      // Remembered consent decides nothing, and records nothing.
      const first = await redeem(await rememberedCode("read"));
      assert.equal((await only("allowed")).length, 1);
      const refresh = { client: webCredentials, grantType: "refresh_token" };
      const rotated = await api.issueToken({ ...refresh, refreshToken: first.refreshToken });
      keep(rotated.accessToken, rotated.refreshToken);
      for (let i = 0; i < 2; i++) {
        const reuse = await rejection(
          api.issueToken({ ...refresh, refreshToken: first.refreshToken }),
        );
        assert.equal(reuse.code, Code.InvalidArgument);
      }
      const [reused, ...again] = await only("refresh_token_reused");
      assert.equal(again.length, 0);
      assert.equal(reused!.method, method("IssueToken"));
      assert.equal(reused!.resource, `projects/p1/installations/${installationId}`);
      assert.equal(reused!.actor_sub, web.id);
      assert.equal(field(reused!, "grant_type"), "refresh_token");
      assert.equal(field(reused!, "revoked_access_tokens"), 2, "the code's and the rotation's");
    });

    await t.step("a token revoked: revoked, once per token, nothing for what was not", async () => {
      const own = await api.issueToken({ client: webCredentials, grantType: "client_credentials" });
      keep(own.accessToken);
      // Nothing went with an access token, nor with what was not revoked.
      for (const token of [own.accessToken, own.accessToken, "ort_" + "x".repeat(43)]) {
        const res = await api.revokeToken({ client: webCredentials, token });
        assert.equal(res.revokedAccessTokens, 0n);
      }
      const [access, ...more] = await only("revoked");
      assert.equal(more.length, 0, "revoking again, or something unknown, records nothing");
      assert.equal(access!.method, method("RevokeToken"));
      assert.equal(access!.resource, `projects/p1/clients/${web.id}`);
      assert.equal(access!.actor_sub, web.id);
      assert.equal(field(access!, "token_type"), "access_token");
      assert.match(field(access!, "jti") as string, /^[0-9a-f-]{36}$/);

      const grant = await redeem(await rememberedCode("read"));
      // The grant's access token went with its refresh token, once (RFC 7009 2.1).
      const first = await api.revokeToken({ client: webCredentials, token: grant.refreshToken });
      assert.equal(first.revokedAccessTokens, 1n);
      const again = await api.revokeToken({ client: webCredentials, token: grant.refreshToken });
      assert.equal(again.revokedAccessTokens, 0n);
      const [, refresh, ...after] = await only("revoked");
      assert.equal(after.length, 0);
      assert.equal(refresh!.resource, `projects/p1/installations/${installationId}`);
      assert.equal(field(refresh!, "token_type"), "refresh_token");
      assert.equal(field(refresh!, "revoked_access_tokens"), 1);
    });

    await t.step("a device code's decision: allowed and denied, with the decision", async () => {
      const decideDevice = async (decision: Decision) => {
        const started = await api.startDeviceAuthorization({
          client: { clientId: native.id },
          scope: "read profile",
        });
        keep(started.deviceCode, started.userCode, started.userCode.replace("-", ""));
        const form = await api.startDeviceVerification({}, { headers: user });
        keep(form.csrfToken);
        const page = await api.lookupDeviceCode(
          { userCode: started.userCode, csrfToken: form.csrfToken, clientAddress: "" },
          { headers: user },
        );
        keep(page.consent!.csrfToken);
        await api.decideDeviceCode(
          { userCode: page.userCode, decision, csrfToken: page.consent!.csrfToken },
          { headers: user },
        );
      };
      await decideDevice(Decision.ALLOW);
      await decideDevice(Decision.DENY);
      const device = (await events()).filter((e) => e.method === method("DecideDeviceCode"));
      assert.deepEqual(device.map((e) => e.result), ["allowed", "denied"]);
      for (const e of device) {
        assert.equal(e.resource, `projects/p1/clients/${native.id}`);
        assert.equal(e.actor_sub, "user-1");
        assert.deepEqual(field(e, "scopes"), ["read", "profile"]);
      }
      assert.equal(field(device[0]!, "installation_id"), installationId);
      assert.equal(field(device[1]!, "installation_id"), undefined);
    });

    await t.step("1,000 bad authentications of a client: one summary row per window", async () => {
      const bad = async (clientId: string, secret: string) => {
        keep(secret);
        const refused = await rejection(api.issueToken({
          client: { clientId, clientSecret: secret, method: ClientAuthMethod.CLIENT_SECRET_POST },
          grantType: "client_credentials",
        }, { headers: { "x-forwarded-for": "198.51.100.7", "user-agent": "flood/1.0" } }));
        assert.equal(refused.code, Code.Unauthenticated);
      };
      const windowStart = clock.now;
      for (let i = 0; i < 1000; i += 50) {
        await Promise.all(
          Array.from(
            { length: 50 },
            (_, j) => bad(web.id, `wsec_wrong_${i + j}_${crypto.randomUUID()}`),
          ),
        );
      }
      // Ids no project has, and text that is no id at all (a secret pasted as the client_id).
      const unknownId = clientIds.generate().id;
      await bad(unknownId, "wsec_" + crypto.randomUUID());
      await bad(unknownId, "wsec_" + crypto.randomUUID());
      const pasted = "wsec_pasted_" + crypto.randomUUID();
      keep(pasted);
      await bad(pasted, "wsec_" + crypto.randomUUID());
      assert.deepEqual(await only("authentication_failed"), [], "nothing is written per attempt");
      assert.equal(failures.counted(), 2, "the client, and the well-formed unknown id");

      clock.now += 60_000;
      assert.equal(await failures.flush(), 2, "one event for the client, one for no project");
      const [summary, ...more] = await only("authentication_failed");
      assert.equal(more.length, 0);
      assert.equal(summary!.resource, `projects/p1/clients/${web.id}`);
      assert.equal(summary!.method, method("IssueToken"));
      assert.equal(summary!.actor_sub, web.id);
      assert.equal(summary!.actor_client_id, null, "nothing was authenticated");
      assert.equal(summary!.source_ip, "198.51.100.7");
      assert.equal(field(summary!, "failures"), 1000);
      assert.equal(field(summary!, "window_started_at"), new Date(windowStart).toISOString());
      const [unknown, ...others] = await only("authentication_failed", "-");
      assert.equal(others.length, 0);
      assert.equal(unknown!.resource, "projects/-/clients/unknown");
      assert.equal(unknown!.actor_sub, "");
      assert.equal(field(unknown!, "failures"), 3);

      // The next minute: its own row; a failed client assertion counts under its `sub`.
      for (let i = 0; i < 10; i++) await bad(web.id, `wsec_again_${i}_${crypto.randomUUID()}`);
      const assertion = [
        { alg: "EdDSA", typ: "JWT" },
        {
          iss: web.id,
          sub: web.id,
          aud: issuer,
          exp: Math.floor(Date.now() / 1000) + 60,
          jti: crypto.randomUUID(),
        },
      ].map((part) =>
        btoa(JSON.stringify(part)).replace(/=+$/, "").replace(/\+/g, "-").replace(/\//g, "_")
      ).join(".") + ".c2lnbmF0dXJl";
      keep(assertion);
      const refused = await rejection(api.issueToken({
        client: { clientAssertionType: jwtBearerAssertionType, clientAssertion: assertion },
        grantType: "client_credentials",
      }));
      assert.equal(refused.code, Code.Unauthenticated);
      clock.now += 60_000;
      assert.equal(await failures.flush(), 1);
      assert.equal(await failures.flush(), 0, "an empty window writes nothing");
      const rows = await only("authentication_failed");
      assert.equal(rows.length, 2);
      assert.equal(field(rows[1]!, "failures"), 11);
      const windows = rows.map((r) => field(r, "window_started_at"));
      assert.equal(new Set(windows).size, rows.length, "at most one row per client and window");
    });

    await t.step("the bound: past maxClients, one catch-all count", async () => {
      const bounded = createAuthFailures({
        sql,
        lookupClient: (id) => registry.lookupClient(id),
        now: () => clock.now,
        log,
        maxClients: 3,
      });
      const call = { header: new Headers(), method: TokenService.method.issueToken };
      for (let i = 0; i < 100; i++) bounded.record(clientIds.generate().id, call);
      bounded.record(web.id, call);
      assert.equal(bounded.counted(), 3);
      const before = (await only("authentication_failed", "-")).length;
      assert.equal(await bounded.flush(), 1, "three unknown ids and the rest: one event");
      const rest = (await only("authentication_failed", "-")).slice(before);
      assert.equal(rest.length, 1);
      assert.equal(field(rest[0]!, "failures"), 101);
      assert.equal(field(rest[0]!, "over_limit"), 98);
    });

    await t.step(
      "the counts are held in the memory budget until written, and its room bounds them",
      async () => {
        const budget = createMemoryBudget(4096);
        const held = createAuthFailures({
          sql,
          lookupClient: (id) => registry.lookupClient(id),
          now: () => clock.now,
          log,
          budget,
        });
        const call = { header: new Headers(), method: TokenService.method.issueToken };
        held.record(clientIds.generate().id, call);
        const one = budget.heldBy("cache");
        assert.ok(one > 512, `${one}`);
        for (let i = 0; i < 100; i++) held.record(clientIds.generate().id, call);
        assert.equal(held.counted(), Math.floor(4096 / one), "as many as the budget has room for");
        assert.equal(budget.heldBy("cache"), held.counted() * one);
        const before = (await only("authentication_failed", "-")).length;
        assert.equal(await held.flush(), 1);
        const rest = (await only("authentication_failed", "-")).slice(before);
        assert.equal(field(rest[0]!, "failures"), 101);
        assert.equal(field(rest[0]!, "over_limit"), 101 - Math.floor(4096 / one));
        assert.equal(budget.held, 0, "a written window gives its bytes back");
      },
    );

    await t.step("ListEvents: filters", async () => {
      const list = (req: Record<string, unknown>, headers = admin) =>
        api.listEvents({ projectId: "p1", ...req }, { headers });
      const all = (await list({ limit: 100 })).data;
      const rows = await events();
      assert.equal(all.length, rows.length);
      assert.deepEqual(all.map((e) => e.id), rows.map((r) => r.seq).reverse(), "newest first");
      const results = (page: { data: { result: string }[] }) => page.data.map((e) => e.result);
      assert.deepEqual(
        results(await list({ method: method("DecideAuthorization") })),
        ["denied", "allowed"],
      );
      assert.deepEqual(
        new Set(results(await list({ actor: "user-1", limit: 100 }))),
        new Set(["allowed", "denied"]),
      );
      const byInstallation = await list({
        resource: `projects/p1/installations/${installationId}`,
        limit: 100,
      });
      assert.deepEqual(
        new Set(results(byInstallation)),
        new Set(["code_replayed", "refresh_token_reused", "revoked"]),
      );
      const byClient = await list({ resource: `projects/p1/clients/${native.id}` });
      assert.deepEqual(results(byClient), ["denied", "allowed"]);
      // Paging, and time.
      const first = await list({ limit: 2 });
      assert.equal(first.hasMore, true);
      const second = await list({ limit: 2, after: first.data[1]!.id });
      assert.deepEqual(second.data.map((e) => e.id), all.slice(2, 4).map((e) => e.id));
      // The failure summaries were written on the windows' clock, in 2030.
      const y2030 = timestampFromDate(new Date(Date.UTC(2030, 0, 1)));
      assert.deepEqual(
        results(await list({ since: y2030 })),
        ["authentication_failed", "authentication_failed"],
      );
      const before2030 = await list({ until: y2030, limit: 100 });
      assert.equal(before2030.data.length, all.length - 2);
      assert.ok(before2030.data.every((e) => e.result !== "authentication_failed"));
      // An event as the contract shows it.
      const shown = toJson(EventSchema, all.find((e) => e.result === "allowed")!);
      assert.equal((shown as { actor: { sub: string } }).actor.sub, "user-1");
    });

    await t.step(
      "ListEvents and WatchEvents: project administrators only; only ListEvents has a route",
      async () => {
        assert.deepEqual(getOption(TokenService.method.listEvents, http).pattern, {
          case: "get",
          value: "/v1/projects/{project_id}/security-events",
        });
        assert.equal(hasOption(TokenService.method.watchEvents, http), false);
        const cases: [Record<string, string>, string, Code][] = [
          [user, "p1", Code.PermissionDenied],
          [admin, "p2", Code.PermissionDenied],
          [admin, "-", Code.PermissionDenied],
          [{}, "p1", Code.Unauthenticated],
          [root, "no/such", Code.InvalidArgument],
        ];
        for (const [headers, projectId, code] of cases) {
          const listed = await rejection(api.listEvents({ projectId }, { headers }));
          assert.equal(listed.code, code, `ListEvents ${projectId}`);
          const watched = await rejection((async () => {
            for await (const _ of api.watchEvents({ projectId }, { headers })) break;
          })());
          assert.equal(watched.code, code, `WatchEvents ${projectId}`);
        }
        // An access token of this service is no platform token.
        const own = await api.issueToken({
          client: webCredentials,
          grantType: "client_credentials",
        });
        keep(own.accessToken);
        const asClient = await rejection(
          api.listEvents({ projectId: "p1" }, {
            headers: { authorization: `Bearer ${own.accessToken}` },
          }),
        );
        assert.equal(asClient.code, Code.Unauthenticated);
        // p2's events are p2's; `-` is for those that administer every project.
        assert.equal((await api.listEvents({ projectId: "p2" }, { headers: root })).data.length, 0);
        const none = await api.listEvents({ projectId: "-", limit: 100 }, { headers: root });
        assert.ok(none.data.every((e) => e.resource.startsWith("projects/-/clients/")));
        assert.ok(none.data.length >= 2);
      },
    );

    await t.step(
      "WatchEvents: every event of the project, in order, then what commits",
      async () => {
        const expected = (await events()).map((r) => r.seq);
        const controller = new AbortController();
        const seen: string[] = [];
        try {
          for await (
            const res of api.watchEvents({ projectId: "p1", after: "0" }, {
              headers: admin,
              signal: controller.signal,
            })
          ) {
            seen.push(res.event!.id);
            if (seen.length === expected.length) {
              // One more, committed while watching.
              await decide("admin", Decision.DENY, "consent");
            }
            if (seen.length === expected.length + 1) break;
          }
        } finally {
          controller.abort();
        }
        assert.deepEqual(seen.slice(0, expected.length), expected);
        assert.equal(seen.length, expected.length + 1);
      },
    );

    await t.step("no token, code, secret, assertion or CSRF token in any event", async () => {
      const dump = (await sql<{ row: string }[]>`select e::text as row from token.events e`)
        .map((r) => r.row).join("\n");
      assert.ok(dump.includes(web.id), "the dump is of the events");
      assert.ok(secretValues.size > 20);
      for (const value of secretValues) {
        assert.ok(!dump.includes(value), `an event holds a secret value (${value.slice(0, 8)}...)`);
      }
      // Nor the hashes codes and tokens are stored as.
      const hashes = await sql<{ hex: string }[]>`
        select encode(code_hash, 'hex') as hex from token.authorization_codes
        union all select encode(token_hash, 'hex') from token.refresh_tokens`;
      assert.ok(hashes.length > 0);
      for (const { hex } of hashes) assert.ok(!dump.includes(hex));
    });
  } finally {
    feed.close();
    await sql.end({ timeout: 5 });
    await db.drop();
  }
});
