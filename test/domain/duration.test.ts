import { describe, expect, it } from 'vitest';
import { exactDuration, formatDuration, MAX_DURATION_MS, parseDuration } from '../../src/domain/duration.js';

/** The one duration grammar every flag, file, annotation and command reads (docs/configuration.md#options). */
describe('parseDuration', () => {
  it.each([
    ['0', 0],
    ['90', 90_000],
    ['90s', 90_000],
    ['500ms', 500],
    ['15m', 900_000],
    ['1h30m', 5_400_000],
    ['1h30m15s250ms', 5_415_250],
    ['7d', 604_800_000],
    ['1d12h', 129_600_000],
    ['  30s\n', 30_000],
    ['0001m', 60_000],
    ['365d', MAX_DURATION_MS],
  ])('%j → %d ms', (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });

  it('counts a bare number in the unit given (the -ms options)', () => {
    expect(parseDuration('250', 1)).toBe(250);
    expect(parseDuration('250ms', 1)).toBe(250);
    expect(parseDuration('2s', 1)).toBe(2000);
  });

  it.each([
    ['', /empty/],
    ['   ', /empty/],
    ['-5s', /not a duration/],
    ['+5s', /not a duration/],
    ['1.5h', /not a duration/],
    ['.5h', /not a duration/],
    ['1h 30m', /not a duration/],
    ['30 s', /not a duration/],
    ['5x', /not a duration/],
    ['5w', /not a duration/],
    ['5y', /not a duration/],
    ['5us', /not a duration/],
    ['5S', /not a duration/],
    ['h', /not a duration/],
    ['1h30', /not a duration/],
    ['1e3', /not a duration/],
    ['0x10', /not a duration/],
    ['Infinity', /not a duration/],
    ['NaN', /not a duration/],
    ['１s', /not a duration/],
    ['366d', /longer than a year/],
    ['8761h', /longer than a year/],
    ['99999999999999999999', /longer than a year/],
    ['9'.repeat(400) + 's', /longer than a year/],
    ['9'.repeat(400), /longer than a year/],
  ])('refuses %j', (text, why) => {
    const r = parseDuration(text);
    expect(typeof r).toBe('string');
    expect(r).toMatch(why);
  });

  it('formats for people, and exactly for a value to paste back', () => {
    expect(formatDuration(90_000)).toBe('1m30s');
    expect(formatDuration(1500)).toBe('1s');
    expect(exactDuration(1500)).toBe('1500ms');
    expect(exactDuration(5_400_000)).toBe('1h30m');
    for (const ms of [1, 999, 1000, 61_000, 86_400_000, MAX_DURATION_MS]) expect(parseDuration(exactDuration(ms))).toBe(ms);
  });
});
