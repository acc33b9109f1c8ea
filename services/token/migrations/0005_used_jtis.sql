-- JWTs that may be used once: client assertions (RFC 7523 3, `jti`) and DPoP proofs (RFC 9449
-- 11.1). A row says a `jti` was seen, under a scope that keeps issuers apart (the client of an
-- assertion, the key of a proof), until the JWT itself could no longer be accepted; the primary
-- key makes the second use fail in every replica, whichever sees it. The key is the SHA-256 of
-- scope and jti, so a row has a fixed size whatever an attacker puts in `jti`. Rows past
-- `expires_at` are deleted in the background; until then they are what refuses a replay.
create table token.used_jtis (
  key bytea primary key,
  expires_at timestamptz not null
);

-- Rows come in roughly in expiry order, so a BRIN index finds the expired ones for the purge at a
-- fraction of a B-tree's cost per insert (measured: it is written on every grant that carries a
-- client assertion or a DPoP proof).
create index used_jtis_expires_at on token.used_jtis using brin (expires_at);
