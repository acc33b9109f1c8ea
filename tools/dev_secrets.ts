/**
 * Development secrets: when AUTH_JWT_SECRET or CLIENT_SECRET_HMAC_KEY is not set, `deno task start`
 * and `deno task token` use values generated once and kept in `./.data/dev-secrets.json` (git
 * ignores `.data/`). Production sets both from a secret store.
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
}

/** The local stack's data folder: `START_DATA_DIR`, or `./.data` of the project. */
export function dataDir(): URL {
  const dir = Deno.env.get("START_DATA_DIR");
  return dir ? pathToFileURL(resolve(dir) + "/") : new URL("../.data/", import.meta.url);
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
  const fromEnv = {
    AUTH_JWT_SECRET: Deno.env.get("AUTH_JWT_SECRET"),
    CLIENT_SECRET_HMAC_KEY: Deno.env.get("CLIENT_SECRET_HMAC_KEY"),
  };
  if (fromEnv.AUTH_JWT_SECRET && fromEnv.CLIENT_SECRET_HMAC_KEY) {
    return {
      AUTH_JWT_SECRET: fromEnv.AUTH_JWT_SECRET,
      CLIENT_SECRET_HMAC_KEY: fromEnv.CLIENT_SECRET_HMAC_KEY,
    };
  }
  let stored: Partial<DevSecrets> = {};
  try {
    stored = JSON.parse(await Deno.readTextFile(file));
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
  }
  const secrets: DevSecrets = {
    AUTH_JWT_SECRET: stored.AUTH_JWT_SECRET ?? random(),
    CLIENT_SECRET_HMAC_KEY: stored.CLIENT_SECRET_HMAC_KEY ?? random(),
  };
  if (stored.AUTH_JWT_SECRET === undefined || stored.CLIENT_SECRET_HMAC_KEY === undefined) {
    await Deno.mkdir(new URL(".", file), { recursive: true });
    await Deno.writeTextFile(file, JSON.stringify(secrets, null, 2) + "\n", { mode: 0o600 });
  }
  return {
    AUTH_JWT_SECRET: fromEnv.AUTH_JWT_SECRET || secrets.AUTH_JWT_SECRET,
    CLIENT_SECRET_HMAC_KEY: fromEnv.CLIENT_SECRET_HMAC_KEY || secrets.CLIENT_SECRET_HMAC_KEY,
  };
}
