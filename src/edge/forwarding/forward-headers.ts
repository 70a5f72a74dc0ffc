import type { OutgoingHttpHeaders } from 'node:http2';
import { setsLinkCookie, withoutLinkCookie } from '../../domain/link-cookie.js';
import { ROUTING_HEADERS } from '../../domain/route-key.js';
import { GATEWAY_HEADER_PREFIX } from '../headers.js';

/**
 * The headers the embedded proxy forwards. Removed: hop-by-hop headers (RFC 9110 §7.6.1 — `Connection`
 * and every header it names, `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding`,
 * `Upgrade`), the routing headers, the upstream header and every `x-sandgate-*` header (the gateways'
 * own namespace: a sandbox may trust them, so a client never speaks to it with them), and any configured
 * credential headers, and `Expect` (the proxy's server has answered it). Set: `X-Forwarded-For` (appended),
 * `-Proto`, `-Host`.
 */

export const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'proxy-authenticate', 'proxy-authorization'];
/** Set by the proxy itself; a client's copies are replaced (X-Forwarded-For is appended to instead). */
const SET_BY_PROXY = ['x-forwarded-proto', 'x-forwarded-host'];
/** Answered by the proxy's server (node:http sends `100 Continue` itself): the body follows anyway. */
const CONSUMED = ['expect'];

export interface ForwardOptions {
  readonly upstreamHeader: string;
  /** Extra request headers never forwarded (credentials meant for the gateway). */
  readonly strip: readonly string[];
}

/** Builds the set of request header names (lower case) the proxy drops before forwarding. */
export function dropSet(opts: ForwardOptions): ReadonlySet<string> {
  return new Set([...HOP_BY_HOP, ...ROUTING_HEADERS, opts.upstreamHeader, ...opts.strip, ...SET_BY_PROXY, ...CONSUMED]);
}

/**
 * The header names a request's `Connection` headers list (lower case), beyond `keep-alive` and `close`
 * (the usual values, which name nothing that is forwarded anyway); undefined when there are none, the
 * common case, so a request with a plain `Connection: keep-alive` costs one comparison per header.
 */
function connectionTokens(raw: readonly string[]): Set<string> | undefined {
  let out: Set<string> | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.length !== 10 || name.toLowerCase() !== 'connection') continue;
    const value = raw[i + 1]!;
    if (value === 'keep-alive' || value === 'close' || value === 'Keep-Alive' || value === 'Close') continue;
    for (const t of value.split(',')) {
      const token = t.trim().toLowerCase();
      if (token !== '' && token !== 'keep-alive' && token !== 'close') (out ??= new Set()).add(token);
    }
  }
  return out;
}

export interface ForwardContext {
  readonly clientIp: string;
  readonly proto: 'http' | 'https';
  readonly host: string | undefined;
}

/**
 * Filters Node's `rawHeaders` (name, value, name, value…) into a flat list for undici, keeping
 * duplicates and order. `keep` keeps `Connection: upgrade` / `Upgrade` for WebSocket handshakes.
 */
export function forwardRequestHeaders(raw: readonly string[], drop: ReadonlySet<string>, ctx: ForwardContext, keep?: ReadonlySet<string>): string[] {
  const named = connectionTokens(raw);
  const out: string[] = [];
  let xff: string | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    const lower = name.toLowerCase();
    if (lower === 'x-forwarded-for') {
      xff = xff === undefined ? raw[i + 1] : xff + ', ' + raw[i + 1];
      continue;
    }
    if ((drop.has(lower) || named?.has(lower) === true || lower.startsWith(GATEWAY_HEADER_PREFIX)) && keep?.has(lower) !== true) continue;
    out.push(name, raw[i + 1]!);
  }
  out.push('x-forwarded-for', xff === undefined ? ctx.clientIp : xff + ', ' + ctx.clientIp);
  out.push('x-forwarded-proto', ctx.proto);
  if (ctx.host !== undefined) out.push('x-forwarded-host', ctx.host);
  return out;
}

/**
 * Filters headers on an internal hop (a relay listener passing on what Envoy or a peer gateway already
 * prepared): hop-by-hop headers, the names in `drop` and every name starting with `dropPrefix` go; no
 * X-Forwarded-* is added, since the first proxy set them.
 */
