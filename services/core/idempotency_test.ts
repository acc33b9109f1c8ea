/**
 * An idempotency key whose outcome was lost (the handler's write committed, storing its answer
 * failed) never runs its create again: each create marks its key in its own statement, and a retry
 * answers the resource as it is now, or says that the request completed when it cannot.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.ts";
import { CoreService } from "../../gen/registry/core/v1/core_service_pb.ts";
import {
  losingOutcomes,
  rejection,
  serveInProcess,
  untilWaitingForLock,
} from "../../lib/testing/mod.ts";
import { coreService } from "./main.ts";

const service = CoreService.typeName;

Deno.test("a core create whose outcome was lost is answered, not run again", async (t) => {
  const served = await serveInProcess(coreService);
  const api = createClient(CoreService, served.transport);
  const auth = await served.bearer({ sub: "ann", space: "s1" });
  let keys = 0;
  /** A call's options with a new key (or `key`), and where its `idempotent-replayed` lands. */
  const keyed = (key = `lost-${++keys}`) => {
    const seen = { key, replayed: null as string | null };
    const options = () => ({
      headers: { ...auth, "idempotency-key": seen.key },
      onHeader: (h: Headers) => seen.replayed = h.get("idempotent-replayed"),
    });
    return { seen, options };
  };
  const count = async (table: string, where: string) => {
    const [row] = await served.sql.unsafe<{ n: number }[]>(
      `select count(*)::int as n from core.${table} where ${where}`,
    );
    return row!.n;
  };
  /** The events of `method` about the record `id`. */
  const events = (method: string, id: string) =>
    count("events", `method = '${service}/${method}' and resource like '%/${id}'`);
  try {
    const { journey } = await api.createJourney({ journey: { name: "Base" } }, { headers: auth });

    // Each create: the call, and the count of the records it made.
    const creates = {
      CreateUnit: {
        call: (o: object) => api.createUnit({ unit: { journey: journey!.id, title: "Lost" } }, o),
        id: (r: { unit?: { id: string } }) => r.unit!.id,
        records: () => count("units", "title = 'Lost'"),
      },
      CreateRole: {
        call: (o: object) => api.createRole({ role: { name: "Lost", resourceType: "project" } }, o),
        id: (r: { role?: { id: string } }) => r.role!.id,
        records: () => count("roles", "name = 'Lost'"),
      },
      CreateJourney: {
        call: (o: object) => api.createJourney({ journey: { name: "Lost" } }, o),
        id: (r: { journey?: { id: string } }) => r.journey!.id,
        records: () => count("journeys", "name = 'Lost'"),
      },
    } as const;

    for (const [method, c] of Object.entries(creates)) {
      await t.step(`${method}: the retry after the lock answers the first record`, async () => {
        const { seen, options } = keyed();
        const lost = await losingOutcomes(served.sql, "core");
        // deno-lint-ignore no-explicit-any
        const first = c.id(await c.call(options()) as any);
        await lost.heal();
        assert.equal(await count("idempotency_keys", "completed_at is null"), 1, "not lost");
        await lost.expireLocks();
        // deno-lint-ignore no-explicit-any
        const again = c.id(await c.call(options()) as any);
        assert.equal(again, first, "the create ran again");
        assert.equal(seen.replayed, "true");
        assert.equal(await c.records(), 1);
        assert.equal(await events(method, first), 1, "one creation event");
        // And again, the same (the key stays answered from the record).
        // deno-lint-ignore no-explicit-any
        assert.equal(c.id(await c.call(options()) as any), first);
        assert.equal(await c.records(), 1);
        await served.sql`delete from core.idempotency_keys`;
      });
    }

    await t.step("before the lock expires, a retry is answered the same way", async () => {
      const { seen, options } = keyed();
      const lost = await losingOutcomes(served.sql, "core");
      const first = await api.createJourney({ journey: { name: "Early" } }, options());
      await lost.heal();
      const again = await api.createJourney({ journey: { name: "Early" } }, options());
      assert.equal(again.journey!.id, first.journey!.id);
      assert.equal(seen.replayed, "true");
      assert.equal(await count("journeys", "name = 'Early'"), 1);
    });

    await t.step("an owner taken over while it ran does not commit: one record", async () => {
      const { options } = keyed();
      const create = () => api.createJourney({ journey: { name: "Taken" } }, options());
      // The first call waits for the table past its key's lock; a retry takes the key over and
      // waits too; then both go on.
      const [slow, retry] = await served.sql.begin(async (tx) => {
        await tx`lock table core.journeys in share mode`;
        const slow = create().then((r) => r, (e) => e);
        await untilWaitingForLock(served.sql, "the first call to wait for the table");
        await served.sql`update core.idempotency_keys set created_at = created_at - interval '61 s'
          where key = ${options().headers["idempotency-key"]}`;
        const retry = create();
        await untilWaitingForLock(served.sql, "the retry to wait for the table too", 2);
        return [{ call: slow }, { call: retry }];
      });
      const answered = await retry.call;
      const failed = await slow.call;
      assert.ok(failed instanceof Error, "the first call committed too");
      assert.equal(ConnectError.from(failed).code, Code.Aborted, failed.message);
      assert.equal(await count("journeys", "name = 'Taken'"), 1, "two records");
      assert.equal(await events("CreateJourney", answered.journey!.id), 1);
      const again = await create();
      assert.equal(again.journey!.id, answered.journey!.id, "the retry's record is the one");
    });

    await t.step("a record gone since: the retry says the request completed", async () => {
      const { options } = keyed();
      const lost = await losingOutcomes(served.sql, "core");
      const { role } = await api.createRole(
        { role: { name: "Gone", resourceType: "project" } },
        options(),
      );
      await lost.heal();
      await api.deleteRole({ roleId: role!.id }, { headers: auth });
      await lost.expireLocks();
      const error = await rejection(
        api.createRole({ role: { name: "Gone", resourceType: "project" } }, options()),
      );
      assert.equal(error.code, Code.FailedPrecondition, error.message);
      const [info] = error.findDetails(ErrorInfoSchema);
      assert.equal(info?.reason, "IDEMPOTENCY_OUTCOME_LOST");
      assert.equal(info?.metadata.resource, `spaces/s1/roles/${role!.id}`);
      assert.equal(await count("roles", "name = 'Gone'"), 0, "the create ran again");
    });
  } finally {
    await served.close();
  }
});
