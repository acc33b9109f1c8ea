-- Client secrets that expire and say when they were last used, and a project's longest secret
-- lifetime.
--
-- expires_at is set when the secret is created and never changed; null: it never expires. An
-- expired secret does not verify, and stays until it is deleted.
--
-- last_used_at is written when the secret verifies, at most once a minute: the update names the
-- secret and changes it only when the value is null or more than a minute old, so replicas and
-- frequent callers do not multiply writes.
--
-- Neither touches the change feed (0004): the secrets' trigger fires on deletion only, so recording
-- a use, the one update a secret ever gets, notifies nobody (were it to, every follower would drop
-- the client it keeps, at every use). An expiry needs no notification either: followers keep it
-- with the answer that the secret verified (VerifyClientSecret's expires_at), and check it on use.

alter table oauth.client_secrets
  add column expires_at timestamptz(3),
  add column last_used_at timestamptz(3);

-- 0: no limit; at most 10 years (the API refuses more, and so does the table).
alter table oauth.configs
  add column secret_max_lifetime_seconds integer not null default 0
    check (secret_max_lifetime_seconds between 0 and 315360000);
