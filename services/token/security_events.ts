/**
 * The token service's security events, kept in its own schema (`token.events`,
 * migrations/0009_security_events.sql) with the audit trail machinery every service shares
 * (lib/audit): numbered per project in commit order, followed by WatchEvents, pruned after
 * AUDIT_RETENTION_DAYS. The parent of an event is the project of the client it is about; `result`
 * says what happened (proto/registry/token/v1/token_service.proto, ListEvents, lists them):
 *
 * - `allowed` / `denied`: a consent page's decision (../authorization.ts, ../device.ts);
 * - `code_replayed` / `refresh_token_reused`: a family revoked because a code or a refresh token
 *   was presented again (./grants/context.ts, written by ./repository/grants.ts's revocation);
 * - `revoked`: RevokeToken revoked something (./service.ts);
 * - `authentication_failed`: a minute's summary of failed client authentications
 *   (./auth_failures.ts).
 *
 * Where the event goes with a change of the `token` schema (a family revoked, a token put on the
 * revocation list, a device code decided), it is one more common table expression of the
 * statement that makes the change ({@link eventCte}): no change commits without its event; so is
 * a consent page's Allow, with the authorization code it gives. A Deny changes nothing here (the
 * consent is the registry's), and a failure summary changes nothing at all: those are one
 * statement of their own ({@link recordEvent}).
 *
 * What an event never holds: a token, a code (authorization, device or user code), a secret, a
 * client assertion, a CSRF token, or the user's platform token; only the kinds of things and their
 * counts, the ids of resources (client, installation, an access token's `jti`), and scopes.
 *
 * @module
 */

import type { DescMethod, JsonValue } from "@bufbuild/protobuf";
import * as v from "valibot";
import {
  type AuditContext,
  auditContextFrom,
  eventCte,
  type EventTarget,
  type Fragment,
} from "../../lib/audit/mod.ts";
import type { Sql } from "../../lib/db/mod.ts";

/** The schema the events are kept in. */
export const eventSchema = "token";

/** What a security event says happened. */
export type SecurityResult =
  | "allowed"
  | "denied"
  | "code_replayed"
  | "refresh_token_reused"
  | "revoked"
  | "authentication_failed";

/**
 * The parent of the events of no project: failed authentications of client_ids that are not of
 * the registry's form, or that no project has (./auth_failures.ts). A project id starts with a
 * letter or a digit, so no project is named `-`; only callers that administer every project (`*`)
 * may list it.
 */
export const noProject = "-";

/** The project of a ListEvents or WatchEvents request: a project id, or {@link noProject}. */
export const eventsProjectId = v.union([
  v.literal(noProject),
  v.pipe(
    v.string(),
    v.regex(
      /^[A-Za-z0-9][A-Za-z0-9._~-]{0,127}$/,
      "must be a project id (1 to 128 letters, digits, '.', '_', '~' or '-', starting with a " +
        "letter or digit), or - for the events of no project",
    ),
  ),
], "must be a project id, or -");

/** The one resource the failures of unknown client_ids are counted under. */
export const unknownClientResource = `projects/${noProject}/clients/unknown`;

/** `projects/{p}/clients/{client_id}`. */
export function clientResource(projectId: string, clientId: string): string {
  return `projects/${projectId}/clients/${clientId}`;
}

/** `projects/{p}/installations/{installation_id}`. */
export function installationResource(projectId: string, installationId: string): string {
  return `projects/${projectId}/installations/${installationId}`;
}

/**
 * One field of an event's changes. A security event records what was done, not a row's before and
 * after: each field has only its new value (`[{"field": "scopes", "new": [...]}]`).
 */
export interface FieldValue {
  field: string;
  new: JsonValue;
}

/** Changes as SQL: the JSON of `values`, plus `extra` (a jsonb array in SQL) when given. */
export function changesOf(sql: Sql, values: readonly FieldValue[], extra?: Fragment): Fragment {
  // As text, cast: a parameter Postgres takes for jsonb would be JSON-encoded once more.
  const fixed = sql`${JSON.stringify(values)}::text::jsonb`;
  return extra === undefined ? fixed : sql`(${fixed} || ${extra})`;
}

/** An event that is not part of a change of the schema. */
export interface SecurityEvent {
  parent: string;
  resource: string;
  result: SecurityResult;
  changes: readonly FieldValue[];
}

/** The event CTEs (lib/audit's {@link eventCte}) of the `token` schema, for a repository's statement. */
export function securityEventCtes(
  sql: Sql,
  audit: AuditContext,
  target: EventTarget & { result: SecurityResult },
): Fragment {
  return eventCte(sql, eventSchema, audit, target);
}

/**
 * Writes one event on its own: one statement (one round trip), whose `from` is a one-row `select`.
 */
export async function recordEvent(
  sql: Sql,
  audit: AuditContext,
  event: SecurityEvent,
): Promise<void> {
  await sql`
    with one as (select 1), ${
    securityEventCtes(sql, audit, {
      parent: event.parent,
      resource: event.resource,
      from: sql`one`,
      changes: changesOf(sql, event.changes),
      result: event.result,
    })
  }
    select 1`;
}

/** The parts of a call an event's context is read from (a HandlerContext, or an interceptor's request). */
export interface CallOf {
  header: Headers;
  method: DescMethod;
}

/** The audit context of a call made by an authenticated OAuth client (`sub` is its client_id). */
export function clientActorOf(
  ctx: { requestHeader: Headers; method: DescMethod },
  clientId: string,
  now: number,
): AuditContext {
  return auditContextFrom({ header: ctx.requestHeader, method: ctx.method }, {
    sub: clientId,
    clientId,
  }, now);
}
