/**
 * End to end through the gateway for the core area (spec 2.5-2.7, 4.6): roles, journeys, units,
 * the decisions the proto documents where the specification is silent, and space tenancy.
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import { idKind } from "../lib/platform/mod.ts";
import { httpClient, type HttpResult } from "../lib/testing/mod.ts";
import { startStack } from "../lib/testing/mod.ts";

const roleKeys = [
  "object",
  "id",
  "created_at",
  "updated_at",
  "name",
  "description",
  "resource_type",
  "permissions",
  "etag",
];
const journeyKeys = [
  "object",
  "id",
  "created_at",
  "updated_at",
  "owner",
  "parent",
  "name",
  "description",
  "active",
  "etag",
];
const unitKeys = [
  "object",
  "id",
  "created_at",
  "updated_at",
  "journey",
  "originator",
  "title",
  "assignee",
  "status",
  "priority",
  "description",
  "due_at",
  "etag",
];
const timestamp = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

function assertError(res: HttpResult, status: number, code: string, field?: string): void {
  assert.equal(res.status, status, res.text);
  assert.deepEqual(Object.keys(res.body.error), ["code", "message", "details"]);
  assert.equal(res.body.error.code, code, res.text);
  if (field !== undefined) {
    const fields = res.body.error.details.map((d: { field: string }) => d.field);
    assert.ok(fields.includes(field), `expected a violation of ${field}: ${res.text}`);
  }
}

function ids(res: HttpResult): string[] {
  return res.body.data.map((r: { id: string }) => r.id);
}

Deno.test("the gateway serves the core area end to end", async (t) => {
  const stack = await startStack();
  const api = httpClient(stack.gatewayUrl);
  const alice = await stack.token({ sub: "alice", space: "space-a" });
  const bob = await stack.token({ sub: "bob", space: "space-b" });
  const spaceless = await stack.token({ sub: "carol", projects: ["*"] });
  try {
    await t.step("a token without a space claim is 403 on every core route", async () => {
      for (
        const [method, path] of [
          ["GET", "/v1/core/roles"],
          ["POST", "/v1/core/roles"],
          ["GET", "/v1/core/journeys"],
          ["GET", "/v1/core/units?journey=journey_00000000000000000000000000"],
          ["DELETE", "/v1/core/units/unit_00000000000000000000000000"],
        ]
      ) {
        const res = await api(method!, path!, {
          token: spaceless,
          ...(method === "POST" ? { json: { name: "r", resource_type: "project" } } : {}),
        });
        assertError(res, 403, "permission_denied");
      }
      assertError(await api("GET", "/v1/core/roles"), 401, "unauthenticated");
    });

    let roleId = "";
    await t.step("roles: create 201 with the spec's fields and defaults", async () => {
      const res = await api("POST", "/v1/core/roles", {
        token: alice,
        json: {
          name: "Viewer",
          resource_type: "project",
          permissions: ["units.read", "journeys.read"],
        },
      });
      assert.equal(res.status, 201, res.text);
      assert.deepEqual(Object.keys(res.body), roleKeys);
      assert.equal(res.body.object, "role");
      assert.match(res.body.id, /^role_[0-9a-z]{26}$/);
      assert.equal(res.headers.get("location"), `/v1/core/roles/${res.body.id}`);
      assert.equal(res.body.description, null);
      assert.deepEqual(res.body.permissions, ["units.read", "journeys.read"]);
      assert.match(res.body.created_at, timestamp);
      roleId = res.body.id;
      const minimal = await api("POST", "/v1/core/roles", {
        token: alice,
        json: { name: "Empty", resource_type: "billing.account" },
      });
      assert.equal(minimal.status, 201, minimal.text);
      assert.deepEqual(minimal.body.permissions, []);
    });

    await t.step("roles: bad input is 400 per field; a taken name is 409", async () => {
      for (
        const [json, field] of [
          [{ resource_type: "project" }, "name"],
          [{ name: "x" }, "resource_type"],
          [{ name: "x", resource_type: "Project" }, "resource_type"],
          [{ name: "x", resource_type: "project", permissions: ["read"] }, "permissions[0]"],
          [{ name: "x", resource_type: "project", permissions: ["a.b", "a.b"] }, "permissions"],
          [{ name: "x", resource_type: "project", permissions: "a.b" }, "permissions"],
          [{ name: "x", resource_type: "project", description: 5 }, "description"],
          [{ name: "x", resource_type: "project", id: "role_x" }, "id"],
          [{ name: "x", resource_type: "project", object: "role" }, "object"],
          [
            { name: "x", resource_type: "project", created_at: "2026-01-01T00:00:00Z" },
            "created_at",
          ],
        ] as const
      ) {
        assertError(
          await api("POST", "/v1/core/roles", { token: alice, json }),
          400,
          "invalid_argument",
          field,
        );
      }
      assertError(
        await api("POST", "/v1/core/roles", {
          token: alice,
          json: { name: "Viewer", resource_type: "project" },
        }),
        409,
        "already_exists",
      );
      const otherType = await api("POST", "/v1/core/roles", {
        token: alice,
        json: { name: "Viewer", resource_type: "organization" },
      });
      assert.equal(otherType.status, 201);
      const otherSpace = await api("POST", "/v1/core/roles", {
        token: bob,
        json: { name: "Viewer", resource_type: "project" },
      });
      assert.equal(otherSpace.status, 201, "names are unique per space only");
    });

    await t.step("roles: get, list by resource_type, PUT replaces, DELETE 204", async () => {
      const get = await api("GET", `/v1/core/roles/${roleId}`, { token: alice });
      assert.equal(get.status, 200);
      assert.equal(get.body.name, "Viewer");
      const all = await api("GET", "/v1/core/roles", { token: alice });
      assert.deepEqual(Object.keys(all.body), ["object", "data", "has_more"]);
      assert.equal(all.body.object, "list");
      assert.equal(all.body.data.length, 3);
      const projects = await api("GET", "/v1/core/roles?resource_type=project", { token: alice });
      assert.deepEqual(ids(projects), [roleId]);
      assertError(
        await api("GET", "/v1/core/roles?resource_type=BAD", { token: alice }),
        400,
        "invalid_argument",
        "resource_type",
      );

      const put = await api("PUT", `/v1/core/roles/${roleId}`, {
        token: alice,
        json: { name: "Reader", resource_type: "project", description: "Reads" },
      });
      assert.equal(put.status, 200, put.text);
      assert.equal(put.body.description, "Reads");
      assert.deepEqual(put.body.permissions, [], "an omitted list returns to its default");
      assert.equal(put.body.created_at, get.body.created_at);
      const again = await api("PUT", `/v1/core/roles/${roleId}`, {
        token: alice,
        json: { name: "Reader", resource_type: "project" },
      });
      assert.equal(again.body.description, null, "an omitted nullable returns to null");
      assertError(
        await api("PUT", `/v1/core/roles/${roleId}`, {
          token: alice,
          json: { resource_type: "project" },
        }),
        400,
        "invalid_argument",
        "name",
      );
      assertError(
        await api("PUT", `/v1/core/roles/${roleId}`, {
          token: alice,
          json: { name: "Viewer", resource_type: "organization" },
        }),
        409,
        "already_exists",
      );
      // Conditional PUT and DELETE (RFC 9110 13.1): If-None-Match: * (the role exists) or with
      // its version, and If-Match with only a weak tag, are 412 and change nothing; another
      // space's caller gets the 404 it gets without a condition (nothing is told about the role).
      const tag = again.headers.get("etag")!;
      const path = `/v1/core/roles/${roleId}`;
      const json = { name: "Renamed", resource_type: "project" };
      for (
        const headers of [
          { "if-none-match": "*" },
          { "if-none-match": `W/${tag}` },
          { "if-match": `W/${tag}` },
          { "if-match": `"stale", W/${tag}` },
        ]
      ) {
        assertError(await api("PUT", path, { token: alice, json, headers }), 412, "aborted");
        assertError(await api("DELETE", path, { token: alice, headers }), 412, "aborted");
        assertError(await api("PUT", path, { token: bob, json, headers }), 404, "not_found");
        assertError(await api("DELETE", path, { token: bob, headers }), 404, "not_found");
      }
      const kept = await api("GET", path, { token: alice });
      assert.equal(kept.headers.get("etag"), tag);
      assert.equal(kept.body.name, "Reader");
      // A role that does not exist: 404, with or without a condition (RFC 9110 13.2.1).
      assertError(
        await api("PUT", "/v1/core/roles/role_00000000000000000000000000", {
          token: alice,
          json,
          headers: { "if-none-match": "*" },
        }),
        404,
        "not_found",
      );
      const del = await api("DELETE", path, {
        token: alice,
        headers: { "if-match": `"x", ${tag}` },
      });
      assert.equal(del.status, 204);
      assert.equal(del.text, "");
      assertError(await api("GET", `/v1/core/roles/${roleId}`, { token: alice }), 404, "not_found");
      assertError(
        await api("DELETE", `/v1/core/roles/${roleId}`, { token: alice }),
        404,
        "not_found",
      );
    });

    let root = "";
    let child = "";
    await t.step("journeys: create with defaults; a parent of the same space", async () => {
      const res = await api("POST", "/v1/core/journeys", {
        token: alice,
        json: { name: "Launch" },
      });
      assert.equal(res.status, 201, res.text);
      assert.deepEqual(Object.keys(res.body), journeyKeys);
      assert.equal(res.body.object, "journey");
      assert.match(res.body.id, /^journey_[0-9a-z]{26}$/);
      assert.equal(res.body.owner, "alice");
      assert.equal(res.body.parent, null);
      assert.equal(res.body.description, "");
      assert.equal(res.body.active, true);
      root = res.body.id;
      const sub = await api("POST", "/v1/core/journeys", {
        token: alice,
        json: {
          name: "Docs",
          parent: root,
          owner: "dana",
          active: false,
          description: "Line 1\nLine 2",
        },
      });
      assert.equal(sub.status, 201, sub.text);
      assert.equal(sub.body.parent, root);
      assert.equal(sub.body.owner, "dana");
      assert.equal(sub.body.active, false);
      child = sub.body.id;
      assertError(
        await api("POST", "/v1/core/journeys", {
          token: alice,
          json: { name: "x", parent: "journey_00000000000000000000000000" },
        }),
        404,
        "not_found",
      );
      assertError(
        await api("POST", "/v1/core/journeys", {
          token: alice,
          json: { name: "x", originator: "me" },
        }),
        400,
        "invalid_argument",
        "originator",
      );
    });

    await t.step("journeys: list filters by parent and active", async () => {
      const all = await api("GET", "/v1/core/journeys", { token: alice });
      assert.deepEqual(ids(all), [root, child]);
      assert.deepEqual(
        ids(await api("GET", `/v1/core/journeys?parent=${root}`, { token: alice })),
        [child],
      );
      // An empty parent names no journey: 400, as an empty journey of a unit list is.
      assertError(
        await api("GET", "/v1/core/journeys?parent=", { token: alice }),
        400,
        "invalid_argument",
        "parent",
      );
      assert.deepEqual(ids(await api("GET", "/v1/core/journeys?active=true", { token: alice })), [
        root,
      ]);
      assert.deepEqual(ids(await api("GET", "/v1/core/journeys?active=false", { token: alice })), [
        child,
      ]);
      assertError(
        await api("GET", "/v1/core/journeys?active=yes", { token: alice }),
        400,
        "invalid_argument",
        "active",
      );
      const page = await api("GET", "/v1/core/journeys?limit=1", { token: alice });
      assert.deepEqual(ids(page), [root]);
      assert.equal(page.body.has_more, true);
      const next = await api("GET", `/v1/core/journeys?limit=1&after=${root}`, { token: alice });
      assert.deepEqual(ids(next), [child]);
      assert.equal(next.body.has_more, false);
    });

    await t.step("journeys: PUT replaces, rejects cycles, defaults what it omits", async () => {
      // A descendant as parent is refused for what the tree is now (409, as a journey that still
      // has units is), its own id as parent whatever the tree (400).
      assertError(
        await api("PUT", `/v1/core/journeys/${root}`, {
          token: alice,
          json: { name: "Launch", parent: child },
        }),
        409,
        "failed_precondition",
      );
      assertError(
        await api("PUT", `/v1/core/journeys/${root}`, {
          token: alice,
          json: { name: "Launch", parent: root },
        }),
        400,
        "invalid_argument",
        "parent",
      );
      const put = await api("PUT", `/v1/core/journeys/${child}`, {
        token: alice,
        json: { name: "Docs v2" },
      });
      assert.equal(put.status, 200, put.text);
      assert.equal(put.body.parent, null);
      assert.equal(put.body.active, true);
      assert.equal(put.body.owner, "alice", "owner returns to the caller");
      assert.equal(put.body.description, "");
      const reparent = await api("PUT", `/v1/core/journeys/${child}`, {
        token: alice,
        json: { name: "Docs v2", parent: root },
      });
      assert.equal(reparent.body.parent, root);
    });

    let unitId = "";
    await t.step("units: create with defaults; originator is the caller", async () => {
      const res = await api("POST", "/v1/core/units", {
        token: alice,
        json: { journey: child, title: "Write guide" },
      });
      assert.equal(res.status, 201, res.text);
      assert.deepEqual(Object.keys(res.body), unitKeys);
      assert.equal(res.body.object, "unit");
      assert.match(res.body.id, /^unit_[0-9a-z]{26}$/);
      assert.equal(res.body.journey, child);
      assert.equal(res.body.originator, "alice");
      assert.equal(res.body.assignee, null);
      assert.equal(res.body.status, "todo");
      assert.equal(res.body.priority, "none");
      assert.equal(res.body.description, null);
      assert.equal(res.body.due_at, null);
      unitId = res.body.id;
      const full = await api("POST", "/v1/core/units", {
        token: alice,
        json: {
          journey: child,
          title: "Review",
          assignee: "erin",
          status: "in_progress",
          priority: "urgent",
          description: "Check\tall",
          due_at: "2026-12-01T10:00:00+02:00",
        },
      });
      assert.equal(full.status, 201, full.text);
      assert.equal(full.body.due_at, "2026-12-01T08:00:00.000Z");
      assert.equal(full.body.status, "in_progress");
      for (
        const [json, field] of [
          [{ title: "x" }, "journey"],
          [{ journey: child }, "title"],
          [{ journey: child, title: "x", status: "blocked" }, "status"],
          [{ journey: child, title: "x", priority: "p1" }, "priority"],
          [{ journey: child, title: "x", due_at: "tomorrow" }, "due_at"],
          [{ journey: child, title: "x", originator: "mallory" }, "originator"],
        ] as const
      ) {
        assertError(
          await api("POST", "/v1/core/units", { token: alice, json }),
          400,
          "invalid_argument",
          field,
        );
      }
      assertError(
        await api("POST", "/v1/core/units", {
          token: alice,
          json: { journey: "journey_00000000000000000000000000", title: "x" },
        }),
        404,
        "not_found",
      );
    });

    await t.step("units: list a journey's units, filter by status and assignee", async () => {
      assertError(
        await api("GET", "/v1/core/units", { token: alice }),
        400,
        "invalid_argument",
        "journey",
      );
      const all = await api("GET", `/v1/core/units?journey=${child}`, { token: alice });
      assert.equal(all.status, 200, all.text);
      assert.equal(all.body.object, "list");
      assert.equal(all.body.data.length, 2);
      assert.deepEqual(
        ids(await api("GET", `/v1/core/units?journey=${child}&status=todo`, { token: alice })),
        [unitId],
      );
      assert.equal(
        (await api("GET", `/v1/core/units?journey=${child}&assignee=erin`, { token: alice })).body
          .data.length,
        1,
      );
      assert.deepEqual(
        (await api("GET", `/v1/core/units?journey=${root}`, { token: alice })).body.data,
        [],
      );
      assertError(
        await api("GET", `/v1/core/units?journey=${child}&status=late`, { token: alice }),
        400,
        "invalid_argument",
        "status",
      );
    });

    await t.step("units: PUT replaces and may move to another journey", async () => {
      const put = await api("PUT", `/v1/core/units/${unitId}`, {
        token: alice,
        json: { journey: root, title: "Write guide", status: "done" },
      });
      assert.equal(put.status, 200, put.text);
      assert.equal(put.body.journey, root);
      assert.equal(put.body.status, "done");
      assert.equal(put.body.originator, "alice");
      const back = await api("PUT", `/v1/core/units/${unitId}`, {
        token: alice,
        json: { journey: root, title: "Guide" },
      });
      assert.equal(back.body.status, "todo", "an omitted status returns to todo");
      assertError(
        await api("PUT", `/v1/core/units/${unitId}`, {
          token: alice,
          json: { journey: root, title: "x", originator: "m" },
        }),
        400,
        "invalid_argument",
        "originator",
      );
    });

    await t.step(
      "journeys: DELETE while units or children remain is 409; nothing is removed",
      async () => {
        assertError(
          await api("DELETE", `/v1/core/journeys/${root}`, { token: alice }),
          409,
          "failed_precondition",
        );
        assertError(
          await api("DELETE", `/v1/core/journeys/${child}`, { token: alice }),
          409,
          "failed_precondition",
        );
        assert.equal(
          (await api("GET", `/v1/core/journeys/${child}`, { token: alice })).status,
          200,
        );
        assert.equal((await api("GET", `/v1/core/units/${unitId}`, { token: alice })).status, 200);
        for (
          const unit of (await api("GET", `/v1/core/units?journey=${child}`, { token: alice })).body
            .data
        ) {
          assert.equal(
            (await api("DELETE", `/v1/core/units/${unit.id}`, { token: alice })).status,
            204,
          );
        }
        assert.equal(
          (await api("DELETE", `/v1/core/journeys/${child}`, { token: alice })).status,
          204,
        );
        assertError(
          await api("DELETE", `/v1/core/journeys/${root}`, { token: alice }),
          409,
          "failed_precondition",
        );
        assert.equal(
          (await api("DELETE", `/v1/core/units/${unitId}`, { token: alice })).status,
          204,
        );
        assert.equal(
          (await api("DELETE", `/v1/core/journeys/${root}`, { token: alice })).status,
          204,
        );
        assertError(
          await api("GET", `/v1/core/journeys/${root}`, { token: alice }),
          404,
          "not_found",
        );
      },
    );

    await t.step(
      "space B can neither read, list, change nor reference space A's records",
      async () => {
        const journey =
          (await api("POST", "/v1/core/journeys", { token: alice, json: { name: "A's" } })).body.id;
        const unit =
          (await api("POST", "/v1/core/units", { token: alice, json: { journey, title: "A's" } }))
            .body.id;
        const role = (await api("POST", "/v1/core/roles", {
          token: alice,
          json: { name: "A's", resource_type: "x" },
        })).body.id;
        for (
          const [method, path, json] of [
            ["GET", `/v1/core/journeys/${journey}`],
            ["GET", `/v1/core/units/${unit}`],
            ["GET", `/v1/core/roles/${role}`],
            ["PUT", `/v1/core/journeys/${journey}`, { name: "B" }],
            ["PUT", `/v1/core/units/${unit}`, { journey, title: "B" }],
            ["PUT", `/v1/core/roles/${role}`, { name: "B", resource_type: "x" }],
            ["DELETE", `/v1/core/units/${unit}`],
            ["DELETE", `/v1/core/journeys/${journey}`],
            ["DELETE", `/v1/core/roles/${role}`],
            ["POST", "/v1/core/units", { journey, title: "B" }],
            ["POST", "/v1/core/journeys", { name: "B", parent: journey }],
            ["GET", `/v1/core/units?journey=${journey}`],
            ["GET", `/v1/core/journeys?parent=${journey}`],
          ] as const
        ) {
          const res = await api(method, path, { token: bob, ...(json ? { json } : {}) });
          assertError(res, 404, "not_found");
        }
        for (const path of ["/v1/core/roles", "/v1/core/journeys"]) {
          const list = await api("GET", path, { token: bob });
          assert.ok(!list.text.includes("A's"), `${path} shows space A's records`);
        }
        assertError(
          await api("GET", `/v1/core/journeys?after=${journey}`, { token: bob }),
          400,
          "invalid_argument",
          "after",
        );
        assertError(
          await api("GET", `/v1/core/roles?after=${role}`, { token: bob }),
          400,
          "invalid_argument",
          "after",
        );
        // Unchanged for A.
        assert.equal(
          (await api("GET", `/v1/core/units/${unit}`, { token: alice })).body.title,
          "A's",
        );
        assert.equal(
          (await api("GET", `/v1/core/roles/${role}`, { token: alice })).body.name,
          "A's",
        );
      },
    );

    await t.step(
      "units: a conditional POST is read against its journey's units, the unit's collection",
      async () => {
        const journey =
          (await api("POST", "/v1/core/journeys", { token: alice, json: { name: "Conditional" } }))
            .body.id;
        const list = `/v1/core/units?journey=${journey}`;
        const json = { journey, title: "Conditional" };
        // False (a collection has no etag): 412, and nothing is created.
        for (const headers of [{ "if-match": '"stale"' }, { "if-none-match": "*" }]) {
          assertError(
            await api("POST", "/v1/core/units", { token: alice, json, headers }),
            412,
            "aborted",
          );
          // What the POST would be answered without its condition comes first: another space's
          // journey is 404, a unit without a journey 400.
          assertError(
            await api("POST", "/v1/core/units", { token: bob, json, headers }),
            404,
            "not_found",
          );
          assertError(
            await api("POST", "/v1/core/units", {
              token: alice,
              json: { title: "No journey" },
              headers,
            }),
            400,
            "invalid_argument",
            "journey",
          );
        }
        assert.deepEqual((await api("GET", list, { token: alice })).body.data, []);
        // True: created.
        for (const headers of [{ "if-match": "*" }, { "if-none-match": '"x"' }]) {
          const res = await api("POST", "/v1/core/units", { token: alice, json, headers });
          assert.equal(res.status, 201, res.text);
        }
        assert.equal((await api("GET", list, { token: alice })).body.data.length, 2);
      },
    );

    await t.step(
      "a write's condition the gateway evaluates is read from Postgres, not a replica's memory",
      async () => {
        const journey =
          (await api("POST", "/v1/core/journeys", { token: alice, json: { name: "Versions" } }))
            .body.id;
        const unit = (await api("POST", "/v1/core/units", {
          token: alice,
          json: { journey, title: "v1" },
        })).body.id;
        const path = `/v1/core/units/${unit}`;
        for (let i = 0; i < 2; i++) await api("GET", path, { token: alice }); // now kept in memory
        // Changed where the core replica has not heard of it yet (as through another replica,
        // before its notification arrives): no trigger fires, so no notification goes out.
        const db = postgres(stack.databaseUrl, { max: 1, onnotice: () => {} });
        try {
          await db.begin(async (tx) => {
            await tx`set local session_replication_role = replica`;
            await tx`update core.units set title = 'v2' where id = ${idKind("unit").toUuid(unit)!}`;
          });
        } finally {
          await db.end();
        }
        const current = await api("GET", path, {
          token: alice,
          headers: { "cache-control": "no-cache" },
        });
        assert.equal(current.body.title, "v2");
        // A list of tags is evaluated by the gateway against the version it reads: the current one.
        const put = await api("PUT", path, {
          token: alice,
          json: { journey, title: "v3" },
          headers: { "if-match": `"stale", ${current.headers.get("etag")}` },
        });
        assert.equal(put.status, 200, put.text);
        assert.equal(put.body.title, "v3");
      },
    );

    await t.step("lengths hold at n and n+1", async () => {
      const journey =
        (await api("POST", "/v1/core/journeys", { token: alice, json: { name: "limits" } })).body
          .id;
      const perms = (n: number) => Array.from({ length: n }, (_, i) => `r${i}.read`);
      for (
        const [path, at, field, n] of [
          [
            "/v1/core/roles",
            (k: number) => ({ name: "n".repeat(k), resource_type: "t" }),
            "name",
            200,
          ],
          [
            "/v1/core/roles",
            (k: number) => ({ name: `d${k}`, resource_type: "t", description: "d".repeat(k) }),
            "description",
            10_000,
          ],
          [
            "/v1/core/roles",
            (k: number) => ({ name: `r${k}`, resource_type: "t".repeat(k) }),
            "resource_type",
            255,
          ],
          [
            "/v1/core/roles",
            (k: number) => ({ name: `p${k}`, resource_type: "t", permissions: perms(k) }),
            "permissions",
            100,
          ],
          [
            "/v1/core/roles",
            (k: number) => ({
              name: `q${k}`,
              resource_type: "t",
              permissions: ["a." + "b".repeat(k - 2)],
            }),
            "permissions[0]",
            255,
          ],
          ["/v1/core/journeys", (k: number) => ({ name: "n".repeat(k) }), "name", 200],
          ["/v1/core/journeys", (k: number) => ({ name: "j", owner: "o".repeat(k) }), "owner", 255],
          [
            "/v1/core/journeys",
            (k: number) => ({ name: "j", description: "d".repeat(k) }),
            "description",
            10_000,
          ],
          ["/v1/core/units", (k: number) => ({ journey, title: "t".repeat(k) }), "title", 200],
          [
            "/v1/core/units",
            (k: number) => ({ journey, title: "t", assignee: "a".repeat(k) }),
            "assignee",
            255,
          ],
          [
            "/v1/core/units",
            (k: number) => ({ journey, title: "t", description: "d".repeat(k) }),
            "description",
            10_000,
          ],
        ] as const
      ) {
        const ok = await api("POST", path, { token: alice, json: at(n) });
        assert.equal(ok.status, 201, `${field} at ${n}: ${ok.text.slice(0, 300)}`);
        const bad = await api("POST", path, { token: alice, json: at(n + 1) });
        assertError(bad, 400, "invalid_argument", field);
      }
      assertError(
        await api("POST", "/v1/core/journeys", { token: alice, json: { name: "" } }),
        400,
        "invalid_argument",
        "name",
      );
      assertError(
        await api("POST", "/v1/core/journeys", { token: alice, json: { name: "j", owner: "" } }),
        400,
        "invalid_argument",
        "owner",
      );
      for (const q of ["limit=0", "limit=101"]) {
        assertError(
          await api("GET", `/v1/core/roles?${q}`, { token: alice }),
          400,
          "invalid_argument",
          "limit",
        );
      }
      assert.equal((await api("GET", "/v1/core/roles?limit=100", { token: alice })).status, 200);
    });

    await t.step(
      "a page ends before 1 MiB of UTF-8, and the largest page of units is answered",
      async () => {
        /** A journey of 100 units of the longest title and description, made of `char`. */
        const fill = async (char: string) => {
          const journey = (await api("POST", "/v1/core/journeys", {
            token: alice,
            json: { name: `pages ${char}` },
          })).body.id;
          const json = { journey, title: char.repeat(200), description: char.repeat(10_000) };
          const made: string[] = [];
          for (let i = 0; i < 100; i++) {
            const res = await api("POST", "/v1/core/units", { token: alice, json });
            assert.equal(res.status, 201, res.text.slice(0, 300));
            made.push(res.body.id);
          }
          return { journey, made };
        };
        const utf8 = (text: string) => new TextEncoder().encode(text).length;
        // CJK: 3 bytes a character, 30,600 bytes of text a unit; 1 MiB holds 34 of them. Counted
        // in characters, a page of 100 was 3 MiB: 15 MiB of the gateway's budget, more than a
        // caller's share (12 MiB), and so 503 for good.
        const cjk = await fill("中");
        const listed: string[] = [];
        let after = "";
        for (;;) {
          const page = await api(
            "GET",
            `/v1/core/units?journey=${cjk.journey}&limit=100${after && `&after=${after}`}`,
            { token: alice },
          );
          assert.equal(page.status, 200, page.text.slice(0, 300));
          const n = page.body.data.length;
          listed.push(...ids(page));
          if (!page.body.has_more) break;
          assert.equal(n, 34, "units of CJK in a page");
          assert.ok(utf8(page.text) < 1024 * 1024 + 40 * 1024, `${utf8(page.text)} bytes`);
          after = listed.at(-1)!;
        }
        assert.deepEqual(listed, cjk.made);
        // The page with the most the gateway writes: 100 units of 10,200 `"`, each escaped in
        // JSON (2 bytes), ~1 MB of text counted and ~2 MB of JSON.
        const quotes = await fill('"');
        const page = await api("GET", `/v1/core/units?journey=${quotes.journey}&limit=100`, {
          token: alice,
        });
        assert.equal(page.status, 200, page.text.slice(0, 300));
        assert.deepEqual(ids(page), quotes.made);
        assert.equal(page.body.has_more, false);
        assert.ok(utf8(page.text) > 2_000_000, `${utf8(page.text)} bytes`);
        assert.equal(page.body.data[99].description, '"'.repeat(10_000));
      },
    );
  } finally {
    await stack.stop();
  }
});
