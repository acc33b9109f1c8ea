/**
 * Development secrets: when AUTH_JWT_SECRET, CLIENT_SECRET_HMAC_KEY or TOKEN_KEY_ENCRYPTION_KEY is
 * not set, `deno task start` and `deno task token` use values generated once and kept in
 * `./.data/dev-secrets.json` (git ignores `.data/`). Production sets them from a secret store.
 *
 * @module
 */

import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

/** The secrets a local stack needs. */
export interface DevSecrets {
  /** The HS256 token signing secret. */
  AUTH_JWT_SECRET: string;
  /** The key of client-secret hashes. */
  CLIENT_SECRET_HMAC_KEY: string;
  /** The key the token service seals its signing keys under. */
  TOKEN_KEY_ENCRYPTION_KEY: string;
}

/** The settings it reads (and generates when unset). */
export const secretNames = [
  "AUTH_JWT_SECRET",
  "CLIENT_SECRET_HMAC_KEY",
  "TOKEN_KEY_ENCRYPTION_KEY",
] as const;

/**
 * The local stack's data folder: `START_DATA_DIR`, or `./.data` of the project. A relative
 * START_DATA_DIR is taken from the folder `deno task` was called in (INIT_CWD), not the project's.
 */
export function dataDir(): URL {
  const dir = Deno.env.get("START_DATA_DIR");
  if (!dir) return new URL("../.data/", import.meta.url);
  return pathToFileURL(resolve(Deno.env.get("INIT_CWD") ?? Deno.cwd(), dir) + "/");
}

/** The data folder cannot be created or written: its message is one line for the user. */
export class DataDirError extends Error {
  override name = "DataDirError";
}

/** Why a file operation failed, in a few words. */
function reason(error: unknown): string {
  if (error instanceof Deno.errors.PermissionDenied) return "permission denied";
  // Deno's messages end with the operation and path (": mkdir '/x'"), said already.
  return String((error as Error)?.message ?? error).replace(/: \w+ '.*'$/, "");
}

/** A DataDirError: the data folder `what` ("cannot be written"), and why. */
export function dataDirError(what: string, error: unknown): DataDirError {
  const dir = dataDir();
  const from = Deno.env.get("START_DATA_DIR") ? " (START_DATA_DIR)" : "";
  return new DataDirError(`the data folder ${dir.pathname}${from} ${what}: ${reason(error)}`, {
    cause: error,
  });
}

/** Creates the data folder if missing; a DataDirError says why it cannot be. */
export async function prepareDataDir(): Promise<URL> {
  const dir = dataDir();
  try {
    await Deno.mkdir(dir, { recursive: true });
  } catch (error) {
    throw dataDirError("cannot be created", error);
  }
  return dir;
}

function random(): string {
  return Array.from(
    crypto.getRandomValues(new Uint8Array(32)),
    (b) => b.toString(16).padStart(2, "0"),
  )
    .join("");
}

/** Returns the settings from the environment, falling back to the generated development values. */
export async function devSecrets(): Promise<DevSecrets> {
  const file = new URL("dev-secrets.json", dataDir());
  const fromEnv: Partial<DevSecrets> = {};
  for (const name of secretNames) {
    const value = Deno.env.get(name);
    if (value) fromEnv[name] = value;
  }
  if (secretNames.every((name) => fromEnv[name] !== undefined)) return fromEnv as DevSecrets;
  let stored: Partial<DevSecrets> = {};
  let text: string | undefined;
  try {
    text = await Deno.readTextFile(file);
  } catch (error) {
    if (error instanceof Deno.errors.NotADirectory) throw dataDirError("cannot be created", error);
    if (!(error instanceof Deno.errors.NotFound)) throw dataDirError("cannot be read", error);
  }
  if (text !== undefined) {
    try {
      stored = JSON.parse(text);
    } catch {
      throw new DataDirError(
        `${file.pathname} is not JSON; remove it to have new secrets generated`,
      );
    }
  }
  const secrets = {} as DevSecrets;
  for (const name of secretNames) secrets[name] = stored[name] ?? random();
  if (secretNames.some((name) => stored[name] === undefined)) {
    await prepareDataDir();
    try {
      await Deno.writeTextFile(file, JSON.stringify(secrets, null, 2) + "\n", { mode: 0o600 });
    } catch (error) {
      throw dataDirError("cannot be written", error);
    }
  }
  return { ...secrets, ...fromEnv };
}
