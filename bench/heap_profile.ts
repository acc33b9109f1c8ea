/**
 * Loaded before a component's main module by `deno task bench --heap-prof DIR`
 * (`deno run --preload bench/heap_profile.ts`): between SIGUSR1 and SIGUSR2, V8's sampling heap
 * profiler counts every sampled allocation, also those the collector has since freed, so that the
 * profile says where the garbage comes from and not only what stays. At SIGUSR2 the profile goes
 * to `$BENCH_HEAP_PROF_DIR/<pid>.heapprofile` (Chrome DevTools opens it; `bench/profile.ts` prints
 * its top allocation sites).
 *
 * A benchmark tool, never loaded by the product. (Deno's `node:inspector` session also opens the
 * debugger's port, 127.0.0.1:9229, in the first process that can bind it.) The process needs
 * `--allow-sys` for the inspector, and to read and write the folder.
 *
 * @module
 */

import { Session } from "node:inspector";

const dir = Deno.env.get("BENCH_HEAP_PROF_DIR");
if (dir) {
  const session = new Session();
  session.connect();
  // The benchmark starts it once the stack is seeded (SIGUSR1). One sample every 16 KiB allocated
  // on average: enough samples in seconds of load, at little cost.
  Deno.addSignalListener("SIGUSR1", () => {
    session.post("HeapProfiler.startSampling", {
      samplingInterval: 16384,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: true,
    });
  });
  // The benchmark asks for the profile before it stops the stack (SIGUSR2): the inspector answers
  // asynchronously, too late for an exit handler.
  Deno.addSignalListener("SIGUSR2", () => {
    session.post("HeapProfiler.stopSampling", (error, result) => {
      if (error) throw error;
      const file = `${dir}/${Deno.pid}.heapprofile`;
      Deno.writeTextFileSync(`${file}.partial`, JSON.stringify(result.profile));
      Deno.renameSync(`${file}.partial`, file);
    });
  });
}
