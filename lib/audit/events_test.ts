/**
 * How much work numbering and the event lists do, counted in rows by Postgres's own plans
 * (`auto_explain` on the one connection of a pool, its plans read as notices), not timed: on a
 * table whose statistics say nothing is pending, numbering stays linear in the events it numbers,
 * and each filter of a list reads about what it returns, not the project's events.
 *
 * @module
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import { migrate, readMigrations, type Sql } from "../db/mod.ts";
import { createTestDatabase } from "../testing/mod.ts";
import { ListEventsRequestSchema } from "../../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { maxPageBytes, pageOf } from "../resource/mod.ts";
import { create } from "@bufbuild/protobuf";
import { TimestampSchema } from "@bufbuild/protobuf/wkt";
import { OAuthRegistryService } from "../../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import {
  auditContextFrom,
  diffRows,
  type EventRow,
  eventRowSize,
  listEvents,
  numberEvents,
  provenanceOf,
  readCursor,
  readEventQuery,
} from "./events.ts";

/** A plan node of `explain (format json)`, as far as these tests read it. */
interface PlanNode {
  "Node Type": string;
  "Rows Removed by Filter"?: number;
  "Rows Removed by Join Filter"?: number;
  "Actual Rows"?: number;
  "Actual Loops"?: number;
  Plans?: PlanNode[];
}

/** Rows a plan read and threw away (filters and join filters), over all its nodes and loops. */
function discarded(node: PlanNode): number {
  const own = (node["Rows Removed by Filter"] ?? 0) + (node["Rows Removed by Join Filter"] ?? 0);
  return own * (node["Actual Loops"] ?? 1) +
    (node.Plans ?? []).reduce((sum, child) => sum + discarded(child), 0);
}

/**
 * A pool of one connection whose statements' plans, with their actual rows, are collected
 * (`plans()` returns and forgets them).
 */
async function explained(url: string) {
  const collected: PlanNode[] = [];
  const sql = postgres(url, {
    max: 1,
    onnotice: (notice: { message?: string }) => {
      const text = notice.message ?? "";
      const at = text.indexOf("{");
      if (text.startsWith("duration:") && at >= 0) collected.push(JSON.parse(text.slice(at)).Plan);
    },
  }) as unknown as Sql;
  await sql`load 'auto_explain'`;
  const settings: [string, string][] = [
    ["auto_explain.log_min_duration", "0"],
    ["auto_explain.log_analyze", "on"],
    ["auto_explain.log_format", "json"],
    ["auto_explain.log_level", "notice"],
  ];
  for (const [name, value] of settings) await sql`select set_config(${name}, ${value}, false)`;
  collected.length = 0;
  return { sql, plans: () => collected.splice(0) };
}

/**
 * Inserts `n` events, the i-th of the project `parents(i)`, numbered after `from` when given
 * (pending otherwise), about 500 clients' resources, 40 actors and 8 methods.
 */
async function insertEvents(
  sql: Sql,
  n: number,
  parents: (i: number) => string,
  from?: number,
) {
  await sql`
    insert into oauth.events (parent, seq, occurred_at, method, resource, actor_sub, request_id,
      source_ip, user_agent, peer, changes, result)
    select p.parent,
      case when ${from ?? null}::bigint is null then null else ${from ?? 0}::bigint + g + 1 end,
      now(), 'm' || (g % 8), 'projects/' || p.parent || '/clients/c' || (g % 500), 'user' || (g % 40),
      '', '', '', '', '{}', 'ok'
    from generate_series(0, ${n - 1}) g,
      lateral (select (${
    Array.from({ length: n }, (_, i) => parents(i))
  }::text[])[g + 1] as parent) p`;
}

/**
 * Runs `body` on a new database with the oauth schema and `numbered` events of project `parent`
 * (its statistics taken then), over a pool whose plans are collected ({@link explained}).
 */
async function withEvents(
  parent: string,
  numbered: number,
  body: (sql: Sql, plans: () => PlanNode[]) => Promise<void>,
) {
  const db = await createTestDatabase();
  const { sql, plans } = await explained(db.url);
  try {
    const dir = new URL("../../services/oauth/migrations/", import.meta.url);
    await migrate(sql, "oauth", await readMigrations(dir));
    await insertEvents(sql, numbered, () => parent, 0);
    await sql`insert into oauth.event_heads values (${parent}, ${numbered})`;
    await sql`analyze oauth.events`;
    plans();
    await body(sql, plans);
  } finally {
    await sql.end();
    await db.drop();
  }
}

