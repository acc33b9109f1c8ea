import assert from "node:assert/strict";
import { topAllocations } from "./profile.ts";

// A process that allocates without end, in one function, and says when it has allocated a lot
// since it was told to start (SIGUSR1, which also starts the preloaded profiler).
const script = `
let started = false;
let since = 0;
Deno.addSignalListener("SIGUSR1", () => { started = true; });
function allocateLots() {
  let kept = 0;
  for (let i = 0; i < 10000; i++) kept += new Array(16).fill(i).length;
  return kept;
}
console.log("ready");
setInterval(() => {
  allocateLots();
  if (started && ++since === 50) console.log("allocated");
}, 1);
`;

Deno.test("bench --heap-prof: the preloaded profiler writes a profile on SIGUSR2 whose top allocation site is the allocating function", async () => {
  const dir = await Deno.makeTempDir();
  const file = `${dir}/script.ts`;
  await Deno.writeTextFile(file, script);
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      `--preload=${new URL("./heap_profile.ts", import.meta.url).pathname}`,
      `--allow-write=${dir}`,
      `--allow-read=${dir}`,
      "--allow-env",
      "--allow-sys", // the inspector, as every component has
      file,
    ],
    env: { BENCH_HEAP_PROF_DIR: dir },
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const waitFor = async (word: string) => {
    let text = "";
    while (!text.includes(word)) {
      const { value, done } = await lines.read();
      if (done) throw new Error(`the script ended before saying ${word}`);
      text += value;
    }
  };
  try {
    await waitFor("ready");
    child.kill("SIGUSR1");
    await waitFor("allocated");
    child.kill("SIGUSR2");
    const profile = `${dir}/${child.pid}.heapprofile`;
    // A bound for a failure, not a timing: the profile is written within a second here.
    for (let i = 0; i < 300; i++) {
      if (await Deno.stat(profile).then(() => true, () => false)) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const top = topAllocations(JSON.parse(await Deno.readTextFile(profile)), 3);
    assert.equal(top[0]?.name, "allocateLots", JSON.stringify(top));
    assert.ok(top[0]!.pct > 50, JSON.stringify(top));
  } finally {
    child.kill("SIGKILL");
    await child.status;
    await lines.cancel();
    await Deno.remove(dir, { recursive: true });
  }
});
