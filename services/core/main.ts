/**
 * The core process (schema `core`; gRPC 50052, Connect 8082 by default).
 *
 * @module
 */

import { CoreService } from "../../gen/registry/core/v1/core_service_pb.ts";
import { createIdempotencyStore, idempotencySettings, idempotent } from "../../lib/idempotency.ts";
import { bind } from "../../lib/server.ts";
import { defineService, runService } from "../../lib/service_main.ts";
import { createCore } from "./service.ts";

/** The service: run as its own process, or embedded by `deno task start`. */
export const coreService = defineService({
  name: "core",
  schema: "core",
  migrations: new URL("./migrations/", import.meta.url),
  ports: { grpc: 50052, http: 8082 },
  settings: { ...idempotencySettings },
  services: ({ sql, config, log }) => [
    bind(
      CoreService,
      // Keys are scoped by the caller's space (lib/idempotency.ts), the core area's only tenancy.
      idempotent(
        CoreService,
        createCore({ sql }),
        createIdempotencyStore(sql, {
          schema: "core",
          ttlSeconds: config.IDEMPOTENCY_TTL_SECONDS,
          log,
        }),
      ),
    ),
  ],
});

if (import.meta.main) await runService(coreService);
