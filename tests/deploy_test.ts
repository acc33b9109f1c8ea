/**
 * The deployment as CI can check it without a cluster: the rendered overlays pass the schema,
 * field and project checks, and each kind of broken manifest is caught.
 */

import assert from "node:assert/strict";
import {
  checkObjects,
  containerEnvironment,
  fieldProblems,
  type K8sObject,
  overlays,
  postgresConnections,
  render,
  ruleProblems,
  schemaProblems,
  selects,
} from "../tools/check_manifests.ts";

/**
 * The components: a Deployment each, with a ServiceAccount, Service, PodDisruptionBudget and
 * HorizontalPodAutoscaler of the same name, and the module it runs.
 */
const components: Record<string, string> = {
  "oauth-registry": "services/oauth/main.ts",
  core: "services/core/main.ts",
  "token-service": "services/token/main.ts",
  gateway: "gateway/main.ts",
};

Deno.test("every overlay renders and passes the schema, field and project checks", async () => {
  for (const overlay of overlays) {
    const objects = await render(overlay);
    const kinds = new Set(objects.map((o) => o.kind));
    const deployments = objects.filter((o) => o.kind === "Deployment");
    assert.deepEqual(
      deployments.map((d) => d.metadata.name).sort(),
      Object.keys(components).sort(),
      `${overlay}: the Deployments`,
    );
    for (const [name, entry] of Object.entries(components)) {
      assert.deepEqual(
        deployment(objects, name).spec.template.spec.containers[0].args,
        [entry],
        `${overlay}: ${name} runs ${entry}`,
      );
      for (
        const kind of [
          "ServiceAccount",
          "Service",
          "PodDisruptionBudget",
          "HorizontalPodAutoscaler",
        ]
      ) {
        assert.ok(
          objects.some((o) => o.kind === kind && o.metadata.name === name),
          `${overlay}: ${kind}/${name}`,
        );
      }
    }
    for (
      const kind of [
        "Deployment",
        "Service",
        "ServiceAccount",
        "ConfigMap",
        "Ingress",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "NetworkPolicy",
      ]
    ) {
      assert.ok(kinds.has(kind), `${overlay} renders a ${kind}`);
    }
    assert.deepEqual(await checkObjects(objects), [], overlay);
    // deno-lint-ignore no-console
    console.log(`${overlay}: ${objects.length} objects checked`);
  }
});

function deployment(objects: K8sObject[], name: string): K8sObject {
  return objects.find((o) => o.kind === "Deployment" && o.metadata.name === name)!;
}

/** Removes the object of that kind and name (which must be there). */
function remove(objects: K8sObject[], kind: string, name: string): void {
  const i = objects.findIndex((o) => o.kind === kind && o.metadata.name === name);
  assert.ok(i >= 0, `${kind}/${name} is rendered`);
  objects.splice(i, 1);
}

