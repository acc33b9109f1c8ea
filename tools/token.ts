/**
 * Prints a bearer token signed with AUTH_JWT_SECRET (or the local stack's generated secret).
 *
 *   deno task token --sub u1 --projects p1,p2 [--account a1] [--space s1] [--ttl 3600]
 *
 * @module
 */

import { signToken } from "../lib/policy/mod.ts";
import { parseCommandLine, positiveNumber, usageError } from "./cli.ts";
import { DataDirError, devSecrets } from "./dev_secrets.ts";

const usage = `Usage: deno task token --sub <subject> [options]

Prints a bearer token for the services and the gateway, signed with AUTH_JWT_SECRET, or when it
is not set with the secret "deno task start" generated into its data folder.

Options:
  --sub <subject>          the token's subject (required)
  --projects <p1,p2|*>     the projects it may use, "*" for all (none unless given)
  --account <id>           its account
  --space <id>             its space (the core API needs one)
  --ttl <seconds>          its lifetime (3600)
  -h, --help               this text

Environment:
  AUTH_JWT_SECRET          the HS256 signing secret (else the generated one)
  START_DATA_DIR           the data folder of the generated secret (./.data)
  AUTH_ISSUER              the iss claim, for services that check it
  AUTH_AUDIENCE            the aud claim, for services that check it`;

const values = parseCommandLine("token", usage, {
  sub: { type: "string" },
  projects: { type: "string", default: "" },
  account: { type: "string" },
  space: { type: "string" },
  ttl: { type: "string", default: "3600" },
});
if (!values.sub) usageError("token", usage, "--sub is required");
const ttlSeconds = positiveNumber("token", usage, "ttl", values.ttl ?? "3600", true);

let secret: string;
try {
  secret = (await devSecrets()).AUTH_JWT_SECRET;
} catch (error) {
  if (!(error instanceof DataDirError)) throw error;
  // deno-lint-ignore no-console
  console.error(`token: ${error.message}`);
  Deno.exit(1);
}
const token = await signToken(secret, {
  sub: values.sub,
  projects: (values.projects ?? "").split(",").filter((p) => p !== ""),
  ttlSeconds,
  ...(values.account !== undefined ? { accountId: values.account } : {}),
  ...(values.space !== undefined ? { space: values.space } : {}),
  ...(Deno.env.get("AUTH_ISSUER") ? { issuer: Deno.env.get("AUTH_ISSUER")! } : {}),
  ...(Deno.env.get("AUTH_AUDIENCE") ? { audience: Deno.env.get("AUTH_AUDIENCE")! } : {}),
});
// deno-lint-ignore no-console
console.log(token);
