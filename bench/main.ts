/**
 * `deno task bench [--quick]`: measures the stack against the least work a request can do.
 *
 * Starts the real processes (gateway, oauth-registry, core) and the reference (bench/reference.ts:
 * Deno.serve + postgres.js running the same repository code) against a throwaway database in the
 * server named by DATABASE_URL, seeds data, and drives every operation with h2load at a fixed
 * concurrency, after a warm-up, through three paths: the gateway (HTTP/JSON), the service directly
 * (gRPC over HTTP/2), and the reference. Rounds are interleaved (every path of every operation in
 * each round) and the median of the rounds is reported, with ratios to the reference measured in
 * the same round. Then the growth checks: a page of 100 at the start, middle and end of 1,000,000
 * clients of one project, and GET by id at 1,000 and 1,000,000 rows.
 *
 * Grants whose requests are good once (a client assertion and a DPoP proof carry a single-use
 * `jti`) cannot be repeated by h2load: they are signed in advance and sent by ./unique_load.ts,
 * which also sends the same grant with a secret, the baseline of their ratios. So are patches that
 * each change a client's name (a repeated body would change it once, then nothing), on the gateway
 * and the reference alike.
 *
 * Writes bench/results/<date>.json and .md (the full run) and prints the table. `--quick` runs
 * one short round on 10,000 rows, writes to a temporary folder, and finishes in under a minute:
 * CI runs it to check the harness, never a timing.
 *
 * For profiling: `--only REGEX` (operations), `--paths gateway,grpc,reference` and
 * `--cpu-prof DIR` (a V8 CPU profile per component), `--heap-prof DIR` (a V8 sampling heap profile
 * per component: where its garbage comes from) run a part and write no results.
 *
 * @module
 */

import type { DescMessage, MessageInitShape } from "@bufbuild/protobuf";
import postgres from "postgres";
import { CoreService } from "../gen/registry/core/v1/core_service_pb.ts";
import { TokenService } from "../gen/registry/token/v1/token_service_pb.ts";
import { ClientType } from "../gen/registry/oauth/v1/client_pb.ts";
import { OAuthRegistryService } from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { idKind } from "../lib/platform/mod.ts";
import { httpClient } from "../lib/testing/mod.ts";
import { spawn, startStack } from "../lib/testing/mod.ts";
import { parseCommandLine, positiveNumber, usageError } from "../tools/cli.ts";
import { ensureH2load, grpcTarget, h2load, type LoadResult, type LoadTarget } from "./h2load.ts";
import { followEvents } from "../tools/watch_events.ts";
import { ensurePeer, startPeer } from "./peer.ts";
import { uniqueLoad, type UniqueLoadSpec } from "./unique_load.ts";
import * as jose from "jose";

const usage = `Usage: deno task bench [options]

Measures the stack against the least work a request can do: starts the gateway, oauth-registry,
core, token-service and the reference (Deno.serve + postgres.js) against a throwaway database in
the server named by DATABASE_URL, seeds it, and drives each operation with h2load (installed from
Debian's nghttp2-client if missing) through the gateway, gRPC and the reference, and the token
endpoints through the peer too (node-oidc-provider, installed with npm into .bench-peer/); grants
with private_key_jwt and DPoP with requests signed in advance, against the same grant with a
secret, and patches each with a name of its own; then the growth checks.
A full run writes bench/results/<date>.json and .md and the table in README.md.

Options:
  --quick                  one short round on 10,000 rows, results in a temporary folder (CI)
  --rounds <n>             rounds, interleaved (3; 1 with --quick)
  --seconds <s>            seconds of load per run (8; 0.7 with --quick)
  --concurrency <n>        h2load connections (32)
  --growth-rows <n>        clients of the growth project (1,000,000; 10,000 with --quick)
  --only <regex>           only the operations matching it; writes no results
  --paths <list>           only these of gateway,grpc,reference,peer; writes no results
  --cpu-prof <dir>         a V8 CPU profile per component into <dir>
  --heap-prof <dir>        a V8 sampling heap profile per component into <dir>
  -h, --help               this text

Environment:
  DATABASE_URL             the Postgres server to make the throwaway database in (required)`;

const flags = parseCommandLine("bench", usage, {
  quick: { type: "boolean", default: false },
  rounds: { type: "string" },
  seconds: { type: "string" },
  concurrency: { type: "string", default: "32" },
  "growth-rows": { type: "string" },
  only: { type: "string" },
  paths: { type: "string" },
  "cpu-prof": { type: "string" },
  "heap-prof": { type: "string" },
});
const number = (option: string, value: string | undefined, fallback: number, integer = true) =>
  value === undefined ? fallback : positiveNumber("bench", usage, option, value, integer);
const quick = flags.quick === true;
const rounds = number("rounds", flags.rounds, quick ? 1 : 3);
const seconds = number("seconds", flags.seconds, quick ? 0.7 : 8, false);
const warmup = quick ? 0.3 : 1;
const concurrency = number("concurrency", flags.concurrency, 32);
const growthRows = number("growth-rows", flags["growth-rows"], quick ? 10_000 : 1_000_000);
if (flags.only !== undefined) {
  try {
    new RegExp(flags.only);
  } catch (error) {
    usageError("bench", usage, `--only: ${(error as Error).message}`);
  }
}
const knownPaths = ["gateway", "grpc", "reference", "peer"];
const unknownPath = flags.paths?.split(",").find((p) => !knownPaths.includes(p));
if (unknownPath !== undefined) {
  usageError("bench", usage, `--paths takes some of ${knownPaths.join(",")}, not "${unknownPath}"`);
}

// deno-lint-ignore no-console
const say = (text: string) => console.error(`bench: ${text}`);

if (!Deno.env.get("DATABASE_URL")) {
  // deno-lint-ignore no-console
  console.error(
    "bench: set DATABASE_URL to a Postgres server (e.g. postgres://postgres@127.0.0.1:5432/postgres)",
  );
  Deno.exit(2);
}
await ensureH2load();
say("installing the peer (node-oidc-provider) if missing");
await ensurePeer();

// --- the processes -------------------------------------------------------------------------

