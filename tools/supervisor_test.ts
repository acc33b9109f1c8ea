import assert from "node:assert/strict";
import { supervise } from "./supervisor.ts";

/**
 * A component that does `onTerm` on SIGTERM; once it listens for it, it connects to `up` (a
 * component has no permission to write files).
 */
async function component(dir: string, name: string, onTerm: string, up: Deno.Listener) {
  const entry = `${dir}/${name}.ts`;
  await Deno.writeTextFile(
    entry,
    `Deno.addSignalListener("SIGTERM", () => { ${onTerm} });
(await Deno.connect({ hostname: "127.0.0.1", port: ${(up.addr as Deno.NetAddr).port} })).close();
setInterval(() => {}, 1000);`,
  );
  return { name, entry, env: {} };
}

async function untilUp(up: Deno.Listener, count: number) {
  for (let i = 0; i < count; i++) (await up.accept()).close();
}

Deno.test("stop: a component that stops on SIGTERM is waited for; one that does not is killed and named", async () => {
  const dir = await Deno.makeTempDir({ prefix: "supervisor-" });
  using up = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  try {
    const supervisor = supervise([
      await component(dir, "polite", "Deno.exit(0);", up),
      await component(dir, "stubborn", "/* goes on */", up),
    ]);
    await untilUp(up, 2);
    // The bound is what is under test, not a timing: "polite" exits at once either way.
    assert.deepEqual(await supervisor.stop(1000), ["stubborn"]);
    assert.deepEqual(supervisor.state("polite"), { running: false, exits: 1, lastExit: "code 0" });
    assert.deepEqual(supervisor.state("stubborn"), {
      running: false,
      exits: 1,
      lastExit: "signal SIGKILL",
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("stop: when every component stops on SIGTERM, none is named", async () => {
  const dir = await Deno.makeTempDir({ prefix: "supervisor-" });
  using up = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  try {
    const supervisor = supervise([await component(dir, "polite", "Deno.exit(0);", up)]);
    await untilUp(up, 1);
    assert.deepEqual(await supervisor.stop(60_000), []);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
