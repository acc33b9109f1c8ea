/**
 * The production-like local mode of `deno task start` (DATABASE_URL set): each component is its
 * own process, started as the Dockerfile starts it (lib/platform/run_flags.ts: its flags and its
 * environment beside its settings); one that dies is restarted with backoff (0.5 s doubling to
 * 30 s, reset after 10 s of uptime).
 *
 * @module
 */

import { componentEnv, componentFlags } from "../lib/platform/mod.ts";

/** One component process. */
export interface Component {
  /** Its name, for messages. */
  name: string;
  /** Its entry module, relative to the project root. */
  entry: string;
  /** Its settings. */
  env: Record<string, string>;
}

/** What became of a component's processes so far. */
export interface ComponentState {
  /** Whether a process of it runs now. */
  running: boolean;
  /** How many of its processes have exited. */
  exits: number;
  /** How the last one ended: its exit code, or the signal that ended it. */
  lastExit?: string;
}

/** The supervisor of {@link supervise}. */
export interface Supervisor {
  /**
   * Sends SIGTERM to every process and waits for them; none is restarted after. One still running
   * `killAfterMs` later is killed (SIGKILL), as Kubernetes does after a pod's grace period, and
   * named in a line on stderr; resolves to the names of those killed.
   */
  stop(killAfterMs: number): Promise<string[]>;
  /** What became of the component named `name`. */
  state(name: string): ComponentState;
}

const root = new URL("../", import.meta.url);

/** Runs the components until `stop()`. */
export function supervise(components: Component[]): Supervisor {
  let stopping = false;
  const stopped = Promise.withResolvers<void>();
  const running = new Map<string, Deno.ChildProcess>();
  const states = new Map<string, ComponentState>(
    components.map((c) => [c.name, { running: false, exits: 0 }]),
  );
  const loops = components.map(async (c) => {
    const state = states.get(c.name)!;
    let backoff = 500;
    while (!stopping) {
      const started = Date.now();
      const child = new Deno.Command(Deno.execPath(), {
        args: ["run", ...componentFlags, c.entry],
        cwd: root,
        env: { ...componentEnv, ...c.env },
        stdout: "inherit",
        stderr: "inherit",
      }).spawn();
      running.set(c.name, child);
      state.running = true;
      const status = await child.status;
      running.delete(c.name);
      state.running = false;
      state.exits++;
      state.lastExit = status.signal ? `signal ${status.signal}` : `code ${status.code}`;
      if (stopping) return;
      backoff = Date.now() - started > 10_000 ? 500 : Math.min(backoff * 2, 30_000);
      // deno-lint-ignore no-console
      console.error(`start: ${c.name} exited (${state.lastExit}); restarting in ${backoff} ms`);
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([new Promise((r) => timer = setTimeout(r, backoff)), stopped.promise]);
      clearTimeout(timer);
    }
  });
  return {
    async stop(killAfterMs) {
      stopping = true;
      stopped.resolve();
      for (const child of running.values()) {
        try {
          child.kill("SIGTERM");
        } catch { /* already gone */ }
      }
      const killed: string[] = [];
      const timer = setTimeout(() => {
        for (const [name, child] of running) {
          killed.push(name);
          // deno-lint-ignore no-console
          console.error(`start: ${name} did not stop within ${killAfterMs / 1000} s; killed`);
          try {
            child.kill("SIGKILL");
          } catch { /* gone meanwhile */ }
        }
      }, killAfterMs);
      await Promise.all(loops);
      clearTimeout(timer);
      return killed;
    },
    state: (name) => ({ ...states.get(name)! }),
  };
}
