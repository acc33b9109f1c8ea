/**
 * The audit trail every service keeps in its own schema (table `<schema>.events`, see
 * services/oauth/migrations/0009_audit_events.sql and 0010_event_numbering.sql): one event per
 * change, written **by the statement that makes the change**, as one more common table expression
 * of it, and numbered once it has committed ({@link numberEvents}). A change and its
 * event are one statement, so one transaction: no change commits without its event, no event
 * survives a change that rolled back, also when the process is killed mid-request; and it costs
 * one round trip, not the three more (`begin`, an insert, `commit`) a separate insert would.
 *
 * A handler takes its {@link AuditContext} from the call ({@link auditContextOf}) and hands it to
 * the repository, whose mutating statement adds {@link eventCte}. What changed is kept as the
 * rows themselves, before and after ({@link changes}), so the old values are the ones the statement
 * replaced, not what the handler read before; the changed fields are listed when the event is read
 * ({@link toEvent}).
 *
 * What an event shows of a row is an allow-list: each audited table names the columns its events
 * show (`shown`, {@link AuditedTable}), and {@link rowJson} builds the JSON of those columns only.
 * Every other column is left out: ids the resource name holds, timestamps, internals, and anything
 * of a credential (a secret's hash or hint, a private key, a token, a code), which an event never
 * holds. A column a migration adds is therefore shown by no event until it is listed;
 * tests/audit_columns_test.ts classifies every column of every audited table, shown or not and
 * why, so such a column fails it until someone decides, and no column named like a credential is
 * shown.
 *
 * Who and from where: the token's claims, the request id, and the caller's address and user agent
 * as the gateway forwards them (`x-forwarded-for`, `x-forwarded-user-agent`); our servers add the
 * peer's address (`x-peer-address`, replacing whatever a caller sent under that name), so a direct
 * caller is recorded by its peer and a forwarded address can be weighed by who forwarded it.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import {
  type DescMessage,
  type DescMethod,
  fromJson,
  type JsonValue,
  type MessageInitShape,
} from "@bufbuild/protobuf";
import { type Timestamp, ValueSchema } from "@bufbuild/protobuf/wkt";
import * as v from "valibot";
import type { HandlerContext } from "@connectrpc/connect";
import type { EventSchema } from "../../gen/registry/audit/v1/event_pb.ts";
import { deleteBatch, plainName, purgeBatch, type Sql } from "../db/mod.ts";
import { callerOf, type HeldKey, heldKeyOf } from "../policy/mod.ts";
import {
  expiredEtagSuffix,
  maxTimestampMs,
  pageLimit,
  readEtag,
  rowTextSize,
  timestamp,
  timestampBefore,
  timestampCeilMs,
  timestampOf,
  validate,
} from "../resource/mod.ts";
import {
  forwardedForHeader,
  forwardedUserAgentHeader,
  givenRequestId,
  invalidArgument,
  peerHeader,
} from "../platform/mod.ts";

/** The longest text kept of a forwarded value (a User-Agent can be long; an address is not). */
const maxText = 512;

function bounded(value: string | null, max: number): string {
  if (value === null) return "";
  // Control characters are dropped: an event is read by people and by log pipelines.
  // deno-lint-ignore no-control-regex
  return value.replace(/[\x00-\x1f\x7f]/g, "").slice(0, max);
}

/** Who made a change, and from where: the same for every event of one call. */
export interface AuditContext {
  /** The RPC's full name, `package.Service/Method`. */
  method: string;
  /** The token's `sub`. */
  sub: string;
  /** The token's `client_id`, or null. */
  clientId: string | null;
  /** The token's `installation_id`, or null. */
  installationId: string | null;
  /** The request id, or "" (none, or not a safe token). */
  requestId: string;
  /** The caller's address: forwarded by the gateway, else the peer's. */
  sourceIp: string;
  /** The caller's User-Agent: forwarded by the gateway, else the gRPC client's. */
  userAgent: string;
  /** The peer's address, or "". */
  peer: string;
  /** When the change is made (the service's clock). */
  at: Date;
  /**
   * The idempotency key the call holds (lib/policy's `heldKeyOf`), which its change marks in the
   * same statement ({@link eventCte}), or undefined.
   */
  key?: HeldKey | undefined;
}

