/**
 * Who may call each CoreService method: the one table the authorization interceptor (lib/policy)
 * checks before idempotency and the handler. The core area's only tenancy is the token's `space`
 * claim: every method needs one (PERMISSION_DENIED without), and every query is scoped to it, so a
 * caller never sees or changes another space's roles, journeys or units. ListEvents and WatchEvents
 * (the audit trail and its feed) are the caller's space's, to its members like the rest.
 *
 * @module
 */

import type { CoreService } from "../../gen/registry/core/v1/core_service_pb.ts";
import { inSpace, type Policy } from "../../lib/policy/mod.ts";

/** The service's policy. */
export const corePolicy: Policy<typeof CoreService> = {
  createRole: inSpace,
  getRole: inSpace,
  listRoles: inSpace,
  updateRole: inSpace,
  deleteRole: inSpace,
  createJourney: inSpace,
  getJourney: inSpace,
  listJourneys: inSpace,
  updateJourney: inSpace,
  deleteJourney: inSpace,
  createUnit: inSpace,
  getUnit: inSpace,
  listUnits: inSpace,
  updateUnit: inSpace,
  deleteUnit: inSpace,
  listEvents: inSpace,
  watchEvents: inSpace,
};
