-- The change feed: every change to what other services keep in memory (clients, their secrets,
-- installations, consent-screen configs) notifies the channel `oauth_registry_changes` in the same
-- transaction, so the notification goes out exactly when the change commits (lib/db/change_feed.ts
-- follows it). Payloads: `client:<uuid>` (the client or one of its secrets), `installation:<uuid>`,
-- `config:<project_id>`, and `reset` when one statement changed more than 64 rows (a bulk load):
-- then a follower empties its cache instead of receiving a notification per row.
--
-- Statement-level triggers with transition tables: one call per statement, whatever its size.

create function oauth.notify_changes() returns trigger
  language plpgsql
  as $$
  declare
    kind text := tg_argv[0];
    keys text[];
  begin
    if tg_op = 'DELETE' then
      execute format('select array_agg(distinct %I::text) from old_rows', tg_argv[1]) into keys;
    else
      execute format('select array_agg(distinct %I::text) from new_rows', tg_argv[1]) into keys;
    end if;
    if keys is null then
      return null;
    end if;
    if cardinality(keys) > 64 then
      perform pg_notify('oauth_registry_changes', 'reset');
    else
      perform pg_notify('oauth_registry_changes', kind || ':' || k) from unnest(keys) as k;
    end if;
    return null;
  end
  $$;

create trigger clients_inserted after insert on oauth.clients
  referencing new table as new_rows
  for each statement execute function oauth.notify_changes('client', 'id');
create trigger clients_updated after update on oauth.clients
  referencing new table as new_rows
  for each statement execute function oauth.notify_changes('client', 'id');
create trigger clients_deleted after delete on oauth.clients
  referencing old table as old_rows
  for each statement execute function oauth.notify_changes('client', 'id');

create trigger client_secrets_inserted after insert on oauth.client_secrets
  referencing new table as new_rows
  for each statement execute function oauth.notify_changes('client', 'client_id');
create trigger client_secrets_deleted after delete on oauth.client_secrets
  referencing old table as old_rows
  for each statement execute function oauth.notify_changes('client', 'client_id');

create trigger installations_inserted after insert on oauth.installations
  referencing new table as new_rows
  for each statement execute function oauth.notify_changes('installation', 'id');
create trigger installations_updated after update on oauth.installations
  referencing new table as new_rows
  for each statement execute function oauth.notify_changes('installation', 'id');
create trigger installations_deleted after delete on oauth.installations
  referencing old table as old_rows
  for each statement execute function oauth.notify_changes('installation', 'id');

create trigger configs_inserted after insert on oauth.configs
  referencing new table as new_rows
  for each statement execute function oauth.notify_changes('config', 'project_id');
create trigger configs_updated after update on oauth.configs
  referencing new table as new_rows
  for each statement execute function oauth.notify_changes('config', 'project_id');
create trigger configs_deleted after delete on oauth.configs
  referencing old table as old_rows
  for each statement execute function oauth.notify_changes('config', 'project_id');