/** Who acted: a platform token's caller, an OAuth client, or what a failed call claimed. */
export interface Actor {
  /** The `sub`. */
  sub: string;
  /** The OAuth client acting, or null. */
  clientId: string | null;
  /** The installation acting, or null. */
  installationId?: string | null;
}

/**
 * The audit context of a call by `actor`, at `now` (ms since the epoch): the request id (when it
 * is a safe token, lib/platform's `givenRequestId`), address, user agent and peer read from the
 * call's metadata (the gateway's forwarded address first, else the peer's), each bounded to `max`
 * characters without control characters.
 */
export function auditContextFrom(
  call: { header: Headers; method: DescMethod },
  actor: Actor,
  now: number,
  max = maxText,
): AuditContext {
  const header = call.header;
  const peer = bounded(header.get(peerHeader), max);
  // A forwarded list names the original client first.
  const forwarded = bounded(header.get(forwardedForHeader)?.split(",")[0]?.trim() ?? null, max);
  return {
    method: `${call.method.parent.typeName}/${call.method.name}`,
    sub: actor.sub,
    clientId: actor.clientId,
    installationId: actor.installationId ?? null,
    requestId: givenRequestId(header) ?? "",
    sourceIp: forwarded || peer,
    userAgent: bounded(header.get(forwardedUserAgentHeader) ?? header.get("user-agent"), max),
    peer,
    at: new Date(now),
  };
}

/**
 * The metadata with which a service that calls another on a caller's behalf (the token service
 * recording a consent in the registry) passes on who called, from where: the request id, the
 * forwarded address and user agent it was given, else its caller's own (its peer, its user agent),
 * so that the other service's event names the same request and client as its own.
 */
export function provenanceOf(header: Headers): Record<string, string> {
  const out: Record<string, string> = {};
  const requestId = givenRequestId(header);
  if (requestId !== undefined) out["x-request-id"] = requestId;
  const address = header.get(forwardedForHeader) ?? header.get(peerHeader);
  if (address !== null) out[forwardedForHeader] = address;
  const agent = header.get(forwardedUserAgentHeader) ?? header.get("user-agent");
  if (agent !== null) out[forwardedUserAgentHeader] = agent;
  return out;
}

/**
 * The audit context of a call (after authentication: the platform token's caller acts), with the
 * idempotency key it holds, if any.
 */
export function auditContextOf(ctx: HandlerContext, now: number): AuditContext {
  const caller = callerOf(ctx);
  const audit = auditContextFrom({ header: ctx.requestHeader, method: ctx.method }, {
    sub: caller.subject,
    clientId: caller.clientId ?? null,
    installationId: caller.installationId ?? null,
  }, now);
  const key = heldKeyOf(ctx.values);
  return key === undefined ? audit : { ...audit, key };
}

/** What a repository's write records, and the etag it is conditional on (none: unconditional). */
export interface Write {
  /** Who writes, from where. */
  audit: AuditContext;
  /** The etag the resource must still have (lib/resource/etag.ts), or undefined. */
  etag?: string | undefined;
}

/**
 * What a handler's write records: who, from where, at `now`, and the etag it is conditional on
 * (`etag` from the request, empty for none; INVALID_ARGUMENT naming `field` when malformed).
 */
export function writeOf(ctx: HandlerContext, now: number, etag = "", field = "etag"): Write {
  const checked = readEtag(etag, field);
  return { audit: auditContextOf(ctx, now), ...(checked === undefined ? {} : { etag: checked }) };
}

/** A piece of SQL (a postgres.js fragment). */
// deno-lint-ignore no-explicit-any
export type Fragment = any;

/** What one event is about. */
export interface EventTarget {
  /** The project (or space) the event belongs to: a value, or SQL over `from`'s rows. */
  parent: string | Fragment;
  /** The resource name: a value, or SQL over `from`'s rows. */
  resource: string | Fragment;
  /**
   * The rows the statement changed (a CTE name, or several 1-row CTEs joined): the event is
   * written exactly when this holds a row, so a change that found nothing writes none.
   */
  from: Fragment;
  /** The changes, as SQL over `from` (see {@link changes}). */
  changes: Fragment;
  /** The outcome (default `ok`). */
  result?: string;
}

