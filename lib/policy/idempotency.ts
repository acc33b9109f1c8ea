/**
 * Idempotency keys with Stripe's semantics, enforced by the services (internal gRPC callers never
 * pass the gateway): a create RPC called with `idempotency-key` metadata (the gateway forwards the
 * HTTP `Idempotency-Key` header) runs at most once per caller, RPC and key within the key's
 * lifetime (`IDEMPOTENCY_TTL_SECONDS`, default 24 h):
 *
 * - the same key with the same request message replays the stored outcome, the response or the
 *   error, with `idempotent-replayed: true` response metadata (the gateway answers the same status
 *   with an `Idempotent-Replayed: true` header);
 * - the same key with a different request message is INVALID_ARGUMENT with a google.rpc.ErrorInfo
 *   whose reason is {@link keyReusedReason} (HTTP 422);
 * - while the first request with a key is still running, a duplicate is ABORTED with reason
 *   {@link keyInUseReason} (HTTP 409, "a request with this key is in progress"), as Stripe does;
 *   it is safe to retry it, and the retry replays the outcome once it is stored;
 * - a key is 1..255 printable ASCII characters but the comma (else INVALID_ARGUMENT, HTTP 400),
 *   sent bare (`k`, as Stripe's clients do) or as the draft's sf-string (`"k"`): the same key;
 * - a key older than the lifetime is forgotten: the request runs again as a new one.
 *
 * What is stored (as Stripe: an outcome is saved once the endpoint started executing): the response,
 * or an error that says something about the state (NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION,
 * INTERNAL...). Not saved, so a retry with the same key runs again: INVALID_ARGUMENT (validation),
 * UNAUTHENTICATED and PERMISSION_DENIED (rejected before executing) and the transient codes
 * (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELED, ABORTED, RESOURCE_EXHAUSTED), which our handlers
 * raise with their transaction rolled back.
 *
 * Keys are scoped by the caller's tenancy claims (`sub`, `account_id`, `space`: the same `sub` in
 * another space or account is another caller) and the token's `client_id` and `installation_id`
 * (the same user through another app is another caller), by the RPC and by the key. The
 * interceptor runs after authorization, so a replay is authorized exactly as a first call (a token
 * that lost access to a project does not get the project's record back); a method can leave
 * secrets out of what is stored (a {@link Redaction}).
 *
 * Each service stores its keys in its own schema, table `idempotency_keys` (a migration of each
 * service; the store is lib/db's `createIdempotencyStore`), as (caller, rpc, key, request hash,
 * response bytes or error, created_at). Expired rows are purged opportunistically, at most once a
 * minute per process, a thousand at a time until none is left.
 *
 * The handler's change and the stored outcome are two transactions: the process can die, or
 * storing the outcome can fail, after the change committed. So the change marks the key itself:
 * while the owner runs, the call's context holds the key ({@link heldKeyOf}), lib/audit's audit
 * context carries it, and the statement that writes the change's event (every change writes one,
 * in the same statement) also sets the key's `effect` to the name of the resource it changed. A
 * key whose effect is marked is never run again, whether its outcome was stored or not:
 *
 * - stored: it is replayed as above;
 * - not stored (lost): a retry with the same request, before or after the key's lock
 *   ({@link IdempotencyOptions.lockSeconds}, 60 s), is answered from the resource as it is now,
 *   read by the method's {@link Recovery} and stripped by its {@link Redaction} as a stored
 *   response would be (a one-time secret or private key is not shown again), with
 *   `idempotent-replayed: true`; when the method has no recovery or the resource is gone since, it
 *   is FAILED_PRECONDITION with reason {@link outcomeLostReason} (HTTP 409) and the resource's name
 *   in the ErrorInfo's `resource` metadata: the request completed, and is not run again.
 *
 * A key whose owner died before its change committed (no effect) is in progress until its lock
 * expires; after that a retry with the same request takes the key over and runs it. An owner that
 * was only slow cannot commit after that: its statement finds the key taken and fails (ABORTED,
 * not stored), so the create still runs once.
 *
 * @module
 */

import {
  clone,
  create,
  type DescMethod,
  type DescMethodUnary,
  type DescService,
  fromBinary,
  getOption,
  hasOption,
  type Message,
} from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  type ContextValues,
  createContextKey,
  type Interceptor,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";
