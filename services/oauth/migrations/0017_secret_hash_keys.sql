-- Which key each client secret's hash was made under, so that CLIENT_SECRET_HMAC_KEY can change
-- without invalidating secrets: the old key stays in CLIENT_SECRET_HMAC_PREVIOUS_KEYS, and a secret
-- that verifies under it is hashed again under the new one (services/oauth/secrets.ts).
--
-- hash_key_id: the first 8 bytes of an HMAC of a fixed label under the key, which tells keys apart
-- and says nothing of the key. Null: hashed before ids were kept (under the key of that time); such
-- a hash is tried under every configured key, and gets the id of the one that matches.
--
-- A re-hash is an update that notifies nobody: the secrets' change-feed trigger (0004) fires on
-- deletion only, and what followers keep of a verified secret does not depend on the key.

alter table oauth.client_secrets add column hash_key_id bytea;