Deno.test("broken manifests are caught", async () => {
  const base = await render("deploy/overlays/prod");
  const broken = async (
    what: string,
    change: (objects: K8sObject[]) => void,
    check: (objects: K8sObject[]) => string[] | Promise<string[]>,
    expected: RegExp,
  ) => {
    const objects = structuredClone(base);
    change(objects);
    const problems = await check(objects);
    assert.ok(problems.some((p) => expected.test(p)), `${what}: ${JSON.stringify(problems)}`);
  };
  await broken(
    "a misspelt field",
    (o) => {
      deployment(o, "core").spec.template.spec.containers[0].imagePullPolicyy = "Always";
    },
    fieldProblems,
    /Deployment\/core: .*imagePullPolicyy/,
  );
  await broken(
    "a wrong type",
    (o) => {
      deployment(o, "gateway").spec.replicas = "three";
    },
    schemaProblems,
    /Deployment\/gateway: .*replicas/,
  );
  await broken(
    "an unknown kind",
    (o) => {
      o.push({ apiVersion: "apps/v1", kind: "Deploymint", metadata: { name: "x" } });
    },
    schemaProblems,
    /Deploymint/,
  );
  await broken(
    "no readiness probe",
    (o) => {
      delete deployment(o, "gateway").spec.template.spec.containers[0].readinessProbe;
    },
    ruleProblems,
    /gateway: container gateway has no readinessProbe/,
  );
  await broken(
    "an HTTP probe on a gRPC service",
    (o) => {
      const c = deployment(o, "oauth-registry").spec.template.spec.containers[0];
      c.livenessProbe = { httpGet: { path: "/healthz", port: "http" } };
    },
    ruleProblems,
    /oauth-registry: .*livenessProbe is not a native gRPC probe/,
  );
  await broken(
    "no readiness probe on the token service",
    (o) => {
      delete deployment(o, "token-service").spec.template.spec.containers[0].readinessProbe;
    },
    ruleProblems,
    /token-service: container token-service has no readinessProbe/,
  );
  await broken(
    "an HTTP probe on the token service",
    (o) => {
      const c = deployment(o, "token-service").spec.template.spec.containers[0];
      c.readinessProbe = { httpGet: { path: "/readyz", port: "http" } };
    },
    ruleProblems,
    /token-service: .*readinessProbe is not a native gRPC probe on port 50053/,
  );
  await broken(
    "no limits",
    (o) => {
      delete deployment(o, "core").spec.template.spec.containers[0].resources.limits;
    },
    ruleProblems,
    /core: .*no limits.cpu/,
  );
  await broken(
    "root allowed",
    (o) => {
      delete deployment(o, "core").spec.template.spec.securityContext.runAsNonRoot;
    },
    ruleProblems,
    /core: .*runAsNonRoot/,
  );
  await broken(
    "a writable root filesystem",
    (o) => {
      deployment(o, "gateway").spec.template.spec.containers[0].securityContext
        .readOnlyRootFilesystem = false;
    },
    ruleProblems,
    /gateway: .*writable root filesystem/,
  );
  await broken(
    "capabilities kept",
    (o) => {
      deployment(o, "gateway").spec.template.spec.containers[0].securityContext.capabilities.drop =
        [];
    },
    ruleProblems,
    /drop ALL/,
  );
  await broken(
    "a scratch volume without a size limit",
    (o) => {
      delete deployment(o, "oauth-registry").spec.template.spec.volumes[0].emptyDir.sizeLimit;
    },
    ruleProblems,
    /oauth-registry: volume tmp is an emptyDir without a sizeLimit/,
  );
  await broken(
    "a latest image",
    (o) => {
      deployment(o, "core").spec.template.spec.containers[0].image =
        "ghcr.io/example/oauth-registry:latest";
    },
    ruleProblems,
    /not pinned/,
  );
  await broken(
    "a grace period with no time to spare after the drain",
    (o) => {
      // SHUTDOWN_GRACE_MS (10 s) and the pool's 5 s, and nothing more.
      deployment(o, "core").spec.template.spec.terminationGracePeriodSeconds = 15;
    },
    ruleProblems,
    /terminationGracePeriodSeconds/,
  );
  await broken(
    "a memory request below the limit",
    (o) => {
      deployment(o, "token-service").spec.template.spec.containers[0].resources.requests.memory =
        "128Mi";
    },
    ruleProblems,
    /token-service: container token-service requests less memory than its limit/,
  );
  await broken(
    "no PodDisruptionBudget",
    (o) => {
      o.splice(
        o.findIndex((x) => x.kind === "PodDisruptionBudget" && x.metadata.name === "core"),
        1,
      );
    },
    ruleProblems,
    /core: has no PodDisruptionBudget/,
  );
  await broken(
    "a PodDisruptionBudget that keeps unready pods from being evicted",
    (o) => {
      const pdb = o.find((x) => x.kind === "PodDisruptionBudget" && x.metadata.name === "core")!;
      delete pdb.spec.unhealthyPodEvictionPolicy;
    },
    ruleProblems,
    /core: its PodDisruptionBudget blocks evicting unready pods/,
  );
  await broken(
    "no NetworkPolicy for a service",
    (o) => {
      // Both policies that select the oauth-registry's pods.
      remove(o, "NetworkPolicy", "services-ingress");
      remove(o, "NetworkPolicy", "oauth-registry-ingress-token-service");
    },
    ruleProblems,
    /oauth-registry: no NetworkPolicy selects its pods/,
  );
  await broken(
    "no NetworkPolicy for the token service's ingress",
    (o) => {
      // Its egress policy still selects its pods, but lets anyone in.
      remove(o, "NetworkPolicy", "token-service-ingress");
    },
    ruleProblems,
    /token-service: no NetworkPolicy selects its pods for ingress/,
  );
  await broken(
    "no egress NetworkPolicy for a service",
    (o) => {
      remove(o, "NetworkPolicy", "services-egress");
    },
    ruleProblems,
    /core: no NetworkPolicy selects its pods for egress/,
  );
  await broken(
    "no PodDisruptionBudget for the token service",
    (o) => {
      remove(o, "PodDisruptionBudget", "token-service");
    },
    ruleProblems,
    /token-service: has no PodDisruptionBudget/,
  );
  await broken(
    "a gRPC port without appProtocol",
    (o) => {
      const svc = o.find((x) => x.kind === "Service" && x.metadata.name === "core")!;
      delete svc.spec.ports[0].appProtocol;
    },
    ruleProblems,
    /core: .*appProtocol/,
  );
});