/**
 * The common table expression (`audit_event`) that records one event in the statement that makes
 * the change: put it in its `with` list, after the CTEs that `from` names. Postgres runs every
 * data-modifying CTE whether or not it is referenced. The event is written without its number:
 * {@link numberEvents} gives it one once it has committed.
 *
 * With `each`, the CTE of that name records one event per row of `from` (the rows a statement
 * takes along with the one it is about, such as a deleted client's secrets), in the same call's
 * name: `parent`, `resource` and `changes` are then SQL over each row.
 *
 * When the call holds an idempotency key (`audit.key`), the event (not one of `each`) also marks
 * it: one more CTE, `audit_event_key`, sets the key's `effect` in `<schema>.idempotency_keys` to
 * the event's resource, when an event is written; when the key is no longer the call's (another
 * request took it over) the statement fails instead. The change and the mark commit together, in
 * the statement the change costs anyway, so a key whose outcome is lost after the commit is never
 * run again (lib/policy/idempotency.ts).
 */
export function eventCte(
  sql: Sql,
  schema: string,
  audit: AuditContext,
  t: EventTarget,
  each?: string,
): Fragment {
  // One fragment a call, the rest made once (`constant`): postgres.js makes a query object of
  // every fragment, and the fragments of each write cost it about 45 µs of its 220 (measured in a
  // loop of a client's PATCH). `(x)::text` takes a value or SQL alike.
  const held = each === undefined ? audit.key : undefined;
  const tail = each !== undefined
    ? ""
    : held === undefined
    ? "limit 1"
    : "limit 1 returning resource";
  // Without a key held, the statement a write has always had: no fragment more, the same text.
  const insert = sql`
    ${constant(sql, each ?? "audit_event")} as (
      insert into ${constant(sql, `${plainName(schema)}.events`)} (
        parent, occurred_at, method, resource, actor_sub, actor_client_id,
        actor_installation_id, request_id, source_ip, user_agent, peer, changes, result
      )
      select (${t.parent})::text, ${audit.at}, ${audit.method}, (${t.resource})::text,
        ${audit.sub}, ${audit.clientId}, ${audit.installationId}, ${audit.requestId},
        ${audit.sourceIp}, ${audit.userAgent}, ${audit.peer}, ${t.changes}, ${t.result ?? "ok"}
      from ${t.from}
      ${constant(sql, tail)}
    )`;
  return held === undefined ? insert : sql`${insert}${keyMark(sql, schema, held)}`;
}

/**
 * The CTE that marks the key `held` with the effect of the statement's `audit_event`. A key that
 * is no longer the call's (its lock expired and another request with it took it over, which runs
 * the create itself) fails the statement (`<schema>.idempotency_key_taken()`, ABORTED): the change
 * rolls back rather than make a second record.
 */
function keyMark(sql: Sql, schema: string, held: HeldKey): Fragment {
  const s = plainName(schema);
  return sql`,
    ${constant(sql, "audit_event_key")} as (
      update ${constant(sql, `${s}.idempotency_keys`)} k
      set effect = case when k.owner = ${held.owner} then e.resource
        else ${constant(sql, `${s}.idempotency_key_taken()`)} end
      from audit_event e
      where k.caller = ${held.caller} and k.rpc = ${held.rpc} and k.key = ${held.key}
    )`;
}

/**
 * A cache of what is made once per pool (a fragment is made with one pool's `sql`) and key: a
 * fragment is text and parameters that postgres.js reads when it builds a statement, so one made
 * once serves every statement after. Keys are constants of the code (tables, aliases, column
 * lists), so each pool's map stays as small as the code.
 */
function poolCache<K, V>(): (sql: Sql, key: K, make: () => V) => V {
  const byPool = new WeakMap<Sql, Map<K, V>>();
  return (sql, key, make) => {
    let byKey = byPool.get(sql);
    if (!byKey) byPool.set(sql, byKey = new Map());
    let value = byKey.get(key);
    if (value === undefined) byKey.set(key, value = make());
    return value;
  };
}

/**
 * `make(sql)` made once per pool: the parts of a statement that never change, such as a table's
 * event shape. Pass the pool, also for a statement of a transaction (its fragments nest in any
 * statement): a transaction's `sql` is a new one each time, which would make them again.
 */
export function perPool<T>(make: (sql: Sql) => T): (sql: Sql) => T {
  const made = poolCache<null, T>();
  return (sql) => made(sql, null, () => make(sql));
}

const constants = poolCache<string, Fragment>();

/**
 * A piece of SQL text that never changes (a table, CTE names, a column), made once per pool and
 * text: for constants of the code only, never for anything a caller sent.
 */
