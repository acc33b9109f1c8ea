/**
 * `deno task start`, run as a user runs it: with no DATABASE_URL, the whole stack in one process on
 * embedded PGlite in a data folder anywhere (START_DATA_DIR), used by one start at a time, and a
 * client created with the README's curl is still there after a restart, also after a kill; with
 * DATABASE_URL, one process per component, started as the Dockerfile starts it, and one that dies
 * is restarted.
 */

import assert from "node:assert/strict";
import { componentEnv, componentFlags } from "../lib/platform/mod.ts";
import { httpClient } from "../lib/testing/mod.ts";
import { freePort as freeLoopbackPort } from "../lib/testing/mod.ts";

const root = new URL("../", import.meta.url);

const freePort = (): string => String(freeLoopbackPort());

interface Started {
  child: Deno.ChildProcess;
  token: string;
  banner: string;
  output: string[];
}

/** The `deno task start` processes started, each the leader of its own process group. */
const spawned = new Set<Deno.ChildProcess>();

/** Kills what a failed test left running: every process of every start's group. */
async function killLeftovers(): Promise<void> {
  for (const child of spawned) {
    try {
      Deno.kill(-child.pid, "SIGKILL");
    } catch { /* the group is gone */ }
    await child.status;
  }
  spawned.clear();
}

async function start(env: Record<string, string>): Promise<Started> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["task", "start"],
    cwd: root,
    env: { NO_COLOR: "1", ...env },
    stdout: "piped",
    stderr: "piped",
    detached: true,
  }).spawn();
  spawned.add(child);
  const output: string[] = [];
  child.stderr.pipeThrough(new TextDecoderStream()).pipeTo(
    new WritableStream({ write: (chunk) => void output.push(chunk) }),
  );
  let text = "";
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  while (!/export TOKEN=\S+/.test(text)) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`start exited early:\n${text}\n${output.join("")}`);
    text += value;
  }
  reader.releaseLock();
  child.stdout.cancel().catch(() => {});
  return { child, token: /export TOKEN=(\S+)/.exec(text)![1]!, banner: text, output };
}

/** The pid of the child process of `parent` whose command line matches `pattern`. */
async function childPid(parent: number, pattern: string): Promise<number> {
  const pgrep = await new Deno.Command("pgrep", {
    args: ["-P", String(parent), "-f", pattern],
    stdout: "piped",
  }).output();
  const pid = Number(new TextDecoder().decode(pgrep.stdout).trim().split("\n")[0]);
  assert.ok(pid > 0, `a child of ${parent} runs ${pattern}`);
  return pid;
}

/** Runs `deno task start` to its end (it ends at once when it refuses to start). */
async function startRefused(env: Record<string, string>): Promise<string[]> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["task", "start"],
    cwd: root,
    env: { NO_COLOR: "1", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    detached: true,
  }).spawn();
  // A guard against a start that runs instead of refusing (the bug under test), not a timing.
  const guard = setTimeout(() => Deno.kill(-child.pid, "SIGKILL"), 120_000);
  const out = await child.output();
  clearTimeout(guard);
  const stderr = new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 1, stderr);
  assert.equal(new TextDecoder().decode(out.stdout), "");
  return stderr.split("\n").filter((line) => line !== "" && !line.startsWith("Task "));
}

