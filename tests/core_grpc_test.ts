/**
 * End to end over gRPC: a stock @grpc/grpc-js client talks HTTP/2 cleartext to the real core
 * process, without the gateway.
 */

import assert from "node:assert/strict";
import { Health, HealthCheckResponse_ServingStatus } from "../gen/grpc/health/v1/health_pb.ts";
import { CoreService } from "../gen/registry/core/v1/core_service_pb.ts";
import { UnitPriority, UnitStatus } from "../gen/registry/core/v1/unit_pb.ts";
import { type GrpcFailure, grpcTestClient } from "../lib/testing/mod.ts";
import { startStack } from "../lib/testing/mod.ts";

const rpc = CoreService.method;

async function code(promise: Promise<unknown>): Promise<number> {
  try {
    await promise;
  } catch (error) {
    return (error as GrpcFailure).code;
  }
  throw new Error("expected the call to fail");
}

Deno.test("a stock gRPC client uses the core service directly", async (t) => {
  const stack = await startStack();
  const client = grpcTestClient(stack.coreGrpc);
  const a = { authorization: `Bearer ${await stack.token({ sub: "ann", space: "a" })}` };
  const b = { authorization: `Bearer ${await stack.token({ sub: "ben", space: "b" })}` };
  try {
    await t.step(
      "health is SERVING; no token is UNAUTHENTICATED; no space PERMISSION_DENIED",
      async () => {
        const health = await client.call(Health.method.check, { service: CoreService.typeName });
        assert.equal(health.status, HealthCheckResponse_ServingStatus.SERVING);
        assert.equal(await code(client.call(rpc.listRoles, {})), 16);
        const spaceless = { authorization: `Bearer ${await stack.token({ sub: "x" })}` };
        assert.equal(await code(client.call(rpc.listRoles, {}, spaceless)), 7);
      },
    );

    await t.step("journeys, units and roles: every operation", async () => {
      const { journey: root } = await client.call(
        rpc.createJourney,
        { journey: { name: "Root" } },
        a,
      );
      assert.equal(root?.object, "journey");
      assert.equal(root?.owner, "ann");
      assert.equal(root?.active, true);
      const { journey: leaf } = await client.call(
        rpc.createJourney,
        { journey: { name: "Leaf", parent: root!.id } },
        a,
      );
      assert.equal(
        await code(client.call(rpc.updateJourney, {
          journeyId: root!.id,
          journey: { name: "Root", parent: leaf!.id },
        }, a)),
        9,
        "a cycle is FAILED_PRECONDITION",
      );
      const { unit } = await client.call(rpc.createUnit, {
        unit: { journey: leaf!.id, title: "Do", priority: UnitPriority.HIGH },
      }, a);
      assert.equal(unit?.status, UnitStatus.TODO);
      assert.equal(unit?.originator, "ann");
      assert.equal((await client.call(rpc.getUnit, { unitId: unit!.id }, a)).unit?.title, "Do");
      const listed = await client.call(rpc.listUnits, {
        journey: leaf!.id,
        status: UnitStatus.TODO,
      }, a);
      assert.equal(listed.object, "list");
      assert.deepEqual(listed.data.map((u) => u.id), [unit!.id]);
      const moved = await client.call(rpc.updateUnit, {
        unitId: unit!.id,
        unit: { journey: root!.id, title: "Done", status: UnitStatus.DONE },
      }, a);
      assert.equal(moved.unit?.journey, root!.id);
      assert.equal(await code(client.call(rpc.deleteJourney, { journeyId: root!.id }, a)), 9);
      await client.call(rpc.deleteUnit, { unitId: unit!.id }, a);
      await client.call(rpc.deleteJourney, { journeyId: leaf!.id }, a);
      await client.call(rpc.deleteJourney, { journeyId: root!.id }, a);
      assert.equal((await client.call(rpc.listJourneys, {}, a)).data.length, 0);

      const { role } = await client.call(rpc.createRole, {
        role: { name: "Admin", resourceType: "project", permissions: ["units.write"] },
      }, a);
      assert.equal(role?.object, "role");
      assert.equal(
        await code(
          client.call(rpc.createRole, { role: { name: "Admin", resourceType: "project" } }, a),
        ),
        6,
        "a taken name is ALREADY_EXISTS",
      );
      const replaced = await client.call(rpc.updateRole, {
        roleId: role!.id,
        role: { name: "Admin", resourceType: "project" },
      }, a);
      assert.deepEqual(replaced.role?.permissions, []);
      assert.equal((await client.call(rpc.getRole, { roleId: role!.id }, a)).role?.name, "Admin");
      assert.equal(
        (await client.call(rpc.listRoles, { resourceType: "project" }, a)).data.length,
        1,
      );
      assert.equal(
        await code(client.call(rpc.getRole, { roleId: role!.id }, b)),
        5,
        "space B sees nothing",
      );
      await client.call(rpc.deleteRole, { roleId: role!.id }, a);
      assert.equal(await code(client.call(rpc.getRole, { roleId: role!.id }, a)), 5);
    });

    await t.step("space B cannot reference space A's journey", async () => {
      const { journey } = await client.call(rpc.createJourney, { journey: { name: "A" } }, a);
      assert.equal(
        await code(client.call(rpc.createUnit, { unit: { journey: journey!.id, title: "x" } }, b)),
        5,
      );
      assert.equal(
        await code(
          client.call(rpc.createJourney, { journey: { name: "x", parent: journey!.id } }, b),
        ),
        5,
      );
      assert.equal(await code(client.call(rpc.listUnits, { journey: journey!.id }, b)), 5);
    });

    await t.step(
      "Connect JSON: a misspelled field of a full replacement is INVALID_ARGUMENT and clears nothing",
      async () => {
        const { journey } = await client.call(rpc.createJourney, { journey: { name: "J" } }, a);
        const { unit } = await client.call(rpc.createUnit, {
          unit: { journey: journey!.id, title: "t", assignee: "bob" },
        }, a);
        const connect = (method: string, body: unknown) =>
          fetch(`${stack.coreHttp}/${CoreService.typeName}/${method}`, {
            method: "POST",
            headers: { ...a, "content-type": "application/json" },
            body: JSON.stringify(body),
          });
        const res = await connect("UpdateUnit", {
          unitId: unit!.id,
          unit: { journey: journey!.id, title: "t", asignee: "bob" },
        });
        const text = await res.text();
        assert.equal(res.status, 400, text);
        assert.equal(JSON.parse(text).code, "invalid_argument", text);
        assert.match(JSON.parse(text).message, /asignee/, text);
        assert.equal(
          (await client.call(rpc.getUnit, { unitId: unit!.id }, a)).unit?.assignee,
          "bob",
        );
        // Spelled right, by its JSON or its proto name, it is taken.
        for (const body of [{ unitId: unit!.id }, { unit_id: unit!.id }]) {
          const ok = await connect("GetUnit", body);
          assert.equal(ok.status, 200, await ok.clone().text());
          assert.equal((await ok.json()).unit.assignee, "bob");
        }
      },
    );

    await t.step(
      "Connect JSON: a due date that does not exist is INVALID_ARGUMENT (not rolled over) and creates nothing",
      async () => {
        const { journey } = await client.call(rpc.createJourney, { journey: { name: "D" } }, a);
        const create = (dueAt: string) =>
          fetch(`${stack.coreHttp}/${CoreService.typeName}/CreateUnit`, {
            method: "POST",
            headers: { ...a, "content-type": "application/json" },
            body: JSON.stringify({ unit: { journey: journey!.id, title: "d", dueAt } }),
          });
        const res = await create("2027-02-30T00:00:00Z");
        const text = await res.text();
        assert.equal(res.status, 400, text);
        assert.equal(JSON.parse(text).code, "invalid_argument", text);
        assert.match(JSON.parse(text).message, /^Invalid unit\.due_at: must be an RFC 3339/, text);
        const units = async () =>
          (await client.call(rpc.listUnits, { journey: journey!.id }, a)).data;
        assert.deepEqual(await units(), []);
        const ok = await create("2027-02-28T00:00:00Z");
        assert.equal(ok.status, 200, await ok.clone().text());
        assert.equal((await ok.json()).unit.dueAt, "2027-02-28T00:00:00Z");
        assert.deepEqual((await units()).map((u) => u.dueAt?.seconds), [1_803_772_800n]);
      },
    );
  } finally {
    client.close();
    await stack.stop();
  }
});