say("starting the stack and the reference");
const heapProfDir = flags["heap-prof"];
if (heapProfDir) {
  await Deno.mkdir(heapProfDir, { recursive: true });
  Deno.env.set("BENCH_HEAP_PROF_DIR", heapProfDir);
}
// --cpu-prof DIR: every component writes a V8 CPU profile there when it stops (open it in Chrome
// DevTools); --heap-prof DIR: a sampling heap profile, asked for before the stack stops (see
// ./heap_profile.ts). Profile one operation at a time with --only.
const profileFlags = [
  ...(flags["cpu-prof"] ? ["--cpu-prof", `--cpu-prof-dir=${flags["cpu-prof"]}`] : []),
  ...(heapProfDir
    ? [
      `--preload=${new URL("./heap_profile.ts", import.meta.url).pathname}`,
      `--allow-write=${heapProfDir}`,
    ]
    : []),
];
// Secrets are created by the tens of thousands for a few thousand clients.
const maxSecrets = "1000000";
const stack = await startStack({
  // As the manifests run it: the access log on (info), the guard and the memory budget on.
  env: { LOG_LEVEL: "info", MAX_SECRETS_PER_CLIENT: maxSecrets },
  // The gateway as it ships: the tests' response check (against the OpenAPI document) is off.
  checkResponses: false,
  // Enough to say why a process failed, not the access log of a whole run.
  keepLines: 2000,
  ...(profileFlags.length ? { denoFlags: profileFlags } : {}),
});
const refPort = (() => {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const p = (l.addr as Deno.NetAddr).port;
  l.close();
  return p;
})();
const hmacKey = "bench-hmac-key-".padEnd(40, "k");
const reference = spawn("bench/reference.ts", {
  DATABASE_URL: stack.databaseUrl,
  PORT: String(refPort),
  CLIENT_SECRET_HMAC_KEY: hmacKey,
  MAX_SECRETS_PER_CLIENT: maxSecrets,
}, profileFlags);
await reference.serving;
const peer = await startPeer();
const refUrl = `http://127.0.0.1:${refPort}`;
const sql = postgres(stack.databaseUrl, { max: 2, onnotice: () => {} });

// The reference hashes secrets with its own key; the services with theirs. Verification of the
// seeded secret is measured on each path with a secret hashed under that path's key.
const ids = { client: idKind("cli"), journey: idKind("journey"), unit: idKind("unit") };

// --- seed ----------------------------------------------------------------------------------

say("seeding");
const token = await stack.token({
  sub: "bench-account",
  projects: ["bench", "growth", "small", "feed"],
  space: "bench",
});
const api = httpClient(stack.gatewayUrl);
const auth = { authorization: `Bearer ${token}` };
await api("PATCH", "/v1/projects/bench/config", { token, json: { application_name: "Bench" } });

async function bulkClients(project: string, n: number, name: string): Promise<string[]> {
  const out: string[] = [];
  for (let start = 0; start < n; start += 5000) {
    const rows = Array.from({ length: Math.min(5000, n - start) }, (_, i) => {
      const id = ids.client.generate();
      out.push(id.id);
      return { id: id.uuid, project_id: project, name: `${name}${start + i}`, type: "web" };
    });
    await sql`insert into oauth.clients ${sql(rows)}`;
  }
  return out;
}
const readClients = await bulkClients("bench", 1000, "read");
const secretClients = await bulkClients("bench", quick ? 2000 : 8000, "secret");
const verifyClient = (await api("POST", "/v1/projects/bench/clients", {
  token,
  json: { name: "verify", type: "web" },
})).body.id as string;
const serviceSecret =
  (await api("POST", `/v1/projects/bench/clients/${verifyClient}/secrets`, { token }))
    .body.secret as string;
const refSecret =
  (await (await fetch(`${refUrl}/clients/${verifyClient}/secrets`, { method: "POST" })).json())
    .secret as string;
const journey =
  (await api("POST", "/v1/core/journeys", { token, json: { name: "bench" } })).body.id;
const listJourney =
  (await api("POST", "/v1/core/journeys", { token, json: { name: "list" } })).body.id;
const readUnits: string[] = [];
for (let i = 0; i < 100; i++) {
  readUnits.push(
    (await api("POST", "/v1/core/units", { token, json: { journey: listJourney, title: `u${i}` } }))
      .body.id,
  );
}

// --- the operations ------------------------------------------------------------------------

