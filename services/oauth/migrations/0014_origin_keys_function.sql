-- The stored origin keys of a client (0003_origin_keys.sql) are computed on every insert and
-- update of a client. As a SQL function with an aggregate, `browser_origins` could not be inlined,
-- so Postgres parsed and planned its body again for each statement: about 110 µs of the 410 of
-- Postgres's CPU for a client's create (measured call by call against this version). PL/pgSQL
-- keeps its plan for the session. The keys are the same: nothing stored changes.
create or replace function oauth.browser_origins(origins text[]) returns text[]
  language plpgsql immutable strict parallel safe
  as $$
  declare
    keys text[] := '{}';
    origin text;
  begin
    foreach origin in array origins loop
      keys := keys || oauth.browser_origin(origin);
    end loop;
    return keys;
  end
  $$;
