import { readFile } from 'node:fs/promises';
import { createLocalJWKSet, createRemoteJWKSet, decodeJwt, errors as joseErrors, jwtVerify, type JSONWebKeySet, type JWTVerifyGetKey } from 'jose';
import { parse as parseYaml } from 'yaml';
import { claimAt } from '../domain/access-policy.js';
import { SandgateError } from '../domain/errors.js';
import { isDnsLabel } from '../domain/labels.js';
import type { RouteRequest } from '../domain/route-key.js';
import type { PresentedJwt } from '../domain/workload-access.js';

/**
 * Workload JWTs (`Authorization: Bearer <JWT>`), verified against the issuers of `--jwt-issuers-file`:
 * Kubernetes projected service-account tokens, or any issuer with a JWKS.
 *
 * Verification is asynchronous (a signature check, and a JWKS fetch when a key is not cached), so it runs
 * before the decision, once per token (`pending`); the decision reads the result from a bounded map
 * (`presented`), and checks expiry there at each request. The only I/O is jose's remote JWKS: fetched at
 * start (off the request path, not awaited: an IdP down does not stop the gateway), refetched on an
 * unknown `kid` at most once per cooldown, each fetch bounded by a timeout. Keys already fetched stay in
 * use while the IdP is down.
 */

export interface JwtIssuer {
  readonly issuer: string;
  /** The keys: a remote JWKS (cached by jose) or a fixed set. */
  readonly keys: JWTVerifyGetKey & { reload?: () => Promise<void> };
  readonly audiences: readonly string[];
  /** Pinned per issuer: never `none`, never an HMAC algorithm (a public key is no secret). */
  readonly algorithms: readonly string[];
  /** A fixed team (namespace), or the claim (dotted path) naming it: `kubernetes.io.namespace`. */
  readonly team: { readonly fixed: string } | { readonly claim: string };
  readonly clockSkewSeconds: number;
}

const ASYMMETRIC = new Set(['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA']);
const ISSUER_KEYS = new Set(['issuer', 'jwksUrl', 'jwks', 'audiences', 'algorithms', 'team', 'teamClaim', 'clockSkewSeconds']);
const MAX_SKEW = 300;
/** A bounded JWKS fetch: a slow IdP holds a first request at most this long. */
const JWKS_TIMEOUT_MS = 3000;
const MAX_TOKEN = 16 * 1024;
/** How long a refusal for want of keys stands before a request tries the issuer again. */
const KEYS_RETRY_MS = 1000;

function fail(message: string): SandgateError {
  return new SandgateError('config_invalid', `--jwt-issuers-file: ${message}`);
}

