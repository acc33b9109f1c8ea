/**
 * Clients, remembered: GetClient reads one client by its id, the registry's most frequent read, and
 * a client changes seldom, so each replica keeps the clients it read, and Postgres keeps them
 * honest. (The internal lookups, LookupClient and the like, read Postgres: the token service keeps
 * their answers in memory of its own, and a copy taken from this one before it had seen a change
 * could outlive the change there.) The client trigger notifies `oauth_registry_changes` with
 * `client:<uuid>` in the transaction of every update or deletion of a client (and of a secret
 * deleted, a key added or deleted: migrations/0004_change_feed.sql, 0006_client_keys.sql); each
 * replica follows the channel (lib/db/change_feed.ts):
 *
 * - `client:<uuid>` drops that client; the channel's other payloads (installations, configs,
 *   browser origins) are not about a client row; one this version does not know, and a lost
 *   listening connection, drop all;
 * - a client is served from memory only while the feed is fresh (every change committed more than
 *   800 ms ago applied): a change reaches every replica within a second; while the feed is not
 *   fresh every read goes to Postgres;
 * - a client read while a notification arrived is not kept (it may predate the change); an id
 *   with no client is never kept (creating one notifies nobody);
 * - the replica that updates or deletes a client forgets it as soon as the write returns, and
 *   reads under way then are not kept, so its own next read sees the change without waiting for
 *   the feed.
 *
 * Every other read (lists, the etag a write checks, secrets, keys, and `find`, which the internal
 * lookups use) goes to Postgres as before: only `get` goes through memory, which the service uses
 * for GetClient (without `cache-control: no-cache`) and to read a client's type before an update.
 * Bounded: at most `maxBytes` (each client's JSON twice, as UTF-16, plus 256 bytes), oldest first,
 * in the memory budget's `cache` share. The freshness, the counting and the bounds are
 * lib/db/feed_cache.ts's (`keptRows`).
 *
 * @module
 */

import {
  createFeedCache,
  dropNamed,
  keptRows,
  type RowCache,
  type RowCacheOptions,
} from "../../lib/db/mod.ts";
import type { ClientRepository, ClientRow } from "./repository/clients.ts";

/** Payloads of the channel that are about something else than a client row. */
const otherKinds = ["installation", "config", "origins"];

/** Wraps `clients` (see the module's header). */
export function cacheClients(
  clients: ClientRepository,
  options: RowCacheOptions,
): RowCache<ClientRepository> {
  const cache = createFeedCache({
    ...options,
    onChange: (payload) => dropNamed(payload, "client", otherKinds, rows.drop),
  });
  const rows = keptRows<ClientRow>(cache, (id) => clients.find(id));

  return {
    ...clients,
    async get(projectId, id) {
      // Kept by id alone (a client is in one project, and notifications name it by id).
      const row = await rows.get(id);
      return row?.project_id === projectId ? row : undefined;
    },
    update: (projectId, id, changes, write) =>
      rows.write(id, () => clients.update(projectId, id, changes, write)),
    delete: (projectId, id, write) => rows.write(id, () => clients.delete(projectId, id, write)),
    stats: () => cache.stats(),
    close: () => cache.close(),
  };
}
