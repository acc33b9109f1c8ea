/**
 * A service process: read settings, open the pool, migrate the schema, serve its routers with the
 * interceptor list, drain on SIGTERM. A service's `main.ts` names only its own parts.
 *
 * @module
 */

export {
  defineService,
  readServiceConfig,
  runService,
  type ServiceDefinition,
  type ServiceDeps,
  serviceSettings,
  startService,
} from "./service.ts";
