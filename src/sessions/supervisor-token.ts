import { errors as joseErrors, jwtVerify, SignJWT, type JWTVerifyGetKey } from 'jose';
import { parse as parseYaml } from 'yaml';
import { isDnsLabel } from '../domain/labels.js';
import { SandgateError } from '../domain/errors.js';
import { sandboxKey } from '../domain/sandbox.js';

/**
 * Supervisor tokens: sandbox-bound JWTs (RFC 7519) signed with HS256, `sub` = `<namespace>/<name>`, an
 * audience, an expiry and a key id. Several keys can be active at once (rotation): the first signs, all
 * verify. Only HS256 is accepted — `alg: none` and every other algorithm are refused by jose's
 * `algorithms` allow-list.
 */

export interface SupervisorKey {
  readonly kid: string;
  readonly secret: Uint8Array;
}

export interface SupervisorKeys {
  /** The first key signs; every key verifies. */
  readonly keys: readonly SupervisorKey[];
  readonly audience: string;
}

/** HS256 keys shorter than the hash output weaken it (RFC 7518 §3.2 requires ≥ 256 bits). */
const MIN_SECRET_BYTES = 32;

function key(kid: string, secret: string, where: string): SupervisorKey {
  const bytes = new TextEncoder().encode(secret);
  if (bytes.length < MIN_SECRET_BYTES) throw new SandgateError('config_invalid', `${where}: supervisor secret ${kid} must be at least ${MIN_SECRET_BYTES} bytes`);
  if (!/^[A-Za-z0-9._-]{1,64}$/.test(kid)) throw new SandgateError('config_invalid', `${where}: key id ${JSON.stringify(kid)} must be 1-64 of [A-Za-z0-9._-]`);
  return { kid, secret: bytes };
}

/**
 * Parses supervisor keys: a plain secret (key id `default`), or YAML/JSON `keys: [{kid, secret}, …]`
 * (the first signs; list the previous key after it while supervisors move to the new one).
 */
export function parseSupervisorKeys(text: string, where: string): SupervisorKey[] {
  const trimmed = text.trim();
  if (trimmed.length === 0) throw new SandgateError('config_invalid', `${where} is empty`);
  if (!trimmed.startsWith('{') && !/^keys\s*:/m.test(trimmed)) return [key('default', trimmed, where)];
  let doc: unknown;
  try {
    doc = parseYaml(trimmed);
  } catch (err) {
    // The parser's first line only, and no cause: its message goes on with an excerpt of the file, secrets included.
    throw new SandgateError('config_invalid', `${where} does not parse: ${(err as Error).message.split('\n', 1)[0]}`);
  }
  const list = (doc as { keys?: unknown }).keys;
  if (!Array.isArray(list) || list.length === 0) throw new SandgateError('config_invalid', `${where} must hold a non-empty "keys" list`);
  const keys = list.map((k: unknown, i) => {
    const o = k as { kid?: unknown; secret?: unknown };
    if (typeof o?.kid !== 'string' || typeof o.secret !== 'string') throw new SandgateError('config_invalid', `${where}: keys[${i}] needs string kid and secret`);
    return key(o.kid, o.secret, where);
  });
  if (new Set(keys.map((k) => k.kid)).size !== keys.length) throw new SandgateError('config_invalid', `${where}: a key id is listed twice`);
  return keys;
}

/** Mints a token for one sandbox. `now` is epoch ms. */
export async function mintSupervisorToken(k: SupervisorKeys, namespace: string, name: string, ttlSeconds: number, now = Date.now()): Promise<string> {
  if (!isDnsLabel(namespace) || !isDnsLabel(name)) throw new SandgateError('invalid_request', 'namespace and name must be DNS-1123 labels');
  const signer = k.keys[0];
  if (signer === undefined) throw new SandgateError('config_invalid', 'no supervisor key configured');
  const iat = Math.floor(now / 1000);
  return new SignJWT({})
    .setProtectedHeader({ alg: 'HS256', kid: signer.kid, typ: 'JWT' })
    .setSubject(sandboxKey(namespace, name))
    .setAudience(k.audience)
    .setIssuedAt(iat)
    .setExpirationTime(iat + ttlSeconds)
    .sign(signer.secret);
}

export interface TokenSubject {
  readonly namespace: string;
  readonly name: string;
  readonly kid: string;
  /** Epoch ms the token expires. */
  readonly expiresAt: number;
}

export interface TokenRejection {
  readonly code: 'token_missing' | 'token_expired' | 'token_invalid';
  readonly message: string;
}

/** Verifies a bearer token. Never throws; a rejection says why in terms safe to show the supervisor. */
export async function verifySupervisorToken(k: SupervisorKeys, token: string | undefined, now = Date.now()): Promise<TokenSubject | TokenRejection> {
  if (token === undefined || token.length === 0) return { code: 'token_missing', message: 'an Authorization: Bearer token is required' };
  let kid = '';
  const getKey: JWTVerifyGetKey = (header) => {
    const found = k.keys.find((x) => x.kid === header.kid);
    if (found === undefined) throw new joseErrors.JWKSNoMatchingKey();
    kid = found.kid;
    return found.secret;
  };
  try {
    const { payload } = await jwtVerify(token, getKey, {
      algorithms: ['HS256'],
      audience: k.audience,
      currentDate: new Date(now),
      requiredClaims: ['exp', 'sub', 'aud'],
    });
    const sub = payload.sub ?? '';
    const slash = sub.indexOf('/');
    const namespace = sub.slice(0, slash);
    const name = sub.slice(slash + 1);
    if (slash < 0 || !isDnsLabel(namespace) || !isDnsLabel(name)) return { code: 'token_invalid', message: 'token sub must be <namespace>/<name>' };
    return { namespace, name, kid, expiresAt: (payload.exp ?? 0) * 1000 };
  } catch (err) {
    if (err instanceof joseErrors.JWTExpired) return { code: 'token_expired', message: 'token has expired' };
    if (err instanceof joseErrors.JWTClaimValidationFailed) return { code: 'token_invalid', message: `token claim ${err.claim} is invalid` };
    if (err instanceof joseErrors.JOSEAlgNotAllowed) return { code: 'token_invalid', message: 'token algorithm is not allowed (HS256 only)' };
    if (err instanceof joseErrors.JWKSNoMatchingKey) return { code: 'token_invalid', message: 'token key id is unknown' };
    return { code: 'token_invalid', message: 'token is malformed or its signature is invalid' };
  }
}

export function isTokenRejection(v: TokenSubject | TokenRejection): v is TokenRejection {
  return 'code' in v;
}