Deno.test("the pods' connections to Postgres: the README's figures, and dev within a stock Postgres", async () => {
  const readme = await Deno.readTextFile(new URL("../README.md", import.meta.url));
  const found = new Map<string, number>();
  for (const overlay of overlays) {
    const n = postgresConnections(await render(overlay));
    found.set(overlay, n);
    const name = overlay.split("/").pop();
    assert.match(readme, new RegExp(`the ${name} overlay's pods may hold\\s+${n}\\s+connections`));
  }
  // max_connections 100, less superuser_reserved_connections 3.
  assert.ok(found.get("deploy/overlays/dev")! <= 97, `dev: ${found.get("deploy/overlays/dev")}`);
  // Each service pod's pool and listener count: more replicas or bigger pools, more connections.
  const prod = await render("deploy/overlays/prod");
  const before = postgresConnections(prod);
  prod.find((o) => o.kind === "HorizontalPodAutoscaler" && o.metadata.name === "core")!
    .spec.maxReplicas += 1;
  assert.equal(postgresConnections(prod), before + 11);
});

Deno.test("deploy/sql/roles.sql gives each service its own schema and no other", async () => {
  const { createTestDatabase } = await import("../lib/testing/mod.ts");
  const { connect, migrate, readMigrations } = await import("../lib/db/mod.ts");
  const postgres = (await import("postgres")).default;
  const db = await createTestDatabase();
  const admin = postgres(db.url, { max: 1, onnotice: () => {} });
  const as = (role: string) => {
    const url = new URL(db.url);
    url.username = role;
    url.password = "";
    return connect(url.toString(), { max: 1, applicationName: `roles-test-${role}` });
  };
  const oauth = as("oauth_registry");
  const core = as("registry_core");
  const token = as("registry_token");
  const gateway = as("registry_gateway");
  try {
    await admin.unsafe(
      await Deno.readTextFile(new URL("../deploy/sql/roles.sql", import.meta.url)),
    );
    await admin.unsafe(
      await Deno.readTextFile(new URL("../deploy/sql/roles.sql", import.meta.url)),
    );
    const dir = (s: string) => new URL(`../services/${s}/migrations/`, import.meta.url);
    // Every migration of each service applies under its own role (not only the first).
    for (const [sql, schema] of [[oauth, "oauth"], [core, "core"], [token, "token"]] as const) {
      const migrations = await readMigrations(dir(schema));
      assert.ok(migrations.length >= 2, `${schema}: ${migrations.length} migrations`);
      assert.deepEqual(await migrate(sql, schema, migrations), migrations.map((m) => m.name));
    }
    const denied = async (sql: typeof oauth, query: string) =>
      await assert.rejects(sql.unsafe(query), (e: { code?: string }) => e.code === "42501");
    await denied(oauth, "select * from core.roles");
    await denied(oauth, "create table core.evil (id int)");
    await denied(core, "select * from oauth.configs");
    await denied(core, "create table public.evil (id int)");
    await denied(token, "select * from oauth.client_secrets");
    await denied(token, "select * from core.roles");
    await denied(token, "create table oauth.evil (id int)");
    await denied(token, "create table public.evil (id int)");
    await denied(oauth, "select * from token.signing_keys");
    await denied(core, "select * from token.refresh_tokens");
    assert.equal((await oauth`select count(*)::int as n from oauth.clients`)[0]!.n, 0);
    assert.equal((await token`select count(*)::int as n from token.signing_keys`)[0]!.n, 0);
    // The gateway reads no table, and listens to the services' change notifications.
    await denied(gateway, "select * from oauth.clients");
    await denied(gateway, "select * from token.revoked_tokens");
    await denied(gateway, "select * from core.roles");
    await denied(gateway, "create table public.evil (id int)");
    const heard = Promise.withResolvers<string>();
    const listening = await gateway.listen(
      "token_revocations",
      (payload) => heard.resolve(payload),
    );
    await token`select pg_notify('token_revocations', 'heard')`;
    assert.equal(await heard.promise, "heard");
    await listening.unlisten();
  } finally {
    await Promise.all([oauth.end(), core.end(), token.end(), gateway.end()]);
    await admin.end();
    await db.drop();
  }
});

