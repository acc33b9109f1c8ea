/**
 * The device authorization grant (RFC 8628): the device authorization endpoint
 * (StartDeviceAuthorization), the verification page's steps for the signed-in user
 * (StartDeviceVerification, LookupDeviceCode, DecideDeviceCode) and the guessing limit on user
 * codes (RFC 8628 5.1). The token endpoint's part is ./grants/device_code.ts.
 *
 * - Who may start one: `native` clients (public, by client_id) and `web` clients (confidential);
 *   not `spa` clients, which have a browser and the code flow, and whose client_id anyone can
 *   read (RFC 8628 5.4: a device flow started in their name is a phishing kit).
 * - User codes: 8 characters of RFC 8628 6.1's 20 consonants (no vowels: no words; no digits
 *   that look like letters), from `crypto.getRandomValues` without modulo bias, shown as
 *   `XXXX-XXXX`, compared case-insensitively with hyphens and spaces taken out.
 * - Guessing: every wrong code (unknown, expired, decided, or not a code at all) counts against
 *   the signed-in user (all their sessions as one) and the client's address (an IPv6 one by its
 *   /64), in Postgres, so every replica of the token service (and so every gateway) sees the same
 *   counts. After 20 wrong codes within 60 seconds from either, every code, right or wrong, is
 *   refused for 5 minutes: 20 guesses among 20^8 live codes.
 * - CSRF: the code form's token is bound to the session, the consent form's to the session and
 *   the user code (HMAC with the consent page's key, separate inputs), valid 10 minutes.
 *
 * @module
 */

import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { type Client, ClientStatus, ClientType } from "../../gen/registry/oauth/v1/client_pb.ts";
import { Audience } from "../../gen/registry/oauth/v1/config_pb.ts";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.ts";
import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  type ConsentScreenSchema,
  Decision,
} from "../../gen/registry/token/v1/token_service_pb.ts";
import { addressKey, oauthDescription, oauthPaths, sha256 } from "../../lib/platform/mod.ts";
import { auditContextOf } from "../../lib/audit/mod.ts";
import { administers, callerOf } from "../../lib/policy/mod.ts";
import { consentBranding } from "./authorization.ts";
import { csrfToken, csrfValid } from "./csrf.ts";
import { oauthError, oauthErrorDomain } from "./oauth_errors.ts";
import { randomToken } from "./opaque_tokens.ts";
import type { Registry } from "./registry.ts";
import type { DeviceCodeRepository, DeviceCodeRow, GuessLimit } from "./repository/device_codes.ts";
import { checkDeclared, describeScopes, parseScope } from "./scope.ts";

/** How long a device code and its user code live (RFC 8628 3.2 `expires_in`). */
export const deviceCodeTtlSeconds = 600;
/** The polling interval the device is given (RFC 8628 3.2 `interval`). */
export const pollIntervalSeconds = 5;
/** The guessing limit (RFC 8628 5.1). */
export const guessLimit: GuessLimit = { maxFailures: 20, windowMs: 60_000, coolDownMs: 300_000 };
/** RFC 8628 6.1: the 20 consonants of "base-20" user codes. */
export const userCodeAlphabet = "BCDFGHJKLMNPQRSTVWXZ";

/** What the device flow needs. */
export interface DeviceDeps {
  registry: Registry;
  devices: DeviceCodeRepository;
  /** The issuer (the verification URI is below it). */
  issuer: string;
  /** The HMAC keys of CSRF tokens (the consent page's, ./csrf.ts). */
  csrfKeys: readonly Promise<CryptoKey>[];
  /** The clock (ms since the epoch). */
  now: () => number;
}

/** A new user code: 8 characters of the alphabet, uniformly (bytes of 240 and above redrawn). */
export function newUserCode(): string {
  let code = "";
  while (code.length < 8) {
    for (const byte of crypto.getRandomValues(new Uint8Array(16))) {
      if (byte < 240 && code.length < 8) code += userCodeAlphabet[byte % 20];
    }
  }
  return code;
}

/** A user code as typed, normalised (`BCDFGHJK`), or undefined when it cannot be one. */
export function normalizeUserCode(typed: string): string | undefined {
  const code = typed.replace(/[-\s]/g, "").toUpperCase();
  return /^[BCDFGHJKLMNPQRSTVWXZ]{8}$/.test(code) ? code : undefined;
}

/** `XXXX-XXXX`. */
export function formatUserCode(code: string): string {
  return `${code.slice(0, 4)}-${code.slice(4)}`;
}

