import assert from "node:assert/strict";
import { FieldHeaders, GuardRequest, GuardResponse, requestMethod } from "./guard_messages.ts";
import { responseBytes } from "./http1.ts";

/** Everything a reader can see of a `Headers`. */
function seen(headers: Headers) {
  const each: [string, string][] = [];
  headers.forEach((value, name) => each.push([name, value]));
  return {
    entries: [...headers],
    each,
    keys: [...headers.keys()],
    values: [...headers.values()],
    cookies: headers.getSetCookie(),
    gets: ["a", "B", "set-cookie", "content-type", "missing"].map((n) => headers.get(n)),
    has: ["a", "b", "SET-COOKIE", "missing"].map((n) => headers.has(n)),
  };
}

Deno.test("FieldHeaders reads as Headers does: case, joins, order, set-cookie", () => {
  const fields = [
    "Content-Type",
    "text/plain",
    "b",
    "2",
    "A",
    "1",
    "a",
    "one more",
    "Set-Cookie",
    "x=1",
    "set-cookie",
    "y=2",
    "X-Empty",
    "",
  ];
  const real = new Headers();
  for (let i = 0; i < fields.length; i += 2) real.append(fields[i]!, fields[i + 1]!);
  assert.deepStrictEqual(seen(new FieldHeaders(fields)), seen(real));
});

Deno.test("FieldHeaders writes as Headers does, and refuses what it refuses", () => {
  // A seeded walk of the same edits on both.
  let seed = 7;
  const next = (n: number) => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % n;
  const names = ["a", "B", "set-cookie", "Content-Length", "x-y"];
  // No empty value: Deno's Headers iterates `a` appended "" then "1" as "1", and gets it as ", 1"
  // (as Fetch says); the first test covers an empty value alone.
  const values = ["1", " padded\t", "two, parts", "\u00e9t\u00e9"];
  const ours = new FieldHeaders();
  const real = new Headers();
  for (let i = 0; i < 400; i++) {
    const name = names[next(names.length)]!;
    const value = values[next(values.length)]!;
    const op = next(3);
    for (const h of [ours, real] as Headers[]) {
      if (op === 0) h.append(name, value);
      else if (op === 1) h.set(name, value);
      else h.delete(name);
    }
    assert.deepStrictEqual(seen(ours), seen(real));
  }
  for (const h of [ours, real] as Headers[]) {
    assert.throws(() => h.set("bad name", "1"), TypeError);
    assert.throws(() => h.set("a", "line\r\nbreak"), TypeError);
    assert.throws(() => h.append("a", "nul\0"), TypeError);
    assert.throws(() => h.append("a", "\u0100"), TypeError);
    assert.throws(() => h.get("bad name"), TypeError);
  }
});

Deno.test("requestMethod normalizes and refuses as new Request does", () => {
  for (const method of ["get", "Post", "delete", "patch", "PATCH", "Custom", "options", "head"]) {
    assert.deepStrictEqual(requestMethod(method), new Request("http://x/", { method }).method);
  }
  for (const method of ["CONNECT", "trace", "Track"]) {
    assert.throws(() => new Request("http://x/", { method }), TypeError);
    assert.deepStrictEqual(requestMethod(method), undefined);
  }
});

const body = () => new TextEncoder().encode('{"name":"caf\u00e9"}') as Uint8Array<ArrayBuffer>;
const made = () =>
  new GuardRequest("POST", "http://h/p?q", new FieldHeaders(["Content-Type", "A/B"]), body());

Deno.test("GuardRequest's body reads once, in any of Request's ways", async () => {
  assert.deepStrictEqual(await made().json(), { name: "caf\u00e9" });
  assert.deepStrictEqual(await made().text(), '{"name":"caf\u00e9"}');
  assert.deepStrictEqual(await made().bytes(), body());
  assert.deepStrictEqual(new Uint8Array(await made().arrayBuffer()), body());
  const blob = await made().blob();
  assert.deepStrictEqual([blob.type, blob.size], ["a/b", body().length]);
  let text = "";
  for await (const part of made().textStream()) text += part;
  assert.deepStrictEqual(text, '{"name":"caf\u00e9"}');

  const req = made();
  const chunks: Uint8Array[] = [];
  for await (const chunk of req.body!) chunks.push(chunk);
  assert.deepStrictEqual(chunks, [body()]);
  assert.deepStrictEqual(req.bodyUsed, true);
  await assert.rejects(() => req.bytes(), TypeError);

  const once = made();
  assert.deepStrictEqual(once.body !== null, true); // looking does not read it
  await once.text();
  assert.deepStrictEqual(once.bodyUsed, true);
  await assert.rejects(() => once.text(), TypeError);
  assert.throws(() => once.clone(), TypeError);
});

