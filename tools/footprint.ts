/**
 * `deno task footprint`: what a new user's machine takes, measured in a fresh copy of the project
 * (HEAD by default, `--worktree` for the working tree as it is, uncommitted changes included):
 *
 * 1. the packages and megabytes that `deno task start`'s install puts into node_modules (the
 *    `deno install` step of deno.json's `tasks.start`, into an empty node_modules);
 * 2. the same after `deno task test`'s install (the `deno install` step of `tasks.test`), which
 *    installs everything;
 * 3. the embedded stack's resident memory at rest: `deno task start` without DATABASE_URL (PGlite in
 *    its one process), on free ports and a data folder of its own, read from /proc `--settle`
 *    seconds after it printed "Stack is up", then stopped.
 *
 * It prints one line per figure; README.md's "Two commands" and the comment at the top of
 * tools/start.ts quote them. Packages are the folders of node_modules/.deno (one per package
 * version, as `deno install` lays them out); megabytes are `du -sm node_modules` (MiB of disk).
 * The npm packages come from Deno's cache where they are (else from the registry): the figures
 * are what lands in node_modules, not what is downloaded. The stack's memory is that of the
 * tools/start.ts process (all of the stack, PGlite included), and with the `deno task` process
 * that runs it. The task runs with --allow-all: Deno lets nothing less read /proc.
 *
 * @module
 */

import { parseCommandLine, positiveNumber, usageError } from "./cli.ts";

const usage = `Usage: deno task footprint [--worktree] [--settle S] [--largest N] [--keep]

Measures, in a fresh copy of the project in a temporary folder: the packages and MB that
\`deno task start\` installs, those that \`deno task test\` installs (everything), and the resident
memory of the embedded stack (\`deno task start\` without DATABASE_URL) at rest. One line each.

Options:
  --worktree                 copy the working tree (tracked and untracked files that git does not
                             ignore, as they are now; not node_modules or .data) instead of HEAD
  --settle S                 seconds to wait after "Stack is up" before reading the memory (5)
  --largest N                also list the N largest packages of the start install (0)
  --keep                     keep the temporary folder (its path is printed)
  -h, --help                 this text

Environment:
  DATABASE_URL               ignored: the stack measured is always the embedded one`;

const values = parseCommandLine("footprint", usage, {
  worktree: { type: "boolean" },
  settle: { type: "string", default: "5" },
  largest: { type: "string", default: "0" },
  keep: { type: "boolean" },
});
const settleSeconds = positiveNumber("footprint", usage, "settle", values.settle!);
const largest = values.largest === "0"
  ? 0
  : positiveNumber("footprint", usage, "largest", values.largest!, true);

const root = new URL("../", import.meta.url).pathname;

// deno-lint-ignore no-console
const say = (line: string) => console.log(line);
/** A measurement that could not be made: printed, after the copy is removed and the stack stopped. */
class Failure extends Error {}
const fail = (message: string): never => {
  throw new Failure(message);
};

/** Runs a command to its end; its output, or a failure naming it. */
async function run(
  cmd: string,
  args: string[],
  options: { cwd?: string; env?: Record<string, string> } = {},
): Promise<string> {
  const out = await new Deno.Command(cmd, {
    args,
    cwd: options.cwd ?? root,
    env: { NO_COLOR: "1", ...options.env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    fail(`${cmd} ${args.join(" ")} failed:\n${new TextDecoder().decode(out.stderr)}${text}`);
  }
  return text;
}

/** The copy to measure: HEAD as `git archive` gives it, or the working tree's files. */
async function copyProject(into: string): Promise<string> {
  if (!values.worktree) {
    const head = (await run("git", ["rev-parse", "--short", "HEAD"])).trim();
    const tar = `${into}.tar`;
    await run("git", ["archive", "--format=tar", `--output=${tar}`, "HEAD"]);
    await run("tar", ["-xf", tar, "-C", into]);
    await Deno.remove(tar);
    return `HEAD (${head})`;
  }
  const listed = await run("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"]);
  let files = 0;
  for (const path of new Set(listed.split("\0").filter((p) => p !== ""))) {
    if (/^(node_modules|\.data)(\/|$)/.test(path)) continue;
    let info: Deno.FileInfo;
    try {
      info = await Deno.lstat(`${root}${path}`);
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) continue; // deleted, not yet committed
      throw error;
    }
    if (!info.isFile) continue;
    const target = `${into}/${path}`;
    await Deno.mkdir(target.slice(0, target.lastIndexOf("/")), { recursive: true });
    await Deno.copyFile(`${root}${path}`, target);
    files++;
  }
  return `the working tree (${files} files)`;
}