/** A refusal of the verification page, with an `oauth2` reason the gateway tells apart. */
function pageError(code: Code, reason: string, message: string): ConnectError {
  return new ConnectError(oauthDescription(message), code, undefined, [
    { desc: ErrorInfoSchema, value: { reason, domain: oauthErrorDomain, metadata: {} } },
  ]);
}

const wrongCode = () =>
  pageError(
    Code.NotFound,
    "invalid_grant",
    "That code is not valid: it may be mistyped, expired or already used",
  );
/**
 * The consent form of a code posted again once the code is decided (a double click, Back): its
 * token shows this session was shown that code while it was pending, so it is no guess.
 */
const answeredAlready = () =>
  pageError(
    Code.FailedPrecondition,
    "invalid_grant",
    "This code was answered already: the device has its answer",
  );
const tooManyGuesses = () =>
  pageError(
    Code.ResourceExhausted,
    "slow_down",
    "Too many wrong codes: try again in a few minutes",
  );

/** StartDeviceAuthorization (RFC 8628 3.1, 3.2). */
export async function startDeviceAuthorization(deps: DeviceDeps, client: Client, scope: string) {
  if (client.type === ClientType.SPA) {
    throw oauthError(
      "unauthorized_client",
      "The device flow is for native and web clients; a browser app uses the authorization code flow",
    );
  }
  const scopes = parseScope(scope);
  const config = await deps.registry.getConfig(client.projectId);
  // As at the authorization endpoint: no consent screen, no consent; and a project that declares
  // its scopes gives no other.
  if (!config) throw oauthError("invalid_client", "The application has no consent screen");
  if (scopes.length > 0) checkDeclared(config, scopes);
  const deviceCode = randomToken("odc_");
  const at = deps.now();
  for (let tries = 0;; tries++) {
    const userCode = newUserCode();
    const created = await deps.devices.create({
      device_code_hash: sha256(deviceCode),
      user_code_hash: sha256(userCode),
      client_id: client.id,
      project_id: client.projectId,
      scopes,
      created_at: new Date(at),
      expires_at: new Date(at + deviceCodeTtlSeconds * 1000),
      interval_seconds: pollIntervalSeconds,
      last_polled_at: new Date(at),
    });
    if (created) {
      const verificationUri = deps.issuer + oauthPaths.device;
      const shown = formatUserCode(userCode);
      return {
        deviceCode,
        userCode: shown,
        verificationUri,
        verificationUriComplete: `${verificationUri}?user_code=${shown}`,
        expiresIn: BigInt(deviceCodeTtlSeconds),
        interval: BigInt(pollIntervalSeconds),
      };
    }
    // A user code of a live (or recently expired) device code: draw another.
    if (tries >= 5) throw new ConnectError("No free user code", Code.Unavailable);
  }
}

/** StartDeviceVerification: the code form's CSRF token. */
export async function startDeviceVerification(deps: DeviceDeps, ctx: HandlerContext) {
  return {
    csrfToken: await csrfToken(deps, ctx, ["device-code-form"]),
    accountId: callerOf(ctx).accountId,
  };
}

/**
 * The address a guess counts against: its network, as every limit per address counts it
 * (lib/platform/addresses.ts: an IPv6 address as its /64).
 */
export const guessAddress = addressKey;

/**
 * The keys a typed code counts against: the signed-in user (every session of theirs is one: a
 * new sign-in, or the same token written another way, which verifies alike, is no fresh count),
 * and the client's address when known ({@link guessAddress}).
 */
export function guessKeys(subject: string, clientAddress: string): Uint8Array[] {
  const keys = [sha256(`user\n${subject}`)];
  if (clientAddress !== "") keys.push(sha256(`address\n${guessAddress(clientAddress)}`));
  return keys;
}

/** A typed user code, through the guessing limit: its pending row, or the refusal. */
async function attempt(
  deps: DeviceDeps,
  ctx: HandlerContext,
  typed: string,
  clientAddress: string,
): Promise<{ row: DeviceCodeRow; code: string }> {
  const code = normalizeUserCode(typed);
  const found = await deps.devices.attempt(
    code === undefined ? undefined : sha256(code),
    guessKeys(callerOf(ctx).subject, clientAddress),
    new Date(deps.now()),
    guessLimit,
  );
  if (found === "blocked") throw tooManyGuesses();
  if (found === undefined || code === undefined) throw wrongCode();
  return { row: found, code };
}

