/**
 * The OAuthRegistryService handlers: validate, call a repository, map rows to messages. Who may
 * call what is decided before a handler runs, by the service's policy (./policy.ts) in the
 * process's interceptor list (./main.ts).
 *
 * @module
 */

import { Buffer } from "node:buffer";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import {
  Code,
  ConnectError,
  createContextKey,
  type HandlerContext,
  type ServiceImpl,
} from "@connectrpc/connect";
import * as v from "valibot";
import {
  ClientSchema,
  ClientStatusSchema,
  ClientType,
  ClientTypeSchema,
  TokenEndpointAuthMethodSchema,
} from "../../gen/registry/oauth/v1/client_pb.ts";
import {
  type ClientKeySchema,
  ClientKeyStatus,
} from "../../gen/registry/oauth/v1/client_key_pb.ts";
import {
  type ClientSecretSchema,
  ClientSecretStatus,
} from "../../gen/registry/oauth/v1/client_secret_pb.ts";
import {
  AudienceSchema,
  OAuthConfigSchema,
  PublishingStatusSchema,
} from "../../gen/registry/oauth/v1/config_pb.ts";
import {
  type InstallationSchema,
  InstallationStatusSchema,
} from "../../gen/registry/oauth/v1/installation_pb.ts";
import {
  ConsentInstallationRequestSchema,
  CreateClientKeyRequestSchema,
  CreateClientRequestSchema,
  CreateClientSecretRequestSchema,
  ListClientsRequestSchema,
  ListEventsRequestSchema,
  ListInstallationsRequestSchema,
  OAuthRegistryService,
  UpdateClientRequestSchema,
  UpdateOAuthConfigRequestSchema,
  WatchEventsRequestSchema,
} from "../../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import {
  type EventFeed,
  type EventFields,
  type EventRow,
  eventRowSize,
  listEvents,
  readCursor,
  readEventQuery,
  timestampField,
  toEvent,
  type Write,
  writeOf,
} from "../../lib/audit/mod.ts";
import { administers, type Caller, callerOf, type Recovery } from "../../lib/policy/mod.ts";
import type { Sql } from "../../lib/db/mod.ts";
import { anyVersion, enumName, enumNumber, expiringEtag } from "../../lib/resource/mod.ts";
import { invalidArgument, type Logger, noCache, notFound } from "../../lib/platform/mod.ts";
import {
  nullable,
  pageOf,
  pathUuid,
  readPage,
  timestampFloorMs,
  timestampOf,
} from "../../lib/resource/mod.ts";
import { ids } from "./ids.ts";
import { resolveMask } from "../../lib/resource/mod.ts";
import { assertValid, validate } from "../../lib/resource/mod.ts";
import { checkUploadedJwk, generateClientKey, orderedJwk } from "./client_keys.ts";
import { type ClientKeyRow, createClientKeyRepository } from "./repository/client_keys.ts";
import { type ClientSecretRow, createClientSecretRepository } from "./repository/client_secrets.ts";
import {
  type ClientChanges,
  type ClientRepository,
  type ClientRow,
  createClientRepository,
} from "./repository/clients.ts";
import {
  type ConfigChanges,
  type ConfigRow,
  createConfigRepository,
  noCurrentConfig,
  type ScopeRow,
} from "./repository/configs.ts";
import { createInstallationRepository, type InstallationRow } from "./repository/installations.ts";
import type { SecretHasher } from "./secrets.ts";
import {
  configFields,
  consentSchema,
  createClientSchema,
  createKeySchema,
  createSecretSchema,
  defaultAuthMethod,
  maxListItems,
  projectId as projectIdSchema,
  typeFreeClientFields,
  updateClientSchema,
} from "./validation.ts";

/**
 * Most live secrets one client may hold at a time, unless MAX_SECRETS_PER_CLIENT says otherwise.
 * Expired secrets do not count, but stay until deleted: a client holds at most twice as many in
 * all, so that its list stays short.
 */
export const defaultMaxSecretsPerClient = 10;

/**
 * Most live keys one client may hold at a time, unless MAX_KEYS_PER_CLIENT says otherwise; twice
 * as many in all, expired ones included (as secrets).
 */
export const defaultMaxKeysPerClient = 10;

/** The methods with which a client authenticates with a secret (VerifyClientSecret's). */
const secretMethods: ReadonlySet<string> = new Set(["client_secret_basic", "client_secret_post"]);

