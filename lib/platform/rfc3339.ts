/**
 * google.protobuf.Timestamp read from its JSON text (RFC 3339) strictly: the `/v1` gateway's JSON
 * codec and the services' Connect port (lib/rpc/json_timestamps.ts) read every Timestamp a caller
 * sends with it, so that both refuse what names no real time.
 *
 * @module
 */

/** Seconds of 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z, the range of a Timestamp. */
export const minTimestampSeconds = -62_135_596_800;
export const maxTimestampSeconds = 253_402_300_799;

/** What a Timestamp's JSON text must be: the description of a field whose text is not. */
export const timestampExpected =
  'must be an RFC 3339 timestamp between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z, e.g. "2026-01-02T03:04:05Z"';

const rfc3339 =
  /^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?(?:Z|([+-])([0-9]{2}):([0-9]{2}))$/;

/** Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil). */
function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const doy = Math.floor((153 * (month > 2 ? month - 3 : month + 9) + 2) / 5) + day - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146_097 + doe - 719_468;
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28;
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

/**
 * Reads a google.protobuf.Timestamp from its JSON text, RFC 3339 (`T` and `Z` upper-case, 1 to 9
 * fraction digits, `Z` or an offset `±HH:MM`), or undefined when the text is not of that form,
 * names a time that does not exist (February 30, April 31, hour 24, minute or second 60; V8's
 * `Date.parse` rolls the first three over into the next month or day) or falls outside
 * 0001-01-01T00:00:00Z..9999-12-31T23:59:59Z. Its description then is {@link timestampExpected}.
 */
export function parseTimestamp(text: string): { seconds: bigint; nanos: number } | undefined {
  const m = rfc3339.exec(text);
  if (m === null) return undefined;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const offsetHours = m[9] === undefined ? 0 : Number(m[9]);
  const offsetMinutes = m[10] === undefined ? 0 : Number(m[10]);
  if (
    year < 1 || month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month) ||
    hour > 23 || minute > 59 || second > 59 || offsetHours > 23 || offsetMinutes > 59
  ) {
    return undefined;
  }
  const offset = (m[8] === "-" ? -1 : 1) * (offsetHours * 3600 + offsetMinutes * 60);
  const seconds = daysFromCivil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second -
    offset;
  if (seconds < minTimestampSeconds || seconds > maxTimestampSeconds) return undefined;
  const nanos = m[7] === undefined ? 0 : Number(m[7].padEnd(9, "0"));
  return { seconds: BigInt(seconds), nanos };
}
