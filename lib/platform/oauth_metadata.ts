/**
 * What the authorization server's metadata (RFC 8414) says that both the gateway, which serves it,
 * and the token service, which acts on it, need: the endpoints' paths under the issuer (a client
 * assertion may name the token endpoint's URL as its audience, RFC 7523 3) and the JWS algorithms
 * it verifies.
 *
 * @module
 */

/** Each OAuth endpoint's path, below the issuer's URL. */
export const oauthPaths = {
  metadata: "/.well-known/oauth-authorization-server",
  authorize: "/oauth2/authorize",
  jwks: "/oauth2/jwks",
  token: "/oauth2/token",
  introspect: "/oauth2/introspect",
  revoke: "/oauth2/revoke",
  /** RFC 8628 3.1: where a device asks for a device code and a user code. */
  deviceAuthorization: "/oauth2/device_authorization",
  /** RFC 8628 3.3: the verification page, where the user types the user code. */
  device: "/oauth2/device",
  /** RFC 9126 2: pushed authorization requests. */
  par: "/oauth2/par",
} as const;

/**
 * The JWS algorithms of client assertions (`private_key_jwt`): Ed25519 keys under both of their
 * names (`EdDSA`, and `Ed25519` of RFC 9864, which oauth4webapi signs with by default), P-256 and
 * RSA keys.
 */
export const assertionSigningAlgs: readonly string[] = ["EdDSA", "Ed25519", "ES256", "RS256"];

/**
 * The JWS algorithms of DPoP proofs (RFC 9449 5.1): Ed25519 under both names, and P-256. Not
 * RSA: a proof is checked on every token request, and its key is made for the occasion.
 */
export const dpopSigningAlgs: readonly string[] = ["EdDSA", "Ed25519", "ES256"];
