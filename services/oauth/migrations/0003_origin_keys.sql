-- CORS at the token endpoint: the token service asks whether a browser's Origin header is a
-- registered JavaScript origin of an active client. Origins are kept as the project wrote them;
-- browsers send them serialised (RFC 6454 6.2, the WHATWG URL standard): scheme and host in lower
-- case, the port without leading zeros and left out when it is the scheme's default. origin_keys
-- holds each registered origin in that form, indexed for the lookup. (IPv6 literals are only
-- lower-cased: one registered other than as a browser writes it, `[::1]`, matches nothing.)

create function oauth.browser_origin(origin text) returns text
  language sql immutable strict parallel safe
  as $$
    select regexp_replace(
      regexp_replace(lower(origin), ':0*([1-9][0-9]*)$', ':\1'),
      '^(https://.*):443$|^(http://.*):80$',
      '\1\2')
  $$;

create function oauth.browser_origins(origins text[]) returns text[]
  language sql immutable strict parallel safe
  as $$ select coalesce(array_agg(oauth.browser_origin(o)), '{}') from unnest(origins) as o $$;

alter table oauth.clients
  add column origin_keys text[] not null
  generated always as (oauth.browser_origins(javascript_origins)) stored;

create index clients_origin_keys on oauth.clients using gin (origin_keys);
