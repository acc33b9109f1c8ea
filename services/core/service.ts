/**
 * The CoreService handlers: validate, call a repository scoped to the caller's space, map rows to
 * messages. Who may call what is decided before a handler runs, by ./policy.ts in the process's
 * interceptor list (./main.ts).
 *
 * @module
 */

import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import {
  CoreService,
  CreateJourneyRequestSchema,
  CreateRoleRequestSchema,
  CreateUnitRequestSchema,
  ListEventsRequestSchema,
  ListJourneysRequestSchema,
  ListRolesRequestSchema,
  ListUnitsRequestSchema,
  WatchEventsRequestSchema,
} from "../../gen/registry/core/v1/core_service_pb.ts";
import type { JourneySchema } from "../../gen/registry/core/v1/journey_pb.ts";
import type { RoleSchema } from "../../gen/registry/core/v1/role_pb.ts";
import {
  type Unit,
  UnitPrioritySchema,
  type UnitSchema,
  UnitStatusSchema,
} from "../../gen/registry/core/v1/unit_pb.ts";
import {
  type EventFeed,
  type EventFields,
  type EventRow,
  eventRowSize,
  idField,
  listEvents,
  readCursor,
  readEventQuery,
  timestampField,
  toEvent,
  type Write,
  writeOf,
} from "../../lib/audit/mod.ts";
import type { Sql } from "../../lib/db/mod.ts";
import { enumName, enumNumber } from "../../lib/resource/mod.ts";
import { invalidArgument, noCache, notFound } from "../../lib/platform/mod.ts";
import { ids } from "./ids.ts";
import {
  pageOf,
  pathUuid,
  readPage,
  timestampFloorMs,
  timestampOf,
} from "../../lib/resource/mod.ts";
import { callerOf, type Recovery } from "../../lib/policy/mod.ts";
import { validate } from "../../lib/resource/mod.ts";
import {
  createJourneyRepository,
  type JourneyFields,
  type JourneyRow,
} from "./repository/journeys.ts";
import { createRoleRepository, type RoleFields, type RoleRow } from "./repository/roles.ts";
import {
  createUnitRepository,
  type UnitFields,
  type UnitRepository,
  type UnitRow,
} from "./repository/units.ts";
import { journeyInput, roleFilter, roleInput, unitFilter, unitInput } from "./validation.ts";
import * as v from "valibot";

/** The caller's space (./policy.ts has refused callers without one). */
function spaceOf(ctx: Pick<HandlerContext, "values">): string {
  const space = callerOf(ctx).space;
  if (space === undefined) throw new ConnectError("No space in the call", Code.Internal);
  return space;
}

function toRole(row: RoleRow): MessageInitShape<typeof RoleSchema> {
  const role: MessageInitShape<typeof RoleSchema> = {
    object: "role",
    id: ids.role.fromUuid(row.id),
    createdAt: timestampOf(row.created_at),
    updatedAt: timestampOf(row.updated_at),
    name: row.name,
    resourceType: row.resource_type,
    permissions: row.permissions,
    etag: row.etag,
  };
  if (row.description !== null) role.description = row.description;
  return role;
}

function toJourney(row: JourneyRow): MessageInitShape<typeof JourneySchema> {
  const journey: MessageInitShape<typeof JourneySchema> = {
    object: "journey",
    id: ids.journey.fromUuid(row.id),
    createdAt: timestampOf(row.created_at),
    updatedAt: timestampOf(row.updated_at),
    owner: row.owner,
    name: row.name,
    description: row.description,
    active: row.active,
    etag: row.etag,
  };
  if (row.parent_id !== null) journey.parent = ids.journey.fromUuid(row.parent_id);
  return journey;
}

// Fields without a value are set after the literal rather than spread into it: a spread took
// about ten times the time of the rest of a unit's mapping.
function toUnit(row: UnitRow): MessageInitShape<typeof UnitSchema> {
  const unit: MessageInitShape<typeof UnitSchema> = {
    object: "unit",
    id: ids.unit.fromUuid(row.id),
    createdAt: timestampOf(row.created_at),
    updatedAt: timestampOf(row.updated_at),
    journey: ids.journey.fromUuid(row.journey_id),
    originator: row.originator,
    title: row.title,
    status: enumNumber(UnitStatusSchema, row.status)!,
    priority: enumNumber(UnitPrioritySchema, row.priority)!,
    etag: row.etag,
  };
  if (row.assignee !== null) unit.assignee = row.assignee;
  if (row.description !== null) unit.description = row.description;
  if (row.due_at !== null) unit.dueAt = timestampOf(row.due_at);
  return unit;
}

/**
 * The core area's stored columns that its events show otherwise: a journey's `parent_id` and a
 * unit's `journey_id` as the API's `parent` and `journey` (TypeIDs, not UUIDs), and `due_at` as
 * the API writes timestamps. Every other column an event shows is the resource's field of that
 * name, stored as the API writes it.
 */
