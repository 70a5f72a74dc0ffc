import { createSecretKey } from 'node:crypto';
import { SignJWT } from 'jose';
import { beforeEach, describe, expect, it } from 'vitest';
import { parseLinkKeys, type LinkKeySet } from '../../src/auth/link-keys.js';
import { LinkAuth, mintLinkToken, verifyLinkToken, type LinkRequestClaims } from '../../src/auth/link-tokens.js';
import { linkUrl } from '../../src/auth/link-service.js';
import { decide, type Decision, type Deny } from '../../src/domain/decide.js';
import { accessFor, ANONYMOUS, linkUnderPolicy, NO_KEYS_REQUIRED } from '../../src/domain/access.js';
import { DEFAULT_POLICIES } from '../../src/domain/access-policy.js';
import { LINK_AUDIENCE, linkAccess, linkCookiePath, linkLocation, withoutTokenParam } from '../../src/domain/link.js';
import type { RouteOptions, RouteRequest } from '../../src/domain/route-key.js';
import { SandboxView } from '../../src/view/sandbox-view.js';
import { ed25519Pem, linkKeySet } from '../helpers/link-keys.js';
import { snapshot } from '../helpers/snapshots.js';

const NOW = Date.UTC(2030, 0, 1);
const DAY = 86_400;
const ROUTE: RouteOptions = { order: ['host', 'path'], baseDomain: 'sbx.test', defaultNamespace: 'default', defaultPort: 8080, pathPrefix: 'p' };
const A = ed25519Pem();
const B = ed25519Pem();
const KEYS = linkKeySet([{ kid: 'k1', privateKey: A.privateKey }, { kid: 'k0', publicKey: B.publicKey }]);
const claims = (over: Partial<LinkRequestClaims> = {}): LinkRequestClaims => ({ namespace: 'team-a', name: 'web', uid: 'uid-1', port: 3000, team: 'team-a', ttlSeconds: 900, ...over });
const headersOf = (d: Decision) => new Map((d as Deny).headers);
const mint = async (over: Partial<LinkRequestClaims> = {}, keys: LinkKeySet = KEYS): Promise<string> => (await mintLinkToken(keys, claims(over), DAY, NOW)).token;

