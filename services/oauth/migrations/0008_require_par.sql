-- Whether a client's authorization requests must be pushed first (RFC 9126 6): the token service
-- reads it from the Client message; nothing else changes. An update of it notifies the change feed
-- as every update of a client does (0004).
alter table oauth.clients
  add column require_pushed_authorization_requests boolean not null default false;
