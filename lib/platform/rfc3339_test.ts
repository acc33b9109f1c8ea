import assert from "node:assert/strict";
import { maxTimestampSeconds, minTimestampSeconds, parseTimestamp } from "./rfc3339.ts";

/** Milliseconds since the epoch of what parseTimestamp read, or undefined when it refused. */
function parsedMs(text: string): number | undefined {
  const t = parseTimestamp(text);
  return t === undefined ? undefined : Number(t.seconds) * 1000 + t.nanos / 1e6;
}

Deno.test("parseTimestamp(): a day that exists, and no other (Date.parse rolls those over)", () => {
  const ok = (text: string, utc: number) => assert.equal(parsedMs(text), utc, text);
  const refused = (text: string) => assert.equal(parseTimestamp(text), undefined, text);
  // February 29 in leap years only: every 4th year, not every 100th, every 400th.
  for (const year of [2024, 2000, 1600, 4]) {
    const y = String(year).padStart(4, "0");
    assert.equal(parsedMs(`${y}-02-29T00:00:00Z`), parsedMs(`${y}-02-28T00:00:00Z`)! + 86_400_000);
  }
  ok("2024-02-29T12:00:00Z", Date.UTC(2024, 1, 29, 12));
  ok("2000-02-29T00:00:00Z", Date.UTC(2000, 1, 29));
  for (const year of ["2027", "1900", "2100", "0100", "2023"]) refused(`${year}-02-29T00:00:00Z`);
  // Days 29 to 31 of a month without them, and hour 24, Date.parse (V8's) moves to the next
  // month or day; minute 60, second 60 and day 32 it refuses: refused here, every one.
  for (
    const text of [
      "2027-02-30T00:00:00Z",
      "2024-02-30T00:00:00Z",
      "2027-02-31T00:00:00Z",
      "2027-04-31T00:00:00Z",
      "2027-06-31T00:00:00Z",
      "2027-09-31T00:00:00Z",
      "2027-11-31T00:00:00Z",
      "2027-01-32T00:00:00Z",
      "2027-01-01T24:00:00Z",
      "2027-01-01T23:60:00Z",
      "2027-01-01T23:59:60Z",
      "2016-12-31T23:59:60Z", // a leap second: a Timestamp has none (smeared)
      "2027-00-10T00:00:00Z",
      "2027-13-10T00:00:00Z",
      "2027-01-00T00:00:00Z",
    ]
  ) refused(text);
  ok("2027-01-31T23:59:59Z", Date.UTC(2027, 0, 31, 23, 59, 59));
  ok("2027-04-30T00:00:00Z", Date.UTC(2027, 3, 30));
  ok("2027-12-31T00:00:00Z", Date.UTC(2027, 11, 31));
  // Every day of four years: the same instant as Date.UTC, and the day after the last refused.
  for (const year of [1900, 1999, 2000, 2024]) {
    for (let month = 1; month <= 12; month++) {
      const last = new Date(Date.UTC(year, month, 0)).getUTCDate();
      for (let day = 1; day <= last + 1; day++) {
        const text = `${year}-${String(month).padStart(2, "0")}-${
          String(day).padStart(2, "0")
        }T06:07:08Z`;
        assert.equal(
          parsedMs(text),
          day > last ? undefined : Date.UTC(year, month - 1, day, 6, 7, 8),
          text,
        );
      }
    }
  }
});

Deno.test("parseTimestamp(): offsets, fraction digits and the range of a Timestamp", () => {
  // An offset is subtracted; `Z` and +00:00 are one instant; at most 23:59 either way.
  const utc = parseTimestamp("2027-03-01T10:00:00Z");
  assert.deepEqual(parseTimestamp("2027-03-01T10:00:00+00:00"), utc);
  assert.deepEqual(parseTimestamp("2027-03-01T11:30:00+01:30"), utc);
  assert.deepEqual(parseTimestamp("2027-02-28T23:00:00-11:00"), utc);
  assert.deepEqual(parseTimestamp("2027-03-02T09:59:00+23:59"), utc);
  assert.deepEqual(parseTimestamp("2027-02-28T10:01:00-23:59"), utc);
  for (const offset of ["+24:00", "-24:00", "+01:60", "+0100", "+01", "+1:00", "z"]) {
    assert.equal(parseTimestamp(`2027-03-01T10:00:00${offset}`), undefined, offset);
  }
  // 1 to 9 fraction digits, scaled to nanoseconds; 10 digits, or a dot without digits, refused.
  const digits = "123456789";
  for (let n = 1; n <= 9; n++) {
    const t = parseTimestamp(`2027-03-01T10:00:00.${digits.slice(0, n)}Z`);
    assert.deepEqual(t, {
      seconds: utc!.seconds,
      nanos: Number(digits.slice(0, n).padEnd(9, "0")),
    });
  }
  assert.equal(parseTimestamp("2027-03-01T10:00:00.000000001+01:00")?.nanos, 1);
  assert.equal(parseTimestamp("2027-03-01T10:00:00.1234567890Z"), undefined);
  assert.equal(parseTimestamp("2027-03-01T10:00:00.Z"), undefined);
  // The range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z, offsets counted.
  assert.deepEqual(parseTimestamp("0001-01-01T00:00:00Z"), {
    seconds: BigInt(minTimestampSeconds),
    nanos: 0,
  });
  assert.deepEqual(parseTimestamp("9999-12-31T23:59:59.999999999Z"), {
    seconds: BigInt(maxTimestampSeconds),
    nanos: 999_999_999,
  });
  assert.equal(minTimestampSeconds * 1000, new Date("0001-01-01T00:00:00Z").getTime());
  assert.equal(maxTimestampSeconds * 1000, new Date("9999-12-31T23:59:59Z").getTime());
  assert.deepEqual(
    parseTimestamp("0001-01-01T01:00:00+01:00")?.seconds,
    BigInt(minTimestampSeconds),
  );
  for (
    const text of [
      "0000-12-31T23:59:59Z",
      "0001-01-01T00:00:00+00:01",
      "0001-01-01T00:59:59+01:00",
      "9999-12-31T23:59:59-00:01",
      "10000-01-01T00:00:00Z",
      "+002027-03-01T10:00:00Z",
      "2027-03-01",
      "2027-03-01T10:00Z",
      "2027-03-01 10:00:00Z",
      "2027-03-01t10:00:00Z",
      "",
    ]
  ) assert.equal(parseTimestamp(text), undefined, text);
});
