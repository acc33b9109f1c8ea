-- A resource's etag is a keyed digest of its row's `xmin`, not the `xmin` itself (a counter of the
-- whole database, which would tell a caller how much everyone else writes): the same function as
-- the registry's schema has, with a key of its own (services/oauth/migrations/0016_opaque_etags.sql
-- says how it is made and why). Etags read before no longer match: a write under one is refused as
-- stale.
do $migration$
begin
  execute format(
    $function$
    create function core.etag(version xid) returns text
      language sql immutable strict parallel safe
      as $body$
        select encode(substring(sha256(%L::bytea || int8send(version::text::bigint)) for 8), 'hex')
      $body$
    $function$,
    '\x' || replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''));
end
$migration$;
