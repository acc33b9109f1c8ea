/**
 * The core process (schema `core`; gRPC 50052, Connect 8082 by default): its handlers, and the
 * interceptors every call goes through, in the order they run.
 *
 * @module
 */

import { CoreService } from "../../gen/registry/core/v1/core_service_pb.ts";
import { auditSettings, startAudit } from "../../lib/audit/mod.ts";
import { coreChangesChannel, createIdempotencyStore, followChanges } from "../../lib/db/mod.ts";
import { nonNegativeInt, registerCacheMetrics } from "../../lib/platform/mod.ts";
import {
  authentication,
  authorization,
  idempotency,
  idempotencySettings,
  policyOf,
} from "../../lib/policy/mod.ts";
import { availability, bind, deadline, logging, metering, tracing } from "../../lib/rpc/mod.ts";
import { defineService, runService } from "../../lib/service/mod.ts";
import { corePolicy } from "./policy.ts";
import { createUnitRepository } from "./repository/units.ts";
import { coreRecoveries, createCore } from "./service.ts";
import { cacheUnits } from "./unit_cache.ts";

/** The service: run as its own process, or embedded by `deno task start`. */
export const coreService = defineService({
  name: "core",
  schema: "core",
  migrations: new URL("./migrations/", import.meta.url),
  ports: { grpc: 50052, http: 8082 },
  settings: { UNIT_CACHE_MIB: nonNegativeInt(4), ...idempotencySettings, ...auditSettings },
  serve: ({ sql, config, log, metrics, verify, notReady, migrated, now, budget }) => {
    const audit = startAudit(sql, "core", { config, now, log, migrated });
    // What GetUnit reads, kept in memory; changes reach every replica through Postgres within a
    // second (./unit_cache.ts).
    const units = config.UNIT_CACHE_MIB === 0 ? undefined : cacheUnits(createUnitRepository(sql), {
      follow: (handlers) => followChanges(sql, coreChangesChannel, handlers),
      maxBytes: config.UNIT_CACHE_MIB * 1024 * 1024,
      budget,
    });
    if (units) {
      registerCacheMetrics(
        metrics,
        "unit_cache",
        { holds: "Units", answers: "units" },
        () => units.stats(),
      );
    }
    return {
      stop() {
        audit.stop();
        void units?.close();
      },
      services: [
        bind(
          CoreService,
          createCore({
            sql,
            now,
            feed: audit.feed,
            units,
          }),
        ),
      ],
      interceptors: [
        tracing(),
        logging(log),
        metering(metrics),
        deadline(),
        availability(notReady),
        authentication(verify),
        authorization([policyOf(CoreService, corePolicy)]),
        // Keys are scoped by the caller's space too (lib/policy), the core area's only tenancy. A
        // create whose change committed but whose outcome was lost answers its record as it is.
        idempotency(
          createIdempotencyStore(sql, {
            schema: "core",
            ttlSeconds: config.IDEMPOTENCY_TTL_SECONDS,
            log,
          }),
          [CoreService],
          [],
          coreRecoveries(sql),
        ),
      ],
    };
  },
});

if (import.meta.main) Deno.exit(await runService(coreService));
