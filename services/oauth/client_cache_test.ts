import assert from "node:assert/strict";
import { gate, manualFeed } from "../../lib/testing/mod.ts";
import { cacheClients } from "./client_cache.ts";
import type { ClientRepository, ClientRow } from "./repository/clients.ts";

/** A repository of two clients in memory, counting its reads; `names` is what it holds. */
function setup() {
  const names = new Map([["u1", "one"], ["u2", "two"]]);
  let reads = 0;
  const row = (id: string): ClientRow | undefined =>
    names.has(id) ? ({ id, project_id: "p", name: names.get(id) } as ClientRow) : undefined;
  const repo = {
    find: (id: string) => (reads++, Promise.resolve(row(id))),
    get: (projectId: string, id: string) => {
      reads++;
      const r = row(id);
      return Promise.resolve(r?.project_id === projectId ? r : undefined);
    },
    update: (_p: string, id: string, changes: { name?: string }) => {
      names.set(id, changes.name!);
      return Promise.resolve(row(id));
    },
    delete: (_p: string, id: string) => Promise.resolve(names.delete(id)),
  } as unknown as ClientRepository;
  const feed = manualFeed();
  const clients = cacheClients(repo, { follow: feed.follow, maxBytes: 100_000 });
  return { clients, feed, names, reads: () => reads };
}

Deno.test("client cache: get reads a client once, find every time; another project's id is not found", async () => {
  const { clients, reads } = setup();
  assert.equal((await clients.get("p", "u1"))?.name, "one");
  assert.equal((await clients.get("p", "u1"))?.name, "one");
  assert.equal(await clients.get("other", "u1"), undefined);
  assert.equal(reads(), 1);
  // The internal lookups' read: from the source, always (its callers keep copies of their own).
  assert.equal((await clients.find("u1"))?.name, "one");
  assert.equal((await clients.find("u1"))?.name, "one");
  assert.equal(reads(), 3);
  // No such client: never kept.
  assert.equal(await clients.get("p", "u9"), undefined);
  assert.equal(await clients.get("p", "u9"), undefined);
  assert.equal(reads(), 5);
  await clients.close();
});

Deno.test("client cache: a notification drops the client it names, others nothing, unknown ones all", async () => {
  const { clients, feed, names, reads } = setup();
  await clients.get("p", "u1");
  await clients.get("p", "u2");
  names.set("u1", "one, renamed elsewhere");
  for (const other of ["installation:x", "config:p", "origins"]) feed.handlers().onChange(other);
  assert.equal((await clients.get("p", "u1"))?.name, "one");
  feed.handlers().onChange("client:u1");
  assert.equal((await clients.get("p", "u1"))?.name, "one, renamed elsewhere");
  assert.equal((await clients.get("p", "u2"))?.name, "two");
  assert.equal(reads(), 3);
  feed.handlers().onChange("something new");
  assert.equal(clients.stats().entries, 0);
  await clients.close();
});

Deno.test("client cache: this replica's writes are read back at once, and reads under way then are not kept", async () => {
  const { clients, names, reads } = setup();
  await clients.get("p", "u1");
  await clients.update("p", "u1", { name: "renamed" } as never, {} as never);
  assert.equal((await clients.get("p", "u1"))?.name, "renamed");
  await clients.delete("p", "u1", {} as never);
  assert.equal(await clients.get("p", "u1"), undefined);
  assert.equal(reads(), 3);
  // A read under way when another write returns: what it read may predate the write.
  const held = gate();
  const slow = cacheClients({
    find: async (id: string) => {
      await held.pass();
      return { id, project_id: "p", name: names.get(id) } as ClientRow;
    },
    update: () => Promise.resolve(undefined),
  } as unknown as ClientRepository, { follow: manualFeed().follow, maxBytes: 100_000 });
  const release = held.hold();
  const pending = slow.get("p", "u2");
  await slow.update("p", "u2", {} as never, {} as never);
  release();
  await pending;
  assert.equal(slow.stats().entries, 0);
  await Promise.all([clients.close(), slow.close()]);
});

Deno.test("client cache: nothing from memory while the feed is stale", async () => {
  const { clients, feed, reads } = setup();
  feed.setFresh(false);
  await clients.get("p", "u1");
  await clients.get("p", "u1");
  assert.equal(reads(), 2);
  await clients.close();
});
