/**
 * The OAuth registry's input rules (spec sections 2, 4 and 8), as valibot schemas over the decoded
 * request messages. This is the single source: the gateway only checks JSON shape, so internal
 * gRPC callers meet exactly the same rules.
 *
 * @module
 */

import * as v from "valibot";
import type { JsonObject } from "@bufbuild/protobuf";
import {
  ClientStatus,
  ClientType,
  ClientTypeSchema,
  TokenEndpointAuthMethod,
} from "../../gen/registry/oauth/v1/client_pb.ts";
import { Audience } from "../../gen/registry/oauth/v1/config_pb.ts";
import { enumName, etagField } from "../../lib/resource/mod.ts";
import {
  checkedString,
  enumValue,
  rule,
  text,
  timestamp,
  uniqueList,
} from "../../lib/resource/mod.ts";
import {
  checkEmail,
  checkHostname,
  checkHttpsUri,
  checkJavascriptOrigin,
  checkRedirectUri,
  checkScope,
  originKey,
  redirectUriKey,
} from "./rules.ts";

/** Most items a list field of a client or configuration may hold (spec section 8). */
export const maxListItems = 100;

/** A project id: 1..128 URL-safe characters, starting with a letter or digit. */
export const projectId = v.pipe(
  v.string(),
  v.regex(
    /^[A-Za-z0-9][A-Za-z0-9._~-]{0,127}$/,
    "must be 1 to 128 letters, digits, '.', '_', '~' or '-', starting with a letter or digit",
  ),
);

const brandingUri = v.optional(checkedString(2048, checkHttpsUri));

/** The longest `secret_max_lifetime_seconds` a project may set: 10 years. */
export const maxSecretLifetimeSeconds = 315_360_000;

const secretLifetimeRange =
  `must be between 0 (no limit) and ${maxSecretLifetimeSeconds} (10 years)`;

/**
 * OAuthConfig.scopes: at most 100 declared scopes, each a scope token (RFC 6749 3.3) with a
 * description of 1..200 characters for users; names unique.
 */
const declaredScopes = v.pipe(
  v.array(
    v.object({
      name: v.pipe(v.string("must be a string"), rule(checkScope)),
      description: text(1, 200),
      sensitive: v.boolean("must be a boolean"),
    }, "must be an object"),
    "must be a list",
  ),
  v.maxLength(maxListItems, `must have at most ${maxListItems} items`),
  rule((items: { name: string; description: string; sensitive: boolean }[]) => {
    const seen = new Map<string, number>();
    for (const [i, { name }] of items.entries()) {
      const first = seen.get(name);
      if (first !== undefined) {
        return `must not declare a scope twice (item ${i} repeats the name of item ${first})`;
      }
      seen.set(name, i);
    }
    return undefined;
  }),
);

/** The rules of each OAuthConfig field a caller may set, by property name. */
export const configFields = {
  applicationName: text(1, 120),
  supportEmail: v.optional(checkedString(320, checkEmail)),
  logoUri: brandingUri,
  homepageUri: brandingUri,
  privacyPolicyUri: brandingUri,
  termsOfServiceUri: brandingUri,
  authorizedDomains: uniqueList(
    v.pipe(v.string("must be a string"), rule(checkHostname)),
    maxListItems,
    (s) => s.toLowerCase(),
  ),
  audience: enumValue([Audience.INTERNAL, Audience.EXTERNAL], '"internal", "external"'),
  secretMaxLifetimeSeconds: v.pipe(
    v.number(),
    v.integer("must be an integer"),
    v.minValue(0, secretLifetimeRange),
    v.maxValue(maxSecretLifetimeSeconds, secretLifetimeRange),
  ),
  scopes: declaredScopes,
} as const;

type ClientTypeName = "web" | "spa" | "native";

const secretMethods = '"client_secret_basic", "client_secret_post"';

/**
 * The token endpoint authentication methods a client of each type may have, and the first is its
 * default: a confidential (web) client authenticates with a secret or a key; a public one (spa,
 * native) keeps no credential (RFC 6749 2.1).
 */
