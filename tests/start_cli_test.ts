/**
 * What `deno task start`, `deno task token` and `deno task bench` say to a new user, run as the
 * user runs them (through `deno task`, with deno.json's permissions): a usage for --help and for
 * an unknown option, one line instead of a stack trace for a port in use or a data folder that
 * cannot be created, a data folder anywhere, and which component is not ready and why instead of
 * "Stack is up" when the stack is not.
 */

import assert from "node:assert/strict";
import { type Setting, settings } from "../lib/platform/mod.ts";
import { freePort as freeLoopbackPort } from "../lib/testing/mod.ts";

const root = new URL("../", import.meta.url);

const freePort = (): string => String(freeLoopbackPort());

function freePorts(): Record<string, string> {
  return {
    GATEWAY_PORT: freePort(),
    OAUTH_GRPC_PORT: freePort(),
    OAUTH_HTTP_PORT: freePort(),
    CORE_GRPC_PORT: freePort(),
    CORE_HTTP_PORT: freePort(),
    TOKEN_GRPC_PORT: freePort(),
    TOKEN_HTTP_PORT: freePort(),
  };
}

/** A `deno task` process, its output collected as it comes. */
class Task {
  readonly child: Deno.ChildProcess;
  stdout = "";
  stderr = "";
  readonly #done: Promise<void>;
  #ended = false;
  #changed = Promise.withResolvers<void>();

  constructor(args: string[], env: Record<string, string>) {
    this.child = new Deno.Command(Deno.execPath(), {
      args: ["task", ...args],
      cwd: root,
      env: { NO_COLOR: "1", LOG_LEVEL: "error", ...env },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      // A process group of its own, which {@link run} can stop whole.
      detached: true,
    }).spawn();
    const collect = async (stream: ReadableStream<Uint8Array>, key: "stdout" | "stderr") => {
      for await (const text of stream.pipeThrough(new TextDecoderStream())) {
        this[key] += text;
        this.#changed.resolve();
        this.#changed = Promise.withResolvers<void>();
      }
    };
    this.#done = Promise.all([
      collect(this.child.stdout, "stdout"),
      collect(this.child.stderr, "stderr"),
    ]).then(() => {
      this.#ended = true;
      this.#changed.resolve();
    });
  }

  /**
   * Waits until `pattern` is in stderr; fails if the process ends first or `unless` shows up in
   * stdout first.
   */
  async waitForStderr(pattern: RegExp, unless: RegExp): Promise<void> {
    while (!pattern.test(this.stderr)) {
      if (unless.test(this.stdout) || this.#ended) {
        throw new Error(`no ${pattern} in stderr:\n${this.stdout}\n${this.stderr}\n${this.stuck}`);
      }
      await this.#changed.promise;
    }
  }

  /**
   * A guard against a hang, not a timing: every case here ends within seconds. After `ms`, what
   * still runs in the task's process group is noted in {@link stuck} and the whole group killed,
   * so that nothing is left holding the pipes.
   */
  stopAfter(ms: number): Disposable {
    const timer = setTimeout(() => {
      const ps = new Deno.Command("ps", { args: ["-e", "-o", "pgid=,pid=,stat=,etime=,args="] })
        .outputSync();
      const group = new TextDecoder().decode(ps.stdout).split("\n")
        .filter((line) => line.trim().split(/\s+/)[0] === String(this.child.pid));
      this.stuck = `still running after ${ms / 1000} s, then killed (pgid pid stat etime args):\n` +
        group.join("\n");
      Deno.kill(-this.child.pid, "SIGKILL");
    }, ms);
    return { [Symbol.dispose]: () => clearTimeout(timer) };
  }

  /** What {@link stopAfter} found still running, if it had to kill the group. */
  stuck = "";

  /** Its exit status and all it wrote. */
  async result(): Promise<{ code: number; stdout: string; stderr: string }> {
    const { code } = await this.child.status;
    await this.#done;
    return { code, stdout: this.stdout, stderr: this.stderr };
  }
}

/** Runs a task to its end, stopping it if it runs on (which would be the bug under test). */
async function run(args: string[], env: Record<string, string> = {}) {
  const task = new Task(args, env);
  using _guard = task.stopAfter(120_000);
  return await task.result();
}

/** stderr without deno task's own "Task name command" line. */
function messages(stderr: string): string[] {
  return stderr.split("\n").filter((line) => line !== "" && !line.startsWith("Task "));
}

