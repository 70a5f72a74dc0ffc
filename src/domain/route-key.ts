import { isDnsLabel, MAX_LABEL_LENGTH, parsePort } from './labels.js';

/**
 * Route keys: every front door turns a request into one canonical target — a sandbox named by
 * {namespace, name} or by an opaque id, and a port — by trying the configured sources in order.
 *
 * A source is either absent from the request (the next source is tried), present and valid (it decides),
 * or present and malformed (the request is rejected: falling through to another source would make the
 * route depend on which of two conflicting spellings we happened to read first).
 */

export type RouteSource = 'headers' | 'e2b-headers' | 'host' | 'path';
export const ROUTE_SOURCES: readonly RouteSource[] = ['headers', 'e2b-headers', 'host', 'path'];

export const HEADER_NAMESPACE = 'x-sandbox-namespace';
export const HEADER_ID = 'x-sandbox-id';
export const HEADER_PORT = 'x-sandbox-port';
export const HEADER_E2B_ID = 'e2b-sandbox-id';
export const HEADER_E2B_PORT = 'e2b-sandbox-port';

/** Headers a client uses to name a route; never forwarded to a sandbox. */
export const ROUTING_HEADERS: readonly string[] = [HEADER_NAMESPACE, HEADER_ID, HEADER_PORT, HEADER_E2B_ID, HEADER_E2B_PORT];

export interface RouteOptions {
  readonly order: readonly RouteSource[];
  /** Hosts `<port>-<name>.<namespace>.<baseDomain>` and `<port>-<id>.<baseDomain>` route. */
  readonly baseDomain: string;
  readonly defaultNamespace: string;
  readonly defaultPort: number;
  /** Path routing `/<prefix>/<namespace>/<name>/<port>/<rest>`; empty string turns it off. */
  readonly pathPrefix: string;
  /** Answer E2B-addressed requests with the statuses the E2B SDK reads (domain/e2b-answers.ts). Default true. */
  readonly e2bAnswers?: boolean;
}

/** Lower-case header name → value. Doors join repeated headers with "," (as Envoy's ext_authz map does). */
export type HeaderMap = Readonly<Record<string, string | undefined>>;

export interface RouteRequest {
  readonly headers: HeaderMap;
  /** The authority (Host / :authority), as received. */
  readonly host: string | undefined;
  /** The path with query (:path), as received. */
  readonly path: string | undefined;
  /** The request method, where the door knows it (links may be limited to some methods). */
  readonly method?: string | undefined;
  /** The request reached the data plane over TLS (a link's cookie is then `Secure`). */
  readonly secure?: boolean | undefined;
  /**
   * A tunnel (CONNECT, the WebSocket tunnel): the sandbox is named by `host` in the tunnel's authority
   * form (parseTunnelAuthority), and only a port declared `tcp` is opened.
   */
  readonly tunnel?: boolean | undefined;
}

export interface RouteTarget {
  /** Set with `name` when the request names the sandbox; unset when it names an id. */
  readonly namespace: string | undefined;
  readonly name: string | undefined;
  /** Set when the request names the sandbox by id (E2B headers and E2B-style hosts). */
  readonly id: string | undefined;
  readonly port: number;
  /** The rewritten path when the route came from the path; otherwise the path is left alone. */
  readonly path: string | undefined;
  readonly source: RouteSource;
}

/** Longest authority we look at: a 253-byte DNS name, a trailing dot and a `:65535` suffix. */
export const MAX_HOST_LENGTH = 260;
/** Longest path we rewrite (Envoy's default max request headers size is 60 KiB; paths past 8 KiB are abuse). */
export const MAX_PATH_LENGTH = 8192;

/** Returns the target, `undefined` when no source names a route, or a string: the rejection message. */
export type RouteParse = RouteTarget | string | undefined;

export function parseRoute(req: RouteRequest, opts: RouteOptions): RouteParse {
  for (let i = 0; i < opts.order.length; i++) {
    const source = opts.order[i];
    let r: RouteParse;
    // One case per source, each handing its parser the part of the request it reads; a switch over the
    // literal keeps this per-request loop free of a lookup and an indirect call.
    switch (source) {
      case 'headers':
        r = fromHeaders(req.headers, opts);
        break;
      case 'e2b-headers':
        r = fromE2bHeaders(req.headers, opts);
        break;
      case 'host':
        r = fromHost(req.host, opts);
        break;
      case 'path':
        r = fromPath(req.path, opts);
        break;
      default:
        r = undefined;
    }
    if (r !== undefined) return r;
  }
  return undefined;
}

