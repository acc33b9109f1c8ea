/**
 * `deno task start` run as a user runs it, for the tests of it: the settings that put its
 * listeners on free ports, and the task spawned in a process group of its own with its output read
 * line by line.
 *
 * @module
 */

import { freePort, readLines } from "./stack.ts";

const root = new URL("../../", import.meta.url);

/** The settings of `deno task start`'s listeners. */
export type StartTaskPorts = Record<
  | "GATEWAY_PORT"
  | "OAUTH_GRPC_PORT"
  | "OAUTH_HTTP_PORT"
  | "CORE_GRPC_PORT"
  | "CORE_HTTP_PORT"
  | "TOKEN_GRPC_PORT"
  | "TOKEN_HTTP_PORT",
  string
>;

/** Every port setting of `deno task start`, each a free loopback port not handed out before. */
export function startTaskPorts(): StartTaskPorts {
  return {
    GATEWAY_PORT: String(freePort()),
    OAUTH_GRPC_PORT: String(freePort()),
    OAUTH_HTTP_PORT: String(freePort()),
    CORE_GRPC_PORT: String(freePort()),
    CORE_HTTP_PORT: String(freePort()),
    TOKEN_GRPC_PORT: String(freePort()),
    TOKEN_HTTP_PORT: String(freePort()),
  };
}

/** A `deno task start` that {@link spawnStartTask} spawned. */
export interface StartTask {
  /** The `deno task` process, the leader of a process group of its own. */
  child: Deno.ChildProcess;
  /** Every line the group wrote to stdout, so far. */
  stdout: string[];
  /** Every line the group wrote to stderr, so far. */
  stderr: string[];
  /**
   * Resolves once it says the stack is up, with its stdout up to the dev token's line and that
   * token; rejects if its output ends first.
   */
  up: Promise<{ banner: string; token: string }>;
  /**
   * Resolves with its exit status once it has exited and its output has ended: every process of
   * the group that held stdout or stderr has exited too.
   */
  ended: Promise<Deno.CommandStatus>;
  /**
   * SIGTERM to the task (which passes it on to start, which stops the stack), then waits for it to
   * exit (whatever still runs 15 s on is killed), kills what its group left behind (a failed start
   * may leave components) and waits for its output to end. Resolves with its exit status.
   */
  stop(): Promise<Deno.CommandStatus>;
}

/**
 * Spawns `deno task start` in the repository's folder, in a process group of its own, with `env`
 * added to the test's environment (and NO_COLOR) and no stdin. Both of its output streams are
 * read to their end, line by line.
 */
export function spawnStartTask(env: Record<string, string>): StartTask {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["task", "start"],
    cwd: root,
    env: { NO_COLOR: "1", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    detached: true,
  }).spawn();
  const stdout: string[] = [];
  const stderr: string[] = [];
  const up = Promise.withResolvers<{ banner: string; token: string }>();
  let banner = "";
  const closed = Promise.all([
    readLines(child.stdout, (line) => {
      stdout.push(line);
      banner += `${line}\n`;
      const token = /export TOKEN=(\S+)/.exec(line)?.[1];
      if (token !== undefined) up.resolve({ banner, token });
    }),
    readLines(child.stderr, (line) => void stderr.push(line)),
  ]);
  closed.then(
    () => up.reject(new Error(`deno task start exited early:\n${banner}\n${stderr.join("\n")}`)),
    (error) => up.reject(error),
  );
  const ended = Promise.all([child.status, closed]).then(([status]) => status);
  // Awaited by whoever needs them; never an unhandled rejection.
  up.promise.catch(() => {});
  ended.catch(() => {});
  const killGroup = () => {
    try {
      Deno.kill(-child.pid, "SIGKILL");
    } catch { /* the group is gone */ }
  };
  const stop = async () => {
    try {
      child.kill("SIGTERM");
    } catch { /* it has exited */ }
    const guard = setTimeout(killGroup, 15_000);
    await child.status;
    clearTimeout(guard);
    killGroup();
    return await ended;
  };
  return { child, stdout, stderr, up: up.promise, ended, stop };
}
