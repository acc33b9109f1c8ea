/**
 * The command lines of the tasks (`deno task start`, `token`, `bench`): `--help`/`-h` prints the
 * usage and exits 0; an unknown option, a stray argument or a bad value prints the problem and the
 * usage to stderr and exits 2.
 *
 * @module
 */

import { parseArgs } from "node:util";

/** The options of a command line, as node:util's parseArgs takes them. */
export type Options = Record<
  string,
  { type: "string"; default?: string } | { type: "boolean"; default?: boolean }
>;

/** The values parsed for `T`: a string or boolean, present when given or defaulted. */
export type Values<T extends Options> = {
  [K in keyof T]: T[K] extends { type: "boolean" } ? boolean | undefined : string | undefined;
};

/**
 * Parses `args` (Deno.args; a leading `--`, as `deno task x -- ...` passes it, is dropped) or
 * exits: 0 after printing `usage` for `--help`, 2 after printing the problem and `usage` to stderr.
 */
export function parseCommandLine<T extends Options>(
  name: string,
  usage: string,
  options: T,
  args: string[] = Deno.args,
): Values<T> {
  let values: Record<string, string | boolean | undefined>;
  try {
    values = parseArgs({
      args: args[0] === "--" ? args.slice(1) : args,
      options: { ...options, help: { type: "boolean", short: "h" } },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (error) {
    usageError(name, usage, (error as Error).message);
  }
  if (values.help) {
    // deno-lint-ignore no-console
    console.log(usage);
    Deno.exit(0);
  }
  return values as Values<T>;
}

/** Prints `problem` and the usage to stderr and exits 2. */
export function usageError(name: string, usage: string, problem: string): never {
  // deno-lint-ignore no-console
  console.error(`${name}: ${problem}\n\n${usage}`);
  Deno.exit(2);
}

/** A positive number (a whole one if `integer`) from an option's value, or a usage error. */
export function positiveNumber(
  name: string,
  usage: string,
  option: string,
  value: string,
  integer = false,
): number {
  const n = Number(value);
  if (value.trim() === "" || !Number.isFinite(n) || n <= 0 || (integer && !Number.isInteger(n))) {
    const what = integer ? "a positive whole number" : "a positive number";
    usageError(name, usage, `--${option} takes ${what}, not "${value}"`);
  }
  return n;
}
