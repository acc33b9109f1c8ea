/**
 * Project configs, remembered for consent: every ConsentInstallation reads its project's config
 * (the audience rule, ./policy.ts, and the application's name the installation records), and a
 * config almost never changes, so each replica keeps the configs consent read, and Postgres keeps
 * them honest. The config trigger notifies `oauth_registry_changes` with `config:<project>` in the
 * transaction of every update or deletion of a config (migrations/0004_change_feed.sql); each
 * replica follows the channel (lib/db/change_feed.ts):
 *
 * - `config:<project>` drops that project's config; the channel's other payloads (clients,
 *   installations, browser origins) are not about configs; one this version does not know, and a
 *   lost listening connection, drop all;
 * - a config is served from memory only while the feed is fresh (every change committed more than
 *   800 ms ago applied): a project made `internal` refuses its other users' consent in every
 *   replica within a second; while the feed is not fresh every read goes to Postgres;
 * - a config read while a notification arrived is not kept (it may predate the change); a project
 *   with no config is never kept (creating one notifies nobody);
 * - the replica that changes a config forgets it as soon as the change commits (`changed`), so its
 *   own next consent reads the new one without waiting for the feed.
 *
 * Nothing else reads configs from here: GetOAuthConfig and UpdateOAuthConfig read Postgres (an
 * etag must be the stored one). Bounded: at most `maxEntries`, oldest first, each counted in the
 * memory budget's `cache` share as twice its JSON plus 256 bytes; when the budget has no room, a
 * config is not kept. The freshness, the counting and the bounds are lib/db/feed_cache.ts's.
 *
 * @module
 */

import {
  type ChangeFeed,
  createFeedCache,
  dropNamed,
  type FollowOptions,
  keptRows,
} from "../../lib/db/mod.ts";
import type { MemoryBudget } from "../../lib/platform/mod.ts";
import type { ConfigRow } from "./repository/configs.ts";

/** Options of {@link cacheConfigs}. */
export interface ConfigCacheOptions {
  /** Follows the registry's change channel (lib/db/change_feed.ts's followChanges, bound). */
  follow(options: FollowOptions): ChangeFeed;
  /** The most configs kept (default 1,000). */
  maxEntries?: number | undefined;
  /** The process's memory budget, which the kept configs' bytes are taken from. */
  budget?: MemoryBudget | undefined;
}

/** Configs read through memory. */
export interface ConfigCache {
  /** The project's config, or undefined; from memory when it may be. */
  get(projectId: string): Promise<ConfigRow | undefined>;
  /**
   * Forgets the project's config at once: this replica changed it (the feed tells the others, and
   * this one again, within a second). A read under way when it is called is not kept.
   */
  changed(projectId: string): void;
  /** Configs kept now, and how reads were answered so far. */
  stats(): { entries: number; hits: number; misses: number; bypassed: number };
  /** Stops following the feed, and forgets every config. */
  close(): Promise<void>;
}

/** Payloads of the channel that are about something else than configs. */
const otherKinds = ["client", "installation", "origins"];

/** Keeps what `read` answers (see the module's header). */
export function cacheConfigs(
  read: (projectId: string) => Promise<ConfigRow | undefined>,
  options: ConfigCacheOptions,
): ConfigCache {
  const cache = createFeedCache({
    follow: options.follow,
    maxBytes: Infinity,
    maxEntries: options.maxEntries ?? 1000,
    budget: options.budget,
    onChange: (payload) => dropNamed(payload, "config", otherKinds, configs.drop),
  });
  const configs = keptRows(cache, read);

  return {
    get: configs.get,
    changed: configs.wrote,
    stats() {
      const { entries, hits, misses, bypassed } = cache.stats();
      return { entries, hits, misses, bypassed };
    },
    close: () => cache.close(),
  };
}
