/**
 * Runs buf with the third-party .proto files our API imports staged into `.proto_deps/`.
 *
 * The imports (google.api.http, google.api.field_behavior, google.rpc error details,
 * grpc.health.v1, grpc.reflection.v1) come from pinned npm packages listed in deno.json, so no
 * schema registry is needed and nothing third-party is committed. Two are staged though no file
 * of ours imports them, for the code buf generates from every file of the workspace:
 * grpc.reflection.v1alpha (the services answer reflection under both names, lib/rpc/reflection.ts)
 * and google.rpc.Status (what `grpc-status-details-bin` carries, decoded by the tests).
 *
 *   deno task buf lint
 *   deno task buf breaking            (against each .proto file's first committed version)
 *   deno task gen                     (= buf generate)
 */

const root = new URL("../", import.meta.url);
const depsDir = new URL(".proto_deps/", root);

/** Where each staged import comes from: [path under .proto_deps, npm package, path in package]. */
const imports: ReadonlyArray<readonly [string, string, string]> = [
  ["google/api/annotations.proto", "google-proto-files", "google/api/annotations.proto"],
  ["google/api/http.proto", "google-proto-files", "google/api/http.proto"],
  ["google/api/field_behavior.proto", "google-proto-files", "google/api/field_behavior.proto"],
  ["google/rpc/error_details.proto", "google-proto-files", "google/rpc/error_details.proto"],
  ["google/rpc/status.proto", "google-proto-files", "google/rpc/status.proto"],
  ["grpc/health/v1/health.proto", "grpc-health-check", "proto/health/v1/health.proto"],
  [
    "grpc/reflection/v1/reflection.proto",
    "@grpc/reflection",
    "build/proto/grpc/reflection/v1/reflection.proto",
  ],
  [
    "grpc/reflection/v1alpha/reflection.proto",
    "@grpc/reflection",
    "build/proto/grpc/reflection/v1alpha/reflection.proto",
  ],
];

async function run(cmd: string, args: string[]): Promise<number> {
  const { code } = await new Deno.Command(cmd, {
    args,
    cwd: root,
    stdout: "inherit",
    stderr: "inherit",
  })
    .output();
  return code;
}

async function stageImports(): Promise<void> {
  if ((await run(Deno.execPath(), ["install", "--quiet"])) !== 0) {
    throw new Error("Cannot stage proto imports: `deno install` failed");
  }
  await Deno.remove(depsDir, { recursive: true }).catch(() => {});
  for (const [target, pkg, source] of imports) {
    const to = new URL(target, depsDir);
    await Deno.mkdir(new URL(".", to), { recursive: true });
    await Deno.copyFile(new URL(`node_modules/${pkg}/${source}`, root), to);
  }
}

async function git(args: string[]): Promise<string> {
  const out = await new Deno.Command("git", { args, cwd: root, stdout: "piped", stderr: "piped" })
    .output();
  if (out.code !== 0) {
    throw new Error(`git ${args.join(" ")}: ${new TextDecoder().decode(out.stderr).trim()}`);
  }
  return new TextDecoder().decode(out.stdout);
}

/**
 * Compares the API with its first published form: every `.proto` file ever committed under
 * `proto/` is taken as the commit that first added it wrote it (the v1 release of that file), the
 * set is built into an image with today's staged imports, and `buf breaking` (FILE rules) fails on
 * any change that would break a client of that version, a deleted file included.
 *
 * The baseline comes from the history itself rather than from a commit id written down in a file,
 * which a rewritten or squashed history would leave pointing at nothing. A shallow clone sees only
 * its own commits, so CI must clone with history (a plain `git clone` does).
 */
async function breaking(buf: string[], rest: string[]): Promise<number> {
  if ((await git(["rev-parse", "--is-shallow-repository"])).trim() === "true") {
    // deno-lint-ignore no-console
    console.error("buf breaking: this clone is shallow; fetch the history (git fetch --unshallow)");
    return 1;
  }
  const added = await git([
    "log",
    "--diff-filter=A",
    "--reverse",
    "--format=commit %H",
    "--name-only",
    "--",
    "proto/*.proto",
  ]);
  const firstVersion = new Map<string, string>();
  let commit = "";
  for (const line of added.split("\n")) {
    if (line.startsWith("commit ")) commit = line.slice(7);
    else if (line.endsWith(".proto") && !firstVersion.has(line)) firstVersion.set(line, commit);
  }
  const tmp = await Deno.makeTempDir({ prefix: "buf-baseline-" });
  try {
    for (const [file, at] of firstVersion) {
      const to = `${tmp}/${file}`;
      await Deno.mkdir(to.slice(0, to.lastIndexOf("/")), { recursive: true });
      await Deno.writeTextFile(to, await git(["show", `${at}:${file}`]));
    }
    await Deno.copyFile(new URL("buf.yaml", root), `${tmp}/buf.yaml`);
    await run("cp", ["-r", depsDir.pathname, `${tmp}/.proto_deps`]);
    // deno-lint-ignore no-console
    console.error(
      `buf breaking: against the first committed version of ${firstVersion.size} files`,
    );
    if (firstVersion.size === 0) return 0;
    const image = `${tmp}/baseline.binpb`;
    if ((await run(Deno.execPath(), [...buf, "build", tmp, "-o", image])) !== 0) return 1;
    const current = `${tmp}/current.binpb`;
    if ((await run(Deno.execPath(), [...buf, "build", ".", "-o", current])) !== 0) return 1;
    return await run(Deno.execPath(), [...buf, "breaking", current, "--against", image, ...rest]);
  } finally {
    await Deno.remove(tmp, { recursive: true });
  }
}

async function main(args: string[]): Promise<number> {
  await stageImports();
  const buf = ["run", "-A", "npm:@bufbuild/buf@1.74.0"];
  if (args[0] === "breaking") return await breaking(buf, args.slice(1));
  return await run(Deno.execPath(), [...buf, ...args]);
}

Deno.exit(await main(Deno.args));
