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
import type { ProcEnv } from "./stack.ts";

/** A clock of {@link movableClock}. */
export interface MovableClock {
  /** The settings that put a process on this clock (spawn it with them). */
  env: ProcEnv;
  /** How far it has been moved ahead of where it started, in seconds. */
  readonly aheadSeconds: number;
  /** Moves it `seconds` further ahead, at once, for every process on it. */
  advance(seconds: number): Promise<void>;
  /** Removes its file (the processes on it are the caller's to stop first). */
  close(): Promise<void>;
}

/** Seconds per unit of a libfaketime offset (`+30d`). */
const units: Record<string, number> = { "": 1, s: 1, m: 60, h: 3600, d: 86_400, y: 31_536_000 };

/**
 * A clock that starts at this process's time: the real time, or the shifted one when the suite
 * runs under `faketime -f +30d` (its offset, in FAKETIME, is the clock's start). Installs
 * `faketime` from Debian when missing.
 */
export async function movableClock(): Promise<MovableClock> {
  await ensurePackages([packages.faketime]);
  const dir = await Deno.makeTempDir({ prefix: "clock-" });
  const file = `${dir}/offset`;
  const inherited = /^([+-]\d+)([smhdy]?)$/.exec(Deno.env.get("FAKETIME") ?? "");
  const base = inherited ? Number(inherited[1]) * units[inherited[2]!]! : 0;
  let ahead = 0;
  // Written whole and renamed into place: a process never reads half an offset.
  const write = async () => {
    const offset = base + ahead;
    await Deno.writeTextFile(`${file}.new`, `${offset < 0 ? "" : "+"}${offset}\n`);
    await Deno.rename(`${file}.new`, file);
  };
  await write();
  return {
    env: {
      // A FAKETIME of the suite's own would win over the file.
      FAKETIME: undefined,
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
