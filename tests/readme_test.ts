/**
 * The README's shell examples run as written, in order, as a reader pastes them: the ```sh blocks
 * marked with a `<!-- readme-test -->` line before them (the Quickstart, the token endpoints, CORS,
 * "Examples", `buf curl` over gRPC and curl over Connect) are run by one bash, one after another,
 * against a stack started with `deno task start` (on a throwaway database, free ports and a data
 * folder of its own, whose settings the blocks read: `GATEWAY_PORT`, `OAUTH_GRPC_PORT`, ...).
 *
 * Strictness: `set -Eeuo pipefail` (with `inherit_errexit`, so a failure inside `$(...)` counts),
 * `curl` given `--fail-with-body` unless the block asks for `-f` itself (an HTTP error fails the
 * block), and `jq` given `-e` (a `null` where an id was expected fails it). A block marked
 * `<!-- readme-test: expect-output -->` shows HTTP errors on purpose: there curl's status is not
 * checked, and each of its whole-line comments is an output line that must appear. The bash sees
 * no variable of the test's own environment but PATH, HOME and the stack's settings, so a block
 * that uses a variable no earlier block set fails. A failure names the README's line and the
 * command. Broken blocks run through the same harness must fail, each where it breaks (the last
 * step), so that a harness that passes everything cannot go unnoticed.
 */

import assert from "node:assert/strict";
import { dirname } from "node:path";
import { type DebianPackage, ensurePackages, packages } from "../tools/debian.ts";
import { createTestDatabase, spawnStartTask, startTaskPorts } from "../lib/testing/mod.ts";

const root = new URL("../", import.meta.url);
const readmeUrl = new URL("README.md", root);

/** A marked ```sh block of a Markdown file. */
export interface Block {
  /** The line (1-based) of its first line of code. */
  line: number;
  /** The heading it is under. */
  heading: string;
  /** Whether it shows HTTP errors, and its whole-line comments are output lines to expect. */
  expectOutput: boolean;
  /** Its code. */
  code: string;
}

const markerPattern = /^<!--\s*readme-test(?::\s*([\w-]+))?\s*-->$/;

/**
 * The ```sh blocks that a `<!-- readme-test -->` line marks (blank lines may come between), in
 * order. A marker with an unknown option, or not followed by a ```sh block, is an error: a typo
 * must not leave a block untested.
 */
export function markedBlocks(markdown: string): Block[] {
  const lines = markdown.split("\n");
  const blocks: Block[] = [];
  let heading = "";
  let fence: string | undefined;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (fence !== undefined) {
      if (line.trim() === fence) fence = undefined;
      continue;
    }
    const opening = /^(`{3,}|~{3,})/.exec(line);
    if (opening) {
      fence = opening[1];
      continue;
    }
    if (/^#{1,6} /.test(line)) heading = line.replace(/^#+ /, "");
    const marker = markerPattern.exec(line.trim());
    if (!marker && /^\s*<!--\s*readme-test/.test(line)) {
      throw new Error(`README.md:${i + 1}: not a readme-test marker: ${line}`);
    }
    if (!marker) continue;
    const option = marker[1];
    if (option !== undefined && option !== "expect-output") {
      throw new Error(`README.md:${i + 1}: unknown readme-test option "${option}"`);
    }
    let j = i + 1;
    while (j < lines.length && lines[j]!.trim() === "") j++;
    if (lines[j] !== "```sh") {
      throw new Error(`README.md:${i + 1}: a readme-test marker not followed by a \`\`\`sh block`);
    }
    let end = j + 1;
    while (end < lines.length && lines[end] !== "```") end++;
    if (end === lines.length) throw new Error(`README.md:${j + 1}: the block does not end`);
    blocks.push({
      line: j + 2,
      heading,
      expectOutput: option === "expect-output",
      code: lines.slice(j + 1, end).join("\n"),
    });
    i = end;
  }
  return blocks;
}

