/**
 * DecideDeviceCode's Allow and Deny of one user code at once (two tabs, a double click), on a real
 * Postgres with a registry whose consent the test holds open: the decision that wins the device
 * code is the only one that records anything, so a Deny that won leaves no consent behind; and a
 * decision that lost the code between its checks is told the code was answered, not that it is
 * wrong.
 */

import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ClientSchema, ClientStatus, ClientType } from "../../gen/registry/oauth/v1/client_pb.ts";
import { OAuthConfigSchema } from "../../gen/registry/oauth/v1/config_pb.ts";
import {
  type Installation,
  InstallationSchema,
} from "../../gen/registry/oauth/v1/installation_pb.ts";
import { Decision, TokenService } from "../../gen/registry/token/v1/token_service_pb.ts";
import { connect, migrate, readMigrations } from "../../lib/db/mod.ts";
import { sha256 } from "../../lib/platform/mod.ts";
import { createTestDatabase, queuedOrAnswered, signedInCall } from "../../lib/testing/mod.ts";
import { deriveCsrfKey } from "./authorization.ts";
import { csrfToken } from "./csrf.ts";
import { decideDeviceCode, type DeviceDeps } from "./device.ts";
import type { Registry } from "./registry.ts";
import { createDeviceCodeRepository } from "./repository/device_codes.ts";

