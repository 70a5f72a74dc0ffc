import { deny, NOT_FOUND, type Access, type Deny, type RouteEntry } from './decide.js';
import type { RouteTarget } from './route-key.js';

/**
 * Signed links (docs/links.md): a browser opens one sandbox port with a URL carrying a signed token in the
 * query parameter `sandgate_token`. The gateway answers it `303` to the same URL without the parameter and
 * sets a host-only session cookie holding the same token; later requests (WebSocket upgrades included)
 * present the cookie. Token and cookie pass the same checks, here, as one access check around the view
 * lookup (decide.ts `Access`). The signature, key id and algorithm are checked before (auth/link-tokens.ts):
 * what reaches this module is a verified claim set, or the reason it was refused.
 */

/** The query parameter a link carries its token in. A header never counts: a browser cannot set one. */
export const LINK_PARAM = 'sandgate_token';
/** The session cookie a link sets. Never forwarded to a sandbox. */
export const LINK_COOKIE = 'sandgate_session';
/** The `aud` claim every link token carries: a JWT signed for anything else is not a link. */
export const LINK_AUDIENCE = 'sandgate-link';

/**
 * A link's verified claims (the JWT claim names in brackets). It names a sandbox port as RouteTarget and
 * the relay's target do, but it is a token's documented claim set (docs/links.md), so it is declared
 * whole here rather than built from either.
 */
export interface LinkClaims {
  /** `ns` */
  readonly namespace: string;
  /** `name` */
  readonly name: string;
  /** `uid`: the incarnation; a sandbox deleted and re-created under the same name has another. */
  readonly uid: string;
  /** `port` */
  readonly port: number;
  /** `path`: a path prefix, `/` for every path. */
  readonly path: string;
  /** `methods`: upper-case methods; undefined = any. */
  readonly methods: readonly string[] | undefined;
  /** `ws`: WebSocket upgrades allowed. */
  readonly websocket: boolean;
  /** `team`: who minted it (the team of the minting key, or the admin team). */
  readonly team: string;
  /** `jti`: the link id, for revocation. */
  readonly id: string;
  /** `exp`, in epoch seconds. */
  readonly exp: number;
  /** `kid` of the key that signed it. */
  readonly kid: string;
}

/** What a caller asks a link to open (the operator API and the CLI). */
export interface LinkOrder {
  readonly namespace: string;
  readonly name: string;
  readonly uid: string;
  readonly port: number;
  readonly path: string | undefined;
  readonly methods: readonly string[] | undefined;
  readonly websocket: boolean;
  readonly ttlSeconds: number | undefined;
  /** The caller's team (`*` for the admin team, empty without API keys). */
  readonly team: string;
}

export type LinkRejection = { readonly code: 'link_invalid' | 'link_expired'; readonly message: string };

/** A link a request presented, as verified. */
export interface PresentedLink {
  readonly via: 'query' | 'cookie';
  readonly result: LinkClaims | LinkRejection;
}

/** What of the request a link check reads beyond its target. */
// Written like decide.ts Deny and edge/decider.ts DeciderOptions (documented readonly fields), but it
// shares no field with either: the likeness is the declaration style, not a type to extract.
export interface LinkRequest {
  readonly method: string;
  /** The path and query as the client sent it (the redirect's Location is built from it). */
  readonly path: string;
  readonly upgrade: boolean;
  /** The request came over TLS: the cookie gets `Secure`. */
  readonly secure: boolean;
  /** The request's `Origin` header, if any (a cookie counts only from its own host: see sameHost()). */
  readonly origin?: string | undefined;
  /** The authority the request was sent to (Host / :authority). */
  readonly host?: string | undefined;
}

/** Headers every link answer carries: the URL held a credential, so neither a Referer nor a cache may keep it. */
const LINK_HEADERS: readonly (readonly [string, string])[] = [
  ['referrer-policy', 'no-referrer'],
  ['cache-control', 'no-store'],
];

function linkDeny(code: 'link_invalid' | 'link_expired' | 'link_revoked', message?: string): Deny {
  return { ...deny(code, message), headers: LINK_HEADERS };
}

