/**
 * The `deno run` flags every component process gets (the Dockerfile repeats them): the
 * permissions it needs, and `--unstable-no-legacy-abort`, so that a request's signal aborts only
 * when the client goes away (not after every response, the legacy behaviour connect's fetch
 * handler would otherwise warn about).
 *
 * @module
 */

/** Flags for `deno run <flags> <entry>` of a component. */
export const componentFlags: readonly string[] = [
  "--allow-net",
  "--allow-env",
  "--allow-read",
  "--allow-sys",
  "--unstable-no-legacy-abort",
];