for (const task of ["start", "token", "bench"]) {
  Deno.test(`deno task ${task} --help prints its usage and exits 0`, async () => {
    // Free ports, in case it started the stack instead.
    const { code, stdout } = await run([task, "--help"], { ...freePorts(), DATABASE_URL: "" });
    assert.equal(code, 0, stdout);
    assert.match(stdout, new RegExp(`^Usage: deno task ${task}`));
    assert.match(stdout, /Options:\n/);
    assert.match(stdout, /Environment:\n/);
    assert.match(stdout, /-h, --help/);
  });

  Deno.test(`deno task ${task} with an unknown option prints the usage to stderr, exits 2`, async () => {
    const { code, stdout, stderr } = await run([task, "--no-such-option"], {
      ...freePorts(),
      DATABASE_URL: "",
    });
    assert.equal(code, 2, stderr);
    assert.equal(stdout, "");
    assert.match(stderr, new RegExp(`${task}: Unknown option '--no-such-option'`));
    assert.match(stderr, new RegExp(`Usage: deno task ${task}`));
  });
}

Deno.test("deno task start --help names the four components and each setting start reads", async () => {
  const { code, stdout, stderr } = await run(["start", "--help"], {
    ...freePorts(),
    DATABASE_URL: "",
  });
  assert.equal(code, 0, stderr);
  assert.match(stdout, /the whole stack \(gateway, oauth-registry, core, token-service\)/);
  const read = Object.entries(settings as Record<string, Setting>)
    .filter(([, s]) => s.usedBy.includes("start"));
  for (const [name] of read) assert.match(stdout, new RegExp(`^  ${name} `, "m"), name);
  // Its npm packages are installed (deno task test did): nothing is said about installing.
  assert.deepEqual(messages(stderr), []);
});

Deno.test("deno task token: the usage names its options, and --sub is required", async () => {
  const help = await run(["token", "--help"]);
  for (const option of ["--sub", "--projects", "--account", "--space", "--ttl"]) {
    assert.ok(help.stdout.includes(option), option);
  }
  for (const name of ["AUTH_JWT_SECRET", "START_DATA_DIR"]) assert.ok(help.stdout.includes(name));
  const missing = await run(["token", "--projects", "p1"]);
  assert.equal(missing.code, 2);
  assert.match(missing.stderr, /token: --sub is required/);
  const badTtl = await run(["token", "--sub", "u1", "--ttl", "soon"]);
  assert.equal(badTtl.code, 2);
  assert.match(badTtl.stderr, /--ttl takes a positive whole number, not "soon"/);
});

Deno.test("deno task bench --help needs no DATABASE_URL and names every option", async () => {
  const help = await run(["bench", "--help"], { DATABASE_URL: "" });
  assert.equal(help.code, 0);
  for (
    const option of [
      "--quick",
      "--rounds",
      "--seconds",
      "--concurrency",
      "--growth-rows",
      "--only",
      "--paths",
      "--cpu-prof",
      "DATABASE_URL",
    ]
  ) assert.ok(help.stdout.includes(option), option);
  const badPaths = await run(["bench", "--paths", "gateway,http"], { DATABASE_URL: "" });
  assert.equal(badPaths.code, 2);
  assert.match(badPaths.stderr, /--paths takes some of gateway,grpc,reference,peer, not "http"/);
});

