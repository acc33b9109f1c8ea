/**
 * Pure predicates for the OAuth registry's string fields: redirect URIs, JavaScript origins,
 * branding links, authorized domains, support e-mail addresses and scope tokens.
 *
 * Each predicate returns `undefined` when the value is acceptable, or a short description of the
 * first problem found, written to follow the field name in a field violation (for example "must
 * use https"). Maximum lengths are checked by the caller, except where a rule says otherwise.
 *
 * Every predicate accepts any string (control characters, lone surrogates, very long input)
 * without throwing, and runs in time linear in the length of its input.
 *
 * @module
 */

/** The kinds of client a redirect URI may belong to. */
type RedirectClientType = "web" | "spa" | "native";

/** A URI split into its raw, undecoded parts (RFC 3986 section 3), before any normalisation. */
interface RawUri {
  /** The scheme, as written. */
  scheme: string;
  /** The authority after `//`, or `undefined` when the URI has none. */
  authority: string | undefined;
  /** The path, up to the first `?` or `#`. */
  path: string;
  /** The query after `?`, or `undefined` when the URI has none. */
  query: string | undefined;
  /** Whether the URI contains a `#`. */
  hasFragment: boolean;
}

const msg = {
  ascii: "must contain only ASCII characters",
  control: "must not contain whitespace or control characters",
  absolute: "must be an absolute URI with a scheme",
  invalid: "must be a valid URI",
  fragment: "must not contain a fragment",
  wildcard: "must not contain a wildcard",
  userinfo: "must not contain user information",
  backslash: "must not contain a backslash",
  percent: "must use '%' only followed by two hexadecimal digits",
  encodedSlash: "must not contain an encoded slash or backslash in the path",
  dotSegment: "must not contain '.' or '..' path segments",
  host: "must have a host",
  validHost: "must have a valid host name or IP address",
  port: "must have a port from 1 to 65535",
  webScheme: "must use https, or http on a loopback host",
  nativeScheme: "must use https, http on a loopback host, or a private-use scheme containing a dot",
  https: "must use https",
  path: "must not contain a path",
  query: "must not contain a query",
  responseParameter:
    "must not have code, state, iss, error, error_description or error_uri in its query: the answer adds them",
} as const;

/**
 * The parameters an authorization response adds to the redirect URI's query (RFC 6749 4.1.2 and
 * 4.1.2.1, RFC 9207): a registered query must not hold them, or the answer would carry two of one
 * (RFC 6749 3.1: "MUST NOT be included more than once"), and a client could read the wrong one.
 */
const responseParameters = new Set([
  "code",
  "state",
  "iss",
  "error",
  "error_description",
  "error_uri",
]);

/**
 * Characters that RFC 3986 does not allow anywhere in a URI (besides space, controls and
 * non-ASCII, which are reported separately).
 */
const notInUri = new Set(['"', "<", ">", "\\", "^", "`", "{", "|", "}"]);

/** The first non-ASCII, whitespace or control character problem of `s`, if any. */
function asciiProblem(s: string): string | undefined {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c > 0x7f) return msg.ascii;
    if (c <= 0x20 || c === 0x7f) return msg.control;
  }
  return undefined;
}

/**
 * The first ASCII character of `s` that RFC 3986 does not allow where it stands, as a problem:
 * one allowed nowhere, `[` or `]` past the authority (they enclose an IP literal host, 3.2.2, and
 * are in no path, query or fragment), or a second `#` (a fragment holds none, 3.5).
 */
function uriCharacterProblem(s: string): string | undefined {
  const colon = s.indexOf(":");
  const authorityEnd = s.startsWith("//", colon + 1) ? indexOfAny(s, "/?#", colon + 3) : 0;
  const fragment = s.indexOf("#");
  for (let i = 0; i < s.length; i++) {
    const ch = s.charAt(i);
    if (ch === "\\") return msg.backslash;
    if (notInUri.has(ch)) return `must not contain the character '${ch}'`;
    if ((ch === "[" || ch === "]") && i >= authorityEnd) {
      return `must not contain the character '${ch}' outside an IP literal host`;
    }
    if (ch === "#" && i > fragment) return "must not contain a second '#'";
  }
  return undefined;
}

