/**
 * The deployment as CI can check it without a cluster: the rendered overlays pass the schema,
 * field and project checks, and each kind of broken manifest is caught.
 */

import assert from "node:assert/strict";
import {
  checkObjects,
  fieldProblems,
  type K8sObject,
  overlays,
  render,
  ruleProblems,
  schemaProblems,
} from "../tools/check_manifests.ts";

Deno.test("every overlay renders and passes the schema, field and project checks", async () => {
  for (const overlay of overlays) {
    const objects = await render(overlay);
    const kinds = new Set(objects.map((o) => o.kind));
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
    "a latest image",
    (o) => {
      deployment(o, "core").spec.template.spec.containers[0].image =
        "ghcr.io/example/oauth-registry:latest";
    },
    ruleProblems,
    /not pinned/,
  );
  await broken(
    "a grace period shorter than the drain",
    (o) => {
      deployment(o, "core").spec.template.spec.terminationGracePeriodSeconds = 5;
    },
    ruleProblems,
    /terminationGracePeriodSeconds/,
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
    "no NetworkPolicy for a service",
    (o) => {
      o.splice(
        o.findIndex((x) => x.kind === "NetworkPolicy" && x.metadata.name === "services-ingress"),
        1,
      );
    },
    ruleProblems,
    /oauth-registry: no NetworkPolicy selects its pods/,
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
  try {
    await admin.unsafe(
      await Deno.readTextFile(new URL("../deploy/sql/roles.sql", import.meta.url)),
    );
    await admin.unsafe(
      await Deno.readTextFile(new URL("../deploy/sql/roles.sql", import.meta.url)),
    );
    const dir = (s: string) => new URL(`../services/${s}/migrations/`, import.meta.url);
    // Every migration of each service applies under its own role (not only the first).
    for (const [sql, schema] of [[oauth, "oauth"], [core, "core"]] as const) {
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
    assert.equal((await oauth`select count(*)::int as n from oauth.clients`)[0]!.n, 0);
  } finally {
    await Promise.all([oauth.end(), core.end()]);
    await admin.end();
    await db.drop();
  }
});

Deno.test("the image: pinned base, non-root, no dev files, the components' flags", async () => {
  const { componentEnv, componentFlags } = await import("../lib/platform/mod.ts");
  const dockerfile = await Deno.readTextFile(new URL("../deploy/Dockerfile", import.meta.url));
  const ignore = await Deno.readTextFile(
    new URL("../deploy/Dockerfile.dockerignore", import.meta.url),
  );
  const ci = await Deno.readTextFile(new URL("../.ci/run", import.meta.url));
  const froms = [...dockerfile.matchAll(/^FROM (\S+)/gm)].map((m) => m[1]);
  const denoVersion = /deno@(\d+\.\d+\.\d+)/.exec(ci)![1];
  assert.ok(
    froms.length > 0 && froms.every((f) => f === `denoland/deno:${denoVersion}`),
    `${froms}`,
  );
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
    assert.ok(/^(deno\.json|deno\.lock|gen\/|lib\/|services\/|gateway\/)$/.test(source!), source);
  }
  assert.match(ignore, /^\*$/m);
  assert.match(ignore, /^\*\*\/\*_test\.ts$/m);
  assert.match(ignore, /^lib\/testing\/$/m);
});