export function constant(sql: Sql, text: string): Fragment {
  return constants(sql, text, () => sql.unsafe(text));
}

/**
 * Numbers the events that have committed since the last numbering: per project (or space), from
 * its last number up with no gaps, in the order they are found committed (those found by one run,
 * in the order they were written); returns how many. One run at a time per schema (an advisory
 * lock): a run that waited sees what the one before it numbered, so a number is never given twice
 * and never below one already given. A reader that has read every event up to N therefore never
 * sees a new one below N, which is what the change feed's cursor relies on.
 *
 * Why after the commit, not in the writing statement: a number taken while writing must be held
 * (the project's counter row locked) until the change commits, so a project's changes would
 * commit one at a time, each waiting for the last one's flush to disk; and announcing each event
 * with `pg_notify` would do the same for every change of the database (Postgres serialises the
 * commits of notifying transactions). Measured through the gateway, both together halved the rate
 * of creates. Two changes of one row are numbered in the order they committed: the second waits
 * for the first's row lock before it writes its event.
 */
export async function numberEvents(sql: Sql, schema: string, batch = 10_000): Promise<number> {
  const events = sql(`${schema}.events`);
  const headTable = sql(`${schema}.event_heads`);
  let total = 0;
  for (;;) {
    const numbered = await sql.begin(async (tx) => {
      await tx`select pg_advisory_xact_lock(${`${schema}.events`}::regclass::oid::bigint)`;
      // Each pending row is found again by its ctid and its project's head by the primary key: a
      // join on the ids, as it was, was planned as a nested loop over both (the statistics of a
      // numbered table say no row is pending) and cost 3 s for 2,000 events, 38 s for 10,000
      // over 5,000 projects; this plan is linear (64 ms and 200 ms there). The heads the upsert
      // writes are not visible to the update: it reads each head as it was, and adds to it.
      const done = await tx`
        with pending as (
          select ctid as row, parent, row_number() over (partition by parent order by id) as n
          from (
            select ctid, id, parent from ${events} where seq is null order by id limit ${batch}
          ) p
        ),
        heads as (
          insert into ${headTable} as h (parent, seq)
          select parent, count(*) from pending group by parent
          on conflict (parent) do update set seq = h.seq + excluded.seq
        )
        update ${events} e set seq = coalesce(h.seq, 0) + p.n
        from pending p left join ${headTable} h on h.parent = p.parent
        where e.ctid = p.row and e.seq is null`;
      return done.count;
    });
    total += numbered;
    if (numbered < batch) return total;
  }
}

/** How the rows of one table are named in events. */
export interface AuditedTable {
  /** The schema that keeps the events. */
  schema: string;
  /**
   * The columns an event shows of a row (a constant of the code): no other column is ever written
   * to the trail, so one a migration adds stays out of it until it is listed here.
   */
  shown: readonly string[];
  /** The project (or space) of a row, as SQL over the row's alias. */
  parent(sql: Sql, row: Fragment): Fragment;
}

/**
 * The event CTEs of a change to the row of `table` named `resource`: `from` the statement's CTEs
 * that hold it (1-row CTEs joined: `prior, updated`; a constant of the code), `row` the alias the
 * event names, `old` and `next` the aliases of the row before and after the change (null: a
 * creation, a deletion). An update that sets only some columns names them (`columns`, the code's
 * own names): its event keeps those columns before and after, not the whole rows
 * ({@link columnsJson}); the other columns did not change, and are not listed when it is read.
 *
 * The caller names the resource, as it has the ids: encoding a UUID as a TypeID in Postgres (the
 * schema's PL/pgSQL `type_id`) took about 25 µs of its time a call, two for a secret's name.
 */
export function rowEvent(
  sql: Sql,
  table: AuditedTable,
  audit: AuditContext,
  resource: string | Fragment,
  from: string,
  row: string,
  old: string | null,
  next: string | null,
  columns?: readonly string[],
): Fragment {
  const shape = shapeOf(sql, table, row, old, next, columns);
  return eventCte(sql, table.schema, audit, { ...shape, resource, from: constant(sql, from) });
}

/**
 * The event CTEs of a row that the statement's CTE `changed` created or deleted, under the
 * project (or space) `parent`, named `resource`, showing the columns `shown` only (a constant list
 * of the caller). Pass the pool's `sql`, also in a transaction ({@link perPool}).
 */
