/**
 * The audit trail, the change feed and etags over the wire, against the real processes (real gRPC
 * over HTTP/2, the real gateway, real Postgres); services/oauth/events_test.ts tests the same in
 * process. The README's "Audit trail, change feed and etags":
 *
 * - `WatchEvents` followed by stock clients, @grpc/grpc-js (lib/testing/grpc_client.ts) and C-core
 *   (Debian's python3-grpcio, tests/grpcio_stream.py), while other callers change clients through
 *   the gateway: every event once, in commit order, and a second connection resuming from a
 *   cursor in the middle gets exactly the rest;
 * - a watcher that stops reading (a raw HTTP/2 client that announces a 4 KiB stream window and
 *   never gives it back) on a project of 5,000 large events is held back by flow control, not
 *   buffered: the service's memory stays bounded, other calls (on that connection too) are served,
 *   and the stream is reset (CANCEL) by the transport's window timeout. That timeout
 *   (`windowTimeoutMs` of lib/transport/h2_server.ts, 30 s) is no setting a stack can lower, so
 *   the watcher is opened first and the steps after it run while it waits;
 * - SIGKILL of the oauth-registry under concurrent creates, updates and deletes leaves no change
 *   without its event and no event without its change, numbered 1..N without gaps;
 * - etags through `/v1`: `ETag`, `If-None-Match` (304 on a GET, 412 on a write), `If-Match` (412,
 *   one winner of two, also with lists of tags), the 400s, HEAD, on a client and on a core role;
 *   and the events of those changes in the list endpoints.
 *
 * @module
 */

import { diffRows, type EventRow, numberEvents } from "../lib/audit/mod.ts";
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { create, fromBinary, type MessageShape, toBinary, toJson } from "@bufbuild/protobuf";
import {
  HealthCheckRequestSchema,
  HealthCheckResponse_ServingStatus,
  HealthCheckResponseSchema,
} from "../gen/grpc/health/v1/health_pb.ts";
import { EventSchema } from "../gen/registry/audit/v1/event_pb.ts";
import { CoreService } from "../gen/registry/core/v1/core_service_pb.ts";
import { ClientType } from "../gen/registry/oauth/v1/client_pb.ts";
import {
  OAuthRegistryService,
  WatchEventsRequestSchema,
  WatchEventsResponseSchema,
} from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import {
  grpcChannel,
  grpcMessage,
  grpcMessages,
  grpcRequestHeaders,
  grpcTestClient,
  httpClient,
  type HttpResult,
  openDatabase,
  rawH2Connect,
  type RawH2Connection,
  type RawH2Stream,
  startStack,
  until,
  waitReady,
  watchRss,
  within,
} from "../lib/testing/mod.ts";
import { ErrorCode, type HeaderField } from "../lib/transport/mod.ts";
import { ensurePackages, packages } from "../tools/debian.ts";

const service = OAuthRegistryService.typeName;
const rpc = OAuthRegistryService.method;
const watchPath = `/${service}/WatchEvents`;
/** gRPC status codes the tests read. */
const CANCELLED = 1;
const DEADLINE_EXCEEDED = 4;
const RESOURCE_EXHAUSTED = 8;

type Event = MessageShape<typeof EventSchema>;
type Api = ReturnType<typeof httpClient>;

/** How many watchers a process admits in this file's stack (AUDIT_MAX_WATCHERS). */
const maxWatchers = 8;
/** The slow watcher: its stream window (never given back), the events it is offered. */
const stallWindow = 4096;
const seededEvents = 5000;
const seededEventBytes = 16_000;
/**
 * How much the oauth-registry's resident memory may grow while the slow watcher is stalled (and
 * the other steps run). It holds one batch of 500 events (~8 MB of text here; +17 to +23 MiB
 * seen); holding the 5,000 (~80 MB of text, parsed and encoded again) takes ~240 MiB.
 */
const rssGrowthLimitMiB = 64;

/** What a watcher read: the events, and how its call ended (gRPC status). */
interface FeedRead {
  events: Event[];
  code: number;
  details: string;
}

/**
 * Reads the change feed of `project` after the cursor `after` on a new connection: `count`
 * events, after which the client cancels (CANCELLED), or, without a count, all that comes until
 * the deadline (DEADLINE_EXCEEDED).
 */
type Watch = (
  project: string,
  after: string,
  count: number | undefined,
  timeoutMs: number,
) => Promise<FeedRead>;

function watchRequest(project: string, after: string): Uint8Array {
  return toBinary(
    WatchEventsRequestSchema,
    create(WatchEventsRequestSchema, { projectId: project, after }),
  );
}

function eventsOf(responses: Uint8Array[]): Event[] {
  return responses.map((b) => fromBinary(WatchEventsResponseSchema, b).event!);
}

const json = (e: Event) => toJson(EventSchema, e);

/** WatchEvents through stock @grpc/grpc-js on Node.js: a channel (a connection) per watcher. */
function grpcJsWatch(address: string, token: string): Watch {
  return async (project, after, count, timeoutMs) => {
    const channel = grpcChannel(address);
    try {
      const out = await channel.call({
        kind: "server_streaming",
        path: watchPath,
        requests: [watchRequest(project, after)],
        metadata: { authorization: `Bearer ${token}` },
        timeoutMs,
        ...(count === undefined ? {} : { cancelAfter: count }),
      });
      return { events: eventsOf(out.responses), code: out.code, details: out.details };
    } finally {
      channel.close();
    }
  };
}

const streamScript = new URL("./grpcio_stream.py", import.meta.url).pathname;

