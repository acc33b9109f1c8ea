-- Access tokens are signed with Ed25519 (JWS EdDSA) from now on: Deno's ECDSA P-256 costs about
-- ten times as much per signature and per verification. ES256 keys that have not signed anything
-- yet go; the one signing now stops signing at once (the service then makes EdDSA keys) and stays
-- published, for verifying its tokens, until they have expired.
alter table token.signing_keys drop constraint signing_keys_alg_check;
alter table token.signing_keys add constraint signing_keys_alg_check
  check (alg in ('ES256', 'EdDSA'));

delete from token.signing_keys where alg = 'ES256' and signs_from > now();
update token.signing_keys
  set signs_until = greatest(signs_from + interval '1 millisecond', now())
  where alg = 'ES256' and signs_until > now();