export function filterRequestHeaders(raw: readonly string[], drop: ReadonlySet<string>, dropPrefix: string, keep?: ReadonlySet<string>): string[] {
  const named = connectionTokens(raw);
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    const lower = name.toLowerCase();
    if ((drop.has(lower) || named?.has(lower) === true || lower.startsWith(dropPrefix)) && keep?.has(lower) !== true) continue;
    out.push(name, raw[i + 1]!);
  }
  return out;
}

/**
 * Takes sandgate's link cookie out of the `Cookie` lines of a flat header list, in place: the sandbox's
 * own cookies stay as they were; a line left empty goes.
 */
export function stripLinkCookie(headers: string[]): string[] {
  for (let i = headers.length - 2; i >= 0; i -= 2) {
    const name = headers[i]!;
    if (name.length !== 6 || name.toLowerCase() !== 'cookie') continue;
    const kept = withoutLinkCookie(headers[i + 1]!);
    if (kept === '') headers.splice(i, 2);
    else headers[i + 1] = kept;
  }
  return headers;
}

const RESPONSE_DROP: ReadonlySet<string> = new Set(HOP_BY_HOP);

/**
 * The one rule every carrier of a sandbox's answer applies — the proxy (HTTP/1.1 and HTTP/2), the relay
 * listener, WebSocket handshakes and ext_proc's response headers: a `Set-Cookie` that would set sandgate's
 * session cookie (domain/link-cookie.ts setsLinkCookie) never reaches the browser. A sandbox could
 * otherwise plant one with a `Domain` its sibling hosts share and shadow their link cookies. `lowerName`
 * is the header's name in lower case.
 */
export function isSandgateSetCookie(lowerName: string, value: string): boolean {
  return lowerName === 'set-cookie' && setsLinkCookie(value);
}

/** A raw header name or value as text: undici hands Buffers, node:http strings; latin1 keeps every byte as it came. */
function text(v: string | Buffer): string {
  return typeof v === 'string' ? v : v.toString('latin1');
}

/**
 * An upstream response's raw headers (name, value, name, value… as undici or node:http parsed them) as
 * the flat list `writeHead` takes: order, case and duplicates kept, hop-by-hop headers, the names its
 * `Connection` headers list and a `Set-Cookie` of sandgate's cookie dropped. Built straight from the raw
 * list: no parsed object in between.
 */
export function forwardResponseHeaders(raw: readonly (string | Buffer)[]): string[] {
  const named = connectionNamed(raw);
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const name = text(raw[i]!);
    const lower = name.toLowerCase();
    if (RESPONSE_DROP.has(lower) || named?.has(lower) === true) continue;
    const value = text(raw[i + 1]!);
    if (isSandgateSetCookie(lower, value)) continue;
    out.push(name, value);
  }
  return out;
}

/** The names an upstream response's `Connection` headers list (RFC 9110 §7.6.1), beyond keep-alive and close. */
function connectionNamed(raw: readonly (string | Buffer)[]): Set<string> | undefined {
  let named: Set<string> | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i]!.length !== 10) continue;
    const name = text(raw[i]!);
    if (name.toLowerCase() !== 'connection') continue;
    const value = text(raw[i + 1]!);
    if (value === 'keep-alive' || value === 'close') continue;
    for (const t of value.split(',')) (named ??= new Set()).add(t.trim().toLowerCase());
  }
  return named;
}

/** Response fields HTTP/2 refuses (RFC 9113 §8.2.2) beyond the hop-by-hop ones. */
const NOT_IN_H2: ReadonlySet<string> = new Set([...HOP_BY_HOP, 'http2-settings']);

/**
 * The same headers as forwardResponseHeaders keeps, as the header object an HTTP/2 stream's `respond`
 * takes, in one pass over the raw list: names in lower case, a repeated name as an array in order.
 */
export function forwardResponseHeadersH2(status: number, raw: readonly (string | Buffer)[]): OutgoingHttpHeaders {
  const named = connectionNamed(raw);
  // No prototype: a field named `__proto__` or `length` is a field like any other.
  const out: OutgoingHttpHeaders = Object.create(null) as OutgoingHttpHeaders;
  out[':status'] = status;
  for (let i = 0; i < raw.length; i += 2) {
    const lower = text(raw[i]!).toLowerCase();
    if (NOT_IN_H2.has(lower) || named?.has(lower) === true) continue;
    const value = text(raw[i + 1]!);
    if (isSandgateSetCookie(lower, value)) continue;
    const had = out[lower];
    if (had === undefined) out[lower] = value;
    else if (Array.isArray(had)) had.push(value);
    else out[lower] = [String(had), value];
  }
  return out;
}
