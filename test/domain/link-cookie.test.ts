import { describe, expect, it } from 'vitest';
import { cookiePairs, linkCookieValues, mayHoldLinkCookie, setsLinkCookie, withoutLinkCookie } from '../../src/domain/link-cookie.js';

describe('sandgate\'s cookie in a Cookie header', () => {
  it.each<[string, string[]]>([
    ['sandgate_session=t', ['t']],
    ['a=1; sandgate_session=t; b=2', ['t']],
    ['sandgate_session=t1; __Host-sandgate_session=h; sandgate_session=t2', ['h', 't1', 't2']],
    ['xsandgate_session=1', []],
    ['my_sandgate_session=1; Sandgate_session=2; sandgate_session_=3', []],
    ['a=1,sandgate_session=t', []],
    ['sandgate_session=t,a=1', ['t,a=1']],
    ['  sandgate_session =\tt ;', ['t']],
    ['sandgate_session; x=1', []],
    [';;=;sandgate_session=', ['']],
  ])('%j holds %j', (header, values) => {
    expect(linkCookieValues(header)).toEqual(values);
  });

  it('costs one search when there is no cookie of that name', () => {
    expect(mayHoldLinkCookie(undefined)).toBe(false);
    expect(mayHoldLinkCookie('theme=dark; sid=7')).toBe(false);
    expect(mayHoldLinkCookie('xsandgate_session=1')).toBe(true);
  });

  // One Cookie header per row and what the sandbox gets of it: every other cookie byte for byte.
  it.each<[string, string]>([
    ['sandgate_session=t', ''],
    ['__Host-sandgate_session=t', ''],
    ['a=1; sandgate_session=t; b=2', 'a=1; b=2'],
    ['sandgate_session=t; a=1', 'a=1'],
    ['a=1;sandgate_session=t', 'a=1'],
    ['prefs=a,b; sandgate_session=t; q="x;y"', 'prefs=a,b; q="x;y"'],
    ['prefs=a,b', 'prefs=a,b'],
    ['a=1;  b = 2 ;sandgate_session=t;c=%20', 'a=1;  b = 2 ;c=%20'],
    ['xsandgate_session=1; a=2', 'xsandgate_session=1; a=2'],
    ['sandgate_session=t,a=1', ''],
  ])('%j leaves %j for the sandbox', (header, want) => {
    expect(withoutLinkCookie(header)).toBe(want);
  });

  it('returns the very header when it holds no sandgate cookie', () => {
    const h = 'prefs=a,b; xsandgate_session=1';
    expect(withoutLinkCookie(h)).toBe(h);
    expect(cookiePairs(h)).toEqual([
      ['prefs', 'a,b'],
      ['xsandgate_session', '1'],
    ]);
  });
});

describe('a Set-Cookie that sets sandgate\'s cookie', () => {
  it.each<[string, boolean]>([
    ['sandgate_session=x; Domain=example.test; Path=/', true],
    ['__Host-sandgate_session=x; Path=/; Secure', true],
    ['__host-sandgate_session=x', true],
    ['__Secure-sandgate_session=x; Secure', true],
    ['SANDGATE_SESSION=x', true],
    [' \tsandgate_session =x', true],
    ['sandgate_session=', true],
    ['xsandgate_session=x', false],
    ['sandgate_session_x=x', false],
    ['app=1; Path=/; x=sandgate_session=1', false],
    ['sandgate_session', false],
    ['app=sandgate_session=1', false],
  ])('%j → %s', (line, dropped) => {
    expect(setsLinkCookie(line)).toBe(dropped);
  });
});