export function changedRowEvent(
  sql: Sql,
  schema: string,
  audit: AuditContext,
  shown: readonly string[],
  parent: string,
  resource: string,
  deleted: boolean,
): Fragment {
  const shape = changedShapes(sql, shown, () => {
    const json = rowJson(sql, "changed", shown);
    const from = constant(sql, "changed");
    return {
      created: { from, changes: changes(sql, null, json) },
      deleted: { from, changes: changes(sql, json, null) },
    };
  });
  return eventCte(sql, schema, audit, {
    parent,
    resource,
    ...(deleted ? shape.deleted : shape.created),
  });
}

const changedShapes = poolCache<
  readonly string[],
  Record<"created" | "deleted", Pick<EventTarget, "from" | "changes">>
>();

/** The parts of a row's event that depend only on the table and the aliases. */
interface EventShape {
  parent: Fragment;
  changes: Fragment;
}

/**
 * The parts of {@link rowEvent} that never change between calls, by table and then aliases:
 * building them on every write cost more than the rest of the event (about 19 µs a write, most of
 * it garbage to collect).
 */
const shapes = poolCache<AuditedTable, Map<string, EventShape>>();

/** Most shapes kept per table and pool: the sets of columns an update sets vary by call. */
const maxShapes = 256;

function shapeOf(
  sql: Sql,
  table: AuditedTable,
  row: string,
  old: string | null,
  next: string | null,
  columns: readonly string[] | undefined,
): EventShape {
  const byAliases = shapes(sql, table, () => new Map());
  const key = columns === undefined ? `${row} ${old} ${next}` : `${row} ${old} ${next} ${columns}`;
  let shape = byAliases.get(key);
  if (!shape) {
    const json = (alias: string | null) =>
      alias === null
        ? null
        : columns === undefined
        ? rowJson(sql, alias, table.shown)
        : columnsJson(sql, alias, columns.filter((c) => table.shown.includes(c)));
    shape = {
      parent: table.parent(sql, sql(row)),
      changes: changes(sql, json(old), json(next)),
    };
    if (byAliases.size < maxShapes) byAliases.set(key, shape);
  }
  return shape;
}

/**
 * Some columns of a row as JSON, `{"column": value, ...}`, as `to_jsonb` of the whole row would
 * show them: what an update's event keeps of the row before and after it. Measured over a loop of
 * a client's rename (the registry's statement, pgbench-like, one connection), against both whole
 * rows: 30 to 35 µs less of Postgres's CPU a write, and 587 bytes of WAL instead of 1,084.
 */
export function columnsJson(sql: Sql, alias: string, columns: readonly string[]): Fragment {
  const a = plainName(alias);
  const pairs = columns.map((c) => `'${plainName(c)}', ${a}.${c}`).join(", ");
  return sql.unsafe(`jsonb_build_object(${pairs})`);
}

/**
 * The row of the alias `alias` (a constant of the code) as the JSON an event shows: its columns
 * `shown` only ({@link columnsJson}), the same keys and values as `to_jsonb` of the row shows them,
 * so events written before an allow-list read the same. Made once per pool, list and alias (the
 * lists are constants of the repositories), so a statement's text is the same on every write.
 */
export function rowJson(sql: Sql, alias: string, shown: readonly string[]): Fragment {
  const byAlias = rowJsons(sql, shown, () => new Map());
  let json = byAlias.get(alias);
  if (json === undefined) byAlias.set(alias, json = columnsJson(sql, alias, shown));
  return json;
}

const rowJsons = poolCache<readonly string[], Map<string, Fragment>>();

/**
 * The changes between two rows' JSON ({@link rowJson}; null for a creation or a deletion), as the
 * event keeps them: both rows, `{"old": ..., "new": ...}`, compared when the event is read
 * ({@link toEvent}). Building the list of changed fields in SQL cost more than the rest of the
 * statement (a set-returning join and an aggregate per write); a write is hot, a read of the trail
 * is not.
 */
export function changes(sql: Sql, old: Fragment | null, next: Fragment | null): Fragment {
  return sql`jsonb_build_object('old', ${old ?? sql`null`}, 'new', ${next ?? sql`null`})`;
}

/** A field's change as an event lists it. */
export interface FieldChange {
  field: string;
  old?: JsonValue;
  new?: JsonValue;
}

