/**
 * The stack from the image, as the manifests run it: Postgres and the four components as
 * containers of the one image on a user-defined network, each with the command, environment,
 * limits, user and read-only root that `deploy/overlays/prod` renders for it (read from the rendered
 * manifests, so this cannot drift from `deploy/`), the database roles of `deploy/sql/roles.sql`.
 * Through the gateway's published port: ready, a client, a `client_credentials` token issued and
 * introspected, a consent page; then one component restarted while requests run.
 *
 * What Kubernetes would add and this cannot run: the probes (here the test polls the same
 * `/readyz`), NetworkPolicies and the HPA; tests/deploy_test.ts checks those in the rendered
 * manifests instead. Skipped, saying why, where no Docker engine answers.
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import { signToken } from "../lib/policy/mod.ts";
import {
  consentFormFields,
  containerLogs,
  docker,
  dockerProblem,
  httpClient,
  postgresImage,
  publishedPort,
  registryImage,
  runArguments,
  until,
} from "../lib/testing/mod.ts";
import { containerEnvironment, type K8sObject, render } from "../tools/check_manifests.ts";

const problem = await dockerProblem();
if (problem) {
  // deno-lint-ignore no-console
  console.log(`container stack test skipped: ${problem}`);
}

const random = () => crypto.randomUUID().replaceAll("-", "") + crypto.randomUUID().slice(0, 8);

/** The HTTP port (the one named `http`) of a Deployment's container. */
const httpPort = (d: K8sObject): number =>
  d.spec.template.spec.containers[0].ports.find((p: K8sObject) => p.name === "http").containerPort;

