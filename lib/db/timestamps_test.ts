import assert from "node:assert/strict";
import { connect } from "./postgres.ts";
import { parseTimestamptz } from "./timestamps.ts";
import { createTestDatabase } from "../testing/mod.ts";

const years = ["0001", "0049", "0050", "0099", "0100", "1970", "9999"];
// Postgres' fraction (1 to 6 digits, none when zero) and ECMAScript's (3 digits).
const fractions = [["", ".000"], [".5", ".500"], [".123", ".123"], [".123456", ".123"]];
// Postgres' offset and ECMAScript's.
const offsets = [["+00", "Z"], ["+05:30", "+05:30"], ["-08", "-08:00"], ["-03:30", "-03:30"]];

/** The instant, read by ECMAScript's own date format (which takes any 4-digit year as it is). */
const instant = (iso: string) => {
  const date = new Date(iso);
  assert.ok(!Number.isNaN(date.getTime()), iso);
  return date.getTime();
};

/** Each Postgres text is read as the instant of the ECMAScript one beside it. */
const assertReads = (pairs: [string, string][]) => {
  for (const [text, iso] of pairs) assert.equal(parseTimestamptz(text).toISOString(), iso, text);
};

Deno.test("parseTimestamptz() reads Postgres' ISO output for years 0001 to 9999, with and without fractions and offsets", () => {
  for (const year of years) {
    for (const [fraction, ms] of fractions) {
      for (const [offset, zone] of offsets) {
        const text = `${year}-06-15 12:34:56${fraction}${offset}`;
        assert.equal(
          parseTimestamptz(text).getTime(),
          instant(`${year}-06-15T12:34:56${ms}${zone}`),
          text,
        );
      }
    }
  }
  assert.equal(parseTimestamptz("1970-01-01 00:00:00+00").getTime(), 0);
  assertReads([
    ["0001-01-01 00:00:00+00", "0001-01-01T00:00:00.000Z"],
    ["0050-02-28 23:59:59.999+00", "0050-02-28T23:59:59.999Z"],
    ["9999-12-31 23:59:59.999+00", "9999-12-31T23:59:59.999Z"],
    ["2024-02-29 00:00:00+00", "2024-02-29T00:00:00.000Z"],
  ]);
});

Deno.test("parseTimestamptz() reads offsets with seconds, years past 9999 and BC, and gives an invalid date for anything else", () => {
  assertReads([
    // Local mean time, as Postgres writes it before a zone had standard time (America/New_York).
    ["1799-12-31 19:03:58-04:56:02", "1800-01-01T00:00:00.000Z"],
    ["0001-06-15 12:19:32+00:19:32", "0001-06-15T12:00:00.000Z"],
    ["10000-01-01 00:00:00+00", "+010000-01-01T00:00:00.000Z"],
    // 1 BC is year 0 of the proleptic Gregorian calendar, 2 BC year -1.
    ["0001-12-31 00:00:00+00 BC", "0000-12-31T00:00:00.000Z"],
    ["0002-03-01 00:00:00.25+00 BC", "-000001-03-01T00:00:00.250Z"],
  ]);
  for (
    const text of [
      "infinity",
      "-infinity",
      "",
      "0001-06-15",
      "001-06-15 12:00:00+00",
      "0001-06-15T12:00:00+00",
      "0001-06-15 12:00:00",
      "0001-06-15 12:00:00Z",
      "0001-06-15 12:00:00.+00",
      "0001-06-15 12:00:00+0",
      "0001-06-15 12:00:00+00 AD",
      "0001-06-15 12:00:00+00:",
      "0001-13-15 12:00:00+00",
      "0001-00-15 12:00:00+00",
      "0001-06-00 12:00:00+00",
      "0001-06-1x 12:00:00+00",
      "0001-06-15 12:0x:00+00",
      "0001-06-15 12:00:00+0x",
    ]
  ) {
    assert.ok(Number.isNaN(parseTimestamptz(text).getTime()), text);
  }
});

Deno.test("connect(): a timestamptz of the years 0001 to 0099 is read back as written, on every lane, alone and in arrays", async () => {
  const db = await createTestDatabase();
  const sql = connect(db.url, { max: 3, applicationName: "test" });
  try {
    await sql`create table t (id int primary key, at timestamptz(3), precise timestamptz)`;
    const written = years.flatMap((year) => [
      `${year}-06-15T12:00:00.000Z`,
      `${year}-01-02T03:04:05.678Z`,
    ]);
    // Written as text, so that only reading goes through postgres.js's types; then as a Date.
    for (const [i, iso] of written.entries()) {
      await sql`insert into t values (${i}, ${iso}::text::timestamptz, ${iso}::text::timestamptz)`;
    }
    await sql`insert into t values (100, ${new Date("0001-06-15T12:00:00.000Z")}, null)`;
    const [stored] = await sql`
      select to_char(at at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS') as text from t where id = 100`;
    assert.equal(stored!.text, "0001-06-15 12:00:00");
    // Queries at once, so that the pool's three lanes each read some.
    const reads = await Promise.all(
      Array.from({ length: 12 }, () => sql`select id, at, precise from t order by id`),
    );
    for (const rows of reads) {
      for (const [i, iso] of written.entries()) {
        assert.equal((rows[i]!.at as Date).toISOString(), iso);
        assert.equal((rows[i]!.precise as Date).toISOString(), iso);
      }
      assert.equal((rows.at(-1)!.at as Date).toISOString(), "0001-06-15T12:00:00.000Z");
    }
    const [array] = await sql`select array_agg(at order by id) as ats from t where id < 100`;
    assert.deepEqual((array!.ats as Date[]).map((d) => d.toISOString()), written);
    // In another time zone, whose offsets before 1883 have seconds (local mean time).
    await sql.begin(async (tx) => {
      await tx`set local timezone = 'America/New_York'`;
      const [row] = await tx`
        select at, at::text as text from t where id = 100`;
      assert.equal(row!.text, "0001-06-15 07:03:58-04:56:02");
      assert.equal((row!.at as Date).toISOString(), "0001-06-15T12:00:00.000Z");
    });
    await sql.begin(async (tx) => {
      await tx`set local timezone = 'Asia/Kolkata'`;
      const [row] = await tx`select ${"2024-03-01T12:00:00.250Z"}::text::timestamptz as at`;
      assert.equal((row!.at as Date).toISOString(), "2024-03-01T12:00:00.250Z");
    });
  } finally {
    await sql.end();
    await db.drop();
  }
});
