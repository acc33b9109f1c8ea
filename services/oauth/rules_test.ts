import assert from "node:assert/strict";
import {
  checkEmail,
  checkHostname,
  checkHttpsUri,
  checkJavascriptOrigin,
  checkRedirectUri,
  checkScope,
  originKey,
  redirectUriKey,
} from "./rules.ts";

const allTypes = ["web", "spa", "native"] as const;

/** Asserts that `check` accepts `value`, naming the value on failure. */
function accepts(check: (value: string) => string | undefined, value: string): void {
  assert.equal(check(value), undefined, `expected ${JSON.stringify(value)} to be accepted`);
}

/** Asserts that `check` rejects `value` with a description (optionally a specific one). */
function rejects(
  check: (value: string) => string | undefined,
  value: string,
  expected?: string,
): void {
  const problem = check(value);
  assert.equal(typeof problem, "string", `expected ${JSON.stringify(value)} to be rejected`);
  if (expected !== undefined) assert.equal(problem, expected, JSON.stringify(value));
}

function redirect(type: "web" | "spa" | "native"): (uri: string) => string | undefined {
  return (uri) => checkRedirectUri(uri, type);
}

/** A hostname made of 63-character labels and one shorter last label, `length` long in all. */
function hostnameOfLength(length: number): string {
  const labels: string[] = [];
  let left = length;
  while (left > 64) {
    labels.push("a".repeat(63));
    left -= 64;
  }
  labels.push("b".repeat(left));
  const name = labels.join(".");
  assert.equal(name.length, length);
  return name;
}

// checkRedirectUri

Deno.test("checkRedirectUri() accepts https for every client type", () => {
  for (const type of allTypes) {
    accepts(redirect(type), "https://example.com/cb");
    accepts(redirect(type), "https://example.com:8443/oauth/callback?client=1");
    accepts(redirect(type), "https://sub.example.co.uk/cb?a=%20b");
    accepts(redirect(type), "https://192.0.2.1/cb");
    accepts(redirect(type), "https://[2001:db8::1]:443/cb");
    accepts(redirect(type), "https://example.com:65535/");
    accepts(redirect(type), "https://example.com:1/");
  }
});

Deno.test("checkRedirectUri() rejects a query naming a parameter the response adds", () => {
  const added =
    "must not have code, state, iss, error, error_description or error_uri in its query: the answer adds them";
  for (const type of allTypes) {
    for (
      const name of ["code", "state", "iss", "error", "error_description", "error_uri", "st%61te"]
    ) {
      rejects(redirect(type), `https://example.com/cb?${name}=x`, added);
      rejects(redirect(type), `https://example.com/cb?a=1&${name}`, added);
    }
    accepts(redirect(type), "https://example.com/cb?codes=1&iss_hint=x");
  }
  rejects(redirect("native"), "com.example.app:/cb?state=x", added);
});

Deno.test("checkRedirectUri() treats the scheme case-insensitively", () => {
  for (const type of allTypes) {
    accepts(redirect(type), "HTTPS://example.com/cb");
    accepts(redirect(type), "HtTp://LOCALHOST/cb");
  }
  accepts(redirect("native"), "COM.Example.App:/oauth2redirect");
});

Deno.test("checkRedirectUri() accepts http on a loopback host for every client type", () => {
  for (const type of allTypes) {
    accepts(redirect(type), "http://127.0.0.1:8080/cb");
    accepts(redirect(type), "http://127.0.0.1/cb");
    accepts(redirect(type), "http://127.10.20.30/cb");
    accepts(redirect(type), "http://localhost/cb");
    accepts(redirect(type), "http://localhost:3000/cb");
    accepts(redirect(type), "http://[::1]:3000/cb");
    accepts(redirect(type), "http://[::1]/cb");
    accepts(redirect(type), "http://[0:0:0:0:0:0:0:1]/cb");
  }
});

