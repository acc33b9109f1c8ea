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
