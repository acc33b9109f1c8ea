/**
 * The core service's handlers and policy through its real interceptor list, in this process
 * (connect-es's router transport; lib/testing/in_process.ts): seconds, no listener. The wire and
 * the processes are tested by tests/core_grpc_test.ts and tests/core_http_test.ts.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Code, createClient } from "@connectrpc/connect";
import { CoreService } from "../../gen/registry/core/v1/core_service_pb.ts";
import { UnitPriority, UnitStatus } from "../../gen/registry/core/v1/unit_pb.ts";
import {
  propagated,
  rejection,
  serveInProcess,
  untilWaitingForLock,
} from "../../lib/testing/mod.ts";
import { ids } from "./ids.ts";
import { coreService } from "./main.ts";

Deno.test("core handlers, in process, through the real interceptors", async (t) => {
  const service = await serveInProcess(coreService);
  const api = createClient(CoreService, service.transport);
  const ann = await service.bearer({ sub: "ann", space: "s1" });
  const bob = await service.bearer({ sub: "bob", space: "s2" });
  try {
    await t.step("no token: UNAUTHENTICATED; no space claim: PERMISSION_DENIED", async () => {
      assert.equal((await rejection(api.listRoles({}))).code, Code.Unauthenticated);
      const spaceless = await service.bearer({ sub: "x" });
      const err = await rejection(api.listRoles({}, { headers: spaceless }));
      assert.equal(err.code, Code.PermissionDenied);
      assert.match(err.rawMessage, /no space claim/);
    });

    await t.step("journeys and units: created, read, listed, moved, deleted", async () => {
      const { journey: root } = await api.createJourney({ journey: { name: "Root" } }, {
        headers: ann,
      });
      assert.equal(root?.owner, "ann");
      const { unit } = await api.createUnit({
        unit: { journey: root!.id, title: "Do", priority: UnitPriority.HIGH },
      }, { headers: ann });
      assert.equal(unit?.status, UnitStatus.TODO);
      assert.equal(unit?.originator, "ann");
      const listed = await api.listUnits({ journey: root!.id }, { headers: ann });
      assert.deepEqual(listed.data.map((u) => u.id), [unit!.id]);
      const done = await api.updateUnit({
        unitId: unit!.id,
        unit: { journey: root!.id, title: "Done", status: UnitStatus.DONE },
      }, { headers: ann });
      assert.equal(done.unit?.status, UnitStatus.DONE);
      const busy = await rejection(api.deleteJourney({ journeyId: root!.id }, { headers: ann }));
      assert.equal(busy.code, Code.FailedPrecondition);
      await api.deleteUnit({ unitId: unit!.id }, { headers: ann });
      await api.deleteJourney({ journeyId: root!.id }, { headers: ann });
      assert.equal((await api.listJourneys({}, { headers: ann })).data.length, 0);
    });

    await t.step("another space sees nothing of it (NOT_FOUND, empty lists)", async () => {
      const { role } = await api.createRole({
        role: { name: "Admin", resourceType: "project", permissions: ["units.write"] },
      }, { headers: ann });
      const err = await rejection(api.getRole({ roleId: role!.id }, { headers: bob }));
      assert.equal(err.code, Code.NotFound);
      assert.equal((await api.listRoles({}, { headers: bob })).data.length, 0);
      assert.equal((await api.listRoles({}, { headers: ann })).data.length, 1);
    });

    await t.step(
      "a unit in another space's journey, or in none, is NOT_FOUND and not made",
      async () => {
        const { journey } = await api.createJourney({ journey: { name: "Ann's" } }, {
          headers: ann,
        });
        const other = await rejection(
          api.createUnit({ unit: { journey: journey!.id, title: "Sneak" } }, { headers: bob }),
        );
        assert.equal(other.code, Code.NotFound);
        assert.match(other.rawMessage, /journey/);
        await api.deleteJourney({ journeyId: journey!.id }, { headers: ann });
        const gone = await rejection(
          api.createUnit({ unit: { journey: journey!.id, title: "Late" } }, { headers: ann }),
        );
        assert.equal(gone.code, Code.NotFound);
        assert.match(gone.rawMessage, /journey/);
        const [row] = await service.sql<{ count: number }[]>`select count(*)::int from core.units`;
        assert.equal(row?.count, 0);
      },
    );

    await t.step("a bad field is INVALID_ARGUMENT; a taken name ALREADY_EXISTS", async () => {
      const bad = await rejection(api.createRole({ role: { name: "", resourceType: "project" } }, {
        headers: ann,
      }));
      assert.equal(bad.code, Code.InvalidArgument);
      const taken = await rejection(
        api.createRole({ role: { name: "Admin", resourceType: "project" } }, { headers: ann }),
      );
      assert.equal(taken.code, Code.AlreadyExists);
      // The same name with its accent as a combining character: stored as Unicode NFC, so the
      // same name, not a second role that looks like the first.
      const { role: cafe } = await api.createRole(
        { role: { name: "Caf\u00e9", resourceType: "project" } },
        { headers: ann },
      );
      const decomposed = await rejection(
        api.createRole({ role: { name: "Cafe\u0301", resourceType: "project" } }, { headers: ann }),
      );
      assert.equal(decomposed.code, Code.AlreadyExists);
      const { role: renamed } = await api.updateRole({
        roleId: cafe!.id,
        role: { name: "Cre\u0300me", resourceType: "project" },
      }, { headers: ann });
      assert.equal(renamed?.name, "Cr\u00e8me");
    });

    await t.step(
      "a create replayed with its Idempotency-Key returns the first outcome",
      async () => {
        const headers = { ...ann, "idempotency-key": "journey-once" };
        const first = await api.createJourney({ journey: { name: "Once" } }, { headers });
        let replayed: string | null = null;
        const second = await api.createJourney({ journey: { name: "Once" } }, {
          headers,
          onHeader: (h) => replayed = h.get("idempotent-replayed"),
        });
        assert.equal(second.journey?.id, first.journey?.id);
        assert.equal(replayed, "true");
        // The key is the caller's own: another space's caller with the same key gets its own.
        const other = await api.createJourney({ journey: { name: "Once" } }, {
          headers: { ...bob, "idempotency-key": "journey-once" },
        });
        assert.notEqual(other.journey?.id, first.journey?.id);
      },
    );

    await t.step(
      "a unit read from memory: in its space only, and changed by any replica within the second",
      async () => {
        const { journey } = await api.createJourney({ journey: { name: "Kept" } }, {
          headers: ann,
        });
        const { unit } = await api.createUnit({ unit: { journey: journey!.id, title: "One" } }, {
          headers: ann,
        });
        const read = async (headers = ann) =>
          (await api.getUnit({ unitId: unit!.id }, { headers })).unit?.title;
        assert.equal(await read(), "One");
        assert.equal(await read(), "One"); // now kept
        const err = await rejection(api.getUnit({ unitId: unit!.id }, { headers: bob }));
        assert.equal(err.code, Code.NotFound);
        // This replica's own write is read back at once.
        await api.updateUnit({ unitId: unit!.id, unit: { journey: journey!.id, title: "Two" } }, {
          headers: ann,
        });
        assert.equal(await read(), "Two");
        // Another replica's write (here, straight in Postgres: the trigger notifies) within the
        // promised second; `cache-control: no-cache` reads Postgres at once.
        assert.equal(await read(), "Two");
        await service.sql`update core.units set title = 'Three' where title = 'Two'`;
        const fresh = { ...ann, "cache-control": "no-cache" };
        assert.equal(await read(fresh), "Three");
        await propagated();
        assert.equal(await read(), "Three");
        await service.sql`delete from core.units where title = 'Three'`;
        await propagated();
        const gone = await rejection(api.getUnit({ unitId: unit!.id }, { headers: ann }));
        assert.equal(gone.code, Code.NotFound);
      },
    );

    await t.step(
      "a unit cursor stays a position when its unit moves to another journey or is deleted; another space's is INVALID_ARGUMENT",
      async () => {
        const journey = async (name: string, headers = ann) =>
          (await api.createJourney({ journey: { name } }, { headers })).journey!.id;
        const [p, q] = [await journey("P"), await journey("Q")];
        const made: string[] = [];
        for (const title of ["u1", "u2", "u3", "u4"]) {
          made.push(
            (await api.createUnit({ unit: { journey: p, title } }, { headers: ann })).unit!.id,
          );
        }
        const [u1, u2, u3, u4] = made as [string, string, string, string];
        const page = async (journeyId: string, after: string, limit = 2, headers = ann) => {
          const res = await api.listUnits({ journey: journeyId, after, limit }, { headers });
          return [res.data.map((u) => u.id), res.hasMore];
        };
        assert.deepEqual(await page(p, "", 1), [[u1], true]);
        // u1 moves to Q: the client paging through P goes on after it.
        await api.updateUnit({ unitId: u1, unit: { journey: q, title: "u1" } }, { headers: ann });
        assert.deepEqual(await page(p, u1), [[u2, u3], true]);
        // Deleted, and moved then deleted.
        await api.deleteUnit({ unitId: u2 }, { headers: ann });
        assert.deepEqual(await page(p, u2), [[u3, u4], false]);
        await api.updateUnit({ unitId: u3, unit: { journey: q, title: "u3" } }, { headers: ann });
        await api.deleteUnit({ unitId: u3 }, { headers: ann });
        assert.deepEqual(await page(p, u3), [[u4], false]);
        // Any unit of the space is a position, as the list is in id order.
        assert.deepEqual(await page(q, u4), [[], false]);
        // Another space's units, present or deleted, and ids that name no unit are refused.
        const b = await journey("B", bob);
        const theirs =
          (await api.createUnit({ unit: { journey: b, title: "b" } }, { headers: bob })).unit!.id;
        for (
          const [journeyId, after, headers] of [
            [b, u1, bob],
            [b, u2, bob],
            [b, u3, bob],
            [p, theirs, ann],
            [p, "unit_01h455vb4pex5vsknk084sn02q", ann],
            [p, p, ann],
          ] as const
        ) {
          const err = await rejection(page(journeyId, after, 2, headers));
          assert.equal(err.code, Code.InvalidArgument, `after=${after}`);
          assert.match(err.rawMessage, /after/);
        }
      },
    );

    await t.step("a due_at of the years 0001 to 0099 is read back as written", async () => {
      const { journey } = await api.createJourney({ journey: { name: "Ancient" } }, {
        headers: ann,
      });
      const fresh = { ...ann, "cache-control": "no-cache" };
      for (const year of [1, 49, 50, 99, 100]) {
        const dueAt = new Date(Date.UTC(2000, 5, 15, 12));
        dueAt.setUTCFullYear(year);
        const seconds = BigInt(Math.floor(dueAt.getTime() / 1000));
        const { unit } = await api.createUnit({
          unit: { journey: journey!.id, title: `y${year}`, dueAt: { seconds, nanos: 0 } },
        }, { headers: ann });
        assert.equal(unit?.dueAt?.seconds, seconds, `year ${year}`);
        const read = await api.getUnit({ unitId: unit!.id }, { headers: fresh });
        assert.equal(read.unit?.dueAt?.seconds, seconds, `year ${year}`);
      }
      const listed = await api.listUnits({ journey: journey!.id }, { headers: ann });
      assert.deepEqual(
        listed.data.map((u) => new Date(Number(u.dueAt!.seconds) * 1000).toISOString()),
        ["0001", "0049", "0050", "0099", "0100"].map((y) => `${y}-06-15T12:00:00.000Z`),
      );
    });

    await t.step(
      "a due_at below the millisecond is kept to its millisecond, never later",
      async () => {
        const { journey } = await api.createJourney({ journey: { name: "Late" } }, {
          headers: ann,
        });
        // The last instant a Timestamp holds, and one just before a second: rounded to the nearest
        // millisecond they were the year 10000 (Postgres refused it: INTERNAL) and the next second.
        for (
          const [seconds, nanos] of [[253402300799n, 999_999_999], [
            1_800_000_000n,
            999_600_000,
          ]] as const
        ) {
          const created = await api.createUnit({
            unit: { journey: journey!.id, title: "Due", dueAt: { seconds, nanos } },
          }, { headers: ann });
          assert.deepEqual(
            [created.unit?.dueAt?.seconds, created.unit?.dueAt?.nanos],
            [seconds, 999_000_000],
          );
          const replaced = await api.updateUnit({
            unitId: created.unit!.id,
            unit: { journey: journey!.id, title: "Due", dueAt: { seconds, nanos } },
          }, { headers: ann });
          assert.equal(replaced.unit?.dueAt?.seconds, seconds);
        }
      },
    );
    await t.step(
      "updated_at never goes back, also when a write that began later committed first",
      async () => {
        const { journey } = await api.createJourney({ journey: { name: "Clock" } }, {
          headers: ann,
        });
        const { unit } = await api.createUnit({ unit: { journey: journey!.id, title: "v1" } }, {
          headers: ann,
        });
        const uuid = ids.unit.toUuid(unit!.id)!;
        const ms = (t: { seconds: bigint; nanos: number } | undefined) =>
          Number(t!.seconds) * 1000 + Math.floor(t!.nanos / 1e6);
        // Another writer has the row: the replace below begins, then waits for it; that writer's
        // change is made after the replace began, and commits first.
        const { replace, later } = await service.sql.begin(async (tx) => {
          await tx`select 1 from core.units where id = ${uuid} for update`;
          const replace = api.updateUnit({
            unitId: unit!.id,
            unit: { journey: journey!.id, title: "v3" },
          }, { headers: ann });
          await untilWaitingForLock(service.sql, "the replace to wait for the row");
          const [row] = await tx<{ updated_at: Date }[]>`
            update core.units set title = 'v2', updated_at = clock_timestamp()
            where id = ${uuid} returning updated_at`;
          return { replace: { call: replace }, later: row!.updated_at.getTime() };
        });
        const replaced = (await replace.call).unit!;
        assert.equal(replaced.title, "v3");
        assert.ok(
          ms(replaced.updatedAt) >= later,
          `updated_at went back: ${new Date(ms(replaced.updatedAt)).toISOString()} after ${
            new Date(later).toISOString()
          }`,
        );
      },
    );
  } finally {
    await service.close();
  }
});
