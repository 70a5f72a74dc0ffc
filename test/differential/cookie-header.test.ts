import { parseCookie, parseSetCookie } from 'cookie';
import { describe, expect, it } from 'vitest';
import { cookiePairs, isLinkCookieName, setsLinkCookie, withoutLinkCookie } from '../../src/domain/link-cookie.js';
import { fuzzPlan } from '../helpers/fuzz.js';

/**
 * sandgate's cookie reading (src/domain/link-cookie.ts) against the `cookie` package, which node web
 * frameworks use to read the same headers. Generated `Cookie` headers — sandgate's names, names that
 * merely resemble them, blanks and tabs around names and values, commas, quotes, `=` in values, empty
 * pairs and pairs without `=` — must read the same: for every name, the first value the package keeps is
 * the first value sandgate reads (the package keeps one value per name; sandgate reads them all, in
 * order). The `Set-Cookie` check names sandgate's cookie exactly when the package's parse of the line
 * gives it sandgate's name. And what withoutLinkCookie leaves reads as the same cookies less sandgate's.
 */

const plan = fuzzPlan(500, 0xc00c1e);
const r = plan.random;
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
const chance = (p: number): boolean => r() < p;
const identity = (s: string): string => s;

const NAMES = ['a', 'sid', 'prefs', 'sandgate_session', '__Host-sandgate_session', '__Secure-sandgate_session', 'xsandgate_session', 'Sandgate_session', 'SANDGATE_SESSION', '__host-sandgate_session', 'sandgate_session_x', 'sandgate_token', ''];
const VALUE_CHARS = [...'abcXYZ019-_.~%2F=,"\' \t/:!$&*+@'];
const SEPARATORS = [';', '; ', ' ;', ';;', ';\t', '; ;'];
const BLANKS = ['', '', '', ' ', '\t', ' \t'];

function value(): string {
  return Array.from({ length: Math.floor(r() * 8) }, () => pick(VALUE_CHARS)).join('');
}

function pair(): string {
  if (chance(0.08)) return value().replace(/=/g, '');
  return pick(BLANKS) + pick(NAMES) + pick(BLANKS) + '=' + pick(BLANKS) + value() + pick(BLANKS);
}

function header(): string {
  const n = 1 + Math.floor(r() * 6);
  let h = pair();
  for (let i = 1; i < n; i++) h += pick(SEPARATORS) + pair();
  return (chance(0.1) ? pick(SEPARATORS) : '') + h + (chance(0.1) ? pick(SEPARATORS) : '');
}

/** The package's reading: one value per name, the first; the empty name left out (sandgate never reads it). */
function packageReads(h: string): Map<string, string> {
  const parsed = parseCookie(h, { decode: identity });
  return new Map(Object.entries(parsed).filter((e): e is [string, string] => e[0] !== '' && e[1] !== undefined));
}

function firstOfEach(pairs: readonly [string, string][]): Map<string, string> {
  const out = new Map<string, string>();
  for (const [name, v] of pairs) if (name !== '' && !out.has(name)) out.set(name, v);
  return out;
}

describe(`Cookie headers against the cookie package (seed ${plan.seed}, ${plan.runs} cases)`, () => {
  it('reads the same first value for every name', () => {
    for (let i = 0; i < plan.runs; i++) {
      const h = header();
      expect(firstOfEach(cookiePairs(h)), JSON.stringify(h)).toEqual(packageReads(h));
    }
  });

  it('leaves every other cookie as it was when taking out sandgate\'s', () => {
    for (let i = 0; i < plan.runs; i++) {
      const h = header();
      const kept = withoutLinkCookie(h);
      const others = cookiePairs(h).filter(([name]) => !isLinkCookieName(name));
      expect(firstOfEach(cookiePairs(kept)), JSON.stringify(h)).toEqual(firstOfEach(others));
      expect(packageReads(kept), JSON.stringify(h)).toEqual(firstOfEach(others));
      if (others.length === cookiePairs(h).length) expect(kept, JSON.stringify(h)).toBe(h);
    }
  });

  it('names sandgate\'s cookie in a Set-Cookie line exactly when the package reads that name', () => {
    const ours = new Set(['sandgate_session', '__host-sandgate_session', '__secure-sandgate_session']);
    for (let i = 0; i < plan.runs; i++) {
      const line = pair() + (chance(0.7) ? pick(['; Path=/', '; Domain=example.test', '; Secure; HttpOnly', ';Max-Age=5; SameSite=Lax', '; x=sandgate_session=1']) : '');
      const name = parseSetCookie(line, { decode: identity }).name;
      expect(setsLinkCookie(line), JSON.stringify(line)).toBe(ours.has(name.toLowerCase()));
    }
  });
});
