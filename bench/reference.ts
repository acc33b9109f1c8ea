/**
 * The benchmark's reference: the least work a request can do here. One Deno process,
 * `Deno.serve` + postgres.js (pool of 10), running the SAME repository code (so the same SQL) as
 * the services for the same requests, and writing JSON, with no RPC hop, no token check and no
 * validation. The stack's throughput is judged as a ratio to this, measured in the same run.
 *
 *   DATABASE_URL=... PORT=... CLIENT_SECRET_HMAC_KEY=... deno run -A bench/reference.ts
 *
 * @module
 */

import { Buffer } from "node:buffer";
import type { Write } from "../lib/audit/mod.ts";
import { connect } from "../lib/db/mod.ts";
import { idKind } from "../lib/platform/mod.ts";
import { createJourneyRepository } from "../services/core/repository/journeys.ts";
import { createUnitRepository, type UnitRow } from "../services/core/repository/units.ts";
import { createClientSecretRepository } from "../services/oauth/repository/client_secrets.ts";
import { type ClientRow, createClientRepository } from "../services/oauth/repository/clients.ts";
import { createConfigRepository } from "../services/oauth/repository/configs.ts";
import { createInstallationRepository } from "../services/oauth/repository/installations.ts";
import { createSecretHasher } from "../services/oauth/secrets.ts";

const ids = {
  client: idKind("cli"),
  secret: idKind("sec"),
  installation: idKind("ins"),
  principal: idKind("prn"),
  journey: idKind("journey"),
  unit: idKind("unit"),
};
const project = "bench";

/** The audit event every write records, as the services do (the same statements). */
function write(req: Request): Write {
  return {
    audit: {
      method: `reference/${req.method}`,
      sub: account,
      clientId: null,
      installationId: null,
      requestId: crypto.randomUUID(),
      sourceIp: "127.0.0.1",
      userAgent: req.headers.get("user-agent") ?? "",
      peer: "127.0.0.1",
      at: new Date(),
    },
  };
}
const space = "bench";
const account = "bench-account";

const sql = connect(Deno.env.get("DATABASE_URL")!, { max: 10, applicationName: "reference" });
const clients = createClientRepository(sql);
const configs = createConfigRepository(sql);
const secrets = createClientSecretRepository(sql);
const installations = createInstallationRepository(sql);
const journeys = createJourneyRepository(sql);
const units = createUnitRepository(sql);
const hasher = createSecretHasher(Deno.env.get("CLIENT_SECRET_HMAC_KEY")!);
const maxSecretsPerClient = Number(Deno.env.get("MAX_SECRETS_PER_CLIENT") ?? 10);

