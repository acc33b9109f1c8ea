-- The filters of an event list (lib/audit's listEvents) by index, newest first: a page walked the
-- project's events until it had filled, so a filter that matched few took a scan of them all (on
-- a million events of one project: 276 ms for a resource that matched none, 157 ms for an actor,
-- 137 ms for a method; 0.1 ms each with these). Only numbered events are listed, and only
-- numbering adds them here: a change's own statement writes none of these entries. The resource
-- is compared as bytes ("C"), so that a resource and those under it are one range of the index.
create index events_resource on core.events (parent, resource collate "C", seq) where seq is not null;
create index events_actor on core.events (parent, actor_sub, seq) where seq is not null;
create index events_method on core.events (parent, method, seq) where seq is not null;