describe('link keys file', () => {
  it.each([
    ['no keys list', 'x: 1', /non-empty "keys"/],
    ['empty list', 'keys: []', /non-empty "keys"/],
    ['bad kid', `keys: [{kid: "a b", publicKey: "x"}]`, /kid of 1-64/],
    ['neither key', `keys: [{kid: a}]`, /privateKey or a publicKey/],
    ['not PEM', `keys: [{kid: a, publicKey: "hello"}]`, /not a PEM key/],
    ['duplicate kid', `keys: [{kid: a, publicKey: ${JSON.stringify(A.publicKey)}}, {kid: a, publicKey: ${JSON.stringify(B.publicKey)}}]`, /listed twice/],
    ['mismatched pair', `keys: [{kid: a, privateKey: ${JSON.stringify(A.privateKey)}, publicKey: ${JSON.stringify(B.publicKey)}}]`, /not its privateKey's/],
  ])('refuses %s', (_name, text, message) => {
    expect(() => parseLinkKeys(text, 'f.yaml')).toThrow(message);
  });

  it('refuses a key that is not Ed25519', async () => {
    const { generateKeyPairSync } = await import('node:crypto');
    const rsa = generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey.export({ type: 'spki', format: 'pem' }).toString();
    expect(() => linkKeySet([{ kid: 'ec', publicKey: rsa }])).toThrow(/must be Ed25519/);
  });

  it('verifies with public keys alone, and cannot mint without a private key', async () => {
    const verifyOnly = linkKeySet([{ kid: 'k1', publicKey: A.publicKey }]);
    expect(await verifyLinkToken(verifyOnly, await mint(), DAY, NOW)).toMatchObject({ namespace: 'team-a', name: 'web', uid: 'uid-1', port: 3000, path: '/', kid: 'k1' });
    await expect(mintLinkToken(verifyOnly, claims(), DAY, NOW)).rejects.toMatchObject({ code: 'config_invalid' });
  });
});

describe('link token verification', () => {
  const hs256 = (header: Record<string, unknown>) =>
    new SignJWT({ ns: 'team-a', name: 'web', uid: 'uid-1', port: 3000 })
      .setProtectedHeader({ alg: 'HS256', ...header })
      .setAudience(LINK_AUDIENCE)
      .setJti('x')
      .setExpirationTime(NOW / 1000 + 60)
      .sign(createSecretKey(Buffer.alloc(32, 1)));
  const unsigned = (payload: object) => `${Buffer.from(JSON.stringify({ alg: 'none', kid: 'k1' })).toString('base64url')}.${Buffer.from(JSON.stringify(payload)).toString('base64url')}.`;

  it.each<[string, () => Promise<string>, string, RegExp]>([
    ['alg HS256', () => hs256({ kid: 'k1' }), 'link_invalid', /not signed with EdDSA/],
    ['alg none', async () => unsigned({ ns: 'team-a', name: 'web', uid: 'uid-1', port: 3000, aud: LINK_AUDIENCE, jti: 'x', exp: NOW / 1000 + 60 }), 'link_invalid', /EdDSA|malformed/],
    ['an unknown kid', () => mint({}, linkKeySet([{ kid: 'other', privateKey: B.privateKey }])), 'link_invalid', /does not hold/],
    ['expired', () => mintLinkToken(KEYS, claims({ ttlSeconds: 60 }), DAY, NOW - 120_000).then((m) => m.token), 'link_expired', /expired/],
    ['a lifetime past --link-max-ttl', () => mintLinkToken(KEYS, claims({ ttlSeconds: 7 * DAY }), 7 * DAY, NOW).then((m) => m.token), 'link_invalid', /link-max-ttl/],
    ['a forged signature', async () => (await mint()).slice(0, -4) + 'AAAA', 'link_invalid', /signature/],
    ['a garbage token', async () => 'not.a.jwt', 'link_invalid', /malformed/],
    ['an oversize token', async () => 'a'.repeat(5000), 'link_invalid', /malformed/],
  ])('refuses %s', async (_name, make, code, message) => {
    const r = await verifyLinkToken(KEYS, await make(), DAY, NOW);
    expect(r).toMatchObject({ code });
    expect((r as { message: string }).message).toMatch(message);
  });

  it('refuses a JWT for another audience (a supervisor token signed by the same key)', async () => {
    const { createPrivateKey } = await import('node:crypto');
    const other = await new SignJWT({ ns: 'team-a', name: 'web', uid: 'uid-1', port: 3000 })
      .setProtectedHeader({ alg: 'EdDSA', kid: 'k1' })
      .setAudience('sandgate-supervisor')
      .setJti('x')
      .setExpirationTime(NOW / 1000 + 60)
      .sign(createPrivateKey(A.privateKey));
    expect(await verifyLinkToken(KEYS, other, DAY, NOW)).toMatchObject({ code: 'link_invalid', message: expect.stringMatching(/aud/) });
  });

  it.each([
    ['port 0', { port: 0 }],
    ['a path without /', { path: 'app' }],
    ['an encoded slash in the path', { path: '/a%2fb' }],
    ['lower-case methods', { methods: ['get'] }],
    ['a ttl past the maximum', { ttlSeconds: DAY + 1 }],
    ['a namespace that is no label', { namespace: 'Team_A' }],
  ])('mints no link with %s', async (_name, over) => {
    await expect(mintLinkToken(KEYS, claims(over as Partial<LinkRequestClaims>), DAY, NOW)).rejects.toMatchObject({ code: 'invalid_request' });
  });
});

describe('link checks in the decision', () => {
  let view: SandboxView;
  let revoked: Set<string>;
  let auth: LinkAuth;
  let keys: LinkKeySet;

  beforeEach(() => {
    view = new SandboxView({ now: () => NOW });
    view.registerDriver('t');
    view.replace('t', [snapshot({ sessionModel: 'none' }), snapshot({ namespace: 'team-b', name: 'other', uid: 'uid-b', sessionModel: 'none', accessToken: 'secret' })]);
    revoked = new Set();
    keys = KEYS;
    auth = new LinkAuth(() => keys, { isLinkRevoked: (id) => revoked.has(id) }, DAY, () => NOW);
  });

  /**
   * Decides a request as a door does: verify what it carries, then decide with the link's access check,
   * the traffic token check standing behind it (no API keys here).
   */
  async function decideWith(req: { host: string; path: string; method?: string; headers?: Record<string, string>; secure?: boolean }): Promise<Decision> {
    const r: RouteRequest = { headers: { host: req.host, ...req.headers }, host: req.host, path: req.path, method: req.method ?? 'GET', secure: req.secure };
    await auth.pending(r);
    const link = auth.presented(r);
    const credentials = accessFor(ANONYMOUS, NO_KEYS_REQUIRED, r.headers['e2b-traffic-access-token']);
    // Composed as the Decider composes it: a link's check under the port's policy.
    const access = link === undefined ? credentials : linkUnderPolicy(linkAccess(link, { method: r.method!, path: r.path!, upgrade: r.headers.upgrade !== undefined, secure: r.secure === true }, NOW, auth.isRevoked, linkCookiePath('p'), credentials), credentials, DEFAULT_POLICIES);
    return decide(view, ROUTE, r, access);
  }
  const HOST = '3000-web.team-a.sbx.test';

  it('answers a valid query token with a 303 to the same URL without it, setting the session cookie', async () => {
    const token = await mint({ ttlSeconds: 600 });
    const d = await decideWith({ host: HOST, path: `/app/x?a=1&sandgate_token=${token}&b=2` });
    expect(d).toMatchObject({ allow: false, code: 'link_accepted', status: 303 });
    const h = headersOf(d);
    expect(h.get('location')).toBe('/app/x?a=1&b=2');
    expect(h.get('set-cookie')).toBe(`sandgate_session=${token}; Path=/; Max-Age=600; HttpOnly; SameSite=Lax`);
    expect(h.get('referrer-policy')).toBe('no-referrer');
    expect(h.get('cache-control')).toBe('no-store');
    const secure = await decideWith({ host: HOST, path: `/?sandgate_token=${token}`, secure: true });
    expect(headersOf(secure).get('set-cookie')).toBe(`__Host-sandgate_session=${token}; Path=/; Max-Age=600; HttpOnly; SameSite=Lax; Secure`);
  });

  it('scopes the cookie to the sandbox port in path mode', async () => {
    const token = await mint();
    const d = await decideWith({ host: 'sbx.test', path: `/p/team-a/web/3000/?sandgate_token=${token}` });
    const h = headersOf(d);
    expect(h.get('set-cookie')).toMatch(/^sandgate_session=[^;]+; Path=\/p\/team-a\/web\/3000;/);
    expect(h.get('location')).toBe('/p/team-a/web/3000/');
    // Over TLS the path form keeps its path cookie: a __Host- cookie must have Path=/.
    const secure = headersOf(await decideWith({ host: 'sbx.test', path: `/p/team-a/web/3000/?sandgate_token=${token}`, secure: true }));
    expect(secure.get('set-cookie')).toMatch(/^sandgate_session=[^;]+; Path=\/p\/team-a\/web\/3000;.*; Secure$/);
  });

  it('allows the cookie, among the sandbox\'s own cookies', async () => {
    const token = await mint();
    const d = await decideWith({ host: HOST, path: '/app', headers: { cookie: `theme=dark; sandgate_session=${token}; sid=1` } });
    expect(d).toMatchObject({ allow: true, upstream: '10.0.0.1:3000' });
  });

  it.each<[string, { host: string }, RegExp]>([
    ['the wrong port', { host: '3001-web.team-a.sbx.test' }, /another port/],
    ['another sandbox', { host: '3000-other.team-b.sbx.test' }, /another sandbox/],
  ])('refuses a query token for %s', async (_name, req, message) => {
    const d = await decideWith({ host: req.host, path: `/?sandgate_token=${await mint()}` });
    expect(d).toMatchObject({ allow: false, code: 'link_invalid', message: expect.stringMatching(message) });
  });

  it('passes over a cookie for another port or sandbox: the request is answered as if it had none', async () => {
    const cookie = `sandgate_session=${await mint()}`;
    for (const host of ['3001-web.team-a.sbx.test', '3000-other.team-b.sbx.test', '3000-nothing.team-b.sbx.test', '3000-web.team-b.sbx.test']) {
      for (const headers of [{}, { 'e2b-traffic-access-token': 'secret' }] as Record<string, string>[]) {
        expect(await decideWith({ host, path: '/', headers: { ...headers, cookie } }), host).toEqual(await decideWith({ host, path: '/', headers }));
      }
    }
  });

  it.each<[string, Partial<LinkRequestClaims>, { host?: string; path?: string; method?: string; headers?: Record<string, string> }, string, RegExp]>([
    ['a method the link does not allow', { methods: ['GET', 'HEAD'] }, { method: 'POST' }, 'link_invalid', /method/],
    ['a WebSocket upgrade without --websocket', {}, { headers: { upgrade: 'websocket' } }, 'link_invalid', /WebSocket/],
    ['a path outside the prefix', { path: '/app' }, { path: '/apple' }, 'link_invalid', /path/],
    ['a dot segment out of the prefix', { path: '/app' }, { path: '/app/../admin' }, 'link_invalid', /path/],
    ['an encoded dot segment', { path: '/app' }, { path: '/app/%2E%2e/admin' }, 'link_invalid', /path/],
    ['an encoded slash', { path: '/app' }, { path: '/app%2F..%2Fadmin' }, 'link_invalid', /path/],
  ])('refuses %s, by token and by cookie alike', async (_name, over, req, code, message) => {
    const token = await mint(over);
    for (const via of ['query', 'cookie']) {
      const path = req.path ?? '/';
      const d = await decideWith({
        host: req.host ?? HOST,
        path: via === 'query' ? `${path}${path.includes('?') ? '&' : '?'}sandgate_token=${token}` : path,
        method: req.method,
        headers: { ...req.headers, ...(via === 'cookie' ? { cookie: `sandgate_session=${token}` } : {}) },
      });
      expect(d, via).toMatchObject({ allow: false, code });
      expect((d as { message: string }).message, via).toMatch(message);
    }
  });

  it('allows the paths under the prefix, and every path with the prefix /', async () => {
    const app = await mint({ path: '/app' });
    for (const path of ['/app', '/app/', '/app/x/y?z=1']) expect(await decideWith({ host: HOST, path, headers: { cookie: `sandgate_session=${app}` } }), path).toMatchObject({ allow: true });
    const all = await mint();
    expect(await decideWith({ host: HOST, path: '/anything/../x', headers: { cookie: `sandgate_session=${all}` } })).toMatchObject({ allow: true });
  });

  describe('several session cookies (a sibling host planted some)', () => {
    const forged = (t: string) => t.slice(0, -4) + 'AAAA';

    it('uses the cookie for this sandbox port, wherever it stands', async () => {
      const victim = await mint();
      const attackers = await mint({ namespace: 'team-b', name: 'other', uid: 'uid-b' });
      const otherPort = await mint({ port: 3001 });
      for (const before of [
        `sandgate_session=${attackers}`,
        `sandgate_session=${otherPort}; sandgate_session=${attackers}`,
        'sandgate_session=junk; sandgate_session=junk2; sandgate_session=a.b; sandgate_session=',
        Array.from({ length: 15 }, (_, i) => `sandgate_session=${forged(attackers)}${i}`).join('; '),
        `sandgate_session=${forged(victim)}; sandgate_session=${forged(victim)}x`,
      ]) {
        const d = await decideWith({ host: HOST, path: '/', headers: { cookie: `${before}; sandgate_session=${victim}` } });
        expect(d, before).toMatchObject({ allow: true, upstream: '10.0.0.1:3000' });
      }
    });

    it('reads __Host-sandgate_session first, and no cookie whose name merely resembles sandgate\'s', async () => {
      const victim = await mint();
      expect(await decideWith({ host: HOST, path: '/', headers: { cookie: `sandgate_session=${forged(victim)}; __Host-sandgate_session=${victim}` } })).toMatchObject({ allow: true });
      for (const cookie of [`xsandgate_session=${victim}`, `Sandgate_session=${victim}`, `sandgate_session_x=${victim}`, `__Secure-sandgate_session=${victim}`, `__host-sandgate_session=${victim}`, `a=1,sandgate_session=${victim}`]) {
        const d = await decideWith({ host: '3000-other.team-b.sbx.test', path: '/', headers: { cookie } });
        expect(d, cookie).toEqual(await decideWith({ host: '3000-other.team-b.sbx.test', path: '/' }));
      }
    });

    it('answers the refusal of the first cookie for this sandbox port when none passes', async () => {
      const old = (await mintLinkToken(KEYS, claims({ ttlSeconds: 60 }), DAY, NOW - 120_000)).token;
      const attackers = await mint({ namespace: 'team-b', name: 'other', uid: 'uid-b' });
      expect(await decideWith({ host: HOST, path: '/', headers: { cookie: `sandgate_session=${attackers}; sandgate_session=${old}` } })).toMatchObject({ code: 'link_expired' });
    });
  });

  it('refuses a link to a sandbox deleted and re-created under the same name (another uid)', async () => {
    const token = await mint();
    view.replace('t', [snapshot({ sessionModel: 'none', uid: 'uid-2' })]);
    expect(await decideWith({ host: HOST, path: '/', headers: { cookie: `sandgate_session=${token}` } })).toMatchObject({ code: 'link_invalid', message: expect.stringMatching(/deleted/) });
  });

  it('answers another tenant\'s sandbox and a missing one the same', async () => {
    const token = await mint();
    const other = await decideWith({ host: '3000-other.team-b.sbx.test', path: `/?sandgate_token=${token}` });
    const missing = await decideWith({ host: '3000-nothing.team-b.sbx.test', path: `/?sandgate_token=${token}` });
    expect(other).toBe(missing);
    // A refused token naming a sandbox is refused before the lookup: whether it exists does not show.
    const forged = token.slice(0, -4) + 'AAAA';
    const forgedOther = await decideWith({ host: HOST, path: '/', headers: { cookie: `sandgate_session=${forged}` } });
    view.replace('t', []);
    expect(await decideWith({ host: HOST, path: '/', headers: { cookie: `sandgate_session=${forged}` } })).toEqual(forgedOther);
    expect(forgedOther).toMatchObject({ code: 'link_invalid' });
  });

  it('refuses a revoked link and an expired one', async () => {
    const m = await mintLinkToken(KEYS, claims({ ttlSeconds: 60 }), DAY, NOW - 30_000);
    expect(await decideWith({ host: HOST, path: '/', headers: { cookie: `sandgate_session=${m.token}` } })).toMatchObject({ allow: true });
    revoked.add(m.id);
    expect(await decideWith({ host: HOST, path: '/', headers: { cookie: `sandgate_session=${m.token}` } })).toMatchObject({ code: 'link_revoked', status: 401 });
    const old = await mintLinkToken(KEYS, claims({ ttlSeconds: 60 }), DAY, NOW - 61_000);
    expect(await decideWith({ host: HOST, path: `/?sandgate_token=${old.token}` })).toMatchObject({ code: 'link_expired', status: 401 });
  });

  it('refuses every link a removed key signed, cached verifications included', async () => {
    const token = await mint();
    expect(await decideWith({ host: HOST, path: '/', headers: { cookie: `sandgate_session=${token}` } })).toMatchObject({ allow: true });
    keys = linkKeySet([{ kid: 'k2', privateKey: B.privateKey }]);
    auth.keysChanged();
    expect(await decideWith({ host: HOST, path: '/', headers: { cookie: `sandgate_session=${token}` } })).toMatchObject({ code: 'link_invalid', message: expect.stringMatching(/does not hold/) });
  });

  it('does not take a token from a header: only the query parameter and the cookie count', async () => {
    const token = await mint();
    const r: RouteRequest = { headers: { host: '3000-other.team-b.sbx.test', sandgate_token: token, authorization: `Bearer ${token}` }, host: '3000-other.team-b.sbx.test', path: '/', method: 'GET' };
    await auth.pending(r);
    expect(auth.presented(r)).toBeUndefined();
  });
});

describe('link URL parts', () => {
  it.each([
    ['/?sandgate_token=x', '/'],
    ['/a?sandgate_token=x&b=1', '/a?b=1'],
    ['/a?b=1&sandgate_token=x', '/a?b=1'],
    ['/a?b=1&sandgate_token=x&sandgate_token=y#f', '/a?b=1#f'],
    ['/a?xsandgate_token=1', '/a?xsandgate_token=1'],
  ])('%s without its token is %s', (path, want) => {
    expect(withoutTokenParam(path)).toBe(want);
  });

  // A redirect's Location and the request path it came from: every one stays on this host.
  it.each([
    ['/app?x=1&sandgate_token=t', '/app?x=1'],
    ['//evil.example/?sandgate_token=t', '/evil.example/'],
    ['///evil.example', '/evil.example'],
    ['/\\evil.example?sandgate_token=t', '/%5Cevil.example'],
    ['/\\/evil.example', '/%5C/evil.example'],
    ['/%2F%2Fevil?sandgate_token=t', '/%2F%2Fevil'],
    ['/\t/evil.example', '/%09/evil.example'],
    ['/\r\n/evil.example', '/%0D%0A/evil.example'],
    [' //evil.example', '/%20//evil.example'],
    ['http://evil.example/', '/http://evil.example/'],
    ['/caf\u00e9?q=\u{1F600}', '/caf%C3%A9?q=%F0%9F%98%80'],
  ])('the Location for %j is %s', (path, want) => {
    expect(linkLocation(path)).toBe(want);
    expect(new URL(want, 'https://3000-web.team-a.sbx.test/').host).toBe('3000-web.team-a.sbx.test');
  });

  it('builds the host form and the path form', () => {
    const route = { baseDomain: 'sbx.test', pathPrefix: '' };
    expect(linkUrl({ scheme: 'https', port: 0, route }, 'ns', 'web', 3000, '/', 't')).toBe('https://3000-web.ns.sbx.test/?sandgate_token=t');
    expect(linkUrl({ scheme: 'http', port: 8080, route: { ...route, pathPrefix: 'p' } }, 'ns', 'web', 3000, '/app', 't')).toBe('http://sbx.test:8080/p/ns/web/3000/app?sandgate_token=t');
  });
});
