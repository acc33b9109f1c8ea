/**
 * The stock programs that tests and benchmarks drive against our servers (h2load, h2spec's Go
 * toolchain, a C-core gRPC client, faketime, Chromium for the consent page, openssl for a test
 * certificate) come from Debian's packages. {@link ensurePackages}
 * installs the missing ones with apt-get, so that `deno task test` and `deno task bench` need
 * nothing installed by hand on a fresh Debian machine; where apt-get cannot run (not root, not
 * Debian), it fails with the command a person must run.
 *
 * @module
 */

/** A Debian package and a command that succeeds once it is installed. */
export interface DebianPackage {
  /** The package name, e.g. `nghttp2-client`. */
  name: string;
  /** A command (program and arguments) that succeeds when the package is usable. */
  check: readonly [string, ...string[]];
}

/** The packages this project uses, by what they provide. */
export const packages = {
  h2load: { name: "nghttp2-client", check: ["h2load", "--version"] },
  go: { name: "golang-go", check: ["go", "version"] },
  grpcio: { name: "python3-grpcio", check: ["/usr/bin/python3", "-c", "import grpc"] },
  faketime: { name: "faketime", check: ["faketime", "-f", "+0d", "true"] },
  chromium: { name: "chromium", check: ["/usr/bin/chromium", "--version"] },
  openssl: { name: "openssl", check: ["openssl", "version"] },
} as const satisfies Record<string, DebianPackage>;

/** Whether a command runs and succeeds (a missing program is false, never an exception). */
export async function succeeds(command: readonly [string, ...string[]]): Promise<boolean> {
  try {
    const out = await new Deno.Command(command[0], {
      args: command.slice(1),
      stdin: "null",
      stdout: "null",
      stderr: "null",
      // Without libfaketime (`faketime -f +30d deno task test` preloads it into every child):
      // `h2load --version` hangs under it.
      env: { LD_PRELOAD: "" },
    }).output();
    return out.success;
  } catch {
    return false; // Deno.Command throws when the program does not exist
  }
}

async function aptGet(args: string[]): Promise<boolean> {
  try {
    const out = await new Deno.Command("apt-get", {
      args,
      stdin: "null",
      stdout: "null",
      stderr: "inherit",
      env: { ...Deno.env.toObject(), DEBIAN_FRONTEND: "noninteractive" },
    }).output();
    return out.success;
  } catch {
    return false; // no apt-get here
  }
}

/**
 * Installs the packages whose check fails. Throws an Error naming the packages and the command to
 * install them when that is not possible.
 */
export async function ensurePackages(wanted: readonly DebianPackage[]): Promise<void> {
  const missing: DebianPackage[] = [];
  for (const p of wanted) if (!(await succeeds(p.check))) missing.push(p);
  if (missing.length === 0) return;
  const names = missing.map((p) => p.name);
  // deno-lint-ignore no-console
  console.error(`installing ${names.join(", ")} (apt-get install)`);
  const install = ["install", "-y", "-q", "--no-install-recommends", ...names];
  if (!(await aptGet(install))) {
    await aptGet(["update", "-q"]);
    await aptGet(install);
  }
  const still = [];
  for (const p of missing) if (!(await succeeds(p.check))) still.push(p.name);
  if (still.length > 0) {
    throw new Error(
      `Cannot install ${still.join(", ")}: run \`apt-get install ${still.join(" ")}\` as root`,
    );
  }
}
