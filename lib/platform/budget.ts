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
 * No single holder may starve the others: a lease may name the holders it is taken for (a
 * connection, a peer address, a token subject, as strings), and each holder may hold at most its
 * share of the budget (`MEMORY_BUDGET_SHARE_PERCENT`, default 50%) across all its leases. A
 * holder's count is kept only while it has leases, so the holders of a process are bounded by its
 * leases.
 *
 * And large requests cannot starve small ones: beyond the budget, a reserve of an eighth of it
 * (3 MiB of the default 24) is kept for the bytes of small requests ({@link smallRequestBytes}:
 * a GET, a health check, a small create), which a grow marks as such. When the budget or a
 * holder's share is full, such bytes come from the reserve, in no holder's share. So a flood of
 * large bodies, or a caller at its share, leaves the requests of everyone else, health and
 * readiness checks among them, something to run on.
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
  /** The most of it one holder (a connection, a peer address, a caller) may hold, in percent. */
  MEMORY_BUDGET_SHARE_PERCENT: v.optional(
    v.pipe(
      v.string(),
      v.regex(/^\d{1,3}$/, "must be a whole number of percent"),
      v.transform(Number),
      v.minValue(1, "must be at least 1"),
      v.maxValue(100, "must be at most 100"),
    ),
    "50",
  ),
};

/** The budget settings, parsed. */
export type BudgetConfig = v.InferOutput<v.ObjectSchema<typeof budgetSettings, undefined>>;

/**
 * The most a small request holds (its bytes times its place's cost factor): what may come from
 * the reserve (see the module's header).
 */
export const smallRequestBytes = 16 * 1024;

/** Bytes taken from a budget, given back once by {@link Lease.release}. */
export interface Lease {
  /** Bytes held by this lease. */
  readonly bytes: number;
  /**
   * Takes `bytes` more into this lease; false (and nothing taken) when they do not fit. `small`:
   * they are for a request that holds at most {@link smallRequestBytes} in all, so they may come
   * from the reserve when the budget or a share is full.
   */
  grow(bytes: number, small?: boolean): boolean;
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
  /** The most one holder may hold, in bytes. */
  readonly shareLimit: number;
  /** Bytes beyond the limit kept for small requests, and how many of them are held now. */
  readonly reserve: number;
  readonly reserveHeld: number;
  /**
   * Takes `bytes` (at least 0) as a lease, or returns undefined (a refusal) when they do not fit
   * the budget or the share of one of `holders`. The lease counts against each of them until it is
   * released.
   */
  take(bytes: number, holders?: readonly string[]): Lease | undefined;
  /** What a holder holds now (0 for one without leases). */
  heldBy(holder: string): number;
  /** Whether `bytes` would fit now, taking nothing; a refusal is counted when they would not. */
  admits(bytes: number): boolean;
}

/** One holder's count: its bytes, and the leases that name it. */
interface Holding {
  bytes: number;
  leases: number;
}

const noHoldings: readonly Holding[] = [];

/**
 * Creates a budget of `limit` bytes, of which one holder may hold `shareLimit` (default all), and
 * a `reserve` for small requests beyond it (default none).
 */
export function createMemoryBudget(
  limit: number,
  shareLimit = limit,
  reserve = 0,
): MemoryBudget {
  return new Budget(limit, shareLimit, reserve);
}

// Classes, not closures: every request takes a lease or two, and a lease of four closures was
// most of a kilobyte of garbage each.
class Budget implements MemoryBudget {
  held = 0;
  peak = 0;
  refusals = 0;
  reserveHeld = 0;
  readonly holdings = new Map<string, Holding>();

  constructor(readonly limit: number, readonly shareLimit: number, readonly reserve: number) {}

  /** Whether `bytes` fit the budget and every holding's share; taken when they do. */
  fits(bytes: number, mine: readonly Holding[]): boolean {
    let fit = this.held + bytes <= this.limit;
    for (let i = 0; fit && i < mine.length; i++) fit = mine[i]!.bytes + bytes <= this.shareLimit;
    if (!fit) return false;
    this.held += bytes;
    for (let i = 0; i < mine.length; i++) mine[i]!.bytes += bytes;
    if (this.held > this.peak) this.peak = this.held;
    return true;
  }

  heldBy(holder: string): number {
    return this.holdings.get(holder)?.bytes ?? 0;
  }

  admits(bytes: number): boolean {
    if (this.held + bytes <= this.limit) return true;
    this.refusals++;
    return false;
  }

  take(bytes: number, holders?: readonly string[]): Lease | undefined {
    const first = Math.max(0, Math.ceil(bytes));
    let mine = noHoldings;
    if (holders !== undefined && holders.length > 0) {
      mine = holders.map((holder) => this.holdings.get(holder) ?? { bytes: 0, leases: 0 });
    }
    if (!this.fits(first, mine)) {
      this.refusals++;
      return undefined;
    }
    for (let i = 0; i < mine.length; i++) {
      if (mine[i]!.leases++ === 0) this.holdings.set(holders![i]!, mine[i]!);
    }
    return new BudgetLease(this, mine, holders, first);
  }
}

class BudgetLease implements Lease {
  #fromReserve = 0;
  #released = false;

  constructor(
    readonly budget: Budget,
    readonly mine: readonly Holding[],
    readonly holders: readonly string[] | undefined,
    private own: number,
  ) {}

  get bytes(): number {
    return this.own + this.#fromReserve;
  }

  grow(more: number, small = false): boolean {
    const n = Math.max(0, Math.ceil(more));
    if (this.#released) return false;
    const budget = this.budget;
    if (budget.fits(n, this.mine)) {
      this.own += n;
      return true;
    }
    if (small && n <= smallRequestBytes && budget.reserveHeld + n <= budget.reserve) {
      budget.reserveHeld += n;
      this.#fromReserve += n;
      return true;
    }
    budget.refusals++;
    return false;
  }

  shrink(less: number): void {
    const budget = this.budget;
    let n = Math.min(this.own + this.#fromReserve, Math.max(0, Math.ceil(less)));
    // What came from the reserve goes back first: it is for everyone's small requests.
    const back = Math.min(this.#fromReserve, n);
    this.#fromReserve -= back;
    budget.reserveHeld -= back;
    n -= back;
    this.own -= n;
    budget.held -= n;
    for (let i = 0; i < this.mine.length; i++) this.mine[i]!.bytes -= n;
  }

  release(): void {
    if (this.#released) return;
    this.shrink(this.own + this.#fromReserve);
    this.#released = true;
    for (let i = 0; i < this.mine.length; i++) {
      if (--this.mine[i]!.leases === 0) this.budget.holdings.delete(this.holders![i]!);
    }
  }
}

/** Creates the budget of a process from its settings. */
export function budgetFromConfig(config: BudgetConfig): MemoryBudget {
  const limit = config.MEMORY_BUDGET_MIB * 1024 * 1024;
  return createMemoryBudget(
    limit,
    Math.floor(limit * config.MEMORY_BUDGET_SHARE_PERCENT / 100),
    Math.floor(limit / 8),
  );
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