Deno.test("the image: pinned base, non-root, no dev files, modules and flags", async () => {
  const { componentEnv, componentFlags } = await import("../lib/platform/mod.ts");
  const dockerfile = await Deno.readTextFile(new URL("../deploy/Dockerfile", import.meta.url));
  const ignore = await Deno.readTextFile(
    new URL("../.dockerignore", import.meta.url),
  );
  const ci = await Deno.readTextFile(new URL("../.ci/run", import.meta.url));
  // Every stage on the base the build argument names, by default the official image of CI's Deno.
  const froms = [...dockerfile.matchAll(/^FROM (\S+)/gm)].map((m) => m[1]);
  const denoVersion = /deno@(\d+\.\d+\.\d+)/.exec(ci)![1];
  assert.equal(/^ARG DENO_IMAGE=(\S+)$/m.exec(dockerfile)?.[1], `denoland/deno:${denoVersion}`);
  assert.ok(froms.length > 0 && froms.every((f) => f === "${DENO_IMAGE}"), `${froms}`);
  const finalStage = dockerfile.slice(dockerfile.lastIndexOf("\nFROM "));
  const lastRun = finalStage.lastIndexOf("\nRUN ");
  assert.ok(finalStage.indexOf("\nUSER deno") > lastRun, "USER deno after the last RUN");
  const entrypoint = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(finalStage)![1]!) as string[];
  for (const flag of [...componentFlags, "--cached-only"]) {
    assert.ok(entrypoint.includes(flag), flag);
  }
  for (const [name, value] of Object.entries(componentEnv)) {
    assert.match(finalStage, new RegExp(`^ENV [^]*\\b${name}=${value}\\b`, "m"), name);
  }
  for (const [, source] of finalStage.matchAll(/^COPY (?!--from)(\S+)/gm)) {
    assert.ok(
      /^(deno\.json|deno\.lock|gen\/|lib\/|services\/|gateway\/)$/.test(source!),
      String(source),
    );
  }
  // Every component's module is installed and type-checked in the image, and its ports exposed.
  const objects = await render("deploy/overlays/prod");
  const lists = {
    "runtime imports": /^RUN deno run -A deploy\/runtime_imports\.ts ([^\n]*)$/m,
    "deno install": /deno install --entrypoint ([^\\&\n]*)/,
    "deno check": /deno check ([^\\&\n]*)/,
  };
  const exposed = /^EXPOSE ([\d ]+)$/m.exec(finalStage)![1]!.split(" ").map(Number);
  for (const d of objects.filter((o) => o.kind === "Deployment")) {
    const c = d.spec.template.spec.containers[0];
    for (const [what, pattern] of Object.entries(lists)) {
      const entries = pattern.exec(dockerfile)![1]!.trim().split(/\s+/);
      assert.ok(entries.includes(c.args[0]), `${what} names ${c.args[0]}: ${entries}`);
    }
    for (const p of c.ports) {
      assert.ok(exposed.includes(p.containerPort), `EXPOSE ${p.containerPort} (${c.name})`);
    }
  }
  assert.match(ignore, /^\*$/m);
  assert.match(ignore, /^\*\*\/\*_test\.ts$/m);
  assert.match(ignore, /^lib\/testing\/$/m);
});

/** The shared settings: the ConfigMap `registry-config`'s data. */
function settings(objects: K8sObject[]): K8sObject {
  const map = objects.find((o) => o.kind === "ConfigMap" && o.metadata.name === "registry-config");
  assert.ok(map, "ConfigMap/registry-config is rendered");
  return map.data;
}

/**
 * A Deployment's environment, each secret a stand-in of what an operator puts there (also an
 * optional one, so that its setting is read); `secretKeys` collects the keys it must have.
 */
