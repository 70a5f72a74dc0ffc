import { decodeJwt, errors as joseErrors, jwtVerify, SignJWT, type JWTPayload, type JWTVerifyGetKey } from 'jose';
import { SandgateError } from '../domain/errors.js';
import { isDnsLabel } from '../domain/labels.js';
import { hasTokenParam, LINK_AUDIENCE, tokenParam, type LinkClaims, type LinkRejection, type LinkTarget, type PresentedLink } from '../domain/link.js';
import { linkCookieValues, mayHoldLinkCookie } from '../domain/link-cookie.js';
import type { RouteRequest } from '../domain/route-key.js';
import { newLinkId } from './link-ids.js';
import type { LinkKeySet } from './link-keys.js';

/**
 * Link tokens: compact JWS (RFC 7515) JWTs signed with Ed25519 (`alg: EdDSA`, RFC 8037), `kid` in the
 * header. The claim set is documented in docs/links.md; anyone holding a private key of the set can mint
 * one (a control plane without sandgate). jose verifies: the algorithm allow-list refuses `none`, HS256
 * and every other algorithm, and an unknown `kid` finds no key.
 */

/** What a link opens, as a caller asks for it. */
export interface LinkRequestClaims {
  readonly namespace: string;
  readonly name: string;
  readonly uid: string;
  readonly port: number;
  readonly path?: string | undefined;
  readonly methods?: readonly string[] | undefined;
  readonly websocket?: boolean | undefined;
  readonly team: string;
  readonly ttlSeconds: number;
}

export interface MintedLink {
  readonly token: string;
  readonly id: string;
  /** Epoch seconds. */
  readonly exp: number;
}

/** Longest token looked at: a link is a few hundred bytes; anything far longer is not one. */
const MAX_TOKEN_LENGTH = 4096;
/** A compact JWS (RFC 7515 §7.1): three base64url parts. A session cookie of any other shape is not a link. */
const COMPACT_JWS = /^[\w-]+\.[\w-]+\.[\w-]*$/;
/**
 * Session cookies verified for one request, at most. Browsers send every cookie whose domain and path
 * match, so a sibling host can add cookies of sandgate's name before the real one (docs/links.md):
 * enough room for those, and a bound on the signature checks one request can ask for.
 */
const MAX_LINK_COOKIES = 16;
const METHOD = /^[A-Z]{1,16}$/;
/** Clock skew allowed between the minting machine and a gateway. */
const SKEW_SECONDS = 60;

function invalid(message: string, claimed?: LinkTarget): LinkRejection {
  return { code: 'link_invalid', message, claimed };
}

/**
 * The sandbox port a payload names, read without trusting it: it only says which request a refusal is
 * about (domain/link.ts), so a refused cookie planted for another sandbox changes nothing here.
 */
function claimedTarget(p: JWTPayload | undefined): LinkTarget | undefined {
  if (p === undefined) return undefined;
  const { ns, name, port } = p as Record<string, unknown>;
  return typeof ns === 'string' && typeof name === 'string' && typeof port === 'number' ? { namespace: ns, name, port } : undefined;
}

/** The payload of a token whose signature was not (or could not be) checked; undefined when it has none. */
function unverifiedPayload(token: string): JWTPayload | undefined {
  try {
    return decodeJwt(token);
  } catch {
    return undefined;
  }
}