/** What the blocks did. */
interface Run {
  /** Whether bash ended with 0. */
  ok: boolean;
  /** Everything the blocks printed (stdout and stderr, in order). */
  output: string;
  /** Each block's output. */
  outputs: string[];
  /** Where it stopped, as README.md:<line> and the command, when it failed. */
  failure: string | undefined;
  /** Whether an expect-output block missed a line, and which. */
  missing: string[];
}

/** The bash the blocks run in: its strictness, and the curl and jq that fail on errors. */
const prelude = `set -Eeuo pipefail
shopt -s inherit_errexit
# Where a command failed (in the curl or jq below: the line that called it), first and innermost.
# (LINENO on the trap's first line: on the next ones bash adds the trap's own lines.)
trap 'readme_status=$? readme_line=$LINENO
  case \${FUNCNAME[0]:-} in curl | jq) readme_line=\${BASH_LINENO[0]} ;; esac
  printf "\\n@@readme-test failed: status %d at line %d: %s@@\\n" $readme_status $readme_line \\
    "$BASH_COMMAND"' ERR
exec 2>&1
# curl fails on an HTTP error (but in the blocks that show one), never waits forever, and shows
# no progress meter (it does when its output is not a terminal, as here).
curl() {
  local arg fail=(--fail-with-body)
  if [[ $README_TEST_HTTP_ERRORS == 1 ]]; then fail=(); fi
  for arg in "$@"; do
    case $arg in --fail | --fail-with-body | -f* | -[!-]*f*) fail=() ;; esac
  done
  command curl --max-time 30 --no-progress-meter "\${fail[@]}" "$@"
}
# jq fails when its last output is null or false (an id that is not in the answer).
jq() { command jq -e "$@"; }
README_TEST_HTTP_ERRORS=0
`;