/** What the handlers need. */
export interface OAuthRegistryDeps {
  /** The pool. */
  sql: Sql;
  /** Generates and checks client secrets. */
  hasher: SecretHasher;
  /** Most live secrets one client may hold (default 10); twice as many in all. */
  maxSecretsPerClient?: number;
  /** Most live keys one client may hold (default 10); twice as many in all. */
  maxKeysPerClient?: number;
  /** The clock (ms since the epoch; default `Date.now`): secrets expire by it. */
  now?: () => number;
  /** Where a failure to record a secret's use is reported (it never fails the verification). */
  log?: Logger;
  /** The change feed WatchEvents serves (none: WatchEvents is UNAVAILABLE). */
  feed?: EventFeed;
  /**
   * Told of each project whose config this replica changed, once the change has committed (the
   * config cache of ./config_cache.ts forgets it at once; other replicas learn it from the feed).
   */
  onConfigChanged?: (projectId: string) => void;
  /**
   * The clients' repository (default: oauth.clients read and written in Postgres; ./main.ts gives
   * it with `get` through memory, ./client_cache.ts).
   */
  clients?: ClientRepository | undefined;
}

const configMask = {
  updatable: [
    "application_name",
    "support_email",
    "logo_uri",
    "homepage_uri",
    "privacy_policy_uri",
    "terms_of_service_uri",
    "authorized_domains",
    "audience",
    "secret_max_lifetime_seconds",
    "scopes",
  ],
} as const;

const clientMask = {
  updatable: [
    "name",
    "redirect_uris",
    "javascript_origins",
    "status",
    "token_endpoint_auth_method",
    "dpop_bound_access_tokens",
    "require_pushed_authorization_requests",
  ],
  immutable: ["type"],
} as const;

/** snake_case proto name -> camelCase property name. */
function localName(name: string): string {
  return name.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
}

function text(desc: Parameters<typeof enumName>[0], value: number): string {
  return enumName(desc, value)!;
}

function num(desc: Parameters<typeof enumNumber>[0], value: string): number {
  const n = enumNumber(desc, value);
  if (n === undefined) throw new Error(`Cannot map ${value} to ${desc.typeName}`);
  return n;
}

function toConfig(row: ConfigRow): MessageInitShape<typeof OAuthConfigSchema> {
  return {
    projectId: row.project_id,
    applicationName: row.application_name,
    ...nullable("supportEmail", row.support_email),
    ...nullable("logoUri", row.logo_uri),
    ...nullable("homepageUri", row.homepage_uri),
    ...nullable("privacyPolicyUri", row.privacy_policy_uri),
    ...nullable("termsOfServiceUri", row.terms_of_service_uri),
    authorizedDomains: row.authorized_domains,
    audience: num(AudienceSchema, row.audience),
    publishingStatus: num(PublishingStatusSchema, row.publishing_status),
    createdAt: timestampOf(row.created_at),
    updatedAt: timestampOf(row.updated_at),
    etag: row.etag,
    secretMaxLifetimeSeconds: row.secret_max_lifetime_seconds,
    scopes: row.scopes.map((s) => ({
      name: s.name,
      description: s.description,
      sensitive: s.sensitive,
    })),
  };
}

function toClient(row: ClientRow): MessageInitShape<typeof ClientSchema> {
  return {
    id: ids.client.fromUuid(row.id),
    projectId: row.project_id,
    name: row.name,
    type: num(ClientTypeSchema, row.type),
    redirectUris: row.redirect_uris,
    javascriptOrigins: row.javascript_origins,
    status: num(ClientStatusSchema, row.status),
    createdAt: timestampOf(row.created_at),
    updatedAt: timestampOf(row.updated_at),
    tokenEndpointAuthMethod: num(TokenEndpointAuthMethodSchema, row.token_endpoint_auth_method),
    dpopBoundAccessTokens: row.dpop_bound_access_tokens,
    requirePushedAuthorizationRequests: row.require_pushed_authorization_requests,
    etag: row.etag,
  };
}

/** Whether a secret of this expiry has expired at `now` (the repository's rule of a live one). */
function expired(expiresAt: Date | null, now: number): boolean {
  return expiresAt !== null && expiresAt.getTime() <= now;
}

// Fields without a value are set after the literal rather than spread into it (a spread costs
// about ten times the rest of a row's mapping).
function toSecret(row: ClientSecretRow, now: number): MessageInitShape<typeof ClientSecretSchema> {
  const secret: MessageInitShape<typeof ClientSecretSchema> = {
    id: ids.secret.fromUuid(row.id),
    clientId: ids.client.fromUuid(row.client_id),
    secretHint: row.secret_hint,
    createdAt: timestampOf(row.created_at),
    status: expired(row.expires_at, now) ? ClientSecretStatus.EXPIRED : ClientSecretStatus.ACTIVE,
    etag: expiringEtag(row.etag, row.expires_at, now),
  };
  if (row.expires_at !== null) secret.expiresAt = timestampOf(row.expires_at);
  if (row.last_used_at !== null) secret.lastUsedAt = timestampOf(row.last_used_at);
  return secret;
}

