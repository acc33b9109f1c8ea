/**
 * What every process is built on, whatever it serves: settings from the environment, the one
 * error class and its builders, identifiers, logging, metrics, trace context, the memory budget
 * and the bounded caches it counts, deadlines on shared timers, the flags a component process runs with, and the declaration
 * of every setting (./settings.ts, whose words for the README name the components). Nothing here
 * knows of HTTP, RPC, Postgres or a service.
 *
 * @module
 */

export { addressKey } from "./addresses.ts";
export {
  type BoundedCache,
  type BoundedCacheOptions,
  createBoundedCache,
  memoBytes,
  type Region,
} from "./bounded_cache.ts";
export {
  budgetFromConfig,
  budgetSettings,
  createMemoryBudget,
  type Lease,
  type MemoryBudget,
  overBudget,
  overBudgetReason,
  overBudgetRetrySeconds,
  smallRequestBytes,
} from "./budget.ts";
export { type Deadline, Deadlines, deadlines, maxTimerMs, type TimerHost } from "./deadlines.ts";
export {
  ConfigError,
  configErrorExitCode,
  defaultIssuer,
  flag,
  issuerUrl,
  logLevel,
  nonNegativeInt,
  optionalSecretKey,
  optionalString,
  port,
  positiveInt,
  readConfig,
  required,
  secretKey,
  secretKeyList,
  untilTerminated,
} from "./config.ts";
export {
  boundedText,
  errorDomain,
  type FieldViolation,
  fieldViolations,
  hasReason,
  invalidArgument,
  isConnectionLost,
  maxMessageLength,
  notFound,
  oauthDescription,
  toConnectError,
  truncationMark,
} from "./errors.ts";
export { type HmacSha256, hmacSha256, sha256 } from "./hash.ts";
export { base64url, bigEndian, fromBase64url, onP256, validEd25519 } from "./public_keys.ts";
export { type IdKind, idKind, uuidTime } from "./ids.ts";
export {
  maxTimestampSeconds,
  minTimestampSeconds,
  parseTimestamp,
  timestampExpected,
} from "./rfc3339.ts";
export {
  isDeclared,
  type Reader,
  type Setting,
  type SettingName,
  settings,
  settingsTable,
  startEnvironmentHelp,
  startSetting,
  type StartSettingName,
} from "./settings.ts";
export { createLogger, type Logger } from "./log.ts";
export {
  type CacheStats,
  createMetrics,
  type Metrics,
  registerBudgetMetrics,
  registerCacheMetrics,
} from "./metrics.ts";
export { componentEnv, componentFlags } from "./run_flags.ts";
export {
  formatTraceparent,
  forwardedForHeader,
  forwardedUserAgentHeader,
  givenRequestId,
  parseTraceparent,
  peerHeader,
  requestIdOf,
  startSpan,
} from "./trace.ts";
export { assertionSigningAlgs, dpopSigningAlgs, oauthPaths } from "./oauth_metadata.ts";
export { cacheControlHeader, noCache } from "./cache_control.ts";
