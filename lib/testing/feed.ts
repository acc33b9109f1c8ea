/**
 * Test doubles for the caches that a change feed keeps honest (lib/db/change_feed.ts): a feed
 * driven by hand, and a gate that holds a load while a test delivers a change.
 *
 * @module
 */

import type { ChangeFeed, FollowOptions } from "../db/mod.ts";

/** A feed whose changes, resets and freshness the test decides. */
export function manualFeed(): {
  /** What a cache is given as its `follow`. */
  follow(options: FollowOptions): ChangeFeed;
  /** The handlers the cache passed (to deliver a change or a reset). */
  handlers(): FollowOptions;
  /** Whether the feed is fresh from now on (it starts fresh). */
  setFresh(fresh: boolean): void;
} {
  let fresh = true;
  let handlers: FollowOptions | undefined;
  return {
    follow(options) {
      handlers = options;
      return { fresh: () => fresh, close: () => Promise.resolve() };
    },
    handlers: () => handlers!,
    setFresh: (value) => void (fresh = value),
  };
}

/** Holds the calls that pass it from `hold()` until the function `hold` returned is called. */
export function gate(): { pass(): Promise<void>; hold(): () => void } {
  let held = false;
  let release: (() => void) | undefined;
  return {
    async pass() {
      if (held) await new Promise<void>((resolve) => (release = resolve));
    },
    hold() {
      held = true;
      return () => {
        held = false;
        release?.();
        release = undefined;
      };
    },
  };
}
