/**
 * The production-like local mode of `deno task start` (DATABASE_URL set): each component is its
 * own process, started as the Dockerfile starts it (lib/run_flags.ts: its flags and its
 * environment beside its settings); one that dies is restarted with backoff (0.5 s doubling to
 * 30 s, reset after 10 s of uptime).
 *
 * @module
 */

import { componentEnv, componentFlags } from "../lib/run_flags.ts";

/** One component process. */
export interface Component {
  /** Its name, for messages. */
  name: string;
  /** Its entry module, relative to the project root. */
  entry: string;
  /** Its settings. */
  env: Record<string, string>;
}

const root = new URL("../", import.meta.url);

/** Runs the components until `stop()`, which sends SIGTERM and waits for them. */
export function supervise(components: Component[]): { stop(): Promise<void> } {
  let stopping = false;
  const running = new Map<string, Deno.ChildProcess>();
  const loops = components.map(async (c) => {
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
      const status = await child.status;
      running.delete(c.name);
      if (stopping) return;
      backoff = Date.now() - started > 10_000 ? 500 : Math.min(backoff * 2, 30_000);
      // deno-lint-ignore no-console
      console.error(`start: ${c.name} exited (code ${status.code}); restarting in ${backoff} ms`);
      await new Promise((r) => setTimeout(r, backoff));
    }
  });
  return {
    async stop() {
      stopping = true;
      for (const child of running.values()) {
        try {
          child.kill("SIGTERM");
        } catch { /* already gone */ }
      }
      await Promise.all(loops);
    },
  };
}