Deno.test("checkRedirectUri() rejects http on a non-loopback host", () => {
  for (const type of allTypes) {
    rejects(redirect(type), "http://example.com/cb");
    rejects(redirect(type), "http://192.168.0.1/cb");
    rejects(redirect(type), "http://128.0.0.1/cb");
    rejects(redirect(type), "http://localhost.example.com/cb");
    rejects(redirect(type), "http://[::2]/cb");
    rejects(redirect(type), "http://localhost./cb");
    rejects(redirect(type), "http://127.0.0.1.example.com/cb");
  }
  rejects(
    redirect("web"),
    "http://example.com/cb",
    "must use https, or http on a loopback host",
  );
});

Deno.test("checkRedirectUri() accepts a private-use scheme with a dot for native clients only", () => {
  accepts(redirect("native"), "com.example.app:/oauth2redirect");
  accepts(redirect("native"), "com.example.app:/");
  accepts(redirect("native"), "com.example.app:/oauth2redirect/example-provider");
  accepts(redirect("native"), "com.example.app://callback");
  rejects(redirect("web"), "com.example.app:/oauth2redirect");
  rejects(redirect("spa"), "com.example.app:/oauth2redirect");
});

Deno.test("checkRedirectUri() rejects a scheme without a dot other than http(s)", () => {
  for (const type of allTypes) {
    rejects(redirect(type), "myapp://cb");
    rejects(redirect(type), "myapp:/cb");
    rejects(redirect(type), "javascript:alert(1)");
    rejects(redirect(type), "JavaScript:alert(1)");
    rejects(redirect(type), "data:text/html,hi");
    rejects(redirect(type), "file:///etc/passwd");
    rejects(redirect(type), "vbscript:msgbox(1)");
    rejects(redirect(type), "ftp://example.com/cb");
    rejects(redirect(type), "wss://example.com/cb");
  }
  rejects(
    redirect("native"),
    "myapp://cb",
    "must use https, http on a loopback host, or a private-use scheme containing a dot",
  );
});

Deno.test("checkRedirectUri() rejects a URI that is not absolute", () => {
  for (const type of allTypes) {
    rejects(redirect(type), "/relative/path", "must be an absolute URI with a scheme");
    rejects(redirect(type), "relative/path");
    rejects(redirect(type), "//example.com/cb");
    rejects(redirect(type), "");
    rejects(redirect(type), "1https://example.com/cb");
    rejects(redirect(type), "ht_tp://example.com/cb");
  }
});

Deno.test("checkRedirectUri() rejects a missing host", () => {
  for (const type of allTypes) {
    rejects(redirect(type), "https://", "must have a host");
    rejects(redirect(type), "https:///cb");
    rejects(redirect(type), "https:example.com/cb");
    rejects(redirect(type), "https:/example.com/cb");
    rejects(redirect(type), "https://:443/cb");
  }
});

Deno.test("checkRedirectUri() rejects a fragment", () => {
  for (const type of allTypes) {
    rejects(redirect(type), "https://example.com/cb#x", "must not contain a fragment");
    rejects(redirect(type), "https://example.com/cb#");
    rejects(redirect(type), "http://localhost/cb?a=b#c");
  }
  rejects(redirect("native"), "com.example.app:/cb#x");
});

Deno.test("checkRedirectUri() rejects userinfo", () => {
  for (const type of allTypes) {
    rejects(redirect(type), "https://user:pw@example.com/cb", "must not contain user information");
    rejects(redirect(type), "https://user@example.com/cb");
    rejects(redirect(type), "https://@example.com/cb");
    rejects(redirect(type), "http://localhost@evil.com/cb");
  }
  rejects(redirect("native"), "com.example.app://user@callback/");
});

Deno.test("checkRedirectUri() accepts '@' outside the authority", () => {
  accepts(redirect("web"), "https://example.com/cb@home?to=a@b.co");
});

Deno.test("checkRedirectUri() rejects a wildcard", () => {
  for (const type of allTypes) {
    rejects(redirect(type), "https://*.example.com/cb", "must not contain a wildcard");
    rejects(redirect(type), "https://example.com/*");
    rejects(redirect(type), "https://example.com/cb?x=*");
  }
  rejects(redirect("native"), "com.example.app:/*");
});

