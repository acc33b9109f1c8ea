import assert from "node:assert/strict";
import type { Sql } from "../db/mod.ts";
import type { Logger } from "../platform/mod.ts";
import { until } from "../testing/mod.ts";
import { keepEvents } from "./retention.ts";

Deno.test("keepEvents waits for the migrations: a first start warns of no missing table", async () => {
  const warnings: string[] = [];
  const log: Logger = {
    debug: () => {},
    info: () => {},
    warn: (message) => warnings.push(message),
    error: () => {},
    enabled: () => true,
  };
  // Before the migrations every query fails, as on a new database: the tables are not there yet.
  let queries = 0;
  const sql = (() => {
    queries++;
    throw new Error('relation "core.events" does not exist');
  }) as unknown as Sql;
  let migrate!: () => void;
  const migrated = new Promise<void>((resolve) => migrate = resolve);
  const stop = keepEvents(sql, "core", {
    days: 400,
    now: Date.now,
    log,
    intervalMs: 10,
    numberMs: 10,
    migrated,
  });
  try {
    // Ten periods of both loops, or as many as a busy machine runs: none asks anything.
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(queries, 0);
    assert.equal(warnings.length, 0, `${warnings}`);
    // Once migrated it runs (here into the same failure, which it reports).
    migrate();
    await until(
      () => warnings.includes("cannot number audit events"),
      30_000,
      "the numbering to run and warn",
    );
  } finally {
    stop();
  }
});