function isAlpha(c: number): boolean {
  return (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
}

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

function isHexDigit(c: number): boolean {
  return isDigit(c) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);
}

/** The index of the first of `chars` in `s` at or after `from`, or `s.length` when none. */
function indexOfAny(s: string, chars: string, from: number): number {
  for (let i = from; i < s.length; i++) {
    if (chars.includes(s.charAt(i))) return i;
  }
  return s.length;
}

/**
 * Splits `s` into its raw parts, or returns `undefined` when it does not start with a valid
 * scheme (`ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) ":"`).
 */
function splitUri(s: string): RawUri | undefined {
  if (s.length === 0 || !isAlpha(s.charCodeAt(0))) return undefined;
  let colon = -1;
  for (let i = 1; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x3a) {
      colon = i;
      break;
    }
    // "+", "-", "."
    if (!isAlpha(c) && !isDigit(c) && c !== 0x2b && c !== 0x2d && c !== 0x2e) return undefined;
  }
  if (colon < 0) return undefined;
  const scheme = s.slice(0, colon);
  let at = colon + 1;
  let authority: string | undefined;
  if (s.startsWith("//", at)) {
    const end = indexOfAny(s, "/?#", at + 2);
    authority = s.slice(at + 2, end);
    at = end;
  }
  const pathEnd = indexOfAny(s, "?#", at);
  const path = s.slice(at, pathEnd);
  let query: string | undefined;
  if (s.charAt(pathEnd) === "?") {
    const queryEnd = indexOfAny(s, "#", pathEnd + 1);
    query = s.slice(pathEnd + 1, queryEnd);
  }
  return { scheme, authority, path, query, hasFragment: s.includes("#") };
}

/** Whether every `%` in `s` starts a percent-encoded octet (`%` HEXDIG HEXDIG). */
function hasValidPercentEncoding(s: string): boolean {
  for (let i = s.indexOf("%"); i >= 0; i = s.indexOf("%", i + 1)) {
    if (!isHexDigit(s.charCodeAt(i + 1)) || !isHexDigit(s.charCodeAt(i + 2))) return false;
  }
  return true;
}

/** Whether `path` has a `.` or `..` segment, written plainly or percent-encoded. */
function hasDotSegment(path: string): boolean {
  for (const segment of path.split("/")) {
    // The longest dot segment is "%2e%2e"; anything longer cannot be one.
    if (segment.length > 6) continue;
    const decoded = segment.replace(/%2e/gi, ".");
    if (decoded === "." || decoded === "..") return true;
  }
  return false;
}

/** The problem with one DNS label, or `undefined` when it is 1..63 LDH characters. */
function labelProblem(label: string): "empty" | "long" | "chars" | "hyphen" | undefined {
  if (label.length === 0) return "empty";
  if (label.length > 63) return "long";
  for (let i = 0; i < label.length; i++) {
    const c = label.charCodeAt(i);
    if (!isAlpha(c) && !isDigit(c) && c !== 0x2d) return "chars";
  }
  if (label.startsWith("-") || label.endsWith("-")) return "hyphen";
  return undefined;
}

/** The four octets of a strict dotted-decimal IPv4 address, or `undefined`. */
function ipv4Octets(host: string): number[] | undefined {
  const parts = host.split(".");
  if (parts.length !== 4) return undefined;
  const octets: number[] = [];
  for (const part of parts) {
    // No leading zeros: WHATWG URL parsing would read them as octal.
    if (!/^(?:0|[1-9][0-9]{0,2})$/.test(part)) return undefined;
    const n = Number(part);
    if (n > 255) return undefined;
    octets.push(n);
  }
  return octets;
}

