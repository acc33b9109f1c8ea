// The benchmark peer: node-oidc-provider (panva) in one Node process, configured to do the work of
// our client_credentials grant and token introspection. Run by Node 24 (not Deno) from
// bench/peer.ts, which installs both; prints `listening <port>` on stdout when ready.
//
// Environment: PORT, PEER_DIR (the folder that npm installed oidc-provider into; this file is not
// under it, so the package is resolved from there), PEER_CLIENT_ID, PEER_CLIENT_SECRET.
//
// What differs from our stack, and whom it favours:
// - Storage: oidc-provider's default in-memory adapter (an LRU in this process), not shared with
//   any other replica and lost on restart. JWT access tokens are stored nowhere, as ours are not;
//   the opaque token that introspection uses is found in this process's memory (always hot: it is
//   the only one), where ours checks a revocation list that Postgres keeps current in every
//   replica. Favours the peer.
// - Introspection looks an opaque token up (oidc-provider introspects no JWT access token), where
//   ours first verifies the JWT's EdDSA signature. Favours the peer.
// - Client authentication: a static client in memory, its plaintext secret compared in constant
//   time, where ours compares an HMAC-SHA256 of it in the registry service. Favours the peer.
// - One process serves HTTP/1.1 itself; ours is a gateway and gRPC services. Favours the peer.
// - Per request, Koa middleware, CORS headers, resource-server resolution (getResourceServerInfo)
//   and, for an introspection without token_type_hint, two in-memory lookups (AccessToken, then
//   ClientCredentials). Costs the peer, a little.

import * as crypto from "node:crypto";
import * as http from "node:http";
import { createRequire } from "node:module";
import * as path from "node:path";
import { pathToFileURL } from "node:url";

const port = Number(process.env.PORT);
if (!Number.isInteger(port) || port <= 0) throw new Error("PORT must be a port number");
if (!process.env.PEER_DIR) throw new Error("PEER_DIR must name the folder of the npm install");
const entry = createRequire(path.resolve(process.env.PEER_DIR, "package.json")).resolve(
  "oidc-provider",
);
const { default: Provider } = await import(pathToFileURL(entry).href);
const clientId = process.env.PEER_CLIENT_ID ?? "bench-client";
const clientSecret = process.env.PEER_CLIENT_SECRET ?? "bench-secret";

/** JWT access tokens, EdDSA, 900 s like ours. */
const jwtResource = "urn:bench:api";
/** Opaque access tokens, only for introspection: oidc-provider introspects no JWT. */
const opaqueResource = "urn:bench:opaque";
const ttl = 900;

// One Ed25519 signing key, made at startup.
const jwk = crypto.generateKeyPairSync("ed25519").privateKey.export({ format: "jwk" });

const provider = new Provider(`http://127.0.0.1:${port}`, {
  clients: [{
    client_id: clientId,
    client_secret: clientSecret,
    token_endpoint_auth_method: "client_secret_basic",
    grant_types: ["client_credentials"],
    response_types: [],
    redirect_uris: [],
    scope: "read",
  }],
  scopes: ["read"],
  ttl: { ClientCredentials: ttl },
  jwks: { keys: [{ ...jwk, kid: "bench-ed25519", alg: "EdDSA", use: "sig" }] },
  // The only key is Ed25519: the client's default (RS256) would have none.
  clientDefaults: { id_token_signed_response_alg: "EdDSA" },
  // Explicit, so that the defaults print no notice.
  clientBasedCORS: () => false,
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    // Client authentication is required at the introspection endpoint, as at ours.
    introspection: { enabled: true, allowedPolicy: () => true },
    revocation: { enabled: false },
    resourceIndicators: {
      enabled: true,
      // A grant without `resource` is for the JWT resource server.
      defaultResource: () => jwtResource,
      useGrantedResource: () => false,
      getResourceServerInfo: (_ctx, resource) => {
        if (resource === jwtResource) {
          return {
            scope: "read",
            audience: jwtResource,
            accessTokenFormat: "jwt",
            accessTokenTTL: ttl,
            jwt: { sign: { alg: "EdDSA" } },
          };
        }
        if (resource === opaqueResource) {
          return {
            scope: "read",
            audience: opaqueResource,
            accessTokenFormat: "opaque",
            accessTokenTTL: ttl,
          };
        }
        throw new Provider.errors.InvalidTarget();
      },
    },
  },
});
provider.proxy = false;

const server = http.createServer(provider.callback());
server.listen(port, "127.0.0.1", () => {
  process.stdout.write(`listening ${port}\n`);
});
process.on("SIGTERM", () => {
  server.close(() => process.exit(0));
  server.closeAllConnections();
});
