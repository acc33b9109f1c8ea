-- Per-service Postgres roles: each service owns its schema and cannot touch the others'.
-- Run once per database, as a superuser, before the first rollout:
--   psql -v ON_ERROR_STOP=1 -d "$ADMIN_DATABASE_URL" -f deploy/sql/roles.sql
-- then set the passwords out of band (ALTER ROLE oauth_registry PASSWORD '...') and put
-- postgres://oauth_registry:...@host/db, postgres://registry_core:...@host/db,
-- postgres://registry_token:...@host/db and postgres://registry_gateway:...@host/db into the
-- Secret keys oauth-database-url, core-database-url, token-database-url and
-- gateway-database-url. Safe to run again.
--
-- The gateway's role reads no table: it only listens to the registry's and the token service's
-- change notifications (LISTEN and NOTIFY need nothing but CONNECT), for its caches of
-- introspections and client reads.

do $$
begin
  if not exists (select from pg_roles where rolname = 'oauth_registry') then
    create role oauth_registry login;
  end if;
  if not exists (select from pg_roles where rolname = 'registry_core') then
    create role registry_core login;
  end if;
  if not exists (select from pg_roles where rolname = 'registry_token') then
    create role registry_token login;
  end if;
  if not exists (select from pg_roles where rolname = 'registry_gateway') then
    create role registry_gateway login;
  end if;
  execute format(
    'grant connect on database %I to oauth_registry, registry_core, registry_token, registry_gateway',
    current_database());
end
$$;

-- Each service owns its schema (its migrations create and alter tables there) and nothing else.
create schema if not exists oauth authorization oauth_registry;
create schema if not exists core authorization registry_core;
create schema if not exists token authorization registry_token;
alter schema oauth owner to oauth_registry;
alter schema core owner to registry_core;
alter schema token owner to registry_token;
revoke all on schema oauth from public;
revoke all on schema core from public;
revoke all on schema token from public;
revoke create on schema public from public;