Deno.test("deno task token keeps its secret in a START_DATA_DIR outside the project", async () => {
  const dir = await Deno.makeTempDir({ prefix: "token-data-" });
  try {
    const env = { START_DATA_DIR: `${dir}/data`, AUTH_JWT_SECRET: "", CLIENT_SECRET_HMAC_KEY: "" };
    const first = await run(["token", "--sub", "u1", "--projects", "p1"], env);
    assert.equal(first.code, 0, first.stderr);
    assert.match(first.stdout, /^ey[\w-]+\.[\w-]+\.[\w-]+\n$/);
    const stored = JSON.parse(await Deno.readTextFile(`${dir}/data/dev-secrets.json`));
    assert.equal(typeof stored.AUTH_JWT_SECRET, "string");
    const second = await run(["token", "--sub", "u1", "--projects", "p1"], env);
    assert.equal(second.stdout.split(".")[0], first.stdout.split(".")[0]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a data folder that cannot be created is one line, exit 1", async () => {
  const file = await Deno.makeTempFile({ prefix: "not-a-folder-" });
  try {
    const env = {
      ...freePorts(),
      DATABASE_URL: "",
      START_DATA_DIR: `${file}/data`,
      AUTH_JWT_SECRET: "",
      CLIENT_SECRET_HMAC_KEY: "",
    };
    for (const args of [["start"], ["token", "--sub", "u1"]]) {
      const { code, stderr } = await run(args, env);
      assert.equal(code, 1, stderr);
      const [line, ...rest] = messages(stderr);
      assert.deepEqual(rest, [], stderr);
      assert.equal(
        line,
        `${args[0]}: the data folder ${file}/data/ (START_DATA_DIR) cannot be created: ` +
          "Not a directory (os error 20)",
      );
    }
  } finally {
    await Deno.remove(file);
  }
});

for (const mode of ["embedded", "with DATABASE_URL"]) {
  Deno.test(`a port in use is one line, exit 1 (${mode})`, async () => {
    const dir = await Deno.makeTempDir({ prefix: "start-port-" });
    const held = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    try {
      const port = (held.addr as Deno.NetAddr).port;
      const env = {
        ...freePorts(),
        OAUTH_HTTP_PORT: String(port),
        START_DATA_DIR: dir,
        // Nothing is started, so the database is never asked.
        DATABASE_URL: mode === "embedded" ? "" : "postgres://postgres@127.0.0.1:1/postgres",
      };
      const { code, stdout, stderr } = await run(["start"], env);
      assert.equal(code, 1, stderr);
      assert.equal(stdout, "");
      assert.deepEqual(messages(stderr), [
        `start: port ${port} (OAUTH_HTTP_PORT) is in use (is another "deno task start" running?)`,
      ]);
    } finally {
      held.close();
      await Deno.remove(dir, { recursive: true });
    }
  });
}

Deno.test("two ports the same are one line, exit 1", async () => {
  const ports = freePorts();
  const { code, stderr } = await run(["start"], {
    ...ports,
    CORE_GRPC_PORT: ports.GATEWAY_PORT!,
    DATABASE_URL: "postgres://postgres@127.0.0.1:1/postgres",
  });
  assert.equal(code, 1, stderr);
  assert.deepEqual(messages(stderr), [
    `start: GATEWAY_PORT and CORE_GRPC_PORT are both ${ports.GATEWAY_PORT}: ` +
    "each needs a port of its own",
  ]);
});

Deno.test("a stack that is not ready is not reported up: what is not ready and why", async () => {
  const dir = await Deno.makeTempDir({ prefix: "start-unready-" });
  // A port nothing listens on: the database never answers, so the wait always runs out.
  const dbPort = freePort();
  const task = new Task(["start"], {
    ...freePorts(),
    START_DATA_DIR: dir,
    DATABASE_URL: `postgres://postgres:not-printed@127.0.0.1:${dbPort}/postgres`,
    START_READY_TIMEOUT_S: "1",
  });
  using _guard = task.stopAfter(120_000);
  try {
    await task.waitForStderr(/still waiting/, /Stack is up/);
    const lines = messages(task.stderr).filter((l) => l.startsWith("start: "));
    // Whether the gateway listens yet after 1 s depends on the machine's load: either is said.
    const gateway = lines[0]?.replace(
      /gateway: nothing answers on http:\/\/127\.0\.0\.1:\d+ \(fetch failed\)$/,
      "gateway: waits for oauth-registry, core and token-service",
    );
    assert.deepEqual([gateway, ...lines.slice(1)], [
      `start: not ready after 1 s: oauth-registry, core and token-service: the database at ` +
      `127.0.0.1:${dbPort}/postgres does not answer (connect ECONNREFUSED 127.0.0.1:${dbPort}); ` +
      "gateway: waits for oauth-registry, core and token-service",
      "start: still waiting; the stack is reported up when it is (Ctrl-C stops it)",
    ], lines.join("\n"));
    assert.ok(!task.stdout.includes("Stack is up"), task.stdout);
    assert.ok(!task.stderr.includes("not-printed"));
  } finally {
    try {
      task.child.kill("SIGTERM");
    } catch { /* ended already: the assertions above said why */ }
    await task.result();
    await Deno.remove(dir, { recursive: true });
  }
  // Ctrl-C (SIGTERM here) stops a stack that is still waiting, every component on its own.
  assert.equal((await task.child.status).code, 0, `${task.stderr}\n${task.stuck}`);
});