Deno.test("numbering stays linear when the statistics say that nothing is pending", async () => {
  await withEvents("old", 5000, async (sql, plans) => {
    // 1,000 pending events over 100 projects, among them the one numbered up to 5,000.
    await insertEvents(sql, 1000, (i) => i % 100 === 0 ? "old" : `p${i % 100}`);
    plans();

    assert.equal(await numberEvents(sql, "oauth"), 1000);
    const work = plans().reduce((sum, plan) => sum + discarded(plan), 0);
    // A nested loop of the pending rows over themselves threw away about a million.
    assert.ok(work < 20_000, `numbering 1,000 events threw away ${work} rows`);

    const runs = await sql<{ parent: string; n: number; first: string; last: string }[]>`
      select parent, count(*)::int as n, min(seq)::text as first, max(seq)::text as last
      from oauth.events where seq is not null group by parent order by parent`;
    assert.equal(runs.length, 100);
    for (const run of runs) {
      assert.equal(run.first, "1", run.parent);
      assert.equal(Number(run.last), run.n, `${run.parent}: no gaps`);
    }
    const [head] = await sql<{ seq: string }[]>`
      select seq::text from oauth.event_heads where parent = 'old'`;
    assert.equal(head?.seq, "5010");
  });
});

Deno.test("each filter of an event list reads about what it returns", async () => {
  await withEvents("big", 20_000, async (sql, plans) => {
    const page = { limit: 50, before: undefined };
    const cases = [
      { filter: { resource: "projects/big/clients/none" }, found: 0 },
      { filter: { resource: "projects/big/clients/c7" }, found: 40 },
      { filter: { resource: "projects/big" }, found: 51 },
      { filter: { actor: "nobody" }, found: 0 },
      { filter: { actor: "user3" }, found: 51 },
      { filter: { method: "none" }, found: 0 },
      { filter: { method: "m5" }, found: 51 },
    ];
    for (const { filter, found } of cases) {
      plans();
      const rows = await listEvents(sql, "oauth", "big", { ...page, ...filter });
      assert.equal(rows.length, found, JSON.stringify(filter));
      const list = plans().at(-1)!;
      // Unindexed, a filter that matched none read all 20,000.
      assert.ok(discarded(list) < 500, `${JSON.stringify(filter)} threw away ${discarded(list)}`);
    }
  });
});

Deno.test("a bad event cursor is refused in words, not with the pattern that checks it", () => {
  for (const after of ["abc", "-1", "01", "1.0"]) {
    assert.throws(
      () => readCursor(after, ListEventsRequestSchema),
      (e: Error) =>
        e.message.includes("Invalid after: must be an event id (its decimal number)") &&
        !e.message.includes("Expected"),
      after,
    );
  }
  assert.equal(readCursor("", ListEventsRequestSchema), undefined);
  assert.equal(readCursor("42", ListEventsRequestSchema), 42n);
});

Deno.test("a since or until outside years 0001..9999, or with bad nanos, is INVALID_ARGUMENT", () => {
  const query = (since: { seconds: bigint; nanos: number }) =>
    readEventQuery(
      { after: "", resource: "", method: "", actor: "", since: create(TimestampSchema, since) },
      ListEventsRequestSchema,
    );
  for (
    const since of [
      { seconds: 253402300800n, nanos: 0 },
      { seconds: -62135596801n, nanos: 0 },
      { seconds: 1_000_000_000_000_000n, nanos: 0 },
      { seconds: 0n, nanos: 1_500_000_000 },
      { seconds: 0n, nanos: -5 },
    ]
  ) {
    assert.throws(
      () => query(since),
      (e: Error) =>
        e.message.includes("since") && e.message.includes("between years 0001 and 9999"),
      String(since.seconds),
    );
  }
  assert.deepEqual(query({ seconds: 0n, nanos: 0 }).since, new Date(0));
  // A range that ends before it starts is refused; one that ends where it starts is empty.
  const range = (since: bigint, until: bigint) =>
    readEventQuery({
      after: "",
      resource: "",
      method: "",
      actor: "",
      since: create(TimestampSchema, { seconds: since }),
      until: create(TimestampSchema, { seconds: until }),
    }, ListEventsRequestSchema);
  assert.throws(() => range(10n, 9n), /until: must not be before since/);
  assert.deepEqual(range(10n, 10n).until, new Date(10_000));
});