const LINK_REVOKED = linkDeny('link_revoked');
const LINK_EXPIRED = linkDeny('link_expired');
const OTHER_SANDBOX = linkDeny('link_invalid', 'The link opens another sandbox');
const OTHER_INCARNATION = linkDeny('link_invalid', 'The link was made for a sandbox of that name that has since been deleted');
const OTHER_PORT = linkDeny('link_invalid', 'The link opens another port of this sandbox');
const NO_WEBSOCKET = linkDeny('link_invalid', 'The link does not allow WebSocket connections');
const OTHER_METHOD = linkDeny('link_invalid', 'The link does not allow this method');
const OTHER_PATH = linkDeny('link_invalid', 'The link does not open this path');
const OTHER_ORIGIN = linkDeny('link_invalid', "The link's cookie opens WebSockets and changes only from pages of its own host");

/** Methods that change nothing (RFC 9110 §9.2.1): a cross-origin one cannot act for the user, only read, which CORS governs. */
const SAFE_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * True when `origin` (an `Origin` header) names the same host and port as `host` (the authority the request
 * went to). The scheme is not compared: a TLS-terminating front may stand between. `null` and anything
 * unparsable are another host.
 */
export function sameHost(origin: string, host: string | undefined): boolean {
  if (host === undefined) return false;
  try {
    const o = new URL(origin);
    if (o.protocol !== 'http:' && o.protocol !== 'https:') return false;
    return o.host === new URL(o.protocol + '//' + host).host;
  } catch {
    return false;
  }
}

/** The reason a token was refused as a denial (shared objects for the common reasons). */
function rejected(r: LinkRejection): Deny {
  return r.code === 'link_expired' ? LINK_EXPIRED : linkDeny('link_invalid', r.message);
}

export function isLinkClaims(r: LinkClaims | LinkRejection): r is LinkClaims {
  return 'uid' in r;
}

/**
 * True when `path` (no query) lies under `prefix` segment-wise: `/app` holds `/app` and `/app/x`, not
 * `/apple`. A path with a dot segment, an encoded slash or backslash, or a backslash is outside every
 * prefix but `/`: a sandbox that normalises it could otherwise serve what lies outside.
 */
export function underPrefix(path: string, prefix: string): boolean {
  if (prefix === '/') return true;
  if (!path.startsWith(prefix)) return false;
  if (path.length > prefix.length && path.charCodeAt(prefix.length) !== 0x2f && !prefix.endsWith('/')) return false;
  const lower = path.toLowerCase();
  if (lower.includes('%2f') || lower.includes('%5c') || lower.includes('\\')) return false;
  for (const seg of lower.split('/')) {
    if (seg === '.' || seg === '..' || seg === '%2e' || seg === '%2e%2e' || seg === '.%2e' || seg === '%2e.') return false;
  }
  return true;
}

/**
 * The access check for a request presenting a link. Before the lookup: a refused token, or one for
 * another named sandbox (answered the same whether that sandbox exists or not). After it: a sandbox
 * named by id that is not the link's is answered as a missing one; then incarnation, revocation, expiry,
 * port, upgrade, method and path. A valid token in the query is answered by the redirect that sets the
 * cookie; a valid cookie lets the decision go on (ports, phase) as any credential would. On a public port
 * no check applies: a token in the query only gets the redirect without it (and no cookie).
 */
export function linkAccess(link: PresentedLink, req: LinkRequest, nowMs: number, revoked: (id: string) => boolean, cookiePath: (t: RouteTarget) => string): Access {
  const r = link.result;
  return {
    before(t: RouteTarget): Deny | undefined {
      if (!isLinkClaims(r)) return rejected(r);
      if (t.namespace !== undefined && (t.namespace !== r.namespace || t.name !== r.name)) return OTHER_SANDBOX;
      return undefined;
    },
    after(entry: RouteEntry, t: RouteTarget): Deny | undefined {
      const c = r as LinkClaims;
      if (entry.namespace !== c.namespace || entry.name !== c.name) return NOT_FOUND;
      if (entry.uid !== c.uid) return OTHER_INCARNATION;
      if (revoked(c.id)) return LINK_REVOKED;
      if (c.exp * 1000 <= nowMs) return LINK_EXPIRED;
      if (t.port !== c.port) return OTHER_PORT;
      if (req.upgrade && !c.websocket) return NO_WEBSOCKET;
      if (c.methods !== undefined && !c.methods.includes(req.method)) return OTHER_METHOD;
      const forwarded = t.path ?? req.path;
      const q = forwarded.indexOf('?');
      if (!underPrefix(q < 0 ? forwarded : forwarded.slice(0, q), c.path)) return OTHER_PATH;
      if (link.via === 'cookie') {
        // Sandbox hosts under one base domain are one site, so SameSite=Lax still sends the cookie on a
        // request another sandbox's page makes. A WebSocket handshake or a change (unsafe method) counts
        // only from a page of this host: browsers send `Origin` on both (Fetch standard), and this check
        // runs before any `--strip-origin-on-upgrade`.
        if (req.origin !== undefined && (req.upgrade || !SAFE_METHODS.has(req.method)) && !sameHost(req.origin, req.host)) return OTHER_ORIGIN;
        return undefined;
      }
      return linkRedirect(req, c, nowMs, cookiePath(t), entry);
    },
    public(entry: RouteEntry): Deny | undefined {
      // A public port needs no link, but the token still leaves the URL (and never reaches the sandbox).
      if (link.via === 'cookie') return undefined;
      return { ...deny('link_accepted', PUBLIC_PORT_LINK, entry), headers: [['location', withoutTokenParam(req.path)], ...LINK_HEADERS] };
    },
  };
}

