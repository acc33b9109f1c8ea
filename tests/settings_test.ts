/**
 * Every setting is declared once (lib/platform/settings.ts), and what is said of it cannot drift
 * from what the code does: the README's configuration table is the one the declarations give
 * (`deno task docs` writes it), each component's schema reads exactly the settings declared for
 * it with the declared defaults, `deno task start` reads exactly its own, and no runtime code
 * reads a variable that is not declared.
 */

import assert from "node:assert/strict";
import * as v from "valibot";
import { gatewayIssuer, gatewaySettings } from "../gateway/main.ts";
import {
  ConfigError,
  isDeclared,
  readConfig,
  type Reader,
  type Setting,
  settings,
  settingsTable,
  startEnvironmentHelp,
  startSetting,
} from "../lib/platform/mod.ts";
import { serviceSettings } from "../lib/service/mod.ts";
import { coreService } from "../services/core/main.ts";
import { oauthRegistryService } from "../services/oauth/main.ts";
import { tokenService } from "../services/token/main.ts";
import { secretNames } from "../tools/dev_secrets.ts";
import { readmeTable, withCurrentTable } from "../tools/docs.ts";
import { installed, moduleGraph, npmPackagesOf } from "../tools/install_notice.ts";

const root = new URL("../", import.meta.url);
const declared: Record<string, Setting> = settings;

/** The declared settings `reader` reads, sorted. */
const declaredFor = (reader: Reader) =>
  Object.keys(declared).filter((name) => declared[name]!.usedBy.includes(reader)).sort();

Deno.test("README's configuration table is what lib/platform/settings.ts gives (deno task docs)", async () => {
  const readme = await Deno.readTextFile(new URL("README.md", root));
  assert.equal(
    readmeTable(readme),
    settingsTable(),
    "README.md's configuration table is not current: run deno task docs",
  );
  // Writing it changes nothing else.
  assert.equal(withCurrentTable(readme), readme);
});

/** Each component's settings schema, by its name. */
const schemas: Record<string, v.ObjectEntries> = {
  "oauth-registry": serviceSettings(oauthRegistryService),
  core: serviceSettings(coreService),
  "token-service": serviceSettings(tokenService),
  gateway: gatewaySettings,
};

Deno.test("each component's schema reads exactly the settings declared for it, with their defaults", () => {
  for (const [component, entries] of Object.entries(schemas)) {
    assert.deepEqual(
      Object.keys(entries).sort(),
      declaredFor(component as Reader),
      `${component}: the settings its schema reads are the ones declared "usedBy" it`,
    );
    for (const [name, schema] of Object.entries(entries)) {
      const fallback = v.getDefault(schema as v.GenericSchema);
      if (fallback === undefined) continue;
      assert.ok(
        declared[name]!.default.includes(`\`${fallback}\``),
        `${component}: ${name}'s declared default "${
          declared[name]!.default
        }" says \`${fallback}\``,
      );
    }
  }
});

Deno.test("a key or secret shorter than 32 characters is a setting's problem, said before anything starts", () => {
  const keys = ["AUTH_JWT_SECRET", "CLIENT_SECRET_HMAC_KEY", "TOKEN_KEY_ENCRYPTION_KEY"];
  const env = {
    DATABASE_URL: "postgres://127.0.0.1/postgres",
    ...Object.fromEntries(keys.map((name) => [name, "k".repeat(32)])),
  };
  let checked = 0;
  for (const [component, entries] of Object.entries(schemas)) {
    for (const key of keys.filter((k) => k in entries)) {
      assert.doesNotThrow(() => readConfig(component, v.object(entries), env));
      for (const short of ["k".repeat(31), "short"]) {
        assert.throws(
          () => readConfig(component, v.object(entries), { ...env, [key]: short }),
          (error: Error) =>
            error instanceof ConfigError &&
            error.message === `${component}: setting ${key}: must be at least 32 characters`,
          `${component}: ${key} of ${short.length} characters`,
        );
      }
      checked++;
    }
  }
  // AUTH_JWT_SECRET in all four, the other two in their own service.
  assert.equal(checked, 6);

  // The previous client-secret keys: a list, each as long, spaces around a comma not counted.
  const registry = v.object(schemas["oauth-registry"]!);
  const previous = (list: string | undefined) =>
    readConfig("oauth-registry", registry, { ...env, CLIENT_SECRET_HMAC_PREVIOUS_KEYS: list })
      .CLIENT_SECRET_HMAC_PREVIOUS_KEYS;
  assert.deepEqual(previous(undefined), []);
  assert.deepEqual(previous(""), []);
  assert.deepEqual(previous(`${"a".repeat(32)} , ${"b".repeat(40)},`), [
    "a".repeat(32),
    "b".repeat(40),
  ]);
  assert.throws(
    () => previous(`${"a".repeat(32)},short`),
    (error: Error) =>
      error instanceof ConfigError &&
      error.message ===
        "oauth-registry: setting CLIENT_SECRET_HMAC_PREVIOUS_KEYS.1: must be at least 32 characters",
  );
});

