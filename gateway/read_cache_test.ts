import assert from "node:assert/strict";
import { create, type Message } from "@bufbuild/protobuf";
import { ClientSchema } from "../gen/registry/oauth/v1/client_pb.ts";
import {
  GetClientRequestSchema,
  type GetClientResponse,
  GetClientResponseSchema,
  OAuthRegistryService,
} from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import {
  CoreService,
  GetUnitRequestSchema,
  type GetUnitResponse,
  GetUnitResponseSchema,
  UpdateUnitRequestSchema,
} from "../gen/registry/core/v1/core_service_pb.ts";
import { UnitSchema } from "../gen/registry/core/v1/unit_pb.ts";
import { idKind } from "../lib/platform/mod.ts";
import type { Caller } from "../lib/policy/mod.ts";
import { gate, manualFeed } from "../lib/testing/mod.ts";
import { createReadCache, keptReads, readCaches } from "./read_cache.ts";

const method = OAuthRegistryService.method;
const ids = idKind("cli");
const one = ids.generate();
const two = ids.generate();
const admin = (projects: "*" | string[]): Caller => ({
  subject: "admin",
  accountId: "admin",
  projects: projects === "*" ? "*" : new Set(projects),
  space: undefined,
});

async function setup(maxBytes = 100_000) {
  const feed = manualFeed();
  const clock = { mono: 10_000 };
  const cache = createReadCache({
    kept: keptReads.client,
    follow: feed.follow,
    maxBytes,
    notifies: () => Promise.resolve(true),
    monotonic: () => clock.mono,
  });
  await new Promise((r) => setTimeout(r, 0)); // the first answer of `notifies` is in
  let calls = 0;
  const request = (clientId: string, projectId = "p") =>
    create(GetClientRequestSchema, { projectId, clientId });
  /** What the registry answers: the client, named after the call that read it. */
  const load = (clientId: string, projectId = "p") => (): Promise<Message> => {
    calls++;
    return Promise.resolve(create(GetClientResponseSchema, {
      client: create(ClientSchema, { id: clientId, projectId, name: `call ${calls}` }),
    }));
  };
  const get = async (clientId: string, caller = admin(["p"]), projectId = "p") => {
    const answer = await cache.through(
      method.getClient,
      request(clientId, projectId),
      caller,
      load(clientId, projectId),
    );
    return (answer as GetClientResponse).client!.name;
  };
  /** Past the lag after the changes so far. */
  const settle = () => void (clock.mono += 801);
  return { cache, feed, get, request, settle, clock, calls: () => calls };
}

Deno.test("read cache: a client read is given again, to callers the registry's rule lets read it", async () => {
  const { cache, get, calls } = await setup();
  assert.equal(await get(one.id), "call 1");
  assert.equal(await get(one.id), "call 1");
  assert.equal(await get(one.id, admin("*")), "call 1");
  assert.equal(calls(), 1);
  // A caller that does not administer the project: the registry decides (here it would refuse).
  assert.equal(await get(one.id, admin(["q"])), "call 2");
  // The same client asked for in another project: the registry decides.
  assert.equal(await get(one.id, admin("*"), "q"), "call 3");
  // An id that is not a client's is never kept.
  await get("cli_nonsense");
  await get("cli_nonsense");
  assert.equal(calls(), 5);
  assert.deepEqual(
    [cache.stats().hits, cache.stats().misses, cache.stats().bypassed],
    [2, 3, 2],
  );
  await cache.close();
});

Deno.test("read cache: a notification drops the client it names; other kinds nothing; unknown ones and resets all", async () => {
  const { cache, feed, get, settle, clock, calls } = await setup();
  await get(one.id);
  await get(two.id);
  feed.handlers().onChange(`client:${one.uuid}`);
  await get(one.id);
  await get(two.id);
  assert.equal(calls(), 3);
  // Read within 800 ms after the change: the registry replica that answered may not have it yet.
  clock.mono += 800;
  await get(one.id);
  assert.equal(calls(), 4);
  settle();
  await get(one.id);
  await get(one.id);
  assert.equal(calls(), 5);
  for (const other of ["installation:x", "config:p", "origins"]) feed.handlers().onChange(other);
  await get(one.id);
  await get(two.id);
  assert.equal(calls(), 5);
  feed.handlers().onChange("reset");
  assert.equal(cache.stats().entries, 0);
  settle();
  await get(one.id);
  await get(two.id);
  assert.equal(cache.stats().entries, 2);
  feed.handlers().onReset();
  assert.equal(cache.stats().entries, 0);
  await cache.close();
});

Deno.test("read cache: nothing from memory while the feed is stale, nor kept across a change", async () => {
  const { cache, feed, get, request, calls } = await setup();
  feed.setFresh(false);
  await get(one.id);
  await get(one.id);
  assert.equal(calls(), 2);
  feed.setFresh(true);
  const held = gate();
  const release = held.hold();
  const pending = cache.through(method.getClient, request(one.id), admin(["p"]), async () => {
    await held.pass();
    return create(GetClientResponseSchema, { client: create(ClientSchema, { id: one.id }) });
  });
  feed.handlers().onChange(`client:${one.uuid}`);
  release();
  await pending;
  assert.equal(cache.stats().entries, 0);
  await cache.close();
});