function parseIssuer(raw: unknown, at: string, fetchJwks: boolean): JwtIssuer {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw fail(`${at} must be a map`);
  const o = raw as Record<string, unknown>;
  for (const k of Object.keys(o)) if (!ISSUER_KEYS.has(k)) throw fail(`${at}: unknown key ${JSON.stringify(k)}`);
  if (typeof o.issuer !== 'string' || o.issuer === '') throw fail(`${at}.issuer must be a non-empty string`);
  if ((o.jwksUrl === undefined) === (o.jwks === undefined)) throw fail(`${at} needs exactly one of jwksUrl, jwks`);
  let keys: JwtIssuer['keys'];
  if (o.jwksUrl !== undefined) {
    let url: URL;
    try {
      url = new URL(String(o.jwksUrl));
    } catch {
      throw fail(`${at}.jwksUrl is not a URL`);
    }
    if (url.protocol !== 'https:' && url.protocol !== 'http:') throw fail(`${at}.jwksUrl must be http(s)`);
    const remote = createRemoteJWKSet(url, { timeoutDuration: JWKS_TIMEOUT_MS, cooldownDuration: 30_000, cacheMaxAge: 600_000 });
    keys = remote;
    if (fetchJwks) remote.reload().catch(() => undefined);
  } else {
    const set = o.jwks as JSONWebKeySet;
    if (typeof set !== 'object' || set === null || !Array.isArray(set.keys)) throw fail(`${at}.jwks must be a JWKS ({keys: [...]})`);
    keys = createLocalJWKSet(set);
  }
  if (!Array.isArray(o.audiences) || o.audiences.length === 0 || !o.audiences.every((a) => typeof a === 'string' && a !== '')) {
    throw fail(`${at}.audiences must list at least one audience (tokens are audience-bound)`);
  }
  const algorithms = o.algorithms === undefined ? ['RS256'] : o.algorithms;
  if (!Array.isArray(algorithms) || algorithms.length === 0 || !algorithms.every((a) => typeof a === 'string' && ASYMMETRIC.has(a))) {
    throw fail(`${at}.algorithms must list asymmetric JWS algorithms (${[...ASYMMETRIC].join(', ')}); none and HMAC are never accepted`);
  }
  if ((o.team === undefined) === (o.teamClaim === undefined)) throw fail(`${at} needs exactly one of team, teamClaim`);
  if (o.team !== undefined && (typeof o.team !== 'string' || !isDnsLabel(o.team))) throw fail(`${at}.team must be a namespace (a DNS-1123 label)`);
  if (o.teamClaim !== undefined && (typeof o.teamClaim !== 'string' || o.teamClaim === '')) throw fail(`${at}.teamClaim must name a claim (a dotted path)`);
  const skew = o.clockSkewSeconds ?? 30;
  if (typeof skew !== 'number' || !Number.isInteger(skew) || skew < 0 || skew > MAX_SKEW) throw fail(`${at}.clockSkewSeconds must be an integer 0-${MAX_SKEW}`);
  return {
    issuer: o.issuer,
    keys,
    audiences: o.audiences as string[],
    algorithms: algorithms as string[],
    team: o.team !== undefined ? { fixed: o.team as string } : { claim: o.teamClaim as string },
    clockSkewSeconds: skew,
  };
}

/** Parses the issuers file's text (`issuers: [...]`); `fetchJwks` starts each remote JWKS's first fetch. */
export function parseJwtIssuers(text: string, fetchJwks = true): Map<string, JwtIssuer> {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new SandgateError('config_invalid', `--jwt-issuers-file does not parse: ${(err as Error).message}`, { cause: err });
  }
  const list = (doc as { issuers?: unknown } | null)?.issuers;
  if (!Array.isArray(list) || list.length === 0) throw fail('must have a non-empty top-level `issuers` list');
  const out = new Map<string, JwtIssuer>();
  list.forEach((raw, i) => {
    const iss = parseIssuer(raw, `issuers[${i}]`, fetchJwks);
    if (out.has(iss.issuer)) throw fail(`issuer ${iss.issuer} is listed twice`);
    out.set(iss.issuer, iss);
  });
  return out;
}

export async function readJwtIssuers(path: string): Promise<Map<string, JwtIssuer>> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new SandgateError('config_invalid', `--jwt-issuers-file ${path} cannot be read: ${(err as Error).message}`, { cause: err });
  }
  return parseJwtIssuers(text);
}

/** A verification kept for later requests with the same token: the result, and until when it holds. */
interface Verified {
  readonly result: PresentedJwt;
  /** Epoch ms past which a verified token is expired (Infinity for a refusal). */
  readonly expiresAt: number;
}

/** The bearer token of a request when it is shaped as a JWT (three base64url parts), else undefined. */
export function bearerJwt(authorization: string | undefined): string | undefined {
  if (authorization === undefined || authorization.length > MAX_TOKEN + 7) return undefined;
  if (!/^bearer /i.test(authorization)) return undefined;
  const t = authorization.slice(7).trim();
  return /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/.test(t) ? t : undefined;
}

export class WorkloadJwtAuth {
  private readonly verified = new Map<string, Verified>();

  constructor(
    readonly issuers: ReadonlyMap<string, JwtIssuer>,
    readonly now: () => number = Date.now,
    private readonly cacheSize = 10_000,
  ) {}

