/**
 * Durations as operators write them in flags, files and annotations (`--idle-timeout`,
 * `sandgate.dev/idle-timeout`, `sandgate.dev/wake-timeout`): Go's time.ParseDuration units without
 * fractions or signs — `500ms`, `30s`, `15m`, `1h30m` — or a bare integer of seconds. `0` is zero.
 */

const UNIT_MS: Readonly<Record<string, number>> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
const PART = /(\d+)(ms|s|m|h)/y;
/** Longer than any timeout sandgate takes (one year): a typo of extra digits is refused, not obeyed. */
export const MAX_DURATION_MS = 365 * 24 * 3_600_000;

/** Milliseconds, or a sentence saying why `text` is not a duration. */
export function parseDuration(text: string): number | string {
  const t = text.trim();
  if (/^\d{1,9}$/.test(t)) return checked(Number(t) * 1000, text);
  if (t === '') return 'a duration is empty';
  let ms = 0;
  PART.lastIndex = 0;
  while (PART.lastIndex < t.length) {
    const at = PART.lastIndex;
    const m = PART.exec(t);
    if (m === null || m.index !== at) return `${JSON.stringify(text)} is not a duration (write e.g. 30s, 15m, 1h30m, or seconds)`;
    ms += Number(m[1]) * UNIT_MS[m[2]!]!;
  }
  return checked(ms, text);
}

function checked(ms: number, text: string): number | string {
  return ms <= MAX_DURATION_MS ? ms : `${JSON.stringify(text)} is longer than a year`;
}

/** `90000` → `1m30s` (whole seconds; under a second in ms), for decisions, log lines and the console. */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${ms}ms`;
  let s = Math.floor(ms / 1000);
  const h = Math.floor(s / 3600);
  s -= h * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  return `${h > 0 ? `${h}h` : ''}${m > 0 ? `${m}m` : ''}${s > 0 || (h === 0 && m === 0) ? `${s}s` : ''}`;
}
