/**
 * Headless Chromium for the browser tests: Debian's package (tools/debian.ts installs it), driven by
 * playwright-core, with everything that would reach the network on its own turned off.
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
