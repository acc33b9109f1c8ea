/**
 * Headless Chromium for the browser tests: Debian's package (tools/debian.ts installs it), driven by
 * playwright-core, with everything that would reach the network on its own turned off; and a
 * server that records where the browser was sent.
 *
 * @module
 */

import type { Browser } from "playwright-core";

/** Launches /usr/bin/chromium headless; `args` adds flags (e.g. `--host-resolver-rules=...`). */
export async function launchChromium(args: string[] = []): Promise<Browser> {
  // Loaded on first use: every test imports this folder's mod.ts, few drive a browser, and
  // playwright-core doubles the time and memory a test process takes to load.
  const { chromium } = await import("playwright-core");
  return await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      ...args,
    ],
  });
}

/**
 * A server on a free loopback port that answers every request with `html` and records the URL of
 * each request it gets (`seen`): the application a browser is sent back to, or a place it must
 * never be sent to. `base` is its origin; shut it down with `server.shutdown()`.
 */
export function recorder(html: string): { seen: URL[]; server: Deno.HttpServer; base: string } {
  const seen: URL[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    seen.push(new URL(req.url));
    return new Response(html, { headers: { "content-type": "text/html" } });
  });
  return { seen, server, base: `http://127.0.0.1:${server.addr.port}` };
}