const PUBLIC_PORT_LINK = 'The port is public: continue at the same address without the link token';

/** The `303` a valid query token gets: back to the same URL without it, with the session cookie. */
function linkRedirect(req: LinkRequest, c: LinkClaims, nowMs: number, cookiePath: string, entry: RouteEntry): Deny {
  const maxAge = Math.max(0, c.exp - Math.floor(nowMs / 1000));
  const token = tokenParam(req.path);
  const cookie = `${LINK_COOKIE}=${token ?? ''}; Path=${cookiePath}; Max-Age=${maxAge}; HttpOnly; SameSite=Lax` + (req.secure ? '; Secure' : '');
  return {
    ...deny('link_accepted', undefined, entry),
    headers: [['location', withoutTokenParam(req.path)], ['set-cookie', cookie], ...LINK_HEADERS],
  };
}

/** The `Path` of the session cookie: `/` on a sandbox's own host, the sandbox port's prefix on a shared one. */
export function linkCookiePath(pathPrefix: string): (t: RouteTarget) => string {
  return (t) => (t.source === 'path' ? `/${pathPrefix}/${t.namespace}/${t.name}/${t.port}` : '/');
}

/** Cheap test for a token in the query: no parsing unless `sandgate_token=` is there. */
export function hasTokenParam(path: string | undefined): boolean {
  return path !== undefined && path.includes(LINK_PARAM + '=') && path.includes('?');
}

/** The first `sandgate_token` value in the query of `path` (undefined when none), as sent (no decoding: base64url needs none). */
export function tokenParam(path: string): string | undefined {
  const q = path.indexOf('?');
  if (q < 0) return undefined;
  for (const pair of path.slice(q + 1).split('&')) {
    const eq = pair.indexOf('=');
    if (eq === LINK_PARAM.length && pair.startsWith(LINK_PARAM)) return pair.slice(eq + 1);
  }
  return undefined;
}

/** `path` with every `sandgate_token` pair removed from its query (the query dropped when nothing is left). */
export function withoutTokenParam(path: string): string {
  const q = path.indexOf('?');
  if (q < 0) return path;
  const hash = path.indexOf('#', q);
  const query = path.slice(q + 1, hash < 0 ? undefined : hash);
  const kept = query.split('&').filter((pair) => pair.split('=', 1)[0] !== LINK_PARAM);
  return path.slice(0, q) + (kept.length > 0 && !(kept.length === 1 && kept[0] === '') ? '?' + kept.join('&') : '') + (hash < 0 ? '' : path.slice(hash));
}

/** Cheap test for sandgate's cookie in a `Cookie` header. */
export function hasLinkCookie(cookie: string | undefined): boolean {
  return cookie !== undefined && cookie.includes(LINK_COOKIE + '=');
}

/** Every value of sandgate's cookie in a `Cookie` header (several when paths nest, or a page set its own). */
export function linkCookies(cookie: string): string[] {
  const out: string[] = [];
  for (const part of cookie.split(/[;,]/)) {
    const s = part.trim();
    if (s.startsWith(LINK_COOKIE + '=')) out.push(s.slice(LINK_COOKIE.length + 1));
  }
  return out;
}

/**
 * A `Cookie` header without sandgate's cookie, the sandbox's own cookies kept as they were; undefined when
 * nothing is left (the header is then removed).
 */
export function withoutLinkCookie(cookie: string): string | undefined {
  const kept = cookie.split(/[;,]/).filter((part) => !part.trim().startsWith(LINK_COOKIE + '='));
  const joined = kept.map((p) => p.trim()).filter((p) => p !== '').join('; ');
  return joined === '' ? undefined : joined;
}
