/**
 * The attacker process of ./cheap_attacks.ts: reads an {@link AttackSpec} on stdin, runs it, and
 * writes what it saw on stdout.
 *
 * @module
 */

import { type AttackSpec, runAttack } from "./cheap_attacks.ts";

const spec = JSON.parse(await new Response(Deno.stdin.readable).text()) as AttackSpec;
await Deno.stdout.write(new TextEncoder().encode(JSON.stringify(await runAttack(spec))));
// Exits at once: after a flood whose connections the server closed under it, Deno 2.9.6's runtime
// sometimes crashed (SIGSEGV) while shutting down, its answer already written (8 of 40 control
// floods in a loop, 0 of 40 with this exit).
Deno.exit(0);
