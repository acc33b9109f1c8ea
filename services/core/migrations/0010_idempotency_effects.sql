-- What a key's request changed, written by the statement that changed it (lib/audit's eventCte,
-- when the call holds the key): the name of the resource its event names. The change and this mark
-- commit together, so a key whose outcome was never stored (the process died, or storing it failed,
-- after the commit) still tells that its request completed: a retry is answered from the resource
-- instead of creating it a second time (lib/policy/idempotency.ts). Null while nothing has
-- committed, and for an outcome that changed nothing.
alter table core.idempotency_keys add column effect text;
