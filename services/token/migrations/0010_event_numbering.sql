-- Events are numbered once they have committed (lib/audit's numberEvents), no longer by the
-- statement that writes them: that statement held its project's counter row locked until it
-- committed, so a project's changes committed one at a time; and each event's `pg_notify` made
-- every notifying commit of the database wait for the one before it. Through the gateway, the two
-- together halved the rate of creates.
-- This is oauth's 0010_event_numbering.sql for the schema `token`.
--
-- An event is written with a null `seq` and an `id` in write order; numbering gives each
-- project's new events the numbers after its head (`event_heads`), one run at a time. Watchers
-- no longer wait for a notification: the feed numbers and looks every 250 ms while anyone watches
-- (lib/audit/feed.ts).
drop trigger token_events_notify on token.events;
drop function token.notify_event();

alter table token.events drop constraint events_pkey;
alter table token.events add column id bigint generated always as identity primary key;
alter table token.events alter column seq drop not null;
create unique index events_number on token.events (parent, seq);
-- What numbering looks for.
create index events_unnumbered on token.events (id) where seq is null;
