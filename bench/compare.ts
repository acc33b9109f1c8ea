/**
 * `deno task bench:compare <rev> [bench options]`: the benchmark of this checkout against another
 * commit's, in one run.
 *
 * Runs on one machine drift by more than the differences worth knowing: the same build measured a
 * client's PATCH at 880 and 653 req/s in runs minutes apart. So both builds run at once, each its
 * own stack and database, and their load runs take turns: every h2load run of one is followed by
 * the same run of the other, while the other's processes wait idle. Turns are kept by an `h2load`
 * put first on both benchmarks' PATH (bench/h2load.ts runs the `h2load` it finds), in the order
 * a b b a (neither always second), so a commit
 * from before this tool compares as well as a new one; both first wait until the other is seeded.
 * The operations that ./unique_load.ts sends (one-shot grants and patches) take turns through the
 * same keeper (its `--hold`), so they compare only against a commit whose benchmark has them too.
 *
 * Prints each round's req/s of both and the ratio (this checkout / rev), and per operation the
 * median ratio of the rounds: run enough rounds for the difference sought.
 *
 * @module
 */

import { ensureH2load } from "./h2load.ts";
import { usageError } from "../tools/cli.ts";

const usage = `Usage: deno task bench:compare <rev> [bench options]

Runs the benchmark of this checkout and of <rev> (checked out into a temporary git worktree) at
the same time, their h2load runs taking turns, and prints each round's req/s of both, the ratio
(this checkout / <rev>) and its median per operation. Bench options are passed on (--only,
--rounds, --seconds, --paths: gateway unless given; see deno task bench --help). Operations sent
once each (one-shot grants and patches) take turns too, where <rev>'s benchmark has them.

Environment:
  DATABASE_URL             the Postgres server both make their throwaway databases in (required)`;

const args = Deno.args[0] === "--" ? Deno.args.slice(1) : [...Deno.args];
if (args.includes("-h") || args.includes("--help")) {
  // deno-lint-ignore no-console
  console.log(usage);
  Deno.exit(0);
}
const rev = args.shift();
if (rev === undefined || rev.startsWith("-")) usageError("bench:compare", usage, "give a <rev>");
const benchArgs = args.includes("--paths") ? args : [...args, "--paths", "gateway"];

// deno-lint-ignore no-console
const say = (text: string) => console.error(`bench:compare: ${text}`);

