-- TRUNCATE fires no row trigger, so emptying token.revoked_tokens told no replica (0004), each of
-- which went on refusing the tokens it had known as revoked. A statement-level trigger notifies
-- `reset`: each replica reads the list again.
create function token.notify_revocations_reset() returns trigger
  language plpgsql
  as $$
  begin
    perform pg_notify('token_revocations', 'reset');
    return null;
  end
  $$;

create trigger revoked_tokens_truncated after truncate on token.revoked_tokens
  for each statement execute function token.notify_revocations_reset();
