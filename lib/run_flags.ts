/**
 * The `deno run` flags every component process gets (the Dockerfile repeats them): the
 * permissions it needs, and `--unstable-no-legacy-abort`, so that a request's signal aborts only
 * when the client goes away (not after every response, the legacy behaviour connect's fetch
 * handler would otherwise warn about).
 *
 * @module
 */

/**
 * The V8 old-space bound of a component process, in MiB. The Kubernetes memory limit is 256Mi; a
 * Deno process at rest is ~85 MB resident and V8, unbounded, let the services grow to 271-281 MB
 * under benchmark load (it collects late when memory is plentiful), which a 256Mi limit would
 * have OOM-killed. With 128 MiB of old space V8 collects before that.
 */
export const heapLimitFlag = "--v8-flags=--max-old-space-size=128";

/** Flags for `deno run <flags> <entry>` of a component. */
export const componentFlags: readonly string[] = [
  "--allow-net",
  "--allow-env",
  "--allow-read",
  "--allow-sys",
  "--unstable-no-legacy-abort",
  heapLimitFlag,
];
