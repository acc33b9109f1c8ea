-- Per-service Postgres roles: each service owns its schema and cannot touch the other's.
-- Run once per database, as a superuser, before the first rollout:
--   psql -v ON_ERROR_STOP=1 -d "$ADMIN_DATABASE_URL" -f deploy/sql/roles.sql
-- then set the passwords out of band (ALTER ROLE oauth_registry PASSWORD '...') and put
-- postgres://oauth_registry:...@host/db and postgres://registry_core:...@host/db into the
-- Secret keys oauth-database-url and core-database-url. Safe to run again.

do $$
begin
  if not exists (select from pg_roles where rolname = 'oauth_registry') then
    create role oauth_registry login;
  end if;
  if not exists (select from pg_roles where rolname = 'registry_core') then
    create role registry_core login;
  end if;
  execute format('grant connect on database %I to oauth_registry, registry_core', current_database());
end
$$;

-- Each service owns its schema (its migrations create and alter tables there) and nothing else.
create schema if not exists oauth authorization oauth_registry;
create schema if not exists core authorization registry_core;
alter schema oauth owner to oauth_registry;
alter schema core owner to registry_core;
revoke all on schema oauth from public;
revoke all on schema core from public;
revoke create on schema public from public;