import * as v from "valibot";
import { http } from "../../gen/google/api/annotations_pb.ts";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.ts";
import { answerWith, encodeMessage } from "../rpc/mod.ts";
import { type Caller, callerOf } from "./auth.ts";
import { positiveInt, sha256 } from "../platform/mod.ts";
import { errorDomain, toConnectError } from "../platform/mod.ts";
import type { Logger } from "../platform/mod.ts";

/** The metadata (and, through the gateway, HTTP header) carrying the key. */
export const keyHeader = "idempotency-key";
/** The response metadata set on a replayed outcome. */
export const replayedHeader = "idempotent-replayed";
/** ErrorInfo reason: the key was used with a different request (HTTP 422). */
export const keyReusedReason = "IDEMPOTENCY_KEY_REUSED";
/** ErrorInfo reason: a request with the key is still running (HTTP 409). */
export const keyInUseReason = "IDEMPOTENCY_KEY_IN_USE";
/**
 * ErrorInfo reason: the request with the key completed (its change committed, the resource in the
 * `resource` metadata) but its response was lost and cannot be given again (HTTP 409).
 */
export const outcomeLostReason = "IDEMPOTENCY_OUTCOME_LOST";

/** The key a call holds while it runs as the key's owner: what its change marks. */
export interface HeldKey {
  /** The caller's scope ({@link callerScope}). */
  caller: string;
  /** The RPC, `package.Service/Method`. */
  rpc: string;
  /** The key. */
  key: string;
  /** The owner the claim drew. */
  owner: string;
}

const heldKey = createContextKey<HeldKey | undefined>(undefined, { description: "held key" });

/** The idempotency key the call holds as its owner, or undefined (no key, or not a create). */
export function heldKeyOf(values: ContextValues): HeldKey | undefined {
  return values.get(heldKey);
}

/** The settings of the services that store keys. */
export const idempotencySettings = {
  /** How long a key is remembered (default 24 h). */
  IDEMPOTENCY_TTL_SECONDS: positiveInt(24 * 60 * 60),
};

/** Printable ASCII but the comma: a key sent in two header lines arrives joined by one. */
const keyPattern = /^[\x20-\x2b\x2d-\x7e]{1,255}$/;

/** Outcomes that are not stored: nothing ran, or what ran was rolled back, so retrying is safe. */
const notStored = new Set<Code>([
  Code.InvalidArgument,
  Code.Unauthenticated,
  Code.PermissionDenied,
  Code.Unavailable,
  Code.DeadlineExceeded,
  Code.Canceled,
  Code.Aborted,
  Code.ResourceExhausted,
]);

/** Options of {@link createIdempotencyStore}. */
export interface IdempotencyOptions {
  /** The service's schema, holding the `idempotency_keys` table. */
  schema: string;
  /** How long a key is remembered, in seconds. */
  ttlSeconds: number;
  /** How long a key whose request never finished stays locked, in seconds (default 60). */
  lockSeconds?: number;
  /** Least time between two purges of expired keys, in milliseconds (default 60,000). */
  purgeIntervalMs?: number;
  /** Where failures to store an outcome are reported. */
  log: Logger;
}

/** A stored error: code, message and the details as (type, base64 bytes). */
export interface StoredError {
  code: number;
  message: string;
  details: { type: string; value: string }[];
}

/** What a claim found. */
export type Claim =
  | { kind: "owner"; owner: string }
  | {
    kind: "existing";
    hash: Uint8Array;
    response: Uint8Array | null;
    error: StoredError | null;
    completed: boolean;
    /** The resource the request's change named, once it committed; null before, or for none. */
    effect: string | null;
  }
  | { kind: "gone" };

/** A service's key table. */
export interface IdempotencyStore {
  /** Takes the key (a new or expired one), or returns the row that holds it. */
  claim(caller: string, rpc: string, key: string, hash: Uint8Array): Promise<Claim>;
  /** Stores the outcome of the owner's execution. */
  complete(
    caller: string,
    rpc: string,
    key: string,
    owner: string,
    outcome: { response: Uint8Array } | { error: StoredError },
  ): Promise<void>;
  /**
   * Forgets a key whose outcome is not stored, unless its change committed (its effect is
   * marked): that one stays, and a retry is answered from its effect.
   */
  release(caller: string, rpc: string, key: string, owner: string): Promise<void>;
  /** Deletes up to 1,000 expired keys; returns how many. */
  purge(): Promise<number>;
  /** Options, for the wrapper. */
  readonly options: IdempotencyOptions;
}

