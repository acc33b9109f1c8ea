-- A create whose idempotency key was taken over while it ran (its lock expired: another request
-- with the key runs the create now) must not commit: the two would make two records. The statement
-- that marks the key (lib/audit's eventCte) calls this when the key is no longer its own, so the
-- change rolls back with it; 40001 is ABORTED, whose retry is answered by the request that holds
-- the key.
create function core.idempotency_key_taken() returns text language plpgsql as $$
begin
  raise exception using errcode = '40001', message = 'the idempotency key was taken over';
end $$;
