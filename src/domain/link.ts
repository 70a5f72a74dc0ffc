import { deny, NOT_FOUND, type Access, type Deny, type RouteEntry } from './decide.js';
import { LINK_COOKIE, LINK_COOKIE_HOST } from './link-cookie.js';
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

/** Where a token says it leads, read from its payload before (or without) a valid signature. */
export interface LinkTarget {
  readonly namespace: string;
  readonly name: string;
  readonly port: number;
}

/**
 * Why a token was refused; `claimed` is the sandbox port its payload names when that could be read — it
 * only tells which request the refusal concerns, and never opens anything.
 */
export type LinkRejection = { readonly code: 'link_invalid' | 'link_expired'; readonly message: string; readonly claimed?: LinkTarget | undefined };

/** The links a request presented, as verified. */
export interface PresentedLink {
  readonly via: 'query' | 'cookie';
  /** The query's one token; or the session cookies' tokens, `__Host-` ones first (link-cookie.ts). */
  readonly results: readonly (LinkClaims | LinkRejection)[];
}

/** What of the request a link check reads beyond its target. */
// Written like decide.ts Deny and edge/decider.ts DeciderOptions (documented readonly fields), but it
// shares no field with either: the likeness is the declaration style, not a type to extract.
export interface LinkRequest {
  readonly method: string;
  /** The path and query as the client sent it (the redirect's Location is built from it). */
  readonly path: string;
  readonly upgrade: boolean;
  /** The request came over TLS: the cookie gets `Secure`, and in the host form the `__Host-` name. */
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

/** The checks a verified link makes of the sandbox found and the request, after its sandbox was matched. */
function claimsRefuse(c: LinkClaims, entry: RouteEntry, t: RouteTarget, req: LinkRequest, nowMs: number, revoked: (id: string) => boolean): Deny | undefined {
  if (entry.uid !== c.uid) return OTHER_INCARNATION;
  if (revoked(c.id)) return LINK_REVOKED;
  if (c.exp * 1000 <= nowMs) return LINK_EXPIRED;
  if (t.port !== c.port) return OTHER_PORT;
  if (req.upgrade && !c.websocket) return NO_WEBSOCKET;
  if (c.methods !== undefined && !c.methods.includes(req.method)) return OTHER_METHOD;
  const forwarded = t.path ?? req.path;
  const q = forwarded.indexOf('?');
  if (!underPrefix(q < 0 ? forwarded : forwarded.slice(0, q), c.path)) return OTHER_PATH;
  return undefined;
}

/**
 * The access check for a request presenting a link: the query's token (queryAccess) or session cookies
 * (cookieAccess). `fallback` is the check the request gets without a link (API key, traffic token), which
 * applies when none of its cookies is for the sandbox port asked for.
 */
export function linkAccess(link: PresentedLink, req: LinkRequest, nowMs: number, revoked: (id: string) => boolean, cookiePath: (t: RouteTarget) => string, fallback?: Access): Access {
  return link.via === 'query' ? queryAccess(link.results[0]!, req, nowMs, revoked, cookiePath) : cookieAccess(link.results, req, nowMs, revoked, fallback);
}

/**
 * A token in the query decides alone. Before the lookup: a refused token, or one for another named sandbox
 * (answered the same whether that sandbox exists or not). After it: a sandbox named by id that is not the
 * link's is answered as a missing one; then incarnation, revocation, expiry, port, upgrade, method and
 * path; a valid token is answered by the redirect that sets the cookie. On a public port no check applies:
 * the token only gets the redirect without it (and no cookie).
 */
function queryAccess(r: LinkClaims | LinkRejection, req: LinkRequest, nowMs: number, revoked: (id: string) => boolean, cookiePath: (t: RouteTarget) => string): Access {
  return {
    before(t: RouteTarget): Deny | undefined {
      if (!isLinkClaims(r)) return rejected(r);
      if (t.namespace !== undefined && (t.namespace !== r.namespace || t.name !== r.name)) return OTHER_SANDBOX;
      return undefined;
    },
    after(entry: RouteEntry, t: RouteTarget): Deny | undefined {
      const c = r as LinkClaims;
      if (entry.namespace !== c.namespace || entry.name !== c.name) return NOT_FOUND;
      return claimsRefuse(c, entry, t, req, nowMs, revoked) ?? linkRedirect(req, c, nowMs, cookiePath(t), entry);
    },
    public(entry: RouteEntry): Deny | undefined {
      // A public port needs no link, but the token still leaves the URL (and never reaches the sandbox).
      return { ...deny('link_accepted', PUBLIC_PORT_LINK, entry), headers: [['location', linkLocation(req.path)], ...LINK_HEADERS] };
    },
  };
}

/** True when `r` is for the sandbox port `namespace/name:port`: its claims, or what a refused token's payload names. */
function isFor(r: LinkClaims | LinkRejection, namespace: string, name: string, port: number): boolean {
  const c = isLinkClaims(r) ? r : r.claimed;
  return c !== undefined && c.namespace === namespace && c.name === name && c.port === port;
}

/**
 * Session cookies count only for the sandbox port they were made for. A browser sends a host-only cookie
 * to its own host alone, so a cookie naming another sandbox or port was planted by a sibling host (a
 * `Domain` cookie) or is stale: it is passed over, and with no cookie for this sandbox port the request
 * gets the check it would get without any (`fallback`). Of several cookies for it, the first that passes
 * every check opens it; when none does, the first one's refusal is the answer. When only refused tokens
 * name it, the refusal comes before the lookup, so it is the same whether that sandbox exists or not.
 *
 * A route by id names its sandbox only after the lookup, so there only verified cookies count (a refused
 * token's payload could name any sandbox). Its fallback check is made before the lookup and held; when it
 * refuses and no cookie is for the sandbox found, the answer is the one a missing id gets, so the answer
 * does not tell an existing id from a missing one.
 */
function cookieAccess(results: readonly (LinkClaims | LinkRejection)[], req: LinkRequest, nowMs: number, revoked: (id: string) => boolean, fallback: Access | undefined): Access {
  let heldForId: Deny | undefined;
  return {
    before(t: RouteTarget): Deny | undefined {
      if (t.namespace === undefined) {
        heldForId = fallback?.before(t);
        return undefined;
      }
      let refused: LinkRejection | undefined;
      for (const r of results) {
        if (!isFor(r, t.namespace, t.name!, t.port)) continue;
        if (isLinkClaims(r)) return undefined;
        refused ??= r;
      }
      return refused === undefined ? fallback?.before(t) : rejected(refused);
    },
    after(entry: RouteEntry, t: RouteTarget): Deny | undefined {
      const byId = t.namespace === undefined;
      let first: Deny | undefined;
      for (const r of results) {
        if (!isFor(r, entry.namespace, entry.name, t.port) || (byId && !isLinkClaims(r))) continue;
        const refused = isLinkClaims(r) ? (claimsRefuse(r, entry, t, req, nowMs, revoked) ?? crossOrigin(req)) : rejected(r);
        if (refused === undefined) return undefined;
        first ??= refused;
      }
      if (first !== undefined) return first;
      if (heldForId !== undefined) return NOT_FOUND;
      return fallback?.after(entry, t);
    },
    public(entry: RouteEntry, t: RouteTarget): Deny | undefined {
      return fallback?.public?.(entry, t);
    },
  };
}

/**
 * Sandbox hosts under one base domain are one site, so SameSite=Lax still sends the cookie on a request
 * another sandbox's page makes. A WebSocket handshake or a change (unsafe method) counts only from a page
 * of this host: browsers send `Origin` on both (Fetch standard), and this check runs before any
 * `--strip-origin-on-upgrade`.
 */
function crossOrigin(req: LinkRequest): Deny | undefined {
  return req.origin !== undefined && (req.upgrade || !SAFE_METHODS.has(req.method)) && !sameHost(req.origin, req.host) ? OTHER_ORIGIN : undefined;
}

const PUBLIC_PORT_LINK = 'The port is public: continue at the same address without the link token';

/**
 * The `303` a valid query token gets: back to the same URL without it, with the session cookie —
 * `__Host-sandgate_session` over TLS in the host form (`Path=/`), `sandgate_session` otherwise.
 */
function linkRedirect(req: LinkRequest, c: LinkClaims, nowMs: number, cookiePath: string, entry: RouteEntry): Deny {
  const maxAge = Math.max(0, c.exp - Math.floor(nowMs / 1000));
  const token = tokenParam(req.path);
  const name = req.secure && cookiePath === '/' ? LINK_COOKIE_HOST : LINK_COOKIE;
  const cookie = `${name}=${token ?? ''}; Path=${cookiePath}; Max-Age=${maxAge}; HttpOnly; SameSite=Lax` + (req.secure ? '; Secure' : '');
  return {
    ...deny('link_accepted', undefined, entry),
    headers: [['location', linkLocation(req.path)], ['set-cookie', cookie], ...LINK_HEADERS],
  };
}

/**
 * The `Location` of a link's redirect: the request's path and query without the token, as a path of this
 * same origin that no browser reads as another host. A browser drops ASCII tabs and newlines from a URL
 * and reads a backslash as `/` (WHATWG URL), so those, every other control, blank and non-ASCII character
 * are percent-encoded, and a run of leading slashes becomes one: `//evil.example/`, `/\evil.example` and
 * `/<tab>/evil.example` all stay on this host.
 */
export function linkLocation(path: string): string {
  let encoded = '';
  for (const ch of withoutTokenParam(path)) {
    const c = ch.charCodeAt(0);
    encoded += c <= 0x20 || c >= 0x7f || c === 0x5c ? encodeChar(ch) : ch;
  }
  let slashes = 0;
  while (slashes < encoded.length && encoded.charCodeAt(slashes) === 0x2f) slashes++;
  return '/' + encoded.slice(slashes);
}

function encodeChar(ch: string): string {
  const c = ch.charCodeAt(0);
  if (c < 0x80) return (c < 0x10 ? '%0' : '%') + c.toString(16).toUpperCase();
  try {
    return encodeURIComponent(ch);
  } catch {
    // A lone surrogate has no UTF-8 form: U+FFFD stands for it, as a URL parser writes it.
    return '%EF%BF%BD';
  }
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