export const authMethodsOf: Record<ClientTypeName, readonly TokenEndpointAuthMethod[]> = {
  web: [
    TokenEndpointAuthMethod.CLIENT_SECRET_BASIC,
    TokenEndpointAuthMethod.CLIENT_SECRET_POST,
    TokenEndpointAuthMethod.PRIVATE_KEY_JWT,
  ],
  spa: [TokenEndpointAuthMethod.NONE],
  native: [TokenEndpointAuthMethod.NONE],
};

/** Why a method does not suit a client of the type, or undefined when it does. */
function checkAuthMethod(
  method: number,
  typeName: ClientTypeName | "unspecified" | undefined,
): string | undefined {
  if (typeName !== "web" && typeName !== "spa" && typeName !== "native") return undefined;
  if (authMethodsOf[typeName].includes(method)) return undefined;
  if (typeName === "web") {
    return `cannot be "none" for a web client (a confidential client authenticates): use ` +
      `${secretMethods} or "private_key_jwt"`;
  }
  return `must be "none" for a ${typeName} client: a public client keeps no secret or key ` +
    "(RFC 6749 2.1) and uses PKCE";
}

/**
 * The rule of token_endpoint_auth_method for a client of the type. With `unsetAllowed` (creation),
 * the zero value means the type's default.
 */
function authMethod(typeName: ClientTypeName | "unspecified" | undefined, unsetAllowed: boolean) {
  return v.pipe(
    v.number(),
    v.check((n) => unsetAllowed || n !== 0, "is required"),
    v.picklist(
      [
        ...(unsetAllowed ? [TokenEndpointAuthMethod.UNSPECIFIED] : []),
        TokenEndpointAuthMethod.CLIENT_SECRET_BASIC,
        TokenEndpointAuthMethod.CLIENT_SECRET_POST,
        TokenEndpointAuthMethod.PRIVATE_KEY_JWT,
        TokenEndpointAuthMethod.NONE,
      ],
      `must be one of ${secretMethods}, "private_key_jwt", "none"`,
    ),
    rule((n: number) => n === 0 ? undefined : checkAuthMethod(n, typeName)),
  );
}

/** The method a client of the type gets when it asks none (creation). */
export function defaultAuthMethod(type: ClientType): TokenEndpointAuthMethod {
  return type === ClientType.WEB
    ? TokenEndpointAuthMethod.CLIENT_SECRET_BASIC
    : TokenEndpointAuthMethod.NONE;
}

/** The rules of each Client field a caller may set, for a client of the given type. */
export function clientFields(type: ClientType) {
  const typeName = enumName(ClientTypeSchema, type) as ClientTypeName | "unspecified" | undefined;
  const known = typeName === "web" || typeName === "spa" || typeName === "native";
  return {
    name: text(1, 120),
    type: enumValue(
      [ClientType.WEB, ClientType.SPA, ClientType.NATIVE],
      '"web", "spa", "native"',
    ),
    // Until the type is valid, only the sizes of the URI lists can be checked.
    // Two ways of writing one URI or one origin are one item: a duplicate.
    redirectUris: uniqueList(
      checkedString(2048, (s) => known ? checkRedirectUri(s, typeName) : undefined),
      maxListItems,
      redirectUriKey,
    ),
    javascriptOrigins: v.pipe(
      uniqueList(checkedString(2048, checkJavascriptOrigin), maxListItems, originKey),
      v.check(
        (list) => type !== ClientType.NATIVE || list.length === 0,
        "must be empty for native clients",
      ),
    ),
    status: enumValue([ClientStatus.ACTIVE, ClientStatus.SUSPENDED], '"active", "suspended"'),
    tokenEndpointAuthMethod: authMethod(typeName, false),
    dpopBoundAccessTokens: v.boolean("must be a boolean"),
    requirePushedAuthorizationRequests: v.boolean("must be a boolean"),
  };
}

const createClientSchemas = new Map<number, v.GenericSchema>();