function client(row: ClientRow): Record<string, unknown> {
  return {
    id: ids.client.fromUuid(row.id),
    project_id: row.project_id,
    name: row.name,
    type: row.type,
    redirect_uris: row.redirect_uris,
    javascript_origins: row.javascript_origins,
    status: row.status,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

function unit(row: UnitRow): Record<string, unknown> {
  return {
    object: "unit",
    id: ids.unit.fromUuid(row.id),
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
    journey: ids.journey.fromUuid(row.journey_id),
    originator: row.originator,
    title: row.title,
    assignee: row.assignee,
    status: row.status,
    priority: row.priority,
    description: row.description,
    due_at: row.due_at?.toISOString() ?? null,
  };
}

const notFound = () => Response.json({ error: "not found" }, { status: 404 });

async function handle(req: Request): Promise<Response> {
  const url = new URL(req.url);
  const parts = url.pathname.split("/").slice(1);
  const text = req.method === "POST" || req.method === "PATCH" ? await req.text() : "";
  const body = text === "" ? {} : JSON.parse(text);
  switch (`${req.method} ${parts[0]}/${parts.length}`) {
    case "POST clients/1": {
      const row = await clients.create({
        id: ids.client.generate().uuid,
        project_id: project,
        name: body.name,
        type: body.type,
        redirect_uris: body.redirect_uris ?? [],
        javascript_origins: body.javascript_origins ?? [],
      }, write(req));
      return Response.json(client(row), { status: 201 });
    }
    case "GET clients/1": {
      const limit = Number(url.searchParams.get("limit") ?? 20);
      const rows = await clients.list(project, limit, undefined);
      return Response.json({
        data: rows.slice(0, limit).map(client),
        has_more: rows.length > limit,
      });
    }
    case "GET clients/2": {
      const row = await clients.get(project, ids.client.toUuid(parts[1]!)!);
      return row ? Response.json(client(row)) : notFound();
    }
    case "PATCH clients/2": {
      const uuid = ids.client.toUuid(parts[1]!)!;
      const current = await clients.get(project, uuid);
      if (!current) return notFound();
      // As the registry does: a patch that changes nothing writes nothing.
      if (current.name === body.name) return Response.json(client(current));
      const row = await clients.update(project, uuid, { name: body.name }, write(req));
      return Response.json(client(row!));
    }
    case "POST clients/3": {
      const generated = hasher.generate();
      const result = await secrets.create(project, {
        id: ids.secret.generate().uuid,
        client_id: ids.client.toUuid(parts[1]!)!,
        secret_hash: generated.hash,
        hash_key_id: Buffer.from(hasher.keyId, "hex"),
        secret_hint: generated.hint,
      }, {
        now: new Date(),
        maxLive: maxSecretsPerClient,
        maxAll: 2 * maxSecretsPerClient,
        expiresAt: () => null,
        write: write(req),
      });
      if (result.kind !== "created") return notFound();
      return Response.json({
        id: ids.secret.fromUuid(result.row.id),
        client_id: parts[1],
        secret_hint: result.row.secret_hint,
        created_at: result.row.created_at.toISOString(),
        expires_at: null,
        last_used_at: null,
        status: "active",
        secret: generated.secret,
      }, { status: 201 });
    }
    case "POST verify/1": {
      const now = new Date();
      const row = await secrets.clientWithSecrets(ids.client.toUuid(body.client_id)!, now);
      const stored = row?.secrets.map((s) => ({ hash: s.hash, keyId: s.hash_key_id })) ?? [];
      const secret = row?.secrets[hasher.match(body.secret, stored).index];
      const valid = secret !== undefined && row!.status === "active";
      if (!valid) return Response.json({ valid });
      await secrets.recordUse(secret.id, secret.last_used_at, now);
      const expiresAt = secret.expires_at?.toISOString();
      return Response.json({ valid, client: client(row!), expires_at: expiresAt });
    }
    case "POST installations/1": {
      const config = await configs.get(body.project_id);
      if (!config) return notFound();
      const row = await installations.consent({
        id: ids.installation.generate().uuid,
        project_id: body.project_id,
        account_id: account,
        principal_id: ids.principal.generate().id,
        application_name: config.application_name,
        scopes: body.scopes ?? [],
        authorized_by_id: account,
      }, write(req));
      return Response.json({
        ...row,
        id: ids.installation.fromUuid(row.id),
        authorized_at: row.authorized_at.toISOString(),
        created_at: row.created_at.toISOString(),
        revoked_at: row.revoked_at?.toISOString() ?? null,
      }, { status: 201 });
    }
    case "POST units/1": {
      const journey = ids.journey.toUuid(body.journey)!;
      const row = await units.create({
        id: ids.unit.generate().uuid,
        space,
        originator: account,
        journey_id: journey,
        title: body.title,
        assignee: null,
        status: "todo",
        priority: "none",
        description: null,
        due_at: null,
      }, write(req));
      if (!row) return notFound();
      return Response.json(unit(row), { status: 201 });
    }
    case "GET units/1": {
      const journey = ids.journey.toUuid(url.searchParams.get("journey")!)!;
      if (!(await journeys.get(space, journey))) return notFound();
      const limit = Number(url.searchParams.get("limit") ?? 20);
      const rows = await units.list(journey, {}, limit, undefined);
      return Response.json({
        object: "list",
        data: rows.slice(0, limit).map(unit),
        has_more: rows.length > limit,
      });
    }
    case "GET units/2": {
      const row = await units.get(space, ids.unit.toUuid(parts[1]!)!);
      return row ? Response.json(unit(row)) : notFound();
    }
  }
  return notFound();
}

const server = Deno.serve({
  port: Number(Deno.env.get("PORT") ?? 0),
  hostname: "127.0.0.1",
  onListen: ({ port }) => {
    // deno-lint-ignore no-console
    console.log(JSON.stringify({ msg: "serving", port }));
  },
}, handle);

Deno.addSignalListener("SIGTERM", async () => {
  await server.shutdown();
  await sql.end();
  Deno.exit(0);
});