/** The hostname WHATWG URL parsing gives a bracketed IPv6 literal, or `undefined` if invalid. */
function ipv6Hostname(host: string): string | undefined {
  if (!/^\[[0-9A-Fa-f:.]+\]$/.test(host)) return undefined;
  try {
    return new URL(`http://${host}/`).hostname;
  } catch {
    return undefined;
  }
}

/**
 * Whether `host` (as written in a URI, without port) is a DNS hostname, a strict dotted-decimal
 * IPv4 address or a bracketed IPv6 literal.
 */
function isValidHost(host: string): boolean {
  if (host.startsWith("[")) return ipv6Hostname(host) !== undefined;
  const labels = host.split(".");
  const last = labels[labels.length - 1] ?? "";
  // WHATWG URL parsing reads a host whose last label is a number as IPv4 ("127.1", "0x7f.1"):
  // allow only the unambiguous dotted-decimal form.
  if (/^(?:[0-9]+|0[xX][0-9A-Fa-f]*)$/.test(last)) return ipv4Octets(host) !== undefined;
  return labels.every((label) => labelProblem(label) === undefined);
}

/** Whether `host` (validated by {@link isValidHost}) is `localhost`, 127.x.y.z or `[::1]`. */
function isLoopbackHost(host: string): boolean {
  if (host.toLowerCase() === "localhost") return true;
  if (host.startsWith("[")) return ipv6Hostname(host) === "[::1]";
  return ipv4Octets(host)?.[0] === 127;
}

/**
 * Checks the raw authority of an http(s) URI, which must have no user information. Returns the
 * host as written, or the problem found.
 */
function checkAuthority(authority: string | undefined): { host: string } | { problem: string } {
  if (authority === undefined || authority === "") return { problem: msg.host };
  if (authority.includes("@")) return { problem: msg.userinfo };
  let host: string;
  let port: string | undefined;
  if (authority.startsWith("[")) {
    const close = authority.indexOf("]");
    if (close < 0) return { problem: msg.validHost };
    host = authority.slice(0, close + 1);
    const rest = authority.slice(close + 1);
    if (rest !== "") {
      if (!rest.startsWith(":")) return { problem: msg.validHost };
      port = rest.slice(1);
    }
  } else {
    const colon = authority.indexOf(":");
    host = colon < 0 ? authority : authority.slice(0, colon);
    port = colon < 0 ? undefined : authority.slice(colon + 1);
  }
  if (host === "") return { problem: msg.host };
  if (!isValidHost(host)) return { problem: msg.validHost };
  if (port !== undefined) {
    if (!/^[0-9]+$/.test(port)) return { problem: msg.port };
    const n = Number(port);
    if (n < 1 || n > 65535) return { problem: msg.port };
  }
  return { host };
}

/** Parses `s` with WHATWG URL parsing, or returns `undefined` when it cannot be parsed. */
function parseUrl(s: string): URL | undefined {
  try {
    return new URL(s);
  } catch {
    return undefined;
  }
}

/** Whether a WHATWG-parsed URL carries user information. */
function hasUserinfo(url: URL): boolean {
  return url.username !== "" || url.password !== "";
}

/**
 * Checks an OAuth redirect URI registered for a client of the given type (RFC 6749 section 3.1.2,
 * RFC 8252 sections 7.1 and 7.3, RFC 9700 sections 2.1 and 2.6).
 *
 * The URI must be an absolute ASCII URI without whitespace or control characters, with no
 * fragment, no user information, no wildcard, no `.` or `..` path segment (plain or
 * percent-encoded), no encoded slash or backslash, no backslash, and only well-formed
 * percent-encoding. Web and SPA clients may use `https`, or `http` on a loopback host
 * (`localhost`, 127.x.y.z, `[::1]`); native clients may also use a private-use scheme that contains
 * a dot, such as `com.example.app:/oauth2redirect`. An http(s) URI must have a valid host and, if
 * given, a port from 1 to 65535. Its query, if any, must not name a parameter the authorization
 * response adds (`code`, `state`, `iss`, `error`, `error_description`, `error_uri`).
 *
 * @param uri The redirect URI as the caller wrote it.
 * @param type The type of the client the URI belongs to.
 * @returns `undefined` when acceptable, otherwise a description of the first problem found.
 */