Deno.test("checkRedirectUri() rejects path traversal", () => {
  const traversal = [
    "https://example.com/a/../b",
    "https://example.com/a/./b",
    "https://example.com/..",
    "https://example.com/a/..",
    "https://example.com/a/%2e%2e/b",
    "https://example.com/a/%2E%2E/b",
    "https://example.com/a/.%2e/b",
    "https://example.com/a/%2e./b",
    "https://example.com/a/%2e/b",
    "https://example.com/a/%2E",
  ];
  for (const type of allTypes) {
    for (const uri of traversal) rejects(redirect(type), uri);
  }
  rejects(
    redirect("web"),
    "https://example.com/a/../b",
    "must not contain '.' or '..' path segments",
  );
  rejects(redirect("native"), "com.example.app:/a/../b");
  rejects(redirect("native"), "com.example.app:../b");
  rejects(redirect("native"), "com.example.app:/%2e%2e/x");
});

Deno.test("checkRedirectUri() accepts dots that are not whole path segments", () => {
  accepts(redirect("web"), "https://example.com/a/.well-known/cb");
  accepts(redirect("web"), "https://example.com/a/...b/c..");
  accepts(redirect("web"), "https://example.com/file.%2e");
  accepts(redirect("web"), "https://example.com/cb?path=../x");
});

Deno.test("checkRedirectUri() rejects an encoded slash or backslash in the path only", () => {
  accepts(redirect("web"), "https://example.com/cb?next=%2Fhome");
  for (const type of allTypes) {
    rejects(
      redirect(type),
      "https://example.com/a%2fb",
      "must not contain an encoded slash or backslash in the path",
    );
    rejects(redirect(type), "https://example.com/a%2Fb");
    rejects(redirect(type), "https://example.com/a%5cb");
    rejects(redirect(type), "https://example.com/a%5C..%5Cb");
  }
});

Deno.test("checkRedirectUri() rejects a backslash", () => {
  for (const type of allTypes) {
    rejects(redirect(type), "https://example.com/a\\b", "must not contain a backslash");
    rejects(redirect(type), "https://example.com\\@evil.com/");
    rejects(redirect(type), "https:\\\\example.com/cb");
  }
});

Deno.test("checkRedirectUri() rejects characters RFC 3986 does not allow", () => {
  for (
    const uri of ["https://example.com/<x>", 'https://example.com/"', "https://example.com/{a}"]
  ) {
    rejects(redirect("web"), uri);
  }
  // Brackets enclose an IP literal host and appear nowhere else; a fragment holds no '#'.
  for (const uri of ["https://example.com/p[1]", "https://example.com/cb?a[]=1"]) {
    for (const type of allTypes) {
      rejects(redirect(type), uri, "must not contain the character '[' outside an IP literal host");
    }
  }
  accepts(redirect("web"), "http://[::1]:8080/cb");
  rejects(checkHttpsUri, "https://example.com/#a#b", "must not contain a second '#'");
  rejects(checkHttpsUri, "https://example.com/?q=[x]");
  accepts(checkHttpsUri, "https://[2001:db8::1]:8443/a?b#c");
});

Deno.test("checkRedirectUri() rejects invalid percent-encoding", () => {
  for (const type of allTypes) {
    rejects(
      redirect(type),
      "https://example.com/%zz",
      "must use '%' only followed by two hexadecimal digits",
    );
    rejects(redirect(type), "https://example.com/%");
    rejects(redirect(type), "https://example.com/%4");
    rejects(redirect(type), "https://example.com/cb?x=%g0");
  }
  accepts(redirect("web"), "https://example.com/%41%e2%82%AC");
});

Deno.test("checkRedirectUri() rejects non-ASCII characters", () => {
  for (const type of allTypes) {
    rejects(redirect(type), "https://example.com/é", "must contain only ASCII characters");
    rejects(redirect(type), "https://exämple.com/cb");
    rejects(redirect(type), "https://example.com/\ud800");
    rejects(redirect(type), "https://example.com/\udc00x");
    rejects(redirect(type), "\ud83d");
  }
});

