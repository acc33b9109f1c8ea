/**
 * `deno task test [files...]`: every test file in its own `deno test` process, two at a time,
 * each file's output as it ends, then every failure and crash named with its file, and last one
 * summary line in `deno test`'s own format (what .ci/run reads):
 *
 *     ok | 180 passed (190 steps) | 0 failed (0 steps) (75s)
 *     FAILED | 178 passed (186 steps) | 3 failed (2 steps) (80s)
 *
 * Nothing is run twice. A failed test counts as deno test counts it; a file whose process was
 * killed by a signal (an abort, SIGSEGV, the OOM killer), ended without deno test's summary (a
 * type error, a panic) or ran past the time limit counts as one more failed test, besides the
 * tests it reported before it ended (those deno test had printed: a process that dies at once can
 * take its last lines with it); so does a file whose summary says ok but whose process failed.
 *
 * Why one process per file: a file that takes its process down loses only its own results. Each
 * runs in a process group of its own (with `setsid`), so that what a killed or crashed file left
 * running (the services its tests started) is stopped before the next file runs.
 * `TEST_FILE_TIMEOUT_S` sets the time limit of one file (600 s unless set).
 *
 * A whole run first checks that a test database can be made (DATABASE_URL answers, or a Docker
 * engine for testcontainers), and without one stops with one line saying so.
 *
 * @module
 */

import { databaseProblem } from "../lib/testing/mod.ts";

/** What one file's `deno test` process did. */
export interface Outcome {
  /** The file, as given to the runner. */
  file: string;
  /** Tests passed. */
  passed: number;
  /** Steps passed. */
  steps: number;
  /** Tests failed, one more for a crash. */
  failed: number;
  /** Steps failed. */
  failedSteps: number;
  /** Why the process did not end as deno test ends, or undefined if it did. */
  crash: string | undefined;
  /** What failed, one entry each: the test's name and where it is, or the crash. */
  problems: string[];
}

/** How a process ended (the fields of Deno.CommandStatus the runner reads). */
export interface Exit {
  code: number;
  signal: string | null;
  /** True if the runner ended it at the time limit. */
  timedOut?: boolean;
}

const summaryPattern =
  /^(?:ok|FAILED) \| (\d+) passed(?: \((\d+) steps?\))? \| (\d+) failed(?: \((\d+) steps?\))?/;

/**
 * Reads deno test's output for one file: its summary (the last line in its format on stdout),
 * the entries of its FAILURES list, and how its process ended.
 */
