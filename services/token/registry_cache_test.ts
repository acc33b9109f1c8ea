import assert from "node:assert/strict";
import { ClientKeySchema } from "../../gen/registry/oauth/v1/client_key_pb.ts";
import { create } from "@bufbuild/protobuf";
import { ClientSchema, ClientStatus, ClientType } from "../../gen/registry/oauth/v1/client_pb.ts";
import { gate, manualFeed } from "../../lib/testing/mod.ts";
import { createMemoryBudget, idKind } from "../../lib/platform/mod.ts";
import { expired, type Registry } from "./registry.ts";
import { cacheRegistry, reportUsesEveryMs } from "./registry_cache.ts";
import {
  type Installation,
  InstallationSchema,
  InstallationStatus,
} from "../../gen/registry/oauth/v1/installation_pb.ts";

const ids = idKind("cli");
const installationIds = idKind("ins");

/** A registry that counts its calls, a feed driven by hand, and the cache over them. */
function setup(
  options: { maxBytes?: number; budget?: ReturnType<typeof createMemoryBudget> } = {},
) {
  const clients = new Map<
    string,
    { secret: string; status: ClientStatus; projectId: string; expiresAt?: number }
  >();
  const calls: string[] = [];
  /** Live installations by `account project`. */
  const live = new Map<string, Installation>();
  /** Installations as a project's administrator reads them, by id. */
  const byId = new Map<string, Installation>();
  const verifying = gate();
  let failing = false;
  const clock = { now: Date.UTC(2030, 0, 1) };
  const registry: Registry = {
    async verifySecret(clientId, secret) {
      calls.push(`verify ${clientId}`);
      await verifying.pass();
      if (failing) throw new Error("the registry is down");
      const c = clients.get(clientId);
      if (!c || c.secret !== secret || c.status !== ClientStatus.ACTIVE) return undefined;
      if (c.expiresAt !== undefined && c.expiresAt <= clock.now) return undefined;
      const client = create(ClientSchema, {
        id: clientId,
        projectId: c.projectId,
        status: c.status,
        type: ClientType.WEB,
      });
      return { client, expiresAt: c.expiresAt };
    },
    lookupClient(clientId) {
      calls.push(`lookup ${clientId}`);
      const c = clients.get(clientId);
      return Promise.resolve(
        c && create(ClientSchema, { id: clientId, projectId: c.projectId, status: c.status }),
      );
    },
    lookupClientKeys(clientId) {
      calls.push(`keys ${clientId}`);
      const c = clients.get(clientId);
      return Promise.resolve(
        c && {
          client: create(ClientSchema, { id: clientId, projectId: c.projectId, status: c.status }),
          keys: [create(ClientKeySchema, { id: "key_1", clientId, kid: "k1", algorithm: "EdDSA" })],
        },
      );
    },
    recordKeyUse(_clientId, keyId) {
      calls.push(`key used ${keyId}`);
      return Promise.resolve();
    },
    getClient: () => Promise.reject(new Error("not used by the cache")),
    getConfig: () => Promise.resolve(undefined),
    getInstallation: (_projectId, id) => Promise.resolve(byId.get(id)),
    consent(_authorization, projectId, scopes) {
      calls.push(`consent ${projectId}`);
      const id = installationIds.generate().id;
      const installation = create(InstallationSchema, {
        id,
        projectId,
        accountId: "acc_1",
        scopes,
        status: InstallationStatus.ACTIVE,
        applicationName: "Demo",
        authorizedById: "usr_1",
        etag: "1",
      });
      live.set(`acc_1 ${projectId}`, installation);
      return Promise.resolve(installation);
    },
    liveInstallation(_authorization, accountId, projectId) {
      calls.push(`live ${accountId} ${projectId}`);
      return Promise.resolve(live.get(`${accountId} ${projectId}`));
    },
    registersOrigin(origin) {
      calls.push(`origin ${origin}`);
      return Promise.resolve(origin === "https://app.example");
    },
  };
  const feed = manualFeed();
  const cache = cacheRegistry(registry, {
    follow: feed.follow,
    maxBytes: options.maxBytes ?? 1 << 20,
    budget: options.budget,
    notifies: () => Promise.resolve(true),
    now: () => clock.now,
  });
  const add = (secret = "s1", projectId = "p1") => {
    const id = ids.generate();
    clients.set(id.id, { secret, status: ClientStatus.ACTIVE, projectId });
    return id;
  };
  return {
    cache,
    clients,
    live,
    byId,
    calls,
    clock,
    /** Makes the registry's calls fail (or succeed again). */
    fail: (v: boolean) => (failing = v),
    add,
    handlers: feed.handlers,
    setFresh: feed.setFresh,
    /** Holds the next verifySecret until the returned function is called. */
    hold: verifying.hold,
  };
}