function toKey(row: ClientKeyRow, now: number): MessageInitShape<typeof ClientKeySchema> {
  const key: MessageInitShape<typeof ClientKeySchema> = {
    id: ids.key.fromUuid(row.id),
    clientId: ids.client.fromUuid(row.client_id),
    kid: row.kid,
    algorithm: row.algorithm,
    jwk: orderedJwk(row.jwk),
    createdAt: timestampOf(row.created_at),
    status: expired(row.expires_at, now) ? ClientKeyStatus.EXPIRED : ClientKeyStatus.ACTIVE,
    etag: expiringEtag(row.etag, row.expires_at, now),
  };
  if (row.expires_at !== null) key.expiresAt = timestampOf(row.expires_at);
  if (row.last_used_at !== null) key.lastUsedAt = timestampOf(row.last_used_at);
  return key;
}

/**
 * The expiry a CreateClientSecretRequest asks for (ms since the epoch), or undefined when it asks
 * none; INVALID_ARGUMENT for an expires_at that is not in the future. `input` has passed
 * createSecretSchema.
 */
function requestedExpiry(
  input: { expiresAt?: Timestamp | undefined; lifetimeSeconds?: number | undefined },
  now: number,
): { at: number; field: string } | undefined {
  if (input.lifetimeSeconds !== undefined) {
    return { at: now + input.lifetimeSeconds * 1000, field: "lifetime_seconds" };
  }
  if (input.expiresAt === undefined) return undefined;
  const at = timestampFloorMs(input.expiresAt);
  if (at <= now) {
    throw invalidArgument([{ field: "expires_at", description: "must be in the future" }]);
  }
  return { at, field: "expires_at" };
}

/**
 * A new secret's expiry under the project's `secret_max_lifetime_seconds` (0: no limit): the one
 * asked for when within the limit (else INVALID_ARGUMENT), and the limit itself when none was.
 */
function secretExpiry(
  requested: { at: number; field: string } | undefined,
  maxLifetimeSeconds: number,
  now: number,
): Date | null {
  if (maxLifetimeSeconds === 0) return requested === undefined ? null : new Date(requested.at);
  const latest = now + maxLifetimeSeconds * 1000;
  if (requested === undefined) return new Date(latest);
  if (requested.at > latest) {
    throw invalidArgument([{
      field: requested.field,
      description: `must be at most ${maxLifetimeSeconds} seconds from now, the project's ` +
        "secret_max_lifetime_seconds",
    }]);
  }
  return new Date(requested.at);
}

function toInstallation(row: InstallationRow): MessageInitShape<typeof InstallationSchema> {
  const installation: MessageInitShape<typeof InstallationSchema> = {
    id: ids.installation.fromUuid(row.id),
    projectId: row.project_id,
    accountId: row.account_id,
    applicationName: row.application_name,
    scopes: row.scopes,
    status: num(InstallationStatusSchema, row.status),
    authorizedById: row.authorized_by_id,
    authorizedAt: timestampOf(row.authorized_at),
    createdAt: timestampOf(row.created_at),
    etag: row.etag,
  };
  if (row.principal_id !== null) installation.principalId = row.principal_id;
  if (row.revoked_at !== null) installation.revokedAt = timestampOf(row.revoked_at);
  return installation;
}

/**
 * The registry's stored columns that its events show otherwise: its timestamps (a secret's or key's
 * `expires_at`, an installation's `authorized_at` and `revoked_at`), as the API writes them. Every
 * other column an event shows is the resource's field of that name, in the API's form (enums as
 * their short lower-case names, ids as TypeIDs, as they are stored).
 */
const eventFields: EventFields = {
  expires_at: timestampField,
  authorized_at: timestampField,
  revoked_at: timestampField,
};

/** An event as the API shows it. */
const eventOf = (row: EventRow) => toEvent(row, eventFields);

/** NOT_FOUND: the project has no OAuth config yet. */
export function noConfig(projectId: string): ConnectError {
  return new ConnectError(
    `Project ${projectId} has no OAuth config; create it first (PATCH /v1/projects/${projectId}/config)`,
    Code.NotFound,
  );
}

/** INVALID_ARGUMENT: a config is created only with its application_name. */
function applicationNameRequired(): ConnectError {
  return invalidArgument([{
    field: "config.application_name",
    description: "is required to create the project's OAuth config",
  }]);
}

const projectRequest = v.object({ projectId: projectIdSchema });

/** The project's OAuth config, as the consent rule of ./policy.ts read it for the handler. */
export const consentConfigKey = createContextKey<ConfigRow | undefined>(undefined, {
  description: "consent config",
});

/** Checks the project id's syntax (the policy has checked the caller administers it). */
function project(projectId: string): void {
  validate(projectRequest, ListClientsRequestSchema, { projectId });
}

/** Returns the stored form of a path id, or NOT_FOUND when the text cannot name one. */
function pathId(kind: keyof typeof ids, id: string): string {
  return pathUuid(ids[kind], kind, id);
}

/** PERMISSION_DENIED for a client_id that names no client the caller can see (or none at all). */
function outOfReach(clientId: string): ConnectError {
  return new ConnectError(
    `No client ${clientId} in a project the token grants access to`,
    Code.PermissionDenied,
  );
}

