/**
 * `deno task start` installs its npm packages before it runs (deno.json), silently, and the first
 * time that takes about 30 s. This runs before the install and says so, when it will take that
 * long: when a package the module graph of the entry point imports is not in node_modules yet.
 * Installed, it prints nothing (a warm start is quiet).
 *
 *     deno run --allow-read tools/install_notice.ts <task name> <entry point>
 *
 * The graph is walked from the entry point through its local imports (static and literal dynamic
 * ones); each bare or `npm:` specifier is mapped through deno.json's imports to a package and
 * version, looked for as node_modules/.deno/<name>@<version> (the layout of nodeModulesDir
 * "manual"). Nothing is imported or resolved: this needs no package itself.
 *
 * @module
 */

const root = new URL("../", import.meta.url);

const importPattern =
  /(?:\bimport|\bexport)\s*(?:[\w*{}\s,$]+\s+from\s*)?["']([^"']+)["']|\bimport\s*\(\s*["']([^"']+)["']\s*\)|\bnew URL\(\s*["'](\.[^"']+)["'],\s*import\.meta\.url\s*\)/g;

/** The npm packages (`name@version`) the module graph of `entry` imports directly. */
export async function npmPackagesOf(
  entry: URL,
  imports: Record<string, string>,
): Promise<Set<string>> {
  return (await moduleGraph(entry, imports)).packages;
}

/**
 * The local modules of the graph of `entry` (a module run as a child process, named with
 * `new URL("./x.ts", import.meta.url)`, included), and the npm packages they import directly.
 */
export async function moduleGraph(
  entry: URL,
  imports: Record<string, string>,
): Promise<{ files: URL[]; packages: Set<string> }> {
  const files: URL[] = [];
  const packages = new Set<string>();
  const seen = new Set<string>();
  const queue = [entry];
  while (queue.length > 0) {
    const file = queue.pop()!;
    if (seen.has(file.href)) continue;
    seen.add(file.href);
    let text: string;
    try {
      text = await Deno.readTextFile(file);
    } catch {
      continue; // a file it cannot read is deno's to report
    }
    files.push(file);
    for (const match of text.matchAll(importPattern)) {
      const specifier = (match[1] ?? match[2] ?? match[3])!;
      if (specifier.startsWith(".") || specifier.startsWith("/")) {
        const target = new URL(specifier, file);
        if (/\.(ts|tsx|js|mjs|mts)$/.test(target.pathname)) queue.push(target);
        continue;
      }
      const npm = npmPackage(specifier, imports);
      if (npm) packages.add(npm);
    }
  }
  return { files, packages };
}

/** `name@version` of an `npm:` specifier, or of a bare one deno.json maps to one. */
function npmPackage(specifier: string, imports: Record<string, string>): string | undefined {
  let target = specifier;
  if (!specifier.startsWith("npm:")) {
    const key = Object.keys(imports)
      .filter((k) => specifier === k || specifier.startsWith(k.endsWith("/") ? k : `${k}/`))
      .sort((a, b) => b.length - a.length)[0];
    if (key === undefined) return undefined;
    target = imports[key]!;
  }
  const match = /^npm:\/?((?:@[^/]+\/)?[^@/]+)@([^/]+)/.exec(target);
  return match ? `${match[1]}@${match[2]}` : undefined;
}

/** Whether every package of `packages` is in node_modules. */
export async function installed(packages: Iterable<string>): Promise<boolean> {
  for (const p of packages) {
    const dir = new URL(`node_modules/.deno/${p.replace("/", "+")}/`, root);
    if (!(await Deno.stat(dir).then((s) => s.isDirectory, () => false))) return false;
  }
  return true;
}

if (import.meta.main) {
  const [task, entry] = Deno.args;
  if (!task || !entry) {
    // deno-lint-ignore no-console
    console.error("usage: deno run --allow-read tools/install_notice.ts <task name> <entry point>");
    Deno.exit(2);
  }
  const config = JSON.parse(await Deno.readTextFile(new URL("deno.json", root)));
  const packages = await npmPackagesOf(new URL(entry, root), config.imports ?? {});
  if (!(await installed(packages))) {
    // deno-lint-ignore no-console
    console.error(`${task}: installing the stack's npm packages (first run only, ~30 s)...`);
  }
}
