/**
 * `deno run --allow-read bench/profile.ts DIR...`: the functions with the most self time in each
 * V8 CPU profile that `deno task bench --cpu-prof DIR` wrote (one per component), as Markdown
 * tables: which component (found from the scripts it ran), the share of its busy time (idle left
 * out) each function took itself, and where the function is.
 *
 * Profile one operation at a time: `deno task bench --only "^get client$" --paths gateway
 * --rounds 1 --cpu-prof DIR`, then this on DIR.
 *
 * @module
 */

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** The component a profile is of, from the entry scripts its frames name. */
function componentOf(profile: Profile): string {
  const urls = new Set(profile.nodes.map((n) => n.callFrame.url));
  const has = (part: string) => [...urls].some((u) => u.includes(part));
  // The reference runs the services' repository code: told apart first.
  if (has("/bench/reference.ts")) return "reference";
  if (has("/gateway/main.ts") || has("/lib/testing/checked_gateway_main.ts")) return "gateway";
  if (has("/services/token/")) return "token-service";
  if (has("/services/oauth/")) return "oauth-registry";
  if (has("/services/core/")) return "core";
  return "unknown";
}

/** Where a frame is: a file of this repository, a package, or V8/Deno's own. */
function place(frame: CallFrame): string {
  const url = frame.url;
  if (url === "") return "";
  const pkg = /node_modules\/(?:\.deno\/[^/]+\/node_modules\/)?((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return `npm:${pkg[1]}`;
  const repo = /\/((?:lib|services|gateway|gen|bench|tools)\/.*)$/.exec(url);
  if (repo) return `${repo[1]}:${frame.lineNumber + 1}`;
  if (url.startsWith("ext:")) return url.replace(/^ext:/, "");
  return url.replace(/^.*\//, "");
}

/** The top `n` functions by self time, with their share of the busy time. */
export function topSelf(profile: Profile, n = 10): { name: string; where: string; pct: number }[] {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const self = new Map<string, { name: string; where: string; us: number }>();
  let busy = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    const node = byId.get(profile.samples[i]!);
    if (!node) continue;
    const us = profile.timeDeltas[i] ?? 0;
    const frame = node.callFrame;
    if (frame.functionName === "(idle)") continue;
    busy += us;
    const name = frame.functionName || "(anonymous)";
    const where = place(frame);
    const k = `${name}|${where}`;
    const entry = self.get(k) ?? { name, where, us: 0 };
    entry.us += us;
    self.set(k, entry);
  }
  return [...self.values()].sort((a, b) => b.us - a.us).slice(0, n).map((e) => ({
    name: e.name,
    where: e.where,
    pct: (100 * e.us) / busy,
  }));
}

/** The busy time of a profile (idle left out), in microseconds. */
function busyUs(profile: Profile): number {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  let busy = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    if (byId.get(profile.samples[i]!)?.callFrame.functionName !== "(idle)") {
      busy += profile.timeDeltas[i] ?? 0;
    }
  }
  return busy;
}

if (import.meta.main) {
  // One table per folder (one operation): a column for each component that did the work (busy at
  // least a fifth as long as the busiest), its ten functions with the most self time.
  for (const dir of Deno.args) {
    const found: { component: string; busy: number; top: ReturnType<typeof topSelf> }[] = [];
    for await (const entry of Deno.readDir(dir)) {
      if (!entry.name.endsWith(".cpuprofile")) continue;
      const profile = JSON.parse(await Deno.readTextFile(`${dir}/${entry.name}`)) as Profile;
      const component = componentOf(profile);
      if (component === "unknown" || component === "reference") continue;
      found.push({ component, busy: busyUs(profile), top: topSelf(profile) });
    }
    const busiest = Math.max(...found.map((f) => f.busy));
    const order = ["gateway", "oauth-registry", "token-service", "core"];
    const columns = found.filter((f) => f.busy >= busiest / 5)
      .sort((a, b) => order.indexOf(a.component) - order.indexOf(b.component));
    const cell = (f: ReturnType<typeof topSelf>[number] | undefined) =>
      f ? `${f.pct.toFixed(1)} \`${f.name}\`${f.where ? ` ${f.where}` : ""}` : "";
    const lines = [
      `${dir.replace(/\/$/, "").replace(/^.*\//, "").replaceAll("_", " ")}:`,
      "",
      `| # | ${columns.map((c) => `${c.component} (self %)`).join(" | ")} |`,
      `| ---: | ${columns.map(() => "---").join(" | ")} |`,
      ...Array.from(
        { length: 10 },
        (_, i) => `| ${i + 1} | ${columns.map((c) => cell(c.top[i])).join(" | ")} |`,
      ),
      "",
    ];
    // deno-lint-ignore no-console
    console.log(lines.join("\n"));
  }
}