/** Runs the blocks in one bash, in order, in the repository's folder, with only `env`. */
async function runBlocks(blocks: Block[], env: Record<string, string>): Promise<Run> {
  let script = prelude;
  /** For each block, the script's line where its code starts. */
  const starts: number[] = [];
  blocks.forEach((block, n) => {
    script += `printf '\\n@@readme-test block ${n}@@\\n'\n`;
    script += `README_TEST_HTTP_ERRORS=${block.expectOutput ? 1 : 0}\n`;
    starts.push(script.split("\n").length);
    script += `${block.code}\n`;
  });
  script += `printf '\\n@@readme-test block ${blocks.length}@@\\n'\n`;
  const file = await Deno.makeTempFile({ prefix: "readme-", suffix: ".sh" });
  try {
    await Deno.writeTextFile(file, script);
    const child = new Deno.Command("bash", {
      args: [file],
      cwd: root,
      clearEnv: true,
      env,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      detached: true,
    }).spawn();
    // A guard against a block that hangs (the bug it would be), not a timing.
    const guard = setTimeout(() => {
      try {
        Deno.kill(-child.pid, "SIGKILL");
      } catch { /* gone */ }
    }, 180_000);
    const out = await child.output();
    clearTimeout(guard);
    const output = new TextDecoder().decode(out.stdout).replaceAll("\r", "") +
      new TextDecoder().decode(out.stderr);
    const outputs = output.split(/^@@readme-test block \d+@@$/m).slice(1);
    const failed = /^@@readme-test failed: (status \d+) at line (\d+): ([\s\S]*?)@@$/m.exec(output);
    // Where it stopped, as README.md:<line> and that line: the ERR trap's line (for a command of
    // several lines, bash gives the last), or bash's own message (an unset variable ends bash
    // without the trap).
    const where = (line: number) => {
      const n = starts.findLastIndex((start) => start <= line);
      if (n < 0) return `script line ${line}`;
      const at = line - starts[n]!;
      return `README.md:${blocks[n]!.line + at}: ${blocks[n]!.code.split("\n")[at]?.trim()}`;
    };
    let failure: string | undefined;
    if (!out.success) {
      const said = new RegExp(`^${escapeRegExp(file)}: line (\\d+): (.*)$`, "m").exec(output);
      failure = failed
        ? `${where(Number(failed[2]))}\n  ${failed[1]} (${failed[3]})`
        : said
        ? `${where(Number(said[1]))}\n  ${said[2]}`
        : `bash ended with ${out.code}`;
    }
    const missing: string[] = [];
    blocks.forEach((block, n) => {
      if (!block.expectOutput) return;
      const seen = new Set((outputs[n] ?? "").split("\n").map((l) => l.trim()));
      for (const expected of block.code.split("\n").filter((l) => /^# /.test(l))) {
        if (!seen.has(expected.slice(2).trim())) missing.push(expected.slice(2).trim());
      }
    });
    return { ok: out.success && missing.length === 0, output, outputs, failure, missing };
  } finally {
    await Deno.remove(file);
  }
}

/** `text` as a regular expression that matches just it. */
function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** What a failed run printed last, for the assertion's message. */
function tail(run: Run): string {
  const lines = run.output.split("\n");
  return `${run.failure ?? ""}${run.missing.length ? `\nmissing output: ${run.missing}` : ""}\n` +
    lines.slice(-60).join("\n");
}

/** The programs the README's blocks use, beside deno (Debian packages). */
const tools: DebianPackage[] = [
  packages.openssl,
  { name: "curl", check: ["curl", "--version"] },
  { name: "jq", check: ["jq", "--version"] },
];

/** `deno task start` on a throwaway database, free ports and a data folder of its own. */
async function startStack() {
  const db = await createTestDatabase();
  const dir = await Deno.makeTempDir({ prefix: "readme-" });
  const settings = { START_DATA_DIR: dir, ...startTaskPorts() };
  const task = spawnStartTask({ LOG_LEVEL: "warn", DATABASE_URL: db.url, ...settings });
  const stop = async () => {
    await task.stop();
    await db.drop();
    await Deno.remove(dir, { recursive: true });
  };
  let token: string;
  try {
    ({ token } = await task.up);
  } catch (error) {
    await stop();
    throw error;
  }
  // What a reader's shell has: no variable of the test's own, but the stack's settings.
  const shellEnv: Record<string, string> = {
    PATH: `${dirname(Deno.execPath())}:${Deno.env.get("PATH") ?? "/usr/bin:/bin"}`,
    HOME: Deno.env.get("HOME") ?? dir,
    NO_COLOR: "1",
    ...settings,
  };
  for (const name of ["DENO_DIR", "TMPDIR", "LANG"]) {
    const value = Deno.env.get(name);
    if (value) shellEnv[name] = value;
  }
  return { shellEnv, token, stop };
}

Deno.test("the README's marked blocks find the Quickstart, the examples and gRPC", async () => {
  const blocks = markedBlocks(await Deno.readTextFile(readmeUrl));
  const headings = new Set(blocks.map((b) => b.heading));
  for (const heading of ["Quickstart", "Tokens: the authorization server", "Examples"]) {
    assert.ok(headings.has(heading), `a marked block under "${heading}"`);
  }
  const code = blocks.map((b) => b.code).join("\n");
  assert.match(code, /buf curl --protocol grpc --http2-prior-knowledge/);
  assert.match(code, /curl .*\/registry\.oauth\.v1\.OAuthRegistryService\/GetOAuthConfig/);
  assert.doesNotMatch(code, /grpcurl|cli_\.\.\.|journey_\.\.\./);
  // The marker rules themselves.
  assert.deepEqual(
    markedBlocks("# A\n<!-- readme-test -->\n\n```sh\necho a\n```\n```sh\nno\n```\n"),
    [{ line: 5, heading: "A", expectOutput: false, code: "echo a" }],
  );
  assert.throws(() => markedBlocks("<!-- readme-test: typo -->\n```sh\nx\n```\n"), /unknown/);
  assert.throws(() => markedBlocks("<!-- readme-test -->\ntext\n```sh\nx\n```\n"), /not followed/);
});

Deno.test("the README's Quickstart and examples run as written, in order", async (t) => {
  await ensurePackages(tools);
  const blocks = markedBlocks(await Deno.readTextFile(readmeUrl));
  const stack = await startStack();
  try {
    await t.step("every marked block, in order", async () => {
      const run = await runBlocks(blocks, stack.shellEnv);
      assert.ok(run.ok, tail(run));
      assert.equal(run.outputs.length, blocks.length + 1, "every block ran");
    });

    await t.step("a broken block fails the run", async () => {
      const setup = [
        "GW=http://127.0.0.1:${GATEWAY_PORT:-8080}",
        `TOKEN=${stack.token}`, // start's: all projects, space dev
        'AUTH="Authorization: Bearer $TOKEN"; JSON="Content-Type: application/json"',
      ].join("\n");
      const block = (code: string, expectOutput = false): Block => ({
        line: 1,
        heading: "broken",
        expectOutput,
        code,
      });
      const good = await runBlocks([block(setup), block("curl $GW/healthz")], stack.shellEnv);
      assert.ok(good.ok, tail(good));
      // Each broken block, and the line of it where the run must say it stopped.
      const broken: Record<string, [string, number]> = {
        "an HTTP error without -f": ['curl $GW/v1/core/units/unit_x -H "$AUTH"', 1],
        "an HTTP error with -fsS": ['echo x\ncurl -fsS $GW/v1/projects/nope/config -H "$AUTH"', 2],
        "a variable no block set": ["echo x\ncurl $GW/v1/projects/demo/clients/$CLIENT_ID", 2],
        "a failure inside $(...)": [
          'ID=$(curl $GW/v1/core/roles/role_x -H "$AUTH" | jq -r .id)',
          1,
        ],
        "an id that is not in the answer": ["ID=$(curl -s $GW/healthz | jq -r .id)", 1],
        "a failing command before others": ["false\necho after", 1],
        // What the README used to do: the journey deleted before a unit is created in it.
        "a record used after its deletion": [
          [
            'J=$(curl -X POST $GW/v1/core/journeys -H "$AUTH" -H "$JSON" -d \'{"name":"L"}\' |',
            "  jq -r .id)",
            'curl -X DELETE $GW/v1/core/journeys/$J -H "$AUTH"',
            'curl -X POST $GW/v1/core/units -H "$AUTH" -H "$JSON" -d "{\\"journey\\":\\"$J\\"}"',
          ].join("\n"),
          4,
        ],
      };
      for (const [what, [code, line]] of Object.entries(broken)) {
        const run = await runBlocks([block(setup), { ...block(code), line: 100 }], stack.shellEnv);
        assert.ok(!run.ok, `${what}: the run fails\n${run.output}`);
        assert.match(
          run.failure ?? "",
          new RegExp(`^README\\.md:${99 + line}: `),
          `${what}: where it failed\n${tail(run)}`,
        );
      }
      const missing = await runBlocks(
        [block(setup), block("curl -si $GW/healthz\n# HTTP/1.1 418 I'm a teapot", true)],
        stack.shellEnv,
      );
      assert.deepEqual(missing.missing, ["HTTP/1.1 418 I'm a teapot"], tail(missing));
      assert.ok(!missing.ok);
      // The error a block shows on purpose is not a failure.
      const shown = await runBlocks(
        [
          block(setup),
          block(
            'curl -s $GW/v1/core/units/unit_x -H "$AUTH"\n' +
              '# {"error":{"code":"not_found","message":"No unit with id unit_x","details":[]}}',
            true,
          ),
        ],
        stack.shellEnv,
      );
      assert.ok(shown.ok, tail(shown));
    });
  } finally {
    await stack.stop();
  }
});