export function checkRedirectUri(
  uri: string,
  type: RedirectClientType,
): string | undefined {
  const asciiIssue = asciiProblem(uri);
  if (asciiIssue !== undefined) return asciiIssue;
  const raw = splitUri(uri);
  if (raw === undefined) return msg.absolute;
  const scheme = raw.scheme.toLowerCase();
  const web = scheme === "https" || scheme === "http";
  if (!web && (type !== "native" || !scheme.includes("."))) {
    return type === "native" ? msg.nativeScheme : msg.webScheme;
  }
  if (raw.hasFragment) return msg.fragment;
  if (uri.includes("*")) return msg.wildcard;
  const charProblem = uriCharacterProblem(uri);
  if (charProblem !== undefined) return charProblem;
  if (!hasValidPercentEncoding(uri)) return msg.percent;
  if (/%(?:2f|5c)/i.test(raw.path)) return msg.encodedSlash;
  if (raw.authority?.includes("@")) return msg.userinfo;
  if (hasDotSegment(raw.path)) return msg.dotSegment;
  let host: string | undefined;
  if (web) {
    const authority = checkAuthority(raw.authority);
    if ("problem" in authority) return authority.problem;
    host = authority.host;
  }
  const url = parseUrl(uri);
  if (url === undefined) return msg.invalid;
  if (hasUserinfo(url)) return msg.userinfo;
  if (scheme === "http" && (host === undefined || !isLoopbackHost(host))) {
    return type === "native" ? msg.nativeScheme : msg.webScheme;
  }
  for (const name of url.searchParams.keys()) {
    if (responseParameters.has(name)) return msg.responseParameter;
  }
  return undefined;
}

/**
 * Checks a JavaScript origin of a browser client: exactly `scheme://host[:port]`, with scheme
 * `https`, or `http` on a loopback host (`localhost`, 127.x.y.z, `[::1]`). There must be no path
 * (not even `/`), query, fragment, user information or wildcard; the host must be a valid DNS
 * hostname, IPv4 address or bracketed IPv6 literal (in the shortest form of RFC 5952, the one a
 * browser's `Origin` holds: `[::1]`, not `[0:0:0:0:0:0:0:1]`), and the port, if given, 1 to 65535.
 *
 * @param origin The origin as the caller wrote it.
 * @returns `undefined` when acceptable, otherwise a description of the first problem found.
 */
export function checkJavascriptOrigin(origin: string): string | undefined {
  const asciiIssue = asciiProblem(origin);
  if (asciiIssue !== undefined) return asciiIssue;
  const raw = splitUri(origin);
  if (raw === undefined) return msg.absolute;
  const scheme = raw.scheme.toLowerCase();
  if (scheme !== "https" && scheme !== "http") return msg.webScheme;
  if (raw.hasFragment) return msg.fragment;
  if (origin.includes("*")) return msg.wildcard;
  const charProblem = uriCharacterProblem(origin);
  if (charProblem !== undefined) return charProblem;
  const authority = checkAuthority(raw.authority);
  if ("problem" in authority) return authority.problem;
  if (raw.path !== "") return msg.path;
  if (raw.query !== undefined) return msg.query;
  const url = parseUrl(origin);
  if (url === undefined) return msg.invalid;
  if (hasUserinfo(url)) return msg.userinfo;
  if (scheme === "http" && !isLoopbackHost(authority.host)) return msg.webScheme;
  // A browser's Origin writes an IPv6 literal in its shortest form (RFC 5952), and CORS compares
  // the registered origin with it as text, case aside: any other form would never match.
  if (authority.host.startsWith("[") && url.hostname !== authority.host.toLowerCase()) {
    return `must write its IPv6 address as a browser sends it: ${url.hostname}`;
  }
  return undefined;
}