Deno.test("checkRedirectUri() rejects whitespace and control characters", () => {
  const bad = [
    "https://exa mple.com",
    "https://example.com/cb ",
    " https://example.com/cb",
    "https://example.com/c\tb",
    "https://example.com/c\nb",
    "https://example.com/c\u007fb",
    "\u0000",
    "https://example.com/\u0000",
  ];
  for (const type of allTypes) {
    for (const uri of bad) {
      rejects(redirect(type), uri, "must not contain whitespace or control characters");
    }
  }
});

Deno.test("checkRedirectUri() rejects an invalid host", () => {
  const bad = [
    "https://exa_mple.com/cb",
    "https://example.com./cb",
    "https://-example.com/cb",
    "https://example-.com/cb",
    "https://example..com/cb",
    `https://${"a".repeat(64)}.com/cb`,
    "https://ex%61mple.com/cb",
    "https://example.123/cb",
    "http://127.1/cb",
    "http://0x7f.0.0.1/cb",
    "http://2130706433/cb",
    "http://127.000.000.001/cb",
    "https://256.1.1.1/cb",
    "https://1.2.3.4.5/cb",
    "https://[zz]/cb",
    "https://[1:2]/cb",
    "https://[::1/cb",
    "https://[::1]x/cb",
    "https://[fe80::1%25eth0]/cb",
  ];
  for (const type of allTypes) {
    for (const uri of bad) rejects(redirect(type), uri);
  }
  rejects(redirect("web"), "https://exa_mple.com/cb", "must have a valid host name or IP address");
  accepts(redirect("web"), `https://${"a".repeat(63)}.com/cb`);
  // No limit on the whole name but the URI's: the spec takes a JavaScript origin of 2048
  // characters, which only a long host makes.
  const host = (n: number) => Array.from({ length: n }, () => "a".repeat(63)).join(".");
  accepts(checkHttpsUri, `https://${host(31)}.com/logo.png`);
  accepts(redirect("web"), "https://xn--bcher-kva.example/cb");
});

Deno.test("checkRedirectUri() rejects a port outside 1..65535", () => {
  for (const type of allTypes) {
    rejects(redirect(type), "https://example.com:0/", "must have a port from 1 to 65535");
    rejects(redirect(type), "https://example.com:65536/");
    rejects(redirect(type), "https://example.com:99999999999999999999/");
    rejects(redirect(type), "https://example.com:/");
    rejects(redirect(type), "https://example.com:8a/");
    rejects(redirect(type), "https://example.com:80:80/");
    rejects(redirect(type), "http://[::1]:0/");
  }
});

Deno.test("checkRedirectUri() handles very long input without throwing", () => {
  const long = "a".repeat(1_000_000);
  accepts(redirect("web"), `https://example.com/${long}`);
  rejects(redirect("web"), `https://${long}/`);
  rejects(redirect("web"), `https://[${":".repeat(1_000_000)}/`);
  rejects(redirect("web"), `https://example.com/${"%2e/".repeat(250_000)}`);
  rejects(redirect("native"), `com.example.app:/${long}#`);
});

// checkJavascriptOrigin

Deno.test("checkJavascriptOrigin() accepts https and loopback http origins", () => {
  for (
    const origin of [
      "https://example.com",
      "https://example.com:8443",
      "HTTPS://Example.COM",
      "https://192.0.2.1",
      "https://[2001:db8::1]:8443",
      "http://localhost:3000",
      "http://localhost",
      "http://127.0.0.1:8080",
      "http://127.1.2.3",
      "http://[::1]:3000",
    ]
  ) {
    accepts(checkJavascriptOrigin, origin);
  }
});