/** The client of a code, still active, and its project's consent screen. */
async function clientAndConfig(deps: DeviceDeps, ctx: HandlerContext, row: DeviceCodeRow) {
  const client = await deps.registry.lookupClient(row.client_id);
  if (!client || client.status !== ClientStatus.ACTIVE) throw wrongCode();
  const config = await deps.registry.getConfig(client.projectId);
  if (!config) throw wrongCode();
  if (config.audience === Audience.INTERNAL && !administers(callerOf(ctx), client.projectId)) {
    throw oauthError("access_denied", "This application is only for the users of its project");
  }
  return { client, config };
}

/** LookupDeviceCode: the consent screen for a typed user code. */
export async function lookupDeviceCode(
  deps: DeviceDeps,
  req: { userCode: string; csrfToken: string; clientAddress: string },
  ctx: HandlerContext,
): Promise<{ consent: MessageInitShape<typeof ConsentScreenSchema>; userCode: string }> {
  if (!(await csrfValid(deps, ctx, req.csrfToken, ["device-code-form"]))) {
    throw oauthError("invalid_request", "The page expired or was not shown to this session");
  }
  const { row, code } = await attempt(deps, ctx, req.userCode, req.clientAddress);
  const { client, config } = await clientAndConfig(deps, ctx, row);
  return {
    userCode: formatUserCode(code),
    consent: {
      ...consentBranding(config, client, ctx),
      scopes: row.scopes,
      // The project's words for each scope, as the consent page shows them.
      scopeDetails: describeScopes(config, row.scopes),
      redirectTarget: "",
      csrfToken: await csrfToken(deps, ctx, ["device-consent", code]),
    },
  };
}

/** DecideDeviceCode: Allow (consent, and the code approved) or Deny. */
export async function decideDeviceCode(
  deps: DeviceDeps,
  req: { userCode: string; decision: Decision; csrfToken: string; clientAddress: string },
  ctx: HandlerContext,
): Promise<{ applicationName: string }> {
  const typed = normalizeUserCode(req.userCode) ?? "";
  if (!(await csrfValid(deps, ctx, req.csrfToken, ["device-consent", typed]))) {
    throw oauthError("invalid_request", "The page expired or was not shown to this session");
  }
  if (req.decision !== Decision.ALLOW && req.decision !== Decision.DENY) {
    throw oauthError("invalid_request", "decision must be allow or deny");
  }
  // The same form again: said so, and not counted as a wrong code.
  if (typed !== "" && (await deps.devices.decided(sha256(typed)))) throw answeredAlready();
  const { row, code } = await attempt(deps, ctx, typed, req.clientAddress).catch(async (error) => {
    // Decided since the check above (the other button, another tab): said so all the same (the
    // attempt has counted it, one wrong code).
    if (error instanceof ConnectError && error.code === Code.NotFound && typed !== "") {
      if (await deps.devices.decided(sha256(typed))) throw answeredAlready();
    }
    throw error;
  });
  const { client, config } = await clientAndConfig(deps, ctx, row);
  const hash = sha256(code);
  // The user's choice is a security event (`allowed`, `denied`: ./security_events.ts), written
  // by the statement that decides the code.
  const audit = auditContextOf(ctx, deps.now());
  /** A decision that found the code no longer pending: decided meanwhile, or expired. */
  const lost = async () => (await deps.devices.decided(hash)) ? answeredAlready() : wrongCode();
  if (req.decision === Decision.DENY) {
    if (!(await deps.devices.deny(hash, new Date(deps.now()), audit))) throw await lost();
    return { applicationName: config.applicationName };
  }
  // Allow is the installation consent, recorded by the decision that wins the code only (as
  // Google records a grant once the device's request is approved): the repository holds the code
  // while the registry records it, so a Deny from another tab either won before (nothing is
  // recorded) or waits and finds the code approved. A consent refused leaves the code pending.
  let approved;
  try {
    approved = await deps.devices.approve(hash, new Date(deps.now()), async () => {
      const installation = await deps.registry.consent(
        ctx.requestHeader,
        client.projectId,
        row.scopes,
      );
      return {
        installationId: installation.id,
        accountId: installation.accountId,
        principalId: installation.principalId ?? "",
      };
    }, audit);
  } catch (error) {
    if (error instanceof ConnectError && error.code === Code.PermissionDenied) {
      throw oauthError("access_denied", "This application is only for the users of its project");
    }
    throw error;
  }
  if (!approved) throw await lost();
  return { applicationName: config.applicationName };
}
