-- The OAuth registry's tables. Identifiers are UUIDv7 (the API shows them as TypeIDs), so
-- primary-key order is creation order and every list is a keyset scan of an index.

create table oauth.configs (
  project_id text primary key,
  application_name text not null,
  support_email text,
  logo_uri text,
  homepage_uri text,
  privacy_policy_uri text,
  terms_of_service_uri text,
  authorized_domains text[] not null default '{}',
  audience text not null check (audience in ('internal', 'external')),
  publishing_status text not null default 'testing'
    check (publishing_status in ('testing', 'production')),
  created_at timestamptz(3) not null default now(),
  updated_at timestamptz(3) not null default now()
);

create table oauth.clients (
  id uuid primary key,
  project_id text not null references oauth.configs (project_id),
  name text not null,
  type text not null check (type in ('web', 'spa', 'native')),
  redirect_uris text[] not null default '{}',
  javascript_origins text[] not null default '{}',
  status text not null default 'active' check (status in ('active', 'suspended')),
  created_at timestamptz(3) not null default now(),
  updated_at timestamptz(3) not null default now()
);
create index clients_project_id_id on oauth.clients (project_id, id);

-- Ids of deleted clients, so that a page cursor naming one stays valid (ListClients).
create table oauth.deleted_clients (
  id uuid primary key,
  project_id text not null,
  deleted_at timestamptz(3) not null default now()
);

create table oauth.client_secrets (
  id uuid primary key,
  client_id uuid not null references oauth.clients (id) on delete cascade,
  -- HMAC-SHA256 of the plaintext under CLIENT_SECRET_HMAC_KEY; the plaintext is never stored.
  secret_hash bytea not null,
  secret_hint text not null,
  created_at timestamptz(3) not null default now()
);
create index client_secrets_client_id_id on oauth.client_secrets (client_id, id);

create table oauth.installations (
  id uuid primary key,
  project_id text not null references oauth.configs (project_id),
  account_id text not null,
  principal_id text,
  application_name text not null,
  scopes text[] not null default '{}',
  status text not null check (status in ('pending', 'active', 'revoked')),
  authorized_by_id text not null,
  authorized_at timestamptz(3) not null default now(),
  created_at timestamptz(3) not null default now(),
  revoked_at timestamptz(3),
  check ((status = 'revoked') = (revoked_at is not null))
);
-- One live (not revoked) installation per project and account.
create unique index installations_live on oauth.installations (project_id, account_id)
  where status <> 'revoked';
create index installations_account_id_id on oauth.installations (account_id, id);
