/**
 * A wall clock that a test moves for the processes it starts, so that what happens "an hour later"
 * is tested in a second. It is the libfaketime that `faketime -f +30d deno task test` runs the
 * whole suite under (Debian's `faketime`), preloaded into each process of the clock, which reads
 * its offset from a file at every reading of the wall clock: moving the clock is rewriting the
 * file. Only the wall clock moves (`Date.now()`); monotonic time, which timers and deadlines run
 * on, goes on as it is.
 *
 * @module
 */

import { ensurePackages, packages } from "../../tools/debian.ts";

/** A clock of {@link movableClock}. */
export interface MovableClock {
  /** The settings that put a process on this clock (spawn it with them). */
  env: Record<string, string>;
  /** How far ahead of the real clock it is, in seconds. */
  readonly aheadSeconds: number;
  /** Moves it `seconds` further ahead, at once, for every process on it. */
  advance(seconds: number): Promise<void>;
  /** Removes its file (the processes on it are the caller's to stop first). */
  close(): Promise<void>;
}

/** A clock that starts at the real time; installs `faketime` from Debian when missing. */
export async function movableClock(): Promise<MovableClock> {
  await ensurePackages([packages.faketime]);
  const dir = await Deno.makeTempDir({ prefix: "clock-" });
  const file = `${dir}/offset`;
  let ahead = 0;
  // Written whole and renamed into place: a process never reads half an offset.
  const write = async () => {
    await Deno.writeTextFile(`${file}.new`, `+${ahead}\n`);
    await Deno.rename(`${file}.new`, file);
  };
  await write();
  return {
    env: {
      // `$LIB` is the dynamic loader's, as `faketime -m` writes it.
      LD_PRELOAD: "/usr/$LIB/faketime/libfaketimeMT.so.1",
      FAKETIME_TIMESTAMP_FILE: file,
      FAKETIME_NO_CACHE: "1",
      FAKETIME_DONT_FAKE_MONOTONIC: "1",
    },
    get aheadSeconds() {
      return ahead;
    },
    async advance(seconds) {
      if (!Number.isInteger(seconds) || seconds < 0) {
        throw new Error(`Cannot advance a clock by ${seconds} s: whole seconds forward only`);
      }
      ahead += seconds;
      await write();
    },
    close: () => Deno.remove(dir, { recursive: true }),
  };
}
