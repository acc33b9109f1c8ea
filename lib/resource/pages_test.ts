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

Deno.test("pageOf() counts a page's text in UTF-8 bytes, not UTF-16 code units", () => {
  assert.equal(
    rowTextSize({ a: "abc", b: ["é", "中", "😀"], n: 5, d: new Date(0), z: null }),
    3 + 2 + 3 + 4,
  );
  // 10,000 CJK characters a row: 30,000 bytes, 10,000 code units.
  const cjk = (id: string) => ({ id, text: "中".repeat(10_000) });
  assert.equal(rowTextSize(cjk("a")), 1 + 30_000);
  const rows = Array.from({ length: 101 }, (_, i) => cjk(String(i).padStart(3, "0")));
  const page = pageOf(rows, 100, (r) => r.id);
  assert.equal(page.data.length, Math.floor(maxPageBytes / (3 + 30_000)));
  assert.equal(page.hasMore, true);
  // The bytes of what the page holds stay under the cap.
  const bytes = page.data.reduce((n, id) => n + rowTextSize(rows[Number(id)]!), 0);
  assert.ok(bytes <= maxPageBytes, `${bytes}`);
  // Astral characters: 4 bytes, 2 code units each.
  const emoji = Array.from({ length: 101 }, (_, i) => ({ id: String(i), t: "😀".repeat(5_000) }));
  assert.equal(pageOf(emoji, 100, (r) => r.id).data.length, Math.floor(maxPageBytes / 20_001));
  // ASCII is a byte a character: 100 rows of 10,000 fit (1,000,000 bytes), as before.
  const ascii = Array.from({ length: 101 }, (_, i) => ({ t: '"'.repeat(10_000), i }));
  assert.deepEqual(pageOf(ascii, 100, (r) => r.i).data.length, 100);
  // Just over a third of the cap in code units, all ASCII: counted, and the whole page stays.
  const third = Array.from({ length: 2 }, (_, i) => ({ t: "x".repeat(maxPageBytes / 6 + 1), i }));
  assert.deepEqual(pageOf(third, 2, (r) => r.i), { data: [0, 1], hasMore: false });
  // A page of two halves of the cap in bytes: the second row passes it by a byte.
  const half = "é".repeat(maxPageBytes / 4);
  assert.deepEqual(pageOf([{ t: half }, { t: half + "x" }], 2, (r) => r.t.length), {
    data: [maxPageBytes / 4],
    hasMore: true,
  });
});