  /** The token of a request from a configured issuer (by its unverified `iss`); undefined otherwise. */
  private candidate(req: RouteRequest): { token: string; issuer: JwtIssuer } | undefined {
    const token = bearerJwt(req.headers.authorization);
    if (token === undefined) return undefined;
    let iss: unknown;
    try {
      iss = decodeJwt(token).iss;
    } catch {
      return undefined;
    }
    const issuer = typeof iss === 'string' ? this.issuers.get(iss) : undefined;
    return issuer === undefined ? undefined : { token, issuer };
  }

  /** A verification to finish before deciding, when the request carries a token not verified yet. */
  pending(req: RouteRequest): Promise<void> | undefined {
    const c = this.candidate(req);
    if (c === undefined) return undefined;
    const held = this.verified.get(c.token);
    // A refusal for want of keys (the IdP unreachable) lapses: a later request verifies again.
    if (held !== undefined && (held.result.ok || held.expiresAt > this.now())) return undefined;
    return this.verify(c.token, c.issuer).then((v) => {
      if (this.verified.size >= this.cacheSize) this.verified.clear();
      this.verified.set(c.token, v);
    });
  }

  /** The JWT a request presents, from verifications already made; undefined when it carries none from a configured issuer. */
  presented(req: RouteRequest): PresentedJwt | undefined {
    const c = this.candidate(req);
    if (c === undefined) return undefined;
    const v = this.verified.get(c.token);
    if (v === undefined) return { ok: false, issuer: c.issuer.issuer, reason: 'the token is not verified' };
    return v.result.ok && v.expiresAt <= this.now() ? { ok: false, issuer: c.issuer.issuer, reason: 'the token has expired' } : v.result;
  }

  private async verify(token: string, iss: JwtIssuer): Promise<Verified> {
    const refuse = (reason: string, expiresAt = Infinity): Verified => ({ result: { ok: false, issuer: iss.issuer, reason }, expiresAt });
    try {
      const { payload } = await jwtVerify(token, iss.keys, {
        issuer: iss.issuer,
        audience: [...iss.audiences],
        algorithms: [...iss.algorithms],
        clockTolerance: iss.clockSkewSeconds,
        currentDate: new Date(this.now()),
        requiredClaims: ['exp', 'sub'],
      });
      const team = 'fixed' in iss.team ? iss.team.fixed : claimAt(payload, iss.team.claim);
      if (typeof team !== 'string' || !isDnsLabel(team)) return refuse(`the token names no team (claim ${'claim' in iss.team ? iss.team.claim : ''})`);
      const aud = payload.aud === undefined ? [] : Array.isArray(payload.aud) ? payload.aud : [payload.aud];
      return {
        result: { ok: true, workload: { issuer: iss.issuer, team, subject: payload.sub!, audiences: aud, claims: payload } },
        expiresAt: (payload.exp! + iss.clockSkewSeconds) * 1000,
      };
    } catch (err) {
      // Keys that could not be fetched are not the token's fault: that refusal holds for a moment only.
      if (err instanceof joseErrors.JWKSTimeout || !(err instanceof joseErrors.JOSEError)) return refuse('the issuer\'s keys cannot be fetched', this.now() + KEYS_RETRY_MS);
      return refuse(reasonOf(err));
    }
  }
}

function reasonOf(err: unknown): string {
  if (err instanceof joseErrors.JWTExpired) return 'the token has expired';
  if (err instanceof joseErrors.JWTClaimValidationFailed) return `claim ${err.claim} is not acceptable (${err.reason})`;
  if (err instanceof joseErrors.JWKSNoMatchingKey) return 'no key of the issuer matches the token (unknown kid)';
  if (err instanceof joseErrors.JOSEAlgNotAllowed) return 'the token\'s algorithm is not allowed for its issuer';
  if (err instanceof joseErrors.JWSSignatureVerificationFailed) return 'the signature does not verify';
  return 'the token is malformed';
}
