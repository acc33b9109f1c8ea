/**
 * Client secrets that expire and record their use, end to end: the real gateway, registry and token
 * service, driven by a stock OAuth client (panva's oauth4webapi) through discovery. The registry
 * and the token service each run on a clock the test moves (lib/testing/clock.ts), so "two hours
 * later" takes no time: a secret the token service verified, and answers from memory, stops
 * working at its expiry by the token service's own clock, with nothing notified and while the
 * registry (whose clock has not moved) would still accept it, and the client's other secret goes
 * on working; the listing then shows it expired, and `last_used_at` follows the grants. What
 * expired by the registry's clock has a new etag: a copy read while it was active is not
 * revalidated, nor deleted under its old `If-Match`.
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
    // A key that expires in an hour too, read as clients cache it: its etag while active.
    const keyPath = `/v1/projects/xp/clients/${clientId}/keys`;
    const key = await api("POST", keyPath, {
      token: admin,
      json: { generate: "EdDSA", expires_at: new Date(Date.now() + hour * 1000).toISOString() },
    });
    assert.equal(key.status, 201, key.text);
    const activeKey = await api("GET", `${keyPath}/${key.body.id}`, { token: admin });
    assert.equal(activeKey.body.status, "active");
    const activeKeyTag = activeKey.headers.get("etag")!;
    assert.equal(activeKeyTag, key.headers.get("etag"));
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

    await t.step(
      "a resource server whose secret expires introspects, again and again",
      async () => {
        const issued = await api("POST", "/oauth2/token", {
          headers: { "content-type": "application/x-www-form-urlencoded" },
          raw: new URLSearchParams({
            grant_type: "client_credentials",
            client_id: clientId,
            client_secret: lasting.body.secret,
          }).toString(),
        });
        assert.equal(issued.status, 200, issued.text);
        // An expiry given to the microsecond (RFC 3339 allows any fraction): the answer may be
        // given again until then at most (reusable_until_ms), and each time it is 200.
        const expiresAt = new Date(Date.now() + 2 * hour * 1000).toISOString()
          .replace("Z", "457Z");
        const precise = await api("POST", secretsPath, {
          token: admin,
          json: { expires_at: expiresAt },
        });
        assert.equal(precise.status, 201, precise.text);
        for (let i = 0; i < 3; i++) {
          const res = await api("POST", "/oauth2/introspect", {
            headers: { "content-type": "application/x-www-form-urlencoded" },
            raw: new URLSearchParams({
              token: issued.body.access_token,
              client_id: clientId,
              client_secret: precise.body.secret,
            }).toString(),
          });
          assert.equal(res.status, 200, res.text);
          assert.equal(res.body.active, true, res.text);
        }
      },
    );

    // A secret that expires in an hour and is never used: nothing writes its row after its create.
    const idle = await api("POST", secretsPath, { token: admin, json: { lifetime_seconds: hour } });
    assert.equal(idle.status, 201, idle.text);

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

    await t.step(
      "what expired has a new etag: not 304, and a delete with the old one is 412",
      async () => {
        // The registry's clock is three hours on: the key expired without a write of its row.
        const keyUrl = `${keyPath}/${key.body.id}`;
        const revalidated = await api("GET", keyUrl, {
          token: admin,
          headers: { "if-none-match": activeKeyTag },
        });
        assert.equal(revalidated.status, 200, "the copy that says active is not current");
        assert.equal(revalidated.body.status, "expired");
        const expiredKeyTag = revalidated.headers.get("etag")!;
        assert.notEqual(expiredKeyTag, activeKeyTag);
        assert.equal(expiredKeyTag, `"${revalidated.body.etag}"`);
        const again = await api("GET", keyUrl, {
          token: admin,
          headers: { "if-none-match": expiredKeyTag },
        });
        assert.equal(again.status, 304, "the expired representation is stable");
        const listedKey = (await api("GET", keyPath, { token: admin })).body.data
          .find((k: { id: string }) => k.id === key.body.id);
        assert.equal(`"${listedKey.etag}"`, expiredKeyTag, "list and GET agree");

        // The idle secret: its create response said active under this ETag.
        const secret = (await listed()).get(idle.body.id)!;
        assert.equal(secret.status, "expired");
        const createdTag = idle.headers.get("etag")!;
        assert.equal(createdTag, `"${idle.body.etag}"`);
        assert.notEqual(`"${secret.etag}"`, createdTag);

        // A delete under the etag read while active: 412, and nothing is deleted.
        for (
          const [url, tag] of [[`${secretsPath}/${idle.body.id}`, createdTag], [
            keyUrl,
            activeKeyTag,
          ]]
        ) {
          const stale = await api("DELETE", url!, { token: admin, headers: { "if-match": tag! } });
          assert.equal(stale.status, 412, stale.text);
          assert.equal(stale.body.error.code, "aborted");
        }
        assert.ok((await listed()).has(idle.body.id));
        assert.equal((await api("GET", keyUrl, { token: admin })).status, 200);
        // Under the current one: deleted.
        for (
          const [url, tag] of [
            [`${secretsPath}/${idle.body.id}`, `"${secret.etag}"`],
            [keyUrl, expiredKeyTag],
          ]
        ) {
          const deleted = await api("DELETE", url!, {
            token: admin,
            headers: { "if-match": tag! },
          });
          assert.equal(deleted.status, 204, deleted.text);
        }
        assert.ok(!(await listed()).has(idle.body.id));
      },
    );
  } finally {
    await stack?.stop();
    for (const clock of clocks) await clock.close();
  }
});