function environment(
  objects: K8sObject[],
  d: K8sObject,
  secretKeys: Set<string>,
): Record<string, string> {
  return containerEnvironment(objects, d, (key, optional) => {
    if (!optional) secretKeys.add(key);
    // A URL for a database, else a long random string.
    return key.endsWith("-database-url")
      ? "postgres://role:password@db/registry"
      : crypto.randomUUID() + crypto.randomUUID();
  });
}

Deno.test("each component accepts the settings the manifests give it, and reads each", async () => {
  const v = await import("valibot");
  const { readConfig } = await import("../lib/platform/mod.ts");
  const { readServiceConfig } = await import("../lib/service/mod.ts");
  const { gatewaySettings } = await import("../gateway/main.ts");
  const { oauthRegistryService } = await import("../services/oauth/main.ts");
  const { coreService } = await import("../services/core/main.ts");
  const { tokenService } = await import("../services/token/main.ts");
  const { OAuthRegistryService } = await import(
    "../gen/registry/oauth/v1/oauth_registry_service_pb.ts"
  );
  const { CoreService } = await import("../gen/registry/core/v1/core_service_pb.ts");
  const { TokenService } = await import("../gen/registry/token/v1/token_service_pb.ts");
  type Env = Record<string, string>;
  const modules: Record<string, { read: (env: Env) => Record<string, unknown>; grpc?: string }> = {
    "services/oauth/main.ts": {
      read: (env) => readServiceConfig(oauthRegistryService, env),
      grpc: OAuthRegistryService.typeName,
    },
    "services/core/main.ts": {
      read: (env) => readServiceConfig(coreService, env),
      grpc: CoreService.typeName,
    },
    "services/token/main.ts": {
      read: (env) => readServiceConfig(tokenService, env),
      grpc: TokenService.typeName,
    },
    "gateway/main.ts": { read: (env) => readConfig("gateway", v.object(gatewaySettings), env) },
  };
  const readme = await Deno.readTextFile(new URL("../README.md", import.meta.url));
  const kubernetes = readme.slice(readme.indexOf("### Kubernetes"));
  const created = new Set([...kubernetes.matchAll(/--from-literal=([\w-]+)=/g)].map((m) => m[1]!));
  for (const overlay of overlays) {
    const objects = await render(overlay);
    const secretKeys = new Set<string>();
    const read = new Set<string>();
    for (const d of objects.filter((o) => o.kind === "Deployment")) {
      const c = d.spec.template.spec.containers[0];
      const where = `${overlay}: ${d.metadata.name}`;
      const module = modules[c.args[0]];
      assert.ok(module, `${where}: runs a known module (${c.args[0]})`);
      const config = module.read(environment(objects, d, secretKeys)); // throws on a bad setting
      for (const key of Object.keys(config)) read.add(key);
      const port = (name: string) => c.ports.find((p: K8sObject) => p.name === name)?.containerPort;
      assert.equal(config.GRPC_PORT, port("grpc"), `${where}: GRPC_PORT is the grpc port`);
      assert.equal(
        config.HTTP_PORT ?? config.GATEWAY_PORT,
        port("http"),
        `${where}: it listens on the http port`,
      );
      assert.equal(c.readinessProbe?.grpc?.service, module.grpc, `${where}: readiness service`);
    }
    const data = settings(objects);
    for (const key of Object.keys(data)) {
      assert.ok(read.has(key), `${overlay}: ConfigMap key ${key} is a setting of some component`);
    }
    assert.deepEqual(
      [...created].sort(),
      [...secretKeys].sort(),
      `${overlay}: README's kubectl create secret makes the keys the Deployments read`,
    );
  }
});

