/**
 * The authorization endpoint's answers to a user without a session, and to a request with a
 * repeated parameter: the token service is a transport that answers StartAuthorization as it does
 * without a user (UNAUTHENTICATED for a request that passes its checks, an OAuth refusal for one
 * that does not), or fails the test if it is called.
 */

import assert from "node:assert/strict";
import { Code, ConnectError, type Transport } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.ts";
import { DecideAuthorizationResponseSchema } from "../gen/registry/token/v1/token_service_pb.ts";
import { createLogger, createMemoryBudget } from "../lib/platform/mod.ts";
import { cookieValue, createOAuthEndpoints, formPairs } from "./oauth.ts";

const unreachable: Transport = {
  unary: () => Promise.reject(new ConnectError("the token service was called", Code.Internal)),
  stream: () => Promise.reject(new ConnectError("the token service was called", Code.Internal)),
};

/** The token service asked without a user: `refusal`, or UNAUTHENTICATED (the request passes). */
function withoutUser(asked: string[], refusal?: ConnectError): Transport {
  return {
    unary: (method, _signal, _timeout, header) => {
      asked.push(`${method.name} ${new Headers(header).get("authorization") ?? "no user"}`);
      return Promise.reject(
        refusal ?? new ConnectError("The user is not signed in", Code.Unauthenticated),
      );
    },
    stream: unreachable.stream,
  };
}

function endpoints(loginUrl?: string, transport: Transport = withoutUser([])) {
  return createOAuthEndpoints({
    transport,
    issuer: "https://auth.example.com",
    rpcTimeoutMs: 1000,
    budget: createMemoryBudget(1024 * 1024),
    log: createLogger("test", "error"),
    ...(loginUrl ? { loginUrl } : {}),
  });
}

const correlation = {
  requestId: "r1",
  traceparent: "00-" + "1".repeat(32) + "-" + "2".repeat(16) + "-01",
};
const authorizeUrl =
  "https://auth.example.com/oauth2/authorize?response_type=code&client_id=cli_x&state=s";

async function answer(handler: ReturnType<typeof endpoints>, req: Request) {
  const out = await handler(req, new URL(req.url), correlation);
  assert.ok(out, "the endpoint answers");
  return out.response;
}

Deno.test("authorize without a session: to LOGIN_URL with return_to", async () => {
  const res = await answer(
    endpoints("https://login.example.com/signin?app=1"),
    new Request(authorizeUrl),
  );
  assert.equal(res.status, 302);
  const to = new URL(res.headers.get("location")!);
  assert.equal(to.origin + to.pathname, "https://login.example.com/signin");
  assert.equal(to.searchParams.get("app"), "1");
  assert.equal(to.searchParams.get("return_to"), authorizeUrl);
  assert.equal(res.headers.get("cache-control"), "no-store");
});

Deno.test("authorize without a session, LOGIN_URL on the issuer's origin: return_to is a path", async () => {
  const res = await answer(
    endpoints("https://auth.example.com/dev/sign-in"),
    new Request(authorizeUrl),
  );
  assert.equal(res.status, 302);
  const to = new URL(res.headers.get("location")!);
  assert.equal(to.origin + to.pathname, "https://auth.example.com/dev/sign-in");
  assert.equal(
    to.searchParams.get("return_to"),
    "/oauth2/authorize?response_type=code&client_id=cli_x&state=s",
  );
});

Deno.test("authorize without a session: the request is checked first, without a user", async () => {
  const asked: string[] = [];
  const passes = await answer(
    endpoints("https://login.example.com/signin", withoutUser(asked)),
    new Request(authorizeUrl),
  );
  assert.equal(passes.status, 302);
  assert.deepEqual(asked, ["StartAuthorization no user"]);
  // An unknown client: the error page at once, never the sign-in.
  const unknown = new ConnectError("The client is not known", Code.InvalidArgument, undefined, [
    { desc: ErrorInfoSchema, value: { reason: "invalid_client", domain: "oauth2" } },
  ]);
  const refused = await answer(
    endpoints("https://login.example.com/signin", withoutUser([], unknown)),
    new Request(authorizeUrl),
  );
  assert.equal(refused.status, 400);
  assert.equal(refused.headers.get("location"), null);
  assert.match(await refused.text(), /cannot be completed/);
});

Deno.test("authorize without a session and no LOGIN_URL: a page says to sign in", async () => {
  for (const cookie of [undefined, "theme=dark", "session=", "session=bad token"]) {
    const res = await answer(
      endpoints(),
      new Request(authorizeUrl, cookie ? { headers: { cookie } } : {}),
    );
    assert.equal(res.status, 401, String(cookie));
    assert.match(await res.text(), /Sign in first/);
    assert.match(res.headers.get("content-security-policy") ?? "", /frame-ancestors 'none'/);
  }
});