Deno.test("ISSUER_URL is an origin: a path, query, fragment or credentials is refused before anything starts", () => {
  const env = {
    DATABASE_URL: "postgres://127.0.0.1/postgres",
    AUTH_JWT_SECRET: "k".repeat(32),
    TOKEN_KEY_ENCRYPTION_KEY: "k".repeat(32),
  };
  for (const component of ["token-service", "gateway"]) {
    const schema = v.object(schemas[component]!);
    const issuer = (value: string) => readConfig(component, schema, { ...env, ISSUER_URL: value });
    for (
      const origin of ["https://as.example.com", "https://as.example.com/", "http://[::1]:8080"]
    ) {
      assert.equal(issuer(origin).ISSUER_URL, origin, `${component}: ${origin}`);
    }
    // RFC 8414 2: no query or fragment; and the gateway serves the metadata and the endpoints at
    // its origin's root only, so a path would name a metadata address nothing serves (RFC 8414 3).
    for (
      const bad of [
        "https://as.example.com/auth",
        "https://as.example.com/auth/",
        "https://as.example.com/?tenant=a",
        "https://as.example.com#x",
        "https://user:pass@as.example.com",
        "ftp://as.example.com",
      ]
    ) {
      assert.throws(
        () => issuer(bad),
        (error: Error) =>
          error instanceof ConfigError &&
          error.message.startsWith(`${component}: setting ISSUER_URL: must be`),
        `${component}: ${bad}`,
      );
    }
  }
});

Deno.test("the gateway's default issuer is the token service's only on port 8080; on another it warns", () => {
  const env = {
    DATABASE_URL: "postgres://127.0.0.1/postgres",
    AUTH_JWT_SECRET: "k".repeat(32),
    TOKEN_KEY_ENCRYPTION_KEY: "k".repeat(32),
  };
  const token = readConfig("token-service", v.object(schemas["token-service"]!), env);
  const gateway = (extra: Record<string, string>) =>
    gatewayIssuer(readConfig("gateway", v.object(gatewaySettings), { ...env, ...extra }));
  assert.deepEqual(gateway({}), { issuer: token.ISSUER_URL, unmatched: false });
  assert.deepEqual(gateway({ GATEWAY_PORT: "9090" }), {
    issuer: "http://127.0.0.1:9090",
    unmatched: true,
  });
  assert.deepEqual(gateway({ GATEWAY_PORT: "9090", ISSUER_URL: "https://as.example.com/" }), {
    issuer: "https://as.example.com",
    unmatched: false,
  });
});

/** The names of settings `pattern`'s first group finds in `text`. */
const names = (text: string, pattern: RegExp) => [...text.matchAll(pattern)].map((m) => m[1]!);

Deno.test("deno task start reads exactly the settings declared for it, and --help lists each", async () => {
  const start = await Deno.readTextFile(new URL("tools/start.ts", root));
  const dataDir = await Deno.readTextFile(new URL("tools/dev_secrets.ts", root));
  const read = new Set([
    ...names(start, /\b(?:env|startSetting)\("([A-Z][A-Z0-9_]*)"\)/g),
    ...names(start, /\bcommon\.([A-Z][A-Z0-9_]*)\b/g),
    ...names(start + dataDir, /Deno\.env\.get\("([A-Z][A-Z0-9_]*)"\)/g),
    // devSecrets() reads each of these with Deno.env.get(name).
    ...secretNames,
  ]);
  // INIT_CWD is deno task's (the folder it was called in), not a setting.
  read.delete("INIT_CWD");
  assert.deepEqual([...read].sort(), declaredFor("start"));
  const help = startEnvironmentHelp().split("\n");
  for (const name of declaredFor("start")) {
    assert.ok(help.some((line) => line.startsWith(`  ${name} `)), `--help lists ${name}`);
  }
  for (const line of help) assert.ok(line.length <= 100, `a --help line of 100 at most: ${line}`);
  for (const [name, setting] of Object.entries(declared)) {
    if (setting.startDefault === undefined) continue;
    assert.ok(setting.usedBy.includes("start"), `${name} has a start default: start reads it`);
    assert.ok(setting.default.includes(`\`${setting.startDefault}\``), `${name}'s default`);
  }
  // Unset or empty: the declared default.
  assert.equal(startSetting("START_HOST", {}), "127.0.0.1");
  assert.equal(startSetting("TOKEN_HTTP_PORT", { TOKEN_HTTP_PORT: "" }), "8083");
  assert.equal(startSetting("TOKEN_HTTP_PORT", { TOKEN_HTTP_PORT: "9000" }), "9000");
  assert.equal(startSetting("DATABASE_URL", { DATABASE_URL: "" }), undefined);
});