Deno.test("the components find each other: gRPC URLs, the issuer and the Ingress", async () => {
  for (const overlay of overlays) {
    const objects = await render(overlay);
    const data = settings(objects);
    // Each *_GRPC_URL names a Service and its gRPC port, which selects a Deployment's grpc port.
    const urls = Object.keys(data).filter((k) => k.endsWith("_GRPC_URL"));
    assert.deepEqual(
      urls.sort(),
      ["CORE_GRPC_URL", "OAUTH_REGISTRY_GRPC_URL", "TOKEN_SERVICE_GRPC_URL"],
      overlay,
    );
    for (const key of urls) {
      const url = new URL(data[key]);
      const svc = objects.find((o) => o.kind === "Service" && o.metadata.name === url.hostname);
      assert.ok(svc, `${overlay}: ${key} names a Service (${url.hostname})`);
      const port = svc.spec.ports.find((p: K8sObject) => p.port === Number(url.port));
      assert.equal(port?.name, "grpc", `${overlay}: ${key} is the gRPC port of ${url.hostname}`);
      const target = objects.find((o) =>
        o.kind === "Deployment" &&
        Object.entries(svc.spec.selector).every(([k, v]) =>
          o.spec.template.metadata.labels[k] === v
        )
      );
      assert.ok(
        target?.spec.template.spec.containers[0].ports.some((p: K8sObject) =>
          p.name === port.targetPort
        ),
        `${overlay}: ${key} reaches a container port named ${port.targetPort}`,
      );
    }
    // The issuer is the gateway's public base URL: the Ingress's host, https where it has TLS,
    // and the Ingress routes the API, the authorization server's endpoints and its metadata.
    const issuer = new URL(data.ISSUER_URL);
    const ingress = objects.find((o) => o.kind === "Ingress")!;
    const rule = ingress.spec.rules.find((r: K8sObject) => r.host === issuer.hostname);
    assert.ok(rule, `${overlay}: ISSUER_URL's host ${issuer.hostname} is the Ingress's`);
    const tls = (ingress.spec.tls ?? []).some((t: K8sObject) => t.hosts.includes(issuer.hostname));
    assert.equal(issuer.protocol, tls ? "https:" : "http:", `${overlay}: ISSUER_URL's scheme`);
    assert.equal(issuer.pathname, "/", `${overlay}: ISSUER_URL has no path`);
    for (
      const path of [
        "/v1/projects",
        "/oauth2/token",
        "/oauth2/authorize",
        "/oauth2/jwks",
        "/.well-known/oauth-authorization-server",
      ]
    ) {
      const route = rule.http.paths.find((p: K8sObject) =>
        p.pathType === "Exact"
          ? p.path === path
          : path === p.path || path.startsWith(`${p.path.replace(/\/$/, "")}/`)
      );
      assert.equal(
        route?.backend.service.name,
        "gateway",
        `${overlay}: the Ingress routes ${path}`,
      );
    }
    assert.ok(
      !rule.http.paths.some((p: K8sObject) => ["/", "/metrics", "/readyz"].includes(p.path)),
      `${overlay}: the Ingress exposes no more than the API and the OAuth endpoints`,
    );
  }
});

/** A pod, or an address outside the cluster, as network policies see it. */
interface Endpoint {
  /** Its namespace; none for an address outside the cluster. */
  namespace?: string;
  /** Its namespace's labels besides `kubernetes.io/metadata.name`. */
  namespaceLabels?: Record<string, string>;
  labels?: Record<string, string>;
  ip?: string;
  /** Its named container ports. */
  ports?: Record<string, number>;
}

function inCidr(ip: string, cidr: string): boolean {
  const n = (a: string) => a.split(".").reduce((x, b) => x * 256 + Number(b), 0);
  const [base, bits] = cidr.split("/");
  const size = 2 ** (32 - Number(bits));
  return Math.floor(n(ip) / size) === Math.floor(n(base!) / size);
}

function peerMatches(peer: K8sObject, policyNamespace: string, e: Endpoint): boolean {
  if (peer.ipBlock) {
    return e.ip !== undefined && inCidr(e.ip, peer.ipBlock.cidr) &&
      !(peer.ipBlock.except ?? []).some((c: string) => inCidr(e.ip!, c));
  }
  if (e.namespace === undefined) return false;
  const namespaceOk = peer.namespaceSelector
    ? selects(peer.namespaceSelector, {
      ...e.namespaceLabels,
      "kubernetes.io/metadata.name": e.namespace,
    })
    : e.namespace === policyNamespace;
  return namespaceOk && (!peer.podSelector || selects(peer.podSelector, e.labels ?? {}));
}