/** WatchEvents through the C-core client (tests/grpcio_stream.py): a channel per watcher. */
function cCoreWatch(address: string, token: string): Watch {
  return async (project, after, count, timeoutMs) => {
    const child = new Deno.Command("/usr/bin/python3", {
      args: [streamScript],
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const writer = child.stdin.getWriter();
    await writer.write(new TextEncoder().encode(JSON.stringify({
      address,
      path: watchPath,
      request: Buffer.from(watchRequest(project, after)).toString("base64"),
      metadata: { authorization: [`Bearer ${token}`] },
      timeoutMs,
      ...(count === undefined ? {} : { count }),
    })));
    await writer.close();
    const out = await child.output();
    const text = (b: Uint8Array) => new TextDecoder().decode(b);
    if (!out.success) throw new Error(`grpcio_stream.py failed: ${text(out.stderr)}`);
    const answer = JSON.parse(text(out.stdout)) as {
      responses: string[];
      code: number;
      details: string;
    };
    return {
      events: eventsOf(answer.responses.map((r) => new Uint8Array(Buffer.from(r, "base64")))),
      code: answer.code,
      details: answer.details,
    };
  };
}

/** A change a caller was told succeeded: the RPC's short name and the resource. */
interface Change {
  method: string;
  resource: string;
}

/** The key of an event (or change) by RPC and resource: unique per client's create/update/delete. */
const keyOf = (method: string, resource: string) => `${method} ${resource}`;

const writers = 4;
const rounds = 4;
/** The events {@link writeClients} makes: per round a create and a rename, every other a delete. */
const written = writers * (2 * rounds + Math.floor(rounds / 2));

/**
 * {@link writers} callers change clients of `project` through the gateway at once, each making
 * {@link rounds} rounds one after another (create, rename, and every other round delete). Returns
 * each caller's changes in the order it made them.
 */
async function writeClients(api: Api, token: string, project: string): Promise<Change[][]> {
  return await Promise.all(Array.from({ length: writers }, async (_, w) => {
    const done: Change[] = [];
    for (let r = 0; r < rounds; r++) {
      const created = await api("POST", `/v1/projects/${project}/clients`, {
        token,
        json: { name: `w${w} r${r}`, type: "web", redirect_uris: ["https://app.example/cb"] },
      });
      assert.equal(created.status, 201, created.text);
      const path = `/v1/projects/${project}/clients/${created.body.id}`;
      const resource = `projects/${project}/clients/${created.body.id}`;
      done.push({ method: "CreateClient", resource });
      const renamed = await api("PATCH", path, { token, json: { name: `w${w} r${r} renamed` } });
      assert.equal(renamed.status, 200, renamed.text);
      done.push({ method: "UpdateClient", resource });
      if (r % 2 === 1) {
        const deleted = await api("DELETE", path, { token });
        assert.equal(deleted.status, 204, deleted.text);
        done.push({ method: "DeleteClient", resource });
      }
    }
    return done;
  }));
}

/** The id of the project's last event ("0" for none), from the table, once what committed is numbered. */
async function lastEventId(sql: ReturnType<typeof openDatabase>, project: string): Promise<string> {
  await numberEvents(sql, "oauth");
  const [row] = await sql<{ seq: string }[]>`
    select coalesce(max(seq), 0)::text as seq from oauth.events where parent = ${project}`;
  return row!.seq;
}

/**
 * Follows the feed of `project` with `watch` from its last event while {@link writeClients} runs
 * through the gateway; then resumes with `resume` (a new connection) from the middle. Returns
 * the cursor it started from and the events it read.
 */
async function followWhileWriting(
  api: Api,
  token: string,
  sql: ReturnType<typeof openDatabase>,
  project: string,
  watch: Watch,
  resume: Watch,
): Promise<{ cursor: string; events: Event[] }> {
  const cursor = await lastEventId(sql, project);
  assert.notEqual(cursor, "0", "the project has events before the cursor");
  const following = watch(project, cursor, written, 60_000);
  const changes = await writeClients(api, token, project);
  const read = await following;
  assert.equal(read.code, CANCELLED, `the watch ended early: ${read.code} ${read.details}`);
  const ids = read.events.map((e) => e.id);
  assert.deepEqual(
    ids,
    Array.from({ length: written }, (_, i) => String(Number(cursor) + 1 + i)),
    "every event after the cursor, once, in order",
  );
  // The events are the table's, in its order.
  const rows = await sql<{ id: string; method: string; resource: string }[]>`
    select e.seq::text as id, method, resource from oauth.events e
    where parent = ${project} and e.seq > ${cursor}::bigint order by e.seq`;
  assert.deepEqual(
    read.events.map((e) => ({ id: e.id, method: e.method, resource: e.resource })),
    rows.map((r) => ({ id: r.id, method: r.method, resource: r.resource })),
  );
  // Exactly the changes the gateway acknowledged, each caller's in the order it made them.
  const position = new Map(read.events.map((e, i) => [keyOf(e.method, e.resource), i]));
  assert.equal(position.size, written, "no change has two events");
  for (const mine of changes) {
    const at = mine.map((c) => position.get(keyOf(`${service}/${c.method}`, c.resource)));
    assert.ok(at.every((i) => i !== undefined), `an acknowledged change has no event: ${at}`);
    assert.deepEqual(at, [...at].sort((a, b) => a! - b!), "a caller's changes in its order");
  }
  for (const e of read.events) {
    assert.equal(e.actor?.sub, "auditor");
    assert.equal(e.result, "ok");
  }
  // A second connection from a cursor in the middle gets exactly the rest...
  const middle = Math.floor(written / 2);
  const rest = await resume(project, ids[middle - 1]!, written - middle, 30_000);
  assert.equal(rest.code, CANCELLED, `the resumed watch ended early: ${rest.details}`);
  assert.deepEqual(rest.events.map(json), read.events.slice(middle).map(json));
  // ...and after the last event, nothing until its deadline.
  const tail = await resume(project, ids.at(-1)!, undefined, 1500);
  assert.equal(tail.code, DEADLINE_EXCEEDED, tail.details);
  assert.deepEqual(tail.events.map((e) => e.id), []);
  return { cursor, events: read.events };
}

function header(fields: HeaderField[], name: string): string | undefined {
  return fields.find(([n]) => n === name)?.[1];
}

/** A health check on the raw connection: answered SERVING, whatever its other streams wait for. */
async function healthCheck(conn: RawH2Connection): Promise<void> {
  const stream = conn.request(
    grpcRequestHeaders("/grpc.health.v1.Health/Check"),
    grpcMessage(toBinary(HealthCheckRequestSchema, create(HealthCheckRequestSchema, {}))),
  );
  const end = await within(stream.ended, 10_000, "health check answer");
  assert.equal(header(end.trailers ?? [], "grpc-status"), "0", JSON.stringify(end));
  const [message] = grpcMessages(stream.data).messages;
  assert.equal(
    fromBinary(HealthCheckResponseSchema, message!).status,
    HealthCheckResponse_ServingStatus.SERVING,
  );
}

function assertError(res: HttpResult, status: number, code: string): void {
  assert.equal(res.status, status, res.text);
  assert.equal(res.headers.get("content-type"), "application/json");
  assert.deepEqual(Object.keys(res.body.error), ["code", "message", "details"]);
  assert.equal(res.body.error.code, code, res.text);
}

/** The events of the list endpoint at `path`, every page, newest first, as the gateway wrote. */
// deno-lint-ignore no-explicit-any
async function listEvents(api: Api, token: string, path: string): Promise<any[]> {
  // deno-lint-ignore no-explicit-any
  const all: any[] = [];
  for (let after = "";;) {
    const sep = path.includes("?") ? "&" : "?";
    const res = await api("GET", `${path}${sep}limit=100${after ? `&after=${after}` : ""}`, {
      token,
    });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(Object.keys(res.body).sort(), ["data", "has_more"]);
    all.push(...res.body.data);
    if (!res.body.has_more) return all;
    after = res.body.data.at(-1).id;
  }
}

Deno.test("audit trail, change feed and etags, end to end over the wire", async (t) => {
  await ensurePackages([packages.grpcio]);
  const stack = await startStack({ env: { AUDIT_MAX_WATCHERS: String(maxWatchers) } });
  const sql = openDatabase(stack);
  const api = httpClient(stack.gatewayUrl);
  const projects = ["feed-js", "feed-c", "slow", "crash", "etag", "trail"];
  const token = await stack.token({ sub: "auditor", projects });
  const auth = { authorization: `Bearer ${token}` };
  const cleanups: (() => void | Promise<void>)[] = [];
  try {
    // Every project's config first (clients need it): event 1 of each.
    for (const p of projects) {
      const res = await api("PATCH", `/v1/projects/${p}/config`, {
        token,
        json: { application_name: `Audit ${p}` },
      });
      assert.equal(res.status, 200, res.text);
    }

    // The slow watcher, opened first; its reset is awaited after the steps below (see above).
    let stall:
      | {
        conn: RawH2Connection;
        stream: RawH2Stream;
        baselineMiB: number;
        rss: ReturnType<typeof watchRss>;
        served: { ok: number; failures: string[] };
        stopServing: () => Promise<void>;
      }
      | undefined;

    await t.step(
      "a watcher that stops reading is held back by flow control; others are served meanwhile",
      async () => {
        // 5,000 large events, written straight into the table (and numbered below).
        await sql`
          insert into oauth.events (parent, occurred_at, method, resource, actor_sub,
            request_id, source_ip, user_agent, peer, changes, result)
          select 'slow', now(), ${`${service}/UpdateClient`},
            'projects/slow/clients/cli_seeded', 'seeder', 'seed-' || g, '', '', '',
            jsonb_build_array(jsonb_build_object('field', 'description', 'old', '',
              'new', repeat(md5(g::text), ${seededEventBytes / 32}))),
            'ok'
          from generate_series(1, ${seededEvents}) g`;
        const lastSeeded = String(1 + seededEvents);
        assert.equal(await lastEventId(sql, "slow"), lastSeeded);

        const pid = stack.procs.oauth.child.pid;
        const baselineMiB = watchRss({ oauth: pid }).stop().oauth!.sampledMiB;
        const rss = watchRss({ oauth: pid }, 100);
        const conn = await rawH2Connect(stack.oauthGrpc, stallWindow);
        cleanups.push(async () => {
          conn.close();
          await conn.closed;
        });
        const stream = conn.request(
          grpcRequestHeaders(watchPath, auth),
          grpcMessage(watchRequest("slow", "0")),
        );
        // The answer starts, and the service sends what the window allows, then nothing more.
        const headers = await within(stream.headers, 10_000, "WatchEvents response headers");
        assert.equal(header(headers, ":status"), "200", JSON.stringify(headers));
        await until(() => stream.dataBytes >= stallWindow, 10_000, "the window's bytes");
        const { messages } = grpcMessages(stream.data);
        const first = eventsOf(messages);
        assert.equal(first[0]?.id, "1", "the feed starts at the project's first event");
        assert.equal(first[0]?.method, `${service}/UpdateOAuthConfig`);

        // Other calls are served meanwhile, checked every 200 ms until the reset: the same
        // project's config over gRPC (another connection) and through the gateway.
        const grpc = grpcTestClient(stack.oauthGrpc);
        const served = { ok: 0, failures: [] as string[] };
        let serving = true;
        const loop = (async () => {
          while (serving) {
            try {
              const got = await grpc.call(rpc.getOAuthConfig, { projectId: "slow" }, auth);
              assert.equal(got.config?.applicationName, "Audit slow");
              const res = await api("GET", "/v1/projects/slow/config", { token });
              assert.equal(res.status, 200, res.text);
              served.ok++;
            } catch (error) {
              served.failures.push(String(error));
            }
            await new Promise((r) => setTimeout(r, 200));
          }
        })();
        const stopServing = async () => {
          serving = false;
          await loop;
          grpc.close();
        };
        cleanups.push(stopServing);
        stall = { conn, stream, baselineMiB, rss, served, stopServing };

        // The stalled stream's connection serves another call...
        await healthCheck(conn);
        // ...and another watcher of the same project gets a new change as it commits.
        const live = grpcJsWatch(stack.oauthGrpc, token)("slow", lastSeeded, 1, 30_000);
        const patched = await api("PATCH", "/v1/projects/slow/config", {
          token,
          json: { support_email: "slow@example.com" },
        });
        assert.equal(patched.status, 200, patched.text);
        const got = await live;
        assert.equal(got.code, CANCELLED, got.details);
        assert.deepEqual(
          got.events.map((e) => [e.id, e.method]),
          [[String(2 + seededEvents), `${service}/UpdateOAuthConfig`]],
        );
        assert.equal(stream.dataBytes, stallWindow, "nothing past the window");
      },
    );

    let jsFeed: { cursor: string; events: Event[] } | undefined;
    await t.step(
      "grpc-js follows WatchEvents from a cursor while clients change through the gateway",
      async () => {
        const watch = grpcJsWatch(stack.oauthGrpc, token);
        jsFeed = await followWhileWriting(api, token, sql, "feed-js", watch, watch);
      },
    );

    await t.step("C-core (python3-grpcio) reads the same feed, and follows one live", async () => {
      const watch = cCoreWatch(stack.oauthGrpc, token);
      assert.ok(jsFeed, "the grpc-js step ran");
      const again = await watch("feed-js", jsFeed.cursor, jsFeed.events.length, 30_000);
      assert.equal(again.code, CANCELLED, again.details);
      assert.deepEqual(again.events.map(json), jsFeed.events.map(json), "the same events");
      await followWhileWriting(api, token, sql, "feed-c", watch, watch);
    });

    await t.step("etags through /v1: ETag, If-None-Match, If-Match; and the events", async () => {
      // A client of the oauth-registry.
      const created = await api("POST", "/v1/projects/etag/clients", {
        token,
        json: { name: "v1", type: "web", redirect_uris: ["https://app.example/cb"] },
      });
      assert.equal(created.status, 201, created.text);
      assert.equal(created.headers.get("etag"), `"${created.body.etag}"`);
      const id = created.body.id as string;
      const resource = `projects/etag/clients/${id}`;
      const path = `/v1/projects/etag/clients/${id}`;
      const trail = async () =>
        (await sql<{ seq: string }[]>`
          select seq::text as seq from oauth.events where parent = 'etag' and resource = ${resource}
        `).length;
      await checkEtags({
        api,
        token,
        path,
        change: (name) => ({ method: "PATCH", json: { name } }),
        nameOf: (body) => body.name,
        trail,
      });

      // A core role: PUT replaces it.
      const coreToken = await stack.token({ sub: "ann", space: "audit-space" });
      const role = await api("POST", "/v1/core/roles", {
        token: coreToken,
        json: { name: "v1", resource_type: "project", permissions: ["clients.read"] },
      });
      assert.equal(role.status, 201, role.text);
      assert.equal(role.headers.get("etag"), `"${role.body.etag}"`);
      const roleResource = `spaces/audit-space/roles/${role.body.id}`;
      await checkEtags({
        api,
        token: coreToken,
        path: `/v1/core/roles/${role.body.id}`,
        change: (name) => ({
          method: "PUT",
          json: { name, resource_type: "project", permissions: ["clients.read"] },
        }),
        nameOf: (body) => body.name,
        trail: async () =>
          (await sql<{ seq: string }[]>`
            select seq::text as seq from core.events where resource = ${roleResource}`).length,
      });

      // The events of those changes, newest first: only what changed (no 412, 400 or 304).
      const project = await listEvents(api, token, "/v1/projects/etag/events");
      assert.deepEqual(project.map((e) => e.id), ["7", "6", "5", "4", "3", "2", "1"]);
      assert.deepEqual(project.map((e) => [e.method.split("/")[1], e.resource]), [
        ["DeleteClient", resource],
        ["UpdateClient", resource],
        ["UpdateClient", resource],
        ["UpdateClient", resource],
        ["UpdateClient", resource],
        ["CreateClient", resource],
        ["UpdateOAuthConfig", "projects/etag/config"],
      ]);
      for (const e of project) {
        assert.equal(e.actor.sub, "auditor");
        assert.equal(e.result, "ok");
        assert.equal(e.source_ip, "127.0.0.1", "the caller's address, as the gateway saw it");
      }
      const renames = project.filter((e) => e.method.endsWith("/UpdateClient")).map((e) =>
        e.changes.find((c: { field: string }) => c.field === "name")
      );
      assert.equal(renames[3].old, "v1");
      assert.equal(renames[3].new, "v2");
      assert.equal(renames[2].old, "v2");
      assert.match(renames[2].new, /^racer [ab]$/);
      assert.equal(renames[1].old, renames[2].new);
      assert.match(renames[1].new, /^list [ab]$/);
      assert.equal(renames[0].old, renames[1].new);
      assert.equal(renames[0].new, "unlike");
      // Filtered to the client: the same, without the config's event.
      const filtered = await listEvents(
        api,
        token,
        `/v1/projects/etag/events?resource=${encodeURIComponent(resource)}`,
      );
      assert.deepEqual(filtered.map((e) => e.id), ["7", "6", "5", "4", "3", "2"]);

      const space = await listEvents(api, coreToken, "/v1/core/events");
      assert.deepEqual(
        space.map((e) => [e.method, e.resource]),
        ["DeleteRole", "UpdateRole", "UpdateRole", "UpdateRole", "UpdateRole", "CreateRole"].map((
          m,
        ) => [
          `${CoreService.typeName}/${m}`,
          roleResource,
        ]),
      );
      assert.deepEqual(space.map((e) => e.id), ["6", "5", "4", "3", "2", "1"]);
      assert.ok(space.every((e) => e.actor.sub === "ann"));
    });

    const trailSpace = await stack.token({ sub: "tess", space: "trail-space" });
    const oauthTrail = () => listEvents(api, token, "/v1/projects/trail/events");
    const coreTrail = () => listEvents(api, trailSpace, "/v1/core/events");

    await t.step(
      "a write that changes nothing writes nothing: no event, the same etag and updated_at",
      async () => {
        /** `json` at `path` holds what the resource holds: 200 as ever, and nothing written. */
        const unchanged = async (
          tk: string,
          method: "PATCH" | "PUT",
          path: string,
          json: unknown,
          trail: () => Promise<unknown[]>,
        ) => {
          const got = await api("GET", path, { token: tk });
          assert.equal(got.status, 200, got.text);
          const before = (await trail()).length;
          const etag = got.headers.get("etag")!;
          for (const headers of [{ "if-match": etag }, {}]) {
            const res = await api(method, path, { token: tk, json, headers });
            assert.equal(res.status, 200, res.text);
            assert.equal(res.headers.get("etag"), etag, `${method} ${path}: the same etag`);
            assert.deepEqual(res.body, got.body, "the same resource, updated_at included");
          }
          assert.equal((await trail()).length, before, `${method} ${path}: no event`);
          // A stale etag is still refused, though nothing would change.
          const stale = await api(method, path, {
            token: tk,
            json,
            headers: { "if-match": '"0"' },
          });
          assertError(stale, 412, "aborted");
          assert.equal((await trail()).length, before);
        };
        const config = "/v1/projects/trail/config";
        // Through the create-or-update path (application_name given), and the update path.
        await unchanged(token, "PATCH", config, { application_name: "Audit trail" }, oauthTrail);
        await unchanged(token, "PATCH", config, { authorized_domains: [] }, oauthTrail);
        const client = await api("POST", "/v1/projects/trail/clients", {
          token,
          json: { name: "Same", type: "web", redirect_uris: ["https://app.example/cb"] },
        });
        assert.equal(client.status, 201, client.text);
        const clientPath = `/v1/projects/trail/clients/${client.body.id}`;
        await unchanged(token, "PATCH", clientPath, {
          name: "Same",
          redirect_uris: ["https://app.example/cb"],
          status: "active",
        }, oauthTrail);
        // One field changed among unchanged ones: one event, of that field alone.
        const before = (await oauthTrail()).length;
        const renamed = await api("PATCH", clientPath, {
          token,
          json: { name: "Renamed", redirect_uris: ["https://app.example/cb"] },
        });
        assert.equal(renamed.status, 200, renamed.text);
        assert.notEqual(renamed.headers.get("etag"), client.headers.get("etag"));
        const events = await oauthTrail();
        assert.equal(events.length, before + 1);
        assert.deepEqual(events[0].changes, [{ field: "name", old: "Same", new: "Renamed" }]);

        const role = { name: "Same", resource_type: "project", permissions: ["units.read"] };
        const roles = await api("POST", "/v1/core/roles", { token: trailSpace, json: role });
        assert.equal(roles.status, 201, roles.text);
        await unchanged(trailSpace, "PUT", `/v1/core/roles/${roles.body.id}`, role, coreTrail);
        const journey = await api("POST", "/v1/core/journeys", {
          token: trailSpace,
          json: { name: "Same" },
        });
        assert.equal(journey.status, 201, journey.text);
        const journeyPath = `/v1/core/journeys/${journey.body.id}`;
        await unchanged(trailSpace, "PUT", journeyPath, { name: "Same" }, coreTrail);
        const unit = {
          journey: journey.body.id,
          title: "Same",
          due_at: "2026-12-01T10:00:00+02:00",
          priority: "high",
        };
        const units = await api("POST", "/v1/core/units", { token: trailSpace, json: unit });
        assert.equal(units.status, 201, units.text);
        await unchanged(trailSpace, "PUT", `/v1/core/units/${units.body.id}`, unit, coreTrail);
      },
    );

    /**
     * The newest event of `method` (its short name, of `service`) on `resource`, from the list at
     * `path`, read with the token `tk`.
     */
    const eventOf = async (
      tk: string,
      path: string,
      method: string,
      resource: string,
      // deno-lint-ignore no-explicit-any
    ): Promise<any> => {
      const query = `resource=${encodeURIComponent(resource)}&method=${encodeURIComponent(method)}`;
      const [event] = await listEvents(api, tk, `${path}?${query}`);
      assert.ok(event, `${method} ${resource}: its event`);
      return event;
    };

    await t.step(
      "an event names the resource's fields, with values as the API writes them",
      async () => {
        /** The creation's event lists fields of `body` (the create's answer), with its values. */
        // deno-lint-ignore no-explicit-any
        const asCreated = (event: any, body: Record<string, unknown>) => {
          assert.ok(event.changes.length > 0);
          for (const c of event.changes) {
            assert.ok(
              c.field in body,
              `${event.method}: ${c.field} is no field of ${Object.keys(body)}`,
            );
            assert.equal(c.old, null);
            assert.deepEqual(
              c.new,
              body[c.field],
              `${event.method}: ${c.field} as the API writes it`,
            );
          }
        };
        const oauth = (method: string, resource: string) =>
          eventOf(token, "/v1/projects/trail/events", `${service}/${method}`, resource);
        const core = (method: string, resource: string) =>
          eventOf(trailSpace, "/v1/core/events", `${CoreService.typeName}/${method}`, resource);

        const config = await api("GET", "/v1/projects/trail/config", { token });
        asCreated(await oauth("UpdateOAuthConfig", "projects/trail/config"), config.body);
        const client = await api("POST", "/v1/projects/trail/clients", {
          token,
          json: { name: "Fields", type: "web", redirect_uris: ["https://app.example/cb"] },
        });
        const clientName = `projects/trail/clients/${client.body.id}`;
        asCreated(await oauth("CreateClient", clientName), client.body);
        const clientPath = `/v1/projects/trail/clients/${client.body.id}`;
        const secret = await api("POST", `${clientPath}/secrets`, {
          token,
          json: { lifetime_seconds: 3600 },
        });
        assert.equal(secret.status, 201, secret.text);
        assert.match(secret.body.expires_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
        asCreated(
          await oauth("CreateClientSecret", `${clientName}/secrets/${secret.body.id}`),
          secret.body,
        );
        const key = await api("POST", `${clientPath}/keys`, {
          token,
          json: { generate: "EdDSA", expires_at: "2099-01-02T03:04:05+02:00" },
        });
        assert.equal(key.status, 201, key.text);
        asCreated(await oauth("CreateClientKey", `${clientName}/keys/${key.body.id}`), key.body);
        const user = await stack.token({ sub: "una", accountId: "acct-trail" });
        const consent = await api("POST", "/v1/installations", {
          token: user,
          json: { project_id: "trail", scopes: ["read"] },
        });
        assert.equal(consent.status, 201, consent.text);
        const installation = `projects/trail/installations/${consent.body.id}`;
        asCreated(await oauth("ConsentInstallation", installation), consent.body);
        const revoked = await api("DELETE", `/v1/installations/${consent.body.id}`, {
          token: user,
        });
        assert.equal(revoked.status, 204, revoked.text);
        const got = await api("GET", `/v1/installations/${consent.body.id}`, { token: user });
        assert.deepEqual((await oauth("RevokeInstallation", installation)).changes, [
          { field: "revoked_at", old: null, new: got.body.revoked_at },
          { field: "status", old: "active", new: "revoked" },
        ]);

        const role = await api("POST", "/v1/core/roles", {
          token: trailSpace,
          json: { name: "Fields", resource_type: "project", permissions: ["units.read"] },
        });
        asCreated(await core("CreateRole", `spaces/trail-space/roles/${role.body.id}`), role.body);
        const root = await api("POST", "/v1/core/journeys", {
          token: trailSpace,
          json: { name: "Root" },
        });
        const child = await api("POST", "/v1/core/journeys", {
          token: trailSpace,
          json: { name: "Child", parent: root.body.id },
        });
        const childName = `spaces/trail-space/journeys/${child.body.id}`;
        const created = await core("CreateJourney", childName);
        asCreated(created, child.body);
        assert.ok(created.changes.some((c: { field: string }) => c.field === "parent"));
        const unit = await api("POST", "/v1/core/units", {
          token: trailSpace,
          json: { journey: child.body.id, title: "Fields", due_at: "2026-12-01T10:00:00+02:00" },
        });
        const unitName = `${childName}/units/${unit.body.id}`;
        asCreated(await core("CreateUnit", unitName), unit.body);
        assert.equal(unit.body.due_at, "2026-12-01T08:00:00.000Z");
        // Changes, old and new, by the same fields and in the same form.
        const moved = await api("PUT", `/v1/core/journeys/${child.body.id}`, {
          token: trailSpace,
          json: { name: "Child" },
        });
        assert.equal(moved.status, 200, moved.text);
        assert.deepEqual((await core("UpdateJourney", childName)).changes, [
          { field: "parent", old: root.body.id, new: null },
        ]);
        const undated = await api("PUT", `/v1/core/units/${unit.body.id}`, {
          token: trailSpace,
          json: { journey: child.body.id, title: "Fields" },
        });
        assert.equal(undated.status, 200, undated.text);
        assert.deepEqual((await core("UpdateUnit", unitName)).changes, [
          { field: "due_at", old: "2026-12-01T08:00:00.000Z", new: null },
        ]);
      },
    );

    await t.step(
      "a client's delete ends its secrets and keys in the trail, one event each",
      async () => {
        const client = await api("POST", "/v1/projects/trail/clients", {
          token,
          json: { name: "Doomed", type: "web", redirect_uris: ["https://app.example/cb"] },
        });
        assert.equal(client.status, 201, client.text);
        const clientName = `projects/trail/clients/${client.body.id}`;
        const clientPath = `/v1/projects/trail/clients/${client.body.id}`;
        const secret = await api("POST", `${clientPath}/secrets`, {
          token,
          json: { lifetime_seconds: 3600 },
        });
        assert.equal(secret.status, 201, secret.text);
        const key = await api("POST", `${clientPath}/keys`, { token, json: { generate: "EdDSA" } });
        assert.equal(key.status, 201, key.text);
        const deleted = await api("DELETE", clientPath, {
          token,
          headers: { "x-request-id": "delete-doomed" },
        });
        assert.equal(deleted.status, 204, deleted.text);

        const deleteClient = `${service}/DeleteClient`;
        const secretName = `${clientName}/secrets/${secret.body.id}`;
        const keyName = `${clientName}/keys/${key.body.id}`;
        // The credential's history, by its name: created, then deleted with its client.
        const history = async (name: string) => {
          const events = await listEvents(
            api,
            token,
            `/v1/projects/trail/events?resource=${encodeURIComponent(name)}`,
          );
          assert.deepEqual(events.map((e) => e.method.split("/")[1]), [
            "DeleteClient",
            name === secretName ? "CreateClientSecret" : "CreateClientKey",
          ]);
          assert.equal(events[0].request_id, "delete-doomed", "the client's delete wrote it");
          assert.equal(events[0].actor.sub, "auditor");
          return events[0].changes;
        };
        assert.deepEqual(await history(secretName), [
          { field: "expires_at", old: secret.body.expires_at, new: null },
        ]);
        const keyChanges = await history(keyName);
        // What the delete took away: the key had no expiry, so that is not listed.
        assert.deepEqual(keyChanges.map((c: { field: string }) => c.field), [
          "algorithm",
          "jwk",
          "kid",
        ]);
        assert.ok(keyChanges.every((c: { new: unknown }) => c.new === null));
        assert.equal(
          keyChanges.find((c: { field: string }) => c.field === "kid").old,
          key.body.kid,
        );
        // Under the client: its own delete and its credentials', one event each, of one request.
        const all = await listEvents(
          api,
          token,
          `/v1/projects/trail/events?resource=${encodeURIComponent(clientName)}` +
            `&method=${encodeURIComponent(deleteClient)}`,
        );
        assert.deepEqual(
          all.map((e) => e.resource).sort(),
          [clientName, keyName, secretName].sort(),
        );
        assert.ok(all.every((e) => e.request_id === "delete-doomed"));
        // Never the secret's value, nor its hint.
        const [dump] = await sql<{ text: string }[]>`
        select coalesce(string_agg(e::text, ' '), '') as text from oauth.events e`;
        assert.ok(!dump!.text.includes(secret.body.secret), "the secret's value is in no event");
        assert.ok(!dump!.text.includes(secret.body.secret.slice(-8)), "nor its end (the hint)");
      },
    );

    await t.step(
      "the slow watcher is reset by the window timeout; memory stayed bounded meanwhile",
      async () => {
        assert.ok(stall, "the slow watcher was opened");
        const end = await within(stall.stream.ended, 90_000, "reset of the stalled stream");
        assert.deepEqual(end, { reset: ErrorCode.CANCEL }, "the stream is reset, not ended");
        assert.equal(stall.stream.dataBytes, stallWindow, "nothing was sent past the window");
        const peak = stall.rss.stop().oauth!;
        await stall.stopServing();
        assert.deepEqual(stall.served.failures, [], "other calls were served meanwhile");
        assert.ok(stall.served.ok > 0);
        const growth = peak.sampledMiB - stall.baselineMiB;
        // deno-lint-ignore no-console
        console.log(
          `slow watcher: ${stall.stream.dataBytes} bytes then reset; oauth-registry RSS ` +
            `${stall.baselineMiB} MiB before, ${peak.sampledMiB} MiB at most while stalled ` +
            `(+${growth} MiB, limit +${rssGrowthLimitMiB}); ${stall.served.ok} checks served`,
        );
        assert.ok(
          growth < rssGrowthLimitMiB,
          `RSS grew ${growth} MiB while a watcher of ${seededEvents} events did not read`,
        );
        // The connection lives on, and the watcher's place is free again: as many watchers as a
        // process admits are admitted (a cancelled watcher leaves within its next poll).
        await healthCheck(stall.conn);
        await admitsWatchers(api, stack.oauthGrpc, token, projects);
      },
    );

    await t.step(
      "SIGKILL under concurrent changes leaves no change without its event, nor the reverse",
      async () => {
        const grpc = grpcTestClient(stack.oauthGrpc);
        const acked: Change[] = [];
        const failures: string[] = [];
        let stop = false;
        const workers = Array.from({ length: 12 }, async (_, w) => {
          try {
            for (let r = 0; !stop; r++) {
              const { client } = await grpc.call(rpc.createClient, {
                projectId: "crash",
                client: {
                  name: `w${w} r${r}`,
                  type: ClientType.WEB,
                  redirectUris: ["https://app.example/cb"],
                },
              }, auth);
              const resource = `projects/crash/clients/${client!.id}`;
              acked.push({ method: "CreateClient", resource });
              await grpc.call(rpc.updateClient, {
                projectId: "crash",
                clientId: client!.id,
                client: { name: `w${w} r${r} renamed` },
                updateMask: { paths: ["name"] },
              }, auth);
              acked.push({ method: "UpdateClient", resource });
              if (r % 2 === 1) {
                await grpc.call(
                  rpc.deleteClient,
                  { projectId: "crash", clientId: client!.id },
                  auth,
                );
                acked.push({ method: "DeleteClient", resource });
              }
            }
          } catch (error) {
            failures.push(String((error as { code?: number }).code ?? error));
          }
        });
        try {
          await until(() => acked.length >= 150 || failures.length > 0, 60_000, "150 changes");
          assert.deepEqual(failures, [], "no call failed before the kill");
          await stack.kill("oauth");
        } finally {
          stop = true;
          await Promise.all(workers);
          grpc.close();
        }

        await numberEvents(sql, "oauth");
        const events = await sql<
          {
            seq: string;
            method: string;
            resource: string;
            changes: EventRow["changes"];
          }[]
        >`
          select e.seq::text as seq, method, resource, changes from oauth.events e
          where parent = 'crash' order by e.seq`;
        const seqs = events.map((e) => Number(e.seq));
        const missing = Array.from({ length: seqs.at(-1) ?? 0 }, (_, i) => i + 1).filter((n) =>
          !seqs.includes(n)
        );
        assert.deepEqual(
          seqs,
          seqs.map((_, i) => i + 1),
          `numbered 1..N without gaps: ${seqs.length} events up to ${seqs.at(-1)}, ` +
            `missing ${missing.join(", ")}`,
        );
        const [head] = await sql<{ seq: string }[]>`
          select seq::text as seq from oauth.event_heads where parent = 'crash'`;
        assert.equal(head!.seq, String(events.length), "the counter is the last number");
        const clients = await sql<{ resource: string; name: string }[]>`
          select 'projects/crash/clients/' || oauth.type_id('cli', id) as resource, name
          from oauth.clients where project_id = 'crash'`;
        const existing = new Set(clients.map((c) => c.resource));
        const of = (method: string) =>
          new Set(events.filter((e) => e.method === `${service}/${method}`).map((e) => e.resource));
        const created = of("CreateClient");
        const updated = of("UpdateClient");
        const deleted = of("DeleteClient");
        for (const c of existing) assert.ok(created.has(c), `${c} has no CreateClient event`);
        for (const r of updated) {
          assert.ok(existing.has(r) || deleted.has(r), `${r}: an update of a client never made`);
        }
        for (const r of created) {
          assert.ok(existing.has(r) || deleted.has(r), `${r}: a create that rolled back`);
        }
        for (const r of deleted) assert.ok(!existing.has(r), `${r}: deleted, yet there`);
        // Every change a caller was told succeeded has its event...
        const keys = new Set(events.map((e) => keyOf(e.method, e.resource)));
        assert.equal(keys.size, events.length, "no change has two events");
        for (const c of acked) {
          assert.ok(
            keys.has(keyOf(`${service}/${c.method}`, c.resource)),
            keyOf(c.method, c.resource),
          );
        }
        // ...and each client is as its last event left it.
        for (const c of clients) {
          const last = events.filter((e) => e.resource === c.resource).at(-1)!;
          // The stored form (the rows before and after), as a reader of the trail gets it.
          const changed = Array.isArray(last.changes)
            ? last.changes
            : diffRows(last.changes.old, last.changes.new);
          const name = changed.find((ch) => ch.field === "name")?.new;
          assert.equal(
            name,
            c.name,
            `${c.resource}: its last event (${last.method}) wrote its name`,
          );
        }
        // deno-lint-ignore no-console
        console.log(
          `SIGKILL: ${acked.length} changes acknowledged, ${events.length} events, ` +
            `${clients.length} clients left; ${failures.length} calls cut off (${
              [...new Set(failures)].join(", ")
            })`,
        );
        assert.ok(failures.length > 0, "calls were in flight when the process was killed");

        // Started again, it numbers on from N.
        const proc = stack.respawn("oauth");
        await proc.serving;
        await waitReady(stack.oauthHttp);
        const res = await api("POST", "/v1/projects/crash/clients", {
          token,
          json: { name: "after", type: "web", redirect_uris: ["https://app.example/cb"] },
        });
        assert.equal(res.status, 201, res.text);
        await numberEvents(sql, "oauth");
        const [last] = await sql<{ seq: string; resource: string }[]>`
          select e.seq::text as seq, resource from oauth.events e where parent = 'crash'
          order by e.seq desc limit 1`;
        assert.deepEqual(last, {
          seq: String(events.length + 1),
          resource: `projects/crash/clients/${res.body.id}`,
        });
      },
    );
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup();
    await sql.end();
    await stack.stop();
  }
});

/**
 * The etag rules on one resource at `path` through the gateway: `change(name)` is its update
 * (PATCH or PUT) setting its name to `name`; `trail()` counts its events.
 */
async function checkEtags(o: {
  api: Api;
  token: string;
  path: string;
  change: (name: string) => { method: "PATCH" | "PUT"; json: unknown };
  // deno-lint-ignore no-explicit-any
  nameOf: (body: any) => string;
  trail: () => Promise<number>;
}): Promise<void> {
  const { api, token, path } = o;
  const update = (name: string, ifMatch?: string, ifNoneMatch?: string) => {
    const { method, json } = o.change(name);
    const headers: Record<string, string> = {};
    if (ifMatch !== undefined) headers["if-match"] = ifMatch;
    if (ifNoneMatch !== undefined) headers["if-none-match"] = ifNoneMatch;
    return api(method, path, { token, json, headers });
  };
  const got = await api("GET", path, { token });
  assert.equal(got.status, 200, got.text);
  const first = got.headers.get("etag")!;
  assert.equal(first, `"${got.body.etag}"`, "the ETag header is the body's etag, quoted");
  assert.match(got.body.etag, /^[\x21\x23-\x7e]+$/);

  // If-None-Match with the current etag: 304, no body, the same ETag.
  const notModified = await api("GET", path, { token, headers: { "if-none-match": first } });
  assert.equal(notModified.status, 304);
  assert.equal(notModified.text, "");
  assert.equal(notModified.headers.get("etag"), first);
  // If-None-Match compares weakly, and takes a list.
  for (const tags of [`W/${first}`, `"other", ${first}`, "*"]) {
    const res = await api("GET", path, { token, headers: { "if-none-match": tags } });
    assert.equal(res.status, 304, `If-None-Match: ${tags}`);
  }
  // HEAD: the GET's status and headers, no body.
  const head = await api("HEAD", path, { token });
  assert.equal(head.status, 200);
  assert.equal(head.text, "");
  assert.equal(head.headers.get("etag"), first);
  assert.equal(head.headers.get("content-length"), got.headers.get("content-length"));
  // If-Match on a GET: strong comparison, 412 when no listed tag is current.
  for (const tags of [`W/${first}`, '"other"']) {
    const res = await api("GET", path, { token, headers: { "if-match": tags } });
    assertError(res, 412, "aborted");
  }
  const listed = await api("GET", path, { token, headers: { "if-match": `"other", ${first}` } });
  assert.equal(listed.status, 200);

  // If-Match with the current etag: the change is made, and the etag moves on.
  const events = await o.trail();
  const v2 = await update("v2", first);
  assert.equal(v2.status, 200, v2.text);
  const second = v2.headers.get("etag")!;
  assert.equal(second, `"${v2.body.etag}"`);
  assert.notEqual(second, first);
  assert.equal(await o.trail(), events + 1);
  // The old etag no longer matches: a GET with it answers the new version.
  const changed = await api("GET", path, { token, headers: { "if-none-match": first } });
  assert.equal(changed.status, 200);
  assert.equal(o.nameOf(changed.body), "v2");

  // A stale If-Match: 412 with the JSON error body, and nothing changes.
  const stale = await update("v3", first);
  assertError(stale, 412, "aborted");
  const after = await api("GET", path, { token });
  assert.equal(o.nameOf(after.body), "v2");
  assert.equal(after.headers.get("etag"), second);
  assert.equal(await o.trail(), events + 1, "a refused change has no event");

  // Two updates with the same If-Match at once: one wins, the other is 412.
  const racers = await Promise.all([update("racer a", second), update("racer b", second)]);
  assert.deepEqual(
    racers.map((r) => r.status).sort(),
    [200, 412],
    racers.map((r) => r.text).join(),
  );
  const winner = racers.find((r) => r.status === 200)!;
  assertError(racers.find((r) => r.status === 412)!, 412, "aborted");
  const now = await api("GET", path, { token });
  assert.equal(o.nameOf(now.body), o.nameOf(winner.body));
  const third = now.headers.get("etag")!;
  assert.equal(third, winner.headers.get("etag"));
  assert.equal(await o.trail(), events + 2, "one event: the winner's");

  // A weak tag never matches (If-Match compares strongly): 412. A malformed value is 400.
  for (const weak of ['W/"x"', `W/${third}`, `"x", W/${third}`]) {
    assertError(await update("weak", weak), 412, "aborted");
  }
  for (const malformed of ["not-quoted", `*, ${third}`, `${third}, x`]) {
    assertError(await update("malformed", malformed), 400, "invalid_argument");
    assertError(await update("malformed", undefined, malformed), 400, "invalid_argument");
  }
  // The empty tag names no version: a condition that fails, never one that is left out.
  assertError(await update("empty", '""'), 412, "aborted");
  // If-None-Match on a write: false for `*` (it exists) and for its version, weak or not.
  for (const tags of ["*", third, `W/${third}`, `"x", ${third}`]) {
    assertError(await update("none", undefined, tags), 412, "aborted");
  }
  assertError(await update("both", third, third), 412, "aborted");
  assert.equal(o.nameOf((await api("GET", path, { token })).body), o.nameOf(winner.body));
  assert.equal(await o.trail(), events + 2, "no refused change has an event");

  // Two writes at once, each with a list that names the current version among others: both
  // hold when evaluated, yet the write is conditional on the version each saw: one wins, the
  // other is 412 (never a lost update).
  const listRacers = await Promise.all([
    update("list a", `"x", ${third}`),
    update("list b", `${first}, ${third}, W/${third}`),
  ]);
  assert.deepEqual(
    listRacers.map((r) => r.status).sort(),
    [200, 412],
    listRacers.map((r) => r.text).join(),
  );
  assertError(listRacers.find((r) => r.status === 412)!, 412, "aborted");
  const listWinner = listRacers.find((r) => r.status === 200)!;
  const fourth = listWinner.headers.get("etag")!;
  assert.equal((await api("GET", path, { token })).headers.get("etag"), fourth);
  assert.equal(await o.trail(), events + 3, "one event: the winner's");
  // A stale tag in If-None-Match holds.
  const unlike = await update("unlike", undefined, `${first}, ${third}`);
  assert.equal(unlike.status, 200, unlike.text);
  const fifth = unlike.headers.get("etag")!;
  assert.equal(await o.trail(), events + 4);
  // A delete's etag comes from If-Match only: `?etag=` is an unknown query parameter.
  const query = await api("DELETE", `${path}?etag=${encodeURIComponent(now.body.etag)}`, { token });
  assertError(query, 400, "invalid_argument");
  assert.deepEqual(query.body.error.details, [
    { field: "etag", description: "unknown query parameter" },
  ]);
  // DELETE with a stale If-Match: 412, still there; with the current one: 204.
  assertError(
    await api("DELETE", path, { token, headers: { "if-match": second } }),
    412,
    "aborted",
  );
  assertError(
    await api("DELETE", path, { token, headers: { "if-none-match": fifth } }),
    412,
    "aborted",
  );
  assert.equal((await api("GET", path, { token })).status, 200);
  assert.equal(await o.trail(), events + 4);
  const deleted = await api("DELETE", path, { token, headers: { "if-match": `"x", ${fifth}` } });
  assert.equal(deleted.status, 204, deleted.text);
  assert.equal(deleted.text, "");
  assert.equal((await api("GET", path, { token })).status, 404);
  assert.equal(await o.trail(), events + 5);
}

/**
 * Waits until the oauth-registry admits {@link maxWatchers} watchers at once again (none refused
 * RESOURCE_EXHAUSTED): the places of cancelled and reset watchers are given back. They watch
 * `projects` in turn, since one project may hold a quarter of a process's places, each from its
 * newest event (a position past it is refused OUT_OF_RANGE), so that each waits for the next.
 */
async function admitsWatchers(
  api: Api,
  address: string,
  token: string,
  projects: string[],
): Promise<void> {
  const newest = new Map<string, string>();
  for (const p of projects) {
    const res = await api("GET", `/v1/projects/${p}/events?limit=1`, { token });
    assert.equal(res.status, 200, res.text);
    newest.set(p, res.body.data[0]?.id ?? "0");
  }
  const channel = grpcChannel(address);
  try {
    await until(
      async () => {
        const outcomes = await Promise.all(
          Array.from({ length: maxWatchers }, (_, i) =>
            channel.call({
              kind: "server_streaming",
              path: watchPath,
              requests: [
                watchRequest(
                  projects[i % projects.length]!,
                  newest.get(projects[i % projects.length]!)!,
                ),
              ],
              metadata: { authorization: `Bearer ${token}` },
              timeoutMs: 1000,
            })),
        );
        for (const o of outcomes) {
          assert.ok(
            [DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED].includes(o.code),
            `${o.code} ${o.details}`,
          );
        }
        return outcomes.every((o) => o.code !== RESOURCE_EXHAUSTED);
      },
      20_000,
      `${maxWatchers} watchers admitted at once`,
    );
  } finally {
    channel.close();
  }
}
