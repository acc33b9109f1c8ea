import assert from "node:assert/strict";
import { supervise } from "./supervisor.ts";

/**
 * A component that listens for SIGTERM and exits on it, or, when `exits` is false, takes it and
 * runs on; once it listens, it connects to `up` (a component has no permission to write files).
 */
async function component(dir: string, name: string, exits: boolean, up: Deno.Listener) {
  const entry = `${dir}/${name}.ts`;
  await Deno.writeTextFile(
    entry,
    `Deno.addSignalListener("SIGTERM", () => ${exits ? "Deno.exit(0)" : "{}"});
(await Deno.connect({ hostname: "127.0.0.1", port: ${(up.addr as Deno.NetAddr).port} })).close();
setInterval(() => {}, 1000);`,
  );
  return { name, entry, env: {} };
}

async function untilUp(up: Deno.Listener, count: number) {
  for (let i = 0; i < count; i++) (await up.accept()).close();
}

Deno.test("stop: a component that does not stop on SIGTERM is killed after the bound, and named", async () => {
  const dir = await Deno.makeTempDir({ prefix: "supervisor-" });
  using up = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  try {
    const supervisor = supervise([await component(dir, "stubborn", false, up)]);
    await untilUp(up, 1);
    assert.deepEqual(await supervisor.stop(1000), ["stubborn"]);
    assert.deepEqual(supervisor.state("stubborn"), {
      running: false,
      exits: 1,
      lastExit: "signal SIGKILL",
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("stop: components that stop on SIGTERM are waited for, and none is named", async () => {
  const dir = await Deno.makeTempDir({ prefix: "supervisor-" });
  using up = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  try {
    const supervisor = supervise([
      await component(dir, "one", true, up),
      await component(dir, "two", true, up),
    ]);
    await untilUp(up, 2);
    // A bound no exit on SIGTERM comes near, however busy the machine.
    assert.deepEqual(await supervisor.stop(60_000), []);
    for (const name of ["one", "two"]) {
      assert.deepEqual(supervisor.state(name), { running: false, exits: 1, lastExit: "code 0" });
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