async function run(command: string, cmdArgs: string[], cwd?: string): Promise<string> {
  const out = await new Deno.Command(command, {
    args: cmdArgs,
    ...(cwd === undefined ? {} : { cwd }),
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    throw new Error(`${command} ${cmdArgs.join(" ")}: ${new TextDecoder().decode(out.stderr)}`);
  }
  return text;
}

const here = new URL("../", import.meta.url).pathname;
const commit = (await run("git", ["rev-parse", "--verify", `${rev}^{commit}`], here)).trim();
await ensureH2load();
const h2load = (await run("bash", ["-c", "command -v h2load"])).trim();

/**
 * The turn keeper: an `h2load` that runs the real one when it is its side's turn, in the order
 * a b b a, a b b a... (`runs` in BENCH_TURN_DIR counts the runs so far), so that neither side
 * always runs second: with both sides the same build, turns a b a b gave the second 0.78 and 0.83
 * of the first in a short run (--quick); a b b a, in 3 rounds of 5 s, ratios from 0.91 to 1.16
 * (medians of 0.99, 1.05 and 1.13), which is the noise a ratio here has. A side first marks itself ready and waits for the other's
 * mark, so neither measures while the other seeds; one that waits 10 minutes goes on alone (the
 * other has ended, or runs other operations).
 */
const keeper = `#!/bin/bash
real=${JSON.stringify(h2load)}
side="$BENCH_TURN_SIDE"; dir="$BENCH_TURN_DIR"
if [ -z "$side" ] || [ -z "$dir" ]; then exec "$real" "$@"; fi
other=$([ "$side" = a ] && echo b || echo a)
order=(a b b a)
touch "$dir/ready-$side"
for _ in $(seq 1 12000); do
  runs=$(cat "$dir/runs" 2>/dev/null || echo 0)
  if [ -e "$dir/ready-$other" ] && [ "\${order[runs % 4]}" = "$side" ]; then break; fi
  sleep 0.05
done
if [ "$1" = --hold ]; then
  # bench/unique_load.ts's turn: held until it closes our input.
  echo held; cat >/dev/null; status=0
else
  "$real" "$@"; status=$?
fi
echo $(( $(cat "$dir/runs" 2>/dev/null || echo 0) + 1 )) > "$dir/runs"
exit $status
`;

const work = await Deno.makeTempDir({ prefix: "bench-compare-" });
const tree = `${work}/tree`;
const bin = `${work}/bin`;
const turns = `${work}/turns`;
await Deno.mkdir(bin);
await Deno.mkdir(turns);
await Deno.writeTextFile(`${bin}/h2load`, keeper, { mode: 0o755 });
await Deno.writeTextFile(`${turns}/runs`, "0\n");

/** Round results: operation and path, then round, then side. */
const results = new Map<string, Map<number, { a?: number; b?: number }>>();
const roundLine = /round (\d+) (.+) via (\w+): (\d+) req\/s/;

async function bench(side: "a" | "b", cwd: string, label: string): Promise<void> {
  const child = new Deno.Command("deno", {
    args: ["task", "bench", ...benchArgs],
    cwd,
    env: {
      BENCH_TURN_SIDE: side,
      BENCH_TURN_DIR: turns,
      PATH: `${bin}:${Deno.env.get("PATH") ?? ""}`,
    },
    stdout: "null",
    stderr: "piped",
  }).spawn();
  let rest = "";
  for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) {
    rest += chunk;
    const lines = rest.split("\n");
    rest = lines.pop()!;
    for (const line of lines) {
      const match = roundLine.exec(line);
      if (!match) continue;
      say(`${label}: ${line.replace(/^bench: /, "")}`);
      const key = `${match[2]} via ${match[3]}`;
      let rounds = results.get(key);
      if (!rounds) results.set(key, rounds = new Map());
      const round = Number(match[1]);
      rounds.set(round, { ...rounds.get(round), [side]: Number(match[4]) });
    }
  }
  const status = await child.status;
  if (!status.success) throw new Error(`the bench of ${label} failed (exit ${status.code})`);
}

try {
  say(`checking out ${commit.slice(0, 12)} into ${tree}`);
  await run("git", ["worktree", "add", "--detach", tree, commit], here);
  // The peer, when this checkout has installed it, is installed once, not once a tree.
  const installed = await Deno.stat(`${here}.bench-peer`).then(() => true, () => false);
  if (installed) await Deno.symlink(`${here}.bench-peer`, `${tree}/.bench-peer`);
  await run("deno", ["install", "--quiet"], tree);
  say("running both benchmarks, their load runs taking turns");
  await Promise.all([bench("a", tree, rev), bench("b", here, "this checkout")]);
} finally {
  await run("git", ["worktree", "remove", "--force", tree], here).catch(() => {});
  await Deno.remove(work, { recursive: true }).catch(() => {});
}

const median = (xs: number[]) => {
  const s = [...xs].sort((x, y) => x - y);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};
const lines = [
  `| operation | ${rev} req/s by round | this checkout req/s | ratios | median ratio |`,
  "| --- | --- | --- | --- | ---: |",
];
for (const [key, rounds] of results) {
  const pairs = [...rounds.entries()].sort(([x], [y]) => x - y).map(([, r]) => r)
    .filter((r): r is { a: number; b: number } => r.a !== undefined && r.b !== undefined);
  if (pairs.length === 0) continue;
  const ratios = pairs.map((r) => r.b / r.a);
  lines.push(
    `| ${key} | ${pairs.map((r) => r.a).join(", ")} | ${pairs.map((r) => r.b).join(", ")} | ${
      ratios.map((x) => x.toFixed(2)).join(", ")
    } | ${median(ratios).toFixed(2)} |`,
  );
}
// deno-lint-ignore no-console
console.log(lines.join("\n"));
