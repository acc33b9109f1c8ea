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
 * rest is ~80 MB resident. Old space is bounded at 128 MiB (unbounded, V8 let the services grow to
 * 271-281 MB under benchmark load, collecting late when memory is plentiful). The young generation
 * is kept small (2 MiB semi-spaces instead of 16): request bodies live in ArrayBuffers outside the
 * heap, which are freed only when their small wrapper objects are collected, and a large young
 * generation let hundreds of MB of dead bodies wait for the next scavenge (a flood of 4 MB bodies:
 * 359 MB resident with the default, 293 MB with 2 MiB, in one measurement).
 */
export const heapLimitFlag = "--v8-flags=--max-old-space-size=128,--max-semi-space-size=2";

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
