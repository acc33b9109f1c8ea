-- The token service's security events (services/token/security_events.ts), kept with the audit
-- trail machinery every service shares (lib/audit): this is oauth's 0009_audit_events.sql for the
-- schema `token` and the channel `token_events`. What is recorded: consent decisions, codes
-- replayed, refresh tokens reused, tokens revoked, and per-minute summaries of failed client
-- authentications (proto/registry/token/v1/token_service.proto, ListEvents). Never a token, a
-- code or a secret: only their kinds and counts.
--
-- The audit trail (lib/audit): one row per change, written by the statement that makes the change
-- (so in its transaction), numbered per project in commit order.
--
-- `event_heads` holds each project's last number. A change takes the next one by updating its
-- project's head row, which it keeps locked until it commits: a project's changes commit one at a
-- time, so numbers are given in commit order with no gaps, and a follower that has read every
-- event up to N never sees a new one below N (the change feed's cursor relies on it).
create table token.event_heads (
  parent text primary key,
  seq bigint not null
);

create table token.events (
  -- The project id; `-` for failed authentications of client_ids no project has.
  parent text not null,
  seq bigint not null,
  occurred_at timestamptz(3) not null,
  method text not null,
  resource text not null,
  actor_sub text not null,
  actor_client_id text,
  actor_installation_id text,
  request_id text not null,
  source_ip text not null,
  user_agent text not null,
  peer text not null,
  changes jsonb not null,
  result text not null,
  primary key (parent, seq)
);
-- Retention deletes by age; rows are written in time order, so a BRIN index is enough.
create index events_occurred_at on token.events using brin (occurred_at);

-- Every event is announced on `token_events` when it commits, as `<parent> <seq>`: watchers wake
-- and read the table from their cursor (the notification carries no data, so a lost one costs
-- latency, never an event).
create function token.notify_event() returns trigger
  language plpgsql
  as $$
  begin
    perform pg_notify('token_events', new.parent || ' ' || new.seq::text);
    return null;
  end
  $$;
create trigger token_events_notify after insert on token.events
  for each row execute function token.notify_event();

-- What changed is kept as both rows, `{"old": ..., "new": ...}` (lib/audit's `changes`), or as a
-- list of fields for events that name them, and compared when an event is read: building the list
-- here cost more than the rest of the write.

-- The API form of an id (lib/platform/ids.ts): the prefix, `_`, and the UUID's 128 bits after two
-- zero bits as 26 Crockford base32 characters. For resource names of rows whose id the statement
-- finds (an installation consented again keeps its id).
create function token.type_id(prefix text, id uuid) returns text
  language plpgsql
  immutable
  parallel safe
  as $$
  declare
    bytes bytea := uuid_send(id);
    alphabet constant text := '0123456789abcdefghjkmnpqrstvwxyz';
    out text := prefix || '_';
    acc int := 0;
    bits int := 2; -- the two zero bits before the UUID's 128
  begin
    for i in 0..15 loop
      acc := (acc << 8) | get_byte(bytes, i);
      bits := bits + 8;
      while bits >= 5 loop
        bits := bits - 5;
        out := out || substr(alphabet, ((acc >> bits) & 31) + 1, 1);
      end loop;
      acc := acc & ((1 << bits) - 1);
    end loop;
    return out;
  end
  $$;
