-- An installation's resource name (`projects/{project}/installations/{ins_...}`), kept with the row:
-- the event of a repeated consent names the installation that is there, whose id only the row
-- knows, and encoding it in SQL on every such consent (the PL/pgSQL type_id) took about 50 µs of
-- Postgres's 400. The registry sets it when it creates the installation; it never changes.
alter table oauth.installations add column name text;
update oauth.installations
  set name = 'projects/' || project_id || '/installations/' || oauth.type_id('ins', id);
alter table oauth.installations alter column name set not null;
