-- A resource's etag was its row's `xmin` as text: the id of the transaction that last wrote it,
-- a counter of the whole database. Two etags of one's own resources then told how many
-- transactions every other project had made in between. The etag is now a keyed digest of the
-- `xmin` (the first 8 bytes, in hex, of the SHA-256 of a key of this database and the version): it
-- still changes with every write of the row and with nothing else, and says nothing of the
-- counter. The key is drawn once, here, and is part of the function's text, so the function is
-- one immutable expression that Postgres inlines into each statement (no table read, no call;
-- `convert_to` would have kept it from inlining, being only stable). Whoever may read the
-- database's catalog (or an EXPLAIN of a statement) may read the key: it hides the counter from
-- the API's callers, not from the database's users. Etags read
-- before this migration no longer match: a write conditional on one is refused as stale, and the
-- caller reads the resource again.
do $migration$
begin
  execute format(
    $function$
    create function oauth.etag(version xid) returns text
      language sql immutable strict parallel safe
      as $body$
        select encode(substring(sha256(%L::bytea || int8send(version::text::bigint)) for 8), 'hex')
      $body$
    $function$,
    '\x' || replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''));
end
$migration$;