Deno.test("checkJavascriptOrigin() takes an IPv6 literal only as a browser's Origin writes it", () => {
  for (const origin of ["http://[::1]:3000", "https://[2001:db8::1]", "https://[2001:DB8::A]"]) {
    accepts(checkJavascriptOrigin, origin);
  }
  const cases = [
    ["http://[0:0:0:0:0:0:0:1]:3000", "[::1]"],
    ["http://[::0:1]", "[::1]"],
    ["https://[2001:db8:0:0:0:0:0:1]", "[2001:db8::1]"],
    ["https://[2001:0db8::1]", "[2001:db8::1]"],
    ["https://[::ffff:192.0.2.1]", "[::ffff:c000:201]"],
  ];
  for (const [origin, form] of cases) {
    rejects(
      checkJavascriptOrigin,
      origin!,
      `must write its IPv6 address as a browser sends it: ${form}`,
    );
  }
});

Deno.test("checkJavascriptOrigin() rejects a path, even a trailing slash", () => {
  rejects(checkJavascriptOrigin, "https://example.com/", "must not contain a path");
  rejects(checkJavascriptOrigin, "https://example.com/path");
  rejects(checkJavascriptOrigin, "http://localhost:3000/");
});

Deno.test("checkJavascriptOrigin() rejects a query", () => {
  rejects(checkJavascriptOrigin, "https://example.com?q", "must not contain a query");
  rejects(checkJavascriptOrigin, "https://example.com?");
});

Deno.test("checkJavascriptOrigin() rejects a fragment", () => {
  rejects(checkJavascriptOrigin, "https://example.com#x", "must not contain a fragment");
  rejects(checkJavascriptOrigin, "https://example.com#");
});

Deno.test("checkJavascriptOrigin() rejects http on a non-loopback host and other schemes", () => {
  const message = "must use https, or http on a loopback host";
  rejects(checkJavascriptOrigin, "http://example.com", message);
  rejects(checkJavascriptOrigin, "http://192.168.1.1:8080", message);
  rejects(checkJavascriptOrigin, "ftp://example.com", message);
  rejects(checkJavascriptOrigin, "com.example.app://callback", message);
  rejects(checkJavascriptOrigin, "javascript:alert(1)", message);
});

Deno.test("checkJavascriptOrigin() rejects userinfo and wildcards", () => {
  rejects(checkJavascriptOrigin, "https://user@example.com", "must not contain user information");
  rejects(checkJavascriptOrigin, "https://user:pw@example.com");
  rejects(checkJavascriptOrigin, "https://*.example.com", "must not contain a wildcard");
});

Deno.test("checkJavascriptOrigin() rejects a missing or invalid host", () => {
  rejects(checkJavascriptOrigin, "https://", "must have a host");
  rejects(checkJavascriptOrigin, "https:example.com");
  rejects(checkJavascriptOrigin, "example.com", "must be an absolute URI with a scheme");
  rejects(checkJavascriptOrigin, "https://exa_mple.com");
  rejects(checkJavascriptOrigin, "https://example.com.");
  rejects(checkJavascriptOrigin, "https://-example.com");
  rejects(checkJavascriptOrigin, `https://${"a".repeat(64)}.com`);
  rejects(checkJavascriptOrigin, "https://[1:2]");
});

Deno.test("checkJavascriptOrigin() rejects a port outside 1..65535", () => {
  rejects(checkJavascriptOrigin, "https://example.com:0", "must have a port from 1 to 65535");
  rejects(checkJavascriptOrigin, "https://example.com:65536");
  rejects(checkJavascriptOrigin, "https://example.com:");
  accepts(checkJavascriptOrigin, "https://example.com:65535");
});

Deno.test("checkJavascriptOrigin() rejects non-ASCII, whitespace and control characters", () => {
  rejects(checkJavascriptOrigin, "https://exämple.com", "must contain only ASCII characters");
  rejects(checkJavascriptOrigin, "https://example.com\ud800");
  rejects(checkJavascriptOrigin, "https://exa mple.com");
  rejects(checkJavascriptOrigin, "https://example.com\n");
  rejects(checkJavascriptOrigin, "\u0000");
  rejects(checkJavascriptOrigin, "");
});

