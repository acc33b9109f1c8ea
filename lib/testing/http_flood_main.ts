/**
 * The flooding process of ./http_flood.ts: reads an {@link HttpFloodSpec} on stdin, runs it, and
 * writes what it saw on stdout.
 *
 * @module
 */

import { type HttpFloodSpec, runHttpFlood } from "./http_flood.ts";

const spec = JSON.parse(await new Response(Deno.stdin.readable).text()) as HttpFloodSpec;
await Deno.stdout.write(new TextEncoder().encode(JSON.stringify(await runHttpFlood(spec))));
// Exits at once, as ./cheap_attacks_main.ts does (Deno sometimes crashed while shutting down after
// a flood whose connections the server had closed).
Deno.exit(0);
