/**
 * Whether a Postgres pool costs more the longer it serves: `select 1` through a pool of 10
 * connections, all open, with 4 queries in flight (so that some are always idle), printing the
 * queries a second and this process's CPU a query for each 50,000.
 *
 *     deno run --allow-all bench/pool_drift.ts pool 400000    # postgres.js's own pool of 10
 *     deno run --allow-all bench/pool_drift.ts connect 400000 # lib/db's connect(), 10 lanes of 1
 *
 * `DATABASE_URL` names the server (default postgres://postgres@127.0.0.1:5432/postgres). See
 * `lanes` in `lib/db/postgres.ts` for why the two differ.
 *
 * @module
 */

import postgres from "postgres";
import { connect } from "../lib/db/mod.ts";

const url = Deno.env.get("DATABASE_URL") ?? "postgres://postgres@127.0.0.1:5432/postgres";
const [kind = "connect", count = "400000"] = Deno.args;
if (kind !== "pool" && kind !== "connect") throw new Error("usage: pool_drift.ts pool|connect [N]");
const total = Number(count);
const every = 50_000;
const sql = kind === "pool"
  ? postgres(url, { max: 10, onnotice: () => {} })
  : connect(url, { max: 10, applicationName: "pool-drift" });

/** This process's CPU time so far, in ms (utime + stime, in clock ticks of 10 ms). */
function cpuMs(): number {
  const fields = Deno.readTextFileSync("/proc/self/stat").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

// All ten connections open at once, as a burst of requests would open them.
await Promise.all(Array.from({ length: 10 }, () => sql`select pg_sleep(0.05)`));
let served = 0;
let since = performance.now();
let cpuSince = cpuMs();
async function loop(): Promise<void> {
  while (served < total) {
    await sql`select 1`;
    if (++served % every !== 0) continue;
    const now = performance.now();
    const cpu = cpuMs();
    const rate = Math.round(every / ((now - since) / 1000));
    const perQuery = ((cpu - cpuSince) / every * 1000).toFixed(1);
    // deno-lint-ignore no-console
    console.log(`${kind} ${served} queries: ${rate} queries/s, ${perQuery} us of CPU a query`);
    since = now;
    cpuSince = cpu;
  }
}
await Promise.all([loop(), loop(), loop(), loop()]);
await sql.end();