/** Checks what a caller asks a link to open; throws `invalid_request` for anything a link cannot say. */
export function checkLinkRequest(c: LinkRequestClaims, maxTtlSeconds: number): void {
  const bad = (m: string): never => {
    throw new SandgateError('invalid_request', m);
  };
  if (!isDnsLabel(c.namespace) || !isDnsLabel(c.name)) bad('namespace and name must be DNS-1123 labels');
  if (!Number.isInteger(c.port) || c.port < 1 || c.port > 65535) bad('port must be an integer from 1 to 65535');
  if (c.path !== undefined && (!c.path.startsWith('/') || c.path.length > 1024 || /[\s?#\\]|%2f|%5c/i.test(c.path))) bad('path must be a path prefix starting with / (no query, fragment, blanks or encoded slashes)');
  if (c.methods !== undefined && (c.methods.length === 0 || !c.methods.every((m) => METHOD.test(m)))) bad('methods must be a non-empty list of upper-case methods');
  if (!Number.isInteger(c.ttlSeconds) || c.ttlSeconds < 1) bad('ttlSeconds must be a positive integer');
  if (c.ttlSeconds > maxTtlSeconds) bad(`ttlSeconds must be at most ${maxTtlSeconds} (--link-max-ttl)`);
  if (c.uid === '' || c.uid.length > 128) bad('the sandbox has no uid');
}

/** Mints a link token with the set's signing key. `now` is epoch ms. */
export async function mintLinkToken(keys: LinkKeySet, c: LinkRequestClaims, maxTtlSeconds: number, now = Date.now()): Promise<MintedLink> {
  checkLinkRequest(c, maxTtlSeconds);
  const signer = keys.signer;
  if (signer === undefined) throw new SandgateError('config_invalid', 'the link keys file holds no private key: this gateway can verify links but not mint them');
  const iat = Math.floor(now / 1000);
  const exp = iat + c.ttlSeconds;
  const id = newLinkId(c.namespace, exp);
  const claims: JWTPayload = { ns: c.namespace, name: c.name, uid: c.uid, port: c.port, path: c.path ?? '/', team: c.team };
  if (c.methods !== undefined) claims.methods = [...c.methods];
  if (c.websocket === true) claims.ws = true;
  const token = await new SignJWT(claims)
    .setProtectedHeader({ alg: 'EdDSA', kid: signer.kid, typ: 'JWT' })
    .setAudience(LINK_AUDIENCE)
    .setJti(id)
    .setIssuedAt(iat)
    .setExpirationTime(exp)
    .sign(signer.privateKey);
  return { token, id, exp };
}

/** The claims of a verified payload, or why they do not make a link. */
function claimsOf(p: JWTPayload, kid: string, nowS: number, maxTtlSeconds: number): LinkClaims | LinkRejection {
  const r = claimsOrWhyNot(p, kid, nowS, maxTtlSeconds);
  return 'uid' in r ? r : { ...r, claimed: claimedTarget(p) };
}

function claimsOrWhyNot(p: JWTPayload, kid: string, nowS: number, maxTtlSeconds: number): LinkClaims | LinkRejection {
  const { ns, name, uid, port, path, methods, ws, team, jti, exp } = p as Record<string, unknown>;
  if (typeof ns !== 'string' || typeof name !== 'string' || !isDnsLabel(ns) || !isDnsLabel(name)) return invalid('link claims ns and name must be DNS-1123 labels');
  if (typeof uid !== 'string' || uid === '') return invalid('link claim uid is missing');
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) return invalid('link claim port must be 1-65535');
  if (path !== undefined && (typeof path !== 'string' || !path.startsWith('/'))) return invalid('link claim path must start with /');
  if (methods !== undefined && (!Array.isArray(methods) || !methods.every((m) => typeof m === 'string' && METHOD.test(m)))) return invalid('link claim methods must be a list of upper-case methods');
  if (ws !== undefined && typeof ws !== 'boolean') return invalid('link claim ws must be a boolean');
  if (typeof jti !== 'string' || jti === '' || jti.length > 128) return invalid('link claim jti is missing');
  if (typeof exp !== 'number') return invalid('link claim exp is missing');
  if (exp > nowS + maxTtlSeconds + SKEW_SECONDS) return invalid('link lives longer than this gateway allows (--link-max-ttl)');
  return {
    namespace: ns,
    name,
    uid,
    port,
    path: path ?? '/',
    methods: methods as string[] | undefined,
    websocket: ws === true,
    team: typeof team === 'string' ? team : '',
    id: jti,
    exp,
    kid,
  };
}

/** Verifies a link token. Never throws; a rejection says why in terms safe to show the person holding it. */
export async function verifyLinkToken(keys: LinkKeySet, token: string, maxTtlSeconds: number, now = Date.now()): Promise<LinkClaims | LinkRejection> {
  if (token.length === 0 || token.length > MAX_TOKEN_LENGTH) return invalid('the link token is malformed');
  let kid = '';
  const getKey: JWTVerifyGetKey = (header) => {
    const found = header.kid === undefined ? undefined : keys.verifiers.get(header.kid);
    if (found === undefined) throw new joseErrors.JWKSNoMatchingKey();
    kid = header.kid!;
    return found;
  };
  try {
    const { payload } = await jwtVerify(token, getKey, {
      algorithms: ['EdDSA'],
      audience: LINK_AUDIENCE,
      currentDate: new Date(now),
      requiredClaims: ['exp', 'jti'],
    });
    return claimsOf(payload, kid, Math.floor(now / 1000), maxTtlSeconds);
  } catch (err) {
    const claimed = claimedTarget(unverifiedPayload(token));
    if (err instanceof joseErrors.JWTExpired) return { code: 'link_expired', message: 'The link has expired', claimed };
    if (err instanceof joseErrors.JOSEAlgNotAllowed) return invalid('the link is not signed with EdDSA', claimed);
    if (err instanceof joseErrors.JWKSNoMatchingKey) return invalid('the link was signed by a key this gateway does not hold (unknown or removed)', claimed);
    if (err instanceof joseErrors.JWTClaimValidationFailed) return invalid(`link claim ${err.claim} is invalid`, claimed);
    return invalid('the link token is malformed or its signature is invalid', claimed);
  }
}

/** The revocation list links are checked against (the API key store's: file or Redis, mirrored in memory). */
export interface LinkRevocations {
  isLinkRevoked(id: string): boolean;
}

/**
 * The doors' link check: finds a token (query) or session cookies on a request — two string searches when
 * there are none — and verifies each token once: the result is kept in a bounded map keyed by the token, so
 * later requests carrying the cookie cost a map lookup. The map is emptied when the key set changes (a
 * removed key's tokens then fail), and revocation and expiry are read at each decision, not cached.
 */
export class LinkAuth {
  private readonly verified = new Map<string, LinkClaims | LinkRejection>();
  /** For the decision's check: bound once, handed on without a closure per request. */
  readonly isRevoked = (id: string): boolean => this.revocations.isLinkRevoked(id);

  constructor(
    private readonly keys: () => LinkKeySet,
    readonly revocations: LinkRevocations,
    readonly maxTtlSeconds: number,
    readonly now: () => number = Date.now,
    private readonly cacheSize = 10_000,
  ) {}

  /** Forgets every verification (the key set changed). */
  keysChanged(): void {
    this.verified.clear();
  }

  /**
   * The link tokens a request carries, query first; undefined when none. Of the `Cookie` header only
   * sandgate's own cookies count, read by exact name (domain/link-cookie.ts), `__Host-` ones first; a
   * value that is no compact JWS is not a link and is passed over, and at most MAX_LINK_COOKIES are kept.
   */
  private candidates(req: RouteRequest): { via: 'query' | 'cookie'; tokens: string[] } | undefined {
    if (hasTokenParam(req.path)) {
      const t = tokenParam(req.path!);
      if (t !== undefined) return { via: 'query', tokens: [t] };
    }
    const cookie = req.headers.cookie;
    if (!mayHoldLinkCookie(cookie)) return undefined;
    const tokens: string[] = [];
    for (const v of linkCookieValues(cookie)) {
      if (v.length > MAX_TOKEN_LENGTH || !COMPACT_JWS.test(v) || tokens.includes(v)) continue;
      tokens.push(v);
      if (tokens.length === MAX_LINK_COOKIES) break;
    }
    return tokens.length === 0 ? undefined : { via: 'cookie', tokens };
  }

  /** A verification to finish before deciding, when the request carries a token not verified yet. */
  pending(req: RouteRequest): Promise<void> | undefined {
    const c = this.candidates(req);
    if (c === undefined) return undefined;
    const todo = c.tokens.filter((t) => !this.verified.has(t));
    if (todo.length === 0) return undefined;
    const keys = this.keys();
    return Promise.all(
      todo.map(async (t) => {
        const r = await verifyLinkToken(keys, t, this.maxTtlSeconds, this.now());
        if (this.verified.size >= this.cacheSize) this.verified.clear();
        this.verified.set(t, r);
      }),
    ).then(() => undefined);
  }

  /** The links a request presents, from verifications already made; undefined when it carries none. */
  presented(req: RouteRequest): PresentedLink | undefined {
    const c = this.candidates(req);
    if (c === undefined) return undefined;
    return { via: c.via, results: c.tokens.map((t) => this.verified.get(t) ?? NOT_VERIFIED) };
  }
}

const NOT_VERIFIED = invalid('the link token is not verified');