/** An sf-string (RFC 8941 3.3.3): printable ASCII in quotes, `"` and `\` escaped by a `\`. */
const sfString = /^"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"$/;

/**
 * The key of the request, undefined without one; INVALID_ARGUMENT when malformed. The draft's
 * form, an sf-string (`"k"`), and the bare form most clients send (`k`) are the same key `k`: a
 * value that starts with a quote must be one sf-string, whose escapes are unescaped.
 */
export function requestKey(header: Headers): string | undefined {
  const value = header.get(keyHeader);
  if (value === null) return undefined;
  const quoted = value.startsWith('"') ? sfString.exec(value)?.[1] ?? "" : undefined;
  const key = quoted === undefined ? value : quoted.replace(/\\(["\\])/g, "$1");
  if (!keyPattern.test(key)) {
    throw new ConnectError(
      "The Idempotency-Key must be sent once, 1 to 255 printable ASCII characters but the comma, " +
        'bare or as a quoted string ("...")',
      Code.InvalidArgument,
    );
  }
  return key;
}

/**
 * The caller's scope of keys: its tenancy claims and, when the token was issued to an OAuth client
 * or an installation, those (another app of the same user is another caller), unambiguously
 * joined (without either, the three claims alone, as keys stored earlier were scoped).
 */
export function callerScope(caller: Caller): string {
  const scope = [caller.subject, caller.accountId, caller.space ?? null];
  if (caller.clientId !== undefined || caller.installationId !== undefined) {
    scope.push(caller.clientId ?? null, caller.installationId ?? null);
  }
  return JSON.stringify(scope);
}

function reasoned(
  message: string,
  code: Code,
  reason: string,
  metadata?: Record<string, string>,
): ConnectError {
  return new ConnectError(message, code, undefined, [
    { desc: ErrorInfoSchema, value: { reason, domain: errorDomain, metadata } },
  ]);
}

function toStored(error: ConnectError): StoredError {
  return {
    code: error.code,
    message: error.rawMessage,
    details: error.details.map((d) => {
      const bytes = "desc" in d ? encodeMessage(d.desc, create(d.desc, d.value)) : d.value;
      return {
        type: "desc" in d ? d.desc.typeName : d.type,
        value: btoa(String.fromCharCode(...bytes)),
      };
    }),
  };
}

function fromStored(stored: StoredError): ConnectError {
  const error = new ConnectError(stored.message, stored.code as Code, {
    [replayedHeader]: "true",
  });
  for (const d of stored.details) {
    error.details.push({
      type: d.type,
      value: Uint8Array.from(atob(d.value), (c) => c.charCodeAt(0)),
    });
  }
  return error;
}

/** The unary methods of a service that `google.api.http` maps to POST: the creates. */
export function postMethods(service: DescService): DescMethodUnary[] {
  return service.methods.filter((m): m is DescMethodUnary =>
    m.methodKind === "unary" && hasOption(m, http) && getOption(m, http).pattern.case === "post"
  );
}

/** What to store of a method's response (e.g. without a secret); the caller gets it whole. */
export type Redaction = readonly [method: DescMethodUnary, redact: (res: Message) => Message];

/**
 * How a method's response is made again when its request completed but the outcome was lost:
 * `read` answers the resource named `resource` (the effect its change marked) as it is now, as the
 * method's response (a message or an initializer), for the call `req` (authorized as the first
 * one was: the same caller and request), or undefined when it is gone. The answer is stripped by
 * the method's {@link Redaction} before it is sent.
 */
export type Recovery = readonly [
  method: DescMethodUnary,
  read: (resource: string, req: UnaryRequest) => Promise<object | undefined>,
];

/**
 * The idempotency interceptor for the POST methods of `services` (see {@link postMethods}), keys
 * kept in `store`. It runs after authentication and authorization (it scopes keys by the caller,
 * and a replay must be as authorized as a first call), right before the handler.
 */
export function idempotency(
  store: IdempotencyStore,
  services: readonly DescService[],
  redactions: readonly Redaction[] = [],
  recoveries: readonly Recovery[] = [],
): Interceptor {
  const posts = new Set<DescMethod>(services.flatMap(postMethods));
  const byMethod = <F>(list: readonly (readonly [DescMethodUnary, F])[]) => {
    const out = new Map<DescMethod, F>();
    for (const [method, fn] of list) {
      if (!posts.has(method)) {
        throw new Error(`Cannot make ${method.name} idempotent: it is not a POST method`);
      }
      out.set(method, fn);
    }
    return out;
  };
  const redact = byMethod(redactions);
  const recover = byMethod(recoveries);
  /** What is kept of a response: all of it, or what its redaction leaves. */
  const kept = (method: DescMethodUnary, output: Message) => {
    const strip = redact.get(method);
    return strip ? strip(clone(method.output, create(method.output, output))) : output;
  };
  const purgeEvery = store.options.purgeIntervalMs ?? 60_000;
  let lastPurge = 0;
  const log = store.options.log;

  return (next) => async (req) => {
    if (req.stream || !posts.has(req.method)) return await next(req);
    const key = requestKey(req.header);
    if (key === undefined) return await next(req);
    const method = req.method as DescMethodUnary;
    const rpc = `${req.service.typeName}/${method.name}`;
    const scope = callerScope(callerOf({ values: req.contextValues }));
    const hash = sha256(encodeMessage(method.input, req.message));
    if (Date.now() - lastPurge >= purgeEvery) {
      lastPurge = Date.now();
      store.purge().then(
        (n) => n > 0 && log.info("purged expired idempotency keys", { count: n }),
        (error) => log.warn("cannot purge idempotency keys", { error }),
      );
    }
    let claim: Claim = { kind: "gone" };
    // "gone": the owner released the key between our two statements; claim it again.
    for (let attempt = 0; attempt < 3 && claim.kind !== "owner"; attempt++) {
      claim = await store.claim(scope, rpc, key, hash);
      if (claim.kind === "gone") continue;
      if (claim.kind === "existing") {
        if (!equal(claim.hash, hash)) {
          throw reasoned(
            "This Idempotency-Key was used with a different request; use a new key",
            Code.InvalidArgument,
            keyReusedReason,
          );
        }
        let answer: Message;
        if (claim.completed) {
          if (claim.error) throw fromStored(claim.error);
          answer = fromBinary(method.output, claim.response ?? new Uint8Array());
        } else if (claim.effect !== null) {
          // The change committed, its outcome is not stored (yet, or ever): never run it again.
          const found = await recover.get(method)?.(claim.effect, req);
          if (found === undefined) throw outcomeLost(claim.effect);
          answer = kept(method, create(method.output, found as never));
        } else {
          throw reasoned(
            "A request with this Idempotency-Key is in progress; retry later",
            Code.Aborted,
            keyInUseReason,
          );
        }
        answerWith(req.contextValues, answer);
        const res = await next(req);
        res.header.set(replayedHeader, "true");
        return res;
      }
    }
    if (claim.kind !== "owner") {
      throw new ConnectError("The Idempotency-Key is contended; retry", Code.Aborted);
    }
    const owner = claim.owner;
    // What the handler's change marks, in its own statement (lib/audit's eventCte).
    req.contextValues.set(heldKey, { caller: scope, rpc, key, owner });
    let res: UnaryResponse;
    try {
      res = await next(req) as UnaryResponse;
    } catch (error) {
      const err = toConnectError(error);
      await (notStored.has(err.code)
        ? store.release(scope, rpc, key, owner)
        : store.complete(scope, rpc, key, owner, { error: toStored(err) })).catch((e) =>
          log.warn("cannot store an idempotent outcome", { rpc, error: e })
        );
      throw error;
    }
    // The handler's answer as it returned it: a message or an initializer (lib/rpc/router.ts).
    const stored = kept(method, res.message as Message);
    await store.complete(scope, rpc, key, owner, { response: encodeMessage(method.output, stored) })
      .catch((e) => log.warn("cannot store an idempotent outcome", { rpc, error: e }));
    return res;
  };
}

/** The answer to a retry of a request that completed, `resource` its effect, whose outcome is lost. */
function outcomeLost(resource: string): ConnectError {
  return reasoned(
    `The request with this Idempotency-Key completed (it changed ${resource}), but its response ` +
      "was lost and cannot be given again; read the resource instead of retrying",
    Code.FailedPrecondition,
    outcomeLostReason,
    { resource },
  );
}

function equal(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** valibot type of the parsed {@link idempotencySettings}. */
export type IdempotencyConfig = v.InferOutput<
  v.ObjectSchema<typeof idempotencySettings, undefined>
>;
