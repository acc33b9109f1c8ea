/**
 * `deno run --allow-read bench/profile.ts DIR...`: the functions with the most self time in each
 * V8 CPU profile that `deno task bench --cpu-prof DIR` wrote (one per component), as Markdown
 * tables: which component (found from the scripts it ran), the share of its busy time (idle left
 * out) each function took itself, and where the function is. For the sampling heap profiles of
 * `--heap-prof DIR`, the same of the bytes each function allocated itself (freed since or not), and
 * each component's total.
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
/** A node of a sampling heap profile: the bytes allocated in its function itself. */
interface HeapNode {
  callFrame: CallFrame;
  selfSize: number;
  children: HeapNode[];
}
interface HeapProfile {
  head: HeapNode;
}

/** A heap profile's call tree as the flat list of its nodes. */
function heapNodes(profile: HeapProfile): HeapNode[] {
  const out: HeapNode[] = [];
  const stack = [profile.head];
  while (stack.length) {
    const node = stack.pop()!;
    out.push(node);
    stack.push(...node.children);
  }
  return out;
}

/** The component a profile is of, from the entry scripts its frames name. */
function componentOf(nodes: { callFrame: CallFrame }[]): string {
  const urls = new Set(nodes.map((n) => n.callFrame.url));
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

type Top = { name: string; where: string; pct: number }[];

/** The top `n` of (frame, amount) pairs summed by function, with their share of the total. */
function top(items: Iterable<[CallFrame, number]>, n: number): Top {
  const self = new Map<string, { name: string; where: string; amount: number }>();
  let total = 0;
  for (const [frame, amount] of items) {
    total += amount;
    const name = frame.functionName || "(anonymous)";
    const where = place(frame);
    const k = `${name}|${where}`;
    const entry = self.get(k) ?? { name, where, amount: 0 };
    entry.amount += amount;
    self.set(k, entry);
  }
  return [...self.values()].sort((a, b) => b.amount - a.amount).slice(0, n).map((e) => ({
    name: e.name,
    where: e.where,
    pct: (100 * e.amount) / total,
  }));
}

/** The top `n` functions by self time, with their share of the busy time. */
export function topSelf(profile: Profile, n = 10): Top {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  return top(
    (function* () {
      for (let i = 0; i < profile.samples.length; i++) {
        const frame = byId.get(profile.samples[i]!)?.callFrame;
        if (frame && frame.functionName !== "(idle)") {
          yield [frame, profile.timeDeltas[i] ?? 0] as [CallFrame, number];
        }
      }
    })(),
    n,
  );
}

/** The top `n` functions by the bytes they allocated themselves, with their share of all. */
export function topAllocations(profile: HeapProfile, n = 10): Top {
  return topOfNodes(heapNodes(profile), n);
}

function topOfNodes(nodes: HeapNode[], n: number): Top {
  return top(nodes.map((node) => [node.callFrame, node.selfSize]), n);
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
  // least a fifth as long as the busiest, or for heap profiles, allocating at least a fifth as
  // much), its ten functions with the most self time or bytes.
  for (const dir of Deno.args) {
    // The requests of a --heap-prof run (warm-ups included), for the bytes a request.
    const requests = await Deno.readTextFile(`${dir}/requests.json`).then(Number, () => 0);
    const found: { component: string; amount: number; top: Top; heap: boolean }[] = [];
    for await (const entry of Deno.readDir(dir)) {
      const heap = entry.name.endsWith(".heapprofile");
      if (!heap && !entry.name.endsWith(".cpuprofile")) continue;
      const parsed = JSON.parse(await Deno.readTextFile(`${dir}/${entry.name}`));
      const nodes = heap ? heapNodes(parsed) : undefined;
      const component = componentOf(nodes ?? parsed.nodes);
      if (component === "unknown" || component === "reference") continue;
      found.push(
        nodes
          ? {
            component,
            heap,
            amount: nodes.reduce((sum, node) => sum + node.selfSize, 0),
            top: topOfNodes(nodes, 10),
          }
          : { component, heap, amount: busyUs(parsed), top: topSelf(parsed) },
      );
    }
    for (const heap of [false, true]) {
      const of = found.filter((f) => f.heap === heap);
      if (!of.length) continue;
      const most = Math.max(...of.map((f) => f.amount));
      const order = ["gateway", "oauth-registry", "token-service", "core"];
      const columns = of.filter((f) => f.amount >= most / 5)
        .sort((a, b) => order.indexOf(a.component) - order.indexOf(b.component));
      const cell = (f: Top[number] | undefined) =>
        f ? `${f.pct.toFixed(1)} \`${f.name}\`${f.where ? ` ${f.where}` : ""}` : "";
      const header = (c: (typeof columns)[number]) =>
        heap
          ? `${c.component} (% of ${
            requests
              ? `${(c.amount / requests / 1024).toFixed(1)} KiB a request`
              : `${(c.amount / 2 ** 20).toFixed(0)} MiB`
          } allocated)`
          : `${c.component} (self %)`;
      const lines = [
        `${dir.replace(/\/$/, "").replace(/^.*\//, "").replaceAll("_", " ")}:`,
        "",
        `| # | ${columns.map(header).join(" | ")} |`,
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
}
