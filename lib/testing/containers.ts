/**
 * Docker for the tests: whether an engine answers, the images (the project's, and Postgres), and
 * containers started from a Deployment of the rendered manifests with what Kubernetes would give
 * it: command, environment, limits, user and filesystem.
 *
 * The images are settings whose defaults are the official ones:
 * - `POSTGRES_IMAGE`: Postgres for testcontainers and the container stack (`postgres:16-alpine`);
 * - `REGISTRY_IMAGE`: the project's image, already built (else built here from deploy/Dockerfile);
 * - `DENO_IMAGE`: the base that build uses (else the Dockerfile's default, the official image).
 *
 * @module
 */

import type { K8sObject } from "../../tools/check_manifests.ts";

/** The Postgres image of testcontainers and of the container stack. */
export const postgresImage = Deno.env.get("POSTGRES_IMAGE") || "postgres:16-alpine";

const root = new URL("../../", import.meta.url);
const decoder = new TextDecoder();

/** Why no Docker engine can be used here, in one line, or undefined when one answers. */
export async function dockerProblem(): Promise<string | undefined> {
  try {
    const out = await new Deno.Command("docker", {
      args: ["info", "--format", "{{.ServerVersion}}"],
      stdout: "null",
      stderr: "piped",
    }).output();
    if (out.success) return undefined;
    const why = decoder.decode(out.stderr).trim().split("\n").at(-1);
    return `no Docker engine answers (docker info: ${why})`;
  } catch {
    return "no Docker engine answers (no docker command)";
  }
}

/** Runs the docker CLI; resolves with its trimmed stdout, throws with its stderr on failure. */
export async function docker(...args: string[]): Promise<string> {
  const out = await new Deno.Command("docker", {
    args,
    cwd: root,
    stdout: "piped",
    stderr: "piped",
  })
    .output();
  if (!out.success) {
    throw new Error(`docker ${args[0]} failed: ${decoder.decode(out.stderr).trim()}`);
  }
  return decoder.decode(out.stdout).trim();
}

/**
 * The project's image: `REGISTRY_IMAGE` when set (CI builds it before the tests), else built from
 * deploy/Dockerfile, on `DENO_IMAGE` when set.
 */
export async function registryImage(): Promise<string> {
  const given = Deno.env.get("REGISTRY_IMAGE");
  if (given) return given;
  const base = Deno.env.get("DENO_IMAGE");
  await docker(
    "build",
    "-q",
    "-f",
    "deploy/Dockerfile",
    ...(base ? ["--build-arg", `DENO_IMAGE=${base}`] : []),
    "-t",
    "oauth-registry:test",
    ".",
  );
  return "oauth-registry:test";
}

/** Kubernetes quantities as docker takes them: `256Mi` -> `256m`, `500m` CPU -> `0.5`. */
function memory(quantity: string): string {
  const m = /^(\d+)(Ki|Mi|Gi)?$/.exec(quantity);
  if (!m) throw new Error(`memory quantity ${quantity}`);
  return `${m[1]}${({ Ki: "k", Mi: "m", Gi: "g" } as Record<string, string>)[m[2] ?? ""] ?? "b"}`;
}

function cpus(quantity: string): string {
  return quantity.endsWith("m") ? String(Number(quantity.slice(0, -1)) / 1000) : quantity;
}

/**
 * `docker run` arguments for a Deployment's first container, as its pod spec asks: the image's
 * command (`args`), its environment, CPU and memory limits, user and group, a read-only root with
 * each emptyDir volume as a tmpfs of its sizeLimit, dropped capabilities, no privilege escalation,
 * and the grace period as the stop timeout. The container's name on the network is the
 * Deployment's (its Service's) name. `publish` lists container ports to publish on 127.0.0.1
 * (random host ports).
 */
export function runArguments(
  deployment: K8sObject,
  options: {
    name: string;
    network: string;
    image: string;
    env: Record<string, string>;
    publish: number[];
  },
): string[] {
  const pod = deployment.spec.template.spec;
  const c = pod.containers[0];
  const args = [
    "--name",
    options.name,
    "--network",
    options.network,
    "--network-alias",
    deployment.metadata.name,
  ];
  const user = pod.securityContext?.runAsUser;
  if (user !== undefined) args.push("--user", `${user}:${pod.securityContext?.runAsGroup ?? user}`);
  if (c.securityContext?.readOnlyRootFilesystem) args.push("--read-only");
  for (const cap of c.securityContext?.capabilities?.drop ?? []) args.push("--cap-drop", cap);
  if (c.securityContext?.allowPrivilegeEscalation === false) {
    args.push("--security-opt", "no-new-privileges");
  }
  if (c.resources?.limits?.memory) {
    // The same limit for memory and memory+swap: no swap, as on a Kubernetes node.
    args.push("--memory", memory(c.resources.limits.memory));
    args.push("--memory-swap", memory(c.resources.limits.memory));
  }
  if (c.resources?.limits?.cpu) args.push("--cpus", cpus(c.resources.limits.cpu));
  for (const mount of c.volumeMounts ?? []) {
    const volume = pod.volumes?.find((v: K8sObject) => v.name === mount.name);
    if (!volume?.emptyDir) {
      throw new Error(`${options.name}: volume ${mount.name} is not an emptyDir`);
    }
    const size = volume.emptyDir.sizeLimit;
    args.push("--tmpfs", size ? `${mount.mountPath}:size=${memory(size)}` : mount.mountPath);
  }
  if (pod.terminationGracePeriodSeconds !== undefined) {
    args.push("--stop-timeout", String(pod.terminationGracePeriodSeconds));
  }
  for (const [name, value] of Object.entries(options.env)) args.push("--env", `${name}=${value}`);
  for (const port of options.publish) args.push("--publish", `127.0.0.1::${port}`);
  return [...args, options.image, ...(c.command ?? []), ...(c.args ?? [])];
}

/** A container's last lines of output (stdout and stderr), for a failure's report. */
export async function containerLogs(container: string, lines = 20): Promise<string> {
  const out = await new Deno.Command("docker", {
    args: ["logs", "--tail", String(lines), container],
    stdout: "piped",
    stderr: "piped",
  }).output();
  return decoder.decode(out.stdout) + decoder.decode(out.stderr);
}

/** The host port that a container's port is published on. */
export async function publishedPort(container: string, port: number): Promise<number> {
  const out = await docker("port", container, `${port}/tcp`);
  const m = /:(\d+)$/m.exec(out);
  if (!m) throw new Error(`${container}: port ${port} is not published (${out})`);
  return Number(m[1]);
}