Deno.test("registry cache: a verified secret is answered from memory until its client changes", async () => {
  const t = setup();
  await Promise.resolve(); // the catalog check answers
  const a = t.add();
  assert.equal((await t.cache.verifySecret(a.id, "s1"))?.client.id, a.id);
  assert.equal((await t.cache.verifySecret(a.id, "s1"))?.client.id, a.id);
  assert.equal((await t.cache.lookupClient(a.id))?.id, a.id);
  assert.deepEqual(t.calls, [`verify ${a.id}`]);
  // A wrong secret always goes to the registry, and is never kept.
  assert.equal(await t.cache.verifySecret(a.id, "wrong"), undefined);
  assert.equal(await t.cache.verifySecret(a.id, "wrong"), undefined);
  assert.equal(t.calls.length, 3);
  // The registry's trigger names the client by its uuid: the entry goes.
  t.clients.get(a.id)!.status = ClientStatus.SUSPENDED;
  t.handlers().onChange(`client:${a.uuid}`);
  assert.equal(await t.cache.verifySecret(a.id, "s1"), undefined);
  assert.equal((await t.cache.lookupClient(a.id))?.status, ClientStatus.SUSPENDED);
  assert.equal(t.cache.stats().hits, 2);
});

Deno.test("registry cache: a client's keys are answered from memory until a key or the client changes", async () => {
  const t = setup();
  await Promise.resolve();
  const a = t.add();
  assert.equal((await t.cache.lookupClientKeys(a.id))?.keys[0]?.kid, "k1");
  assert.equal((await t.cache.lookupClientKeys(a.id))?.keys[0]?.kid, "k1");
  assert.deepEqual(t.calls, [`keys ${a.id}`]);
  // A key added or deleted notifies its client (the registry's trigger): the list goes.
  t.handlers().onChange(`client:${a.uuid}`);
  await t.cache.lookupClientKeys(a.id);
  assert.deepEqual(t.calls, [`keys ${a.id}`, `keys ${a.id}`]);
  // An unknown client is never kept.
  const unknown = "cli_01jd0000000000000000000009";
  await t.cache.lookupClientKeys(unknown);
  await t.cache.lookupClientKeys(unknown);
  assert.equal(t.calls.filter((c) => c === `keys ${unknown}`).length, 2);
  // Uses are passed on (client_assertion.ts throttles them).
  await t.cache.recordKeyUse(a.id, "key_1");
  assert.equal(t.calls.at(-1), "key used key_1");
});

