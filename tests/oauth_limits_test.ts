/**
 * Every limit of spec section 8, at n (accepted) and n+1 (rejected, with a violation of that
 * field), through the gateway against the real processes.
 */

import assert from "node:assert/strict";
import { httpClient } from "../lib/testing/mod.ts";
import { startStack } from "../lib/testing/mod.ts";

/** A string of exactly `n` characters: `prefix` padded with `fill`. */
function sized(prefix: string, n: number, fill = "a", suffix = ""): string {
  const out = prefix + fill.repeat(n - prefix.length - suffix.length) + suffix;
  assert.equal(out.length, n);
  return out;
}

/** A hostname of exactly `n` characters made of labels of at most 63. */
function hostname(n: number): string {
  const labels: string[] = [];
  let left = n;
  while (left > 0) {
    const size = Math.min(63, left);
    labels.push("h".repeat(size));
    left -= size + 1;
  }
  let host = labels.join(".");
  if (host.length > n) host = host.slice(0, n); // never ends with a dot for these sizes
  assert.equal(host.length, n);
  return host;
}

interface Case {
  name: string;
  method: string;
  path: string;
  json?: unknown;
  /** The field named in the violation when rejected. */
  field: string;
  ok: boolean;
}

function both(
  name: string,
  method: string,
  path: string,
  field: string,
  at: (n: number) => unknown,
  n: number,
  lowest?: number,
): Case[] {
  const cases: Case[] = [
    { name: `${name} at ${n}`, method, path, json: at(n), field, ok: true },
    { name: `${name} at ${n + 1}`, method, path, json: at(n + 1), field, ok: false },
  ];
  if (lowest !== undefined) {
    cases.push(
      { name: `${name} at ${lowest}`, method, path, json: at(lowest), field, ok: true },
      { name: `${name} at ${lowest - 1}`, method, path, json: at(lowest - 1), field, ok: false },
    );
  }
  return cases;
}

const config = "/v1/projects/lim/config";
const clients = "/v1/projects/lim/clients";
const uri = (n: number) => sized("https://example.com/", n);

const cases: Case[] = [
  ...both(
    "application_name",
    "PATCH",
    config,
    "application_name",
    (n) => ({
      application_name: "n".repeat(n),
    }),
    120,
    1,
  ),
  ...both("support_email", "PATCH", config, "support_email", (n) => ({
    support_email: sized("", n, "e", "@example.com"),
  }), 320),
  ...["logo_uri", "homepage_uri", "privacy_policy_uri", "terms_of_service_uri"].flatMap((f) =>
    both(f, "PATCH", config, f, (n) => ({ [f]: uri(n) }), 2048)
  ),
  ...both(
    "authorized_domains item",
    "PATCH",
    config,
    "authorized_domains[0]",
    (n) => ({
      authorized_domains: [hostname(n)],
    }),
    253,
    1,
  ),
  ...both("declared scopes", "PATCH", config, "scopes", (n) => ({
    scopes: Array.from({ length: n }, (_, i) => ({ name: `s.${i}`, description: "d" })),
  }), 100),
  ...both(
    "declared scope description",
    "PATCH",
    config,
    "scopes[0].description",
    (n) => ({ scopes: [{ name: "s", description: "d".repeat(n), sensitive: true }] }),
    200,
    1,
  ),
  ...both(
    "declared scope name",
    "PATCH",
    config,
    "scopes[0].name",
    (n) => ({ scopes: [{ name: "n".repeat(n), description: "d" }] }),
    512,
    1,
  ),
  ...both(
    "client name",
    "POST",
    clients,
    "name",
    (n) => ({
      name: "c".repeat(n),
      type: "web",
    }),
    120,
    1,
  ),
  ...both("redirect URI", "POST", clients, "redirect_uris[0]", (n) => ({
    name: "c",
    type: "web",
    redirect_uris: [uri(n)],
  }), 2048),
  ...both("JavaScript origin", "POST", clients, "javascript_origins[0]", (n) => ({
    name: "c",
    type: "spa",
    javascript_origins: [`https://${hostname(n - 8)}`],
  }), 2048),
  ...both("redirect_uris per client", "POST", clients, "redirect_uris", (n) => ({
    name: "c",
    type: "web",
    redirect_uris: Array.from({ length: n }, (_, i) => `https://example.com/cb${i}`),
  }), 100),
  ...both("javascript_origins per client", "POST", clients, "javascript_origins", (n) => ({
    name: "c",
    type: "spa",
    javascript_origins: Array.from({ length: n }, (_, i) => `https://o${i}.example.com`),
  }), 100),
  // A project that declares no scopes (lim declares some above, and takes consent to those only).
  ...both("scopes per installation", "POST", "/v1/installations", "scopes", (n) => ({
    project_id: "lim3",
    scopes: Array.from({ length: n }, (_, i) => `scope.${i}`),
  }), 100),
  ...both(
    "scope item",
    "POST",
    "/v1/installations",
    "scopes[0]",
    // Another project than the case above's: consent adds to the installation's scopes, which
    // hold 100 after it.
    (n) => ({
      project_id: "lim2",
      scopes: ["s".repeat(n)],
    }),
    512,
    1,
  ),
  ...[`${clients}?limit=`, "/v1/installations?limit="].flatMap((path) => [
    { name: `${path}1`, method: "GET", path: `${path}1`, field: "limit", ok: true },
    { name: `${path}0`, method: "GET", path: `${path}0`, field: "limit", ok: false },
    { name: `${path}100`, method: "GET", path: `${path}100`, field: "limit", ok: true },
    { name: `${path}101`, method: "GET", path: `${path}101`, field: "limit", ok: false },
  ]),
];

