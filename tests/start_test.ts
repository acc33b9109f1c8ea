/**
 * `deno task start`, run as a user runs it: with no DATABASE_URL, the whole stack in one process on
 * embedded PGlite in a data folder anywhere (START_DATA_DIR), used by one start at a time, and a
 * client created with the README's curl is still there after a restart, also after a kill; with
 * DATABASE_URL, one process per component, started as the Dockerfile starts it, and one that dies
 * is restarted. In both, the gateway has the development sign-in page, where the consent flow sends
 * a browser without a session.
 */

import assert from "node:assert/strict";
import { componentEnv, componentFlags } from "../lib/platform/mod.ts";
import {
  httpClient,
  spawnStartTask,
  type StartTask,
  startTaskPorts,
  within,
} from "../lib/testing/mod.ts";

/** A `deno task start` that said the stack is up, and its banner and dev token. */
interface Started extends StartTask {
  token: string;
  banner: string;
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

/** `deno task start`, once it says the stack is up. */
async function start(env: Record<string, string>): Promise<Started> {
  const task = spawnStartTask(env);
  spawned.add(task.child);
  // A guard against a start that never comes up (a bug under test, not a timing): it is stopped
  // and the test fails with what it said, instead of hanging until the runner's limit.
  try {
    return { ...task, ...(await within(task.up, 180_000, "banner from deno task start")) };
  } catch (error) {
    await killLeftovers();
    throw new Error(`${(error as Error).message}\n${task.stderr.join("\n")}`);
  }
}

/**
 * Ctrl-C: SIGINT to the start's whole process group, as a terminal sends it. Resolves to its exit
 * code and the stderr it wrote after the signal (the listeners close first, then this is said).
 */
async function ctrlC(started: Started): Promise<{ code: number; said: string }> {
  const before = started.stderr.length;
  Deno.kill(-started.child.pid, "SIGINT");
  // A guard against a stop that never ends (a bug under test, not a timing): what still runs is
  // named, then killed, and the test fails saying so instead of hanging until the runner's limit.
  let leftover = "";
  const guard = setTimeout(async () => {
    const ps = await new Deno.Command("ps", {
      args: ["-o", "pid,stat,args", "-g", String(started.child.pid)],
      stdout: "piped",
    }).output();
    leftover = new TextDecoder().decode(ps.stdout);
    try {
      Deno.kill(-started.child.pid, "SIGKILL");
    } catch { /* the group is gone */ }
  }, 120_000);
  // Once it has exited and its output has ended: every process of the group that held it exited
  // (a process that left the group and holds its output is named by the guard's listing).
  const { code } = await within(started.ended, 150_000, "end of the stack after Ctrl-C").catch(
    (error) => assert.fail(`${error.message}; still running:\n${leftover}`),
  );
  clearTimeout(guard);
  const said = started.stderr.slice(before).map((line) => `${line}\n`).join("");
  assert.equal(leftover, "", `Ctrl-C did not stop the stack in 120 s; still running:\n${said}`);
  return { code, said };
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
  const task = spawnStartTask(env);
  // A guard against a start that runs instead of refusing (the bug under test), not a timing.
  const guard = setTimeout(() => Deno.kill(-task.child.pid, "SIGKILL"), 120_000);
  const { code } = await task.ended;
  clearTimeout(guard);
  assert.equal(code, 1, task.stderr.join("\n"));
  assert.deepEqual(task.stdout, []);
  return task.stderr.filter((line) => line !== "" && !line.startsWith("Task "));
}

/**
 * The development sign-in page is on: `/` links it, the consent flow without a session leads to
 * it (LOGIN_URL) once the request is checked, and its form gives a session the token service
 * takes.
 */
async function assertDevSignIn(gateway: string, token: string): Promise<void> {
  assert.match(await (await fetch(`${gateway}/`)).text(), /href="\/dev\/sign-in"/);
  const api = httpClient(gateway);
  const config = await api("PATCH", "/v1/projects/signin/config", {
    token,
    json: { application_name: "Sign-in" },
  });
  assert.equal(config.status, 200, config.text);
  const client = await api("POST", "/v1/projects/signin/clients", {
    token,
    json: { name: "Web app", type: "web", redirect_uris: ["https://app.example.com/callback"] },
  });
  assert.equal(client.status, 201, client.text);
  const query = (clientId: string) =>
    new URLSearchParams({
      response_type: "code",
      client_id: clientId,
      redirect_uri: "https://app.example.com/callback",
      code_challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
      code_challenge_method: "S256",
    });
  // An unknown client is refused before anyone is asked to sign in.
  const unknown = await fetch(`${gateway}/oauth2/authorize?${query("cli_unknown")}`, {
    redirect: "manual",
  });
  assert.equal(unknown.status, 400);
  assert.match(await unknown.text(), /cannot be completed/);
  const authorize = `/oauth2/authorize?${query(client.body.id)}`;
  const res = await fetch(`${gateway}${authorize}`, { redirect: "manual" });
  assert.equal(res.status, 302);
  assert.equal(
    res.headers.get("location"),
    `${gateway}/dev/sign-in?return_to=${encodeURIComponent(authorize)}`,
  );
  const signedIn = await fetch(`${gateway}/dev/sign-in`, {
    method: "POST",
    redirect: "manual",
    headers: { origin: gateway, "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ account: "ada@example.com", return_to: authorize }).toString(),
  });
  assert.equal(signedIn.status, 303);
  assert.equal(signedIn.headers.get("location"), authorize);
  const session = /^session=[^;]+/.exec(signedIn.headers.get("set-cookie") ?? "")?.[0];
  assert.ok(session, "a session cookie");
  // Signed in: the consent page, no more sign-in.
  const page = await fetch(`${gateway}${authorize}`, {
    redirect: "manual",
    headers: { cookie: session },
  });
  assert.equal(page.status, 200);
  assert.match(await page.text(), /Sign-in/);
}

Deno.test("the embedded stack keeps its data across a restart", async () => {
  const dir = await Deno.makeTempDir({ prefix: "embedded-" });
  const env = {
    DATABASE_URL: "",
    START_DATA_DIR: dir,
    ...startTaskPorts(),
    LOG_LEVEL: "warn",
  };
  const api = httpClient(`http://127.0.0.1:${env.GATEWAY_PORT}`);
  try {
    const first = await start(env);
    assert.ok(first.banner.includes("database: embedded PGlite"), first.banner);
    await assertDevSignIn(`http://127.0.0.1:${env.GATEWAY_PORT}`, first.token);
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
      await startRefused({ ...env, ...startTaskPorts() }),
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
    assert.equal((await first.child.status).code, 0, first.stderr.join("\n"));

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
    // Ctrl-C says it stopped, once the stack has.
    const { code, said } = await ctrlC(third);
    assert.equal(code, 0, third.stderr.join("\n"));
    assert.match(said, /(^|\n)start: stopping\.\.\.\n(.*\n)*start: stopped\n$/, said);
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
    ...startTaskPorts(),
    LOG_LEVEL: "warn",
  };
  const gateway = `http://127.0.0.1:${env.GATEWAY_PORT}`;
  const started = await start(env);
  try {
    assert.ok(started.banner.includes("one process per component"), started.banner);
    await within(assertDevSignIn(gateway, started.token), 60_000, "development sign-in");
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
    // Each probe bounded: a gateway that accepts and never answers is a probe that failed.
    const ready = async () => (await fetch(`${gateway}/readyz`, {
      signal: AbortSignal.timeout(5_000),
    }).then(
      async (r) => (await r.body?.cancel(), r.status),
      () => 0,
    ));
    let sawDown = false;
    // A guard, not a timing: a restart takes a second or two, far longer on a busy machine.
    const until = Date.now() + 60_000;
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
    const res = await within(
      httpClient(gateway)("GET", "/v1/projects/p/config", { token: started.token }),
      30_000,
      "answer from the restarted stack",
    );
    assert.equal(res.status, 404, res.text);
  } finally {
    // Ctrl-C: every component stops (each gets the SIGINT, and SIGTERM from the supervisor), and
    // then start says it stopped.
    const { code, said } = await ctrlC(started);
    await killLeftovers();
    await Deno.remove(dir, { recursive: true });
    await within(db.drop(), 60_000, "drop of the test database");
    assert.equal(code, 0, started.stderr.join("\n"));
    assert.match(said, /(^|\n)start: stopping\.\.\.\n(.*\n)*start: stopped\n$/, said);
  }
});
