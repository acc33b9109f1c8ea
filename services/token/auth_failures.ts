/**
 * Failed client authentications (`invalid_client`, ./client_auth.ts), summarised: never one event
 * per attempt, which would let anyone with a list of client_ids write rows as fast as they can
 * send requests. Each replica counts failures in memory, per client_id presented, for a window (a
 * minute: the timer in ./main.ts flushes every {@link failureWindowMs}); {@link AuthFailures.flush}
 * closes the window and writes one `authentication_failed` event per client that failed in it,
 * `changes` `[{"field": "failures", "new": N}, {"field": "window_started_at", "new": "<RFC 3339>"}]`.
 *
 * What a flood costs, whatever its rate:
 *
 * - memory: at most {@link maxCountedClients} client_ids are counted per window, each with a
 *   count and the context of its first failure (the RPC, and the address, user agent and peer cut
 *   to {@link maxContextText} characters and copied, so that no request's headers are kept alive),
 *   and each counted in the process's memory budget (`cache` share) until its window is written:
 *   a few MB at most. Failures beyond them, or that the budget has no room for, add to one
 *   catch-all count;
 * - rows: at most one per client per window and replica, and one more for everything of no project
 *   (below). A flush looks up each client's project once (through the registry, cached).
 *
 * Which resource: a client_id that a project has counts under that project (parent the project,
 * resource `projects/{p}/clients/{client_id}`), so its administrators see the attack on their
 * client. A client_id that is not of the registry's form (`cli_` and 26 characters), that no
 * project has, or that came past the bound counts under the one fixed resource
 * `projects/-/clients/unknown` of parent `-` (./security_events.ts): one row per window however
 * many made-up ids were sprayed, no text an attacker chose is ever stored (a secret pasted into
 * the client_id field included), and no project is told of another's clients. (When the registry
 * cannot be asked, a well-formed id is written under `projects/-/clients/{client_id}`, still one
 * row per client and window.)
 *
 * The actor of a summary is the client_id presented (`sub`; no `client_id`: nothing was
 * authenticated), or "" for the unknown ones; its method, address, user agent and peer are those of
 * the window's first failure; its time is the flush's. The process flushes once more when it
 * starts draining; what fails after that is not written.
 *
 * @module
 */

import type { Client } from "../../gen/registry/oauth/v1/client_pb.ts";
import { type AuditContext, auditContextFrom } from "../../lib/audit/mod.ts";
import type { Sql } from "../../lib/db/mod.ts";
import { idKind, type Lease, type Logger, type MemoryBudget } from "../../lib/platform/mod.ts";
import {
  type CallOf,
  clientResource,
  noProject,
  recordEvent,
  unknownClientResource,
} from "./security_events.ts";

/** How long a window counts, and how often the summaries are written. */
export const failureWindowMs = 60_000;

/** Most client_ids counted per window (and replica); the rest go to one catch-all count. */
export const maxCountedClients = 10_000;

/** The longest address, user agent or peer kept of a window's first failure. */
export const maxContextText = 128;

/** How many projects a flush looks up at once. */
const lookups = 8;

const clientIds = idKind("cli");

/** Options of {@link createAuthFailures}. */
export interface AuthFailureOptions {
  /** Where the summaries are written (schema `token`). */
  sql: Sql;
  /** The client of an id in any project (the registry's LookupClient); undefined when unknown. */
  lookupClient(clientId: string): Promise<Client | undefined>;
  /** The clock (ms since the epoch). */
  now: () => number;
  /** Where a flush that fails is reported. */
  log: Logger;
  /** Most client_ids counted per window (default {@link maxCountedClients}). */
  maxClients?: number;
  /** The process's memory budget, which the counts are held in. */
  budget?: MemoryBudget | undefined;
}

/** Counts failed client authentications, and writes their summaries. */
export interface AuthFailures {
  /**
   * Counts one failure of `clientId` (as presented: "" when none). No I/O, O(1): called on every
   * failure, however many.
   */
  record(clientId: string, call: CallOf): void;
  /**
   * Closes the window and writes its summaries (one event per client, one for no project); returns
   * how many events were written. A flush while one runs writes nothing (the next takes its
   * counts).
   */
  flush(): Promise<number>;
  /** How many client_ids the open window counts (at most `maxClients`). */
  counted(): number;
}

/** One count: how many, and the context of the first. */
interface Count {
  failures: number;
  first: AuditContext;
}

/** A window: when it opened, the counts per client_id, and the rest. */
interface Window {
  startedAt: number;
  byClient: Map<string, Count>;
  /** Failures of ids that are not of the registry's form. */
  malformed: Count | undefined;
  /** Failures past the bound of client_ids, or that the memory budget had no room for. */
  overLimit: Count | undefined;
  /** The bytes its counts hold in the memory budget, until it is written. */
  lease: Lease | undefined;
}

