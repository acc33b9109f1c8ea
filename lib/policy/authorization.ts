/**
 * Authorization: one rule per method, declared in a table next to each service (its `policy.ts`),
 * and checked by one interceptor before the call reaches idempotency or the handler. So every path
 * a call can take, a replayed idempotent outcome included, is authorized the same way, and a
 * method without a rule cannot be served: the table must name every method of its service (checked
 * when the process starts), and a call to a method no table names is PERMISSION_DENIED.
 *
 * A rule sees the decoded request and the authenticated caller, and throws to refuse
 * (PERMISSION_DENIED, or NOT_FOUND where saying "forbidden" would reveal that something exists).
 * Rules that only scope data (a caller sees only its own account's installations) are
 * {@link authenticated}: the handler's queries are filtered by the caller, so there is nothing to
 * refuse up front.
 *
 * @module
 */

import type { DescMethod, DescService, MessageShape } from "@bufbuild/protobuf";
import type { GenService, GenServiceMethods } from "@bufbuild/protobuf/codegenv2";
import { Code, ConnectError, type ContextValues, type Interceptor } from "@connectrpc/connect";
import { createAsyncIterable } from "@connectrpc/connect/protocol";
import { administers, type Caller, callerOf } from "./auth.ts";

/** Refuses a call (throws) unless the caller may make it. */
export type Rule<I = unknown> = (
  req: I,
  caller: Caller,
  values: ContextValues,
) => void | Promise<void>;

/** A service's rules, one per method, by the method's local name. */
export type Policy<S extends GenService<GenServiceMethods>> = {
  [K in keyof S["method"]]: Rule<MessageShape<S["method"][K]["input"]>>;
};

/** A service with its policy, as the authorization interceptor takes it. */
export interface ServicePolicy {
  /** The service. */
  service: DescService;
  /** Its rules by method local name. */
  rules: Record<string, Rule<never>>;
}

/** Pairs a service with its policy, checking the rules' request types. */
export function policyOf<S extends GenService<GenServiceMethods>>(
  service: S,
  rules: Policy<S>,
): ServicePolicy {
  return { service, rules: rules as unknown as Record<string, Rule<never>> };
}

/** Any authenticated caller; what it may see is scoped by the handler's queries. */
export const authenticated: Rule = () => {};

/** Callers that administer the request's project (its `projectId` field). */
export const projectAdmin: Rule<{ projectId: string }> = (req, caller) => {
  requireProject(caller, req.projectId);
};

/**
 * Callers whose token names a space (the core area's only tenancy: its queries are scoped to the
 * caller's space).
 */
export const inSpace: Rule = (_req, caller) => {
  if (caller.space === undefined) {
    throw new ConnectError(
      "The token has no space claim; the core area needs one",
      Code.PermissionDenied,
    );
  }
};

/** Throws PERMISSION_DENIED unless the caller administers the project. */
export function requireProject(caller: Caller, projectId: string): void {
  if (!administers(caller, projectId)) {
    throw new ConnectError(
      `The token does not grant access to project ${projectId}`,
      Code.PermissionDenied,
    );
  }
}

/**
 * The authorization interceptor over the services' policies. Throws at once (the process does not
 * start) when a policy leaves a method of its service without a rule.
 */
export function authorization(policies: readonly ServicePolicy[]): Interceptor {
  const rules = new Map<DescMethod, Rule>();
  for (const { service, rules: table } of policies) {
    for (const method of service.methods) {
      const rule = table[method.localName];
      if (typeof rule !== "function") {
        throw new Error(`No authorization rule for ${service.typeName}/${method.name}`);
      }
      rules.set(method, rule as Rule);
    }
  }
  return (next) => async (req) => {
    const rule = rules.get(req.method);
    if (!rule || (req.stream && req.method.methodKind !== "server_streaming")) {
      throw new ConnectError(
        `${req.service.typeName}/${req.method.name} has no authorization rule`,
        Code.PermissionDenied,
      );
    }
    const caller = callerOf({ values: req.contextValues });
    if (!req.stream) {
      await rule(req.message, caller, req.contextValues);
      return await next(req);
    }
    // A server-streaming call has one request message: read it, check it, hand it on.
    const first = await req.message[Symbol.asyncIterator]().next();
    if (first.done) throw new ConnectError("the request has no message", Code.InvalidArgument);
    await rule(first.value, caller, req.contextValues);
    return await next({ ...req, message: createAsyncIterable([first.value]) });
  };
}