// checkHttpsUri

Deno.test("checkHttpsUri() accepts https URIs with a query and fragment", () => {
  for (
    const uri of [
      "https://example.com",
      "https://example.com/",
      "https://example.com/logo.png",
      "https://example.com/privacy?lang=en#section-2",
      "HTTPS://EXAMPLE.COM/Terms",
      "https://example.com:8443/a%20b",
      "https://example.com/*",
      "https://192.0.2.1/logo.png",
      "https://[2001:db8::1]/logo.png",
    ]
  ) {
    accepts(checkHttpsUri, uri);
  }
});

Deno.test("checkHttpsUri() rejects other schemes", () => {
  rejects(checkHttpsUri, "http://example.com/logo.png", "must use https");
  rejects(checkHttpsUri, "http://localhost/logo.png");
  rejects(checkHttpsUri, "javascript:alert(1)");
  rejects(checkHttpsUri, "JavaScript:alert(1)");
  rejects(checkHttpsUri, " javascript:alert(1)");
  rejects(checkHttpsUri, "javascript://example.com/%0aalert(1)");
  rejects(checkHttpsUri, "data:image/png;base64,AAAA");
  rejects(checkHttpsUri, "data:text/html,<script>alert(1)</script>");
  rejects(checkHttpsUri, "com.example.app:/x");
});

Deno.test("checkHttpsUri() rejects a URI that is not absolute or has no host", () => {
  rejects(checkHttpsUri, "/logo.png", "must be an absolute URI with a scheme");
  rejects(checkHttpsUri, "example.com/logo.png");
  rejects(checkHttpsUri, "https://", "must have a host");
  rejects(checkHttpsUri, "https:example.com");
  rejects(checkHttpsUri, "https:/evil.example/");
  rejects(checkHttpsUri, "https:\\\\evil.example/");
  rejects(checkHttpsUri, "//evil.example/logo.png");
});

Deno.test("checkHttpsUri() rejects userinfo", () => {
  rejects(checkHttpsUri, "https://user:pw@example.com/", "must not contain user information");
  rejects(checkHttpsUri, "https://user@example.com/");
  rejects(checkHttpsUri, "https://photobook.example@evil.example/privacy");
  rejects(checkHttpsUri, "https://photobook.example%40evil.example/");
  rejects(checkHttpsUri, "https://evil.example\\@photobook.example/");
  accepts(checkHttpsUri, "https://example.com/~user@host");
});

Deno.test("checkHttpsUri() rejects an invalid host or port", () => {
  rejects(checkHttpsUri, "https://exa_mple.com/", "must have a valid host name or IP address");
  rejects(checkHttpsUri, "https://*.example.com/");
  rejects(checkHttpsUri, "https://example.com./");
  rejects(checkHttpsUri, "https://example.com:0/", "must have a port from 1 to 65535");
  rejects(checkHttpsUri, "https://example.com:65536/");
});

Deno.test("checkHttpsUri() rejects invalid percent-encoding", () => {
  rejects(
    checkHttpsUri,
    "https://example.com/%zz",
    "must use '%' only followed by two hexadecimal digits",
  );
  rejects(checkHttpsUri, "https://example.com/?q=100%");
});

Deno.test("checkHttpsUri() rejects non-ASCII, whitespace and control characters", () => {
  rejects(checkHttpsUri, "https://example.com/é", "must contain only ASCII characters");
  rejects(checkHttpsUri, "https://example.com/\udfff");
  rejects(
    checkHttpsUri,
    "https://exa mple.com",
    "must not contain whitespace or control characters",
  );
  rejects(checkHttpsUri, "https://example.com/\u0000");
  rejects(checkHttpsUri, "https://example.com/\u007f");
  rejects(checkHttpsUri, "https://example.com\\@evil.com/", "must not contain a backslash");
});

// checkHostname