/** Whether the policies of `subject` (one end) let it exchange with `peer` on `dest`'s port. */
function allowedAt(
  objects: K8sObject[],
  direction: "Ingress" | "Egress",
  subject: Endpoint,
  peer: Endpoint,
  dest: Endpoint,
  port: number,
  protocol: string,
): boolean {
  if (subject.namespace === undefined) return true;
  const policies = objects.filter((p) =>
    p.kind === "NetworkPolicy" && p.metadata.namespace === subject.namespace &&
    selects(p.spec.podSelector, subject.labels ?? {}) &&
    (p.spec.policyTypes ?? ["Ingress", ...(p.spec.egress ? ["Egress"] : [])]).includes(direction)
  );
  if (policies.length === 0) return true;
  return policies.some((p) =>
    ((direction === "Ingress" ? p.spec.ingress : p.spec.egress) ?? []).some((rule: K8sObject) => {
      const peers: K8sObject[] | undefined = direction === "Ingress" ? rule.from : rule.to;
      const peerOk = !peers?.length ||
        peers.some((x) => peerMatches(x, p.metadata.namespace, peer));
      const portOk = !rule.ports?.length ||
        rule.ports.some((r: K8sObject) =>
          (r.protocol ?? "TCP") === protocol &&
          (r.port === undefined ||
            (typeof r.port === "string"
              ? dest.ports?.[r.port] === port
              : port >= r.port && port <= (r.endPort ?? r.port)))
        );
      return peerOk && portOk;
    })
  );
}

/** Whether `from` may open a connection to `to`'s port: `from`'s egress and `to`'s ingress. */
function connects(
  objects: K8sObject[],
  from: Endpoint,
  to: Endpoint,
  port: number,
  protocol = "TCP",
): boolean {
  return allowedAt(objects, "Egress", from, to, to, port, protocol) &&
    allowedAt(objects, "Ingress", to, from, to, port, protocol);
}

