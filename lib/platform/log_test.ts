import assert from "node:assert/strict";
import { formatLine } from "./log.ts";

/** What a line must be: the head's members, then each field's, as one object's JSON. */
function expected(line: string, message: string, fields?: Record<string, unknown>): string {
  const time = (JSON.parse(line) as { time: string }).time;
  const merged: Record<string, unknown> = { time, level: "info", component: 'c"x', msg: message };
  for (const [k, v] of Object.entries(fields ?? {})) {
    merged[k] = v instanceof Error ? { name: v.name, message: v.message } : v;
  }
  return JSON.stringify(merged) + "\n";
}

Deno.test("formatLine: the same text as the head and the fields merged into one object", () => {
  const cases: [string, Record<string, unknown> | undefined][] = [
    ["rpc", undefined],
    ["rpc", {}],
    ["rpc", { rpc: "a.B/C", code: "ok", duration_ms: 1.25, request_id: undefined }],
    ['a "quoted"\nmessage', { nested: { a: [1, "2"] }, n: null, flag: true }],
    ["override", { msg: "the field's", level: "x", extra: 1 }],
    ["failed", { error: new TypeError("boom") }],
  ];
  for (const [message, fields] of cases) {
    const line = formatLine('c"x', "info", message, fields);
    assert.ok(line.endsWith("}\n"));
    assert.equal(line, expected(line, message, fields), JSON.stringify(fields));
    assert.match(
      (JSON.parse(line) as { time: string }).time,
      /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/,
    );
  }
});

Deno.test("formatLine: an error's message leaves out the value Postgres quotes, and is bounded", () => {
  // What postgres.js throws for `select ${value}::uuid` with a value that is not one.
  const rejected = Object.assign(
    new Error('invalid input syntax for type uuid: "ort_SECRET-REFRESH-TOKEN"'),
    { name: "PostgresError", code: "22P02" },
  );
  const line = formatLine("c", "error", "rpc", {
    error: new Error("wrapped", { cause: rejected }),
  });
  assert.ok(!line.includes("SECRET"), line);
  const cause = (JSON.parse(line) as { error: { cause: Record<string, unknown> } }).error.cause;
  assert.equal(cause.code, "22P02");
  assert.match(String(cause.message), /^invalid input syntax for type uuid: /);
  // Other errors keep their message (a column named is no value), cut when very long.
  const missing = Object.assign(new Error('column "nope" does not exist'), { code: "42703" });
  assert.match(formatLine("c", "error", "rpc", { error: missing }), /column \\"nope\\" does not/);
  const long = formatLine("c", "error", "rpc", { error: new SyntaxError("x".repeat(100_000)) });
  assert.ok(long.length < 2_000, `${long.length} characters`);
});

Deno.test("formatLine: an error whose causes loop is written, its causes followed a few deep", () => {
  const first = new Error("first");
  const second = new Error("second", { cause: first });
  (first as { cause?: unknown }).cause = second;
  const line = formatLine("c", "error", "rpc", { error: first });
  let depth = 0;
  let at = (JSON.parse(line) as { error: { cause?: unknown } }).error;
  while (typeof at.cause === "object" && at.cause !== null) {
    at = at.cause as { cause?: unknown };
    depth++;
  }
  assert.equal(depth, 8);
  assert.equal(at.cause, "(more causes not logged)");
});
