/**
 * `deno task docs`: writes the README's configuration table (the table of its "## Configuration"
 * section) from the settings' declarations, lib/platform/settings.ts. `--check` writes nothing and
 * exits 1 when the README's table is not what they give (tests/settings_test.ts checks the same).
 *
 * Only that table is written: the rest of the README is left as it is.
 *
 * @module
 */

import { settingsTable } from "../lib/platform/mod.ts";
import { parseCommandLine } from "./cli.ts";

const usage = `Usage: deno task docs [--check]

Writes the table of README.md's "Configuration" section from lib/platform/settings.ts, where every
setting is declared (who reads it, its default, what it means).

Options:
  --check                    write nothing; exit 1 if the README's table is not current
  -h, --help                 this text

Environment:
  none`;

/** Where the configuration table is in `readme`: its first and last line's index. */
export function tableLines(readme: string): { start: number; end: number; lines: string[] } {
  const lines = readme.split("\n");
  const heading = lines.indexOf("## Configuration");
  if (heading < 0) throw new Error('README.md has no "## Configuration" section');
  let start = heading + 1;
  while (start < lines.length && !lines[start]!.startsWith("|")) {
    if (lines[start]!.startsWith("## ")) throw new Error("the Configuration section has no table");
    start++;
  }
  let end = start;
  while (end + 1 < lines.length && lines[end + 1]!.startsWith("|")) end++;
  return { start, end, lines };
}

/** The README's configuration table, as it is. */
export function readmeTable(readme: string): string {
  const { start, end, lines } = tableLines(readme);
  return lines.slice(start, end + 1).join("\n");
}

/** `readme` with its configuration table as the declarations give it. */
export function withCurrentTable(readme: string): string {
  const { start, end, lines } = tableLines(readme);
  return [...lines.slice(0, start), settingsTable(), ...lines.slice(end + 1)].join("\n");
}

if (import.meta.main) {
  const { check } = parseCommandLine("docs", usage, { check: { type: "boolean" } });
  const path = new URL("../README.md", import.meta.url);
  const readme = await Deno.readTextFile(path);
  const current = withCurrentTable(readme);
  if (current === readme) {
    // deno-lint-ignore no-console
    console.log("docs: README.md's configuration table is current");
  } else if (check) {
    // deno-lint-ignore no-console
    console.error("docs: README.md's configuration table is not current: run deno task docs");
    Deno.exit(1);
  } else {
    await Deno.writeTextFile(path, current);
    // deno-lint-ignore no-console
    console.log("docs: wrote README.md's configuration table from lib/platform/settings.ts");
  }
}