/** The `deno install ...` step of a task of deno.json, as its argument list. */
function installStep(tasks: Record<string, string>, task: string): string[] {
  const step = (tasks[task] ?? "").split("&&").map((s) => s.trim())
    .find((s) => s.startsWith("deno install"));
  if (step === undefined) return fail(`deno.json's tasks.${task} has no "deno install" step`);
  // The steps are plain words: no quoting, no variables.
  return step.split(/\s+/).slice(1);
}

/** Packages (folders of node_modules/.deno) and MiB (`du -sm`) of `dir`'s node_modules. */
async function installed(dir: string): Promise<{ packages: number; mb: number }> {
  let packages = 0;
  for await (const entry of Deno.readDir(`${dir}/node_modules/.deno`)) {
    if (entry.isDirectory && entry.name !== "node_modules" && !entry.name.startsWith(".")) {
      packages++;
    }
  }
  const mb = Number((await run("du", ["-sm", "node_modules"], { cwd: dir })).split(/\s/)[0]);
  return { packages, mb };
}

/** The `n` largest package folders of `dir`'s node_modules/.deno, in MiB. */
async function largestPackages(dir: string, n: number): Promise<string[]> {
  const names: string[] = [];
  for await (const entry of Deno.readDir(`${dir}/node_modules/.deno`)) {
    if (entry.isDirectory && entry.name !== "node_modules" && !entry.name.startsWith(".")) {
      names.push(entry.name);
    }
  }
  const out = await run("du", ["-sk", ...names], { cwd: `${dir}/node_modules/.deno` });
  return out.trim().split("\n").map((line) => line.split("\t") as [string, string])
    .sort((a, b) => Number(b[0]) - Number(a[0])).slice(0, n)
    .map(([kb, name]) => `${(Number(kb) / 1024).toFixed(1)} MB ${name}`);
}

/** A port that is free now (the system's choice). */
function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

/** The parent of every process, from /proc. */
async function parents(): Promise<Map<number, number>> {
  const map = new Map<number, number>();
  for await (const entry of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const stat = await Deno.readTextFile(`/proc/${entry.name}/stat`);
      // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      map.set(Number(entry.name), ppid);
    } catch {
      // gone meanwhile
    }
  }
  return map;
}

/** `pid` and its descendants. */
async function tree(pid: number): Promise<number[]> {
  const map = await parents();
  const found = [pid];
  for (let i = 0; i < found.length; i++) {
    for (const [child, parent] of map) if (parent === found[i]) found.push(child);
  }
  return found;
}

/** Sends `signal` to `pid`'s descendants, deepest first, then to `pid`. */
async function signalTree(pid: number, signal: Deno.Signal): Promise<void> {
  let pids = [pid];
  try {
    pids = await tree(pid);
  } catch {
    // /proc unreadable: the task alone
  }
  for (const p of pids.reverse()) {
    try {
      Deno.kill(p, signal);
    } catch {
      // gone
    }
  }
}

/** A process's VmRSS in KiB and its command line (0 and "" when it is gone). */
async function rss(pid: number): Promise<{ kib: number; command: string }> {
  try {
    const status = await Deno.readTextFile(`/proc/${pid}/status`);
    const command = (await Deno.readTextFile(`/proc/${pid}/cmdline`)).split("\0").join(" ").trim();
    return { kib: Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? 0), command };
  } catch {
    return { kib: 0, command: "" };
  }
}

/** Reads `stream` line by line into `lines` (the last 40 kept) until it ends. */
async function drain(stream: ReadableStream<Uint8Array>, lines: string[], onLine?: () => void) {
  const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffered += value;
    const parts = buffered.split("\n");
    buffered = parts.pop()!;
    for (const line of parts) {
      lines.push(line);
      if (lines.length > 40) lines.shift();
      onLine?.();
    }
  }
}

