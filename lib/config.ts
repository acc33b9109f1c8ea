/**
 * Process settings come from the environment, parsed once at start-up with valibot; a bad or
 * missing setting stops the process with one line per problem.
 *
 * @module
 */

import * as v from "valibot";
import type { AuthOptions } from "./auth.ts";
import type { Logger } from "./log.ts";

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
export const optionalString = v.pipe(
  v.optional(v.string()),
  v.transform((s) => (s === "" ? undefined : s)),
);

/** The log level setting. */
export const logLevel = v.optional(v.picklist(["debug", "info", "warn", "error"]), "info");

/** Reads the settings of `schema` from the environment (or `env`), or exits with the problems. */
export function readConfig<S extends v.GenericSchema>(
  component: string,
  schema: S,
  env: Record<string, string | undefined> = Deno.env.toObject(),
): v.InferOutput<S> {
  const result = v.safeParse(schema, env);
  if (result.success) return result.output;
  for (const issue of result.issues) {
    const key = issue.path?.map((p) => String(p.key)).join(".") ?? "";
    // deno-lint-ignore no-console
    console.error(`${component}: setting ${key}: ${issue.message}`);
  }
  Deno.exit(2);
}

/** A required non-empty string setting. */
export const required = v.pipe(v.string("is required"), v.nonEmpty("is required"));

/** The token verification settings every process reads (see lib/auth.ts). */
export const authSettings = {
  AUTH_JWT_SECRET: optionalString,
  AUTH_JWKS_URL: optionalString,
  AUTH_ISSUER: optionalString,
  AUTH_AUDIENCE: optionalString,
};

/** Maps the {@link authSettings} to the verifier's options. */
export function authOptions(config: {
  AUTH_JWT_SECRET?: string | undefined;
  AUTH_JWKS_URL?: string | undefined;
  AUTH_ISSUER?: string | undefined;
  AUTH_AUDIENCE?: string | undefined;
}): AuthOptions {
  return {
    jwtSecret: config.AUTH_JWT_SECRET,
    jwksUrl: config.AUTH_JWKS_URL,
    issuer: config.AUTH_ISSUER,
    audience: config.AUTH_AUDIENCE,
  };
}

/** Runs `stop` once on SIGTERM (or SIGINT), logging around it, then exits 0. */
export function onTerminate(log: Logger, stop: () => Promise<void>): void {
  let stopping = false;
  const handler = async () => {
    if (stopping) return;
    stopping = true;
    log.info("draining");
    await stop();
    log.info("stopped");
    Deno.exit(0);
  };
  Deno.addSignalListener("SIGTERM", handler);
  Deno.addSignalListener("SIGINT", handler);
}
