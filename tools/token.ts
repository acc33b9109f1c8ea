/**
 * Prints a bearer token signed with AUTH_JWT_SECRET (or the local stack's generated secret).
 *
 *   deno task token -- --sub u1 --projects p1,p2 [--account a1] [--space s1] [--ttl 3600]
 *
 * @module
 */

import { parseArgs } from "node:util";
import { signToken } from "../lib/tokens.ts";
import { DataDirError, devSecrets } from "./dev_secrets.ts";

const { values } = parseArgs({
  args: Deno.args[0] === "--" ? Deno.args.slice(1) : Deno.args,
  options: {
    sub: { type: "string" },
    projects: { type: "string", default: "" },
    account: { type: "string" },
    space: { type: "string" },
    ttl: { type: "string", default: "3600" },
  },
});
if (!values.sub) {
  // deno-lint-ignore no-console
  console.error(
    "usage: deno task token -- --sub <subject> [--projects p1,p2|*] [--account a] [--space s] [--ttl seconds]",
  );
  Deno.exit(2);
}
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
  projects: values.projects.split(",").filter((p) => p !== ""),
  ttlSeconds: Number(values.ttl),
  ...(values.account !== undefined ? { accountId: values.account } : {}),
  ...(values.space !== undefined ? { space: values.space } : {}),
  ...(Deno.env.get("AUTH_ISSUER") ? { issuer: Deno.env.get("AUTH_ISSUER")! } : {}),
  ...(Deno.env.get("AUTH_AUDIENCE") ? { audience: Deno.env.get("AUTH_AUDIENCE")! } : {}),
});
// deno-lint-ignore no-console
console.log(token);