/**
 * How each create whose idempotent outcome was lost is answered again (lib/policy's `Recovery`):
 * the client, secret or key its change named, as it is now in Postgres (the caller was authorized
 * for its project as for the first call); undefined when it is gone. A secret's plaintext and a
 * generated key's private part are not in Postgres: the answer has none, as a replay has none. A
 * consent has no recovery (whether it created the installation is not kept): its retry is told
 * that it completed.
 */
export function oauthRecoveries(sql: Sql, now: () => number = Date.now): Recovery[] {
  const clients = createClientRepository(sql);
  const secrets = createClientSecretRepository(sql);
  const keys = createClientKeyRepository(sql);
  /** The stored ids of `projects/<p>/clients/<c>[/<collection>/<id>]`, or undefined. */
  const named = (resource: string, collection?: "secrets" | "keys") => {
    const [projects, project, collectionOfClients, client, more, id, ...rest] = resource.split("/");
    const clientUuid = ids.client.toUuid(client ?? "");
    if (projects !== "projects" || collectionOfClients !== "clients" || rest.length > 0) return;
    if (project === undefined || clientUuid === undefined || more !== collection) return;
    if (collection === undefined) return { project, clientUuid, uuid: clientUuid };
    const uuid = (collection === "secrets" ? ids.secret : ids.key).toUuid(id ?? "");
    return uuid === undefined ? undefined : { project, clientUuid, uuid };
  };
  return [
    [OAuthRegistryService.method.createClient, async (resource) => {
      const name = named(resource);
      const row = name && await clients.get(name.project, name.uuid);
      return row ? { client: toClient(row) } : undefined;
    }],
    [OAuthRegistryService.method.createClientSecret, async (resource) => {
      const name = named(resource, "secrets");
      const rows = name && await secrets.list(name.project, name.clientUuid);
      const row = rows?.find((r) => r.id === name!.uuid);
      return row ? { clientSecret: toSecret(row, now()) } : undefined;
    }],
    [OAuthRegistryService.method.createClientKey, async (resource) => {
      const name = named(resource, "keys");
      const row = name && await keys.get(name.project, name.clientUuid, name.uuid);
      return row ? { clientKey: toKey(row, now()) } : undefined;
    }],
  ];
}

