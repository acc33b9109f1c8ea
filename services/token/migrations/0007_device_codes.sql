-- The device authorization grant (RFC 8628). A device code is stored only as its SHA-256 (256
-- random bits, as codes are); a user code (8 of 20 consonants, 34.6 bits: guessable, hence the
-- limit below) as its SHA-256 too, of its normalised form (`BCDFGHJK`), unique among the rows
-- kept. A row is kept until an hour after it expired, so that a late poll is told `expired_token`.
create table token.device_codes (
  device_code_hash bytea primary key,
  user_code_hash bytea not null unique,
  client_id text not null,
  project_id text not null,
  scopes text[] not null,
  created_at timestamptz(3) not null,
  expires_at timestamptz(3) not null,
  -- Seconds the device must wait between polls: 5, plus 5 for every slow_down (RFC 8628 3.5).
  interval_seconds integer not null,
  -- The latest poll (the issue time before the first).
  last_polled_at timestamptz(3) not null,
  -- 'pending', then 'approved' (with family_id, account_id, principal_id) or 'denied'.
  status text not null default 'pending' check (status in ('pending', 'approved', 'denied')),
  decided_at timestamptz(3),
  -- The family the approval made (tokens are issued into it, and revoked with it).
  family_id uuid references token.families (id) on delete set null,
  account_id text,
  principal_id text,
  redeemed_at timestamptz(3)
);

create index device_codes_expires_at on token.device_codes (expires_at);

-- User-code guessing (RFC 8628 5.1): each wrong user code, by the SHA-256 of what it counts
-- against (the session, the client's address), kept a minute; and the keys refused until `until`.
-- In Postgres so that every replica counts the same.
create table token.user_code_failures (
  key bytea not null,
  at timestamptz(3) not null
);

create index user_code_failures_key_at on token.user_code_failures (key, at);

create table token.user_code_blocks (
  key bytea primary key,
  until timestamptz(3) not null
);