/**
 * The form of a valid JavaScript origin that tells whether two of a list are one: its
 * serialisation (RFC 6454 6.2), the form a browser sends in `Origin` and the registry's CORS lookup
 * compares with (scheme and host in lower case, the port without leading zeros and left out when it
 * is the scheme's default, an IPv6 literal in its shortest form). `https://App.Example.com:443` and
 * `https://app.example.com` are one origin.
 *
 * @param origin An origin {@link checkJavascriptOrigin} accepts (anything else is returned as is).
 */
export function originKey(origin: string): string {
  return parseUrl(origin)?.origin ?? origin;
}

/**
 * The form of a valid redirect URI that tells whether two of a list are one URI (RFC 3986 6.2.2.1
 * and 6.2.3): the scheme and the host in lower case and, for `http` and `https`, the port without
 * leading zeros and left out when it is the scheme's default, an IPv6 literal in its shortest form
 * and an empty path written `/`. The path, query and percent-encoding stay as written: they are
 * what the authorization request must repeat exactly (RFC 9700 2.1), so
 * `https://app.example.com/cb` and `https://app.example.com/cb/` stay two.
 *
 * @param uri A URI {@link checkRedirectUri} accepts (anything else is returned as is).
 */
export function redirectUriKey(uri: string): string {
  const raw = splitUri(uri);
  if (raw === undefined || raw.authority === undefined) {
    return raw === undefined ? uri : raw.scheme.toLowerCase() + uri.slice(raw.scheme.length);
  }
  const scheme = raw.scheme.toLowerCase();
  let rest = uri.slice(raw.scheme.length + 3 + raw.authority.length);
  let authority = raw.authority.toLowerCase();
  if (scheme === "http" || scheme === "https") {
    const url = parseUrl(uri);
    if (url === undefined) return uri;
    authority = url.host;
    if (!rest.startsWith("/")) rest = `/${rest}`;
  }
  return `${scheme}://${authority}${rest}`;
}

/**
 * Checks a branding link (logo, home page, privacy policy or terms of service): an absolute ASCII
 * `https` URI without whitespace or control characters, with a valid host, no user information,
 * a port (if given) from 1 to 65535 and well-formed percent-encoding. A query and a fragment are
 * allowed.
 *
 * @param uri The link as the caller wrote it.
 * @returns `undefined` when acceptable, otherwise a description of the first problem found.
 */
export function checkHttpsUri(uri: string): string | undefined {
  const asciiIssue = asciiProblem(uri);
  if (asciiIssue !== undefined) return asciiIssue;
  const raw = splitUri(uri);
  if (raw === undefined) return msg.absolute;
  if (raw.scheme.toLowerCase() !== "https") return msg.https;
  const charProblem = uriCharacterProblem(uri);
  if (charProblem !== undefined) return charProblem;
  if (!hasValidPercentEncoding(uri)) return msg.percent;
  const authority = checkAuthority(raw.authority);
  if ("problem" in authority) return authority.problem;
  const url = parseUrl(uri);
  if (url === undefined) return msg.invalid;
  if (hasUserinfo(url)) return msg.userinfo;
  return undefined;
}

/**
 * Checks an authorized domain: dot-separated labels of 1 to 63 ASCII letters, digits and hyphens,
 * none starting or ending with a hyphen, with no trailing dot and at most 253 characters in all.
 * A single label (such as `localhost`) is allowed. The last label is not a number (all digits, or
 * `0x` and hexadecimal digits): a host name never has that form (RFC 1123 2.1), an IPv4 address
 * does (`192.0.2.1`; URL parsing reads `0x7f` and `127.1` as addresses too).
 *
 * @param name The domain name as the caller wrote it.
 * @returns `undefined` when acceptable, otherwise a description of the first problem found.
 */
