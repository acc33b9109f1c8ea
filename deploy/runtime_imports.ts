/**
 * Image build step: rewrites deno.json so that its import map keeps only the packages the given
 * entry points import, and drops its tasks. The image then installs the runtime dependencies and
 * none of the development tools (buf, kustomize, testcontainers, PGlite...). Versions stay those
 * of deno.lock. `@types/node` stays too: nothing imports it, but `deno check` reads the types of
 * the `node:` built-ins from it (with `"nodeModulesDir": "manual"` it must be installed).
 *
 *   deno run -A deploy/runtime_imports.ts services/oauth/main.ts services/core/main.ts \
 *     services/token/main.ts gateway/main.ts
 *
 * @module
 */

const config = JSON.parse(await Deno.readTextFile("deno.json"));
const used = new Set<string>();
for (const entry of Deno.args) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", entry],
    stdout: "piped",
    stderr: "inherit",
  }).output();
  if (!out.success) Deno.exit(1);
  const info = JSON.parse(new TextDecoder().decode(out.stdout));
  for (const module of info.modules) {
    for (const dep of module.dependencies ?? []) used.add(dep.specifier);
  }
}
/** Kept whether the entry points import them or not: type declarations `deno check` needs. */
const typesOnly = new Set(["@types/node"]);
config.imports = Object.fromEntries(
  Object.entries(config.imports).filter(([key]) =>
    typesOnly.has(key) || [...used].some((s) => s === key || s.startsWith(`${key}/`))
  ),
);
delete config.tasks;
await Deno.writeTextFile("deno.json", JSON.stringify(config, null, 2) + "\n");
// deno-lint-ignore no-console
console.log(`runtime imports: ${Object.keys(config.imports).join(", ")}`);
