/**
 * CORS (the Fetch standard's protocol) for browser apps at the token and revocation endpoints: a
 * single-page app redeems its code, refreshes and revokes with `fetch` from its own origin, which
 * the project registered as a JavaScript origin of a client. The token service decides which
 * origins may read what (TokenService.CheckCorsOrigin); this module speaks the protocol:
 *
 * - A preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method: POST`) carries no
 *   credentials, so the client is not known yet: it is answered 204, with
 *   `Access-Control-Allow-Origin` set to the origin, the method, the request headers those
 *   endpoints read (`Authorization` for HTTP Basic, `DPoP`, the tracing headers) and a
 *   `Access-Control-Max-Age`, when the origin is registered on an active client of any project;
 *   otherwise without them, and the browser does not send the request. A plain `OPTIONS` gets
 *   `Allow`.
 * - The answer to a request with an `Origin` (its success or its OAuth error) gets
 *   `Access-Control-Allow-Origin: <origin>` exactly when the origin is registered on an active
 *   client of the project of the request's client_id (on any project's when the request names no
 *   client that can be read), and `Access-Control-Expose-Headers` for the headers a client reads
 *   (`WWW-Authenticate`, `Retry-After`, `DPoP-Nonce`). Other origins get nothing, and the browser
 *   keeps the answer from the page.
 * - Every answer of these endpoints says `Vary: Origin`.
 *
 * Never `*`, and never `Access-Control-Allow-Credentials`: these endpoints read no cookies, and a
 * client's credentials (its client_id, or an `Authorization` header its code sets) are not what
 * the Fetch standard calls credentials. The request is processed whatever its origin (a form POST
 * needs no preflight, and a page that holds a code and its verifier could as well have a server
 * redeem them): CORS decides only what a page may read. Introspection is for servers and answers
 * no browser.
 *
 * @module
 */

/** How long a browser may keep a preflight's answer (Chromium keeps it at most 2 hours). */
export const preflightMaxAgeSeconds = 600;

/** The request headers a browser app may send (besides the CORS-safelisted ones). */
export const allowedRequestHeaders = [
  "Authorization",
  "Content-Type",
  "DPoP",
  "Traceparent",
  "Tracestate",
  "X-Request-Id",
];

/** The response headers a browser app may read (besides the CORS-safelisted ones). */
export const exposedResponseHeaders = ["WWW-Authenticate", "Retry-After", "DPoP-Nonce"];

/** An `Origin` header's value that CORS can allow: `http(s)://host[:port]`, nothing more. */
const originPattern = /^https?:\/\/[A-Za-z0-9.[\]:-]{1,260}$/;

/** CORS for the endpoints of one issuer. */
export interface Cors {
  /**
   * The origin of a cross-origin request that CORS may allow, or undefined: no `Origin`, the
   * issuer's own, `null`, or not an origin at all.
   */
  crossOrigin(req: Request): string | undefined;
  /**
   * The answer to `OPTIONS`: a preflight's, asking `registered` whether the origin is registered
   * on an active client of any project; or a plain one's.
   */
  preflight(req: Request, registered: (origin: string) => Promise<boolean>): Promise<Response>;
  /**
   * Sets the CORS headers on an answer: `Vary: Origin` always; the rest when `allowed` (the
   * outcome of the check started for the request) is true.
   */
  decorate(
    res: Response,
    origin: string | undefined,
    allowed: Promise<boolean> | undefined,
  ): Promise<Response>;
}

/** Creates the CORS protocol for the endpoints of `issuer`. */
export function createCors(issuer: string): Cors {
  const own = new URL(issuer).origin;
  const crossOrigin = (req: Request) => {
    const origin = req.headers.get("origin");
    if (origin === null || origin === own || !originPattern.test(origin)) return undefined;
    return origin;
  };
  return {
    crossOrigin,

    async preflight(req, registered) {
      const headers = new Headers({
        allow: "OPTIONS, POST",
        vary: "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
      });
      const origin = crossOrigin(req);
      if (
        origin !== undefined && req.headers.get("access-control-request-method") === "POST" &&
        await registered(origin)
      ) {
        headers.set("access-control-allow-origin", origin);
        headers.set("access-control-allow-methods", "POST");
        headers.set("access-control-allow-headers", allowedRequestHeaders.join(", "));
        headers.set("access-control-max-age", String(preflightMaxAgeSeconds));
      }
      return new Response(null, { status: 204, headers });
    },

    async decorate(res, origin, allowed) {
      res.headers.append("vary", "Origin");
      if (origin !== undefined && allowed !== undefined && await allowed) {
        res.headers.set("access-control-allow-origin", origin);
        res.headers.set("access-control-expose-headers", exposedResponseHeaders.join(", "));
      }
      return res;
    },
  };
}
