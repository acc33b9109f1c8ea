/**
 * The architecture's boundaries, checked on the source: each service touches only its own
 * Postgres schema and imports no other service; the gateway reaches services only through RPC
 * (it imports generated code and lib/, never services/).
 */

import assert from "node:assert/strict";

const root = new URL("../", import.meta.url);

async function sources(dir: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const walk = async (url: URL, rel: string) => {
    for await (const entry of Deno.readDir(url)) {
      const path = `${rel}/${entry.name}`;
      if (entry.isDirectory) await walk(new URL(`${entry.name}/`, url), path);
      else if (/\.(ts|sql)$/.test(entry.name)) {
        out.set(path, await Deno.readTextFile(new URL(entry.name, url)));
      }
    }
  };
  await walk(new URL(`${dir}/`, root), dir);
  return out;
}

const services = { oauth: "oauth", core: "core" } as const;

Deno.test("a service's code names only its own schema and imports no other service", async () => {
  for (const [service, schema] of Object.entries(services)) {
    const files = await sources(`services/${service}`);
    assert.ok(files.size > 0);
    for (const [path, text] of files) {
      for (const [other, otherSchema] of Object.entries(services)) {
        if (other === service) continue;
        assert.ok(
          !new RegExp(`\\b${otherSchema}\\.[a-z_]+`).test(text),
          `${path} names ${otherSchema}.*`,
        );
        assert.ok(
          !text.includes(`services/${other}/`) && !text.includes(`../${other}/`),
          `${path} imports ${other}`,
        );
      }
    }
    assert.ok(
      [...files.values()].some((t) => t.includes(`${schema}.`)),
      `${service} uses ${schema}`,
    );
  }
});

Deno.test("the gateway imports no service code", async () => {
  for (const [path, text] of await sources("gateway")) {
    assert.ok(!/from "\.\.\/services\//.test(text), `${path} imports a service`);
  }
});
