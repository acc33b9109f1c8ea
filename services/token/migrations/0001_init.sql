-- The token service's state. Clients, secrets and installations stay in the oauth-registry; this
-- schema keeps only what the authorization server itself owns.

-- ES256 signing keys. The private JWK is sealed with AES-256-GCM under TOKEN_KEY_ENCRYPTION_KEY
-- (12-byte IV, then the ciphertext and its tag; the kid is the additional data), so a dump of the
-- database signs nothing. A key signs from signs_from until signs_until, and is published in the
-- JWK Set from its creation (a whole rotation period before it signs) until published_until, when
-- the last token it signed has expired.
create table token.signing_keys (
  kid text primary key,
  alg text not null check (alg = 'ES256'),
  public_jwk jsonb not null,
  private_jwk_sealed bytea not null,
  created_at timestamptz(3) not null,
  signs_from timestamptz(3) not null,
  signs_until timestamptz(3) not null check (signs_until > signs_from),
  published_until timestamptz(3) not null check (published_until >= signs_until)
);

create index signing_keys_signs_from on token.signing_keys (signs_from);

-- Access tokens revoked before their expiry (RFC 7009). A row is needed only until the token's own
-- `exp`; older rows are deleted.
create table token.revoked_tokens (
  jti uuid primary key,
  expires_at timestamptz(3) not null,
  revoked_at timestamptz(3) not null
);

create index revoked_tokens_expires_at on token.revoked_tokens (expires_at);
