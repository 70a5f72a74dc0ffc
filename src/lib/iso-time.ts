/**
 * Epoch milliseconds → the string `Date.prototype.toISOString()` gives (`YYYY-MM-DDTHH:mm:ss.sssZ`), for
 * the driver codec's condition times. toISOString costs over a microsecond a call in V8 (it goes through
 * the date cache), more than the rest of decoding a driver update; this is integer arithmetic (days →
 * civil date, H. Hinnant's algorithm) and one flat string. Years outside 0000–9999, which toISOString
 * writes in its expanded ±YYYYYY form, and non-integers go to toISOString.
 */

/** 0000-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z. */
const FIRST = -62_167_219_200_000;
const LAST = 253_402_300_799_999;
const DAY = 86_400_000;
const ZERO = 0x30;

export function isoTime(ms: number): string {
  if (!Number.isInteger(ms) || ms < FIRST || ms > LAST) return new Date(ms).toISOString();
  const days = Math.floor(ms / DAY);
  let rem = ms - days * DAY;
  const hour = Math.floor(rem / 3_600_000);
  rem -= hour * 3_600_000;
  const minute = Math.floor(rem / 60_000);
  rem -= minute * 60_000;
  const second = Math.floor(rem / 1000);
  const milli = rem - second * 1000;
  // Days since 0000-03-01 in 400-year eras: months start in March so the leap day ends the year.
  const z = days + 719_468;
  const era = Math.floor(z / 146_097);
  const doe = z - era * 146_097;
  const yoe = Math.floor((doe - Math.floor(doe / 1460) + Math.floor(doe / 36_524) - Math.floor(doe / 146_096)) / 365);
  const doy = doe - (365 * yoe + Math.floor(yoe / 4) - Math.floor(yoe / 100));
  const mp = Math.floor((5 * doy + 2) / 153);
  const day = doy - Math.floor((153 * mp + 2) / 5) + 1;
  const month = mp < 10 ? mp + 3 : mp - 9;
  const year = yoe + era * 400 + (month <= 2 ? 1 : 0);
  // One call with every character: a flat string, where concatenation would leave a rope of small pieces
  // in every snapshot the view holds.
  // Digit by digit, one same-shape argument per character: a loop or a
  // helper per field would give back the speed this function exists for.
  return String.fromCharCode(
    ZERO + Math.floor(year / 1000),
    ZERO + (Math.floor(year / 100) % 10),
    ZERO + (Math.floor(year / 10) % 10),
    ZERO + (year % 10),
    0x2d,
    ZERO + Math.floor(month / 10),
    ZERO + (month % 10),
    0x2d,
    ZERO + Math.floor(day / 10),
    ZERO + (day % 10),
    0x54,
    ZERO + Math.floor(hour / 10),
    ZERO + (hour % 10),
    0x3a,
    ZERO + Math.floor(minute / 10),
    ZERO + (minute % 10),
    0x3a,
    ZERO + Math.floor(second / 10),
    ZERO + (second % 10),
    0x2e,
    ZERO + Math.floor(milli / 100),
    ZERO + (Math.floor(milli / 10) % 10),
    ZERO + (milli % 10),
    0x5a,
  );
}
