import { describe, expect, it } from 'vitest';
import { hasTokenParam, LINK_PARAM, tokenParam, withoutTokenParam } from '../../src/domain/link.js';
import { fuzzPlan } from '../helpers/fuzz.js';

/**
 * The link token's query handling (src/domain/link.ts: tokenParam, withoutTokenParam, hasTokenParam)
 * against WHATWG URLSearchParams. Generated request targets — a path, a query of pairs with empty names,
 * empty values, repeats of `sandgate_token`, names that only start like it, bare `=` and `&&` — the
 * token taken and removed as URLSearchParams reads the same query. Names are matched as sent: the
 * gateway writes its link URLs itself, so the generator sends `sandgate_token` literally and percent-
 * escapes only other bytes (URLSearchParams would also decode an escaped name to `sandgate_token`).
 */

const plan = fuzzPlan(500, 0x11c4);
const r = plan.random;
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
const chance = (p: number): boolean => r() < p;

/** base64url, as a link token is. */
const token = (): string => Array.from({ length: Math.floor(r() * 40) }, () => pick([...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.'])).join('');
/** A query name or value of other bytes a URL carries, some percent-escaped. */
const text = (): string => Array.from({ length: Math.floor(r() * 8) }, () => pick(['a', 'z', '0', '%20', '%26', '%3D', '-', '.', '~', '/', ':', '@', '!', '$', "'", '(', ')', '*', ',', ';', 'é'.normalize()])).join('');

function pair(): string {
  const k = r();
  if (k < 0.25) return `${LINK_PARAM}=${token()}`;
  if (k < 0.3) return pick([LINK_PARAM, `${LINK_PARAM}=`, `${LINK_PARAM}x=1`, `x${LINK_PARAM}=1`, `${LINK_PARAM.slice(0, -1)}=1`, '=', '', '==']);
  return chance(0.2) ? text() : `${text()}=${text()}${chance(0.1) ? '=' + text() : ''}`;
}

function target(fragment: boolean): string {
  const path = pick(['/', '/a/b', '/sbx/team-a/web/8000/x', '']);
  if (chance(0.1)) return path || '/';
  const query = Array.from({ length: Math.floor(r() * 5) }, pair).join('&');
  return `${path || '/'}?${query}${fragment && chance(0.3) ? '#' + pick(['', 'top', `${LINK_PARAM}=x`, 'a&b']) : ''}`;
}

const queryOf = (path: string): string => {
  const q = path.indexOf('?');
  if (q < 0) return '';
  const hash = path.indexOf('#', q);
  return path.slice(q + 1, hash < 0 ? undefined : hash);
};

describe(`link token query handling against URLSearchParams (seed ${plan.seed}, ${plan.runs} targets per test)`, () => {
  it('tokenParam: the first sandgate_token value URLSearchParams reads (a request target carries no fragment)', () => {
    for (let run = 0; run < plan.runs; run++) {
      const path = target(false);
      // A name without `=` carries no token here (URLSearchParams reads it as an empty value).
      const valued = queryOf(path)
        .split('&')
        .filter((p) => p.includes('='))
        .join('&');
      const want = new URLSearchParams(valued).get(LINK_PARAM) ?? undefined;
      const why = `seed ${plan.seed}, run ${run}: ${JSON.stringify(path)}`;
      expect(tokenParam(path), why).toBe(want);
      // The cheap test never misses a token URLSearchParams finds with a value.
      if (want !== undefined && want !== '') expect(hasTokenParam(path), why).toBe(true);
    }
  });

  it('withoutTokenParam: every other pair kept in order, no sandgate_token left, path and fragment as they were', () => {
    for (let run = 0; run < plan.runs; run++) {
      const path = target(true);
      const out = withoutTokenParam(path);
      const why = `seed ${plan.seed}, run ${run}: ${JSON.stringify(path)} → ${JSON.stringify(out)}`;
      const before = [...new URLSearchParams(queryOf(path))].filter(([k]) => k !== LINK_PARAM);
      expect([...new URLSearchParams(queryOf(out))], why).toEqual(before);
      const cut = (p: string): string => p.split(/[?#]/, 1)[0]!;
      expect(cut(out), why).toBe(cut(path));
      const hash = path.indexOf('#', path.indexOf('?'));
      expect(out.endsWith(hash < 0 || path.indexOf('?') < 0 ? '' : path.slice(hash)), why).toBe(true);
      // Idempotent: nothing left to remove.
      expect(withoutTokenParam(out), why).toBe(out);
    }
  });
});
