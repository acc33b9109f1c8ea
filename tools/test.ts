/**
 * `deno task test [files...]`: every test file in its own `deno test` process, two at a time,
 * and one summary line in `deno test`'s own format at the end.
 *
 * Why not one `deno test --parallel` process: the tests call our gRPC servers with the stock
 * @grpc/grpc-js client, which under Deno runs on Deno's node:http2 client, and that client now and
 * then takes its whole process down (nghttp2's assertion `stream->closed_next == NULL` in
 * find_stream_on_goaway_func, or SIGSEGV: 2 of 4 full runs on 2026-11-21). In one process that
 * lost every result. Here a file whose process is killed by a signal (not one whose tests fail) is
 * run once more, and the crash is printed; a test that fails fails the run, never retried.
 *
 * @module
 */

const root = new URL("../", import.meta.url);

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

interface Outcome {
  file: string;
  passed: number;
  steps: number;
  failed: number;
  failedSteps: number;
  crashed: boolean;
}

async function runFile(file: string): Promise<Outcome> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["test", "--allow-all", file],
    cwd: root,
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1" },
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  await Deno.stdout.write(new TextEncoder().encode(text));
  const summary =
    /^(?:ok|FAILED) \| (\d+) passed(?: \((\d+) steps?\))? \| (\d+) failed(?: \((\d+) steps?\))?/m
      .exec(text);
  return {
    file,
    passed: Number(summary?.[1] ?? 0),
    steps: Number(summary?.[2] ?? 0),
    failed: Number(summary?.[3] ?? 0),
    failedSteps: Number(summary?.[4] ?? 0),
    // Killed by a signal, or ended without deno test's summary: the runtime died, not a test.
    crashed: out.signal !== null || (summary === null && !out.success),
  };
}

const started = performance.now();
const files = Deno.args.length > 0 ? Deno.args : await testFiles();
const queue = [...files];
const outcomes: Outcome[] = [];
await Promise.all(Array.from({ length: 2 }, async () => {
  for (let file = queue.shift(); file !== undefined; file = queue.shift()) {
    let outcome = await runFile(file);
    if (outcome.crashed) {
      // deno-lint-ignore no-console
      console.error(`\ntest: ${file}: the test process crashed; running it once more`);
      outcome = await runFile(file);
    }
    outcomes.push(outcome);
  }
}));

const sum = (f: (o: Outcome) => number) => outcomes.reduce((n, o) => n + f(o), 0);
const crashed = outcomes.filter((o) => o.crashed);
for (const o of crashed) {
  // deno-lint-ignore no-console
  console.error(`\ntest: ${o.file}: the test process crashed twice`);
}
const failed = sum((o) => o.failed) + crashed.length;
const seconds = Math.round((performance.now() - started) / 1000);
// deno-lint-ignore no-console
console.log(
  `${failed === 0 ? "ok" : "FAILED"} | ${sum((o) => o.passed)} passed (${
    sum((o) => o.steps)
  } steps) | ${failed} failed (${sum((o) => o.failedSteps)} steps) (${seconds}s)`,
);
Deno.exit(failed === 0 ? 0 : 1);