/** The rules of CreateClientRequest for a client of the given type. */
export function createClientSchema(type: ClientType) {
  const make = () => {
    const f = clientFields(type);
    return v.object({
      projectId,
      client: v.object({
        // Ignored on creation.
        etag: etagField,
        name: f.name,
        type: f.type,
        redirectUris: f.redirectUris,
        javascriptOrigins: f.javascriptOrigins,
        status: v.literal(
          ClientStatus.UNSPECIFIED,
          "cannot be set when creating a client; new clients are active",
        ),
        tokenEndpointAuthMethod: authMethod(
          enumName(ClientTypeSchema, type) as ClientTypeName | "unspecified" | undefined,
          true,
        ),
        dpopBoundAccessTokens: f.dpopBoundAccessTokens,
        requirePushedAuthorizationRequests: f.requirePushedAuthorizationRequests,
      }, "is required"),
    });
  };
  type Schema = ReturnType<typeof make>;
  let schema = createClientSchemas.get(type) as Schema | undefined;
  if (!schema) createClientSchemas.set(type, schema = make());
  return schema;
}

/**
 * The fields of a client whose rules are the same for every type: a PATCH of only these is checked
 * without reading the client first (its type).
 */
export const typeFreeClientFields: ReadonlySet<string> = new Set([
  "name",
  "status",
  "dpopBoundAccessTokens",
  "requirePushedAuthorizationRequests",
]);

const updateClientSchemas = new Map<string, v.GenericSchema>();

/**
 * The rules of UpdateClientRequest's `client` for a client of the given type (UNSPECIFIED: only
 * {@link typeFreeClientFields}) when the mask names `fields` (camelCase), made once per type and
 * list: at most 4 types times the 2^7 subsets of the updatable fields.
 */
export function updateClientSchema(type: ClientType, fields: readonly string[]): v.GenericSchema {
  // In any order, the same rules: one entry per set of fields.
  const key = `${type} ${[...fields].sort().join(",")}`;
  let schema = updateClientSchemas.get(key);
  if (!schema) {
    const all = clientFields(type) as Record<string, v.GenericSchema>;
    const picked = Object.fromEntries(fields.map((k) => [k, all[k]!]));
    schema = v.object({ client: v.object(picked, "is required") });
    updateClientSchemas.set(key, schema);
  }
  return schema;
}

/** The rules of ConsentInstallationRequest. */
export const consentSchema = v.object({
  projectId,
  scopes: uniqueList(v.pipe(v.string("must be a string"), rule(checkScope)), maxListItems),
});

/**
 * The fields of CreateClientSecretRequest, by the rules that need no clock: whether `expires_at`
 * is in the future and within the project's `secret_max_lifetime_seconds` is the handler's to
 * check (./service.ts).
 */
export const createSecretFields = v.object({
  projectId,
  clientId: v.string(),
  expiresAt: v.optional(timestamp),
  lifetimeSeconds: v.optional(
    v.pipe(
      v.number(),
      v.integer("must be an integer"),
      v.minValue(1, "must be a positive number of seconds"),
    ),
  ),
});

/** The rules of CreateClientSecretRequest that need no clock: an expiry is asked one way or none. */
export const createSecretSchema = v.pipe(
  createSecretFields,
  v.forward(
    v.check(
      (req) => req.expiresAt === undefined || req.lifetimeSeconds === undefined,
      "cannot be given with expires_at: give one or the other",
    ),
    ["lifetimeSeconds"],
  ),
);

const isJsonObject = (value: unknown): value is JsonObject =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/**
 * The rules of CreateClientKeyRequest that need neither a clock nor WebCrypto: `jwk` or
 * `generate`, not both. The JWK itself is checked by ./client_keys.ts, and whether expires_at is in
 * the future by the handler (./service.ts).
 */
export const createKeySchema = v.pipe(
  v.object({
    projectId,
    clientId: v.string(),
    jwk: v.optional(v.custom<JsonObject>(isJsonObject, "must be a JSON object")),
    generate: v.picklist(["", "EdDSA", "ES256"], 'must be "EdDSA" or "ES256"'),
    expiresAt: v.optional(timestamp),
  }),
  v.forward(
    v.check(
      (req) => req.jwk === undefined || req.generate === "",
      "cannot be given with jwk: give one or the other",
    ),
    ["generate"],
  ),
  v.forward(
    v.check(
      (req) => req.jwk !== undefined || req.generate !== "",
      'is required: a public JWK to upload, unless generate ("EdDSA" or "ES256") is given',
    ),
    ["jwk"],
  ),
);