Deno.test("registry cache: a user's live installation is answered from memory until it changes, and none is never kept", async () => {
  const t = setup();
  await Promise.resolve();
  // No installation: asked every time (a first consent notifies nobody).
  assert.equal(await t.cache.liveInstallation("Bearer u", "acc_1", "p1"), undefined);
  assert.equal(await t.cache.liveInstallation("Bearer u", "acc_1", "p1"), undefined);
  assert.deepEqual(t.calls, ["live acc_1 p1", "live acc_1 p1"]);
  // The consent answered here is what this replica answers next.
  const consented = await t.cache.consent(new Headers({ authorization: "Bearer u" }), "p1", [
    "read",
  ]);
  const held = await t.cache.liveInstallation("Bearer u", "acc_1", "p1");
  assert.equal(held?.id, consented.id);
  // Without what changes with no notification (a consent that adds no scope).
  assert.deepEqual([held?.applicationName, held?.authorizedById, held?.etag], ["", "", ""]);
  assert.equal(t.calls.length, 3);
  // Another account, another project: not this entry.
  assert.equal(await t.cache.liveInstallation("Bearer v", "acc_2", "p1"), undefined);
  assert.equal(await t.cache.liveInstallation("Bearer u", "acc_1", "p2"), undefined);
  assert.equal(t.calls.length, 5);
  // Revoked (the registry's trigger names it by its uuid): asked again, and none is not kept.
  t.live.delete("acc_1 p1");
  t.handlers().onChange(`installation:${installationIds.toUuid(consented.id)}`);
  assert.equal(await t.cache.liveInstallation("Bearer u", "acc_1", "p1"), undefined);
  assert.equal(await t.cache.liveInstallation("Bearer u", "acc_1", "p1"), undefined);
  assert.deepEqual(t.calls.slice(5), ["live acc_1 p1", "live acc_1 p1"]);
  // A live one read from the registry is kept too.
  t.live.set("acc_1 p1", consented);
  await t.cache.liveInstallation("Bearer u", "acc_1", "p1");
  await t.cache.liveInstallation("Bearer u", "acc_1", "p1");
  assert.equal(t.calls.length, 8);
  // The installation held again, revoked, by another call (a grant's check): not an answer.
  t.live.delete("acc_1 p1");
  t.byId.set(consented.id, { ...consented, status: InstallationStatus.REVOKED });
  t.handlers().onChange(`installation:${installationIds.toUuid(consented.id)}`);
  const again = await t.cache.getInstallation("p1", consented.id);
  assert.equal(again?.status, InstallationStatus.REVOKED);
  assert.equal(await t.cache.liveInstallation("Bearer u", "acc_1", "p1"), undefined);
  assert.equal(t.calls.length, 9);
});

Deno.test("registry cache: nothing from memory while the feed is not fresh, and a reset empties it", async () => {
  const t = setup();
  await Promise.resolve();
  const a = t.add();
  await t.cache.verifySecret(a.id, "s1");
  t.setFresh(false);
  await t.cache.verifySecret(a.id, "s1");
  assert.equal(t.calls.length, 2);
  assert.equal(t.cache.stats().bypassed, 1);
  t.setFresh(true);
  t.handlers().onReset();
  assert.equal(t.cache.stats().entries, 0);
  t.handlers().onChange("reset");
  await t.cache.verifySecret(a.id, "s1");
  assert.equal(t.calls.length, 3);
});

Deno.test("registry cache: an answer read while a change arrived is not kept", async () => {
  const t = setup();
  await Promise.resolve();
  const a = t.add();
  const go = t.hold();
  const answer = t.cache.verifySecret(a.id, "s1");
  await Promise.resolve();
  t.handlers().onChange(`client:${a.uuid}`); // e.g. its secret deleted meanwhile
  go();
  assert.equal((await answer)?.client.id, a.id);
  assert.equal(t.cache.stats().entries, 0);
});

Deno.test("registry cache: an id spelt another way, or not an id, is never kept", async () => {
  const t = setup();
  await Promise.resolve();
  assert.equal(await t.cache.verifySecret("cli_not-an-id", "s1"), undefined);
  assert.equal(await t.cache.lookupClient("nothing"), undefined);
  assert.equal(t.cache.stats().entries, 0);
});