const json = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));
const h1 = (
  urls: string[],
  method: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Target => ({
  urls,
  method,
  ...(body !== undefined ? { body: json(body) } : {}),
  headers: { ...(body !== undefined ? { "content-type": "application/json" } : {}), ...headers },
  h1: true,
});
const grpc = <I extends DescMessage>(
  address: string,
  method: { parent: { typeName: string }; name: string; input: I },
  request: MessageInitShape<I>,
): Target => grpcTarget(address, method, request, auth);

type Target = LoadTarget;
/** A GET of a client read from the source, not from memory (see its operation). */
const noCacheGet = "get client (no-cache)";
const fromSource = { "cache-control": "no-cache" };
/** GETs of the seeded clients on each path, with `headers` besides the token. */
const clientReads = (headers: Record<string, string>): Op["paths"] => ({
  gateway: h1(
    readClients.map((id) => `${gw}/v1/projects/bench/clients/${id}`),
    "GET",
    undefined,
    { ...auth, ...headers },
  ),
  grpc: grpcTarget(stack.oauthGrpc, oauth.getClient, {
    projectId: "bench",
    clientId: readClients[0]!,
  }, { ...auth, ...headers }),
  reference: h1(readClients.map((id) => `${refUrl}/clients/${id}`), "GET"),
});
/** Requests sent once each (./unique_load.ts), for what h2load cannot repeat. */
type UniqueTarget = { unique: Omit<UniqueLoadSpec, "concurrency" | "seconds" | "warmupSeconds"> };
type Path = "gateway" | "grpc" | "reference" | "peer";
interface Op {
  name: string;
  /**
   * Reads and writes are judged against the reference; token calls against the peer; client
   * authentication and DPoP (`sender`) against {@link senderBaseline} through the same load tool;
   * the sign-in flows' hot answers (`flow`) against a gateway GET of a client from the source
   * (`Cache-Control: no-cache`).
   */
  kind: "read" | "write" | "token" | "sender" | "flow";
  paths: Partial<Record<Path, Target | UniqueTarget>>;
  /** Runs before each measured run (e.g. to make room for new secrets). */
  before?: () => Promise<unknown>;
}

const gw = stack.gatewayUrl;
/** A form POST with the seeded client's Basic credentials (the OAuth endpoints). */
const basic = `Basic ${btoa(`${verifyClient}:${serviceSecret}`)}`;
const form = (url: string, body: string, authorization = basic): Target => ({
  urls: [url],
  method: "POST",
  body: new TextEncoder().encode(body),
  headers: { "content-type": "application/x-www-form-urlencoded", authorization },
  h1: true,
});
/**
 * The introspection's requests, of tokens made now, ours and the peer's, each checked active. A
 * token lives 900 s on both sides, less than a full benchmark: introspecting one made at the start
 * measured, from about the fifteenth minute on, the answer for an expired token (`active: false`,
 * after a full signature check here and a lookup that finds nothing in the peer).
 */
async function introspectionPaths(): Promise<Op["paths"]> {
  const token = (await (await fetch(`${gw}/oauth2/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", authorization: basic },
    body: "grant_type=client_credentials&scope=read",
  })).json()).access_token as string;
  const peerBody = await peer.introspectBody();
  const paths: Op["paths"] = {
    gateway: form(`${gw}/oauth2/introspect`, `token=${token}`),
    grpc: grpc(stack.tokenGrpc, TokenService.method.introspectToken, {
      client: { clientId: verifyClient, clientSecret: serviceSecret },
      token,
    }),
    peer: form(peer.introspectionUrl, peerBody, peer.basic),
  };
  const checks: [url: string, body: string, authorization: string][] = [
    [`${gw}/oauth2/introspect`, `token=${token}`, basic],
    [peer.introspectionUrl, peerBody, peer.basic],
  ];
  for (const [url, body, authorization] of checks) {
    const res = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", authorization },
      body,
    });
    const answer = await res.json();
    if (answer.active !== true) {
      throw new Error(
        `bench: ${url} says the token to introspect is not active: ${JSON.stringify(answer)}`,
      );
    }
  }
  return paths;
}
const oauth = OAuthRegistryService.method;
const core = CoreService.method;
/** PATCHes of the seeded clients, each to a name of its own (./unique_load.ts). */
let renamed = 0;
const renames = (base: string, path: string, headers: Record<string, string>): UniqueTarget => ({
  unique: {
    url: base,
    method: "PATCH",
    contentType: "application/json",
    prepared: Math.ceil((seconds + warmup) * 4000),
    request: (i) =>
      Promise.resolve({
        path: `${path}${readClients[i % readClients.length]}`,
        body: JSON.stringify({ name: `renamed ${renamed++}` }),
        headers,
      }),
  },
});

// Grants whose requests may each be sent once: a client assertion (`private_key_jwt`) and a DPoP
// proof carry a single-use `jti`. Measured with ./unique_load.ts, against the same grant with the
// secret measured with it too (h2load's figures are another tool's).
const senderBaseline = "grant, secret (one-shot load)";
const keyedClient = (await api("POST", "/v1/projects/bench/clients", {
  token,
  json: { name: "keyed", type: "web", token_endpoint_auth_method: "private_key_jwt" },
})).body.id as string;
const clientKey = (await api("POST", `/v1/projects/bench/clients/${keyedClient}/keys`, {
  token,
  json: { generate: "EdDSA" },
})).body;
const signingKey = await jose.importJWK(clientKey.private_jwk, "EdDSA");
const dpopKeys = await jose.generateKeyPair("EdDSA");
const dpopJwk = await jose.exportJWK(dpopKeys.publicKey);
/**
 * More one-shot requests than a run can send: up to about 12,000 grants a second on the fastest
 * machine of this kind seen (2 cores), where 8,000 a second of prepared requests ran out.
 */
const prepared = Math.ceil((seconds + warmup) * 16000);
const grantBody = "grant_type=client_credentials&scope=read";
// The sign-in flows' hot answers: an authorization whose consent is remembered (a 302 with a code,
// no page), and a device's poll before the user decided (authorization_pending), which devices
// repeat every few seconds. A device code answers pending only on a poll at least its interval
// after the last: each poll of the run is the first of its own code, made over 5 s earlier.
const flowClient = (await api("POST", "/v1/projects/bench/clients", {
  token,
  json: { name: "flow", type: "native", redirect_uris: ["http://127.0.0.1/cb"] },
})).body.id as string;
await api("POST", "/v1/installations", { token, json: { project_id: "bench", scopes: ["read"] } });
const flowChallenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
const deviceCodes: string[] = [];
function flowOps(): Op[] {
  // More than a run can poll: 3,000 a second ran out on the fastest machine seen.
  const devicesPerRun = Math.ceil((seconds + warmup) * 6000);
  return [
    {
      name: "authorize, consent remembered",
      kind: "flow",
      paths: {
        gateway: {
          ...h1(
            [
              `${gw}/oauth2/authorize?${new URLSearchParams({
                response_type: "code",
                client_id: flowClient,
                redirect_uri: "http://127.0.0.1:53682/cb",
                scope: "read",
                state: "bench",
                code_challenge: flowChallenge,
                code_challenge_method: "S256",
              })}`,
            ],
            "GET",
            undefined,
            { cookie: `session=${token}` },
          ),
          redirects: true,
        },
      },
    },
    {
      name: "device poll, pending",
      kind: "flow",
      // Fresh device codes for the run, made over 5 s (the interval) before it starts.
      before: async () => {
        deviceCodes.length = 0;
        for (let i = 0; i < devicesPerRun; i += 50) {
          deviceCodes.push(
            ...await Promise.all(Array.from({ length: 50 }, async () => {
              const res = await fetch(`${gw}/oauth2/device_authorization`, {
                method: "POST",
                headers: { "content-type": "application/x-www-form-urlencoded" },
                body: `client_id=${flowClient}&scope=read`,
              });
              return (await res.json()).device_code as string;
            })),
          );
        }
        await new Promise((r) => setTimeout(r, 5_500));
      },
      paths: {
        gateway: {
          unique: {
            url: `${gw}/oauth2/token`,
            prepared: devicesPerRun,
            request: (i) =>
              Promise.resolve({
                body: `grant_type=${
                  encodeURIComponent("urn:ietf:params:oauth:grant-type:device_code")
                }&client_id=${flowClient}&device_code=${deviceCodes[i]}`,
                headers: {},
              }),
            // authorization_pending is a 400 (RFC 8628 3.5): the answer wanted here.
            expectStatus: 400,
          },
        },
      },
    },
  ];
}

function senderOps(): Op[] {
  const at = () => Math.floor(Date.now() / 1000);
  const url = `${gw}/oauth2/token`;
  const op = (name: string, request: UniqueLoadSpec["request"]): Op => ({
    name,
    kind: "sender",
    paths: { gateway: { unique: { url, prepared, request } } },
  });
  return [
    op(
      senderBaseline,
      () => Promise.resolve({ body: grantBody, headers: { authorization: basic } }),
    ),
    op("grant, private_key_jwt", async () => {
      const assertion = await new jose.SignJWT({
        iss: keyedClient,
        sub: keyedClient,
        aud: gw,
        jti: crypto.randomUUID(),
        iat: at(),
        exp: at() + 300,
      }).setProtectedHeader({ alg: "EdDSA" }).sign(signingKey);
      return {
        body: `${grantBody}&client_assertion_type=${
          encodeURIComponent("urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
        }&client_assertion=${assertion}`,
        headers: {},
      };
    }),
    op("grant, secret and DPoP proof", async () => {
      const proof = await new jose.SignJWT({
        jti: crypto.randomUUID(),
        htm: "POST",
        htu: url,
        iat: at(),
      }).setProtectedHeader({ alg: "EdDSA", typ: "dpop+jwt", jwk: dpopJwk }).sign(
        dpopKeys.privateKey,
      );
      return { body: grantBody, headers: { authorization: basic, dpop: proof } };
    }),
  ];
}
/** Introspection: each run of it introspects tokens made just before it. */
const introspection: Op = {
  name: "introspect token",
  kind: "token",
  paths: await introspectionPaths(),
  before: async () => {
    introspection.paths = await introspectionPaths();
  },
};
const ops: Op[] = [
  {
    name: "create client",
    kind: "write",
    paths: {
      gateway: h1(
        [`${gw}/v1/projects/bench/clients`],
        "POST",
        { name: "bench", type: "web" },
        auth,
      ),
      grpc: grpc(stack.oauthGrpc, oauth.createClient, {
        projectId: "bench",
        client: { name: "bench", type: ClientType.WEB },
      }),
      reference: h1([`${refUrl}/clients`], "POST", { name: "bench", type: "web" }),
    },
  },
  { name: "get client", kind: "read", paths: clientReads({}) },
  // The same read from the source (RFC 9111 5.2.1.4: `Cache-Control: no-cache`): past the
  // gateway's memory and the registry's, to Postgres, as every GET went before they kept
  // clients. The baseline of the sign-in flows and of verify secret, which read Postgres.
  { name: noCacheGet, kind: "read", paths: clientReads(fromSource) },
  {
    name: "list clients (100)",
    kind: "read",
    paths: {
      gateway: h1([`${gw}/v1/projects/bench/clients?limit=100`], "GET", undefined, auth),
      grpc: grpc(stack.oauthGrpc, oauth.listClients, { projectId: "bench", limit: 100 }),
      reference: h1([`${refUrl}/clients?limit=100`], "GET"),
    },
  },
  {
    // Each request a new name, so each writes its row (and its event): one-shot bodies, which
    // h2load cannot send, on both paths alike.
    name: "patch client",
    kind: "write",
    paths: {
      gateway: renames(gw, "/v1/projects/bench/clients/", auth),
      reference: renames(refUrl, "/clients/", {}),
    },
  },
  {
    // The same body again and again: a patch that finds nothing to change and writes nothing (a
    // plain read of the row, which it does not lock), as a client's retries are. The clients
    // already hold the body's value when the run starts: "patch client" above renames them, and
    // otherwise the first pass of 32 connections walking them in step would measure 1,000 writes
    // that each hold 31 patches waiting on its row lock.
    name: "patch client, no change",
    kind: "write",
    before: () =>
      sql`update oauth.clients set name = 'renamed'
        where id = any(${readClients.map((id) => ids.client.toUuid(id)!)}) and name <> 'renamed'`,
    paths: {
      gateway: h1(readClients.map((id) => `${gw}/v1/projects/bench/clients/${id}`), "PATCH", {
        name: "renamed",
      }, auth),
      grpc: grpc(stack.oauthGrpc, oauth.updateClient, {
        projectId: "bench",
        clientId: readClients[0]!,
        client: { name: "renamed" },
        updateMask: { paths: ["name"] },
      }),
      reference: h1(readClients.map((id) => `${refUrl}/clients/${id}`), "PATCH", {
        name: "renamed",
      }),
    },
  },
  {
    name: "create secret",
    kind: "write",
    before: () =>
      sql`delete from oauth.client_secrets where client_id <> ${ids.client.toUuid(verifyClient)!}`,
    paths: {
      gateway: h1(
        secretClients.map((id) => `${gw}/v1/projects/bench/clients/${id}/secrets`),
        "POST",
        undefined,
        auth,
      ),
      reference: h1(secretClients.map((id) => `${refUrl}/clients/${id}/secrets`), "POST"),
    },
  },
  {
    name: "verify secret (internal RPC)",
    kind: "read",
    paths: {
      grpc: grpc(stack.oauthGrpc, oauth.verifyClientSecret, {
        clientId: verifyClient,
        secret: serviceSecret,
      }),
      reference: h1([`${refUrl}/verify`], "POST", { client_id: verifyClient, secret: refSecret }),
    },
  },
  {
    name: "consent",
    kind: "write",
    paths: {
      gateway: h1(
        [`${gw}/v1/installations`],
        "POST",
        { project_id: "bench", scopes: ["openid"] },
        auth,
      ),
      grpc: grpc(stack.oauthGrpc, oauth.consentInstallation, {
        projectId: "bench",
        scopes: ["openid"],
      }),
      reference: h1([`${refUrl}/installations`], "POST", {
        project_id: "bench",
        scopes: ["openid"],
      }),
    },
  },
  {
    name: "client_credentials grant",
    kind: "token",
    paths: {
      gateway: form(`${gw}/oauth2/token`, "grant_type=client_credentials&scope=read"),
      grpc: grpc(stack.tokenGrpc, TokenService.method.issueToken, {
        client: { clientId: verifyClient, clientSecret: serviceSecret },
        grantType: "client_credentials",
        scope: "read",
      }),
      peer: form(peer.tokenUrl, peer.grantBody, peer.basic),
    },
  },
  ...senderOps(),
  ...flowOps(),
  introspection,
  {
    name: "create unit",
    kind: "write",
    paths: {
      gateway: h1([`${gw}/v1/core/units`], "POST", { journey, title: "bench" }, auth),
      grpc: grpc(stack.coreGrpc, core.createUnit, { unit: { journey, title: "bench" } }),
      reference: h1([`${refUrl}/units`], "POST", { journey, title: "bench" }),
    },
  },
  {
    name: "get unit",
    kind: "read",
    paths: {
      gateway: h1(readUnits.map((id) => `${gw}/v1/core/units/${id}`), "GET", undefined, auth),
      grpc: grpc(stack.coreGrpc, core.getUnit, { unitId: readUnits[0]! }),
      reference: h1(readUnits.map((id) => `${refUrl}/units/${id}`), "GET"),
    },
  },
  {
    name: "list units (100)",
    kind: "read",
    paths: {
      gateway: h1([`${gw}/v1/core/units?journey=${listJourney}&limit=100`], "GET", undefined, auth),
      grpc: grpc(stack.coreGrpc, core.listUnits, { journey: listJourney, limit: 100 }),
      reference: h1([`${refUrl}/units?journey=${listJourney}&limit=100`], "GET"),
    },
  },
];

// --- measuring -----------------------------------------------------------------------------

const procs = () => ({
  gateway: stack.procs.gateway.child.pid,
  "oauth-registry": stack.procs.oauth.child.pid,
  core: stack.procs.core.child.pid,
  "token-service": stack.procs.token.child.pid,
  reference: reference.child.pid,
  peer: peer.pid,
});

/** CPU time (user + system) of a process so far, in ms; 0 if it is gone. */
async function cpuMs(pid: number): Promise<number> {
  try {
    const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) * 10; // clock ticks of 10 ms (USER_HZ 100)
  } catch {
    return 0;
  }
}

/**
 * The CPU time of each of our processes, and of each Postgres process (`postgres:<pid>`), in ms.
 * Postgres is summed per process over those alive at both ends of a run (see `cpuDelta`): a
 * backend that exits takes its CPU time with it, which a plain sum would count as negative. The
 * backends and vacuum workers of other databases are left out (another benchmark's, as
 * bench/compare.ts runs one beside this); the server's own processes, shared, are counted.
 */
async function cpuNow(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const [name, pid] of Object.entries(procs())) out[name] = await cpuMs(pid);
  const others = new Set(
    (await sql<{ pid: number }[]>`
      select pid from pg_stat_activity where datname <> current_database()`).map((r) => r.pid),
  );
  for await (const entry of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(entry.name) || others.has(Number(entry.name))) continue;
    const comm = await Deno.readTextFile(`/proc/${entry.name}/comm`).catch(() => "");
    if (comm.trim() === "postgres") out[`postgres:${entry.name}`] = await cpuMs(Number(entry.name));
  }
  return out;
}

/**
 * CPU ms spent between two readings, by process, Postgres summed as `postgres`. A Postgres process
 * that started between them (a pool opening connections under the load) counts whole: it all ran
 * in the run. Left out, the first run of a benchmark showed Postgres at a tenth of the next ones.
 */
function cpuDelta(before: Record<string, number>, after: Record<string, number>) {
  const out: Record<string, number> = { postgres: 0 };
  for (const [k, v] of Object.entries(after)) {
    const postgres = k.startsWith("postgres:");
    const was = before[k] ?? (postgres ? 0 : undefined);
    if (was === undefined) continue;
    const key = postgres ? "postgres" : k;
    out[key] = (out[key] ?? 0) + v - was;
  }
  return out;
}

async function memory(pid: number): Promise<{ rssMb: number; peakMb: number }> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  const kb = (field: string) =>
    Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? NaN);
  return { rssMb: kb("VmRSS") / 1024, peakMb: kb("VmHWM") / 1024 };
}

/** rpc_requests_total by code (not ok, not canceled), over the services' /metrics. */
async function rpcErrors(): Promise<Map<string, number>> {
  const codes = new Map<string, number>();
  for (const url of [stack.oauthHttp, stack.coreHttp, stack.tokenHttp]) {
    const text = await (await fetch(`${url}/metrics`)).text();
    for (const m of text.matchAll(/^rpc_requests_total\{([^}]*)\} (\d+)/gm)) {
      const code = /code="(\w+)"/.exec(m[1]!)?.[1] ?? "?";
      // h2load cancels the calls still in flight when a run ends: those are not failures.
      if (code !== "ok" && code !== "canceled") {
        codes.set(code, (codes.get(code) ?? 0) + Number(m[2]));
      }
    }
  }
  return codes;
}

const idle = Object.fromEntries(
  await Promise.all(
    Object.entries(procs()).map(async ([name, pid]) => [name, (await memory(pid)).rssMb]),
  ),
) as Record<string, number>;

type Sample = LoadResult & { round: number };
const samples = new Map<string, Sample[]>();
const key = (op: string, path: Path) => `${op}|${path}`;

// --only REGEX measures the operations whose name matches (e.g. --only "get client").
const selected = flags.only ? ops.filter((op) => new RegExp(flags.only!).test(op.name)) : ops;
// --heap-prof: the profiles count what is allocated from here on, not the start-up or the seeding.
const heapProfiled = () => [
  ...Object.values(stack.procs).map((proc) => proc.child.pid),
  reference.child.pid,
];
let servedInRuns = 0;
if (heapProfDir) { for (const pid of heapProfiled()) Deno.kill(pid, "SIGUSR1"); }
for (let round = 1; round <= rounds; round++) {
  for (const op of selected) {
    for (const path of Object.keys(op.paths) as Path[]) {
      // --paths gateway,grpc leaves out the others (the ratios need the reference).
      if (flags.paths && !flags.paths.split(",").includes(path)) continue;
      await op.before?.();
      // Read after `before`, which may make the op's requests anew.
      const target = op.paths[path]!;
      const before = path === "grpc" ? await rpcErrors() : new Map<string, number>();
      const cpuBefore = await cpuNow();
      const amount = { concurrency, seconds, warmupSeconds: warmup };
      // One-shot requests are signed by this process before their run: no stack process works
      // meanwhile, so the CPU per request is the run's alone.
      const result = "unique" in target
        ? await uniqueLoad({ ...target.unique, ...amount })
        : await h2load({ ...target, ...amount });
      // CPU per request by process, over warm-up and run (at the measured rate): where time goes.
      const cpuAfter = await cpuNow();
      const served = result.rps * (seconds + warmup);
      servedInRuns += served;
      result.cpu = Object.fromEntries(
        Object.entries(cpuDelta(cpuBefore, cpuAfter)).map(([k, ms]) => [k, ms / served]),
      );
      if (path === "grpc") {
        for (const [code, n] of await rpcErrors()) {
          const added = n - (before.get(code) ?? 0);
          if (added > 0) say(`  ${added} x ${code}`);
          result.errors += added;
        }
      }
      const list = samples.get(key(op.name, path)) ?? [];
      list.push({ ...result, round });
      samples.set(key(op.name, path), list);
      say(
        `round ${round} ${op.name} via ${path}: ${result.rps.toFixed(0)} req/s, p50 ${
          result.p50.toFixed(2)
        } ms, p99 ${result.p99.toFixed(2)} ms, ${result.errors} errors; CPU ms/request ${
          Object.entries(result.cpu).filter(([, ms]) => ms >= 0.001).map(([k, ms]) =>
            `${k} ${ms.toFixed(3)}`
          ).join(", ")
        }`,
      );
      if (result.errorDetail) say(`  h2load: ${result.errorDetail}`);
    }
  }
}

/** Asks every component and the reference for its heap profile and waits until all are written. */
async function collectHeapProfiles(dir: string): Promise<void> {
  // For bench/profile.ts's bytes a request.
  await Deno.writeTextFile(`${dir}/requests.json`, JSON.stringify(Math.round(servedInRuns)));
  const pids = heapProfiled();
  for (const pid of pids) Deno.kill(pid, "SIGUSR2");
  const written = (pid: number) =>
    Deno.stat(`${dir}/${pid}.heapprofile`).then(() => true, () => false);
  // A bound for a failure, not a timing: a profile is written within a second here.
  for (let waited = 0; waited < 60_000; waited += 100) {
    if ((await Promise.all(pids.map(written))).every(Boolean)) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  say(`some heap profiles were not written to ${dir}`);
}

async function stopAll(): Promise<void> {
  await sql.end();
  if (heapProfDir) await collectHeapProfiles(heapProfDir);
  reference.child.kill("SIGTERM");
  await reference.child.status;
  await peer.stop();
  await stack.stop();
}

// A partial run (--only, --paths; for profiling) prints its runs and writes no results.
if (flags.only || flags.paths) {
  await stopAll();
  Deno.exit(0);
}

const peak = Object.fromEntries(
  await Promise.all(
    Object.entries(procs()).map(async ([name, pid]) => [name, (await memory(pid)).peakMb]),
  ),
) as Record<string, number>;

function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

interface Row {
  op: string;
  kind: string;
  path: Path;
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  ratio?: number;
  /** CPU ms per request by process, median of the rounds. */
  cpu: Record<string, number>;
}
const rows: Row[] = [];
for (const op of selected) {
  for (const path of Object.keys(op.paths) as Path[]) {
    const list = samples.get(key(op.name, path))!;
    // The ratio of each round against the baseline of the same round (the reference; for the
    // token endpoints the peer; for client authentication and DPoP the grant with a secret under
    // the same load tool), then the median.
    const baseline = op.kind === "token"
      ? "peer"
      : op.kind === "sender" || op.kind === "flow"
      ? undefined
      : "reference";
    const ref = op.kind === "flow"
      ? samples.get(key(noCacheGet, "gateway"))
      : baseline === undefined
      ? (op.name === senderBaseline ? undefined : samples.get(key(senderBaseline, path)))
      : samples.get(key(op.name, baseline));
    const ratios = ref ? list.map((s) => s.rps / ref.find((r) => r.round === s.round)!.rps) : [];
    rows.push({
      op: op.name,
      kind: op.kind,
      path,
      rps: median(list.map((s) => s.rps)),
      p50: median(list.map((s) => s.p50)),
      p99: median(list.map((s) => s.p99)),
      errors: list.reduce((n, s) => n + s.errors, 0),
      ...(path === baseline || ratios.length === 0 ? {} : { ratio: median(ratios) }),
      cpu: Object.fromEntries(
        Object.keys(list[0]!.cpu ?? {}).map((k) => [k, median(list.map((s) => s.cpu?.[k] ?? 0))]),
      ),
    });
  }
}

// --- growth --------------------------------------------------------------------------------

say(`growth: seeding ${growthRows.toLocaleString("en")} clients`);
await sql`insert into oauth.configs (project_id, application_name, audience) values
  ('growth', 'Growth', 'external'), ('small', 'Small', 'external')`;
async function series(project: string, n: number, base: number): Promise<void> {
  await sql`
    insert into oauth.clients (id, project_id, name, type)
    select (substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-' || substr(h, 13, 4) || '-' ||
            substr(h, 17, 4) || '-' || substr(h, 21, 12))::uuid, ${project}, 'c' || i, 'web'
    from (
      select i, lpad(to_hex(${base}::bigint + i), 12, '0') || '7000' || '8000' || lpad(to_hex(i), 12, '0') as h
      from generate_series(1, ${n}::int) i
    ) s`;
}
const seedStart = performance.now();
await series("small", 1000, 1_500_000_000_000);
await series("growth", growthRows, 1_600_000_000_000);
await sql`analyze oauth.clients`;
const seedSeconds = (performance.now() - seedStart) / 1000;
const idAt = async (project: string, n: number) => {
  const [row] =
    await sql`select id from oauth.clients where project_id = ${project} order by id offset ${
      n - 1
    } limit 1`;
  return ids.client.fromUuid(row!.id);
};
const growthSeconds = quick ? 0.7 : 4;
const measure = (urls: string[]) =>
  h2load({
    ...h1(urls, "GET", undefined, auth),
    concurrency,
    seconds: growthSeconds,
    warmupSeconds: warmup,
  });
const pages = {
  start: await measure([`${gw}/v1/projects/growth/clients?limit=100`]),
  middle: await measure([
    `${gw}/v1/projects/growth/clients?limit=100&after=${await idAt("growth", growthRows / 2)}`,
  ]),
  end: await measure([
    `${gw}/v1/projects/growth/clients?limit=100&after=${await idAt("growth", growthRows - 100)}`,
  ]),
};
const pick = async (project: string, n: number) => {
  const rows =
    await sql`select id from oauth.clients where project_id = ${project} order by random() limit 100`;
  return rows.map((r) => `${gw}/v1/projects/${project}/clients/${ids.client.fromUuid(r.id)}`).slice(
    0,
    n,
  );
};
const gets = {
  small: await measure(await pick("small", 100)),
  large: await measure(await pick("growth", 100)),
};

// --- the change feed -----------------------------------------------------------------------

// One watcher (the stock grpc-js client) reads a project's trail from the start: events per
// second delivered, and the CPU each process spends per 1,000 events. The events are written as
// changes write them, unnumbered: the feed's numbering is part of what is measured.
const feedEvents = quick ? 20_000 : 100_000;
say(`feed: seeding ${feedEvents.toLocaleString("en")} events`);
await sql`
  insert into oauth.events (parent, occurred_at, method, resource, actor_sub, request_id,
    source_ip, user_agent, peer, changes, result)
  select 'feed', now(), 'registry.oauth.v1.OAuthRegistryService/UpdateClient',
    'projects/feed/clients/cli_' || i, 'bench', 'r' || i, '127.0.0.1', 'bench', '127.0.0.1',
    '[{"field": "name", "old": "before", "new": "after"}]'::jsonb, 'ok'
  from generate_series(1, ${feedEvents}::int) i`;
const feedCpuBefore = await cpuNow();
const feedStarted = performance.now();
let feedReceived = 0;
const feedDone = new AbortController();
await followEvents({
  address: stack.oauthGrpc,
  token,
  project: "feed",
  after: "0",
  signal: feedDone.signal,
  onEvent: () => {
    if (++feedReceived === feedEvents) feedDone.abort();
  },
  onEnd: () => false,
});
const feedSeconds = (performance.now() - feedStarted) / 1000;
const feedCpu = cpuDelta(feedCpuBefore, await cpuNow());
const feed = {
  events: feedReceived,
  seconds: feedSeconds,
  events_per_second: feedReceived / feedSeconds,
  cpu_ms_per_1000: Object.fromEntries(
    Object.entries(feedCpu).map(([k, v]) => [k, (v / Math.max(1, feedReceived)) * 1000]),
  ),
};

// --- report --------------------------------------------------------------------------------

const machine = {
  date: new Date().toISOString(),
  cores: navigator.hardwareConcurrency,
  memory_gib: Math.round(Deno.systemMemoryInfo().total / 2 ** 30),
  os: `${Deno.build.os} ${Deno.osRelease()}`,
  deno: Deno.version.deno,
  postgres: (await sql`show server_version`)[0]!.server_version,
  load_tool: new TextDecoder().decode(
    (await new Deno.Command("h2load", {
      args: ["--version"],
      stdout: "piped",
      env: { LD_PRELOAD: "" },
    }).output()).stdout,
  ).trim(),
};
const settings = { rounds, seconds, warmup, concurrency, growth_rows: growthRows, quick };
const fmt = (n: number, d = 0) => Number.isFinite(n) ? n.toFixed(d) : "-";
const table = [
  `Machine: ${machine.cores} cores, ${machine.memory_gib} GiB, ${machine.os}; Deno ${machine.deno}; Postgres ${machine.postgres}; ${machine.load_tool}.`,
  `Load: h2load, ${concurrency} connections, ${seconds} s per run after ${warmup} s warm-up; ${rounds} interleaved round(s), medians.`,
  "",
  "| operation | path | req/s | x baseline | p50 ms | p99 ms | errors |",
  "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
  ...rows.map((r) =>
    `| ${r.op} | ${r.path} | ${fmt(r.rps)} | ${r.ratio === undefined ? "" : fmt(r.ratio, 2)} | ${
      fmt(r.p50, 2)
    } | ${fmt(r.p99, 2)} | ${r.errors} |`
  ),
  "",
  "CPU ms per request, by process (over warm-up and run; median of the rounds): where the time goes.",
  "",
  "| operation | path | gateway | oauth-registry | core | token-service | reference | peer | postgres | total |",
  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
  ...rows.map((r) => {
    const c = (k: string) => fmt(r.cpu[k] ?? NaN, 3);
    const total = Object.values(r.cpu).reduce((a, b) => a + b, 0);
    return `| ${r.op} | ${r.path} | ${c("gateway")} | ${c("oauth-registry")} | ${c("core")} | ${
      c("token-service")
    } | ${c("reference")} | ${c("peer")} | ${c("postgres")} | ${fmt(total, 3)} |`;
  }),
  "",
  `Growth (${growthRows.toLocaleString("en")} clients in one project, seeded in ${
    fmt(seedSeconds, 1)
  } s; gateway):`,
  "",
  "| measure | req/s | p50 ms | p99 ms |",
  "| --- | ---: | ---: | ---: |",
  ...Object.entries(pages).map(([k, r]) =>
    `| page of 100 at the ${k} | ${fmt(r.rps)} | ${fmt(r.p50, 2)} | ${fmt(r.p99, 2)} |`
  ),
  `| GET by id, 1,000 rows | ${fmt(gets.small.rps)} | ${fmt(gets.small.p50, 2)} | ${
    fmt(gets.small.p99, 2)
  } |`,
  `| GET by id, ${growthRows.toLocaleString("en")} rows | ${fmt(gets.large.rps)} | ${
    fmt(gets.large.p50, 2)
  } | ${fmt(gets.large.p99, 2)} |`,
  "",
  `Last page / first page p50: ${fmt(pages.end.p50 / pages.start.p50, 2)}; GET p50 at ${
    growthRows.toLocaleString("en")
  } / 1,000 rows: ${fmt(gets.large.p50 / gets.small.p50, 2)}.`,
  "",
  `Change feed: one grpc-js watcher read ${feed.events.toLocaleString("en")} events in ${
    fmt(feed.seconds, 2)
  } s, ${fmt(feed.events_per_second)} events/s; CPU ms per 1,000 events: oauth-registry ${
    fmt(feed.cpu_ms_per_1000["oauth-registry"] ?? NaN, 1)
  }, postgres ${fmt(feed.cpu_ms_per_1000.postgres ?? NaN, 1)}.`,
  "",
  "| process | idle RSS MB | peak RSS MB |",
  "| --- | ---: | ---: |",
  ...Object.keys(idle).map((p) => `| ${p} | ${fmt(idle[p]!)} | ${fmt(peak[p]!)} |`),
].join("\n");

// --- the performance targets, each with its measured figure ----------------------------------

const target = (met: boolean, text: string) => `- ${met ? "met" : "NOT met"}: ${text}`;
const worst = (list: Row[], f: (r: Row) => number, pick: "min" | "max") =>
  list.reduce((w, r) => (pick === "min" ? f(r) < f(w) : f(r) > f(w)) ? r : w, list[0]!);
const gwReads = rows.filter((r) => r.path === "gateway" && r.kind === "read");
const gwWrites = rows.filter((r) => r.path === "gateway" && r.kind === "write");
const grpcReads = rows.filter((r) => r.path === "grpc" && r.kind === "read");
const rowOf = (op: string, path: Path) => rows.find((r) => r.op === op && r.path === path);
const verify = rowOf("verify secret (internal RPC)", "grpc");
const getGrpc = rowOf(noCacheGet, "grpc");
const lines: string[] = [];
if (gwReads.length > 0) {
  const w = worst(gwReads, (r) => r.ratio!, "min");
  lines.push(
    target(
      w.ratio! >= 0.5,
      `gateway reads >= 0.5 x reference (lowest: ${w.op}, ${fmt(w.ratio!, 2)})`,
    ),
  );
}
if (gwWrites.length > 0) {
  const w = worst(gwWrites, (r) => r.ratio!, "min");
  lines.push(
    target(
      w.ratio! >= 0.6,
      `gateway writes >= 0.6 x reference (lowest: ${w.op}, ${fmt(w.ratio!, 2)})`,
    ),
  );
}
// p99: single-resource operations on every path of ours, pages of 100 apart.
const ours = rows.filter((r) => r.path === "gateway" || r.path === "grpc");
const single = ours.filter((r) => !r.op.startsWith("list"));
const listed = ours.filter((r) => r.op.startsWith("list"));
if (single.length > 0) {
  const w = worst(single, (r) => r.p99, "max");
  lines.push(
    target(
      w.p99 <= 25,
      `p99 <= 25 ms, single resources (highest: ${w.op} via ${w.path}, ${fmt(w.p99, 1)} ms)`,
    ),
  );
}
if (listed.length > 0) {
  const w = worst(listed, (r) => r.p99, "max");
  lines.push(
    target(
      w.p99 <= 100,
      `p99 <= 100 ms, pages of 100 (highest: ${w.op} via ${w.path}, ${fmt(w.p99, 1)} ms)`,
    ),
  );
}
if (grpcReads.length > 0) {
  const w = worst(grpcReads, (r) => r.ratio!, "min");
  lines.push(
    target(
      w.ratio! >= 0.8,
      `direct gRPC reads >= 0.8 x reference (lowest: ${w.op}, ${fmt(w.ratio!, 2)})`,
    ),
  );
}
const allErrors = rows.reduce((n, r) => n + r.errors, 0);
lines.push(target(allErrors === 0, `zero errors (${allErrors})`));
const pageRatio = pages.end.p50 / pages.start.p50;
lines.push(target(pageRatio <= 1.2, `last page within 1.2 x the first (${fmt(pageRatio, 2)})`));
const getRatio = gets.large.p50 / gets.small.p50;
lines.push(
  target(getRatio <= 1.2, `GET by id flat with table size (p50 ratio ${fmt(getRatio, 2)})`),
);
const maxIdle = Math.max(...Object.values(idle));
const maxPeak = Math.max(
  ...["gateway", "oauth-registry", "core", "token-service"].map((p) => peak[p] ?? 0),
);
lines.push(target(maxIdle < 120, `idle RSS < 120 MB per process (highest ${fmt(maxIdle)} MB)`));
lines.push(
  target(maxPeak <= 256, `RSS under load <= 256 MiB per component (highest ${fmt(maxPeak)} MB)`),
);
const cpuTotal = (r: Row) => Object.values(r.cpu).reduce((a, b) => a + b, 0);
for (const op of ["client_credentials grant", "introspect token"]) {
  const row = rowOf(op, "gateway");
  const theirs = rowOf(op, "peer");
  if (!row || !theirs) continue;
  lines.push(
    target(row.ratio! >= 1, `${op} through the gateway >= 1.0 x the peer (${fmt(row.ratio!, 2)})`),
  );
  lines.push(
    target(
      cpuTotal(row) <= cpuTotal(theirs),
      `CPU per ${op} <= the peer's (${fmt(cpuTotal(row), 3)} ms against ${
        fmt(cpuTotal(theirs), 3)
      })`,
    ),
  );
}
for (const op of ["grant, private_key_jwt", "grant, secret and DPoP proof"]) {
  const row = rowOf(op, "gateway");
  if (row?.ratio === undefined) continue;
  lines.push(
    target(row.ratio >= 0.8, `${op} >= 0.8 x the grant with a secret (${fmt(row.ratio, 2)})`),
  );
}
for (const op of ["authorize, consent remembered", "device poll, pending"]) {
  const row = rowOf(op, "gateway");
  if (row?.ratio === undefined) continue;
  lines.push(
    target(
      row.ratio >= 0.5,
      `${op} >= 0.5 x a gateway GET of a client, no-cache (${fmt(row.ratio, 2)})`,
    ),
  );
}
const getGateway = rowOf("get client", "gateway");
const getReference = rowOf("get client", "reference");
if (getGateway && getReference) {
  const r = cpuTotal(getGateway) / cpuTotal(getReference);
  lines.push(
    target(r <= 2, `CPU per gateway GET of a client <= 2 x the reference's (${fmt(r, 2)})`),
  );
}
if (verify && getGrpc) {
  const r = verify.rps / getGrpc.rps;
  lines.push(
    target(r >= 0.8, `verify secret >= 0.8 x gRPC get client, no-cache (${fmt(r, 2)})`),
  );
}
lines.push(
  target(
    feed.events === feedEvents && feed.events_per_second >= 5000,
    `WatchEvents >= 5,000 events/s to one watcher (${fmt(feed.events_per_second)})`,
  ),
);
const targets = ["Targets:", "", ...lines].join("\n");

const result = {
  machine,
  settings,
  rows,
  growth: { pages, gets, seed_seconds: seedSeconds },
  feed,
  memory: { idle, peak },
};
const outDir = quick
  ? await Deno.makeTempDir({ prefix: "bench-" })
  : new URL("./results/", import.meta.url).pathname;
await Deno.mkdir(outDir, { recursive: true });
const stamp = machine.date.slice(0, 10);
await Deno.writeTextFile(`${outDir}/${stamp}.json`, JSON.stringify(result, null, 2) + "\n");
await Deno.writeTextFile(`${outDir}/${stamp}.md`, `${table}\n\n${targets}\n`);
// deno-lint-ignore no-console
console.log(`${table}\n\n${targets}`);
if (!quick) {
  // The README shows the latest full run, between its bench markers.
  const readme = new URL("../README.md", import.meta.url);
  const text = await Deno.readTextFile(readme);
  const start = "<!-- bench:start -->";
  const end = "<!-- bench:end -->";
  const a = text.indexOf(start);
  const b = text.indexOf(end);
  if (a >= 0 && b > a) {
    await Deno.writeTextFile(
      readme,
      `${text.slice(0, a + start.length)}\n${table}\n\n${targets}\n${text.slice(b)}`,
    );
    say("updated the table in README.md");
  }
}
say(`wrote ${outDir}/${stamp}.json and .md`);

await stopAll();
const errors = rows.reduce((n, r) => n + r.errors, 0);
if (errors > 0) say(`${errors} requests failed`);
Deno.exit(errors > 0 ? 1 : 0);
