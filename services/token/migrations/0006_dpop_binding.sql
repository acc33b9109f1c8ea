-- DPoP (RFC 9449 5): a refresh token issued to a public client with a DPoP proof is bound to the
-- proof's key, and may only be used with a proof of that key. The column holds the key's RFC 7638
-- thumbprint (base64url SHA-256); null for a token that is not bound (a confidential client's, or
-- one issued without a proof). A rotation's new token is bound as the request that made it was.
alter table token.refresh_tokens add column dpop_jkt text;
