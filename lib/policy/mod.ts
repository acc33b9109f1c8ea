/**
 * Who may do what, and how often: token verification (the caller), the per-method authorization
 * table, idempotency keys. The rules are here; where state is kept (Postgres) is in lib/db.
 *
 * @module
 */

export {
  administers,
  authentication,
  type AuthOptions,
  authOptions,
  authSettings,
  type Caller,
  callerFromClaims,
  callerOf,
  createTokenVerifier,
  type TokenVerifier,
} from "./auth.ts";
export {
  authenticated,
  authorization,
  inSpace,
  type Policy,
  policyOf,
  projectAdmin,
  requireProject,
  type Rule,
  type ServicePolicy,
} from "./authorization.ts";
export {
  type Claim,
  type HeldKey,
  heldKeyOf,
  idempotency,
  type IdempotencyOptions,
  idempotencySettings,
  type IdempotencyStore,
  keyHeader,
  keyInUseReason,
  keyReusedReason,
  outcomeLostReason,
  postMethods,
  type Recovery,
  type Redaction,
  replayedHeader,
  type StoredError,
} from "./idempotency.ts";
export { signToken, type TokenClaims } from "./tokens.ts";