/**
 * Starts `deno task start` in `dir` (embedded database, free ports, a data folder in `dir`), waits
 * for "Stack is up" and `settleSeconds`, and reads the resident memory of the stack's process
 * (tools/start.ts) and of the `deno task` process that runs it. Stops them after.
 */
async function stackMemory(dir: string): Promise<{ stack: number; task: number }> {
  const env = Deno.env.toObject();
  delete env.DATABASE_URL;
  for (
    const name of [
      "GATEWAY_PORT",
      "OAUTH_GRPC_PORT",
      "OAUTH_HTTP_PORT",
      "CORE_GRPC_PORT",
      "CORE_HTTP_PORT",
      "TOKEN_GRPC_PORT",
      "TOKEN_HTTP_PORT",
    ]
  ) env[name] = String(freePort());
  env.START_DATA_DIR = `${dir}/.data`;
  env.NO_COLOR = "1";
  const child = new Deno.Command(Deno.execPath(), {
    args: ["task", "start"],
    cwd: dir,
    env,
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const out: string[] = [];
  const err: string[] = [];
  const { promise: up, resolve: isUp } = Promise.withResolvers<void>();
  const draining = Promise.all([
    drain(child.stdout, out, () => {
      if (out.some((l) => l.startsWith("Stack is up"))) isUp();
    }),
    drain(child.stderr, err),
  ]);
  const exited = child.status.then((s) => s);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<"timeout">((resolve) => {
    timer = setTimeout(() => resolve("timeout"), 300_000);
  });
  try {
    const first = await Promise.race([up.then(() => "up" as const), exited, timeout]);
    if (first !== "up") {
      fail(
        `deno task start ${first === "timeout" ? "was not up within 300 s" : "exited"}:\n` +
          [...out, ...err].slice(-30).join("\n"),
      );
    }
    await new Promise((resolve) => setTimeout(resolve, settleSeconds * 1000));
    let stack = 0;
    let task = 0;
    for (const pid of await tree(child.pid)) {
      const { kib, command } = await rss(pid);
      if (pid === child.pid) task += kib;
      else if (command.includes("tools/start.ts")) stack += kib;
      else task += kib;
    }
    return { stack: Math.round(stack / 1024), task: Math.round(task / 1024) };
  } finally {
    clearTimeout(timer);
    // Ctrl-C as a person stops it: the stack's own process first, then the task; then SIGKILL.
    await signalTree(child.pid, "SIGINT");
    const stopped = await Promise.race([
      exited.then(() => true),
      new Promise<false>((resolve) => setTimeout(() => resolve(false), 20_000)),
    ]);
    if (!stopped) {
      await signalTree(child.pid, "SIGKILL");
      await exited;
    }
    await draining;
  }
}

if (Deno.build.os !== "linux") usageError("footprint", usage, "reads /proc: Linux only");

const dir = await Deno.makeTempDir({ prefix: "footprint-" });
let failure: string | undefined;
try {
  const what = await copyProject(dir);
  say(`footprint of ${what}, in ${dir}:`);
  const tasks = JSON.parse(await Deno.readTextFile(`${dir}/deno.json`)).tasks ?? {};
  const deno = Deno.execPath();

  /** Runs a task's install step in the copy and says what its node_modules then holds. */
  const measureInstall = async (task: string) => {
    const step = installStep(tasks, task);
    await run(deno, step, { cwd: dir });
    const { packages, mb } = await installed(dir);
    say(`deno task ${task} installs ${packages} packages, ${mb} MB (deno ${step.join(" ")})`);
  };

  await measureInstall("start");
  if (largest > 0) {
    for (const line of await largestPackages(dir, largest)) say(`  ${line}`);
  }

  const memory = await stackMemory(dir);
  say(
    `the embedded stack at rest: ${memory.stack} MiB resident, database included ` +
      `(deno task start without DATABASE_URL, ${settleSeconds} s after "Stack is up"; ` +
      `${memory.stack + memory.task} MiB with the deno task process)`,
  );

  await measureInstall("test");
} catch (error) {
  if (!(error instanceof Failure)) throw error;
  failure = error.message;
} finally {
  if (values.keep) say(`kept ${dir}`);
  else await Deno.remove(dir, { recursive: true });
}
if (failure !== undefined) {
  // deno-lint-ignore no-console
  console.error(`footprint: ${failure}`);
  Deno.exit(1);
}
