import { describe, expect, it } from 'vitest';
import { isoTime } from '../../src/lib/iso-time.js';

describe('isoTime', () => {
  it('writes what toISOString writes, across the years it writes with four digits and at their edges', () => {
    const edges = [
      0,
      -1,
      1,
      -62_167_219_200_000,
      -62_167_219_200_001,
      253_402_300_799_999,
      253_402_300_800_000,
      Date.UTC(2000, 1, 29, 23, 59, 59, 999),
      Date.UTC(1900, 1, 28, 12),
      Date.UTC(2100, 2, 1),
      Date.UTC(1969, 11, 31, 23, 59, 59, 999),
      Date.UTC(2025, 0, 1),
      8.64e15,
      -8.64e15,
      1.5,
    ];
    for (const ms of edges) expect(isoTime(ms), String(ms)).toBe(new Date(ms).toISOString());
    // A deterministic spread over 0000–9999 (every day of some years, and arbitrary instants).
    let x = 12345;
    for (let i = 0; i < 20_000; i++) {
      x = (Math.imul(x, 1_103_515_245) + 12_345) >>> 0;
      const ms = -62_167_219_200_000 + Math.floor((x / 2 ** 32) * 315_569_520_000_000) + (i % 1000);
      if (ms > 253_402_300_799_999) continue;
      expect(isoTime(ms)).toBe(new Date(ms).toISOString());
    }
    for (let day = 0; day < 366 * 5; day++) {
      const ms = Date.UTC(1999, 0, 1) + day * 86_400_000 + day;
      expect(isoTime(ms)).toBe(new Date(ms).toISOString());
    }
  });
});