Deno.test("an event page ends before the 1 MiB cap, its changes (JSON) counted in UTF-8", () => {
  // A PATCH of 100 redirect URIs of about 2,000 characters: ~400 KB of changes an event.
  const uris = (c: string) =>
    Array.from({ length: 100 }, (_, i) => `https://${c}.example/${i}`.padEnd(2000, c));
  const row = (seq: number): EventRow => ({
    parent: "p",
    seq: String(seq),
    occurred_at: new Date(0),
    method: "/registry.oauth.v1.OAuthRegistryService/UpdateClient",
    resource: "projects/p/clients/c",
    actor_sub: "admin",
    actor_client_id: null,
    actor_installation_id: null,
    request_id: "r",
    source_ip: "127.0.0.1",
    user_agent: "",
    peer: "127.0.0.1",
    changes: [{ field: "redirect_uris", old: uris("a"), new: uris("é") }],
    result: "ok",
  });
  const rows = Array.from({ length: 21 }, (_, i) => row(i));
  assert.ok(eventRowSize(rows[0]!) > 550_000);
  const page = pageOf(rows, 20, (r) => r.seq, eventRowSize);
  assert.deepEqual(page.data, ["0"]);
  assert.equal(page.hasMore, true);
  assert.ok(eventRowSize(rows[0]!) + eventRowSize(rows[1]!) > maxPageBytes);
  // Without its size, the strings alone (a few hundred bytes) would let all 20 through.
  assert.equal(pageOf(rows, 20, (r) => r.seq).data.length, 20);
});

Deno.test("provenanceOf() passes on the request id, address and user agent a call came with", () => {
  // Through the gateway: what it forwarded.
  assert.deepEqual(
    provenanceOf(
      new Headers({
        "x-request-id": "r1",
        "x-forwarded-for": "203.0.113.7",
        "x-forwarded-user-agent": "Mozilla/5.0",
        "x-peer-address": "10.0.0.2",
        "user-agent": "connect-es",
        authorization: "Bearer t",
      }),
    ),
    {
      "x-request-id": "r1",
      "x-forwarded-for": "203.0.113.7",
      "x-forwarded-user-agent": "Mozilla/5.0",
    },
  );
  // Called directly: its caller's own peer and user agent.
  assert.deepEqual(
    provenanceOf(new Headers({ "x-peer-address": "10.0.0.9", "user-agent": "grpc-node-js/1.14" })),
    { "x-forwarded-for": "10.0.0.9", "x-forwarded-user-agent": "grpc-node-js/1.14" },
  );
});

Deno.test("a request id is kept only when it is a safe token, as the gateway keeps one", () => {
  // A direct caller sends what it likes; the gateway passes on only ids of its form (and makes one
  // otherwise), so an event or a log line never carries a request id the gateway would not have.
  const call = (id: string) => ({
    header: new Headers({ "x-request-id": id, "x-peer-address": "10.0.0.9" }),
    method: OAuthRegistryService.method.getClient,
  });
  const actor = { sub: "s", clientId: null };
  assert.equal(auditContextFrom(call("req-1.a:b_c"), actor, 0).requestId, "req-1.a:b_c");
  for (const id of ["a b", "<script>", "é", "x".repeat(129), "a,b"]) {
    assert.equal(auditContextFrom(call(id), actor, 0).requestId, "", id);
    assert.equal(provenanceOf(call(id).header)["x-request-id"], undefined, id);
  }
});

Deno.test("diffRows(): a creation lists the fields it set, a deletion those it took, no null", () => {
  const row = { name: "a", logo_uri: null, scopes: [] };
  assert.deepEqual(diffRows(null, row), [{ field: "name", new: "a" }, {
    field: "scopes",
    new: [],
  }]);
  assert.deepEqual(diffRows(row, null), [{ field: "name", old: "a" }, {
    field: "scopes",
    old: [],
  }]);
  assert.deepEqual(diffRows(row, { ...row, logo_uri: "https://x.example/l.png" }), [
    { field: "logo_uri", old: null, new: "https://x.example/l.png" },
  ]);
});
