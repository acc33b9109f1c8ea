/**
 * Who may call each OAuthRegistryService method: the one table the authorization interceptor
 * (lib/policy) checks before idempotency and the handler, so a replayed create is authorized
 * exactly as a first one.
 *
 * - Project resources (config, clients, secrets, keys): callers that administer the project (the
 *   token's `projects` claim lists it, or `*`).
 * - VerifyClientSecret: any caller; the handler answers only about clients of projects the caller
 *   administers, and answers unknown and out-of-reach clients alike (PERMISSION_DENIED naming no
 *   project), so the answer never tells that an id exists elsewhere. It has no idempotency key and
 *   so no replay path.
 * - LookupClient, LookupClientKeys, RecordClientKeyUse: as VerifyClientSecret (the handlers answer
 *   only about reachable clients; RecordClientKeyUse ignores a client or key that is gone, and
 *   has no idempotency key either).
 * - CheckJavaScriptOrigin: any caller; the handler looks only at projects the caller administers.
 * - GetProjectInstallation: callers that administer the project (a token service).
 * - ConsentInstallation: any caller, unless the project's audience is `internal`: then only its own
 *   users (PERMISSION_DENIED). The rule reads the project's config (NOT_FOUND without one) and
 *   hands it to the handler.
 * - Installations: any caller; every query is scoped to the caller's account.
 * - ListEvents, WatchEvents (the audit trail and its feed): callers that administer the project.
 *
 * @module
 */

import { Code, ConnectError } from "@connectrpc/connect";
import {
  ConsentInstallationRequestSchema,
  type OAuthRegistryService,
} from "../../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import {
  administers,
  authenticated,
  type Policy,
  projectAdmin,
  type Rule,
} from "../../lib/policy/mod.ts";
import { validate } from "../../lib/resource/mod.ts";
import type { ConfigRepository } from "./repository/configs.ts";
import { consentConfigKey, noConfig } from "./service.ts";
import { consentSchema } from "./validation.ts";

/** The service's policy; `configs` is read by the consent rule (./config_cache.ts keeps them). */
export function createOAuthPolicy(
  configs: Pick<ConfigRepository, "get">,
): Policy<typeof OAuthRegistryService> {
  const audience: Rule<{ projectId: string; scopes: string[] }> = async (req, caller, values) => {
    // The request's syntax first, as every other method checks it before looking anything up.
    const { projectId } = validate(consentSchema, ConsentInstallationRequestSchema, req as never);
    const config = await configs.get(projectId);
    if (!config) throw noConfig(projectId);
    if (config.audience === "internal" && !administers(caller, projectId)) {
      throw new ConnectError(
        `Project ${projectId} accepts consent only from its own users (audience internal)`,
        Code.PermissionDenied,
      );
    }
    values.set(consentConfigKey, config);
  };
  return {
    getOAuthConfig: projectAdmin,
    updateOAuthConfig: projectAdmin,
    createClient: projectAdmin,
    getClient: projectAdmin,
    listClients: projectAdmin,
    updateClient: projectAdmin,
    deleteClient: projectAdmin,
    createClientSecret: projectAdmin,
    listClientSecrets: projectAdmin,
    deleteClientSecret: projectAdmin,
    createClientKey: projectAdmin,
    listClientKeys: projectAdmin,
    getClientKey: projectAdmin,
    deleteClientKey: projectAdmin,
    lookupClientKeys: authenticated,
    recordClientKeyUse: authenticated,
    verifyClientSecret: authenticated,
    lookupClient: authenticated,
    checkJavaScriptOrigin: authenticated,
    getProjectInstallation: projectAdmin,
    consentInstallation: audience,
    getInstallation: authenticated,
    listInstallations: authenticated,
    revokeInstallation: authenticated,
    listEvents: projectAdmin,
    watchEvents: projectAdmin,
  };
}