Deno.test("checkHostname() accepts valid hostnames", () => {
  for (
    const name of ["a", "localhost", "example.com", "sub-domain.example.co.uk", "xn--bcher-kva.ch"]
  ) {
    accepts(checkHostname, name);
  }
  accepts(checkHostname, "EXAMPLE.com");
  accepts(checkHostname, `${"a".repeat(63)}.com`);
});

Deno.test("checkHostname() accepts 253 characters and rejects 254", () => {
  accepts(checkHostname, hostnameOfLength(253));
  rejects(checkHostname, hostnameOfLength(254), "must be at most 253 characters");
});

Deno.test("checkHostname() accepts a 63-character label and rejects 64", () => {
  accepts(checkHostname, "a".repeat(63));
  rejects(checkHostname, "a".repeat(64), "must have labels of at most 63 characters");
  rejects(checkHostname, `${"a".repeat(64)}.com`);
});

Deno.test("checkHostname() rejects empty names and empty labels", () => {
  rejects(checkHostname, "", "must not be empty");
  rejects(checkHostname, "example.com.", "must not end with a dot");
  rejects(checkHostname, ".example.com", "must not contain empty labels");
  rejects(checkHostname, "example..com");
  rejects(checkHostname, ".");
});

Deno.test("checkHostname() rejects characters other than letters, digits and hyphens", () => {
  const message = "must contain only ASCII letters, digits, hyphens and dots";
  for (
    const name of [
      "exa_mple.com",
      "*.example.com",
      "exa mple.com",
      "exämple.com",
      "example.com:443",
      "https://example.com",
      "\u0000",
      "a\ud800",
    ]
  ) {
    rejects(checkHostname, name, message);
  }
});

Deno.test("checkHostname() rejects an IP address: a last label that is a number", () => {
  const message = "must be a domain name, not an IP address: its last label must not be a number";
  for (const name of ["192.0.2.1", "127.1", "0x7f.0.0.1", "example.0x7f", "2130706433", "a.123"]) {
    rejects(checkHostname, name, message);
  }
  for (const name of ["123.example.com", "0xcafe-app.example", "3com.example", "example.0xg"]) {
    accepts(checkHostname, name);
  }
});

Deno.test("checkHostname() rejects labels starting or ending with a hyphen", () => {
  const message = "must not have labels that start or end with a hyphen";
  rejects(checkHostname, "-example.com", message);
  rejects(checkHostname, "example-.com", message);
  rejects(checkHostname, "example.-com", message);
  rejects(checkHostname, "-");
  accepts(checkHostname, "ex--ample.com");
});

// originKey, redirectUriKey

Deno.test("originKey() is the origin a browser sends", () => {
  assert.equal(originKey("HTTPS://App.Example.com:0443"), "https://app.example.com");
  assert.equal(originKey("http://[0:0:0:0:0:0:0:1]:3000"), "http://[::1]:3000");
  assert.equal(originKey("https://app.example.com:8443"), "https://app.example.com:8443");
});

Deno.test("redirectUriKey() normalises scheme, host, port and an empty path only", () => {
  assert.equal(redirectUriKey("HTTPS://App.Example.com:443"), "https://app.example.com/");
  assert.equal(redirectUriKey("https://a.example:0443/Cb/?X=%2a"), "https://a.example/Cb/?X=%2a");
  assert.equal(redirectUriKey("https://a.example?x=1"), "https://a.example/?x=1");
  assert.equal(redirectUriKey("http://127.0.0.1:8080/cb"), "http://127.0.0.1:8080/cb");
  assert.equal(redirectUriKey("Com.Example.App:/Cb"), "com.example.app:/Cb");
  assert.equal(redirectUriKey("com.example.app://Host/Cb"), "com.example.app://host/Cb");
  assert.equal(redirectUriKey("not a uri"), "not a uri");
});

// checkEmail

Deno.test("checkEmail() accepts valid addresses", () => {
  for (
    const email of [
      "a@b.co",
      "support@example.com",
      "first.last@sub.example.co.uk",
      "a.@b.co",
      "user+tag@example-mail.com",
      "!$&'*+/=^_`{|}~-@example.com",
      "A@B.CO",
    ]
  ) {
    accepts(checkEmail, email);
  }
});

