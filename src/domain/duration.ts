/**
 * The one duration grammar, for every flag, environment variable, config file key, CLI command, sandboxes
 * file field and annotation that takes a duration: Go's time.ParseDuration units plus days, without
 * fractions or signs — `500ms`, `30s`, `15m`, `1h30m`, `7d` — or a bare whole number in the option's own
 * unit (seconds, or milliseconds for the `…-ms` options). Surrounding blanks are ignored; blanks inside,
 * empty text, a sign, a fraction and an unknown unit are not durations.
 */

const UNIT_MS: Readonly<Record<string, number>> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const PART = /(\d+)(ms|s|m|h|d)/y;
/** Longer than any timeout sandgate takes (one year): a typo of extra digits is refused, not obeyed. */
export const MAX_DURATION_MS = 365 * 86_400_000;

/** Milliseconds, or a sentence saying why `text` is not a duration. `bareMs`: what a bare number counts. */
export function parseDuration(text: string, bareMs = 1000): number | string {
  const t = text.trim();
  if (t === '') return 'a duration is empty';
  if (/^\d+$/.test(t)) return checked(Number(t) * bareMs, text);
  let ms = 0;
  PART.lastIndex = 0;
  while (PART.lastIndex < t.length) {
    const at = PART.lastIndex;
    const m = PART.exec(t);
    if (m === null || m.index !== at) return `${JSON.stringify(text)} is not a duration (write e.g. 30s, 15m, 1h30m, 7d, or a whole number of ${bareMs === 1 ? 'milliseconds' : 'seconds'})`;
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

/** `formatDuration` when it says exactly `ms`, else `<ms>ms`: a value an operator can paste back. */
export function exactDuration(ms: number): string {
  const f = formatDuration(ms);
  return parseDuration(f) === ms ? f : `${ms}ms`;
}
