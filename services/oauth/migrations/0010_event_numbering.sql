-- Events are numbered once they have committed (lib/audit's numberEvents), no longer by the
-- statement that writes them: that statement held its project's counter row locked until it
-- committed, so a project's changes committed one at a time; and each event's `pg_notify` made
-- every notifying commit of the database wait for the one before it. Through the gateway, the two
-- together halved the rate of creates.
--
-- An event is written with a null `seq` and an `id` in write order; numbering gives each
-- project's new events the numbers after its head (`event_heads`), one run at a time. Watchers
-- no longer wait for a notification: the feed numbers and looks every 250 ms while anyone watches
-- (lib/audit/feed.ts).
drop trigger oauth_events_notify on oauth.events;
drop function oauth.notify_event();

alter table oauth.events drop constraint events_pkey;
alter table oauth.events add column id bigint generated always as identity primary key;
alter table oauth.events alter column seq drop not null;
create unique index events_number on oauth.events (parent, seq);
-- What numbering looks for.
create index events_unnumbered on oauth.events (id) where seq is null;