Deno.test("authorize with a repeated parameter: a page, never a redirect", async () => {
  const res = await answer(
    endpoints(),
    new Request(
      `${authorizeUrl}&redirect_uri=https://a.example/cb&redirect_uri=https://b.example/cb`,
      {
        headers: { cookie: "session=abc" },
      },
    ),
  );
  assert.equal(res.status, 400);
  assert.equal(res.headers.get("location"), null);
  assert.match(await res.text(), /redirect_uri is given more than once/);
});

Deno.test("a repeated form parameter the endpoint knows is refused, named within RFC 6749's characters", async () => {
  for (
    const [path, body, description] of [
      ["/oauth2/token", "scope=a&scope=b", "The parameter scope is given more than once"],
      ["/oauth2/introspect", "token=a&token=b", "The parameter token is given more than once"],
      ["/oauth2/revoke", "token=a&token=b", "The parameter token is given more than once"],
    ] as const
  ) {
    const res = await answer(
      endpoints(),
      new Request(`https://auth.example.com${path}`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body,
      }),
    );
    assert.equal(res.status, 400);
    const json = await res.json();
    assert.equal(json.error, "invalid_request");
    assert.equal(json.error_description, description, `${path} ${body}`);
  }
});

Deno.test("authorize takes GET, HEAD and POST only; another method is the JSON 405", async () => {
  const res = await answer(endpoints(), new Request(authorizeUrl, { method: "PUT" }));
  assert.equal(res.status, 405);
  assert.equal(res.headers.get("allow"), "GET, HEAD, POST");
  assert.equal((await res.json()).error.code, "unimplemented");
});

Deno.test("cookieValue() finds a cookie among others, quoted or not", () => {
  assert.equal(cookieValue("a=1; session=tok; b=2", "session"), "tok");
  assert.equal(cookieValue('session="tok"', "session"), "tok");
  assert.equal(cookieValue("xsession=1", "session"), undefined);
  assert.equal(cookieValue(null, "session"), undefined);
});

Deno.test("formPairs reads a form as URLSearchParams does, split by hand or not", () => {
  const forms = [
    "",
    "a",
    "a=",
    "=b",
    "&&",
    "a=b=c",
    "a=1&a=2&&b",
    "grant_type=client_credentials&scope=read",
    "token=eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ4In0.c2ln&token_type_hint=access_token",
    "?a=b",
    "a=%41%zz&b=c+d",
    "é=€&x=\u{1F600}",
  ];
  // And random ones, over the characters that matter.
  const alphabet = ["a", "b", "=", "&", "%", "2", "F", "+", "?", "é", " "];
  let seed = 7;
  const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % alphabet.length;
  for (let i = 0; i < 2000; i++) {
    forms.push(Array.from({ length: i % 13 }, () => alphabet[next()]).join(""));
  }
  for (const form of forms) {
    assert.deepEqual([...formPairs(form)], [...new URLSearchParams(form)], JSON.stringify(form));
  }
});

Deno.test("the consent form is read whatever the size of the request its page was shown for", async () => {
  const decided: number[] = [];
  const tokens: Transport = {
    unary: (method, _signal, _timeout, _header, input) => {
      assert.equal(method.name, "DecideAuthorization");
      decided.push((input as { request?: { scope: string } }).request?.scope.length ?? 0);
      return Promise.resolve({
        stream: false as const,
        service: method.parent,
        method,
        header: new Headers(),
        message: create(DecideAuthorizationResponseSchema, {
          redirectTo: "https://a.example/cb?code=c",
        }),
        trailer: new Headers(),
      }) as never;
    },
    stream: unreachable.stream,
  };
  // A scope a query carries as it is, within a request line's 64 KiB, and that a browser's form
  // encodes at three bytes a character (`!` is `%21`): the page posts it back, so its form is read.
  const scope = Array.from({ length: 100 }, (_, i) => `s${i}`.padEnd(512, "!")).join(" ");
  const post = (body: string) =>
    answer(
      endpoints(undefined, tokens),
      new Request("https://auth.example.com/oauth2/authorize", {
        method: "POST",
        headers: {
          cookie: "session=abc",
          "content-type": "application/x-www-form-urlencoded",
        },
        body,
      }),
    );
  const form = new URLSearchParams({
    response_type: "code",
    client_id: "cli_x",
    redirect_uri: "https://a.example/cb",
    scope,
    state: "s",
    csrf_token: "t",
    decision: "allow",
  }).toString();
  assert.ok(form.length > 3 * 50_000, `${form.length} bytes`);
  const res = await post(form);
  assert.equal(res.status, 303, await res.clone().text());
  assert.equal(res.headers.get("location"), "https://a.example/cb?code=c");
  assert.deepEqual(decided, [scope.length]);
  // Beyond what any request line could have made, it is still refused.
  const tooLarge = await post(`${form}&x=${"y".repeat(4 * 64 * 1024)}`);
  assert.equal(tooLarge.status, 413);
  await tooLarge.body?.cancel();
  assert.deepEqual(decided, [scope.length]);
});