Deno.test("read cache: a write through this gateway drops what it names, and what was being read", async () => {
  const { cache, get, request, settle, calls } = await setup();
  await get(one.id);
  await get(two.id);
  // Writes of another service change nothing here.
  cache.wrote(CoreService.method.createRole, create(GetClientRequestSchema));
  cache.wrote(method.updateClient, request(one.id));
  await get(one.id);
  await get(two.id);
  assert.equal(calls(), 3);
  // Not kept within the lag (another registry replica may answer first); kept after it.
  await get(one.id);
  settle();
  await get(one.id);
  await get(one.id);
  assert.equal(calls(), 5);
  // A write that names no client drops them all; a new client none.
  cache.wrote(method.createClient, create(GetClientRequestSchema, { projectId: "p" }));
  await get(two.id);
  assert.equal(calls(), 5);
  cache.wrote(method.updateOAuthConfig, create(GetClientRequestSchema, { projectId: "p" }));
  await get(two.id);
  assert.equal(calls(), 6);
  // A read under way when a write returns is not kept.
  const held = gate();
  const release = held.hold();
  const pending = cache.through(method.getClient, request(one.id), admin(["p"]), async () => {
    await held.pass();
    return create(GetClientResponseSchema, { client: create(ClientSchema, { id: one.id }) });
  });
  cache.wrote(method.deleteClientSecret, request(two.id));
  release();
  await pending;
  await get(one.id);
  assert.equal(calls(), 7);
  await cache.close();
});

Deno.test("read cache: bounded in bytes", async () => {
  const { cache, get } = await setup(3_000);
  for (let i = 0; i < 50; i++) await get(ids.generate().id);
  const { entries, bytes } = cache.stats();
  assert.ok(bytes <= 3_000 && entries > 0 && entries < 50, `${entries} entries, ${bytes} bytes`);
  await cache.close();
});

/** A member of `space` (undefined: a token without a space claim). */
const member = (space: string | undefined): Caller => ({
  subject: "member",
  accountId: "member",
  projects: new Set(),
  space,
});

Deno.test("read cache: a unit is given again only in the caller's space, and its owner's writes drop it", async () => {
  const feed = manualFeed();
  const units = createReadCache({
    kept: keptReads.unit,
    follow: feed.follow,
    maxBytes: 100_000,
    notifies: () => Promise.resolve(true),
    monotonic: () => 10_000,
  });
  const clients = (await setup()).cache;
  const cache = readCaches([clients, units]);
  await new Promise((r) => setTimeout(r, 0));
  const unit = idKind("unit").generate();
  let calls = 0;
  const get = async (caller: Caller) => {
    const answer = await cache.through(
      CoreService.method.getUnit,
      create(GetUnitRequestSchema, { unitId: unit.id }),
      caller,
      () => {
        calls++;
        // The unit is in space `a`: the core service answers not found anywhere else.
        if (caller.space !== "a") return Promise.reject(new Error("not found"));
        return Promise.resolve(create(GetUnitResponseSchema, {
          unit: create(UnitSchema, { id: unit.id, title: `call ${calls}` }),
        }));
      },
    );
    return (answer as GetUnitResponse).unit!.title;
  };
  assert.ok(cache.keeps(CoreService.method.getUnit) && cache.keeps(method.getClient));
  assert.ok(!cache.keeps(CoreService.method.listUnits));
  assert.equal(await get(member("a")), "call 1");
  assert.equal(await get(member("a")), "call 1");
  // Another space, or none: the core service decides.
  await assert.rejects(get(member("b")), /not found/);
  await assert.rejects(get(member(undefined)), /not found/);
  assert.equal(await get(member("a")), "call 1");
  // The registry's notifications and writes change no unit; the core area's do.
  cache.wrote(method.updateClient, create(GetClientRequestSchema, { clientId: "cli_x" }));
  assert.equal(await get(member("a")), "call 1");
  feed.handlers().onChange(`unit:${unit.uuid}`);
  assert.equal(await get(member("a")), "call 4");
  cache.wrote(CoreService.method.updateUnit, create(UpdateUnitRequestSchema, { unitId: unit.id }));
  assert.equal(await get(member("a")), "call 5");
  assert.equal(cache.stats().hits, 3);
  await cache.close();
});

Deno.test("read cache: reads at once make one call, joined only by callers the rule lets read it", async () => {
  const { cache } = await setup();
  let calls = 0;
  let open!: () => void;
  const opened = new Promise<void>((resolve) => open = resolve);
  const slow = async () => {
    const n = ++calls;
    await opened;
    return create(GetClientResponseSchema, {
      client: create(ClientSchema, { id: one.id, projectId: "p", name: `call ${n}` }),
    });
  };
  const read = (caller: Caller, projectId = "p") =>
    cache.through(
      method.getClient,
      create(GetClientRequestSchema, { projectId, clientId: one.id }),
      caller,
      slow,
    ).then((answer) => (answer as GetClientResponse).client!.name);
  const reads = [
    read(admin(["p"])),
    read(admin("*")),
    read(admin(["q"])), // the registry's rule refuses it: its own call (the registry decides)
    read(admin("*"), "q"), // another project: its own call
  ];
  open();
  const [first, joined, refused, elsewhere] = await Promise.all(reads);
  assert.deepEqual([first, joined], ["call 1", "call 1"]);
  // Each of the others made a call of its own.
  assert.deepEqual([refused, elsewhere].sort(), ["call 2", "call 3"]);
  assert.equal(calls, 3);
  await cache.close();
});
