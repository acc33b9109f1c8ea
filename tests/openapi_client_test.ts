/**
 * A typed client generated from the API's OpenAPI document with stock tools, against the real
 * stack: openapi-typescript turns gen/openapi/openapi.json into `paths` types at test time (the
 * command the README gives), and a small program written next to them calls the gateway through
 * openapi-fetch. The program is type-checked under the repository's strict compiler options, so
 * the generated types must fit real use (the plaintext `secret`, the typed error body, a 204 with
 * no body) and must refuse what the API refuses; then it runs, asserting statuses and fields.
 */

import assert from "node:assert/strict";
import { httpClient, startStack } from "../lib/testing/mod.ts";

const root = new URL("../", import.meta.url);

/** The user's program: everything it needs comes from the environment. */
const program = `
import assert from "node:assert/strict";
import createClient from "npm:openapi-fetch@0.17.0";
import type { components, paths } from "./schema.d.ts";

type ErrorCode = components["schemas"]["Error"]["error"]["code"];

function env(name: string): string {
  const value = Deno.env.get(name);
  if (value === undefined) throw new Error(name + " is not set");
  return value;
}

/** The body of a call that answered \`status\`; the error body in the message otherwise. */
function body<T>(result: { data?: T; error?: unknown; response: Response }, status: number): T {
  const detail = result.response.url + " " + JSON.stringify(result.error);
  assert.equal(result.response.status, status, detail);
  assert.ok(result.data !== undefined, detail);
  return result.data;
}

const baseUrl = env("GATEWAY_URL");
const api = createClient<paths>({
  baseUrl,
  headers: { authorization: "Bearer " + env("ADMIN_TOKEN") },
});
const project_id = env("PROJECT_ID");

// The consent screen first: PATCH creates the project's config.
const config = body(
  await api.PATCH("/v1/projects/{project_id}/config", {
    params: { path: { project_id } },
    body: { application_name: "Typed App" },
  }),
  200,
);
assert.equal(config.project_id, project_id);
assert.equal(config.application_name, "Typed App");
assert.equal(config.publishing_status, "testing");
assert.equal(config.support_email, null);

// A web client, read back, and a second one to page through.
const client = body(
  await api.POST("/v1/projects/{project_id}/clients", {
    params: { path: { project_id } },
    body: { name: "Web", type: "web", redirect_uris: ["https://app.example.com/callback"] },
  }),
  201,
);
assert.match(client.id, /^cli_[0-9a-z]{26}$/);
assert.equal(client.status, "active");
const client_id = client.id;
const read = body(
  await api.GET("/v1/projects/{project_id}/clients/{client_id}", {
    params: { path: { project_id, client_id } },
  }),
  200,
);
assert.deepEqual(read, client);
const spa = body(
  await api.POST("/v1/projects/{project_id}/clients", {
    params: { path: { project_id } },
    body: { name: "SPA", type: "spa", javascript_origins: ["https://app.example.com"] },
  }),
  201,
);
const page1 = body(
  await api.GET("/v1/projects/{project_id}/clients", {
    params: { path: { project_id }, query: { limit: 1 } },
  }),
  200,
);
assert.deepEqual(page1.data.map((c) => c.id), [client_id]);
assert.equal(page1.has_more, true);
const page2 = body(
  await api.GET("/v1/projects/{project_id}/clients", {
    params: { path: { project_id }, query: { limit: 1, after: client_id } },
  }),
  200,
);
assert.deepEqual(page2.data.map((c) => c.id), [spa.id]);
assert.equal(page2.has_more, false);

// A secret: the plaintext comes once, in this response.
const secret = body(
  await api.POST("/v1/projects/{project_id}/clients/{client_id}/secrets", {
    params: { path: { project_id, client_id } },
  }),
  201,
);
assert.ok(typeof secret.secret === "string");
assert.match(secret.secret, /^ocs_[A-Za-z0-9_-]{43}$/);
assert.equal(secret.secret_hint, "ocs_****" + secret.secret.slice(-4));
assert.equal(secret.client_id, client_id);

// An invalid redirect URI: a 400 whose body is typed.
const bad = await api.POST("/v1/projects/{project_id}/clients", {
  params: { path: { project_id } },
  body: { name: "Bad", type: "web", redirect_uris: ["http://app.example.com/callback"] },
});
assert.equal(bad.response.status, 400);
assert.equal(bad.data, undefined);
assert.ok(bad.error);
const code: ErrorCode = bad.error.error.code;
assert.equal(code, "invalid_argument");
assert.ok(
  bad.error.error.details.some((d) => d.field === "redirect_uris[0]"),
  JSON.stringify(bad.error),
);

// DELETE is 204 with no body; the client is gone.
const deleted = await api.DELETE("/v1/projects/{project_id}/clients/{client_id}", {
  params: { path: { project_id, client_id } },
});
assert.equal(deleted.response.status, 204);
assert.equal(deleted.data, undefined);
assert.equal(deleted.error, undefined);
const gone = await api.GET("/v1/projects/{project_id}/clients/{client_id}", {
  params: { path: { project_id, client_id } },
});
assert.equal(gone.response.status, 404);
assert.equal(gone.error?.error.code, "not_found");

// The core area, with a token that has a space claim.
const core = createClient<paths>({
  baseUrl,
  headers: { authorization: "Bearer " + env("CORE_TOKEN") },
});
const role = body(
  await core.POST("/v1/core/roles", {
    body: { name: "Auditor", resource_type: "project", permissions: ["units.read"] },
  }),
  201,
);
assert.equal(role.object, "role");
assert.match(role.id, /^role_[0-9a-z]{26}$/);
assert.equal(role.description, null);
const roles = body(
  await core.GET("/v1/core/roles", { params: { query: { resource_type: "project" } } }),
  200,
);
assert.deepEqual(roles.data.map((r) => r.id), [role.id]);

console.log(JSON.stringify({ client: client_id, secret: secret.id, role: role.id }));

/** Never called: each call is wrong and must be refused by the type checker. */
export async function refused(): Promise<void> {
  await api.POST("/v1/projects/{project_id}/clients", {
    params: { path: { project_id } },
    // @ts-expect-error a client type the API does not know
    body: { name: "x", type: "desktop" },
  });
  await api.POST("/v1/projects/{project_id}/clients", {
    params: { path: { project_id } },
    // @ts-expect-error id is output-only
    body: { name: "x", type: "web", id: "cli_x" },
  });
  // @ts-expect-error the path needs project_id
  await api.GET("/v1/projects/{project_id}/clients", { params: { path: {} } });
  await api.GET("/v1/projects/{project_id}/clients", {
    // @ts-expect-error limit is a number
    params: { path: { project_id }, query: { limit: "5" } },
  });
  // @ts-expect-error no such route
  await api.GET("/v1/projects/{project_id}/secrets", { params: { path: { project_id } } });
  const { data } = await api.GET("/v1/projects/{project_id}/clients/{client_id}", {
    params: { path: { project_id, client_id: "cli_x" } },
  });
  // @ts-expect-error a client has no secret
  data?.secret;
}
`;

