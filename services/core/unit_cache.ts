/**
 * Units, remembered: GetUnit reads one unit by its id, the core area's most frequent read, and a
 * unit changes seldom next to how often it is read, so each replica keeps the units it read, and
 * Postgres keeps them honest. The unit trigger notifies `core_changes` with `unit:<uuid>` in the
 * transaction of every update or deletion of a unit (migrations/0008_change_feed.sql; `reset` at a
 * TRUNCATE, 0009_change_feed_truncate.sql); each
 * replica follows the channel (lib/db/change_feed.ts):
 *
 * - `unit:<uuid>` drops that unit; a payload this version does not know, and a lost listening
 *   connection, drop all;
 * - a unit is served from memory only while the feed is fresh (every change committed more than
 *   800 ms ago applied): a change reaches every replica within a second; while the feed is not
 *   fresh every read goes to Postgres;
 * - a unit read while a notification arrived is not kept (it may predate the change); an id with
 *   no unit is never kept (creating one notifies nobody);
 * - the replica that updates or deletes a unit forgets it as soon as the write returns, and reads
 *   under way then are not kept, so its own next read sees the change without waiting for the feed.
 *
 * Kept by id alone, with the space it is in: a caller of another space is answered as if it were
 * not there, as by Postgres. Only `get` goes through memory, which the service uses for GetUnit
 * (without `cache-control: no-cache`); every other read (lists, cursors, the checks before a
 * write) goes to Postgres. Bounded: at most `maxBytes` (each unit's JSON twice, as UTF-16, plus
 * 256 bytes), oldest first, in the memory budget's `cache` share (lib/db/feed_cache.ts).
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
import type { UnitRepository, UnitRow } from "./repository/units.ts";

/** Wraps `units` (see the module's header). */
export function cacheUnits(
  units: UnitRepository,
  options: RowCacheOptions,
): RowCache<UnitRepository> {
  const cache = createFeedCache({
    ...options,
    onChange: (payload) => dropNamed(payload, "unit", [], rows.drop),
  });
  const rows = keptRows<UnitRow>(cache, (id) => units.find(id));

  return {
    ...units,
    async get(space, id) {
      const row = await rows.get(id);
      return row?.space === space ? row : undefined;
    },
    replace: (space, id, unit, write) =>
      rows.write(id, () => units.replace(space, id, unit, write)),
    delete: (space, id, write) => rows.write(id, () => units.delete(space, id, write)),
    stats: () => cache.stats(),
    close: () => cache.close(),
  };
}
