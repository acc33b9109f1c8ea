/**
 * Pushed authorization requests (RFC 9126). A client sends its authorization request from its back
 * end (`POST /oauth2/par`, authenticated as at the token endpoint); it is checked whole, as the
 * authorization endpoint checks it before a user is known, and kept for {@link pushedTtlSeconds}
 * under a new `request_uri`. The authorization endpoint then takes `client_id` and `request_uri`
 * and works on the request that was pushed, whatever else the browser's URL says (RFC 9126 4).
 *
 * Two lifetimes: `expires_in`, {@link pushedTtlSeconds}, is the time the request_uri has to reach
 * the authorization endpoint. Its first StartAuthorization (with a user, or without one for a user
 * who is sent to sign in first) marks it arrived and gives it {@link interactionTtlMs} from then,
 * once, for the sign-in and the decision (reloading the page does not lengthen it again); it is
 * still good for one decision. As node-oidc-provider, Keycloak and Hydra do, the short lifetime is
 * the URI's, not a deadline for the user.
 *
 * DPoP (RFC 9449 10.1): the PAR request's DPoP proof, checked by the token endpoint's checker
 * (./dpop.ts) before this module sees the request, binds it as a `dpop_jkt` of the proof's key
 * would; both, differing, are `invalid_request`.
 *
 * A request_uri is good for one decision: DecideAuthorization spends it once the session and the
 * consent page's CSRF token are verified and the choice is Allow or Deny, before it acts on it (so
 * a forged or stale POST spends nothing, and two concurrent decisions cannot both get a code), and
 * a StartAuthorization that answers with a redirect (an error, or a code when consent needs no
 * page) spends it after; so does a DecideAuthorization answered with an error redirect (the
 * request no longer passes its checks), before it answers. It is good only with the client that
 * pushed it, and only until it expires; any other use is `invalid_request`, shown to the user,
 * never redirected (nothing says where the request came from).
 *
 * When the server requires PAR (REQUIRE_PAR) or the client does
 * (`require_pushed_authorization_requests`), an authorization request without `request_uri` is
 * refused by ./authorization.ts's checks: once the client and the redirect URI are known good,
 * `invalid_request` is sent back to the client with `state` and `iss` (RFC 9126 4).
 *
 * @module
 */

import { sha256 } from "../../lib/platform/mod.ts";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.ts";
import type { Client } from "../../gen/registry/oauth/v1/client_pb.ts";
import {
  type AuthorizationRequest,
  AuthorizationRequestSchema,
} from "../../gen/registry/token/v1/token_service_pb.ts";
import { csrfTtlMs } from "./csrf.ts";
import { oauthError, oauthErrorDomain } from "./oauth_errors.ts";
import { randomToken } from "./opaque_tokens.ts";
import type { PushedRequests } from "./repository/pushed_requests.ts";

/**
 * How long a pushed request's request_uri has to reach the authorization endpoint (RFC 9126 2.2
 * `expires_in`: short; we take 60 seconds).
 */
export const pushedTtlSeconds = 60;

/**
 * How long a pushed request lives once the authorization endpoint has resolved it, for the sign-in
 * and the user's decision: the consent page's CSRF lifetime (./csrf.ts), 10 minutes.
 */
export const interactionTtlMs = csrfTtlMs;

/** The prefix of every request_uri (RFC 9126 2.2). */
export const requestUriPrefix = "urn:ietf:params:oauth:request_uri:";

/** Options of {@link createPushed}. */
export interface PushedOptions {
  /** The table. */
  repository: PushedRequests;
  /** The clock (ms since the epoch). */
  now: () => number;
}

/** Pushed requests: storing, resolving and spending them. */
export interface Pushed {
  /**
   * Stores `request` for `client` (authenticated) once `check` (the authorization endpoint's
   * checks, throwing the RFC 6749 5.2 error) accepts it, and returns its request_uri and lifetime.
   * `proofJkt`, the thumbprint of the key of the PAR request's checked DPoP proof, is kept as the
   * request's `dpop_jkt` (RFC 9449 10.1); a `dpop_jkt` that differs is `invalid_request`.
   */
  push(
    client: Client,
    request: AuthorizationRequest,
    check: (request: AuthorizationRequest) => Promise<void>,
    proofJkt?: string,
  ): Promise<{ requestUri: string; expiresIn: number }>;
  /**
   * The request the authorization endpoint works on: the pushed one when `request` names a
   * request_uri (still carrying it), else `request` itself. Throws what the user is shown.
   * `arrive` (StartAuthorization): the first time, the request_uri's lifetime becomes
   * {@link interactionTtlMs} from now.
   */
  resolve(
    request: AuthorizationRequest | undefined,
    arrive: boolean,
  ): Promise<AuthorizationRequest | undefined>;
  /** Spends a resolved request's request_uri, if it has one; throws when it was spent already. */
  spend(request: AuthorizationRequest | undefined): Promise<void>;
}

/** An error shown on the page, never redirected (see ./authorization.ts). */
function shown(description: string): ConnectError {
  return new ConnectError(description, Code.InvalidArgument, undefined, [
    { desc: ErrorInfoSchema, value: { reason: "invalid_request", domain: oauthErrorDomain } },
  ]);
}

/** Creates the pushed-request store. */
export function createPushed(options: PushedOptions): Pushed {
  const { repository, now } = options;
  const gone = () =>
    shown("The request_uri is unknown, expired or already used: start the sign-in again");
  return {
    async push(client, request, check, proofJkt) {
      if (request.requestUri !== "") {
        throw oauthError("invalid_request", "A pushed request cannot carry request_uri");
      }
      // RFC 9126 2.1: required, as in any authorization request, whoever authenticated.
      if (request.clientId === "") throw oauthError("invalid_request", "client_id is required");
      if (request.clientId !== client.id) {
        throw oauthError("invalid_request", "client_id differs from the authenticated client");
      }
      if (proofJkt !== undefined && request.dpopJkt !== "" && request.dpopJkt !== proofJkt) {
        throw oauthError(
          "invalid_request",
          "dpop_jkt is not the thumbprint of the DPoP proof's key",
        );
      }
      const requestUri = randomToken(requestUriPrefix);
      const stored = create(AuthorizationRequestSchema, {
        ...request,
        clientId: client.id,
        dpopJkt: proofJkt ?? request.dpopJkt,
      });
      await check(stored);
      await repository.create(sha256(requestUri), {
        client_id: client.id,
        request: toBinary(AuthorizationRequestSchema, stored),
        expires_at: new Date(now() + pushedTtlSeconds * 1000),
      });
      return { requestUri, expiresIn: pushedTtlSeconds };
    },

    async resolve(request, arrive) {
      if (!request || request.requestUri === "") return request;
      if (!request.requestUri.startsWith(requestUriPrefix)) throw gone();
      const hash = sha256(request.requestUri);
      const at = now();
      const row = arrive
        ? await repository.arrive(
          hash,
          request.clientId,
          new Date(at),
          new Date(at + interactionTtlMs),
        )
        : await repository.find(hash);
      if (
        !row || row.decided_at !== null || row.expires_at.getTime() <= at ||
        row.client_id !== request.clientId
      ) throw gone();
      const pushed = fromBinary(AuthorizationRequestSchema, row.request);
      return { ...pushed, requestUri: request.requestUri };
    },

    async spend(request) {
      if (!request || request.requestUri === "") return;
      if (!(await repository.decide(sha256(request.requestUri), new Date(now())))) {
        throw gone();
      }
    },
  };
}
