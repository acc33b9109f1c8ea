-- The scopes a project declares (OAuthConfig.scopes): what the consent page says about each, and,
-- once a project declares any, the only scopes its applications may ask for. A JSON array of
-- {"name", "description", "sensitive"} objects, in the order the project gave them; the API checks
-- the items (names unique, at most 100), the table only that it is an array. An empty array (every
-- existing project) keeps the old rule: any syntactically valid scope.
--
-- Consent now adds to an installation's scopes rather than replacing them (the union: a consent
-- page that asked for one more scope must not take the others away), so the 100-scope limit of a
-- consent is checked on the installation itself: a consent whose union would exceed it fails.
-- The change feed (0004) already announces every update of a config and of an installation.

alter table oauth.configs
  add column scopes jsonb not null default '[]'
    constraint configs_scopes_array check (jsonb_typeof(scopes) = 'array');

alter table oauth.installations
  add constraint installations_scopes_limit check (cardinality(scopes) <= 100);
