/**
 * The architecture's boundaries, checked on the source: each service touches only its own
 * Postgres schema and imports no other service; the gateway reaches services only through RPC
 * (it imports generated code and lib/, never services/, and its only database statements read the
 * catalog: it listens to the services' notifications, for its caches, and reads no table); lib/'s
 * folders are layers, each imported from elsewhere only through its mod.ts and only by the layers
 * above it; only a `main.ts` or `*_main.ts` (or a tool) exits the process.
 */

import assert from "node:assert/strict";

const root = new URL("../", import.meta.url);

async function sources(dir: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const walk = async (url: URL, rel: string) => {
    for await (const entry of Deno.readDir(url)) {
      const path = `${rel}/${entry.name}`;
      if (entry.isDirectory) await walk(new URL(`${entry.name}/`, url), path);
      else if (/\.(ts|sql)$/.test(entry.name)) {
        out.set(path, await Deno.readTextFile(new URL(entry.name, url)));
      }
    }
  };
  await walk(new URL(`${dir}/`, root), dir);
  return out;
}

const services = { oauth: "oauth", core: "core", token: "token" } as const;

Deno.test("a service's code names only its own schema and imports no other service", async () => {
  for (const [service, schema] of Object.entries(services)) {
    const files = await sources(`services/${service}`);
    assert.ok(files.size > 0);
    for (const [path, text] of files) {
      for (const [other, otherSchema] of Object.entries(services)) {
        if (other === service) continue;
        assert.ok(
          !new RegExp(`\\b${otherSchema}\\.[a-z_]+`).test(text),
          `${path} names ${otherSchema}.*`,
        );
        assert.ok(
          !text.includes(`services/${other}/`) && !text.includes(`../${other}/`),
          `${path} imports ${other}`,
        );
      }
    }
    assert.ok(
      [...files.values()].some((t) => t.includes(`${schema}.`)),
      `${service} uses ${schema}`,
    );
  }
});

Deno.test("the gateway imports no service code", async () => {
  for (const [path, text] of await sources("gateway")) {
    assert.ok(!/from "\.\.\/services\//.test(text), `${path} imports a service`);
  }
});

/** What each lib/ folder may import of the others (test files may import any; testing any). */
const layers: Record<string, string[]> = {
  platform: [],
  transport: ["platform"],
  rpc: ["platform", "transport"],
  resource: ["platform"],
  policy: ["platform", "rpc"],
  db: ["platform", "policy"],
  audit: ["platform", "policy", "resource", "db"],
  service: ["platform", "transport", "rpc", "policy", "db"],
  testing: ["platform", "transport", "rpc", "policy", "db", "resource", "service", "audit"],
};

const importPattern = /(?:from|import)\s*\(?\s*"(\.{1,2}\/[^"]+)"/g;

/** Every relative import of every TypeScript file outside gen/, resolved from the root. */
async function imports(): Promise<{ file: string; target: string }[]> {
  const out: { file: string; target: string }[] = [];
  for (const dir of ["lib", "services", "gateway", "tools", "tests", "bench"]) {
    for (const [file, text] of await sources(dir)) {
      if (!file.endsWith(".ts")) continue;
      for (const match of text.matchAll(importPattern)) {
        const url = new URL(match[1]!, new URL(file, root));
        out.push({ file, target: url.pathname.slice(root.pathname.length) });
      }
    }
  }
  return out;
}

Deno.test("lib/'s folders are layers, imported from outside only through their mod.ts", async () => {
  const found = await imports();
  assert.ok(found.length > 100, `only ${found.length} imports found`);
  const problems: string[] = [];
  for (const folder of Object.keys(layers)) {
    const entries = [...Deno.readDirSync(new URL(`lib/${folder}/`, root))].map((e) => e.name);
    if (!entries.includes("mod.ts")) problems.push(`lib/${folder} has no mod.ts`);
  }
  for (const entry of Deno.readDirSync(new URL("lib/", root))) {
    if (!entry.isDirectory || !(entry.name in layers)) {
      problems.push(
        `lib/${entry.name} is not a layer (folders: ${Object.keys(layers).join(", ")})`,
      );
    }
  }
  for (const { file, target } of found) {
    const to = /^lib\/([a-z]+)\/(.+)$/.exec(target);
    if (!to) continue;
    const from = /^lib\/([a-z]+)\//.exec(file)?.[1];
    if (from === to[1]) continue;
    if (to[2] !== "mod.ts") problems.push(`${file} imports ${target}, not lib/${to[1]}/mod.ts`);
    if (from && !file.endsWith("_test.ts") && !layers[from]!.includes(to[1]!)) {
      problems.push(`lib/${from} may not import lib/${to[1]} (${file})`);
    }
  }
  assert.deepEqual(problems, []);
});

/** The database modules (lib/db, the postgres driver) in an entry point's module graph. */
async function databaseModules(entry: string): Promise<string[]> {
  const info = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", entry],
    cwd: root,
    stdout: "piped",
    stderr: "inherit",
  }).output();
  assert.ok(info.success, `deno info ${entry}`);
  const graph = JSON.parse(new TextDecoder().decode(info.stdout)) as {
    modules: { specifier: string }[];
  };
  assert.ok(graph.modules.length > 10, `the graph of ${entry} was read`);
  return graph.modules.map((m) => m.specifier).filter((s) => /\/lib\/db\/|postgres/.test(s));
}

Deno.test("the gateway reads no table: its only queries are of the catalog", async () => {
  // It has the driver (its caches listen to the services' notifications: gateway/main.ts) ...
  assert.ok((await databaseModules("gateway/main.ts")).length > 0);
  // ... and every statement it sends reads pg_catalog's triggers, none a schema's table; the
  // heartbeats of lib/db/change_feed.ts are a notification.
  const statements: string[] = [];
  for (const [path, text] of await sources("gateway")) {
    if (path.endsWith("_test.ts")) continue;
    for (const match of text.matchAll(/\bsql(?:<[^`]*>)?`([^`]*)`/g)) {
      statements.push(`${path}: ${match[1]!.replace(/\s+/g, " ").trim()}`);
    }
  }
  assert.ok(statements.length > 0, "the check sees the gateway's statements");
  for (const statement of statements) {
    assert.match(statement, /\bfrom pg_trigger\b/, statement);
    assert.doesNotMatch(statement, /\b(oauth|core|token)\.[a-z_]+/, statement);
  }
});

Deno.test("only a main.ts, *_main.ts (or a tool) exits the process", async () => {
  const exits: string[] = [];
  for (const dir of ["lib", "services", "gateway"]) {
    for (const [file, text] of await sources(dir)) {
      if (/(\/|_)main\.ts$/.test(file) || file.endsWith("_test.ts")) continue;
      if (/Deno\.exit\(/.test(text)) exits.push(file);
    }
  }
  assert.deepEqual(exits, []);
});
