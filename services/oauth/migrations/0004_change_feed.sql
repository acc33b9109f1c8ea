-- The change feed: every change to what other services keep in memory notifies the channel
-- `oauth_registry_changes` in the same transaction, so the notification goes out exactly when the
-- change commits (lib/db/change_feed.ts follows it). Payloads:
--
-- - `client:<uuid>`: a client was updated or deleted, or one of its secrets deleted;
-- - `origins`: a client with JavaScript origins was created (answers that an origin is not
--   registered may be wrong now);
-- - `installation:<uuid>`, `config:<project_id>`: updated or deleted.
--
-- What is created needs no notification otherwise: followers keep only what exists, so nothing
-- they hold can be made wrong by a new row (a new secret verifies on its first use, through the
-- registry). Row-level triggers: a single-row change (every API call) costs one pg_notify, an
-- insert without origins none; identical payloads in one transaction are delivered once.

-- One function per table: a row's fields are resolved when the function is compiled.
create function oauth.notify_client_change() returns trigger
  language plpgsql
  as $$
  begin
    perform pg_notify('oauth_registry_changes', 'client:' || old.id::text);
    return null;
  end
  $$;

create function oauth.notify_secret_change() returns trigger
  language plpgsql
  as $$
  begin
    perform pg_notify('oauth_registry_changes', 'client:' || old.client_id::text);
    return null;
  end
  $$;

create function oauth.notify_installation_change() returns trigger
  language plpgsql
  as $$
  begin
    perform pg_notify('oauth_registry_changes', 'installation:' || old.id::text);
    return null;
  end
  $$;

create function oauth.notify_config_change() returns trigger
  language plpgsql
  as $$
  begin
    perform pg_notify('oauth_registry_changes', 'config:' || old.project_id);
    return null;
  end
  $$;

create function oauth.notify_origins() returns trigger
  language plpgsql
  as $$
  begin
    perform pg_notify('oauth_registry_changes', 'origins');
    return null;
  end
  $$;

-- Keys never change (an update's old row names the same resource as its new one). The triggers are
-- named after the channel: a follower checks in the catalog that `oauth_registry_changes_clients`
-- exists (this migration has run) before it trusts the feed.
create trigger oauth_registry_changes_origins after insert on oauth.clients
  for each row when (cardinality(new.javascript_origins) > 0)
  execute function oauth.notify_origins();
create trigger oauth_registry_changes_clients after update or delete on oauth.clients
  for each row execute function oauth.notify_client_change();
create trigger oauth_registry_changes_secrets after delete on oauth.client_secrets
  for each row execute function oauth.notify_secret_change();
create trigger oauth_registry_changes_installations after update or delete on oauth.installations
  for each row execute function oauth.notify_installation_change();
create trigger oauth_registry_changes_configs after update or delete on oauth.configs
  for each row execute function oauth.notify_config_change();
