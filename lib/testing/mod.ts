/**
 * Helpers for the tests only (not shipped in the image): throwaway databases, the real stack as
 * processes, stock gRPC clients, hostile loads, fault-injecting proxies.
 *
 * @module
 */

export {
  flood,
  type FloodResult,
  grpcFrame,
  halfOpen,
  httpFlood,
  keepProbing,
  type RssPeak,
  watchRss,
} from "./attacks.ts";
export { launchChromium, recorder } from "./browser.ts";
export { signedInCall } from "./calls.ts";
export {
  type AttackResult,
  type AttackShape,
  type AttackSpec,
  cheapAttack,
} from "./cheap_attacks.ts";
export { type MovableClock, movableClock } from "./clock.ts";
export {
  randomMessage,
  type RandomOptions,
  seeded,
  serviceMessageTypes,
} from "./random_messages.ts";
export { allowOnConsentPage, consentFormFields } from "./consent.ts";
export {
  containerLogs,
  docker,
  dockerProblem,
  postgresImage,
  publishedPort,
  registryImage,
  runArguments,
} from "./containers.ts";
export { type Heard, listenTo, propagated } from "./database.ts";
export {
  createTestDatabase,
  databaseProblem,
  queuedOrAnswered,
  untilWaitingForLock,
} from "./database.ts";
export { gate, manualFeed } from "./feed.ts";
export { losingOutcomes, type LostOutcomes } from "./idempotency.ts";
export {
  type GrpcChannel,
  grpcChannel,
  grpcChurn,
  type GrpcFailure,
  grpcFailure,
  GrpcMetadata,
  type GrpcTestClient,
  grpcTestClient,
  type RawCall,
} from "./grpc_client.ts";
export {
  assertStackAlive,
  dbDigest,
  isRunning,
  openDatabase,
  overLimits,
  serverFaults,
} from "./hostile.ts";
export { httpClient, type HttpResult, status, until, within } from "./http.ts";
export { type HttpFloodResult } from "./http_flood.ts";
export {
  freePort,
  type Proc,
  type ProcEnv,
  readLines,
  spawn,
  type Stack,
  startStack,
  waitReady,
} from "./stack.ts";
export {
  spawnStartTask,
  type StartTask,
  type StartTaskPorts,
  startTaskPorts,
} from "./start_task.ts";
export {
  type InProcessOptions,
  type InProcessService,
  rejection,
  serveInProcess,
} from "./in_process.ts";
export { startTcpProxy } from "./tcp_proxy.ts";
export {
  grpcMessage,
  grpcMessages,
  grpcRequestHeaders,
  rawH2Connect,
  type RawH2Connection,
  type RawH2End,
  type RawH2Stream,
} from "./raw_h2.ts";
