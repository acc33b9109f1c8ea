/**
 * The token service's view of the oauth-registry: the few calls it makes, over gRPC (the
 * transport of lib/rpc, the one the gateway calls the services with), as a caller that
 * administers every project. It never reads the `oauth` schema.
 *
 * The registry authenticates the call like any other: with a platform token. The token service
 * signs its own, short-lived (5 minutes, renewed a minute before it expires), with
 * `AUTH_JWT_SECRET`, subject `service:token-service` and `projects: ["*"]`. (A platform that
 * verifies tokens against a JWKS instead has no shared secret to sign with: then the token service
 * is given a token to present in `REGISTRY_TOKEN`, issued by that platform's identity system.)
 *
 * @module
 */

import { timestampMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import type { Client } from "../../gen/registry/oauth/v1/client_pb.ts";
import type { ClientKey } from "../../gen/registry/oauth/v1/client_key_pb.ts";
import type { OAuthConfig } from "../../gen/registry/oauth/v1/config_pb.ts";
import {
  type Installation,
  InstallationStatus,
} from "../../gen/registry/oauth/v1/installation_pb.ts";
import { OAuthRegistryService } from "../../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { provenanceOf } from "../../lib/audit/mod.ts";
import { cacheControlHeader } from "../../lib/platform/mod.ts";
import { signToken } from "../../lib/policy/mod.ts";
import { createGrpcTransport } from "../../lib/rpc/mod.ts";

/** A secret that verified: its client, and when the secret expires. */
export interface VerifiedSecret {
  /** The client (active when the answer was given). */
  client: Client;
  /** When the secret stops verifying (ms since the epoch); undefined: never. */
  expiresAt: number | undefined;
}

/**
 * Whether a secret that verified has expired at `now` (ms since the epoch): it then authenticates
 * nobody, however recent the answer. The registry's expiry is kept with the answer and checked at
 * each use against this service's clock, since nothing notifies the moment it passes.
 */
export function expired(verified: VerifiedSecret, now: number): boolean {
  return verified.expiresAt !== undefined && verified.expiresAt <= now;
}

/** A client with its live keys, for a client assertion (`private_key_jwt`). */
export interface ClientKeys {
  /** The client, whatever its status. */
  client: Client;
  /**
   * Its keys that were live by the registry's clock when asked; each stops verifying at its
   * `expiresAt`, which the caller checks by its own clock.
   */
  keys: ClientKey[];
}

/** What the token service asks the registry. */
export interface Registry {
  /**
   * The client and the secret's expiry, when `secret` is one of the client's live secrets (by the
   * registry's clock) and the client is active; undefined for an unknown client, a wrong or
   * expired secret or a client that is not active. The caller checks the answer with
   * {@link expired} before it trusts it. A valid answer is a use of the secret: the registry
   * records it (its `last_used_at`, at most once a minute).
   */
  verifySecret(clientId: string, secret: string): Promise<VerifiedSecret | undefined>;
  /** A client with its live keys; undefined when the client is unknown. */
  lookupClientKeys(clientId: string): Promise<ClientKeys | undefined>;
  /**
   * Tells the registry that a key authenticated its client (its `last_used_at`); the caller
   * reports a key at most about once a minute.
   */
  recordKeyUse(clientId: string, keyId: string): Promise<void>;
  /** The client of `projectId`, or undefined when it has none of that id (or it was deleted). */
  getClient(projectId: string, clientId: string): Promise<Client | undefined>;
  /** The client of an id in any project, whatever its status; undefined when unknown. */
  lookupClient(clientId: string): Promise<Client | undefined>;
  /** The project's consent-screen configuration, or undefined when it has none. */
  getConfig(projectId: string): Promise<OAuthConfig | undefined>;
  /** An installation of the project (revoked ones included), or undefined. */
  getInstallation(projectId: string, installationId: string): Promise<Installation | undefined>;
  /**
   * Records the user's consent, exactly as `POST /v1/installations` does, as the user: the call
   * carries the user's own `authorization`: creates the installation, or adds the scopes to the
   * live one's (the union). Throws PERMISSION_DENIED when the project does not accept the user
   * (audience `internal`), FAILED_PRECONDITION when the union would exceed 100 scopes.
   */
  consent(call: Headers, projectId: string, scopes: string[]): Promise<Installation>;
  /**
   * The user's live (active) installation of the project, or undefined when there is none, asked
   * as the user (the call carries the user's own `authorization`, which the caller verified and
   * found to act for `accountId`): the installations the user's account lists, page by page.
   */
  liveInstallation(
    authorization: string,
    accountId: string,
    projectId: string,
  ): Promise<Installation | undefined>;
  /**
   * Whether an active client registers a browser origin as a JavaScript origin: a client of the
   * project of `clientId` when given, of any project otherwise.
   */
  registersOrigin(origin: string, clientId: string): Promise<boolean>;
}

/** Options of {@link createRegistry}. */
export interface RegistryOptions {
  /** The registry's gRPC base URL, e.g. `http://127.0.0.1:50051`. */
  url: string;
  /** The platform's HS256 secret, to sign the service's own token with. */
  jwtSecret?: string | undefined;
  /** A token to present instead (when the platform has no shared secret). */
  token?: string | undefined;
  /** The deadline of each call. */
  timeoutMs: number;
  /** The clock. */
  now: () => number;
}

const tokenLifetimeS = 300;

/** A registry client over gRPC. */
export function createRegistry(options: RegistryOptions): Registry {
  const client = createClient(
    OAuthRegistryService,
    createGrpcTransport({ baseUrl: options.url, defaultTimeoutMs: options.timeoutMs }),
  );
  let current: { value: string; renewAt: number } | undefined;
  async function authorization(): Promise<Record<string, string>> {
    if (options.token) return { authorization: `Bearer ${options.token}` };
    if (!options.jwtSecret) {
      throw new ConnectError(
        "The token service has no credentials for the registry (AUTH_JWT_SECRET or REGISTRY_TOKEN)",
        Code.Unavailable,
      );
    }
    const at = options.now();
    if (!current || at >= current.renewAt) {
      const value = await signToken(options.jwtSecret, {
        sub: "service:token-service",
        projects: ["*"],
        ttlSeconds: tokenLifetimeS,
      });
      current = { value, renewAt: at + (tokenLifetimeS - 60) * 1000 };
    }
    return { authorization: `Bearer ${current.value}` };
  }

  return {
    async verifySecret(clientId, secret) {
      try {
        const res = await client.verifyClientSecret(
          { clientId, secret },
          { headers: await authorization() },
        );
        if (!res.valid || !res.client) return undefined;
        return {
          client: res.client,
          expiresAt: res.expiresAt === undefined ? undefined : timestampMs(res.expiresAt),
        };
      } catch (error) {
        // Unknown, malformed and out-of-reach ids are all "no such client" to a token caller.
        if (isNoSuchClient(error)) return undefined;
        throw unavailable(error);
      }
    },
    async lookupClientKeys(clientId) {
      try {
        const res = await client.lookupClientKeys({ clientId }, {
          headers: await authorization(),
        });
        return res.client ? { client: res.client, keys: res.keys } : undefined;
      } catch (error) {
        if (isNoSuchClient(error)) return undefined;
        throw unavailable(error);
      }
    },
    async recordKeyUse(clientId, keyId) {
      try {
        await client.recordClientKeyUse({ clientId, keyId }, { headers: await authorization() });
      } catch (error) {
        if (isNoSuchClient(error)) return;
        throw unavailable(error);
      }
    },
    async lookupClient(clientId) {
      try {
        const res = await client.lookupClient({ clientId }, { headers: await authorization() });
        return res.client;
      } catch (error) {
        if (isNoSuchClient(error)) return undefined;
        throw unavailable(error);
      }
    },
    async getConfig(projectId) {
      try {
        const res = await client.getOAuthConfig({ projectId }, {
          headers: await authorization(),
        });
        return res.config;
      } catch (error) {
        if (error instanceof ConnectError && error.code === Code.NotFound) return undefined;
        throw unavailable(error);
      }
    },
    async getInstallation(projectId, installationId) {
      try {
        const res = await client.getProjectInstallation({ projectId, installationId }, {
          headers: await authorization(),
        });
        return res.installation;
      } catch (error) {
        if (isNoSuchClient(error)) return undefined;
        throw unavailable(error);
      }
    },
    async consent(call, projectId, scopes) {
      try {
        // As the user, with the user's request id, address and user agent for the registry's event.
        const res = await client.consentInstallation({ projectId, scopes }, {
          headers: { ...provenanceOf(call), authorization: call.get("authorization")! },
        });
        return res.installation!;
      } catch (error) {
        // The user's own refusals stand (an internal project, a token that expired meanwhile).
        if (
          error instanceof ConnectError &&
          (error.code === Code.PermissionDenied || error.code === Code.Unauthenticated ||
            error.code === Code.FailedPrecondition)
        ) throw error;
        throw unavailable(error);
      }
    },
    async liveInstallation(userAuthorization, accountId, projectId) {
      try {
        let after = "";
        for (;;) {
          const res = await client.listInstallations({ limit: 100, after, projectId }, {
            headers: { authorization: userAuthorization },
          });
          const live = res.data.find((i) =>
            i.projectId === projectId && i.accountId === accountId &&
            i.status === InstallationStatus.ACTIVE
          );
          if (live) return live;
          if (!res.hasMore || res.data.length === 0) return undefined;
          after = res.data[res.data.length - 1]!.id;
        }
      } catch (error) {
        if (error instanceof ConnectError && error.code === Code.Unauthenticated) throw error;
        throw unavailable(error);
      }
    },
    async registersOrigin(origin, clientId) {
      try {
        const res = await client.checkJavaScriptOrigin({ origin, clientId }, {
          headers: await authorization(),
        });
        return res.registered;
      } catch (error) {
        if (isNoSuchClient(error)) return false;
        throw unavailable(error);
      }
    },
    async getClient(projectId, clientId) {
      try {
        // From Postgres, not the registry's memory: this service keeps the answer in its own
        // (./registry_cache.ts), and a copy of a copy that had not yet seen a change could outlive
        // it.
        const headers = await authorization();
        const res = await client.getClient(
          { projectId, clientId },
          { headers: { ...headers, [cacheControlHeader]: "no-cache" } },
        );
        return res.client;
      } catch (error) {
        if (isNoSuchClient(error)) return undefined;
        throw unavailable(error);
      }
    },
  };
}

/**
 * Any other failure of the registry is the token service's to report as UNAVAILABLE: passed on as
 * it is, an UNAUTHENTICATED of the service's own token would read as the caller's `invalid_client`.
 */
function unavailable(error: unknown): ConnectError {
  const cause = ConnectError.from(error);
  if (cause.code === Code.Unavailable || cause.code === Code.DeadlineExceeded) return cause;
  return new ConnectError(
    `The oauth-registry could not be asked: ${cause.rawMessage}`,
    Code.Unavailable,
    undefined,
    undefined,
    error,
  );
}

function isNoSuchClient(error: unknown): boolean {
  if (!(error instanceof ConnectError)) return false;
  return error.code === Code.NotFound || error.code === Code.PermissionDenied ||
    error.code === Code.InvalidArgument;
}