/**
 * The fields whose values differ between two rows' JSON, in field order; for a creation (no old
 * row) the fields set, for a deletion (no new row) those that were, a null being no value.
 */
export function diffRows(
  old: Record<string, JsonValue> | null,
  next: Record<string, JsonValue> | null,
): FieldChange[] {
  const fields = [...new Set([...Object.keys(old ?? {}), ...Object.keys(next ?? {})])].sort();
  const out: FieldChange[] = [];
  for (const field of fields) {
    const had = old !== null && field in old;
    const has = next !== null && field in next;
    // Both sides come from Postgres's jsonb, whose objects keep one key order: equal values
    // serialise alike.
    if (had && has && JSON.stringify(old[field]) === JSON.stringify(next[field])) continue;
    // A creation lists the fields it set, a deletion those it took away: a null is neither.
    if (!had && next![field] === null) continue;
    if (!has && old![field] === null) continue;
    out.push({
      field,
      ...(had ? { old: old[field] } : {}),
      ...(has ? { new: next![field] } : {}),
    });
  }
  return out;
}

/** A row of `<schema>.events`. */
export interface EventRow {
  parent: string;
  seq: string;
  occurred_at: Date;
  method: string;
  resource: string;
  actor_sub: string;
  actor_client_id: string | null;
  actor_installation_id: string | null;
  request_id: string;
  source_ip: string;
  user_agent: string;
  peer: string;
  /**
   * The fields that changed, as a list (events that name them), or the rows before and after
   * (see {@link changes}).
   */
  changes:
    | FieldChange[]
    | { old: Record<string, JsonValue> | null; new: Record<string, JsonValue> | null };
  result: string;
}

/**
 * The columns read of an event (seq as text: it is a bigint). Order by the table's `seq`, not by
 * this list's (text) `seq`: alias the table.
 */
export function eventColumns(sql: Sql): Fragment {
  return sql`parent, seq::text as seq, occurred_at, method, resource, actor_sub, actor_client_id,
    actor_installation_id, request_id, source_ip, user_agent, peer, changes, result`;
}

/**
 * How a service's events show one of its stored columns: as the field its API has (a unit's
 * `journey`, not the column `journey_id`), with the value as the API writes it (a TypeID, not the
 * stored UUID; a timestamp as `...Z` with milliseconds, not Postgres's `+00:00` with the digits
 * it keeps). Applied when an event is read, so events written before read the same way.
 */
export interface EventField {
  /** The API's field path, when it is not the column's name. */
  field?: string;
  /** The API's encoding of a stored value other than null. */
  value?: (stored: JsonValue) => JsonValue;
}

/** The columns a service's events show otherwise than stored, by column (all its tables). */
export type EventFields = Readonly<Record<string, EventField>>;

/** A timestamp column: RFC 3339 in UTC with milliseconds, as the API writes a Timestamp. */
export const timestampField: EventField = {
  value: (stored) => typeof stored === "string" ? new Date(stored).toISOString() : stored,
};

/** A column of stored UUIDs that the API names `field` and writes as ids of `kind` (TypeIDs). */
export function idField(field: string, kind: { fromUuid(uuid: string): string }): EventField {
  return { field, value: (stored) => typeof stored === "string" ? kind.fromUuid(stored) : stored };
}

/** A change as the API names and writes it (`fields`), by stored column. */
function shown(change: FieldChange, fields: EventFields): FieldChange {
  if (!Object.hasOwn(fields, change.field)) return change;
  const f = fields[change.field]!;
  const value = (v: JsonValue) => v === null || f.value === undefined ? v : f.value(v);
  return {
    field: f.field ?? change.field,
    ...("old" in change ? { old: value(change.old!) } : {}),
    ...("new" in change ? { new: value(change.new!) } : {}),
  };
}

/**
 * An event row's UTF-8 bytes of text, for a page's cap ({@link pageOf}'s `sizeOf`): its strings and
 * its changes as JSON, where nearly all of it is (a PATCH of 100 redirect URIs is 400 KB of them).
 */
export function eventRowSize(row: EventRow): number {
  return rowTextSize(row) + Buffer.byteLength(JSON.stringify(row.changes));
}

/**
 * An event row as the message; its changes by the API's field paths and in its encoding (`fields`,
 * the service's columns shown otherwise than stored), in field order.
 */
