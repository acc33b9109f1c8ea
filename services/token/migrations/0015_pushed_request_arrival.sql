-- A pushed request's two lifetimes (RFC 9126 2.2): `expires_at` starts as the 60 seconds its
-- request_uri has to reach the authorization endpoint; `arrived_at` is set when it first does, and
-- `expires_at` is then moved once to 10 minutes later (the consent page's CSRF lifetime), for the
-- user's sign-in and decision.
alter table token.pushed_requests add column arrived_at timestamptz;
