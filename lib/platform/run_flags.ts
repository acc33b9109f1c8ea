/**
 * The `deno run` flags every component process gets (the Dockerfile repeats them): the
 * permissions it needs, and `--unstable-no-legacy-abort`, so that a request's signal aborts only
 * when the client goes away (not after every response, the legacy behaviour connect's fetch
 * handler would otherwise warn about).
 *
 * @module
 */

/**
 * V8's heap bounds of a component process. The Kubernetes memory limit is 256Mi and a process at
 * rest is ~80 MB resident. Old space is bounded at 96 MiB (unbounded, V8 let the services grow to
 * 271-281 MB under benchmark load, collecting late when memory is plentiful; at 128 MiB, once calls
 * went through connect-es's handlers, tests/attacks_test.ts's 1 MiB gRPC flood took the service to
 * 250-258 MiB, and at 96 MiB to 203 MiB, the live data of a call being bounded by the memory
 * budget). The young generation
 * is kept small (2 MiB semi-spaces instead of 16): request bodies live in ArrayBuffers outside the
 * heap, which are freed only when their small wrapper objects are collected, and a large young
 * generation let hundreds of MB of dead bodies wait for the next scavenge. Measured with 1 MiB gRPC
 * messages at 16 connections x 100 streams for 8 s, the service's peak resident set and (in one
 * benchmark session, 2 rounds) its gRPC create / get rates as a fraction of the reference's:
 *
 *   semi-space  16 MiB (V8's default)  258-263 MiB   0.86 / 0.73
 *                4 MiB                 189-193 MiB   0.80 / 0.71   (235 MiB in tests/attacks_test.ts)
 *                2 MiB                 175-181 MiB   0.76 / 0.62   (198-206 MiB there)
 *
 * 2 MiB keeps the worst load we know 50 MiB under the limit; the throughput is its price.
 *
 * Part of what piles up there is the gRPC adapter's own buffers, so it frees them as soon as it
 * is done with them (lib/rpc/grpc_server.ts with `release` of lib/transport/bytes.ts: a DATA
 * frame's copy once copied into its message, a message buffer it outgrew, a unary call's message
 * once the call has run). Measured alone (h2load, 16 connections x 100 streams of 1 MiB
 * CreateClient messages for 8 s against one oauth-registry, its VmHWM, 4 runs each): 148-200 MiB
 * before, 152-169 MiB after; with 8 MiB semi-spaces (and 80 MiB of old space) 228-264 MiB before,
 * 192-203 after. Even so, 8 MiB was not worth its memory: against 2 MiB, both freeing buffers,
 * the gateway's rates (`deno task bench:compare`, 8 rounds of 5 s) were create client 1.09x, get
 * client 0.99x, a grant 1.05x, an introspection 1.04x (each round's ratio from 0.87 to 1.55), for
 * 192-214 MiB under the flood against 152-169.
 */
export const heapLimitFlag = "--v8-flags=--max-old-space-size=96,--max-semi-space-size=2";

/**
 * The environment every component process gets beside its settings. glibc's malloc raises its mmap
 * threshold after large blocks are freed, and then serves later large blocks (request bodies read
 * by Deno.serve) from its heap, which it does not give back: a fixed 64 KiB threshold returns them
 * to the system when freed (the same 4 MB-body flood: 312 MB resident afterwards without it, 96 MB
 * with it).
 */
export const componentEnv: Readonly<Record<string, string>> = {
  MALLOC_MMAP_THRESHOLD_: "65536",
};

/** Flags for `deno run <flags> <entry>` of a component. */
export const componentFlags: readonly string[] = [
  "--allow-net",
  "--allow-env",
  "--allow-read",
  "--allow-sys",
  "--unstable-no-legacy-abort",
  heapLimitFlag,
];