Deno.test("checkEmail() accepts a 320-character address", () => {
  const domain = `${"b".repeat(63)}.${"c".repeat(63)}.com`;
  const email = `${"a".repeat(320 - 1 - domain.length)}@${domain}`;
  assert.equal(email.length, 320);
  accepts(checkEmail, email);
});

Deno.test("checkEmail() rejects anything but exactly one '@'", () => {
  const message = "must contain exactly one '@'";
  rejects(checkEmail, "a@@b.co", message);
  rejects(checkEmail, "ab.co", message);
  rejects(checkEmail, "a@b@b.co", message);
  rejects(checkEmail, "", message);
});

Deno.test("checkEmail() rejects an invalid local part", () => {
  rejects(checkEmail, "@b.co", "must have a local part before '@'");
  rejects(checkEmail, ".a@b.co", "must not start with a dot");
  rejects(checkEmail, "a..b@b.co", "must not contain two dots in a row");
  rejects(checkEmail, "a b@b.co");
  rejects(checkEmail, '"a"@b.co');
  rejects(checkEmail, "a(b)@b.co");
  rejects(checkEmail, "é@b.co");
  rejects(checkEmail, "\ud800@b.co");
  rejects(checkEmail, "a\u0000@b.co");
});

Deno.test("checkEmail() rejects what a mailto: link would read as more than an address", () => {
  const message = "must be a plain address: its local part may not contain '?', '%' or '#'";
  rejects(checkEmail, "help?cc=x%40evil.example@example.com", message);
  rejects(checkEmail, "help?bcc=x@example.com", message);
  rejects(checkEmail, "help%40evil.example@example.com", message);
  rejects(checkEmail, "help#@example.com", message);
  rejects(checkEmail, "mailto:help@example.com");
  rejects(checkEmail, "help@example.com?cc=x@evil.example");
  rejects(checkEmail, "help@example.com?subject=x");
});

Deno.test("checkEmail() rejects an invalid domain", () => {
  rejects(checkEmail, "a@", "must have a domain after '@'");
  rejects(checkEmail, "a@b.c", "must have a top-level domain of at least two letters");
  rejects(checkEmail, "a@b.c1", "must have a top-level domain of at least two letters");
  rejects(checkEmail, "a@b.12");
  rejects(checkEmail, "a@localhost", "must have a domain with at least two labels");
  rejects(checkEmail, "a@-b.co", "must have domain labels that do not start or end with a hyphen");
  rejects(checkEmail, "a@b-.co");
  rejects(checkEmail, "a@b.co.", "must have a domain without empty labels");
  rejects(checkEmail, "a@.b.co");
  rejects(checkEmail, "a@b..co");
  rejects(checkEmail, "a@b_c.co");
  rejects(checkEmail, "a@[192.0.2.1]");
  rejects(checkEmail, "a@exämple.com");
  rejects(checkEmail, "a@b.co ");
});

// checkScope

Deno.test("checkScope() accepts valid scope tokens", () => {
  for (
    const scope of [
      "openid",
      "https://www.googleapis.com/auth/drive.readonly",
      "read:user",
      "!#[]~",
      "a",
    ]
  ) {
    accepts(checkScope, scope);
  }
});

Deno.test("checkScope() accepts 512 characters and rejects 513", () => {
  accepts(checkScope, "a".repeat(512));
  rejects(checkScope, "a".repeat(513), "must be at most 512 characters");
  rejects(checkScope, "a".repeat(1_000_000));
});

Deno.test("checkScope() rejects an empty scope", () => {
  rejects(checkScope, "", "must not be empty");
});

Deno.test("checkScope() rejects space, quote, backslash, controls and non-ASCII", () => {
  const message = "must contain only printable ASCII characters other than space, '\"' and '\\'";
  for (const scope of ["a b", 'a"b', "a\\b", "é", "\u007f", "\u0000", "a\tb", "\ud800", " "]) {
    rejects(checkScope, scope, message);
  }
});
