/**
 * Tests of tools/test.ts: the runner runs on fixture files in a temporary folder (passing,
 * failing, calling `Deno.exit` mid-test, failing to type-check, killed by SIGKILL and SIGABRT,
 * hanging past the time limit),
 * and its closing lines must count and name every one of them, each file run exactly once.
 *
 * @module
 */

import assert from "node:assert/strict";
import { closingLines, outcomeOf } from "./test.ts";

const fixtures: Record<string, string> = {
  "pass_test.ts": `
    Deno.test("adds", () => {
      if (1 + 1 !== 2) throw new Error("no");
    });
    Deno.test("with steps", async (t) => {
      await t.step("one", () => {});
      await t.step("two", () => {});
    });
  `,
  "fail_test.ts": `
    Deno.test("passes", () => {});
    Deno.test("fails", () => {
      throw new Error("this test fails");
    });
    Deno.test("a step fails", async (t) => {
      await t.step("good", () => {});
      await t.step("bad", () => {
        throw new Error("this step fails");
      });
    });
  `,
  "exit_test.ts": `
    Deno.test("before", () => {});
    Deno.test("exits", () => {
      Deno.exit(1);
    });
    Deno.test("never runs", () => {});
  `,
  "type_error_test.ts": `
    const n: number = "not a number";
    Deno.test("never runs", () => {
      if (n !== 1) throw new Error("no");
    });
  `,
  "kill_test.ts": `
    Deno.test("killed", async () => {
      // A process the test started and would have stopped: the runner must stop it.
      const left = new Deno.Command("sleep", { args: ["300"] }).spawn();
      await Deno.writeTextFile(new URL("./left.pid", import.meta.url), String(left.pid));
      Deno.kill(Deno.pid, "SIGKILL");
      await new Promise((r) => setTimeout(r, 10_000));
    });
  `,
  "abort_test.ts": `
    Deno.test("aborts", async () => {
      Deno.kill(Deno.pid, "SIGABRT");
      await new Promise((r) => setTimeout(r, 10_000));
    });
  `,
  "hang_test.ts": `
    Deno.test("hangs", async () => {
      await new Promise((r) => setTimeout(r, 600_000));
    });
  `,
};

/** Writes the fixtures to a temporary folder; returns their paths by name. */
async function writeFixtures(): Promise<{ dir: string; path: Record<string, string> }> {
  const dir = await Deno.makeTempDir({ prefix: "runner_fixtures_" });
  const path: Record<string, string> = {};
  for (const [name, text] of Object.entries(fixtures)) {
    path[name] = `${dir}/${name}`;
    // Each file notes that it ran before anything else, so a run counts even when the file is
    // killed before deno test has printed a line of it (its reporter writes on another thread).
    const note = `Deno.writeTextFileSync(new URL("./runs.log", import.meta.url), ` +
      `"${name}\\n", { append: true });\n`;
    await Deno.writeTextFile(path[name], note + text);
  }
  return { dir, path };
}

/** Runs tools/test.ts on `files`; returns its exit code and output lines. */
async function runner(files: string[]): Promise<{ code: number; lines: string[] }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", new URL("./test.ts", import.meta.url).pathname, ...files],
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1", TEST_FILE_TIMEOUT_S: "8" },
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  return { code: out.code, lines: text.trimEnd().split("\n") };
}

/** Whether a process runs (is neither gone nor a zombie). */
function alive(pid: number): boolean {
  try {
    return !/^\S+ \(.*\) Z /.test(Deno.readTextFileSync(`/proc/${pid}/stat`));
  } catch {
    return false;
  }
}

/** The summary line's numbers, as .ci/run reads them. */
function counts(line: string) {
  const m = /^(ok|FAILED) \| (\d+) passed \((\d+) steps\) \| (\d+) failed \((\d+) steps\) \(\d+s\)$/
    .exec(line);
  assert.ok(m, `not a summary line: ${line}`);
  return {
    verdict: m[1],
    passed: Number(m[2]),
    steps: Number(m[3]),
    failed: Number(m[4]),
    failedSteps: Number(m[5]),
  };
}