export function outcomeOf(file: string, stdout: string, stderr: string, exit: Exit): Outcome {
  // What the tests printed themselves (between deno test's "------- output -------" and
  // "----- output end -----") is not deno test's report.
  let inOutput = false;
  const lines = stdout.split(/\r?\n/).map((line) => {
    if (/^-+ output -+$/.test(line)) inOutput = true;
    const own = inOutput;
    if (/^-+ output end -+$/.test(line)) inOutput = false;
    return own ? "" : line;
  });
  let summary: RegExpExecArray | null = null;
  let summaryAt = -1;
  for (let i = lines.length - 1; i >= 0 && summary === null; i--) {
    summary = summaryPattern.exec(lines[i]!);
    if (summary) summaryAt = i;
  }
  const outcome: Outcome = {
    file,
    passed: 0,
    steps: 0,
    failed: 0,
    failedSteps: 0,
    crash: undefined,
    problems: [],
  };
  if (summary) {
    outcome.passed = Number(summary[1]);
    outcome.steps = Number(summary[2] ?? 0);
    outcome.failed = Number(summary[3]);
    outcome.failedSteps = Number(summary[4] ?? 0);
    // " FAILURES " lists each failed test or step as "name => ./file:line:col".
    const start = lines.lastIndexOf(" FAILURES ", summaryAt);
    if (start >= 0) {
      for (const line of lines.slice(start + 1, summaryAt)) {
        if (line.trim() !== "") outcome.problems.push(line.trim());
      }
    }
    if (outcome.failed > 0 && outcome.problems.length === 0) {
      outcome.problems.push(`${outcome.failed} failed (see the output above)`);
    }
  } else {
    // No summary: count what the tests reported before the end, the top level as tests and
    // indented lines as steps.
    for (const line of lines) {
      const reported = /^( *)(.*) \.\.\. (ok|FAILED)\b/.exec(line);
      if (!reported) continue;
      const step = reported[1]!.length > 0;
      if (reported[3] === "ok") step ? outcome.steps++ : outcome.passed++;
      else {
        step ? outcome.failedSteps++ : outcome.failed++;
        outcome.problems.push(`${reported[2]!.trim()} (reported FAILED before the end)`);
      }
    }
  }
  // What it said last on stderr: its last "error:" line, or else its last line.
  // (Without colours: deno's hints have them even with NO_COLOR.)
  // deno-lint-ignore no-control-regex
  const errorLines = stderr.replaceAll(/\x1b\[[0-9;]*m/g, "").split(/\r?\n/).map((l) => l.trim())
    .filter((l) => l !== "" && !/^(Stack backtrace:|\d+: <unknown>|Check .*)$/.test(l));
  const lastError = errorLines.findLast((l) => l.startsWith("error:")) ?? errorLines.at(-1);
  const said = lastError ? `; its last words: ${lastError}` : "";
  if (exit.timedOut) {
    outcome.crash = `ran past the time limit and was stopped${said}`;
  } else if (exit.signal !== null) {
    outcome.crash = `killed by ${exit.signal}${summary ? " after its summary" : ""}${said}`;
  } else if (!summary) {
    outcome.crash = `ended without deno test's summary (exit code ${exit.code})${said}`;
  } else if (exit.code !== 0 && outcome.failed === 0) {
    outcome.crash = `exited with code ${exit.code} although its summary says ok${said}`;
  } else if (exit.code === 0 && outcome.failed > 0) {
    outcome.crash = `exited with code 0 although ${outcome.failed} failed`;
  }
  if (outcome.crash !== undefined) {
    outcome.failed++;
    outcome.problems.push(`CRASHED: ${outcome.crash}`);
  }
  return outcome;
}

/**
 * The closing lines: every problem of every file (`file: problem`), then the summary line, last.
 */
export function closingLines(outcomes: Outcome[], seconds: number): string[] {
  const sum = (f: (o: Outcome) => number) => outcomes.reduce((n, o) => n + f(o), 0);
  const failed = sum((o) => o.failed);
  const problems = outcomes.flatMap((o) => o.problems.map((p) => `  ${o.file}: ${p}`));
  const out: string[] = [];
  if (problems.length > 0) {
    // One line per failed test or step (as deno test lists them) and per crash.
    const files = outcomes.filter((o) => o.problems.length > 0).length;
    out.push("", `test: what failed, in ${files} of ${outcomes.length} files:`);
    out.push(...problems);
  }
  out.push(
    `${failed === 0 ? "ok" : "FAILED"} | ${sum((o) => o.passed)} passed (${
      sum((o) => o.steps)
    } steps) | ${failed} failed (${sum((o) => o.failedSteps)} steps) (${seconds}s)`,
  );
  return out;
}

const root = new URL("../", import.meta.url);

/** Every `*_test.ts` under the repository, but in node_modules, gen and hidden folders. */
async function testFiles(): Promise<string[]> {
  const out: string[] = [];
  const walk = async (dir: string) => {
    for await (const entry of Deno.readDir(new URL(dir, root))) {
      const path = `${dir}${entry.name}`;
      if (entry.isDirectory && !/^(node_modules|gen|\.\w+)$/.test(entry.name)) {
        await walk(`${path}/`);
      } else if (entry.isFile && /_test\.ts$/.test(entry.name)) out.push(path);
    }
  };
  await walk("");
  return out.sort();
}

const encoder = new TextEncoder();
const print = (text: string) => Deno.stdout.write(encoder.encode(text));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `setsid`, to run each file in a process group of its own, if the machine has it. */
const setsid = ["/usr/bin/setsid", "/bin/setsid"].find((path) => {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
});

/** Sends `signal` to a process group; false if no process is left in it. */
function signalGroup(pgid: number, signal: Deno.Signal): boolean {
  try {
    Deno.kill(-pgid, signal);
    return true;
  } catch {
    return false;
  }
}

/**
 * Stops what is left of a file's process group (the services a test started, when the test
 * process was killed before it could stop them): SIGTERM, and SIGKILL 5 s later. Returns
 * whether anything was left.
 */
async function stopGroup(pgid: number): Promise<boolean> {
  if (!signalGroup(pgid, "SIGTERM")) return false;
  for (let waited = 0; waited < 5000; waited += 100) {
    await sleep(100);
    if (!signalGroup(pgid, "SIGCONT")) return true; // SIGCONT: a probe that harms no process
  }
  signalGroup(pgid, "SIGKILL");
  return true;
}

/** Reads a stream to its end, or until cancelled. */
function drain(stream: ReadableStream<Uint8Array>) {
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  const done = (async () => {
    for (let r = await reader.read(); !r.done; r = await reader.read()) chunks.push(r.value);
  })().catch(() => {});
  return {
    done,
    cancel: () => reader.cancel().catch(() => {}),
    text: () => {
      const bytes = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
      let at = 0;
      for (const c of chunks) {
        bytes.set(c, at);
        at += c.length;
      }
      return new TextDecoder().decode(bytes);
    },
  };
}

/** The process groups of the files running now. */
const running = new Set<number>();

/**
 * One line: how many gateway exchanges the run checked against the OpenAPI document, from the
 * counts its stacks left in `openApiReportDir` (lib/testing/stack.ts), which it then removes.
 */
async function openApiLine(openApiReportDir: string): Promise<string> {
  const total = { checked: 0, outside: 0, violations: 0, refused: 0, stacks: 0 };
  for await (const entry of Deno.readDir(openApiReportDir)) {
    if (!entry.name.endsWith(".counts")) continue;
    const counts = JSON.parse(await Deno.readTextFile(`${openApiReportDir}/${entry.name}`));
    total.checked += counts.checked;
    total.outside += counts.outside;
    total.violations += counts.violations;
    total.refused += counts.refused;
    total.stacks++;
  }
  await Deno.remove(openApiReportDir, { recursive: true });
  return `test: the gateway's answers against gen/openapi/openapi.json, in ${total.stacks} ` +
    `stacks: ${total.checked} responses checked, ${total.violations} violations; ` +
    `${total.refused} requests the document refuses, each refused by the gateway too; ` +
    `${total.outside} requests outside the document (unknown paths and methods, unparsable)`;
}

async function runFile(
  file: string,
  timeoutMs: number,
  openApiReportDir: string,
): Promise<Outcome> {
  const test = [Deno.execPath(), "test", "--allow-all", file];
  const child = new Deno.Command(setsid ?? test[0]!, {
    args: setsid ? test : test.slice(1),
    cwd: root,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1", OPENAPI_REPORT_DIR: openApiReportDir },
  }).spawn();
  // setsid runs deno in place (a child is no process group leader), in a new group: its pid.
  const signal = (s: Deno.Signal) => {
    if (setsid) signalGroup(child.pid, s);
    else {
      try {
        child.kill(s);
      } catch { /* already ended */ }
    }
  };
  if (setsid) running.add(child.pid);
  const stdout = drain(child.stdout);
  const stderr = drain(child.stderr);
  let timedOut = false;
  let killer: ReturnType<typeof setTimeout> | undefined;
  const timer = setTimeout(() => {
    timedOut = true;
    signal("SIGTERM");
    killer = setTimeout(() => signal("SIGKILL"), 10_000);
  }, timeoutMs);
  const status = await child.status;
  clearTimeout(timer);
  clearTimeout(killer);
  const leftovers = setsid !== undefined && await stopGroup(child.pid);
  running.delete(child.pid);
  // A process outside the group may still hold the pipes: 10 s, then what arrived.
  await Promise.race([Promise.all([stdout.done, stderr.done]), sleep(10_000)]);
  await Promise.all([stdout.cancel(), stderr.cancel()]);
  const outcome = outcomeOf(file, stdout.text(), stderr.text(), {
    code: status.code,
    signal: status.signal,
    timedOut,
  });
  await print(stdout.text() + stderr.text());
  if (outcome.crash !== undefined) await print(`\ntest: ${file}: ${outcome.crash}\n`);
  if (leftovers) {
    await print(
      `test: ${file}: processes it started were still running; the runner stopped them\n`,
    );
  }
  return outcome;
}

const help = `Usage: deno task test [FILE...]

Runs every *_test.ts file of the project (or the FILEs given), each in its own deno test process,
two at a time, and ends with one summary line: "ok | N passed (S steps) | N failed (S steps) (Ts)".
Every failure and crash is named with its file just before that line; nothing is run twice.

Needs Postgres: DATABASE_URL (e.g. postgres://postgres@127.0.0.1:5432/postgres; each file makes and
drops its own databases there), or else a Docker engine for testcontainers. Stock peers the tests
drive (h2load, h2spec's Go toolchain, python3-grpcio) are installed from Debian when missing.

Environment: TEST_FILE_TIMEOUT_S (600), ATTACK_SECONDS (8), HOSTILE_SEED, HOSTILE_RUNS.
`;

if (import.meta.main) {
  if (Deno.args.includes("--help") || Deno.args.includes("-h")) {
    await print(help);
    Deno.exit(0);
  }
  const unknown = Deno.args.find((a) => a.startsWith("-"));
  if (unknown !== undefined) {
    await print(`test: unknown option ${unknown}\n\n${help}`);
    Deno.exit(2);
  }
  // The files run in groups of their own, out of reach of a Ctrl-C at the terminal: pass it on.
  // They end killed by SIGTERM, and the summary says so.
  for (const name of ["SIGINT", "SIGTERM"] as const) {
    Deno.addSignalListener(name, () => {
      for (const pgid of running) signalGroup(pgid, "SIGTERM");
    });
  }
  const started = performance.now();
  const timeoutMs = Number(Deno.env.get("TEST_FILE_TIMEOUT_S") ?? 600) * 1000;
  const files = Deno.args.length > 0 ? Deno.args : await testFiles();
  // A whole run needs Postgres: without one, say so in one line instead of failing every file.
  const problem = Deno.args.length > 0 ? undefined : await databaseProblem();
  if (problem !== undefined) {
    await print(`test: ${problem}\n`);
    Deno.exit(2);
  }
  // Two files at a time; the outcomes in the order the files were given, whatever order they
  // ended in.
  // Where the stacks of the run leave the counts of their gateways' OpenAPI check.
  const openApiReportDir = await Deno.makeTempDir({ prefix: "openapi-report-" });
  const outcomes: Outcome[] = new Array(files.length);
  let next = 0;
  await Promise.all(Array.from({ length: 2 }, async () => {
    for (let i = next++; i < files.length; i = next++) {
      outcomes[i] = await runFile(files[i]!, timeoutMs, openApiReportDir);
    }
  }));
  const seconds = Math.round((performance.now() - started) / 1000);
  const lines = closingLines(outcomes, seconds);
  await print(`${await openApiLine(openApiReportDir)}\n${lines.join("\n")}\n`);
  Deno.exit(lines.at(-1)!.startsWith("ok") ? 0 : 1);
}