/** Runs `deno <args>` in the repository; its exit code and everything it wrote. */
async function deno(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; output: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args,
    cwd: root,
    env: { NO_COLOR: "1", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(120_000),
  }).output();
  const stdout = new TextDecoder().decode(out.stdout);
  const stderr = new TextDecoder().decode(out.stderr);
  return { code: out.code, stdout, output: `${args.join(" ")}\n${stdout}${stderr}` };
}

Deno.test("a client generated from the OpenAPI document calls the stack, typed", async (t) => {
  // In the git-ignored .check/; run from the repository's root, the program is checked with
  // deno.json's strict compiler options and resolves openapi-fetch from node_modules (--frozen).
  const checkDir = new URL(".check/", root).pathname;
  await Deno.mkdir(checkDir, { recursive: true });
  const dir = await Deno.makeTempDir({ dir: checkDir, prefix: "openapi_client_" });
  const schema = `${dir}/schema.d.ts`;
  const main = `${dir}/main.ts`;
  // The stack starts while the types are generated and checked.
  const starting = startStack();
  starting.catch(() => {}); // awaited below; never an unhandled rejection
  try {
    const generated = await t.step("openapi-typescript generates the paths types", async () => {
      const gen = await deno([
        "run",
        "-A",
        "--frozen",
        "npm:openapi-typescript@7.13.0",
        "gen/openapi/openapi.json",
        "-o",
        schema,
      ]);
      assert.equal(gen.code, 0, gen.output);
      // Each problem openapi-typescript finds in the document is a line marked with a warning sign.
      assert.doesNotMatch(gen.output, /\u26a0/, gen.output);
      const types = await Deno.readTextFile(schema);
      assert.match(types, /^export interface paths \{$/m);
      assert.match(types, /"\/v1\/projects\/\{project_id\}\/clients\/\{client_id\}\/secrets": \{/);
      await Deno.writeTextFile(main, program);
    });
    if (!generated) return;

    const checked = await t.step("the program type-checks against them", async () => {
      const check = await deno(["check", "--frozen", main]);
      assert.equal(check.code, 0, check.output);
    });
    if (!checked) return;

    await t.step("the program runs against the stack", async () => {
      const stack = await starting;
      const run = await deno(["run", "--frozen", "--allow-env", "--allow-net", main], {
        GATEWAY_URL: stack.gatewayUrl,
        ADMIN_TOKEN: await stack.token({ sub: "dev-1", projects: ["typed-p1"] }),
        CORE_TOKEN: await stack.token({ sub: "dev-1", space: "typed-space" }),
        PROJECT_ID: "typed-p1",
      });
      assert.equal(run.code, 0, run.output);
      // What the program reports it did is there when asked without it.
      const made = JSON.parse(run.stdout);
      const api = httpClient(stack.gatewayUrl);
      const admin = await stack.token({ sub: "admin", projects: ["typed-p1"] });
      const core = await stack.token({ sub: "admin", space: "typed-space" });
      const client = await api("GET", `/v1/projects/typed-p1/clients/${made.client}`, {
        token: admin,
      });
      assert.equal(client.status, 404, client.text);
      const role = await api("GET", `/v1/core/roles/${made.role}`, { token: core });
      assert.equal(role.status, 200, role.text);
      assert.equal(role.body.name, "Auditor");
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
    await (await starting).stop();
  }
});
