/**
 * The device code grant (RFC 8628 3.4, 3.5): the device polls with its device code until the user
 * decided on the verification page (../device.ts). `authorization_pending` while undecided;
 * `slow_down` for a poll of an undecided request sooner than the interval after the previous one
 * (or the issue), which adds 5 seconds to the interval; `access_denied` after Deny, however soon;
 * `expired_token` after 600 seconds.
 * Approved, it buys the installation's access token and a refresh token, once, as a code does:
 * its client presenting it again is `invalid_grant` and revokes what the first redemption issued
 * (before its expiry: after, it is only `expired_token`).
 * Another client's device code is as unknown as a made-up one, and its poll changes nothing.
 *
 * @module
 */

import { sha256 } from "../../../lib/platform/mod.ts";
import { oauthError } from "../oauth_errors.ts";
import { type Grant, issueInFamily, type Replay, replayed } from "./context.ts";

const reused: Replay = {
  description: "The device code was already used; the tokens it was exchanged for are revoked",
  result: "code_replayed",
  grantType: "urn:ietf:params:oauth:grant-type:device_code",
};

/** Runs the grant. */
export const deviceCode: Grant = async (deps, client, req, jkt) => {
  if (req.deviceCode === "") throw oauthError("invalid_request", "device_code is required");
  const hash = sha256(req.deviceCode);
  const poll = await deps.devices.poll(hash, client.id, new Date(deps.now()));
  switch (poll.kind) {
    case "unknown":
      throw oauthError("invalid_grant", "The device code is not valid");
    case "redeemed":
      if (poll.familyId === null) throw oauthError("invalid_grant", reused.description);
      return await replayed(deps, poll.familyId, reused);
    case "expired":
      throw oauthError("expired_token", "The device code has expired; start again");
    case "slow_down":
      throw oauthError("slow_down", "Polled too soon: wait 5 seconds more between polls");
  }
  const { row, family } = poll;
  if (row.status === "pending") {
    throw oauthError("authorization_pending", "The user has not decided yet");
  }
  if (row.status === "denied" || !family) {
    throw oauthError("access_denied", "The user denied access");
  }
  return await issueInFamily(
    deps,
    client,
    { family, spent: { deviceCodeHash: hash }, replayed: reused },
    { principalId: row.principal_id ?? "", accountId: row.account_id ?? "" },
    row.scopes,
    jkt,
  );
};