Deno.test("every limit of spec section 8 holds at n and n+1", async (t) => {
  const stack = await startStack();
  const api = httpClient(stack.gatewayUrl);
  const token = await stack.token({ sub: "limits", projects: ["lim", "lim2", "lim3"] });
  try {
    const created = await api("PATCH", config, { token, json: { application_name: "Limits" } });
    assert.equal(created.status, 200, created.text);
    for (const project of ["lim2", "lim3"]) {
      const other = await api("PATCH", `/v1/projects/${project}/config`, {
        token,
        json: { application_name: `Limits ${project}` },
      });
      assert.equal(other.status, 200, other.text);
    }
    for (const c of cases) {
      await t.step(`${c.name}: ${c.ok ? "accepted" : "rejected"}`, async () => {
        const res = await api(c.method, c.path, {
          token,
          ...(c.json !== undefined ? { json: c.json } : {}),
        });
        if (c.ok) {
          assert.ok(res.status === 200 || res.status === 201, `${res.status} ${res.text}`);
        } else {
          assert.equal(res.status, 400, res.text);
          assert.equal(res.body.error.code, "invalid_argument");
          const fields = res.body.error.details.map((d: { field: string }) => d.field);
          assert.deepEqual(fields, [c.field], res.text);
        }
      });
    }
  } finally {
    await stack.stop();
  }
});

Deno.test("a list page ends before 1 MiB of text: clients with 100 URIs of 2,048 characters", async () => {
  const stack = await startStack();
  const api = httpClient(stack.gatewayUrl);
  const token = await stack.token({ sub: "pages", projects: ["fat"] });
  try {
    await api("PATCH", "/v1/projects/fat/config", { token, json: { application_name: "Fat" } });
    const uris = (i: number) =>
      Array.from({ length: 100 }, (_, j) => sized(`https://c${i}.example.com/${j}/`, 2048));
    const ids: string[] = [];
    // 204,800 characters of URIs each: five fit in 1 MiB, and a page of 100 is asked for.
    for (let i = 0; i < 7; i++) {
      const res = await api("POST", "/v1/projects/fat/clients", {
        token,
        json: { name: `fat ${i}`, type: "web", redirect_uris: uris(i) },
      });
      assert.equal(res.status, 201, res.text);
      ids.push(res.body.id);
    }
    const first = await api("GET", "/v1/projects/fat/clients?limit=100", { token });
    assert.equal(first.status, 200);
    assert.equal(first.body.data.length, 5);
    assert.equal(first.body.has_more, true);
    const last = first.body.data.at(-1).id;
    const rest = await api("GET", `/v1/projects/fat/clients?limit=100&after=${last}`, { token });
    assert.deepEqual(
      [...first.body.data, ...rest.body.data].map((c: { id: string }) => c.id),
      ids,
    );
    assert.equal(rest.body.has_more, false);
  } finally {
    await stack.stop();
  }
});
