/**
 * HTTP/2 conformance of the services' gRPC ports (lib/transport/h2_server.ts): h2spec, the conformance
 * tester, in strict mode against `services/oauth/main.ts`, `services/core/main.ts` and
 * `services/token/main.ts` started as real processes on a throwaway database. Every test case must pass; the summary of each run is
 * printed, and the failures, when there are any.
 *
 * h2spec (github.com/summerwind/h2spec, a Go program; not on npm or in Debian) is the one named by
 * `H2SPEC`, else `h2spec` on the PATH, else the build script the CI machines keep beside the
 * checkout (`../shared/tools/h2spec`, which builds it with Debian's Go). Without any of them this
 * test fails and says so: it does not skip.
 */

import assert from "node:assert/strict";
import { createTestDatabase } from "../lib/testing/mod.ts";
import { spawn } from "../lib/testing/mod.ts";
import { ensurePackages, packages } from "../tools/debian.ts";

async function findH2spec(): Promise<string | undefined> {
  const named = Deno.env.get("H2SPEC");
  if (named) return named;
  for (const dir of (Deno.env.get("PATH") ?? "").split(":")) {
    if (dir && await Deno.stat(`${dir}/h2spec`).then((s) => s.isFile, () => false)) {
      return `${dir}/h2spec`;
    }
  }
  const ci = new URL("../../shared/tools/h2spec", import.meta.url).pathname;
  return await Deno.stat(ci).then(() => ci, () => undefined);
}

function randomSecret(): string {
  return Array.from(
    crypto.getRandomValues(new Uint8Array(24)),
    (b) => b.toString(16).padStart(2, "0"),
  )
    .join("");
}

/** What one h2spec run reported. */
interface H2specResult {
  summary: string;
  tests: number;
  passed: number;
  skipped: number;
  failed: number;
  /** The report's failure section (empty when none failed). */
  failures: string;
}

async function runH2spec(h2spec: string, port: number): Promise<H2specResult> {
  const out = await new Deno.Command(h2spec, {
    args: ["-h", "127.0.0.1", "-p", String(port), "--strict"],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  const match = text.match(/(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed/);
  assert.ok(match, `h2spec printed no summary (exit code ${out.code}):\n${text.slice(-4000)}`);
  const at = text.indexOf("Failures:");
  return {
    summary: match[0],
    tests: Number(match[1]),
    passed: Number(match[2]),
    skipped: Number(match[3]),
    failed: Number(match[4]),
    failures: at >= 0 ? text.slice(at) : "",
  };
}

Deno.test("h2spec --strict passes every case on the gRPC port of every service", async () => {
  const h2spec = await findH2spec();
  if (!h2spec) {
    throw new Error(
      "h2spec is missing: build it (github.com/summerwind/h2spec) and set H2SPEC to its path, " +
        "or put it on the PATH",
    );
  }
  await ensurePackages([packages.go]);
  const db = await createTestDatabase();
  const env = {
    DATABASE_URL: db.url,
    AUTH_JWT_SECRET: randomSecret(),
    CLIENT_SECRET_HMAC_KEY: randomSecret(),
    HOST: "127.0.0.1",
    GRPC_PORT: "0",
    HTTP_PORT: "0",
    LOG_LEVEL: "info",
  };
  const procs = {
    oauth: spawn("services/oauth/main.ts", env),
    core: spawn("services/core/main.ts", env),
    // h2spec's requests are not gRPC calls: the token service answers them without the registry.
    token: spawn("services/token/main.ts", { ...env, TOKEN_KEY_ENCRYPTION_KEY: randomSecret() }),
  };
  try {
    const results: string[] = [];
    for (const [name, proc] of Object.entries(procs)) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const serving = await Promise.race([
        proc.serving,
        new Promise<never>((_, reject) =>
          timer = setTimeout(
            () => reject(new Error(`${name} did not start:\n${proc.lines.join("\n")}`)),
            60_000,
          )
        ),
      ]).finally(() => clearTimeout(timer));
      const port = Number(serving.grpc_port);
      assert.ok(port > 0, `${name} logged no gRPC port: ${JSON.stringify(serving)}`);
      const result = await runH2spec(h2spec, port);
      // deno-lint-ignore no-console
      console.log(`h2spec --strict, ${name} gRPC port: ${result.summary}`);
      if (result.failed > 0) {
        // deno-lint-ignore no-console
        console.log(result.failures);
      }
      assert.ok(result.tests > 100, `${name}: only ${result.tests} test cases ran`);
      results.push(`${name}: ${result.summary}${result.failed > 0 ? `\n${result.failures}` : ""}`);
    }
    for (const line of results) assert.match(line, /, 0 failed$/, line);
  } finally {
    await Promise.all(
      Object.values(procs).map(async (p) => {
        try {
          p.child.kill("SIGTERM");
        } catch { /* gone */ }
        await p.child.status;
      }),
    );
    await db.drop();
  }
});
