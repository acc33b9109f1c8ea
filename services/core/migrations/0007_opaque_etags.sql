-- A resource's etag was its row's `xmin` as text: the id of the transaction that last wrote it,
-- a counter of the whole database, which told a caller how much everyone else writes. It is now a
-- keyed digest of the `xmin` (the first 8 bytes, in hex, of the SHA-256 of a key of this schema
-- and the version), one immutable expression that Postgres inlines, with the key drawn here and
-- part of its text (lib/audit's `etagOf` says how statements use it). Etags read before no longer
-- match: a write under one is refused as stale.
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