Deno.test("registry cache: bounded in bytes, oldest first, and within the memory budget", async () => {
  const t = setup({ maxBytes: 4000 });
  await Promise.resolve();
  for (let i = 0; i < 50; i++) {
    const c = t.add();
    await t.cache.verifySecret(c.id, "s1");
    assert.ok(t.cache.stats().bytes <= 4000);
  }
  assert.ok(t.cache.stats().entries < 50 && t.cache.stats().entries > 0);
  // An origin that is registered is kept; any client change drops them all.
  assert.equal(await t.cache.registersOrigin("https://app.example", ""), true);
  assert.equal(await t.cache.registersOrigin("https://app.example", ""), true);
  assert.equal(t.calls.filter((c) => c.startsWith("origin")).length, 1);
  t.handlers().onChange(`client:${ids.generate().uuid}`);
  await t.cache.registersOrigin("https://app.example", "");
  assert.equal(t.calls.filter((c) => c.startsWith("origin")).length, 2);

  // The budget: a cache whose budget is held by requests keeps nothing, and gives back on close.
  const budget = createMemoryBudget(10_000);
  const held = budget.take(10_000)!;
  const b = setup({ budget });
  await Promise.resolve();
  const c = b.add();
  await b.cache.verifySecret(c.id, "s1");
  assert.equal(b.cache.stats().entries, 0);
  held.release();
  await b.cache.verifySecret(c.id, "s1");
  assert.equal(b.cache.stats().entries, 1);
  assert.equal(budget.held, b.cache.stats().bytes);
  await b.cache.close();
  assert.equal(budget.held, 0);
});

Deno.test("registry cache: a secret answered from memory expires at its time, with no notification", async () => {
  const t = setup();
  await Promise.resolve();
  const a = t.add("short");
  t.clients.get(a.id)!.expiresAt = t.clock.now + 1000;
  const first = await t.cache.verifySecret(a.id, "short");
  assert.equal(first?.expiresAt, t.clock.now + 1000);
  t.clock.now += 999;
  const remembered = await t.cache.verifySecret(a.id, "short");
  assert.equal(t.calls.length, 1, "answered from memory");
  assert.equal(expired(remembered!, t.clock.now), false);
  t.clock.now += 1; // its expires_at: nothing notified, the answer from memory says it expired
  const late = await t.cache.verifySecret(a.id, "short");
  assert.equal(t.calls.length, 1, "still from memory");
  assert.equal(expired(late!, t.clock.now), true, "client authentication refuses it");
  // Forgotten: the next use asks the registry, which refuses it too, and nothing is kept.
  assert.equal(await t.cache.verifySecret(a.id, "short"), undefined);
  assert.equal(t.calls.length, 2);
  assert.equal(await t.cache.verifySecret(a.id, "short"), undefined);
  assert.equal(t.calls.length, 3);
  // The client's secret without an expiry goes on verifying from memory.
  t.clients.get(a.id)!.secret = "lasting";
  delete t.clients.get(a.id)!.expiresAt;
  assert.equal((await t.cache.verifySecret(a.id, "lasting"))?.expiresAt, undefined);
  t.clock.now += 10 * 365 * 86_400_000;
  const later = await t.cache.verifySecret(a.id, "lasting");
  assert.equal(expired(later!, t.clock.now), false);
  assert.equal(t.calls.length, 5, "from memory, its use reported (years after the last one)");
});

