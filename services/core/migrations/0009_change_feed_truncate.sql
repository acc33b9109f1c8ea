-- TRUNCATE fires no row trigger, so emptying core.units told no follower (0008): replicas went on
-- answering GetUnit with units that were gone. A statement-level trigger notifies `reset`, which no
-- follower knows as a kind and so drops everything.
create function core.notify_reset() returns trigger
  language plpgsql
  as $$
  begin
    perform pg_notify('core_changes', 'reset');
    return null;
  end
  $$;

create trigger core_changes_truncate after truncate on core.units
  for each statement execute function core.notify_reset();
