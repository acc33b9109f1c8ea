-- Two changes to what followers keep that the change feed (0004) did not announce, because the API
-- never makes them; SQL can, and an operator's statement must reach every replica's memory as the
-- API's do:
--
-- - An update of a secret or a key in anything but its use. The triggers of 0004 and 0006 fire on
--   deletion (and a key's insertion) only, so that recording a use, the one update the API makes,
--   notifies nobody. But a token service keeps a verified secret with its expiry, and a client's
--   live keys, until a notification names their client: ending a leaked secret or key at once with
--   `update ... set expires_at = now()`, or replacing a key's JWK or a secret's hash, went on
--   being honoured by every replica that had it in memory. Such an update now notifies
--   `client:<uuid>`, as a deletion does. A re-hash under another server key (0017) is the same
--   secret and still notifies nobody: it changes the hash and the key's id together, where another
--   secret's hash under the same key keeps the id.
-- - TRUNCATE, which fires no row trigger: a statement-level trigger on each table followers keep
--   notifies `reset`, which no follower knows as a kind and so drops everything.

create trigger oauth_registry_changes_secrets_update after update on oauth.client_secrets
  for each row
  when (
    (old.id, old.client_id, old.expires_at) is distinct from (new.id, new.client_id, new.expires_at)
    or (old.secret_hash is distinct from new.secret_hash
      and old.hash_key_id is not distinct from new.hash_key_id)
  )
  execute function oauth.notify_secret_change();

create trigger oauth_registry_changes_client_keys_update after update on oauth.client_keys
  for each row
  when (
    (old.id, old.client_id, old.kid, old.algorithm, old.jwk, old.expires_at)
    is distinct from
    (new.id, new.client_id, new.kid, new.algorithm, new.jwk, new.expires_at)
  )
  execute function oauth.notify_client_key_change();

create function oauth.notify_reset() returns trigger
  language plpgsql
  as $$
  begin
    perform pg_notify('oauth_registry_changes', 'reset');
    return null;
  end
  $$;

create trigger oauth_registry_changes_truncate after truncate on oauth.clients
  for each statement execute function oauth.notify_reset();
create trigger oauth_registry_changes_truncate after truncate on oauth.client_secrets
  for each statement execute function oauth.notify_reset();
create trigger oauth_registry_changes_truncate after truncate on oauth.client_keys
  for each statement execute function oauth.notify_reset();
create trigger oauth_registry_changes_truncate after truncate on oauth.installations
  for each statement execute function oauth.notify_reset();
create trigger oauth_registry_changes_truncate after truncate on oauth.configs
  for each statement execute function oauth.notify_reset();