Deno.test("registry cache: uses answered from memory are reported at most once a minute, in the background", async () => {
  const t = setup();
  await Promise.resolve();
  const a = t.add();
  const verifies = () => t.calls.filter((c) => c === `verify ${a.id}`).length;
  await t.cache.verifySecret(a.id, "s1"); // asked the registry, which recorded the use
  assert.equal(verifies(), 1);
  t.clock.now += reportUsesEveryMs - 1;
  await t.cache.verifySecret(a.id, "s1");
  assert.equal(verifies(), 1, "within the minute: no report");
  t.clock.now += 1;
  // The report waits on the registry; the answer does not.
  const go = t.hold();
  const answer = await t.cache.verifySecret(a.id, "s1");
  assert.equal(answer?.client.id, a.id);
  assert.equal(verifies(), 2, "a minute since the registry heard of a use: reported");
  await t.cache.verifySecret(a.id, "s1");
  assert.equal(verifies(), 2, "reported once, though its answer has not come");
  go();
  // A report that fails is dropped: the answer from memory stands, and the next is a minute on.
  t.clock.now += reportUsesEveryMs;
  t.fail(true);
  assert.equal((await t.cache.verifySecret(a.id, "s1"))?.client.id, a.id);
  assert.equal(verifies(), 3);
  await new Promise((r) => setTimeout(r, 0)); // the failure settles, unhandled nowhere
  t.fail(false);
  await t.cache.verifySecret(a.id, "s1");
  assert.equal(verifies(), 3);
  assert.equal(t.cache.stats().hits, 5);
  // An expired secret's use is not reported.
  t.clients.get(a.id)!.expiresAt = t.clock.now + reportUsesEveryMs * 3;
  const b = t.add("s2");
  t.clients.get(b.id)!.expiresAt = t.clock.now + 10;
  await t.cache.verifySecret(b.id, "s2");
  t.clock.now += reportUsesEveryMs;
  await t.cache.verifySecret(b.id, "s2");
  assert.equal(t.calls.filter((c) => c === `verify ${b.id}`).length, 1);
});

Deno.test("registry cache: answers read at once for one key are counted once", async () => {
  const t = setup({ maxBytes: 4000 });
  await Promise.resolve();
  const a = t.add();
  // Two grants of one client miss together (e.g. right after the client changed): both read it,
  // one entry is kept, and its bytes are counted once.
  await Promise.all([t.cache.lookupClient(a.id), t.cache.lookupClient(a.id)]);
  await Promise.all([t.cache.lookupClientKeys(a.id), t.cache.lookupClientKeys(a.id)]);
  await Promise.all([t.cache.getConfig("p1"), t.cache.getConfig("p1")]);
  await Promise.all([
    t.cache.registersOrigin("https://app.example", ""),
    t.cache.registersOrigin("https://app.example", ""),
  ]);
  assert.equal(t.cache.stats().entries, 3);
  t.handlers().onChange(`client:${a.uuid}`);
  assert.deepEqual([t.cache.stats().entries, t.cache.stats().bytes], [0, 0]);
  // Many such races never leave the cache believing itself full of nothing.
  for (let i = 0; i < 100; i++) {
    await Promise.all([t.cache.lookupClient(a.id), t.cache.lookupClient(a.id)]);
    t.handlers().onChange(`client:${a.uuid}`);
  }
  assert.equal(t.cache.stats().bytes, 0);
});

Deno.test("registry cache: an origin that is not registered is never kept, and made-up ones evict nothing", async () => {
  const t = setup({ maxBytes: 8000 });
  await Promise.resolve();
  const hot = Array.from({ length: 12 }, () => t.add());
  for (const c of hot) await t.cache.verifySecret(c.id, "s1");
  const kept = t.cache.stats();
  assert.equal(kept.entries, hot.length);
  // Anyone sends a preflight with an Origin of its choosing, or a token request naming any
  // client_id: a "no" kept for each would fill memory and push the clients in use out.
  for (let i = 0; i < 200; i++) {
    const origin = `https://${crypto.randomUUID()}.example`;
    assert.equal(await t.cache.registersOrigin(origin, i % 2 ? "" : ids.generate().id), false);
  }
  const calls = t.calls.length;
  for (const c of hot) assert.ok(await t.cache.verifySecret(c.id, "s1"));
  assert.equal(t.calls.length, calls, "every client in use is still answered from memory");
  assert.deepEqual(t.cache.stats().entries, kept.entries);
  // A "no" is asked again every time.
  await t.cache.registersOrigin("https://evil.example", "");
  await t.cache.registersOrigin("https://evil.example", "");
  assert.equal(t.calls.filter((c) => c === "origin https://evil.example").length, 2);
});
