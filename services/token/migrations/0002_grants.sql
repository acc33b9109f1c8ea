-- What the authorization code and refresh token grants keep. Codes and refresh tokens are stored
-- only as SHA-256 hashes (they are 256-bit random values: a dump of the table redeems nothing).

-- A family: every token descended from one authorization code (the code's access token, its
-- refresh token, and each rotation's). Revoking a family (a code redeemed twice, a spent refresh
-- token used again, a refresh token revoked through RFC 7009) revokes all of them at once.
create table token.families (
  id uuid primary key,
  client_id text not null,
  project_id text not null,
  installation_id text not null,
  created_at timestamptz(3) not null,
  revoked_at timestamptz(3),
  -- When the last token of the family expires; the row is deleted after it.
  expires_at timestamptz(3) not null
);

create index families_expires_at on token.families (expires_at);

-- Authorization codes (RFC 6749 4.1.2): single use, at most 60 seconds, bound to the client, the
-- redirect URI and the PKCE challenge, and to the installation the user's consent made.
create table token.authorization_codes (
  code_hash bytea primary key,
  family_id uuid not null references token.families (id) on delete cascade,
  client_id text not null,
  -- The redirect_uri parameter of the authorization request ('' when it had none, RFC 6749 4.1.3).
  redirect_uri text not null,
  code_challenge text not null,
  scopes text[] not null,
  account_id text not null,
  principal_id text not null,
  expires_at timestamptz(3) not null,
  redeemed_at timestamptz(3)
);

-- Refresh tokens (RFC 6749 6), rotated on every use (RFC 9700 4.14.2): a used one is spent.
create table token.refresh_tokens (
  token_hash bytea primary key,
  family_id uuid not null references token.families (id) on delete cascade,
  client_id text not null,
  scopes text[] not null,
  account_id text not null,
  principal_id text not null,
  created_at timestamptz(3) not null,
  expires_at timestamptz(3) not null,
  spent_at timestamptz(3)
);

create index refresh_tokens_family on token.refresh_tokens (family_id);

-- The access tokens each family issued, so that revoking the family revokes them too.
create table token.family_access_tokens (
  jti uuid primary key,
  family_id uuid not null references token.families (id) on delete cascade,
  expires_at timestamptz(3) not null
);

create index family_access_tokens_family on token.family_access_tokens (family_id);