export function toEvent(
  row: EventRow,
  fields: EventFields = {},
): MessageInitShape<typeof EventSchema> {
  const listed = Array.isArray(row.changes)
    ? row.changes
    : diffRows(row.changes.old, row.changes.new);
  const changes = listed.map((c) => shown(c, fields));
  if (listed.some((c) => Object.hasOwn(fields, c.field) && fields[c.field]!.field !== undefined)) {
    changes.sort((a, b) => a.field < b.field ? -1 : a.field > b.field ? 1 : 0);
  }
  return {
    id: row.seq,
    occurredAt: timestampOf(row.occurred_at),
    actor: {
      sub: row.actor_sub,
      ...(row.actor_client_id === null ? {} : { clientId: row.actor_client_id }),
      ...(row.actor_installation_id === null ? {} : { installationId: row.actor_installation_id }),
    },
    requestId: row.request_id,
    sourceIp: row.source_ip,
    userAgent: row.user_agent,
    peer: row.peer,
    method: row.method,
    resource: row.resource,
    changes: changes.map((c) => ({
      field: c.field,
      ...("old" in c ? { old: fromJson(ValueSchema, c.old!) } : {}),
      ...("new" in c ? { new: fromJson(ValueSchema, c.new!) } : {}),
    })),
    result: row.result,
  };
}

/** What a list of events is filtered by. */
export interface EventQuery {
  /** Page size. */
  limit: number;
  /** Events before this number (the previous page's last), or undefined for the newest. */
  before: bigint | undefined;
  /** This resource and the ones under it (`projects/p/clients/c` and `.../c/secrets/s`). */
  resource?: string | undefined;
  /** The RPC's full name. */
  method?: string | undefined;
  /** The actor's `sub`. */
  actor?: string | undefined;
  /** At or after this time (a request's bound, rounded up to the millisecond). */
  since?: Date | undefined;
  /** Before this time (a request's bound, rounded up to the millisecond). */
  until?: Date | undefined;
}

/** An event id as a cursor: decimal digits (a bigint), or empty for none. */
const cursorMessage = "must be an event id (its decimal number)";
const cursor = v.union(
  [v.literal(""), v.pipe(v.string(), v.regex(/^(0|[1-9][0-9]{0,17})$/, cursorMessage))],
  cursorMessage,
);

const querySchema = v.object({
  limit: pageLimit,
  after: cursor,
  resource: v.pipe(v.string(), v.maxLength(4096, "must be at most 4096 characters")),
  method: v.pipe(v.string(), v.maxLength(512, "must be at most 512 characters")),
  actor: v.pipe(v.string(), v.maxLength(1024, "must be at most 1024 characters")),
  // Years 0001..9999 and nanos 0..999,999,999, as a Timestamp is (a direct gRPC caller can send
  // any numbers; Postgres took them as an internal error).
  since: v.optional(timestamp),
  until: v.optional(timestamp),
});

/** The cursor of a request (`after`): undefined when empty; INVALID_ARGUMENT when malformed. */
export function readCursor(after: string, desc: DescMessage): bigint | undefined {
  validate(v.object({ after: cursor }), desc, { after });
  return after === "" ? undefined : BigInt(after);
}

/** A ListEvents request's query; INVALID_ARGUMENT for a bad limit, cursor or filter. */
export function readEventQuery(
  req: {
    limit?: number | undefined;
    after: string;
    resource: string;
    method: string;
    actor: string;
    since?: Timestamp | undefined;
    until?: Timestamp | undefined;
  },
  desc: DescMessage,
): EventQuery {
  const q = validate(querySchema, desc, req);
  // A range that ends before it starts is a mistake, not a question whose answer is nothing (one
  // that ends where it starts is empty: since <= t < until). Compared as given, to the nanosecond.
  if (req.since !== undefined && req.until !== undefined) {
    if (timestampBefore(req.until, req.since)) {
      throw invalidArgument([{ field: "until", description: "must not be before since" }]);
    }
  }
  return {
    limit: q.limit,
    before: q.after === "" ? undefined : BigInt(q.after),
    ...(q.resource === "" ? {} : { resource: q.resource }),
    ...(q.method === "" ? {} : { method: q.method }),
    ...(q.actor === "" ? {} : { actor: q.actor }),
    // Events are stamped in whole milliseconds: the first one at or after each bound is the bound
    // (rounding to the nearest, as protobuf-es's timestampDate does, listed an event from before
    // `since`, left out one from before `until`, and made 9999-12-31T23:59:59.9995Z a year 10000
    // that Postgres refused).
    ...(req.since === undefined ? {} : { since: new Date(timestampCeilMs(req.since)) }),
    ...(req.until === undefined ? {} : { until: new Date(timestampCeilMs(req.until)) }),
  };
}

