-- The signing keys are kept in every replica's memory (services/token/keys.ts), which read the
-- table once a minute: a key deleted or changed by SQL (an operator deleting a compromised key, or
-- ending its publication with `published_until`) went on verifying tokens for up to a minute. Each
-- change now notifies the channel `token_signing_keys` as it commits, and each replica reads the
-- keys again (the gateway drops the introspections it keeps). Payload: `keys` for an insertion, a
-- deletion or an update of anything but the sealed private half (sealing it again under a new
-- TOKEN_KEY_ENCRYPTION_KEY is the same key), `reset` for a TRUNCATE. Row triggers, so that a
-- statement that changes nothing (the purge of long-unpublished keys, run when a key is created)
-- notifies nobody; Postgres sends one notification per transaction for equal payloads.

create function token.notify_signing_keys() returns trigger
  language plpgsql
  as $$
  begin
    perform pg_notify('token_signing_keys', 'keys');
    return null;
  end
  $$;

create trigger signing_keys_changed after insert or delete on token.signing_keys
  for each row execute function token.notify_signing_keys();

create trigger signing_keys_updated after update on token.signing_keys
  for each row
  when (
    (old.kid, old.alg, old.public_jwk, old.signs_from, old.signs_until, old.published_until)
    is distinct from
    (new.kid, new.alg, new.public_jwk, new.signs_from, new.signs_until, new.published_until)
  )
  execute function token.notify_signing_keys();

create function token.notify_signing_keys_reset() returns trigger
  language plpgsql
  as $$
  begin
    perform pg_notify('token_signing_keys', 'reset');
    return null;
  end
  $$;

create trigger signing_keys_truncated after truncate on token.signing_keys
  for each statement execute function token.notify_signing_keys_reset();