const eventFields: EventFields = {
  parent_id: idField("parent", ids.journey),
  journey_id: idField("journey", ids.journey),
  due_at: timestampField,
};

/** An event as the API shows it. */
const eventOf = (row: EventRow) => toEvent(row, eventFields);

/** Validates a role given in a request; `desc` names the request for field paths. */
function roleFields(req: { role?: unknown }, desc: typeof CreateRoleRequestSchema): RoleFields {
  const role = validate(v.object({ role: roleInput }), desc, req).role;
  return {
    name: role.name,
    description: role.description ?? null,
    resource_type: role.resourceType,
    permissions: role.permissions,
  };
}

/** What the CoreService handlers need. */
export interface CoreDeps {
  sql: Sql;
  /** The service's clock (ms since the epoch; default `Date.now`). */
  now?: () => number;
  /** The change feed WatchEvents serves (none: WatchEvents is UNAVAILABLE). */
  feed?: EventFeed;
  /**
   * The units, when not read from `sql` alone: GetUnit reads them through memory (./unit_cache.ts);
   * every other read goes to Postgres, and writes go through it so that it forgets what changed.
   */
  units?: UnitRepository | undefined;
}

/**
 * How each create whose idempotent outcome was lost is answered again (lib/policy's `Recovery`):
 * the record its change named (the last segment of the name is its id), as it is now in Postgres,
 * in the caller's space; undefined when it is gone.
 */
export function coreRecoveries(sql: Sql): Recovery[] {
  const roles = createRoleRepository(sql);
  const journeys = createJourneyRepository(sql);
  const units = createUnitRepository(sql);
  const reading = <R>(
    kind: { toUuid(id: string): string | undefined },
    get: (space: string, uuid: string) => Promise<R | undefined>,
    answer: (row: R) => object,
  ): Recovery[1] =>
  async (resource, req) => {
    const uuid = kind.toUuid(resource.slice(resource.lastIndexOf("/") + 1));
    const row = uuid === undefined
      ? undefined
      : await get(spaceOf({ values: req.contextValues }), uuid);
    return row === undefined ? undefined : answer(row);
  };
  return [
    [
      CoreService.method.createRole,
      reading(ids.role, (s, id) => roles.get(s, id), (row) => ({ role: toRole(row) })),
    ],
    [
      CoreService.method.createJourney,
      reading(ids.journey, (s, id) => journeys.get(s, id), (row) => ({ journey: toJourney(row) })),
    ],
    [
      CoreService.method.createUnit,
      reading(ids.unit, (s, id) => units.get(s, id), (row) => ({ unit: toUnit(row) })),
    ],
  ];
}

