/**
 * What a GET of a client costs by the path it comes from and by how many are in flight: the
 * stack's registry through the gateway, the registry over gRPC, and the reference
 * (bench/reference.ts), each driven by h2load for 5 s, twice in turn. gRPC and the reference run
 * at 32 connections and again at 4 and 2, to compare a process at the rate the gateway's calls
 * reach it with the same process at its own. For each run it prints the rate and, per request,
 * the CPU of the database's backends and their voluntary context switches (each a backend that
 * slept until a query woke it), and each busy process's CPU, the times its main thread slept
 * (voluntary context switches) and was preempted (involuntary ones), all read from /proc.
 *
 *     deno run --allow-all bench/pg_wakeups.ts
 *
 * `DATABASE_URL` names the server (default postgres://postgres@127.0.0.1:5432/postgres); the stack
 * runs with the services' `DB_POOL_MAX` as this process has it (10 when unset). See `lanes` in
 * `lib/db/postgres.ts`, and "Why reads from the source stay under half the reference" in
 * bench/README.md, for what the figures showed.
 *
 * @module
 */

import postgres from "postgres";
import { OAuthRegistryService } from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import { idKind } from "../lib/platform/mod.ts";
import { httpClient, spawn, startStack } from "../lib/testing/mod.ts";
import { ensureH2load, grpcTarget, h2load, type LoadTarget } from "./h2load.ts";

await ensureH2load();
const stack = await startStack({
  env: { LOG_LEVEL: "info", DB_POOL_MAX: Deno.env.get("DB_POOL_MAX") ?? "10" },
  checkResponses: false,
  keepLines: 200,
});
const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
const refPort = (listener.addr as Deno.NetAddr).port;
listener.close();
const reference = spawn("bench/reference.ts", {
  DATABASE_URL: stack.databaseUrl,
  PORT: String(refPort),
  CLIENT_SECRET_HMAC_KEY: "pg-wakeups-".padEnd(40, "k"),
  MAX_SECRETS_PER_CLIENT: "10",
});
const sql = postgres(stack.databaseUrl, { max: 1, onnotice: () => {} });
try {
  await reference.serving;
  const token = await stack.token({ sub: "bench", projects: ["bench"] });
  const set = await httpClient(stack.gatewayUrl)("PATCH", "/v1/projects/bench/config", {
    token,
    json: { application_name: "Bench" },
  });
  if (set.status !== 200) throw new Error(`config: ${set.status} ${set.text}`);
  const ids = Array.from({ length: 1000 }, () => idKind("cli").generate());
  await sql`insert into oauth.clients ${
    sql(ids.map((id, i) => ({ id: id.uuid, project_id: "bench", name: `r${i}`, type: "web" })))
  }`;
  const auth = { authorization: `Bearer ${token}` };
  const paths: Record<string, LoadTarget> = {
    gateway: {
      urls: ids.map((id) => `${stack.gatewayUrl}/v1/projects/bench/clients/${id.id}`),
      method: "GET",
      headers: auth,
      h1: true,
    },
    grpc: grpcTarget(stack.oauthGrpc, OAuthRegistryService.method.getClient, {
      projectId: "bench",
      clientId: ids[0]!.id,
    }, auth),
    reference: {
      urls: ids.map((id) => `http://127.0.0.1:${refPort}/clients/${id.id}`),
      method: "GET",
      headers: {},
      h1: true,
    },
  };
  const pids: Record<string, number> = {
    gateway: stack.procs.gateway.child.pid,
    registry: stack.procs.oauth.child.pid,
    reference: reference.child.pid,
  };
  /** Each process's CPU (s), and its main thread's sleeps and preemptions so far. */
  const processes = async () => {
    const out: Record<string, { cpu: number; sleeps: number; preempted: number }> = {};
    for (const [name, pid] of Object.entries(pids)) {
      const stat = (await Deno.readTextFile(`/proc/${pid}/stat`)).split(") ")[1]!.split(" ");
      const status = await Deno.readTextFile(`/proc/${pid}/status`);
      out[name] = {
        cpu: (Number(stat[11]) + Number(stat[12])) / 100,
        sleeps: Number(/\nvoluntary_ctxt_switches:\s+(\d+)/.exec(status)![1]),
        preempted: Number(/\nnonvoluntary_ctxt_switches:\s+(\d+)/.exec(status)![1]),
      };
    }
    return out;
  };
  /** The database's backends' CPU (s) and voluntary context switches so far. */
  const backends = async () => {
    const rows = await sql<{ pid: number }[]>`
      select pid from pg_stat_activity
      where datname = current_database() and pid <> pg_backend_pid()`;
    let cpu = 0, wakeups = 0;
    for (const { pid } of rows) {
      try {
        const stat = (await Deno.readTextFile(`/proc/${pid}/stat`)).split(") ")[1]!.split(" ");
        cpu += (Number(stat[11]) + Number(stat[12])) / 100; // clock ticks of 10 ms
        const status = await Deno.readTextFile(`/proc/${pid}/status`);
        wakeups += Number(/\nvoluntary_ctxt_switches:\s+(\d+)/.exec(status)![1]);
      } catch {
        // A backend that ended meanwhile.
      }
    }
    return { cpu, wakeups };
  };
  const runs: [keyof typeof paths, number][] = [
    ["gateway", 32],
    ["grpc", 32],
    ["grpc", 4],
    ["grpc", 2],
    ["reference", 32],
    ["reference", 4],
    ["reference", 2],
  ];
  for (let round = 1; round <= 2; round++) {
    for (const [path, concurrency] of runs) {
      const before = await backends();
      const was = await processes();
      const result = await h2load({ ...paths[path]!, concurrency, seconds: 5, warmupSeconds: 0 });
      const after = await backends();
      const is = await processes();
      const n = result.requests;
      const busy = Object.keys(is).filter((name) => is[name]!.cpu - was[name]!.cpu > 0.5);
      // deno-lint-ignore no-console
      console.log(
        `round ${round} ${path} at ${concurrency}: ${Math.round(result.rps)} req/s; per request: ` +
          `Postgres CPU ${(1000 * (after.cpu - before.cpu) / n).toFixed(3)} ms, backend wakeups ` +
          `${((after.wakeups - before.wakeups) / n).toFixed(2)}; ` +
          busy.map((name) => {
            const d = (k: "cpu" | "sleeps" | "preempted") => (is[name]![k] - was[name]![k]) / n;
            return `${name} CPU ${(1000 * d("cpu")).toFixed(3)} ms, sleeps ` +
              `${d("sleeps").toFixed(2)}, preempted ${d("preempted").toFixed(2)}`;
          }).join("; "),
      );
    }
  }
} finally {
  await sql.end();
  reference.child.kill("SIGTERM");
  await reference.child.status;
  await stack.stop();
}