Deno.test("the embedded stack keeps its data across a restart", async () => {
  const dir = await Deno.makeTempDir({ prefix: "embedded-" });
  const env = {
    DATABASE_URL: "",
    START_DATA_DIR: dir,
    GATEWAY_PORT: freePort(),
    OAUTH_GRPC_PORT: freePort(),
    OAUTH_HTTP_PORT: freePort(),
    CORE_GRPC_PORT: freePort(),
    CORE_HTTP_PORT: freePort(),
    TOKEN_GRPC_PORT: freePort(),
    TOKEN_HTTP_PORT: freePort(),
    LOG_LEVEL: "warn",
  };
  const api = httpClient(`http://127.0.0.1:${env.GATEWAY_PORT}`);
  try {
    const first = await start(env);
    assert.ok(first.banner.includes("database: embedded PGlite"), first.banner);
    const config = await api("PATCH", "/v1/projects/demo/config", {
      token: first.token,
      json: { application_name: "Demo" },
    });
    assert.equal(config.status, 200, config.text);
    const client = await api("POST", "/v1/projects/demo/clients", {
      token: first.token,
      json: { name: "Web app", type: "web", redirect_uris: ["https://app.example.com/callback"] },
    });
    assert.equal(client.status, 201, client.text);
    const journey = await api("POST", "/v1/core/journeys", {
      token: first.token,
      json: { name: "J" },
    });
    assert.equal(journey.status, 201, journey.text);
    // A second start on the same data folder (other ports, so that the folder is what it meets).
    const startPid = await childPid(first.child.pid, "tools/start.ts");
    // The whole embedded stack, database included, after its first start: PGlite's initdb ran in
    // a child process, whose ~600 MB of WebAssembly memory went with it (740 MB here before).
    const rssMiB = Number(
      /^VmRSS:\s+(\d+) kB$/m.exec(await Deno.readTextFile(`/proc/${startPid}/status`))![1],
    ) / 1024;
    assert.ok(rssMiB < 400, `the embedded stack is ${Math.round(rssMiB)} MiB resident`);
    assert.deepEqual(
      await startRefused({
        ...env,
        GATEWAY_PORT: freePort(),
        OAUTH_GRPC_PORT: freePort(),
        OAUTH_HTTP_PORT: freePort(),
        CORE_GRPC_PORT: freePort(),
        CORE_HTTP_PORT: freePort(),
        TOKEN_GRPC_PORT: freePort(),
        TOKEN_HTTP_PORT: freePort(),
      }),
      [
        `start: the data folder ${dir}/ is in use by process ${startPid} (another "deno task ` +
        'start"?); stop it, or set START_DATA_DIR to another folder',
      ],
    );
    // And on the same ports with another folder.
    const otherDir = await Deno.makeTempDir({ prefix: "embedded-other-" });
    try {
      assert.deepEqual(await startRefused({ ...env, START_DATA_DIR: otherDir }), [
        `start: port ${env.GATEWAY_PORT} (GATEWAY_PORT) is in use (is another "deno task start" ` +
        "running?)",
      ]);
    } finally {
      await Deno.remove(otherDir, { recursive: true });
    }
    first.child.kill("SIGTERM");
    assert.equal((await first.child.status).code, 0, first.output.join(""));

    const second = await start(env);
    assert.equal(second.token.split(".")[0], first.token.split(".")[0]);
    const again = await api("GET", `/v1/projects/demo/clients/${client.body.id}`, {
      token: second.token,
    });
    assert.equal(again.status, 200, again.text);
    assert.deepEqual(again.body, client.body);
    assert.equal(
      (await api("GET", `/v1/core/journeys/${journey.body.id}`, { token: second.token })).status,
      200,
    );
    // Killed, it leaves its lock file behind, which does not keep the next start out.
    Deno.kill(await childPid(second.child.pid, "tools/start.ts"), "SIGKILL");
    await second.child.status;
    const third = await start(env);
    assert.equal(
      (await api("GET", `/v1/projects/demo/clients/${client.body.id}`, { token: third.token }))
        .status,
      200,
    );
    third.child.kill("SIGTERM");
    assert.equal((await third.child.status).code, 0, third.output.join(""));
  } finally {
    await killLeftovers();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("with DATABASE_URL, each component is a process and a dead one is restarted", async () => {
  const { createTestDatabase } = await import("../lib/testing/mod.ts");
  const db = await createTestDatabase();
  const dir = await Deno.makeTempDir({ prefix: "supervised-" });
  const env = {
    DATABASE_URL: db.url,
    START_DATA_DIR: dir,
    GATEWAY_PORT: freePort(),
    OAUTH_GRPC_PORT: freePort(),
    OAUTH_HTTP_PORT: freePort(),
    CORE_GRPC_PORT: freePort(),
    CORE_HTTP_PORT: freePort(),
    TOKEN_GRPC_PORT: freePort(),
    TOKEN_HTTP_PORT: freePort(),
    LOG_LEVEL: "warn",
  };
  const gateway = `http://127.0.0.1:${env.GATEWAY_PORT}`;
  const started = await start(env);
  try {
    assert.ok(started.banner.includes("one process per component"), started.banner);
    const supervisor = await childPid(started.child.pid, "tools/start.ts");
    const pid = await childPid(supervisor, "services/oauth/main.ts");
    // Started as the Dockerfile starts it: its flags, and its environment beside its settings.
    const cmdline = (await Deno.readTextFile(`/proc/${pid}/cmdline`)).split("\0");
    for (const flag of componentFlags) assert.ok(cmdline.includes(flag), flag);
    const environ = (await Deno.readTextFile(`/proc/${pid}/environ`)).split("\0");
    for (const [name, value] of Object.entries(componentEnv)) {
      assert.ok(environ.includes(`${name}=${value}`), `${name}=${value}`);
    }
    Deno.kill(pid, "SIGKILL");
    const ready = async () => (await fetch(`${gateway}/readyz`).then(
      async (r) => (await r.body?.cancel(), r.status),
      () => 0,
    ));
    let sawDown = false;
    const until = Date.now() + 15_000;
    let back = false;
    while (Date.now() < until) {
      const status = await ready();
      if (status !== 200) sawDown = true;
      else if (sawDown) {
        back = true;
        break;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(sawDown && back, "the gateway went not ready and came back after the restart");
    const res = await httpClient(gateway)("GET", "/v1/projects/p/config", { token: started.token });
    assert.equal(res.status, 404, res.text);
  } finally {
    started.child.kill("SIGTERM");
    const { code } = await started.child.status;
    await killLeftovers();
    await Deno.remove(dir, { recursive: true });
    await db.drop();
    assert.equal(code, 0, started.output.join(""));
  }
});