/** What a client's count is held as: its context's characters (two bytes each) and the objects. */
function countBytes(count: Count): number {
  const { sub, method, sourceIp, userAgent, peer } = count.first;
  return 2 * (sub.length + method.length + sourceIp.length + userAgent.length + peer.length) + 512;
}

/**
 * A copy of a string that shares no memory with the one it was cut from (V8 keeps a sliced
 * string's parent alive: a header value of kilobytes for a few characters kept).
 */
function detached(text: string): string {
  return text.length === 0 ? "" : JSON.parse(JSON.stringify(text)) as string;
}

/** Creates the counter; ./main.ts flushes it every {@link failureWindowMs}. */
export function createAuthFailures(options: AuthFailureOptions): AuthFailures {
  const { sql, now, log } = options;
  const maxClients = options.maxClients ?? maxCountedClients;
  const open = (): Window => ({
    startedAt: now(),
    byClient: new Map(),
    malformed: undefined,
    overLimit: undefined,
    lease: options.budget?.take(0, ["cache"]),
  });
  let window = open();
  let flushing = false;

  /** The context of a window's first failure of a client: cut short, and copied. */
  const firstOf = (sub: string, call: CallOf): AuditContext => {
    const audit = auditContextFrom(call, { sub, clientId: null }, now(), maxContextText);
    return {
      ...audit,
      sub: detached(sub),
      requestId: "",
      sourceIp: detached(audit.sourceIp),
      userAgent: detached(audit.userAgent),
      peer: detached(audit.peer),
    };
  };
  const add = (count: Count | undefined, sub: string, call: CallOf): Count => {
    if (count) {
      count.failures++;
      return count;
    }
    return { failures: 1, first: firstOf(sub, call) };
  };

  /** Merges counts into one (the unknown ones' event). */
  const merge = (counts: (Count | undefined)[]): Count | undefined => {
    const present = counts.filter((c) => c !== undefined);
    if (present.length === 0) return undefined;
    return {
      failures: present.reduce((n, c) => n + c.failures, 0),
      first: present.reduce((a, b) => (a.first.at <= b.first.at ? a : b)).first,
    };
  };

  async function write(
    closed: Window,
    at: Date,
    parent: string,
    resource: string,
    count: Count,
    extra: { field: string; new: number }[] = [],
  ) {
    await recordEvent(sql, { ...count.first, at }, {
      parent,
      resource,
      result: "authentication_failed",
      changes: [
        { field: "failures", new: count.failures },
        ...extra,
        { field: "window_started_at", new: new Date(closed.startedAt).toISOString() },
      ],
    });
  }

  return {
    record(clientId, call) {
      if (clientIds.toUuid(clientId) === undefined) {
        window.malformed = add(window.malformed, "", call);
        return;
      }
      const counted = window.byClient.get(clientId);
      if (counted) {
        counted.failures++;
        return;
      }
      if (window.byClient.size < maxClients) {
        const count = add(undefined, clientId, call);
        if (window.lease?.grow(countBytes(count)) ?? true) {
          window.byClient.set(clientId, count);
          return;
        }
      }
      window.overLimit = add(window.overLimit, "", call);
    },

    async flush() {
      if (flushing) return 0;
      flushing = true;
      const closed = window;
      window = open();
      try {
        const at = new Date(now());
        let written = 0;
        const unknown: Count[] = [];
        const clients = [...closed.byClient];
        const worker = async () => {
          for (let next = clients.shift(); next; next = clients.shift()) {
            const [clientId, count] = next;
            let client: Client | undefined;
            try {
              client = await options.lookupClient(clientId);
            } catch (error) {
              log.warn("cannot find the project of a client that failed to authenticate", {
                error,
              });
              await write(
                closed,
                at,
                noProject,
                `projects/${noProject}/clients/${clientId}`,
                count,
              );
              written++;
              continue;
            }
            if (!client) {
              unknown.push({ ...count, first: { ...count.first, sub: "" } });
              continue;
            }
            await write(
              closed,
              at,
              client.projectId,
              clientResource(client.projectId, clientId),
              count,
            );
            written++;
          }
        };
        await Promise.all(Array.from({ length: lookups }, worker));
        const rest = merge([closed.malformed, ...unknown, closed.overLimit]);
        if (rest) {
          await write(
            closed,
            at,
            noProject,
            unknownClientResource,
            rest,
            closed.overLimit ? [{ field: "over_limit", new: closed.overLimit.failures }] : [],
          );
          written++;
        }
        return written;
      } catch (error) {
        log.warn("failed client authentications not recorded", { error });
        return 0;
      } finally {
        closed.lease?.release();
        flushing = false;
      }
    },

    counted: () => window.byClient.size,
  };
}