export function checkHostname(name: string): string | undefined {
  if (name.length === 0) return "must not be empty";
  if (name.endsWith(".")) return "must not end with a dot";
  for (const label of name.split(".")) {
    switch (labelProblem(label)) {
      case "empty":
        return "must not contain empty labels";
      case "chars":
        return "must contain only ASCII letters, digits, hyphens and dots";
      case "long":
        return "must have labels of at most 63 characters";
      case "hyphen":
        return "must not have labels that start or end with a hyphen";
      case undefined:
        break;
    }
  }
  if (name.length > 253) return "must be at most 253 characters";
  const last = name.slice(name.lastIndexOf(".") + 1);
  if (/^(?:[0-9]+|0[xX][0-9A-Fa-f]*)$/.test(last)) {
    return "must be a domain name, not an IP address: its last label must not be a number";
  }
  return undefined;
}

/**
 * Checks a support e-mail address: a plain address (an RFC 5322 addr-spec in its dot-atom form),
 * which the consent page links as `mailto:`. Exactly one `@`; a non-empty local part of RFC 5322
 * atext characters and dots that does not start with a dot or contain two dots in a row, and has
 * none of `?`, `%` and `#`, which a `mailto:` URI reads as its header fields, an escape and a
 * fragment (RFC 6068: `help?cc=x%40evil.example@example.com` would become a mail with a copy to
 * evil.example); and a domain of at least two dot-separated labels of letters, digits and hyphens
 * (none starting or ending with a hyphen) whose last label is at least two ASCII letters. The
 * total length is checked elsewhere.
 *
 * @param email The address as the caller wrote it.
 * @returns `undefined` when acceptable, otherwise a description of the first problem found.
 */
export function checkEmail(email: string): string | undefined {
  const at = email.indexOf("@");
  if (at < 0 || email.indexOf("@", at + 1) >= 0) return "must contain exactly one '@'";
  const local = email.slice(0, at);
  const domain = email.slice(at + 1);
  if (local === "") return "must have a local part before '@'";
  if (!/^[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]+$/.test(local)) {
    return "must have a local part of letters, digits, dots and !#$%&'*+/=?^_`{|}~-";
  }
  if (/[?%#]/.test(local)) {
    return "must be a plain address: its local part may not contain '?', '%' or '#'";
  }
  if (local.startsWith(".")) return "must not start with a dot";
  if (local.includes("..")) return "must not contain two dots in a row";
  if (domain === "") return "must have a domain after '@'";
  const labels = domain.split(".");
  for (const label of labels) {
    if (label === "") return "must have a domain without empty labels";
    if (!/^[A-Za-z0-9-]+$/.test(label)) {
      return "must have a domain of ASCII letters, digits, hyphens and dots";
    }
    if (label.startsWith("-") || label.endsWith("-")) {
      return "must have domain labels that do not start or end with a hyphen";
    }
  }
  if (labels.length < 2) return "must have a domain with at least two labels";
  const tld = labels[labels.length - 1] ?? "";
  if (!/^[A-Za-z]{2,}$/.test(tld)) return "must have a top-level domain of at least two letters";
  return undefined;
}

/**
 * Checks an OAuth scope token (RFC 6749 section 3.3): 1 to 512 characters, each printable ASCII
 * other than space, double quote and backslash (`%x21 / %x23-5B / %x5D-7E`).
 *
 * @param scope The scope token as the caller wrote it.
 * @returns `undefined` when acceptable, otherwise a description of the first problem found.
 */
export function checkScope(scope: string): string | undefined {
  if (scope.length === 0) return "must not be empty";
  for (let i = 0; i < scope.length; i++) {
    const c = scope.charCodeAt(i);
    if (c < 0x21 || c > 0x7e || c === 0x22 || c === 0x5c) {
      return "must contain only printable ASCII characters other than space, '\"' and '\\'";
    }
  }
  if (scope.length > 512) return "must be at most 512 characters";
  return undefined;
}