Deno.test("network policies: who may connect to whom", async () => {
  for (const overlay of overlays) {
    const objects = await render(overlay);
    const pod = (name: string): Endpoint => {
      const d = deployment(objects, name);
      return {
        namespace: d.metadata.namespace,
        labels: d.spec.template.metadata.labels,
        ports: Object.fromEntries(
          d.spec.template.spec.containers.flatMap((c: K8sObject) => c.ports)
            .map((p: K8sObject) => [p.name, p.containerPort]),
        ),
      };
    };
    const gateway = pod("gateway");
    const oauth = pod("oauth-registry");
    const core = pod("core");
    const token = pod("token-service");
    const prometheus = {
      namespace: "monitoring",
      labels: { "app.kubernetes.io/name": "prometheus" },
    };
    const nginx = {
      namespace: "ingress-nginx",
      labels: {
        "app.kubernetes.io/name": "ingress-nginx",
        "app.kubernetes.io/component": "controller",
      },
    };
    // Any other pod of those namespaces: it could send the gateway an X-Real-IP of its choosing.
    const nginxWebhook = {
      namespace: "ingress-nginx",
      labels: {
        "app.kubernetes.io/name": "ingress-nginx",
        "app.kubernetes.io/component": "admission-webhook",
      },
    };
    const grafana = { namespace: "monitoring", labels: { "app.kubernetes.io/name": "grafana" } };
    const callerLabel = { "oauth-registry.example.com/internal-caller": "true" };
    const internalCaller = {
      namespace: "billing",
      namespaceLabels: { "oauth-registry.example.com/internal-callers": "true" },
      labels: callerLabel,
    };
    // A pod that labelled itself, in a namespace nobody admitted.
    const selfLabelled = { namespace: "sandbox", labels: callerLabel };
    const neighbour: Endpoint = { ...gateway, labels: callerLabel };
    const dns = { namespace: "kube-system", labels: { "k8s-app": "kube-dns" } };
    const postgres = { ip: "10.20.30.40" };
    const internet = { ip: "203.0.113.7" };
    const cases: [string, Endpoint, Endpoint, number, boolean, string?][] = [
      // The gateway reaches every service on its gRPC port; the ingress controller the gateway.
      ["gateway -> oauth-registry grpc", gateway, oauth, 50051, true],
      ["gateway -> core grpc", gateway, core, 50052, true],
      ["gateway -> token-service grpc", gateway, token, 50053, true],
      ["gateway -> token-service http", gateway, token, 8083, false],
      ["gateway -> oauth-registry http", gateway, oauth, 8081, false],
      ["gateway -> postgres", gateway, postgres, 5432, true],
      ["gateway -> DNS (udp)", gateway, dns, 53, true, "UDP"],
      ["gateway -> the internet", gateway, internet, 443, false],
      ["gateway -> another DNS server", gateway, { ip: "8.8.8.8" }, 53, false, "UDP"],
      ["ingress-nginx -> gateway", nginx, gateway, 8080, true],
      ["ingress-nginx's webhook -> gateway", nginxWebhook, gateway, 8080, false],
      ["ingress-nginx -> token-service", nginx, token, 8083, false],
      // Prometheus scrapes the metrics ports only.
      ["prometheus -> token-service metrics", prometheus, token, 8083, true],
      ["prometheus -> token-service grpc", prometheus, token, 50053, false],
      ["prometheus -> oauth-registry metrics", prometheus, oauth, 8081, true],
      ["prometheus -> gateway", prometheus, gateway, 8080, true],
      ["another pod of monitoring -> gateway", grafana, gateway, 8080, false],
      ["another pod of monitoring -> oauth-registry metrics", grafana, oauth, 8081, false],
      // The token service accepts the gateway only.
      ["oauth-registry -> token-service", oauth, token, 50053, false],
      ["core -> token-service", core, token, 50053, false],
      ["an internal caller -> token-service", internalCaller, token, 50053, false],
      ["an internal caller -> oauth-registry", internalCaller, oauth, 50051, true],
      ["an internal caller -> core", internalCaller, core, 50052, true],
      ["an internal caller of this namespace -> core", neighbour, core, 50052, true],
      ["a self-labelled pod elsewhere -> oauth-registry", selfLabelled, oauth, 50051, false],
      ["a self-labelled pod elsewhere -> core", selfLabelled, core, 50052, false],
      // It calls the oauth-registry's gRPC port, Postgres and DNS, nothing else.
      ["token-service -> oauth-registry grpc", token, oauth, 50051, true],
      ["token-service -> oauth-registry http", token, oauth, 8081, false],
      ["token-service -> core grpc", token, core, 50052, false],
      ["token-service -> gateway", token, gateway, 8080, false],
      ["token-service -> postgres", token, postgres, 5432, true],
      ["token-service -> DNS (udp)", token, dns, 53, true, "UDP"],
      ["token-service -> DNS (tcp)", token, dns, 53, true],
      ["token-service -> the internet", token, internet, 443, false],
      ["token-service -> another DNS server", token, { ip: "8.8.8.8" }, 53, false, "UDP"],
      // The oauth-registry (it holds the client-secret hash key) and core call nothing but
      // Postgres and DNS.
      ["oauth-registry -> postgres", oauth, postgres, 5432, true],
      ["oauth-registry -> DNS (udp)", oauth, dns, 53, true, "UDP"],
      ["oauth-registry -> DNS (tcp)", oauth, dns, 53, true],
      ["oauth-registry -> the internet", oauth, internet, 443, false],
      ["oauth-registry -> core grpc", oauth, core, 50052, false],
      ["core -> postgres", core, postgres, 5432, true],
      ["core -> DNS (udp)", core, dns, 53, true, "UDP"],
      ["core -> the internet", core, internet, 443, false],
      ["core -> another DNS server", core, { ip: "8.8.8.8" }, 53, false, "UDP"],
    ];
    for (const [what, from, to, port, expected, protocol] of cases) {
      assert.equal(connects(objects, from, to, port, protocol), expected, `${overlay}: ${what}`);
    }
    // Each end on its own, so that neither relies on the other: the token service's egress
    // policy, and the services' ingress policies towards it.
    const egress: [string, Endpoint, number, boolean, string?][] = [
      ["oauth-registry grpc", oauth, 50051, true],
      ["oauth-registry http", oauth, 8081, false],
      ["core grpc", core, 50052, false],
      ["core http", core, 8082, false],
      ["gateway", gateway, 8080, false],
      ["postgres", postgres, 5432, true],
      ["DNS (udp)", dns, 53, true, "UDP"],
      ["the internet", internet, 443, false],
    ];
    for (const [what, to, port, expected, protocol = "TCP"] of egress) {
      assert.equal(
        allowedAt(objects, "Egress", token, to, to, port, protocol),
        expected,
        `${overlay}: the token service's egress to ${what}`,
      );
    }
    const ingress: [string, Endpoint, number, boolean][] = [
      ["oauth-registry grpc", oauth, 50051, true],
      ["oauth-registry http", oauth, 8081, false],
      ["core grpc", core, 50052, false],
      ["core http", core, 8082, false],
    ];
    for (const [what, to, port, expected] of ingress) {
      assert.equal(
        allowedAt(objects, "Ingress", to, token, to, port, "TCP"),
        expected,
        `${overlay}: ${what} admits the token service`,
      );
    }
  }
});
