/**
 * sandgate's session cookie in the `Cookie` a browser sends and the `Set-Cookie` a sandbox answers.
 *
 * A `Cookie` header is read as RFC 6265 §5.4 lets a user agent write it and as the `cookie` package reads
 * it (test/differential/cookie-header.test.ts compares the two): pairs separated by `;`, a name before the
 * first `=`, spaces and tabs around name and value ignored, a pair without `=` skipped. Names are
 * compared exactly: `xsandgate_session` or `Sandgate_session` is another site's cookie, never ours.
 * Commas are part of a value (`prefs=a,b` is one cookie), as browsers send them.
 */

/** The session cookie a link sets on a plain-HTTP request, and in the path form (whose `Path` is not `/`). */
export const LINK_COOKIE = 'sandgate_session';
/**
 * The session cookie a link sets over TLS in the host form. A browser keeps a `__Host-` cookie only when
 * it is `Secure`, `Path=/` and has no `Domain` (RFC 6265bis §4.1.3.2), so no sibling host can set or
 * shadow it.
 */
export const LINK_COOKIE_HOST = '__Host-' + LINK_COOKIE;

const SP = 0x20;
const HTAB = 0x09;

function isBlank(c: number): boolean {
  return c === SP || c === HTAB;
}

/** `s.slice(from, to)` without the spaces and tabs at either end. */
function trimmed(s: string, from: number, to: number): string {
  while (from < to && isBlank(s.charCodeAt(from))) from++;
  while (to > from && isBlank(s.charCodeAt(to - 1))) to--;
  return s.slice(from, to);
}

/** The name of the pair `s[from, to)` (its text before `=`, trimmed), or undefined when it has no `=`. */
function pairName(s: string, from: number, to: number): string | undefined {
  const eq = s.indexOf('=', from);
  return eq < 0 || eq >= to ? undefined : trimmed(s, from, eq);
}

/** Every cookie of a `Cookie` header as [name, value], in order, duplicates kept. */
export function cookiePairs(header: string): [string, string][] {
  const out: [string, string][] = [];
  let from = 0;
  while (from < header.length) {
    let end = header.indexOf(';', from);
    if (end < 0) end = header.length;
    const eq = header.indexOf('=', from);
    if (eq >= 0 && eq < end) out.push([trimmed(header, from, eq), trimmed(header, eq + 1, end)]);
    from = end + 1;
  }
  return out;
}

/**
 * Cheap test, before any parsing: could this `Cookie` header hold sandgate's cookie? A request without
 * one pays this one search.
 */
export function mayHoldLinkCookie(cookie: string | undefined): cookie is string {
  return cookie !== undefined && cookie.includes(LINK_COOKIE + '=');
}

/** True for either name sandgate's session cookie goes by. */
export function isLinkCookieName(name: string): boolean {
  return name === LINK_COOKIE || name === LINK_COOKIE_HOST;
}

/** A `__Host-sandgate_session` value of the header, and then each `sandgate_session` value, in header order. */
export function linkCookieValues(header: string): string[] {
  const host: string[] = [];
  const plain: string[] = [];
  for (const [name, value] of cookiePairs(header)) {
    if (name === LINK_COOKIE_HOST) host.push(value);
    else if (name === LINK_COOKIE) plain.push(value);
  }
  return host.length === 0 ? plain : host.concat(plain);
}

/**
 * A `Cookie` header without sandgate's cookies: `header` itself when it holds none, `''` when nothing else
 * is left. Every other cookie keeps its bytes, separators included; only the leading blanks a removed
 * first pair leaves are dropped.
 */
export function withoutLinkCookie(header: string): string {
  let out: string | undefined;
  let from = 0;
  let keptFrom = 0;
  while (from <= header.length) {
    let end = header.indexOf(';', from);
    if (end < 0) end = header.length;
    const name = pairName(header, from, end);
    if (name !== undefined && isLinkCookieName(name)) {
      out = (out ?? '') + header.slice(keptFrom, from);
      keptFrom = end + 1;
    }
    from = end + 1;
  }
  if (out === undefined) return header;
  out += header.slice(keptFrom);
  let start = 0;
  while (start < out.length && (isBlank(out.charCodeAt(start)) || out.charCodeAt(start) === 0x3b)) start++;
  let stop = out.length;
  while (stop > start && (isBlank(out.charCodeAt(stop - 1)) || out.charCodeAt(stop - 1) === 0x3b)) stop--;
  return out.slice(start, stop);
}

/**
 * True when a `Set-Cookie` value (a sandbox's answer) would set sandgate's session cookie in a browser:
 * its name, before the first `=` of the part before the first `;` and trimmed as browsers trim it, is
 * `sandgate_session` with or without a `__Host-` or `__Secure-` prefix, in any case. Such a line never
 * reaches the browser: a sandbox could otherwise plant a cookie (with `Domain` its siblings share) that
 * shadows another sandbox's.
 */
export function setsLinkCookie(setCookie: string): boolean {
  const semi = setCookie.indexOf(';');
  const name = pairName(setCookie, 0, semi < 0 ? setCookie.length : semi);
  if (name === undefined || name.length < LINK_COOKIE.length) return false;
  const lower = name.toLowerCase();
  return lower === LINK_COOKIE || lower === '__host-' + LINK_COOKIE || lower === '__secure-' + LINK_COOKIE;
}