function target(
  source: RouteSource,
  namespace: string | undefined,
  name: string | undefined,
  id: string | undefined,
  port: number,
  path: string | undefined,
): RouteTarget {
  return { namespace, name, id, port, path, source };
}

function fromHeaders(h: HeaderMap, opts: RouteOptions): RouteParse {
  const name = h[HEADER_ID];
  if (name === undefined) return undefined;
  if (!isDnsLabel(name)) return `${HEADER_ID} must be a DNS-1123 label (lower case, at most 63 characters)`;
  const ns = h[HEADER_NAMESPACE];
  let namespace = opts.defaultNamespace;
  if (ns !== undefined) {
    if (!isDnsLabel(ns)) return `${HEADER_NAMESPACE} must be a DNS-1123 label (lower case, at most 63 characters)`;
    namespace = ns;
  }
  const port = headerPort(h, HEADER_PORT, opts.defaultPort);
  if (typeof port === 'string') return port;
  return target('headers', namespace, name, undefined, port, undefined);
}

function fromE2bHeaders(h: HeaderMap, opts: RouteOptions): RouteParse {
  const id = h[HEADER_E2B_ID];
  if (id === undefined) return undefined;
  if (!isDnsLabel(id)) return `${HEADER_E2B_ID} must be a sandbox id (lower case letters, digits and '-', at most 63 characters)`;
  const port = headerPort(h, HEADER_E2B_PORT, opts.defaultPort);
  if (typeof port === 'string') return port;
  return target('e2b-headers', undefined, undefined, id, port, undefined);
}

/** The port header `name` gives, `fallback` when it is absent, or the message when it is not a port. */
function headerPort(h: HeaderMap, name: string, fallback: number): number | string {
  const p = h[name];
  if (p === undefined) return fallback;
  const port = parsePort(p);
  return port === 0 ? `${name} must be a port number from 1 to 65535` : port;
}

/** Characters of a DNS name by code: 1 for [a-z0-9.-], 2 for upper case (lower-cased), 0 for anything else. */
const HOST_CHAR = new Uint8Array(128);
for (let c = 0x61; c <= 0x7a; c++) HOST_CHAR[c] = 1;
for (let c = 0x30; c <= 0x39; c++) HOST_CHAR[c] = 1;
for (let c = 0x41; c <= 0x5a; c++) HOST_CHAR[c] = 2;
HOST_CHAR[0x2d] = 1;
HOST_CHAR[0x2e] = 1;

/**
 * Normalises an authority: drops an explicit `:port`, lower-cases, drops one trailing dot. Returns
 * `undefined` for IP literals and anything that is not a plain DNS name.
 */
export function normaliseHost(raw: string): string | undefined {
  let end = raw.length;
  // A `:port` suffix. IPv6 literals ("[::1]:80") are never sandbox hosts.
  for (let i = end - 1; i >= 0; i--) {
    const c = raw.charCodeAt(i);
    if (c === 0x3a) {
      end = i;
      break;
    }
    if (c < 0x30 || c > 0x39) break;
  }
  if (end > 0 && raw.charCodeAt(end - 1) === 0x2e) end--;
  if (end === 0) return undefined;
  let kinds = 0;
  for (let i = 0; i < end; i++) {
    const c = raw.charCodeAt(i);
    const k = c < 0x80 ? HOST_CHAR[c]! : 0;
    if (k === 0) return undefined;
    kinds |= k;
  }
  const host = end === raw.length ? raw : raw.slice(0, end);
  return kinds === 1 ? host : host.toLowerCase();
}

/**
 * True when `host[from, to)` is a DNS-1123 label, for a normalised host (every character in [a-z0-9.-])
 * with no dot in the range: what is left to check is the length and the first and last character.
 */
function isLabelIn(host: string, from: number, to: number): boolean {
  return to > from && to - from <= MAX_LABEL_LENGTH && host.charCodeAt(from) !== 0x2d && host.charCodeAt(to - 1) !== 0x2d;
}

