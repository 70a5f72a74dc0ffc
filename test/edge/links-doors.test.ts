import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mintLinkToken, type LinkRequestClaims } from '../../src/auth/link-tokens.js';
import { envoyDoors, type Ask } from '../helpers/door-answers.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { ed25519Pem, linkKeySet, writeLinkKeys } from '../helpers/link-keys.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';

/**
 * Signed links through the Envoy doors: ext_authz (gRPC), ext_proc and HTTP authz answer a link exactly as
 * the embedded proxy does — the 303 with Set-Cookie as a denied response with headers, the cookie read
 * from the `cookie` header Envoy forwards and taken out of what reaches the sandbox (the sandbox's own
 * cookies set back, or the header removed), the same codes.
 */

describe('signed links through the Envoy doors', () => {
  const PRIVATE = ed25519Pem().privateKey;
  let dir: string;
  let t: TestGateway;
  let extAuthz: Ask;
  let extProc: Ask;
  let httpAuthz: Ask;
  const HOST = '3000-web.team-a.localhost';
  const mint = async (over: Partial<LinkRequestClaims> = {}, now = Date.now()) =>
    (await mintLinkToken(linkKeySet([{ kid: 'k1', privateKey: PRIVATE }]), { namespace: 'team-a', name: 'web', uid: 'uid-1', port: 3000, team: 'team-a', ttlSeconds: 600, ...over }, 86_400, now)).token;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sandgate-link-doors-'));
    await writeLinkKeys(join(dir, 'links.yaml'), [{ kid: 'k1', privateKey: PRIVATE }]);
    t = await startTestGateway([new TestDriver([snapshot({ name: 'web', sessionModel: 'none', accessToken: 'traffic-secret' })])], { linkKeysFile: join(dir, 'links.yaml') });
    ({ extAuthz, extProc, httpAuthz } = envoyDoors(t));
  });
  afterAll(async () => {
    await t.close();
    await rm(dir, { recursive: true, force: true });
  });

  describe.each<[string, () => Ask]>([
    ['ext_authz', () => extAuthz],
    ['ext_proc', () => extProc],
    ['HTTP authz', () => httpAuthz],
  ])('%s', (_door, door) => {
    it('answers a valid token with the 303 that sets the cookie, as a denied response with headers', async () => {
      const token = await mint();
      const r = await door()({ host: HOST, path: `/app?x=1&sandgate_token=${token}` });
      expect(r.status).toBe(303);
      expect(r.headers.location).toBe('/app?x=1');
      expect(r.headers['set-cookie']).toMatch(new RegExp(`^sandgate_session=${token.replace(/\./g, '\\.')}; Path=/; Max-Age=(59\\d|600); HttpOnly; SameSite=Lax$`));
      expect(r.headers['referrer-policy']).toBe('no-referrer');
      expect(r.headers['cache-control']).toBe('no-store');
      expect(r.headers['x-sandgate-error']).toBe('link_accepted');
      const tls = await door()({ host: HOST, path: `/?sandgate_token=${token}`, scheme: 'https' });
      expect(tls.headers['set-cookie']).toMatch(/^__Host-sandgate_session=[^;]+; Path=\/; .*; Secure$/);
    });

    it('allows the cookie and gives the sandbox only its own cookies', async () => {
      const token = await mint();
      expect(await door()({ host: HOST, path: '/app', headers: { cookie: `theme=dark; sandgate_session=${token}; sid=7` } })).toMatchObject({ status: 200, cookie: 'theme=dark; sid=7' });
      expect(await door()({ host: HOST, path: '/app', headers: { cookie: `sandgate_session=${token}` } })).toMatchObject({ status: 200, cookie: null });
      const upgrade = await mint({ websocket: true });
      expect(await door()({ host: HOST, path: '/ws', headers: { cookie: `sandgate_session=${upgrade}`, upgrade: 'websocket', connection: 'upgrade' } })).toMatchObject({ status: 200, cookie: null });
    });

    it('refuses what the link does not open, with the same codes as the proxy', async () => {
      const token = await mint({ methods: ['GET'], path: '/app' });
      const cookie = `sandgate_session=${token}`;
      const code = async (p: Parameters<Ask>[0]) => {
        const r = await door()(p);
        return [r.status, r.headers['x-sandgate-error']];
      };
      expect(await code({ host: HOST, path: '/app', method: 'POST', headers: { cookie } })).toEqual([403, 'link_invalid']);
      expect(await code({ host: HOST, path: '/app/../admin', headers: { cookie } })).toEqual([403, 'link_invalid']);
      expect(await code({ host: HOST, path: '/app', headers: { cookie, upgrade: 'websocket', connection: 'upgrade' } })).toEqual([403, 'link_invalid']);
      // A cookie made for another port or sandbox (a browser sends it there only if a sibling planted it)
      // is passed over: the request is answered as one without it.
      for (const host of ['3001-web.team-a.localhost', '3000-web.team-b.localhost']) {
        expect(await code({ host, path: '/app', headers: { cookie } })).toEqual(await code({ host, path: '/app' }));
      }
      expect(await code({ host: '3001-web.team-a.localhost', path: `/app?sandgate_token=${token}` })).toEqual([403, 'link_invalid']);
    });

    it('answers an expired link as a page to a browser', async () => {
      const old = await mint({ ttlSeconds: 60 }, Date.now() - 120_000);
      const page = await door()({ host: HOST, path: `/?sandgate_token=${old}`, headers: { accept: 'text/html' } });
      expect(page.status).toBe(401);
      expect(page.headers['content-type']).toMatch(/text\/html/);
      expect(page.body).toMatch(/The link has expired/);
      const api = await door()({ host: HOST, path: '/', headers: { cookie: `sandgate_session=${old}` } });
      expect(JSON.parse(api.body)).toMatchObject({ code: 'link_expired' });
    });

    it('takes no token from a header: the sandbox still wants its traffic token', async () => {
      const token = await mint();
      const r = await door()({ host: HOST, path: '/', headers: { sandgate_token: token } });
      expect([r.status, r.headers['x-sandgate-error']]).toEqual([401, 'token_required']);
      expect(await door()({ host: HOST, path: '/', headers: { 'e2b-traffic-access-token': 'traffic-secret', cookie: 'sid=1' } })).toMatchObject({ status: 200, cookie: undefined });
    });
  });
});