/**
 * The runtime code: the components' (services/, gateway/, lib/ but its test helpers), and the
 * modules `deno task start` and `deno task token` run, with each process start spawns (its
 * `entry:`s); the other tools (tests, benchmarks, code generation) are not.
 */
async function runtimeFiles(): Promise<URL[]> {
  const files: URL[] = [];
  const walk = async (dir: URL) => {
    for await (const entry of Deno.readDir(dir)) {
      const url = new URL(entry.name + (entry.isDirectory ? "/" : ""), dir);
      const path = url.pathname.slice(root.pathname.length);
      if (entry.isDirectory) {
        if (path !== "lib/testing/") await walk(url);
      } else if (/\.(ts|js|mjs)$/.test(path) && !/_test\.ts$/.test(path)) files.push(url);
    }
  };
  for (const dir of ["services/", "gateway/", "lib/"]) await walk(new URL(dir, root));
  const imports = JSON.parse(await Deno.readTextFile(new URL("deno.json", root))).imports;
  const start = await Deno.readTextFile(new URL("tools/start.ts", root));
  const spawned = names(start, /\bentry: "([^"]+)"/g);
  assert.ok(spawned.length >= 4, `start's entries: ${spawned}`);
  for (const entry of ["tools/start.ts", "tools/token.ts", ...spawned]) {
    for (const file of (await moduleGraph(new URL(entry, root), imports)).files) {
      if (file.pathname.startsWith(`${root.pathname}tools/`)) files.push(file);
    }
  }
  return [...new Map(files.map((f) => [f.href, f])).values()];
}

/** Variables read that are no setting of the stack, and why. */
const notSettings: Record<string, string> = {
  INIT_CWD: "set by deno task: the folder it was called in (tools/dev_secrets.ts)",
};

/** Reads of a variable whose name is not written there, and what they read instead. */
const dynamicReads: Record<string, string> = {
  "tools/dev_secrets.ts": "secretNames, checked above",
};

Deno.test("every variable the runtime code reads is declared in lib/platform/settings.ts", async () => {
  const found = new Set<string>();
  for (const file of await runtimeFiles()) {
    const path = file.pathname.slice(root.pathname.length);
    const text = await Deno.readTextFile(file);
    const reads = [
      ...names(text, /Deno\.env\.get\(\s*["'`]([^"'`]+)["'`]\s*\)/g),
      ...names(text, /process\.env\.([A-Za-z_]\w*)/g),
      ...names(text, /(?:Deno\.env\.get\(|process\.env\[)\s*["'`]([^"'`]+)["'`]/g),
      ...names(text, /\b(?:env|config|common)\.([A-Z][A-Z0-9_]*)\b/g),
      ...names(text, /\b(?:env|config|common)\[["'`]([A-Z][A-Z0-9_]*)["'`]\]/g),
      // tools/start.ts's reads: startSetting(), and env() over it.
      ...names(text, /\b(?:env|startSetting)\(\s*"([A-Z][A-Z0-9_]*)"/g),
    ];
    for (const name of reads) {
      found.add(name);
      if (name in notSettings) continue;
      assert.ok(isDeclared(name), `${path} reads ${name}: declare it in lib/platform/settings.ts`);
    }
    if (/Deno\.env\.get\(\s*[^"'`\s]/.test(text) || /process\.env\[\s*[^"'`\s]/.test(text)) {
      assert.ok(path in dynamicReads, `${path} reads a variable by a name it computes`);
    }
  }
  // The search finds what it is meant to (a pattern that matches nothing would pass).
  for (
    const name of ["DATABASE_URL", "START_HOST", "AUTH_ISSUER", "CLIENT_SECRET_HMAC_KEY", "HOST"]
  ) {
    assert.ok(found.has(name), `the runtime code is seen reading ${name}`);
  }
});

Deno.test("the install notice knows start's npm packages, and says nothing once they are installed", async () => {
  const imports = JSON.parse(await Deno.readTextFile(new URL("deno.json", root))).imports;
  const packages = await npmPackagesOf(new URL("tools/start.ts", root), imports);
  for (const name of ["@electric-sql/pglite", "postgres", "valibot", "@connectrpc/connect"]) {
    assert.ok(
      [...packages].some((p) => p === `${name}@${imports[name].replace(/^npm:.*@/, "")}`),
      `${name} is one of ${[...packages]}`,
    );
  }
  // deno task test installed every package of deno.lock.
  assert.ok(await installed(packages));
  assert.ok(!(await installed(["no-such-package@0.0.0"])));
  const notice = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-read", "tools/install_notice.ts", "start", "tools/start.ts"],
    cwd: root,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(notice.code, 0);
  assert.equal(new TextDecoder().decode(notice.stderr), "");
});
