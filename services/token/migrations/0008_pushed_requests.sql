-- Pushed authorization requests (RFC 9126): a request a client sent from its back end, checked
-- whole, kept under the SHA-256 of its `request_uri` for 60 seconds, for the client that pushed
-- it; `decided_at` is set by the one decision it is good for. `request` is the AuthorizationRequest
-- message in Protobuf binary. Rows past their expiry are deleted in the background.
create table token.pushed_requests (
  request_uri_hash bytea primary key,
  client_id text not null,
  request bytea not null,
  expires_at timestamptz not null,
  decided_at timestamptz
);

create index pushed_requests_expires_at on token.pushed_requests using brin (expires_at);