Deno.test("the runner counts and names every failure and every crash, and reruns nothing", async () => {
  const { dir, path } = await writeFixtures();
  try {
    const { code, lines } = await runner(Object.values(path));
    const output = lines.join("\n");
    assert.equal(code, 1, output);
    assert.deepEqual(counts(lines.at(-1)!), {
      verdict: "FAILED",
      // pass 2; fail and exit 1 each
      passed: 4,
      steps: 3,
      // fail 2 (deno test's count), exit 2 (deno test fails a test that calls Deno.exit, and
      // the next one), and one for each of type_error, kill, abort and hang
      failed: 8,
      failedSteps: 1,
    }, output);

    // Every file ran once, and the one that does not type-check never: no reruns.
    const runs = (await Deno.readTextFile(`${dir}/runs.log`)).trimEnd().split("\n").sort();
    assert.deepEqual(
      runs,
      Object.keys(fixtures).filter((name) => name !== "type_error_test.ts").sort(),
      output,
    );
    const checks = lines.filter((l) => l.startsWith("Check ") && l.endsWith("/type_error_test.ts"));
    assert.equal(checks.length, 1, `type_error_test.ts was checked ${checks.length} times`);

    // The list just before the last line names each failure and crash with its file.
    const header = lines.findLastIndex((l) => l.startsWith("test: what failed, "));
    assert.ok(header >= 0, output);
    assert.match(lines[header]!, /^test: what failed, in 6 of 7 files:$/);
    const listed = lines.slice(header + 1, -1);
    const expected: [string, RegExp][] = [
      ["fail_test.ts", /^fails => .*fail_test\.ts:\d+:\d+$/],
      ["fail_test.ts", /^a step fails \.\.\. bad => .*fail_test\.ts:\d+:\d+$/],
      ["exit_test.ts", /^exits => .*exit_test\.ts:\d+:\d+$/],
      ["exit_test.ts", /^never runs => .*exit_test\.ts:\d+:\d+$/],
      [
        "type_error_test.ts",
        /^CRASHED: ended without deno test's summary \(exit code 1\); its last words: error: Type checking failed\.$/,
      ],
      ["kill_test.ts", /^CRASHED: killed by SIGKILL$/],
      ["abort_test.ts", /^CRASHED: killed by SIGABRT$/],
      ["hang_test.ts", /^CRASHED: ran past the time limit and was stopped$/],
    ];
    for (const [name, pattern] of expected) {
      const prefix = `  ${path[name]}: `;
      assert.ok(
        listed.some((l) => l.startsWith(prefix) && pattern.test(l.slice(prefix.length))),
        `no line for ${name} matching ${pattern} in:\n${listed.join("\n")}`,
      );
    }
    assert.equal(listed.length, expected.length, listed.join("\n"));

    // What the killed file left running was stopped, and said so.
    const left = Number(await Deno.readTextFile(`${dir}/left.pid`));
    assert.ok(left > 0);
    assert.equal(alive(left), false, `the process kill_test.ts left (${left}) still runs`);
    assert.ok(
      lines.includes(
        `test: ${path["kill_test.ts"]}: processes it started were still running; the runner ` +
          `stopped them`,
      ),
      output,
    );
    assert.ok(!listed.some((l) => l.includes("pass_test.ts")), listed.join("\n"));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the runner says ok, exits 0 and lists nothing when everything passes", async () => {
  const { dir, path } = await writeFixtures();
  try {
    const { code, lines } = await runner([path["pass_test.ts"]!]);
    const output = lines.join("\n");
    assert.equal(code, 0, output);
    assert.deepEqual(counts(lines.at(-1)!), {
      verdict: "ok",
      passed: 2,
      steps: 2,
      failed: 0,
      failedSteps: 0,
    });
    assert.ok(!lines.some((l) => l.startsWith("test: what failed")), output);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("outcomeOf() counts a summary that says ok from a process that failed", () => {
  const stdout =
    "running 1 test from ./x_test.ts\nx ... ok (1ms)\n\nok | 1 passed | 0 failed (5ms)\n";
  const outcome = outcomeOf("x_test.ts", stdout, "error: something after the tests\n", {
    code: 1,
    signal: null,
  });
  assert.equal(outcome.passed, 1);
  assert.equal(outcome.failed, 1);
  assert.match(outcome.crash ?? "", /exited with code 1 although its summary says ok/);
  assert.match(outcome.crash ?? "", /something after the tests/);
});

Deno.test("outcomeOf() reads the last summary, not one a test printed", () => {
  const stdout = [
    "running 1 test from ./x_test.ts",
    "x ...",
    "------- output -------",
    "ok | 99 passed | 0 failed (1ms)",
    "y ... ok (1ms)",
    "----- output end -----",
    "x ... FAILED (3ms)",
    "",
    " FAILURES ",
    "",
    "x => ./x_test.ts:1:6",
    "",
    "FAILED | 0 passed | 1 failed (5ms)",
  ].join("\n");
  const outcome = outcomeOf("x_test.ts", stdout, "error: Test failed\n", { code: 1, signal: null });
  assert.deepEqual(
    [outcome.passed, outcome.failed, outcome.crash, outcome.problems],
    [0, 1, undefined, ["x => ./x_test.ts:1:6"]],
  );
  // Without the summary, a line a test printed is not one of its results.
  const cut = stdout.split("\n").slice(0, 6).join("\n");
  const crashed = outcomeOf("x_test.ts", cut, "", { code: 0, signal: "SIGSEGV" });
  assert.deepEqual([crashed.passed, crashed.failed], [0, 1]);
  assert.match(crashed.crash ?? "", /^killed by SIGSEGV/);
});

Deno.test("outcomeOf() counts a process that ended with 0 but without a summary as a crash", () => {
  const stdout = "running 2 tests from ./x_test.ts\nx ... ok (1ms)\ny ...\n  s ... ok (1ms)\n";
  const outcome = outcomeOf("x_test.ts", stdout, "", { code: 0, signal: null });
  assert.deepEqual(
    [outcome.passed, outcome.steps, outcome.failed, outcome.problems],
    [1, 1, 1, ["CRASHED: ended without deno test's summary (exit code 0)"]],
  );
});

Deno.test("closingLines() puts the list before the summary line, and the summary last", () => {
  const lines = closingLines([
    {
      file: "a_test.ts",
      passed: 3,
      steps: 1,
      failed: 0,
      failedSteps: 0,
      crash: undefined,
      problems: [],
    },
    {
      file: "b_test.ts",
      passed: 1,
      steps: 0,
      failed: 2,
      failedSteps: 1,
      crash: "killed by SIGABRT",
      problems: ["t => ./b_test.ts:1:1", "CRASHED: killed by SIGABRT"],
    },
  ], 7);
  assert.deepEqual(lines, [
    "",
    "test: what failed, in 1 of 2 files:",
    "  b_test.ts: t => ./b_test.ts:1:1",
    "  b_test.ts: CRASHED: killed by SIGABRT",
    "FAILED | 4 passed (1 steps) | 2 failed (1 steps) (7s)",
  ]);
});