function fromHost(raw: string | undefined, opts: RouteOptions): RouteParse {
  if (raw === undefined || raw.length === 0) return undefined;
  if (raw.length > MAX_HOST_LENGTH) return 'host is too long';
  const host = normaliseHost(raw);
  if (host === undefined) {
    // Non-ASCII, spaces, CR/LF or other bytes no DNS name has: reject only if it claims our domain.
    return raw.toLowerCase().includes(opts.baseDomain) ? 'host is not a valid DNS name' : undefined;
  }
  const base = opts.baseDomain;
  const prefixLen = host.length - base.length - 1;
  if (prefixLen <= 0 || !host.endsWith(base) || host.charCodeAt(prefixLen) !== 0x2e) return undefined;
  // Only a first label that starts with a digit claims to be `<port>-…`; `www.<base>` is not ours.
  const first = host.charCodeAt(0);
  if (first < 0x30 || first > 0x39) return undefined;
  const dash = host.indexOf('-');
  const dot = host.indexOf('.');
  if (dash < 0 || dash > dot) return 'host must look like <port>-<name>.<namespace>.<base-domain> or <port>-<id>.<base-domain>';
  const port = parsePort(host, 0, dash);
  if (port === 0) return 'host names a port outside 1-65535';
  if (!isLabelIn(host, dash + 1, dot)) return 'host names an invalid sandbox name or id';
  const label = host.slice(dash + 1, dot);
  if (dot === prefixLen) return target('host', undefined, undefined, label, port, undefined);
  if (!isLabelIn(host, dot + 1, prefixLen) || host.indexOf('.', dot + 1) !== prefixLen) return 'host must have exactly one namespace label before the base domain';
  return target('host', host.slice(dot + 1, prefixLen), label, undefined, port, undefined);
}

/**
 * The sandbox a tunnel's authority names (docs/tunnels.md): `<name>.<namespace>.<base-domain>:<port>`, or
 * `<id>.<base-domain>:<port>` (the E2B form). The port is the authority's, never a default; undefined for
 * any other authority — a tunnel to anything but a sandbox's port is never opened.
 */
export function parseTunnelAuthority(raw: string | undefined, opts: RouteOptions): RouteTarget | undefined {
  if (raw === undefined || raw.length === 0 || raw.length > MAX_HOST_LENGTH) return undefined;
  const colon = raw.lastIndexOf(':');
  if (colon <= 0) return undefined;
  const port = parsePort(raw, colon + 1, raw.length);
  if (port === 0) return undefined;
  const name = raw.slice(0, colon);
  // One port only: normaliseHost() would take a second `:port` off the name.
  if (name.includes(':')) return undefined;
  const host = normaliseHost(name);
  const base = opts.baseDomain;
  if (host === undefined) return undefined;
  const prefixLen = host.length - base.length - 1;
  if (prefixLen <= 0 || !host.endsWith(base) || host.charCodeAt(prefixLen) !== 0x2e) return undefined;
  const dot = host.indexOf('.');
  if (!isLabelIn(host, 0, dot)) return undefined;
  const label = host.slice(0, dot);
  if (dot === prefixLen) return target('host', undefined, undefined, label, port, undefined);
  if (!isLabelIn(host, dot + 1, prefixLen) || host.indexOf('.', dot + 1) !== prefixLen) return undefined;
  return target('host', host.slice(dot + 1, prefixLen), label, undefined, port, undefined);
}

function isDotSegment(seg: string): boolean {
  if (seg === '.' || seg === '..') return true;
  if (seg.length < 3) return false;
  const s = seg.toLowerCase();
  return s === '%2e' || s === '%2e%2e' || s === '.%2e' || s === '%2e.';
}

function fromPath(raw: string | undefined, opts: RouteOptions): RouteParse {
  const prefix = opts.pathPrefix;
  if (prefix.length === 0 || raw === undefined) return undefined;
  if (!(raw.length > prefix.length + 1 && raw.charCodeAt(0) === 0x2f && raw.startsWith(prefix, 1) && raw.charCodeAt(prefix.length + 1) === 0x2f)) {
    return undefined;
  }
  if (raw.length > MAX_PATH_LENGTH) return 'path is too long';
  for (let i = 0; i < raw.length; i++) {
    const c = raw.charCodeAt(i);
    if (c <= 0x20 || c >= 0x7f) return 'path contains control, space or non-ASCII characters';
  }
  const q = raw.indexOf('?');
  const pathPart = q < 0 ? raw : raw.slice(0, q);
  const query = q < 0 ? '' : raw.slice(q);
  const segs = pathPart.slice(prefix.length + 2).split('/');
  if (segs.length < 3) return `path must look like /${prefix}/<namespace>/<name>/<port>/<rest>`;
  for (const seg of segs) if (isDotSegment(seg)) return 'path must not contain dot segments';
  const [namespace, name, portText] = segs as [string, string, string];
  if (!isDnsLabel(namespace)) return 'path names an invalid namespace';
  if (!isDnsLabel(name)) return 'path names an invalid sandbox name';
  const port = parsePort(portText);
  if (port === 0) return 'path names a port outside 1-65535';
  const rest = segs.length > 3 ? '/' + segs.slice(3).join('/') : '/';
  return target('path', namespace, name, undefined, port, rest + query);
}
