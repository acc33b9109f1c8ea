/**
 * Client secrets that expire and record their use, end to end: the real gateway, registry and token
 * service, driven by a stock OAuth client (panva's oauth4webapi) through discovery. The registry
 * and the token service each run on a clock the test moves (lib/testing/clock.ts), so "two hours
 * later" takes no time: a secret the token service verified, and answers from memory, stops
 * working at its expiry by the token service's own clock, with nothing notified and while the
 * registry (whose clock has not moved) would still accept it, and the client's other secret goes
 * on working; the listing then shows it expired, and `last_used_at` follows the grants.
 */

import assert from "node:assert/strict";
import * as oauth from "oauth4webapi";
import {
  httpClient,
  type MovableClock,
  movableClock,
  type Stack,
  startStack,
  until,
} from "../lib/testing/mod.ts";

const insecure = { [oauth.allowInsecureRequests]: true };
const hour = 3600;

Deno.test("an expired secret is invalid_client at its expiry, the client's other one still works", async (t) => {
  const clocks: MovableClock[] = [];
  let stack: Stack | undefined;
  try {
    const registryClock = await movableClock();
    clocks.push(registryClock);
    const tokenClock = await movableClock();
    clocks.push(tokenClock);
    stack = await startStack({
      processEnv: { oauth: registryClock.env, token: tokenClock.env },
    });
    const api = httpClient(stack.gatewayUrl);
    // Valid for as long as the registry's clock may run ahead in this test.
    const admin = await stack.token({ sub: "admin", projects: ["xp"], ttlSeconds: 24 * hour });
    await api("PATCH", "/v1/projects/xp/config", {
      token: admin,
      json: { application_name: "Expiring" },
    });
    const created = await api("POST", "/v1/projects/xp/clients", {
      token: admin,
      json: { name: "worker", type: "web" },
    });
    assert.equal(created.status, 201, created.text);
    const clientId = created.body.id as string;
    const secretsPath = `/v1/projects/xp/clients/${clientId}/secrets`;
    const short = await api("POST", secretsPath, {
      token: admin,
      json: { lifetime_seconds: hour },
    });
    assert.equal(short.status, 201, short.text);
    const lasting = await api("POST", secretsPath, { token: admin });
    assert.equal(lasting.status, 201, lasting.text);
    assert.equal(lasting.body.expires_at, null);
    const listed = async () => {
      const res = await api("GET", secretsPath, { token: admin });
      assert.equal(res.status, 200, res.text);
      return new Map<string, Record<string, string | null>>(
        res.body.data.map((s: Record<string, string | null>) => [s.id, s]),
      );
    };

    const issuer = new URL(stack.gatewayUrl);
    const as = await oauth.processDiscoveryResponse(
      issuer,
      await oauth.discoveryRequest(issuer, { algorithm: "oauth2", ...insecure }),
    );
    const client = { client_id: clientId };
    /** A client_credentials grant: "ok", or the OAuth error and its status. */
    const grant = async (secret: string) => {
      try {
        await oauth.processClientCredentialsResponse(
          as,
          client,
          await oauth.clientCredentialsGrantRequest(
            as,
            client,
            oauth.ClientSecretPost(secret),
            new URLSearchParams({ scope: "read" }),
            insecure,
          ),
        );
        return "ok";
      } catch (error) {
        if (error instanceof oauth.ResponseBodyError) return `${error.status} ${error.error}`;
        throw error;
      }
    };
    const hits = async () => {
      const text = await (await fetch(`${stack!.tokenHttp}/metrics`)).text();
      return Number(
        /registry_cache_answers_total\{result="hits"[^}]*\} (\d+)/.exec(text)?.[1] ?? 0,
      );
    };
    /** A grant, and whether the token service answered the client's secret from memory. */
    const grantSeen = async (secret: string) => {
      const before = await hits();
      const result = await grant(secret);
      return { result, fromMemory: await hits() > before };
    };
    /**
     * Waits until the token service answers the secret (which must work) from memory: once it
     * has seen the registry's triggers, and its change feed is fresh (which a jump of its clock
     * makes it doubt until its next heartbeat comes back).
     */
    const answeredFromMemory = (secret: string) =>
      until(
        async () => {
          const { result, fromMemory } = await grantSeen(secret);
          assert.equal(result, "ok");
          return fromMemory;
        },
        30_000,
        "a grant answered from the token service's memory",
      );

    await t.step("both secrets work, and a grant sets last_used_at", async () => {
      assert.equal(await grant(short.body.secret), "ok");
      assert.equal(await grant(lasting.body.secret), "ok");
      await until(
        async () => [...(await listed()).values()].every((s) => s.last_used_at !== null),
        5000,
        "last_used_at of both secrets",
      );
      for (const s of (await listed()).values()) {
        assert.equal(s.status, "active");
        // The registry's clock, which dated the secret's creation too.
        assert.ok(Date.parse(s.last_used_at!) >= Date.parse(s.created_at!), JSON.stringify(s));
      }
      await answeredFromMemory(short.body.secret);
    });

    await t.step("two hours on, by the token service's clock: invalid_client", async () => {
      await tokenClock.advance(2 * hour);
      await answeredFromMemory(lasting.body.secret);
      // Answered from memory, where it verified: nothing was notified, and the registry, on the
      // real time, would still say valid. Its expiry, kept with it, decides.
      assert.deepEqual(await grantSeen(short.body.secret), {
        result: "401 invalid_client",
        fromMemory: true,
      });
      assert.equal(await grant(lasting.body.secret), "ok", "the client's other secret");
      assert.equal(await grant(short.body.secret), "401 invalid_client");
      // Introspection and revocation authenticate the same way.
      const introspected = await oauth.introspectionRequest(
        as,
        client,
        oauth.ClientSecretPost(short.body.secret),
        "any-token",
        insecure,
      );
      assert.equal(introspected.status, 401);
      assert.equal((await introspected.json()).error, "invalid_client");
      const revoked = await oauth.revocationRequest(
        as,
        client,
        oauth.ClientSecretPost(short.body.secret),
        "any-token",
        insecure,
      );
      assert.equal(revoked.status, 401);
      assert.equal((await revoked.json()).error, "invalid_client");
    });

    await t.step("three hours on for both: listed as expired; last_used_at moves on", async () => {
      await registryClock.advance(3 * hour);
      await tokenClock.advance(hour);
      const secrets = await listed();
      assert.equal(secrets.get(short.body.id)!.status, "expired");
      assert.equal(secrets.get(short.body.id)!.expires_at, short.body.expires_at);
      assert.equal(secrets.get(lasting.body.id)!.status, "active");
      const usedBefore = Date.parse(secrets.get(lasting.body.id)!.last_used_at!);
      assert.equal(await grant(short.body.secret), "401 invalid_client");
      // The use reaches the registry (reported in the background, or asked while the token
      // service's feed catches up with its clock's jump) and is recorded: over an hour later.
      assert.equal(await grant(lasting.body.secret), "ok");
      await until(
        async () => {
          const used = (await listed()).get(lasting.body.id)!.last_used_at!;
          return Date.parse(used) > usedBefore + 2 * hour * 1000;
        },
        10_000,
        "last_used_at of the secret in use, three hours on",
      );
      assert.equal(
        Date.parse((await listed()).get(short.body.id)!.last_used_at!) < usedBefore + 60_000,
        true,
        "the expired secret's refused uses are none",
      );
    });
  } finally {
    await stack?.stop();
    for (const clock of clocks) await clock.close();
  }
});
