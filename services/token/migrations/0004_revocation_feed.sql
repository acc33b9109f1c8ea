-- Revoked access tokens are known to every replica from memory (services/token/revocations.ts):
-- each revocation notifies the channel `token_revocations` in the same transaction, so that it
-- goes out exactly when the revocation commits. Payload: `<jti>` of each revoked token, or `reset`
-- when one statement revoked more than 64 (a refresh-token family with many access tokens): then a
-- replica reads the list again. Deletions (the purge of expired rows) notify nothing: a token past
-- its `exp` is refused before its revocation is looked at.

create function token.notify_revocations() returns trigger
  language plpgsql
  as $$
  declare
    revoked bigint;
  begin
    select count(*) into revoked from new_rows;
    if revoked > 64 then
      perform pg_notify('token_revocations', 'reset');
    else
      perform pg_notify('token_revocations', jti::text) from new_rows;
    end if;
    return null;
  end
  $$;

create trigger revoked_tokens_inserted after insert on token.revoked_tokens
  referencing new table as new_rows
  for each statement execute function token.notify_revocations();
