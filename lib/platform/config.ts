/**
 * Process settings come from the environment, parsed once at start-up with valibot; a bad or
 * missing setting stops the process with one line per problem.
 *
 * @module
 */

import * as v from "valibot";
import type { Logger } from "./log.ts";
import { assertDeclared } from "./settings.ts";

/** A TCP port setting with a default. */
export function port(fallback: number) {
  return v.optional(
    v.pipe(
      v.string(),
      v.regex(/^\d{1,5}$/, "must be a port number"),
      v.transform(Number),
      v.maxValue(65535, "must be a port number"),
    ),
    String(fallback),
  );
}

/** A positive integer setting with a default. */
export function positiveInt(fallback: number) {
  return v.optional(
    v.pipe(
      v.string(),
      v.regex(/^[1-9]\d{0,8}$/, "must be a positive integer"),
      v.transform(Number),
    ),
    String(fallback),
  );
}

/** An optional non-empty string setting (empty counts as unset). */
/** A whole number setting, 0 allowed (0 usually turns something off). */
export function nonNegativeInt(fallback: number) {
  return v.optional(
    v.pipe(v.string(), v.regex(/^\d{1,9}$/, "must be a whole number"), v.transform(Number)),
    String(fallback),
  );
}

export const optionalString = v.pipe(
  v.optional(v.string()),
  v.transform((s) => (s === "" ? undefined : s)),
);

/** A `true`/`false` setting with a default. */
export function flag(fallback: boolean) {
  return v.optional(
    v.pipe(
      v.string(),
      v.picklist(["true", "false"], "must be true or false"),
      v.transform((s) => s === "true"),
    ),
    String(fallback),
  );
}

/** The log level setting. */
export const logLevel = v.optional(v.picklist(["debug", "info", "warn", "error"]), "info");

/** Settings that cannot be used: its message has one line per problem. */
export class ConfigError extends Error {
  override name = "ConfigError";
}

/**
 * Reads the settings of `schema` from the environment (or `env`); throws a {@link ConfigError}
 * naming every problem (the process's `main.ts` prints it and exits 2).
 */
export function readConfig<S extends v.GenericSchema>(
  component: string,
  schema: S,
  env: Record<string, string | undefined> = Deno.env.toObject(),
): v.InferOutput<S> {
  // Every setting is declared in ./settings.ts (the README's table and start's --help come from it).
  if ("entries" in schema) assertDeclared(component, Object.keys(schema.entries as object));
  const result = v.safeParse(schema, env);
  if (result.success) return result.output;
  throw new ConfigError(
    result.issues.map((issue) => {
      const key = issue.path?.map((p) => String(p.key)).join(".") ?? "";
      return `${component}: setting ${key}: ${issue.message}`;
    }).join("\n"),
  );
}

/**
 * What a process's `main.ts` exits with when it could not start: 2 after printing the problems
 * of a {@link ConfigError}; anything else is rethrown.
 */
export function configErrorExitCode(error: unknown): number {
  if (!(error instanceof ConfigError)) throw error;
  // deno-lint-ignore no-console
  console.error(error.message);
  return 2;
}

/**
 * The authorization server's issuer (ISSUER_URL): an `http` or `https` origin, with nothing after
 * its host and port but an optional `/`. RFC 8414 2 forbids a query and a fragment in an issuer;
 * a path is refused too, because the gateway serves the metadata and every endpoint at the root
 * of its origin: with a path, RFC 8414 3.1 would put the metadata at
 * `/.well-known/oauth-authorization-server/<path>`, which nothing serves, and the endpoints it
 * names under the path, which are not there either (RFC 8414 3.3).
 */
export const issuerUrl = v.pipe(
  v.string(),
  v.url("must be a URL"),
  v.regex(
    /^https?:\/\/[^/?#@\\]+\/?$/i,
    "must be an http or https origin: no path, query, fragment or credentials",
  ),
);

/**
 * The issuer of a token service started without ISSUER_URL: the gateway's on its default port. A
 * gateway on another port without ISSUER_URL names another in its metadata, and warns.
 */
export const defaultIssuer = "http://127.0.0.1:8080";

/** A required non-empty string setting. */
export const required = v.pipe(v.string("is required"), v.nonEmpty("is required"));

const longEnough = v.minLength<string, 32, string>(32, "must be at least 32 characters");

/** A required key or secret: at least 32 characters, refused before anything starts. */
export const secretKey = v.pipe(required, longEnough);

/** An optional key or secret (empty is unset): when set, at least 32 characters. */
export const optionalSecretKey = v.pipe(
  optionalString,
  v.union([v.undefined(), v.pipe(v.string(), longEnough)]),
);

/**
 * Keys or secrets separated by commas, each at least 32 characters (unset or empty: none); spaces
 * around a comma are not part of a key.
 */
export const secretKeyList = v.pipe(
  v.optional(v.string()),
  v.transform((s) => (s ?? "").split(",").map((key) => key.trim()).filter((key) => key !== "")),
  v.array(v.pipe(v.string(), longEnough)),
);

/**
 * Runs `stop` once on SIGTERM (or SIGINT), logging around it; resolves when it has run (the
 * process's `main.ts` then exits 0).
 */
export function untilTerminated(log: Logger, stop: () => Promise<void>): Promise<void> {
  return new Promise((resolve) => {
    let stopping = false;
    const handler = async () => {
      if (stopping) return;
      stopping = true;
      log.info("draining");
      await stop();
      log.info("stopped");
      resolve();
    };
    Deno.addSignalListener("SIGTERM", handler);
    Deno.addSignalListener("SIGINT", handler);
  });
}
