import assert from "node:assert/strict";
import { maxPageBytes, pageOf, rowTextSize } from "./pages.ts";

Deno.test("pageOf() splits limit + 1 rows into the page and has_more", () => {
  const rows = [{ id: "a" }, { id: "b" }, { id: "c" }];
  assert.deepEqual(pageOf(rows, 2, (r) => r.id), { data: ["a", "b"], hasMore: true });
  assert.deepEqual(pageOf(rows, 3, (r) => r.id), { data: ["a", "b", "c"], hasMore: false });
});

Deno.test("pageOf() ends a page before the row that takes it past maxPageBytes", () => {
  const uris = Array.from({ length: 100 }, () => "https://example.com/" + "x".repeat(2028));
  const fat = (id: string) => ({ id, redirect_uris: uris, javascript_origins: uris });
  assert.equal(rowTextSize(fat("a")), 1 + 2 * 100 * 2048);
  const perRow = rowTextSize(fat("a"));
  const fit = Math.floor(maxPageBytes / perRow);
  const rows = Array.from({ length: 10 }, (_, i) => fat(String(i)));
  const page = pageOf(rows, 9, (r) => r.id);
  assert.equal(page.data.length, fit);
  assert.equal(page.hasMore, true);
  // One row larger than the cap still makes a page of one.
  const huge = { id: "h", text: "x".repeat(maxPageBytes * 2) };
  assert.deepEqual(pageOf([huge, huge], 5, (r) => r.id), { data: ["h"], hasMore: true });
});