/** Creates the OAuthRegistryService handlers. */
export function createOAuthRegistry(
  deps: OAuthRegistryDeps,
): ServiceImpl<typeof OAuthRegistryService> {
  const configs = createConfigRepository(deps.sql);
  // Only GetClient reads clients through memory (deps.clients' `get`). The internal lookups read
  // Postgres (`find`): their callers (the token service) keep the answers in memory of their own,
  // and a copy taken from a copy that had not yet seen a change could outlive it.
  const stored = createClientRepository(deps.sql);
  const clients = deps.clients ?? stored;
  const secrets = createClientSecretRepository(deps.sql);
  const keys = createClientKeyRepository(deps.sql);
  const installations = createInstallationRepository(deps.sql);
  const maxSecretsPerClient = deps.maxSecretsPerClient ?? defaultMaxSecretsPerClient;
  const maxKeysPerClient = deps.maxKeysPerClient ?? defaultMaxKeysPerClient;
  const now = deps.now ?? Date.now;
  /** What a write records (who, from where, when), and the etag it is conditional on. */
  const writing = (ctx: HandlerContext, etag?: string, field?: string): Write =>
    writeOf(ctx, now(), etag, field);

  /**
   * The client of a client_id in a project the caller administers, for the internal lookups. An
   * unknown and an out-of-reach client answer alike, naming no project: PERMISSION_DENIED unless
   * the caller administers every project, and then undefined.
   */
  async function reachableClient(caller: Caller, clientId: string) {
    const uuid = ids.client.toUuid(clientId);
    const row = uuid === undefined ? undefined : await clients.find(uuid);
    if (row && administers(caller, row.project_id)) return row;
    if (caller.projects !== "*") throw outOfReach(clientId);
    return undefined;
  }

  return {
    async getOAuthConfig(req) {
      project(req.projectId);
      const row = await configs.get(req.projectId);
      if (!row) throw noConfig(req.projectId);
      return { config: toConfig(row) };
    },

    async updateOAuthConfig(req, ctx) {
      project(req.projectId);
      const write = writing(ctx, req.config?.etag, "config.etag");
      const mask = resolveMask(OAuthConfigSchema, req.config, req.updateMask, configMask, "config");
      assertValid(mask.violations);
      const keys = mask.paths.map(localName) as (keyof typeof configFields)[];
      const picked = Object.fromEntries(keys.map((k) => [k, configFields[k]]));
      const input = validate(
        v.object({ config: v.object(picked, "is required") }),
        UpdateOAuthConfigRequestSchema,
        { config: req.config },
      ).config as Record<string, unknown>;
      const changes: Record<string, unknown> = {};
      for (const [path, key] of mask.paths.map((p, i) => [p, keys[i]!] as const)) {
        const value = input[key];
        changes[path] = key === "audience"
          ? text(AudienceSchema, value as number)
          : key === "scopes"
          ? (value as ScopeRow[] | undefined ?? []).map((s) => ({
            name: s.name,
            description: s.description,
            sensitive: s.sensitive,
          }))
          : value === undefined
          ? null
          : value;
      }
      if (req.createOnly && write.etag !== undefined) {
        throw invalidArgument([{
          field: "config.etag",
          description: "names a version that must exist: it cannot be sent with create_only",
        }]);
      }
      if (req.createOnly && typeof changes.application_name !== "string") {
        throw applicationNameRequired();
      }
      // A write with an etag updates that version only: it never creates (RFC 9110 13.1.1);
      // create_only only creates.
      if (write.etag === anyVersion) {
        // Any current version: an update of what is there, whatever its version.
        const row = await configs.update(req.projectId, changes as ConfigChanges, {
          audit: write.audit,
        });
        if (!row) throw noCurrentConfig(req.projectId);
        deps.onConfigChanged?.(req.projectId);
        return { config: toConfig(row) };
      }
      if (typeof changes.application_name === "string" && write.etag === undefined) {
        const created = changes as ConfigChanges & { application_name: string };
        const row = req.createOnly
          ? await configs.create(req.projectId, created, write)
          : await configs.upsert(req.projectId, created, write);
        deps.onConfigChanged?.(req.projectId);
        return { config: toConfig(row) };
      }
      const row = await configs.update(req.projectId, changes as ConfigChanges, write);
      if (row) deps.onConfigChanged?.(req.projectId);
      if (!row) throw applicationNameRequired();
      return { config: toConfig(row) };
    },

    async createClient(req, ctx) {
      project(req.projectId);
      const { client } = validate(
        createClientSchema(req.client?.type ?? 0),
        CreateClientRequestSchema,
        req,
      );
      const id = ids.client.generate();
      try {
        const row = await clients.create({
          id: id.uuid,
          project_id: req.projectId,
          name: client.name,
          type: text(ClientTypeSchema, client.type),
          redirect_uris: client.redirectUris,
          javascript_origins: client.javascriptOrigins,
          token_endpoint_auth_method: text(
            TokenEndpointAuthMethodSchema,
            client.tokenEndpointAuthMethod || defaultAuthMethod(client.type),
          ),
          dpop_bound_access_tokens: client.dpopBoundAccessTokens,
          require_pushed_authorization_requests: client.requirePushedAuthorizationRequests,
        }, writing(ctx));
        return { client: toClient(row) };
      } catch (error) {
        if ((error as { code?: string }).code === "23503") throw noConfig(req.projectId);
        throw error;
      }
    },

    async getClient(req, ctx) {
      project(req.projectId);
      // `cache-control: no-cache` (RFC 9111 5.2.1.4): read Postgres, not the replica's memory.
      const from = noCache(ctx.requestHeader) ? stored : clients;
      const row = await from.get(req.projectId, pathId("client", req.clientId));
      if (!row) throw notFound("client", req.clientId);
      return { client: toClient(row) };
    },

    async listClients(req) {
      project(req.projectId);
      const { limit, after } = await readPage(
        req,
        ListClientsRequestSchema,
        ids.client,
        "client",
        (uuid) => clients.isCursor(req.projectId, uuid),
      );
      return pageOf(await clients.list(req.projectId, limit, after), limit, toClient);
    },

    async updateClient(req, ctx) {
      project(req.projectId);
      const uuid = pathId("client", req.clientId);
      const mask = resolveMask(ClientSchema, req.client, req.updateMask, clientMask, "client");
      assertValid(mask.violations);
      const keys = mask.paths.map(localName);
      // The rules of some fields depend on the client's type: only then is it read first (a
      // rename, a suspension need no read; the update finds the client or answers NOT_FOUND).
      // So is a type sent without a mask, or with `*` (AIP-203: an immutable field is ignored
      // when it holds the current value, as a read-modify-write sends it, and refused when it
      // would change).
      const paths = req.updateMask?.paths ?? [];
      const whole = paths.length === 0 || (paths.length === 1 && paths[0] === "*");
      const typeSent = whole && !!req.client?.type;
      let type = ClientType.UNSPECIFIED;
      if (typeSent || !keys.every((k) => typeFreeClientFields.has(k))) {
        const current = await clients.get(req.projectId, uuid);
        if (!current) throw notFound("client", req.clientId);
        type = num(ClientTypeSchema, current.type);
        if (typeSent && req.client!.type !== type) {
          throw invalidArgument([{
            field: "client.type",
            description: "cannot be changed after creation",
          }]);
        }
      }
      const input = (validate(updateClientSchema(type, keys), UpdateClientRequestSchema, {
        client: req.client,
      }) as { client: Record<string, unknown> }).client;
      const changes: Record<string, unknown> = {};
      mask.paths.forEach((path, i) => {
        const value = input[keys[i]!];
        changes[path] = path === "status"
          ? text(ClientStatusSchema, value as number)
          : path === "token_endpoint_auth_method"
          ? text(TokenEndpointAuthMethodSchema, value as number)
          : value;
      });
      const row = await clients.update(
        req.projectId,
        uuid,
        changes as ClientChanges,
        writing(ctx, req.client?.etag, "client.etag"),
      );
      if (!row) throw notFound("client", req.clientId);
      return { client: toClient(row) };
    },

    async deleteClient(req, ctx) {
      project(req.projectId);
      const uuid = pathId("client", req.clientId);
      if (!(await clients.delete(req.projectId, uuid, writing(ctx, req.etag)))) {
        throw notFound("client", req.clientId);
      }
      return {};
    },

    async createClientSecret(req, ctx) {
      project(req.projectId);
      const clientUuid = pathId("client", req.clientId);
      const at = now();
      const requested = requestedExpiry(
        validate(createSecretSchema, CreateClientSecretRequestSchema, req),
        at,
      );
      const secret = deps.hasher.generate();
      const id = ids.secret.generate();
      const result = await secrets.create(req.projectId, {
        id: id.uuid,
        client_id: clientUuid,
        secret_hash: secret.hash,
        hash_key_id: Buffer.from(deps.hasher.keyId, "hex"),
        secret_hint: secret.hint,
      }, {
        now: new Date(at),
        maxLive: maxSecretsPerClient,
        maxAll: 2 * maxSecretsPerClient,
        expiresAt: (maxLifetimeSeconds) => secretExpiry(requested, maxLifetimeSeconds, at),
        write: writing(ctx),
      });
      if (result.kind === "no_client") throw notFound("client", req.clientId);
      if (result.kind === "public") {
        throw new ConnectError(
          `Client ${req.clientId} is a public client (spa or native): it cannot keep a secret ` +
            "(RFC 6749 2.1) and uses PKCE without one",
          Code.FailedPrecondition,
        );
      }
      if (result.kind === "full") {
        throw new ConnectError(
          result.held === "live"
            ? `Client ${req.clientId} already has ${maxSecretsPerClient} live secrets; ` +
              "delete one first"
            : `Client ${req.clientId} already has ${2 * maxSecretsPerClient} secrets, ` +
              "expired ones included; delete one first",
          Code.FailedPrecondition,
        );
      }
      return {
        clientSecret: {
          ...toSecret(result.row, at),
          plaintext: { case: "secret", value: secret.secret },
        },
      };
    },

    async listClientSecrets(req) {
      project(req.projectId);
      const rows = await secrets.list(req.projectId, pathId("client", req.clientId));
      if (!rows) throw notFound("client", req.clientId);
      const at = now();
      return { data: rows.map((row) => toSecret(row, at)), hasMore: false };
    },

    async deleteClientSecret(req, ctx) {
      project(req.projectId);
      const clientUuid = pathId("client", req.clientId);
      const deleted = await secrets.delete(
        req.projectId,
        clientUuid,
        pathId("secret", req.secretId),
        writing(ctx, req.etag),
      );
      if (!deleted) throw notFound("secret", req.secretId);
      return {};
    },

    async createClientKey(req, ctx) {
      project(req.projectId);
      const clientUuid = pathId("client", req.clientId);
      const at = now();
      const input = validate(createKeySchema, CreateClientKeyRequestSchema, req);
      if (input.expiresAt !== undefined && timestampFloorMs(input.expiresAt) <= at) {
        throw invalidArgument([{ field: "expires_at", description: "must be in the future" }]);
      }
      // A generated key's private part lives in this handler's response only: never stored (the
      // idempotency store keeps the response without it: ./main.ts), never logged.
      const key = input.generate !== ""
        ? await generateClientKey(input.generate)
        : { ...await checkUploadedJwk(input.jwk), privateJwk: undefined };
      const id = ids.key.generate();
      const result = await keys.create(req.projectId, {
        id: id.uuid,
        client_id: clientUuid,
        kid: key.kid,
        algorithm: key.algorithm,
        jwk: key.jwk,
        expires_at: input.expiresAt === undefined
          ? null
          : new Date(timestampFloorMs(input.expiresAt)),
      }, {
        now: new Date(at),
        maxLive: maxKeysPerClient,
        maxAll: 2 * maxKeysPerClient,
        write: writing(ctx),
      });
      if (result.kind === "no_client") throw notFound("client", req.clientId);
      if (result.kind === "public") {
        throw new ConnectError(
          `Client ${req.clientId} is a public client (spa or native): it cannot keep a key ` +
            "(RFC 6749 2.1) and uses PKCE without one",
          Code.FailedPrecondition,
        );
      }
      if (result.kind === "duplicate") {
        throw new ConnectError(
          `Client ${req.clientId} already has a key with kid ${JSON.stringify(key.kid)}`,
          Code.AlreadyExists,
        );
      }
      if (result.kind === "same_key") {
        throw new ConnectError(
          `Client ${req.clientId} already has this key, under kid ${JSON.stringify(result.kid)}: ` +
            "a key is held once (deleting it must leave no copy that still verifies)",
          Code.AlreadyExists,
        );
      }
      if (result.kind === "full") {
        throw new ConnectError(
          result.held === "live"
            ? `Client ${req.clientId} already has ${maxKeysPerClient} live keys; delete one first`
            : `Client ${req.clientId} already has ${2 * maxKeysPerClient} keys, expired ones ` +
              "included; delete one first",
          Code.FailedPrecondition,
        );
      }
      return {
        clientKey: {
          ...toKey(result.row, at),
          ...(key.privateJwk === undefined
            ? {}
            : { privateKey: { case: "privateJwk", value: key.privateJwk } }),
        },
      };
    },

    async listClientKeys(req) {
      project(req.projectId);
      const rows = await keys.list(req.projectId, pathId("client", req.clientId));
      if (!rows) throw notFound("client", req.clientId);
      const at = now();
      return { data: rows.map((row) => toKey(row, at)), hasMore: false };
    },

    async getClientKey(req) {
      project(req.projectId);
      const clientUuid = pathId("client", req.clientId);
      const row = await keys.get(req.projectId, clientUuid, pathId("key", req.keyId));
      if (!row) throw notFound("key", req.keyId);
      return { clientKey: toKey(row, now()) };
    },

    async deleteClientKey(req, ctx) {
      project(req.projectId);
      const clientUuid = pathId("client", req.clientId);
      const write = writing(ctx, req.etag);
      if (!(await keys.delete(req.projectId, clientUuid, pathId("key", req.keyId), write))) {
        throw notFound("key", req.keyId);
      }
      return {};
    },

    async lookupClientKeys(req, ctx) {
      const caller = callerOf(ctx);
      const uuid = ids.client.toUuid(req.clientId);
      const at = now();
      // Only live keys are read: an expired one is as a deleted one.
      const row = uuid === undefined ? undefined : await keys.clientWithKeys(uuid, new Date(at));
      if (!row || !administers(caller, row.project_id)) {
        // As LookupClient: unknown and out-of-reach clients answer alike, naming no project.
        if (caller.projects !== "*") throw outOfReach(req.clientId);
        throw notFound("client", req.clientId);
      }
      return { client: toClient(row), keys: row.keys.map((k) => toKey(k, at)) };
    },

    async recordClientKeyUse(req, ctx) {
      const client = await reachableClient(callerOf(ctx), req.clientId);
      const keyUuid = ids.key.toUuid(req.keyId);
      // A client or key that is gone (or an id that names none) is ignored: the use happened.
      if (client === undefined || keyUuid === undefined) return {};
      await keys.recordUse(keyUuid, null, new Date(now()), client.id);
      return {};
    },

    async verifyClientSecret(req, ctx) {
      const caller = callerOf(ctx);
      const uuid = ids.client.toUuid(req.clientId);
      const at = new Date(now());
      // Only live secrets are read: an expired one answers as a wrong one does.
      const row = uuid === undefined ? undefined : await secrets.clientWithSecrets(uuid, at);
      if (!row || !administers(caller, row.project_id)) {
        deps.hasher.match(req.secret, []); // same work as for a known client
        // Unknown and out-of-reach clients answer alike (and name no project): otherwise the
        // answer would tell a caller that an id exists in a project it cannot see.
        if (caller.projects !== "*") throw outOfReach(req.clientId);
        return { valid: false };
      }
      // Matched whatever the client's method, so that the answer takes the same time.
      const match = deps.hasher.match(
        req.secret,
        row.secrets.map((s) => ({ hash: s.hash, keyId: s.hash_key_id })),
      );
      const secret = row.secrets[match.index];
      if (!secret || row.status !== "active") return { valid: false };
      // A client registered for private_key_jwt (or none) never authenticates with a secret.
      if (!secretMethods.has(row.token_endpoint_auth_method)) return { valid: false };
      if (!match.current) {
        // Made under a previous key (or before key ids were kept): hashed again under the current
        // one, so that the previous key can go once every secret in use has been used.
        await secrets.rehash(
          secret.id,
          secret.hash,
          deps.hasher.hash(req.secret),
          deps.hasher.keyId,
        )
          .then((written) => {
            if (written) {
              deps.log?.info("client secret hashed again under the current key", {
                secret_id: ids.secret.fromUuid(secret.id),
              });
            }
          })
          .catch((error) => deps.log?.warn("a client secret was not hashed again", { error }));
      }
      // A use: written at most once a minute per secret (no query at all when the one read is
      // recent), and never at the cost of the answer.
      await secrets.recordUse(secret.id, secret.last_used_at, at).catch((error) =>
        deps.log?.warn("a client secret's use was not recorded", { error })
      );
      return {
        valid: true,
        client: toClient(row),
        ...(secret.expires_at === null ? {} : { expiresAt: timestampOf(secret.expires_at) }),
      };
    },

    async lookupClient(req, ctx) {
      const row = await reachableClient(callerOf(ctx), req.clientId);
      if (!row) throw notFound("client", req.clientId);
      return { client: toClient(row) };
    },

    async checkJavaScriptOrigin(req, ctx) {
      const caller = callerOf(ctx);
      let projectId: string | undefined;
      if (req.clientId !== "") {
        // A reference, as in any request: a client the caller cannot see is NOT_FOUND.
        const uuid = ids.client.toUuid(req.clientId);
        const row = uuid === undefined ? undefined : await clients.find(uuid);
        if (!row || !administers(caller, row.project_id)) throw notFound("client", req.clientId);
        projectId = row.project_id;
      }
      // Nothing a browser sends is that long (the registry keeps origins of at most 2,048).
      if (req.origin === "" || req.origin.length > 2048) return { registered: false };
      return {
        registered: await clients.registersOrigin(req.origin, {
          projectId,
          projects: caller.projects,
        }),
      };
    },

    async getProjectInstallation(req) {
      project(req.projectId);
      const row = await installations.getInProject(
        req.projectId,
        pathId("installation", req.installationId),
      );
      if (!row) throw notFound("installation", req.installationId);
      return { installation: toInstallation(row) };
    },

    async consentInstallation(req, ctx) {
      const caller = callerOf(ctx);
      const input = validate(consentSchema, ConsentInstallationRequestSchema, req);
      // The policy read the config to check the audience; read again only without it (tests).
      const config = ctx.values.get(consentConfigKey) ?? await configs.get(input.projectId);
      if (!config) throw noConfig(input.projectId);
      // A project that declares its scopes takes consent to those only, as its authorization
      // endpoint does: an installation is where a token exchange's scopes come from.
      if (config.scopes.length > 0) {
        const declared = new Set(config.scopes.map((s) => s.name));
        assertValid(
          input.scopes.flatMap((scope, i) =>
            declared.has(scope) ? [] : [{
              field: `scopes[${i}]`,
              description: `is not a scope project ${input.projectId} declares`,
            }]
          ),
        );
      }
      const id = ids.installation.generate().uuid;
      let row;
      try {
        row = await installations.consent({
          id,
          project_id: input.projectId,
          account_id: caller.accountId,
          principal_id: ids.principal.generate().id,
          application_name: config.application_name,
          scopes: input.scopes,
          authorized_by_id: caller.subject,
        }, writing(ctx));
      } catch (error) {
        // The union with the scopes the installation holds would exceed the limit (0007).
        if ((error as { code?: string }).code === "23514") {
          throw new ConnectError(
            `The installation would hold more than ${maxListItems} scopes; revoke it and ` +
              "consent again to start over",
            Code.FailedPrecondition,
          );
        }
        throw error;
      }
      // A new installation has the id this consent drew; a live one kept its own.
      return { installation: toInstallation(row), created: row.id === id };
    },

    async getInstallation(req, ctx) {
      const caller = callerOf(ctx);
      const row = await installations.get(
        caller.accountId,
        pathId("installation", req.installationId),
      );
      if (!row) throw notFound("installation", req.installationId);
      return { installation: toInstallation(row) };
    },

    async listInstallations(req, ctx) {
      const caller = callerOf(ctx);
      if (req.projectId !== "") project(req.projectId);
      const { limit, after } = await readPage(
        req,
        ListInstallationsRequestSchema,
        ids.installation,
        "installation",
        // A position in this list: the caller's installation, of the project the list is of.
        async (uuid) => {
          const row = await installations.get(caller.accountId, uuid);
          return row !== undefined && (req.projectId === "" || row.project_id === req.projectId);
        },
      );
      return pageOf(
        await installations.list(caller.accountId, req.projectId || undefined, limit, after),
        limit,
        toInstallation,
      );
    },

    async listEvents(req) {
      project(req.projectId);
      const query = readEventQuery(req, ListEventsRequestSchema);
      const rows = await listEvents(deps.sql, "oauth", req.projectId, query);
      return pageOf(rows, query.limit, eventOf, eventRowSize);
    },

    async *watchEvents(req, ctx) {
      project(req.projectId);
      if (!deps.feed) {
        throw new ConnectError("This process serves no change feed", Code.Unavailable);
      }
      const after = readCursor(req.after, WatchEventsRequestSchema) ?? 0n;
      for await (const rows of deps.feed.watch(req.projectId, after, ctx.signal)) {
        for (const row of rows) yield { event: eventOf(row) };
      }
    },

    async revokeInstallation(req, ctx) {
      const caller = callerOf(ctx);
      const uuid = pathId("installation", req.installationId);
      if (!(await installations.revoke(caller.accountId, uuid, writing(ctx, req.etag)))) {
        throw notFound("installation", req.installationId);
      }
      return {};
    },
  };
}
