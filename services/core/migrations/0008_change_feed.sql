-- The core area's change feed: a unit updated or deleted notifies the channel `core_changes` with
-- `unit:<uuid>` in the same transaction, so the notification goes out exactly when the change
-- commits (lib/db/change_feed.ts follows it). The core service and the gateway keep GetUnit's
-- answers in memory and drop them on it. A new unit needs none: followers keep only what exists.
-- The trigger is named after the channel: a follower checks in the catalog that
-- `core_changes_units` exists (this migration has run) before it trusts the feed.
create function core.notify_unit_change() returns trigger
  language plpgsql
  as $$
  begin
    perform pg_notify('core_changes', 'unit:' || old.id::text);
    return null;
  end
  $$;

create trigger core_changes_units after update or delete on core.units
  for each row execute function core.notify_unit_change();
