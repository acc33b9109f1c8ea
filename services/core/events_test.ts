/**
 * The core service's audit trail, change feed and etags, through its real interceptor list, in
 * this process (lib/testing/in_process.ts): every change writes exactly one event in its own
 * statement, ListEvents filters and pages them, WatchEvents follows them, and a stale etag changes
 * nothing.
 *
 * @module
 */

import assert from "node:assert/strict";
import { getOption, hasOption, type JsonValue, toJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { Code, type ConnectError, createClient } from "@connectrpc/connect";
import { http } from "../../gen/google/api/annotations_pb.ts";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.ts";
import type { Event } from "../../gen/registry/audit/v1/event_pb.ts";
import { CoreService } from "../../gen/registry/core/v1/core_service_pb.ts";
import { UnitStatus } from "../../gen/registry/core/v1/unit_pb.ts";
import { etagMismatchReason } from "../../lib/resource/mod.ts";
import { rejection, serveInProcess } from "../../lib/testing/mod.ts";
import { coreService } from "./main.ts";

const service = "registry.core.v1.CoreService";

/** A field's change in an event, as JSON (`undefined`: that side is absent). */
function changeOf(event: Event | undefined, field: string) {
  const change = event?.changes.find((c) => c.field === field);
  if (!change) return undefined;
  return {
    old: change.old === undefined ? undefined : toJson(ValueSchema, change.old) as JsonValue,
    new: change.new === undefined ? undefined : toJson(ValueSchema, change.new) as JsonValue,
  };
}

Deno.test("core audit trail, change feed and etags, in process", async (t) => {
  const served = await serveInProcess(coreService);
  const api = createClient(CoreService, served.transport);
  const ann = { headers: await served.bearer({ sub: "ann", space: "s1" }) };
  const carl = { headers: await served.bearer({ sub: "carl", space: "s1" }) };
  const bob = { headers: await served.bearer({ sub: "bob", space: "s2" }) };
  /** How many events the space has (read from the table: every one, not a page). */
  const count = async (space: string) => {
    const [row] = await served.sql<{ n: number }[]>`
      select count(*)::int as n from core.events where parent = ${space}`;
    return row!.n;
  };
  /** The newest event of the caller's space. */
  const newest = async (as = ann) => (await api.listEvents({ limit: 1 }, as)).data[0];
  /** Runs `call` and checks that it wrote exactly one event; returns that event. */
  /** The methods whose one event a step has checked. */
  const checked = new Set<string>();
  const oneEvent = async (call: () => Promise<unknown>, as = ann) => {
    const before = await count("s1");
    await call();
    assert.equal(await count("s1"), before + 1, "exactly one event");
    const event = (await newest(as))!;
    assert.equal(event.id, String(before + 1), "numbered 1, 2, 3... in the space");
    assert.equal(event.result, "ok");
    checked.add(event.method);
    for (const hidden of ["id", "space", "created_at", "updated_at", "etag"]) {
      assert.equal(changeOf(event, hidden), undefined, `${hidden} is never shown`);
    }
    return event;
  };

  try {
    await t.step("no space claim: ListEvents and WatchEvents are PERMISSION_DENIED", async () => {
      const spaceless = { headers: await served.bearer({ sub: "x" }) };
      const err = await rejection(api.listEvents({}, spaceless));
      assert.equal(err.code, Code.PermissionDenied);
      const watch = await rejection((async () => {
        for await (const _ of api.watchEvents({}, spaceless)) break;
      })());
      assert.equal(watch.code, Code.PermissionDenied);
    });

    await t.step("roles: create, update and delete each write one event", async () => {
      let id = "";
      const created = await oneEvent(async () => {
        const { role } = await api.createRole({
          role: { name: "Admin", resourceType: "project", permissions: ["units.write"] },
        }, ann);
        id = role!.id;
      });
      assert.equal(created.method, `${service}/CreateRole`);
      // The resource name is built in SQL (core.type_id): it holds the API id.
      assert.equal(created.resource, `spaces/s1/roles/${id}`);
      assert.equal(created.actor?.sub, "ann");
      assert.deepEqual(changeOf(created, "name"), { old: undefined, new: "Admin" });
      assert.deepEqual(changeOf(created, "permissions"), { old: undefined, new: ["units.write"] });

      const updated = await oneEvent(() =>
        api.updateRole({
          roleId: id,
          role: { name: "Owner", resourceType: "project", permissions: ["units.write"] },
        }, carl)
      );
      assert.equal(updated.method, `${service}/UpdateRole`);
      assert.equal(updated.resource, `spaces/s1/roles/${id}`);
      assert.equal(updated.actor?.sub, "carl");
      // Only what changed.
      assert.deepEqual(updated.changes.map((c) => c.field), ["name"]);
      assert.deepEqual(changeOf(updated, "name"), { old: "Admin", new: "Owner" });

      const deleted = await oneEvent(() => api.deleteRole({ roleId: id }, ann));
      assert.equal(deleted.method, `${service}/DeleteRole`);
      assert.equal(deleted.resource, `spaces/s1/roles/${id}`);
      assert.deepEqual(changeOf(deleted, "name"), { old: "Owner", new: undefined });
    });

    await t.step("journeys: create, update and delete each write one event", async () => {
      let id = "";
      const created = await oneEvent(async () => {
        const { journey } = await api.createJourney({ journey: { name: "Trip" } }, ann);
        id = journey!.id;
      });
      assert.equal(created.method, `${service}/CreateJourney`);
      assert.equal(created.resource, `spaces/s1/journeys/${id}`);
      assert.equal(created.actor?.sub, "ann");
      assert.deepEqual(changeOf(created, "name"), { old: undefined, new: "Trip" });

      const updated = await oneEvent(() =>
        api.updateJourney({ journeyId: id, journey: { name: "Voyage", owner: "ann" } }, ann)
      );
      assert.equal(updated.method, `${service}/UpdateJourney`);
      assert.equal(updated.resource, `spaces/s1/journeys/${id}`);
      assert.deepEqual(updated.changes.map((c) => c.field), ["name"]);
      assert.deepEqual(changeOf(updated, "name"), { old: "Trip", new: "Voyage" });

      const deleted = await oneEvent(() => api.deleteJourney({ journeyId: id }, carl));
      assert.equal(deleted.method, `${service}/DeleteJourney`);
      assert.equal(deleted.resource, `spaces/s1/journeys/${id}`);
      assert.equal(deleted.actor?.sub, "carl");
      assert.deepEqual(changeOf(deleted, "name"), { old: "Voyage", new: undefined });
    });

    await t.step("units: create, update and delete each write one event", async () => {
      const { journey } = await api.createJourney({ journey: { name: "Home" } }, ann);
      const prefix = `spaces/s1/journeys/${journey!.id}/units/`;
      let id = "";
      const created = await oneEvent(async () => {
        const { unit } = await api.createUnit({ unit: { journey: journey!.id, title: "Do" } }, ann);
        id = unit!.id;
      });
      assert.equal(created.method, `${service}/CreateUnit`);
      assert.equal(created.resource, prefix + id);
      assert.deepEqual(changeOf(created, "title"), { old: undefined, new: "Do" });
      assert.deepEqual(changeOf(created, "status"), { old: undefined, new: "todo" });

      const updated = await oneEvent(() =>
        api.updateUnit({
          unitId: id,
          unit: { journey: journey!.id, title: "Done", status: UnitStatus.DONE },
        }, ann)
      );
      assert.equal(updated.method, `${service}/UpdateUnit`);
      assert.equal(updated.resource, prefix + id);
      assert.deepEqual(updated.changes.map((c) => c.field), ["status", "title"]);
      assert.deepEqual(changeOf(updated, "title"), { old: "Do", new: "Done" });
      assert.deepEqual(changeOf(updated, "status"), { old: "todo", new: "done" });

      // A unit moved to another journey is named under the one it moves to.
      const { journey: other } = await api.createJourney({ journey: { name: "Away" } }, ann);
      const moved = await oneEvent(() =>
        api.updateUnit({
          unitId: id,
          unit: { journey: other!.id, title: "Done", status: UnitStatus.DONE },
        }, ann)
      );
      assert.equal(moved.resource, `spaces/s1/journeys/${other!.id}/units/${id}`);
      // By the API's field, with the journeys' ids as the API writes them.
      assert.deepEqual(moved.changes.map((c) => [c.field, c.old?.kind.value, c.new?.kind.value]), [
        ["journey", journey!.id, other!.id],
      ]);
      const back = await oneEvent(() =>
        api.updateUnit({
          unitId: id,
          unit: { journey: journey!.id, title: "Done", status: UnitStatus.DONE },
        }, ann)
      );
      assert.equal(back.resource, prefix + id);

      const deleted = await oneEvent(() => api.deleteUnit({ unitId: id }, ann));
      assert.equal(deleted.method, `${service}/DeleteUnit`);
      assert.equal(deleted.resource, prefix + id);
      assert.deepEqual(changeOf(deleted, "title"), { old: "Done", new: undefined });
    });

    await t.step("every mutating RPC (each /v1 POST, PUT, PATCH, DELETE) was checked", () => {
      const mutating = CoreService.methods.filter((m) =>
        hasOption(m, http) &&
        ["post", "put", "patch", "delete"].includes(getOption(m, http).pattern.case ?? "")
      ).map((m) => `${service}/${m.name}`);
      assert.ok(mutating.length >= 9);
      assert.deepEqual(
        mutating.filter((m) => !checked.has(m)),
        [],
        "a mutating RPC whose one event no step checks",
      );
    });

    await t.step("a refused change writes no event", async () => {
      const before = await count("s1");
      const { journey } = await api.createJourney({ journey: { name: "Busy" } }, ann);
      await api.createUnit({ unit: { journey: journey!.id, title: "Left" } }, ann);
      const busy = await rejection(api.deleteJourney({ journeyId: journey!.id }, ann));
      assert.equal(busy.code, Code.FailedPrecondition);
      await api.createRole({ role: { name: "Taken", resourceType: "project" } }, ann);
      const taken = await rejection(
        api.createRole({ role: { name: "Taken", resourceType: "project" } }, ann),
      );
      assert.equal(taken.code, Code.AlreadyExists);
      assert.equal(await count("s1"), before + 3); // the journey, the unit, the first role
    });

    await t.step("ListEvents: filters, newest first, keyset pages, the space's own", async () => {
      const total = await count("s1");
      const all = await api.listEvents({ limit: 100 }, ann);
      assert.equal(all.data.length, total);
      assert.equal(all.hasMore, false);
      const numbers = all.data.map((e) => Number(e.id));
      assert.deepEqual(numbers, [...numbers].sort((a, b) => b - a), "newest first");

      // Pages of 2, each starting before the previous page's last.
      const paged: string[] = [];
      let after = "";
      for (;;) {
        const page = await api.listEvents({ limit: 2, after }, ann);
        assert.ok(page.data.length <= 2);
        paged.push(...page.data.map((e) => e.id));
        if (!page.hasMore) break;
        after = page.data[page.data.length - 1]!.id;
      }
      assert.deepEqual(paged, all.data.map((e) => e.id));

      const byMethod = await api.listEvents({ method: `${service}/UpdateRole`, limit: 100 }, ann);
      assert.ok(byMethod.data.length > 0);
      assert.ok(byMethod.data.every((e) => e.method === `${service}/UpdateRole`));

      const byActor = await api.listEvents({ actor: "carl", limit: 100 }, ann);
      assert.deepEqual(byActor.data.map((e) => e.method), [
        `${service}/DeleteJourney`,
        `${service}/UpdateRole`,
      ]);

      // A journey's resource name also matches its units' events.
      const { journey } = await api.createJourney({ journey: { name: "Filtered" } }, ann);
      const { unit } = await api.createUnit({ unit: { journey: journey!.id, title: "U" } }, ann);
      const resource = `spaces/s1/journeys/${journey!.id}`;
      const byResource = await api.listEvents({ resource }, ann);
      assert.deepEqual(byResource.data.map((e) => e.resource), [
        `${resource}/units/${unit!.id}`,
        resource,
      ]);
      const byUnit = await api.listEvents({ resource: `${resource}/units/${unit!.id}` }, ann);
      assert.deepEqual(byUnit.data.map((e) => e.method), [`${service}/CreateUnit`]);

      // Another space sees none of them.
      assert.equal((await api.listEvents({}, bob)).data.length, 0);
      await api.createRole({ role: { name: "Theirs", resourceType: "project" } }, bob);
      const theirs = await api.listEvents({}, bob);
      assert.deepEqual(theirs.data.map((e) => [e.id, e.resource.split("/")[1]]), [["1", "s2"]]);

      const bad = await rejection(api.listEvents({ after: "x" }, ann));
      assert.equal(bad.code, Code.InvalidArgument);
    });

    await t.step("since and until below the millisecond, and at the end of year 9999", async () => {
      const { role } = await api.createRole({
        role: { name: "Timed", resourceType: "project" },
      }, ann);
      const event = (await newest())!;
      assert.equal(event.resource, `spaces/s1/roles/${role!.id}`);
      const at = event.occurredAt!; // whole milliseconds
      const plus = (nanos: number) => ({ seconds: at.seconds, nanos: at.nanos + nanos });
      const ids = async (query: Parameters<typeof api.listEvents>[0]) =>
        (await api.listEvents({ resource: event.resource, ...query }, ann)).data.map((e) => e.id);
      // since <= t < until, to the nanosecond: the event's millisecond is before since = t + 0.4 ms
      // and before until = t + 0.4 ms (rounding to the nearest listed it, and left it out).
      assert.deepEqual(await ids({ since: plus(400_000) }), []);
      assert.deepEqual(await ids({ since: at }), [event.id]);
      assert.deepEqual(await ids({ until: plus(400_000) }), [event.id]);
      assert.deepEqual(await ids({ until: at, since: { seconds: at.seconds - 1n, nanos: 0 } }), []);
      // A range reversed below the millisecond is refused as any other.
      const reversed = await rejection(
        api.listEvents({ since: plus(400_000), until: plus(300_000) }, ann),
      );
      assert.equal(reversed.code, Code.InvalidArgument);
      // The last instant a Timestamp holds: a bound like any other, not an internal error.
      const end = { seconds: 253402300799n, nanos: 999_900_000 };
      assert.deepEqual(await ids({ until: end }), [event.id]);
      assert.deepEqual(await ids({ since: end }), []);
    });

    await t.step(
      "etags: a stale one is ABORTED and changes nothing; the current one works",
      async () => {
        const mismatch = (err: ConnectError) => {
          assert.equal(err.code, Code.Aborted);
          assert.equal(err.findDetails(ErrorInfoSchema)[0]?.reason, etagMismatchReason);
        };

        // A role.
        const { role } = await api.createRole({
          role: { name: "Versioned", resourceType: "project" },
        }, ann);
        const v1 = role!.etag;
        assert.ok(v1 !== "");
        assert.equal((await api.getRole({ roleId: role!.id }, ann)).role?.etag, v1);
        const { role: v2role } = await api.updateRole({
          roleId: role!.id,
          role: { name: "Versioned 2", resourceType: "project", etag: v1 },
        }, ann);
        const v2 = v2role!.etag;
        assert.notEqual(v2, v1, "an update changes the etag");
        assert.equal((await api.getRole({ roleId: role!.id }, ann)).role?.etag, v2);
        let before = await count("s1");
        mismatch(
          await rejection(api.updateRole({
            roleId: role!.id,
            role: { name: "Stale", resourceType: "project", etag: v1 },
          }, ann)),
        );
        mismatch(await rejection(api.deleteRole({ roleId: role!.id, etag: v1 }, ann)));
        const kept = (await api.getRole({ roleId: role!.id }, ann)).role!;
        assert.equal(kept.name, "Versioned 2");
        assert.equal(kept.etag, v2);
        assert.equal(await count("s1"), before, "no event");
        await api.deleteRole({ roleId: role!.id, etag: v2 }, ann);
        const gone = await rejection(api.deleteRole({ roleId: role!.id, etag: v2 }, ann));
        assert.equal(gone.code, Code.NotFound, "a missing role stays NOT_FOUND");

        // A journey.
        const { journey } = await api.createJourney({ journey: { name: "J" } }, ann);
        const j1 = journey!.etag;
        const { journey: j2journey } = await api.updateJourney({
          journeyId: journey!.id,
          journey: { name: "J2", etag: j1 },
        }, ann);
        const j2 = j2journey!.etag;
        assert.notEqual(j2, j1);
        before = await count("s1");
        mismatch(
          await rejection(api.updateJourney({
            journeyId: journey!.id,
            journey: { name: "Stale", etag: j1 },
          }, ann)),
        );
        mismatch(await rejection(api.deleteJourney({ journeyId: journey!.id, etag: j1 }, ann)));
        const keptJourney = (await api.getJourney({ journeyId: journey!.id }, ann)).journey!;
        assert.equal(keptJourney.name, "J2");
        assert.equal(keptJourney.etag, j2);
        assert.equal(await count("s1"), before, "no event");

        // A unit (in that journey).
        const { unit } = await api.createUnit({ unit: { journey: journey!.id, title: "T" } }, ann);
        const u1 = unit!.etag;
        const { unit: u2unit } = await api.updateUnit({
          unitId: unit!.id,
          unit: { journey: journey!.id, title: "T2", etag: u1 },
        }, ann);
        const u2 = u2unit!.etag;
        assert.notEqual(u2, u1);
        before = await count("s1");
        mismatch(
          await rejection(api.updateUnit({
            unitId: unit!.id,
            unit: { journey: journey!.id, title: "Stale", etag: u1 },
          }, ann)),
        );
        mismatch(await rejection(api.deleteUnit({ unitId: unit!.id, etag: u1 }, ann)));
        const keptUnit = (await api.getUnit({ unitId: unit!.id }, ann)).unit!;
        assert.equal(keptUnit.title, "T2");
        assert.equal(keptUnit.etag, u2);
        assert.equal(await count("s1"), before, "no event");

        // The current etags succeed, and are listed too.
        const listed = await api.listUnits({ journey: journey!.id }, ann);
        assert.deepEqual(listed.data.map((u) => u.etag), [u2]);
        await api.deleteUnit({ unitId: unit!.id, etag: u2 }, ann);
        await api.deleteJourney({ journeyId: journey!.id, etag: j2 }, ann);
        assert.equal(await count("s1"), before + 2);
        const missing = await rejection(
          api.updateUnit({
            unitId: unit!.id,
            unit: { journey: journey!.id, title: "X", etag: u2 },
          }, ann),
        );
        assert.equal(missing.code, Code.NotFound);
      },
    );

    await t.step("WatchEvents: the events after the cursor, then each new one", async () => {
      const last = (await newest())!.id;
      const stop = new AbortController();
      const seen: Event[] = [];
      const watching = (async () => {
        try {
          for await (
            const res of api.watchEvents({ after: String(Number(last) - 1) }, {
              ...ann,
              signal: stop.signal,
            })
          ) {
            seen.push(res.event!);
            if (seen.length === 2) break;
          }
        } finally {
          stop.abort();
        }
      })();
      const { role } = await api.createRole({ role: { name: "Watched", resourceType: "x" } }, ann);
      // Another space's change is not in this space's feed.
      await api.createRole({ role: { name: "Unwatched", resourceType: "x" } }, bob);
      await watching;
      assert.deepEqual(seen.map((e) => e.id), [last, String(Number(last) + 1)]);
      assert.equal(seen[1]!.resource, `spaces/s1/roles/${role!.id}`);
    });
  } finally {
    await served.close();
  }
});