Deno.test("GuardRequest has a request's members and defaults", async () => {
  const ours = made();
  const real = new Request("http://h/p?q", { method: "POST", body: body() });
  for (
    const key of [
      "method",
      "url",
      "cache",
      "credentials",
      "integrity",
      "keepalive",
      "mode",
      "redirect",
      "referrer",
      "referrerPolicy",
      "bodyUsed",
    ] as const
  ) {
    assert.deepStrictEqual(ours[key], real[key], key);
  }
  assert.deepStrictEqual(ours.signal.aborted, false);
  assert.deepStrictEqual(Object.prototype.toString.call(ours), "[object Request]");
  const copy = ours.clone();
  assert.deepStrictEqual([copy.url, copy.headers.get("content-type")], [ours.url, "A/B"]);
  assert.deepStrictEqual(await copy.json(), await ours.json());
  const none = new GuardRequest("GET", "http://h/", new FieldHeaders(), null);
  assert.deepStrictEqual([none.body, await none.text()], [null, ""]);
  const form = new GuardRequest(
    "POST",
    "http://h/",
    new FieldHeaders(["content-type", "application/x-www-form-urlencoded"]),
    new TextEncoder().encode("a=1&b=two") as Uint8Array<ArrayBuffer>,
  );
  assert.deepStrictEqual([...(await form.formData()).entries()], [["a", "1"], ["b", "two"]]);
});

/** Everything a reader (and the listener) can see of a response. */
async function seenResponse(response: Response) {
  const head = {
    status: response.status,
    ok: response.ok,
    statusText: response.statusText,
    type: response.type,
    url: response.url,
    redirected: response.redirected,
    headers: [...response.headers],
  };
  // The bytes the listener writes (the date line differs from second to second: taken out).
  const wire = new TextDecoder().decode(
    await responseBytes(response.clone(), { head: false, close: false }),
  ).replace(/date: [^\r]*\r\n/, "");
  return { head, wire, text: await response.text() };
}

Deno.test("GuardResponse answers as Response does, and is written the same", async () => {
  const pairs: [Response, Response][] = [
    [
      GuardResponse.json({ a: "caf\u00e9" }, { status: 201, headers: { "X-Y": " z " } }),
      Response.json({ a: "caf\u00e9" }, { status: 201, headers: { "X-Y": " z " } }),
    ],
    [
      GuardResponse.json([1], { headers: { "content-type": "application/problem+json" } }),
      Response.json([1], { headers: { "content-type": "application/problem+json" } }),
    ],
    [new GuardResponse("plain"), new Response("plain")],
    [
      new GuardResponse(new TextEncoder().encode("bytes") as Uint8Array<ArrayBuffer>, {
        status: 404,
      }),
      new Response(new TextEncoder().encode("bytes"), { status: 404 }),
    ],
    [new GuardResponse(null, { status: 204 }), new Response(null, { status: 204 })],
    [
      new GuardResponse(null, { status: 304, headers: { etag: '"v"' } }),
      new Response(null, { status: 304, headers: { etag: '"v"' } }),
    ],
  ];
  for (const [ours, real] of pairs) {
    assert.deepStrictEqual(await seenResponse(ours), await seenResponse(real));
  }
});

Deno.test("GuardResponse refuses what Response refuses, and reads its body once", async () => {
  for (const Made of [Response, GuardResponse]) {
    assert.throws(() => new Made(null, { status: 199 }), RangeError);
    assert.throws(() => new Made(null, { status: 600 }), RangeError);
    assert.throws(() => new Made("x", { status: 204 }), TypeError);
    assert.throws(() => new Made("x", { headers: { "a b": "1" } }), TypeError);
  }
  assert.throws(() => GuardResponse.json(undefined), TypeError);
  const once = GuardResponse.json({ a: 1 });
  assert.deepStrictEqual(await once.json(), { a: 1 });
  assert.strictEqual(once.bodyUsed, true);
  await assert.rejects(() => once.text(), TypeError);
  assert.throws(() => once.clone(), TypeError);
  // What the listener writes is there however the body was read.
  assert.strictEqual(new TextDecoder().decode(GuardResponse.bytesOf(once)), '{"a":1}');
  assert.strictEqual(Object.prototype.toString.call(once), "[object Response]");
  const form = new GuardResponse("a=1", {
    headers: { "content-type": "application/x-www-form-urlencoded" },
  });
  assert.deepStrictEqual([...(await form.formData()).entries()], [["a", "1"]]);
});
