-- Idempotency keys of the create RPCs (lib/idempotency.ts): one row per (caller, RPC, key),
-- remembered for IDEMPOTENCY_TTL_SECONDS (24 h) and purged after that. `caller` is the JSON array
-- [sub, account_id, space]; `request_hash` the SHA-256 of the request message (binary protobuf).
-- While the first request runs, `owner` names it and the outcome is null; then exactly one of
-- `response` (the response message, binary protobuf, secrets left out) and `error` (code,
-- message, details) is set with `completed_at`.
create table oauth.idempotency_keys (
  caller text not null,
  rpc text not null,
  key text not null,
  request_hash bytea not null,
  owner uuid,
  response bytea,
  error jsonb,
  created_at timestamptz(3) not null default now(),
  completed_at timestamptz(3),
  primary key (caller, rpc, key)
);
create index idempotency_keys_created_at on oauth.idempotency_keys (created_at);