/** Creates the CoreService handlers. */
export function createCore(deps: CoreDeps): ServiceImpl<typeof CoreService> {
  const roles = createRoleRepository(deps.sql);
  const journeys = createJourneyRepository(deps.sql);
  const stored = createUnitRepository(deps.sql);
  const units = deps.units ?? stored;
  const now = deps.now ?? Date.now;
  /** What a write records (who, from where, when), and the etag it is conditional on. */
  const writing = (ctx: HandlerContext, etag?: string, field?: string): Write =>
    writeOf(ctx, now(), etag, field);

  /** Resolves a journey id given in a request to its UUID, or NOT_FOUND (other spaces too). */
  async function journeyRef(space: string, id: string): Promise<string> {
    const uuid = pathUuid(ids.journey, "journey", id);
    if (!(await journeys.get(space, uuid))) throw notFound("journey", id);
    return uuid;
  }

  function roleTaken(error: unknown, role: RoleFields): never {
    if ((error as { code?: string }).code === "23505") {
      throw new ConnectError(
        `A role named ${role.name} already exists for resource type ${role.resource_type}`,
        Code.AlreadyExists,
      );
    }
    throw error;
  }

  async function journeyFields(
    ctx: HandlerContext,
    space: string,
    req: { journey?: unknown },
  ): Promise<JourneyFields> {
    const journey = validate(v.object({ journey: journeyInput }), CreateJourneyRequestSchema, req)
      .journey;
    return {
      owner: journey.owner ?? callerOf(ctx).subject,
      parent_id: journey.parent === undefined ? null : await journeyRef(space, journey.parent),
      name: journey.name,
      description: journey.description,
      active: journey.active,
    };
  }

  /**
   * A journey's write that tripped its parent's foreign key (23503): the parent was deleted
   * after it was looked up, so it is as missing as if it had been gone before.
   */
  const parentGone = (parent: string | undefined) => (error: unknown): never => {
    const { code, constraint_name } = error as { code?: string; constraint_name?: string };
    if (code === "23503" && constraint_name === "journeys_parent_id_fkey" && parent) {
      throw notFound("journey", parent);
    }
    throw error;
  };

  /** A unit's fields from a request; its journey is not looked up (the write does it). */
  function unitFields(req: { unit?: Unit | undefined }): UnitFields {
    const unit = validate(v.object({ unit: unitInput }), CreateUnitRequestSchema, req).unit;
    return {
      journey_id: pathUuid(ids.journey, "journey", unit.journey),
      title: unit.title,
      assignee: unit.assignee ?? null,
      status: enumName(UnitStatusSchema, unit.status)!,
      priority: enumName(UnitPrioritySchema, unit.priority)!,
      description: unit.description ?? null,
      // Stored to the millisecond, truncated: never later than asked, nor past year 9999.
      due_at: unit.dueAt === undefined ? null : new Date(timestampFloorMs(unit.dueAt)),
    };
  }

  return {
    async createRole(req, ctx) {
      const space = spaceOf(ctx);
      const fields = roleFields(req, CreateRoleRequestSchema);
      const role = { id: ids.role.generate().uuid, space, ...fields };
      const row = await roles.create(role, writing(ctx)).catch((e) => roleTaken(e, fields));
      return { role: toRole(row) };
    },

    async getRole(req, ctx) {
      const row = await roles.get(spaceOf(ctx), pathUuid(ids.role, "role", req.roleId));
      if (!row) throw notFound("role", req.roleId);
      return { role: toRole(row) };
    },

    async listRoles(req, ctx) {
      const space = spaceOf(ctx);
      const { resourceType } = validate(roleFilter, ListRolesRequestSchema, req);
      const { limit, after } = await readPage(
        req,
        ListRolesRequestSchema,
        ids.role,
        "role",
        (uuid) => roles.isCursor(space, uuid),
      );
      return {
        object: "list",
        ...pageOf(await roles.list(space, resourceType, limit, after), limit, toRole),
      };
    },

    async updateRole(req, ctx) {
      const space = spaceOf(ctx);
      const uuid = pathUuid(ids.role, "role", req.roleId);
      const fields = roleFields(req, CreateRoleRequestSchema);
      const row = await roles.replace(
        space,
        uuid,
        fields,
        writing(ctx, req.role?.etag, "role.etag"),
      )
        .catch((e) => roleTaken(e, fields));
      if (!row) throw notFound("role", req.roleId);
      return { role: toRole(row) };
    },

    async deleteRole(req, ctx) {
      const space = spaceOf(ctx);
      const uuid = pathUuid(ids.role, "role", req.roleId);
      if (!(await roles.delete(space, uuid, writing(ctx, req.etag)))) {
        throw notFound("role", req.roleId);
      }
      return {};
    },

    async createJourney(req, ctx) {
      const space = spaceOf(ctx);
      const fields = await journeyFields(ctx, space, req);
      const row = await journeys.create(
        { id: ids.journey.generate().uuid, space, ...fields },
        writing(ctx),
      ).catch(parentGone(req.journey?.parent));
      return { journey: toJourney(row) };
    },

    async getJourney(req, ctx) {
      const row = await journeys.get(spaceOf(ctx), pathUuid(ids.journey, "journey", req.journeyId));
      if (!row) throw notFound("journey", req.journeyId);
      return { journey: toJourney(row) };
    },

    async listJourneys(req, ctx) {
      const space = spaceOf(ctx);
      if (req.parent === "") {
        throw invalidArgument([{
          field: "parent",
          description: "must be a journey's id (leave it out to list every journey)",
        }]);
      }
      const parentId = req.parent === undefined ? undefined : await journeyRef(space, req.parent);
      const { limit, after } = await readPage(
        req,
        ListJourneysRequestSchema,
        ids.journey,
        "journey",
        (uuid) => journeys.isCursor(space, uuid),
      );
      const rows = await journeys.list(space, { parentId, active: req.active }, limit, after);
      return { object: "list", ...pageOf(rows, limit, toJourney) };
    },

    async updateJourney(req, ctx) {
      const space = spaceOf(ctx);
      const uuid = pathUuid(ids.journey, "journey", req.journeyId);
      const fields = await journeyFields(ctx, space, req); // the body first, as for a role
      if (fields.parent_id === uuid) {
        throw invalidArgument([{
          field: "journey.parent",
          description: "must not be the journey",
        }]);
      }
      if (!(await journeys.get(space, uuid))) throw notFound("journey", req.journeyId);
      const result = await journeys.replace(
        space,
        uuid,
        fields,
        writing(ctx, req.journey?.etag, "journey.etag"),
      ).catch(parentGone(req.journey?.parent));
      if (result === "not_found") throw notFound("journey", req.journeyId);
      if (result === "no_parent") throw notFound("journey", req.journey!.parent!);
      if (result === "cycle") {
        // Refused for what the tree is now, not for the request itself (which another order of
        // the same changes would have accepted): FAILED_PRECONDITION, not INVALID_ARGUMENT.
        throw new ConnectError(
          `Journey ${req.journey!.parent} descends from journey ${req.journeyId}, so it cannot ` +
            "be its parent; move it elsewhere first",
          Code.FailedPrecondition,
        );
      }
      if (typeof result === "string") throw new ConnectError(result, Code.Internal);
      return { journey: toJourney(result) };
    },

    async deleteJourney(req, ctx) {
      const uuid = pathUuid(ids.journey, "journey", req.journeyId);
      const write = writing(ctx, req.etag);
      const result = await journeys.delete(spaceOf(ctx), uuid, write).catch((e) => {
        // A unit or child added while the delete ran trips a foreign key instead: which one
        // says which (tests/concurrency_test.ts).
        const { code, constraint_name } = e as { code?: string; constraint_name?: string };
        if (code !== "23503") throw e;
        return constraint_name === "journeys_parent_id_fkey"
          ? "has_children" as const
          : "has_units" as const;
      });
      if (result === "not_found") throw notFound("journey", req.journeyId);
      if (result === "has_children" || result === "has_units") {
        throw new ConnectError(
          `Journey ${req.journeyId} still has ${
            result === "has_units" ? "units" : "child journeys"
          }; delete or move them first`,
          Code.FailedPrecondition,
        );
      }
      return {};
    },

    async createUnit(req, ctx) {
      const space = spaceOf(ctx);
      const fields = unitFields(req);
      const row = await stored.create({
        id: ids.unit.generate().uuid,
        space,
        originator: callerOf(ctx).subject,
        ...fields,
      }, writing(ctx));
      if (!row) throw notFound("journey", req.unit!.journey);
      return { unit: toUnit(row) };
    },

    async getUnit(req, ctx) {
      // `cache-control: no-cache` (RFC 9111 5.2.1.4): read Postgres, not the replica's memory.
      const from = noCache(ctx.requestHeader) ? stored : units;
      const row = await from.get(spaceOf(ctx), pathUuid(ids.unit, "unit", req.unitId));
      if (!row) throw notFound("unit", req.unitId);
      return { unit: toUnit(row) };
    },

    async listUnits(req, ctx) {
      const space = spaceOf(ctx);
      const filter = validate(unitFilter, ListUnitsRequestSchema, req);
      const journeyId = await journeyRef(space, filter.journey);
      const { limit, after } = await readPage(
        req,
        ListUnitsRequestSchema,
        ids.unit,
        "unit",
        (uuid) => stored.isCursor(journeyId, uuid),
      );
      const rows = await stored.list(
        journeyId,
        {
          status: filter.status === undefined
            ? undefined
            : enumName(UnitStatusSchema, filter.status),
          assignee: filter.assignee,
        },
        limit,
        after,
      );
      return { object: "list", ...pageOf(rows, limit, toUnit) };
    },

    async updateUnit(req, ctx) {
      const space = spaceOf(ctx);
      const uuid = pathUuid(ids.unit, "unit", req.unitId);
      const fields = unitFields(req); // the body first, as for a role
      if (!(await stored.get(space, uuid))) throw notFound("unit", req.unitId);
      fields.journey_id = await journeyRef(space, req.unit!.journey);
      const write = writing(ctx, req.unit?.etag, "unit.etag");
      const row = await units.replace(space, uuid, fields, write).catch((error) => {
        if ((error as { code?: string }).code === "23503") {
          throw notFound("journey", req.unit!.journey);
        }
        throw error;
      });
      if (!row) throw notFound("unit", req.unitId);
      return { unit: toUnit(row) };
    },

    async deleteUnit(req, ctx) {
      const space = spaceOf(ctx);
      const uuid = pathUuid(ids.unit, "unit", req.unitId);
      if (!(await units.delete(space, uuid, writing(ctx, req.etag)))) {
        throw notFound("unit", req.unitId);
      }
      return {};
    },

    async listEvents(req, ctx) {
      const space = spaceOf(ctx);
      const query = readEventQuery(req, ListEventsRequestSchema);
      const rows = await listEvents(deps.sql, "core", space, query);
      return pageOf(rows, query.limit, eventOf, eventRowSize);
    },

    async *watchEvents(req, ctx) {
      const space = spaceOf(ctx);
      if (!deps.feed) {
        throw new ConnectError("This process serves no change feed", Code.Unavailable);
      }
      const after = readCursor(req.after, WatchEventsRequestSchema) ?? 0n;
      for await (const rows of deps.feed.watch(space, after, ctx.signal)) {
        for (const row of rows) yield { event: eventOf(row) };
      }
    },
  };
}
