/**
 * The memory budget of a process: how many bytes of requests (HTTP bodies, Connect bodies, gRPC
 * messages) it may hold at once. Every place that holds request bytes takes them from the one
 * budget of its process before it reads them and gives them back when the request is done; past
 * the budget a request is refused at once (HTTP 503 with `Retry-After`, gRPC RESOURCE_EXHAUSTED)
 * instead of queued, so that volume cannot grow a process past its container's memory limit.
 *
 * The budget is `MEMORY_BUDGET_MIB` (default 24 MiB: see the README's "Memory" section for how it
 * fits the Deployments' 256 MiB limit with V8's heap bound and the process at rest). What a byte of
 * request costs differs by place (a JSON body is also held as parsed objects and as a Protobuf
 * message while it is served), so each place takes its bytes times its own factor.
 *
 * @module
 */

import { Code, ConnectError } from "@connectrpc/connect";
import * as v from "valibot";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.ts";
import { positiveInt } from "./config.ts";
import { errorDomain } from "./errors.ts";

/** The setting every process reads. */
export const budgetSettings = {
  /** Bytes of requests the process may hold at once, in MiB. */
  MEMORY_BUDGET_MIB: positiveInt(24),
};

/** The budget settings, parsed. */
export type BudgetConfig = v.InferOutput<v.ObjectSchema<typeof budgetSettings, undefined>>;

/** Bytes taken from a budget, given back once by {@link Lease.release}. */
export interface Lease {
  /** Bytes held by this lease. */
  readonly bytes: number;
  /** Takes `bytes` more into this lease; false (and nothing taken) when they do not fit. */
  grow(bytes: number): boolean;
  /** Gives `bytes` of the lease back (at most what it holds), keeping the rest. */
  shrink(bytes: number): void;
  /** Gives every byte of the lease back; later calls do nothing. */
  release(): void;
}

/** A process's memory budget. */
export interface MemoryBudget {
  /** The budget, in bytes. */
  readonly limit: number;
  /** Bytes held now. */
  readonly held: number;
  /** The most bytes ever held at once. */
  readonly peak: number;
  /** Requests refused because they did not fit. */
  readonly refusals: number;
  /** Takes `bytes` (at least 0) as a lease, or returns undefined (a refusal) when they do not fit. */
  take(bytes: number): Lease | undefined;
  /** Whether `bytes` would fit now, taking nothing; a refusal is counted when they would not. */
  admits(bytes: number): boolean;
}

/** Creates a budget of `limit` bytes. */
export function createMemoryBudget(limit: number): MemoryBudget {
  let held = 0;
  let peak = 0;
  let refusals = 0;
  const fits = (bytes: number) => {
    if (held + bytes > limit) {
      refusals++;
      return false;
    }
    held += bytes;
    if (held > peak) peak = held;
    return true;
  };
  return {
    limit,
    get held() {
      return held;
    },
    get peak() {
      return peak;
    },
    get refusals() {
      return refusals;
    },
    admits(bytes) {
      if (held + bytes <= limit) return true;
      refusals++;
      return false;
    },
    take(bytes) {
      const first = Math.max(0, Math.ceil(bytes));
      if (!fits(first)) return undefined;
      let own = first;
      let released = false;
      return {
        get bytes() {
          return own;
        },
        grow(more) {
          const n = Math.max(0, Math.ceil(more));
          if (released || !fits(n)) return false;
          own += n;
          return true;
        },
        shrink(less) {
          const n = Math.min(own, Math.max(0, Math.ceil(less)));
          own -= n;
          held -= n;
        },
        release() {
          if (released) return;
          released = true;
          held -= own;
          own = 0;
        },
      };
    },
  };
}

/** Creates the budget of a process from its settings. */
export function budgetFromConfig(config: BudgetConfig): MemoryBudget {
  return createMemoryBudget(config.MEMORY_BUDGET_MIB * 1024 * 1024);
}

/** The ErrorInfo reason of a refusal for memory (the gateway answers it 503 with Retry-After). */
export const overBudgetReason = "MEMORY_BUDGET_EXCEEDED";

/** Seconds a refused caller is told to wait before retrying. */
export const overBudgetRetrySeconds = 1;

/** The error of a request refused because the process is at its memory budget. */
export function overBudget(): ConnectError {
  return new ConnectError(
    "The server is at its memory budget; retry later",
    Code.ResourceExhausted,
    { "retry-after": String(overBudgetRetrySeconds) },
    [{ desc: ErrorInfoSchema, value: { reason: overBudgetReason, domain: errorDomain } }],
  );
}
