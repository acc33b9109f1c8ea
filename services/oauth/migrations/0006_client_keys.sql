-- How each client authenticates at the token endpoint, whether its access tokens must be bound
-- with DPoP, and the public keys of clients that authenticate with a signed JWT (private_key_jwt,
-- RFC 7523 2.2).
--
-- token_endpoint_auth_method (RFC 7591 2): a web client `client_secret_basic` (the default),
-- `client_secret_post` or `private_key_jwt`; a public client (spa, native) `none` only. The API
-- checks which method a type may have; the table checks the values, and that a public client has
-- no other.
--
-- oauth.client_keys keeps public keys only, as JWKs of their public members (`kty`, `crv`, `x`,
-- `y`, `n`, `e` with `kid`, `alg` and `use`): the registry never stores a private key, not even
-- one it generated (it is returned once, in the create response). `kid` is unique per client: an
-- assertion that names one is checked with that key only. expires_at is set at creation and never
-- changed (null: never expires); an expired key verifies no more and stays until deleted.
-- last_used_at is written as a secret's is (0005): at most once a minute.
--
-- The change feed (0004): a token service keeps a client's live keys, so a key's insertion
-- notifies `client:<client uuid>` as well as its deletion (a new key must verify at once, and
-- a follower that kept the list without it would refuse it). Recording a use, the one update a
-- key ever gets, notifies nobody: the trigger fires on insert and delete only. A change to a
-- client's token_endpoint_auth_method or dpop_bound_access_tokens is an update of the client,
-- which 0004's trigger already announces.

alter table oauth.clients
  add column token_endpoint_auth_method text,
  add column dpop_bound_access_tokens boolean not null default false;
update oauth.clients
  set token_endpoint_auth_method = case when type = 'web' then 'client_secret_basic' else 'none' end;
alter table oauth.clients
  alter column token_endpoint_auth_method set not null,
  add constraint clients_token_endpoint_auth_method check (
    token_endpoint_auth_method in
      ('client_secret_basic', 'client_secret_post', 'private_key_jwt', 'none')
    and (type = 'web' or token_endpoint_auth_method = 'none')
  );

-- A client inserted without a method (by SQL written before this migration: tools, benchmarks)
-- gets its type's default, as the rows above did; the API always names one.
create function oauth.default_token_endpoint_auth_method() returns trigger
  language plpgsql
  as $$
  begin
    new.token_endpoint_auth_method :=
      case when new.type = 'web' then 'client_secret_basic' else 'none' end;
    return new;
  end
  $$;

create trigger clients_default_token_endpoint_auth_method before insert on oauth.clients
  for each row when (new.token_endpoint_auth_method is null)
  execute function oauth.default_token_endpoint_auth_method();

create table oauth.client_keys (
  id uuid primary key,
  client_id uuid not null references oauth.clients (id) on delete cascade,
  kid text not null check (char_length(kid) between 1 and 128),
  algorithm text not null check (algorithm in ('EdDSA', 'ES256', 'RS256')),
  -- The public JWK; never a private member (the API refuses them, and so does the table).
  jwk jsonb not null check (
    jsonb_typeof(jwk) = 'object'
    and not (jwk ?| array['d', 'p', 'q', 'dp', 'dq', 'qi', 'oth', 'k'])
  ),
  created_at timestamptz(3) not null default now(),
  expires_at timestamptz(3),
  last_used_at timestamptz(3),
  -- Also the index of a client's keys (a client holds at most 20: listed in id order, sorted).
  unique (client_id, kid)
);

-- `new` on insert, `old` on delete: the key's client either way.
create function oauth.notify_client_key_change() returns trigger
  language plpgsql
  as $$
  begin
    perform pg_notify(
      'oauth_registry_changes',
      'client:' || (case when tg_op = 'DELETE' then old.client_id else new.client_id end)::text
    );
    return null;
  end
  $$;

create trigger oauth_registry_changes_client_keys after insert or delete on oauth.client_keys
  for each row execute function oauth.notify_client_key_change();
