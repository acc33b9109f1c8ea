/**
 * Checks the benchmark peer (bench/peer.ts) by hand: installs it if needed, starts it, does one
 * grant and one introspection with fetch (printing the access token's JWT header, which must say
 * `"alg":"EdDSA"`, and the introspection answer, which must say `"active":true`), then loads both
 * endpoints with h2load as the bench does (HTTP/1.1, 32 connections, 1 s warm-up, 8 s) and prints
 * the rates and the peer's CPU ms per request.
 *
 *   deno run -A bench/peer_check.ts
 *
 * @module
 */

import { ensureH2load, h2load } from "./h2load.ts";
import { startPeer } from "./peer.ts";

// deno-lint-ignore no-console
const say = (line: string) => console.log(line);

/** CPU time (user + system) of a process so far, in ms (clock ticks of 10 ms). */
async function cpuMs(pid: number): Promise<number> {
  const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

await ensureH2load();
const peer = await startPeer();
let failed = false;
try {
  say(`peer: ${peer.url} (pid ${peer.pid})`);
  const form = { authorization: peer.basic, "content-type": "application/x-www-form-urlencoded" };

  const grant = await fetch(peer.tokenUrl, { method: "POST", headers: form, body: peer.grantBody });
  const granted = await grant.json() as { access_token?: string };
  const header = JSON.parse(
    new TextDecoder().decode(
      Uint8Array.from(
        atob((granted.access_token ?? "").split(".")[0]!.replace(/-/g, "+").replace(/_/g, "/")),
        (c) => c.charCodeAt(0),
      ),
    ),
  ) as { alg?: string };
  say(`grant: ${grant.status}, JWT header ${JSON.stringify(header)}`);
  if (!grant.ok || header.alg !== "EdDSA") failed = true;

  const intro = await fetch(peer.introspectionUrl, {
    method: "POST",
    headers: form,
    body: peer.introspectBody,
  });
  const answer = await intro.json() as { active?: boolean };
  say(`introspection: ${intro.status}, ${JSON.stringify(answer)}`);
  if (!intro.ok || answer.active !== true) failed = true;

  const seconds = 8;
  const warmupSeconds = 1;
  for (
    const [name, url, body] of [
      ["client_credentials grant", peer.tokenUrl, peer.grantBody],
      ["introspect token", peer.introspectionUrl, peer.introspectBody],
    ] as const
  ) {
    const before = await cpuMs(peer.pid);
    const result = await h2load({
      urls: [url],
      method: "POST",
      body: new TextEncoder().encode(body),
      headers: form,
      h1: true,
      concurrency: 32,
      seconds,
      warmupSeconds,
    });
    const after = await cpuMs(peer.pid);
    // Over warm-up and run, at the measured rate, as bench/main.ts counts it.
    const perRequest = (after - before) / (result.rps * (seconds + warmupSeconds));
    say(
      `${name}: ${result.rps.toFixed(0)} req/s, p50 ${result.p50.toFixed(2)} ms, p99 ${
        result.p99.toFixed(2)
      } ms, ${result.errors} errors, peer CPU ${perRequest.toFixed(3)} ms/request`,
    );
    if (result.errors > 0) {
      say(`  ${result.errorDetail}`);
      failed = true;
    }
  }
} finally {
  await peer.stop();
}
if (failed) {
  say("FAILED");
  Deno.exit(1);
}
