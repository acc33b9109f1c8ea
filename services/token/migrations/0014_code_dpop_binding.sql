-- DPoP-bound authorization codes (RFC 9449 10): the RFC 7638 thumbprint (base64url SHA-256) of the
-- key the code must be redeemed with, from the authorization request's `dpop_jkt` or from the DPoP
-- proof its pushed request carried (RFC 9449 10.1); null for a code that is not bound.
alter table token.authorization_codes add column dpop_jkt text;