Deno.test({
  name: "the stack from the image, with the prod overlay's settings, serves and survives a restart",
  ignore: problem !== undefined,
}, async (t) => {
  const image = await registryImage();
  const run = crypto.randomUUID().slice(0, 8);
  const network = `registry-test-${run}`;
  const containers: string[] = [];
  const started = async (name: string, args: string[]) => {
    containers.push(name);
    await docker("run", "--detach", ...args);
  };
  await docker("network", "create", network);
  try {
    // Postgres, with the roles and schemas an operator creates before the first rollout.
    const superPassword = random();
    const pg = `postgres-${run}`;
    await started(pg, [
      "--name",
      pg,
      "--network",
      network,
      "--network-alias",
      "postgres",
      "--env",
      `POSTGRES_PASSWORD=${superPassword}`,
      "--publish",
      "127.0.0.1::5432",
      postgresImage,
    ]);
    const admin = postgres(
      `postgres://postgres:${superPassword}@127.0.0.1:${await publishedPort(pg, 5432)}/postgres`,
      { max: 1, connect_timeout: 2, onnotice: () => {} },
    );
    const roles = {
      oauth: "oauth_registry",
      core: "registry_core",
      token: "registry_token",
      gateway: "registry_gateway",
    };
    const passwords = { oauth: random(), core: random(), token: random(), gateway: random() };
    try {
      // The image's first start runs initdb, then restarts the server: wait until it stays up.
      await until(
        async () => {
          try {
            await admin`select 1`;
            return true;
          } catch {
            return false;
          }
        },
        120_000,
        "Postgres in its container",
      );
      await admin.file(new URL("../deploy/sql/roles.sql", import.meta.url).pathname);
      for (const [service, role] of Object.entries(roles)) {
        await admin.unsafe(
          `alter role ${role} password '${passwords[service as keyof typeof passwords]}'`,
        );
      }
    } finally {
      await admin.end();
    }
    const databaseUrl = (service: keyof typeof roles) =>
      `postgres://${roles[service]}:${passwords[service]}@postgres:5432/postgres`;
    const secrets: Record<string, string> = {
      "oauth-database-url": databaseUrl("oauth"),
      "core-database-url": databaseUrl("core"),
      "token-database-url": databaseUrl("token"),
      "gateway-database-url": databaseUrl("gateway"),
      "auth-jwt-secret": random(),
      "client-secret-hmac-key": random(),
      "token-key-encryption-key": random(),
    };

    // The four components, started together; each one's time from `docker run` to ready.
    const objects = await render("deploy/overlays/prod");
    const deployments = objects.filter((o) => o.kind === "Deployment");
    assert.deepEqual(
      deployments.map((d) => d.metadata.name).sort(),
      ["core", "gateway", "oauth-registry", "token-service"],
    );
    const nameOf = (d: K8sObject) => `${d.metadata.name}-${run}`;
    const urlOf: Record<string, string> = {};
    const startAndWait = async (d: K8sObject): Promise<number> => {
      const name = nameOf(d);
      const env = containerEnvironment(objects, d, (key, optional) => {
        assert.ok(optional || secrets[key], `a value for the Secret key ${key}`);
        return secrets[key];
      });
      const began = Date.now();
      await started(name, runArguments(d, { name, network, image, env, publish: [httpPort(d)] }));
      const url = `http://127.0.0.1:${await publishedPort(name, httpPort(d))}`;
      urlOf[d.metadata.name] = url;
      await until(
        async () => {
          try {
            const res = await fetch(`${url}/readyz`);
            await res.body?.cancel();
            return res.status === 200;
          } catch {
            return false;
          }
        },
        120_000,
        `${name} ready`,
      );
      return Date.now() - began;
    };
    const times = await Promise.all(deployments.map(startAndWait));
    // deno-lint-ignore no-console
    console.log(
      `from docker run to ready: ${
        deployments.map((d, i) => `${d.metadata.name} ${times[i]} ms`).join(", ")
      }; image ${image} ${await docker("image", "inspect", "--format", "{{.Size}}", image).then(
        (bytes) => Math.round(Number(bytes) / 1e6),
      )} MB`,
    );

    const gateway = urlOf["gateway"]!;
    const api = httpClient(gateway);
    const jwtSecret = secrets["auth-jwt-secret"]!;
    const adminToken = await signToken(jwtSecret, { sub: "admin", projects: ["ct"] });
    const userToken = await signToken(jwtSecret, { sub: "user-1", accountId: "acct-1" });
    let clientId = "";

    await t.step("through the gateway: a client, a token issued and introspected", async () => {
      const config = await api("PATCH", "/v1/projects/ct/config", {
        token: adminToken,
        json: { application_name: "Container Test", support_email: "help@example.com" },
      });
      assert.equal(config.status, 200, config.text);
      const client = await api("POST", "/v1/projects/ct/clients", {
        token: adminToken,
        json: { name: "web", type: "web", redirect_uris: ["https://app.example.com/cb"] },
      });
      assert.equal(client.status, 201, client.text);
      clientId = client.body.id;
      const secret = await api("POST", `/v1/projects/ct/clients/${clientId}/secrets`, {
        token: adminToken,
      });
      assert.equal(secret.status, 201, secret.text);
      const basic = `Basic ${btoa(`${clientId}:${secret.body.secret}`)}`;
      const form = { "content-type": "application/x-www-form-urlencoded", authorization: basic };
      const issued = await api("POST", "/oauth2/token", {
        headers: form,
        raw: "grant_type=client_credentials&scope=read",
      });
      assert.equal(issued.status, 200, issued.text);
      assert.equal(issued.body.token_type, "Bearer");
      const introspected = await api("POST", "/oauth2/introspect", {
        headers: form,
        raw: new URLSearchParams({ token: issued.body.access_token }).toString(),
      });
      assert.equal(introspected.status, 200, introspected.text);
      assert.equal(introspected.body.active, true);
      assert.equal(introspected.body.client_id, clientId);
    });

    await t.step("the consent page", async () => {
      const params = new URLSearchParams({
        response_type: "code",
        client_id: clientId,
        redirect_uri: "https://app.example.com/cb",
        scope: "openid",
        state: "s1",
        code_challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
        code_challenge_method: "S256",
      });
      const res = await fetch(`${gateway}/oauth2/authorize?${params}`, {
        headers: { cookie: `session=${userToken}` },
        redirect: "manual",
      });
      const html = await res.text();
      assert.equal(res.status, 200, html);
      assert.match(res.headers.get("content-type") ?? "", /^text\/html/);
      assert.match(html, /Container Test/);
      assert.ok(Object.keys(consentFormFields(html)).length > 0, "the consent form");
    });

    await t.step(
      "a component restarted under load: nothing lost, every failure a clean 503",
      async () => {
        const registry = deployments.find((d) => d.metadata.name === "oauth-registry")!;
        const odd: string[] = [];
        let ok = 0;
        let unavailable = 0;
        let stop = false;
        const worker = async () => {
          while (!stop) {
            const res = await api("GET", `/v1/projects/ct/clients/${clientId}`, {
              token: adminToken,
            });
            if (res.status === 200 && res.body.id === clientId) ok++;
            else if (
              res.status === 503 && res.headers.get("retry-after") !== null &&
              typeof res.body?.error?.message === "string"
            ) unavailable++;
            else odd.push(`${res.status} ${res.text.slice(0, 200)}`);
            // At most 20 calls a second each, 80 in all: under the gateway's rate limit of one
            // caller (100 a second) however fast the machine answers.
            await new Promise((resolve) => setTimeout(resolve, 50));
          }
        };
        const workers = [worker(), worker(), worker(), worker()];
        try {
          await until(() => ok >= 20, 30_000, "requests before the restart");
          await docker("restart", nameOf(registry));
          const before = ok;
          await until(() => ok >= before + 50, 120_000, "requests after the restart");
        } finally {
          stop = true;
          await Promise.all(workers);
        }
        assert.deepEqual(
          odd,
          [],
          "every answer a 200 or a 503 with Retry-After and the error body",
        );
        // deno-lint-ignore no-console
        console.log(`across the restart: ${ok} answered, ${unavailable} refused with 503`);
        const after = await api("GET", `/v1/projects/ct/clients/${clientId}`, {
          token: adminToken,
        });
        assert.equal(after.status, 200, after.text);
        assert.equal(after.body.name, "web");
      },
    );
  } catch (error) {
    for (const name of containers) {
      const logs = await containerLogs(name);
      // deno-lint-ignore no-console
      console.log(`--- ${name}\n${logs}`);
    }
    throw error;
  } finally {
    if (containers.length > 0) await docker("rm", "--force", ...containers).catch(() => {});
    await docker("network", "rm", network).catch(() => {});
  }
});