/**
 * Up to `limit` + 1 events of a project (or space), newest first; what has committed is numbered
 * first, so a change is listed as soon as it has committed.
 */
export async function listEvents(
  sql: Sql,
  schema: string,
  parent: string,
  q: EventQuery,
): Promise<EventRow[]> {
  // Nothing is stamped after 9999-12-31T23:59:59.999Z: a `since` beyond it matches nothing, an
  // `until` beyond it everything (and Postgres takes no year 10000 from postgres.js).
  if (q.since !== undefined && q.since.getTime() > maxTimestampMs) return [];
  if (q.until !== undefined && q.until.getTime() > maxTimestampMs) q = { ...q, until: undefined };
  await numberEvents(sql, schema);
  const where = [sql`parent = ${parent} and seq is not null`];
  if (q.before !== undefined) where.push(sql`seq < ${q.before.toString()}::bigint`);
  if (q.resource !== undefined) {
    // The resource, and those under it as a range of bytes: one range of the index
    // `events_resource` ('0' follows '/').
    where.push(sql`(resource collate "C" = ${q.resource} or (
      resource collate "C" >= ${q.resource + "/"} and resource collate "C" < ${
      q.resource + "0"
    }))`);
  }
  if (q.method !== undefined) where.push(sql`method = ${q.method}`);
  if (q.actor !== undefined) where.push(sql`actor_sub = ${q.actor}`);
  if (q.since !== undefined) where.push(sql`occurred_at >= ${q.since}`);
  if (q.until !== undefined) where.push(sql`occurred_at < ${q.until}`);
  const condition = where.reduce((a, b) => sql`${a} and ${b}`);
  return await sql<EventRow[]>`
    select ${eventColumns(sql)} from ${sql(`${schema}.events`)} e
    where ${condition}
    order by e.seq desc
    limit ${q.limit + 1}`;
}

/**
 * Deletes up to `batch` events older than `cutoff`; returns how many. Small batches: retention runs
 * beside the traffic, and a long delete would hold locks and bloat a transaction. Only numbered
 * events: {@link numberEvents} never waits for a delete, nor a delete for it.
 */
export function pruneEvents(
  sql: Sql,
  schema: string,
  cutoff: Date,
  batch = purgeBatch,
): Promise<number> {
  plainName(schema);
  return deleteBatch(
    sql,
    `${schema}.events`,
    sql`occurred_at < ${cutoff} and seq is not null`,
    batch,
  );
}

/**
 * `and <column> = <etag>` when a write is conditional (lib/resource/etag.ts), nothing otherwise:
 * the condition of a write that must find the row at the version its caller read.
 */
export function ifMatch(sql: Sql, column: string, etag: string | undefined): Fragment {
  return etag === undefined ? constant(sql, "") : sql`and ${constant(sql, column)} = ${etag}`;
}

/**
 * The SQL of a row's etag (lib/resource/etag.ts): `<schema>.etag(xmin)`, the schema's keyed digest
 * of the row's version (its `opaque_etags` migration says why), of the row `alias` (none: the
 * statement's one table). `schema` and `alias` are constants of the code.
 */
export function etagOf(schema: string, alias?: string): string {
  return `${plainName(schema)}.etag(${alias === undefined ? "" : `${plainName(alias)}.`}xmin)`;
}

/**
 * {@link ifMatch} for a row of `alias` in `schema` that expires (a secret, a key): its etag is
 * lib/resource's `expiringEtag` in SQL, by the service's clock (the write's time), not Postgres's:
 * the row's version, and the expiry's mark once `expires_at` is past.
 */
export function ifExpiringMatch(sql: Sql, schema: string, alias: string, write: Write): Fragment {
  if (write.etag === undefined) return constant(sql, "");
  const a = plainName(alias);
  return sql`and (${constant(sql, etagOf(schema, alias))} || case when ${
    constant(sql, `${a}.expires_at`)
  } <= ${write.audit.at} then ${expiredEtagSuffix} else '' end) = ${write.etag}`;
}
