/**
 * grpc.health.v1, as Kubernetes' native gRPC probes and the gateway use it:
 *
 * - service "" (the process): SERVING while the process runs: the liveness probe. It does not
 *   depend on the database, so an outage makes pods unready, not restarted in a loop.
 * - a service's full name (e.g. `registry.oauth.v1.OAuthRegistryService`): SERVING while the
 *   service can take calls (migrated, database answering, not draining): the readiness probe,
 *   and what the gateway's /readyz asks.
 *
 * @module
 */

import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import {
  Health,
  HealthCheckResponse_ServingStatus as Status,
} from "../../gen/grpc/health/v1/health_pb.ts";

/** Options of {@link createHealthImpl}. */
export interface HealthOptions {
  /** Full names of the services this process serves (readiness); "" is the process (liveness). */
  services: string[];
  /** Whether the process can serve now (e.g. the database answers). */
  ready: () => Promise<boolean>;
  /** How often Watch re-checks, in milliseconds (default 5000). */
  watchIntervalMs?: number;
}

/** Creates the grpc.health.v1.Health implementation. */
export function createHealthImpl(options: HealthOptions): ServiceImpl<typeof Health> {
  const known = new Set(["", ...options.services]);
  const status = async (service: string) =>
    service === "" || (await options.ready()) ? Status.SERVING : Status.NOT_SERVING;
  return {
    async check(req) {
      if (!known.has(req.service)) {
        throw new ConnectError(`Unknown service ${req.service}`, Code.NotFound);
      }
      return { status: await status(req.service) };
    },
    async list() {
      const entries = await Promise.all(
        [...known].map(async (name) => [name, { status: await status(name) }]),
      );
      return { statuses: Object.fromEntries(entries) };
    },
    async *watch(req, ctx) {
      let last: Status | undefined;
      while (!ctx.signal.aborted) {
        const now = known.has(req.service) ? await status(req.service) : Status.SERVICE_UNKNOWN;
        if (now !== last) yield { status: last = now };
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, options.watchIntervalMs ?? 5000);
          ctx.signal.addEventListener("abort", () => {
            clearTimeout(timer);
            resolve();
          }, { once: true });
        });
      }
    },
  };
}
