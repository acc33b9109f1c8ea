/**
 * PGlite's settings for `deno task start`, and (run as a program) the creation of its database:
 * `deno run tools/pglite_init.ts DATA_FOLDER` creates the database files there and exits.
 *
 * The start runs it as a child process the first time, because PGlite's initdb grows its
 * WebAssembly memory to ~600 MB and WebAssembly memory never shrinks: done in the start's own
 * process, the stack kept that for as long as it ran (740 MB resident instead of ~300).
 *
 * @module
 */

import { PGlite } from "@electric-sql/pglite";

/**
 * Postgres' default `shared_buffers` (128 MB) is the largest part of PGlite's memory, and a
 * laptop's registry needs little: 16 MB took a reopened database from 292 to 166 MB resident.
 */
export const pgliteOptions = { postgresqlconf: "shared_buffers=16MB" };

if (import.meta.main) {
  const [dir] = Deno.args;
  if (!dir) {
    // deno-lint-ignore no-console
    console.error("usage: deno run tools/pglite_init.ts DATA_FOLDER");
    Deno.exit(2);
  }
  const db = await PGlite.create({ dataDir: dir, ...pgliteOptions });
  await db.close();
}