Deno.test("device decisions at once: consent is recorded only by the one that wins", async (t) => {
  const db = await createTestDatabase();
  const sql = connect(db.url, { applicationName: "device-decision-test", max: 8 });
  try {
    await migrate(sql, "token", await readMigrations(new URL("./migrations/", import.meta.url)));
    const repository = createDeviceCodeRepository(sql);
    /** Held open once after it answered, when the test says: a decision paused at that point. */
    let holdDecided: { entered: () => void; release: Promise<void> } | undefined;
    const devices = {
      ...repository,
      async decided(hash: Uint8Array) {
        const answer = await repository.decided(hash);
        const held = holdDecided;
        holdDecided = undefined;
        if (held) {
          held.entered();
          await held.release;
        }
        return answer;
      },
    };
    const client = create(ClientSchema, {
      id: "cli_tv",
      projectId: "p1",
      type: ClientType.NATIVE,
      status: ClientStatus.ACTIVE,
    });
    /** The consents the registry recorded, and the one it holds open until the test says. */
    const consents: string[][] = [];
    let hold: { entered: () => void; release: Promise<void> } | undefined;
    let refuse = false;
    const registry = {
      lookupClient: () => Promise.resolve(client),
      getConfig: () => Promise.resolve(create(OAuthConfigSchema, { applicationName: "TV" })),
      async consent(_call: Headers, _projectId: string, scopes: string[]) {
        if (refuse) {
          refuse = false;
          throw new ConnectError("internal project", Code.PermissionDenied);
        }
        const held = hold;
        hold = undefined;
        if (held) {
          held.entered();
          await held.release;
        }
        consents.push(scopes);
        return create(InstallationSchema, { id: "ins_1", accountId: "acct-1" }) as Installation;
      },
    } as unknown as Registry;
    const deps: DeviceDeps = {
      registry,
      devices,
      issuer: "https://issuer.example",
      csrfKeys: [deriveCsrfKey("a secret of at least thirty-two characters")],
      now: Date.now,
    };
    const ctx = await signedInCall(TokenService.method.decideDeviceCode);
    let n = 0;
    /** A pending device code; its user code and the consent form's CSRF token. */
    const pending = async () => {
      const userCode = ["BCDFGHJK", "LMNPQRST", "VWXZBCDF", "GHJKLMNP", "QRSTVWXZ"][n++]!;
      const at = Date.now();
      assert.ok(
        await devices.create({
          device_code_hash: sha256(`device ${userCode}`),
          user_code_hash: sha256(userCode),
          client_id: client.id,
          project_id: client.projectId,
          scopes: ["tv.watch"],
          created_at: new Date(at),
          expires_at: new Date(at + 600_000),
          interval_seconds: 5,
          last_polled_at: new Date(at),
        }),
      );
      return { userCode, csrf: await csrfToken(deps, ctx, ["device-consent", userCode]) };
    };
    const decide = (code: { userCode: string; csrf: string }, decision: Decision) =>
      decideDeviceCode(deps, {
        userCode: code.userCode,
        decision,
        csrfToken: code.csrf,
        clientAddress: "",
      }, ctx);
    const status = async (userCode: string) =>
      (await sql<{ status: string }[]>`
        select status from token.device_codes where user_code_hash = ${sha256(userCode)}`)[0]!
        .status;
    const answeredAlready = (error: unknown) =>
      error instanceof ConnectError && /answered already/.test(error.rawMessage);

    await t.step(
      "Deny while Allow records the consent: Deny waits, and finds it approved",
      async () => {
        const code = await pending();
        const entered = Promise.withResolvers<void>();
        const release = Promise.withResolvers<void>();
        hold = { entered: entered.resolve, release: release.promise };
        const allow = decide(code, Decision.ALLOW);
        await entered.promise;
        const deny = decide(code, Decision.DENY).then(() => "denied", (e) => e);
        // Deny either decides at once (the code is not held while the consent is recorded) or
        // queues behind the Allow that holds it.
        const first = await queuedOrAnswered(sql, deny, "the Deny");
        release.resolve();
        const allowed = await allow.then(() => "approved", (e) => e);
        const denied = await deny;
        // The code is approved and the consent recorded, or denied and nothing recorded: never a
        // Deny that stands beside a consent.
        assert.equal(await status(code.userCode), "approved");
        assert.deepEqual(consents, [["tv.watch"]]);
        assert.equal(allowed, "approved");
        assert.ok(answeredAlready(denied), String(denied));
        assert.equal(first, "queued");
      },
    );

    await t.step("Allow after a Deny won: nothing recorded", async () => {
      consents.length = 0;
      const code = await pending();
      await decide(code, Decision.DENY);
      await assert.rejects(decide(code, Decision.ALLOW), answeredAlready);
      assert.equal(await status(code.userCode), "denied");
      assert.deepEqual(consents, []);
    });

    await t.step("two Allows at once: one consent, one approval", async () => {
      consents.length = 0;
      const code = await pending();
      const entered = Promise.withResolvers<void>();
      const release = Promise.withResolvers<void>();
      hold = { entered: entered.resolve, release: release.promise };
      const first = decide(code, Decision.ALLOW);
      await entered.promise;
      const second = decide(code, Decision.ALLOW).then(() => "approved", (e) => e);
      const queued = await queuedOrAnswered(sql, second, "the second Allow");
      release.resolve();
      const firstAnswer = await first.then(() => "approved", (e) => e);
      assert.deepEqual(consents, [["tv.watch"]]);
      assert.equal(firstAnswer, "approved");
      assert.ok(answeredAlready(await second));
      assert.equal(await status(code.userCode), "approved");
      assert.equal(queued, "queued");
    });

    await t.step(
      "a Deny that found the code pending, then lost it to an Allow: answered already",
      async () => {
        consents.length = 0;
        const code = await pending();
        const entered = Promise.withResolvers<void>();
        const release = Promise.withResolvers<void>();
        holdDecided = { entered: entered.resolve, release: release.promise };
        const deny = decide(code, Decision.DENY).then(() => "denied", (e) => e);
        await entered.promise;
        await decide(code, Decision.ALLOW);
        release.resolve();
        const denied = await deny;
        assert.ok(answeredAlready(denied), String(denied));
        assert.equal(await status(code.userCode), "approved");
      },
    );

    await t.step("a consent the registry refuses leaves the code pending", async () => {
      consents.length = 0;
      const code = await pending();
      refuse = true;
      await assert.rejects(
        decide(code, Decision.ALLOW),
        (e) => e instanceof ConnectError && /only for the users/.test(e.rawMessage),
      );
      assert.equal(await status(code.userCode), "pending");
      await decide(code, Decision.DENY);
      assert.equal(await status(code.userCode), "denied");
      assert.deepEqual(consents, []);
    });
  } finally {
    await sql.end();
    await db.drop();
  }
});
