import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FileApiKeyStore } from '../../src/auth/api-key-file-store.js';
import { newApiKey } from '../../src/auth/api-keys.js';
import { mintLinkToken, type LinkRequestClaims } from '../../src/auth/link-tokens.js';
import { withoutLinkCookie } from '../../src/domain/link-cookie.js';
import { envoyDoors, TRANSPORT_HEADERS, type Ask } from '../helpers/door-answers.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { ed25519Pem, linkKeySet, writeLinkKeys } from '../helpers/link-keys.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { startUpstream, text, viaProxy } from '../helpers/upstream.js';

/**
 * Link cookies a browser may hold that sandgate did not set, at every door — the embedded proxy,
 * ext_authz, ext_proc and HTTP authz:
 * - a cookie whose name only resembles sandgate's, or a malformed one, changes no answer and logs nothing;
 * - a sibling host's planted `sandgate_session` cookies (its own valid link for another sandbox, junk)
 *   standing before the user's own do not lock the user out;
 * - the sandbox gets its own cookies byte for byte (`prefs=a,b` stays one cookie);
 * - the redirect a link gets stays on the host it was asked of, whatever its path says.
 */

const PEPPER = 'pepper-for-tests-0123456789abcdef0123456789';
const TOKEN = 'traffic-token-cookie-doors';
const PRIVATE_KEY = ed25519Pem().privateKey;
const KEYS = linkKeySet([{ kid: 'k1', privateKey: PRIVATE_KEY }]);

/** Cookies sandgate must read as no link at all. */
const FOREIGN = [
  'xsandgate_session=1',
  'my_sandgate_session=a.b.c',
  'Sandgate_session=a.b.c',
  '__host-sandgate_session=a.b.c',
  'sandgate_session=junk',
  'sandgate_session',
  '=;;sandgate_session=;',
  'a=1,sandgate_session=x',
];

describe('link cookies sandgate did not set, at every door', () => {
  let dir: string;
  let t: TestGateway;
  let pub: Awaited<ReturnType<typeof startUpstream>>;
  let priv: Awaited<ReturnType<typeof startUpstream>>;
  const seen: { cookie: string | undefined }[] = [];
  let teamKey: string;
  const doors: Record<string, Ask> = {};

  beforeAll(async () => {
    const record = () =>
      startUpstream((req, res) => {
        seen.push({ cookie: req.headers.cookie });
        res.end('app');
      });
    pub = await record();
    priv = await record();
    dir = await mkdtemp(join(tmpdir(), 'sandgate-cookie-doors-'));
    await writeFile(join(dir, 'pepper'), PEPPER);
    const store = new FileApiKeyStore(join(dir, 'keys.yaml'));
    const team = newApiKey(new TextEncoder().encode(PEPPER), 'team-a');
    await store.add(team.record);
    teamKey = team.key;
    await writeLinkKeys(join(dir, 'links.yaml'), [{ kid: 'k1', privateKey: PRIVATE_KEY }]);
    const at = { kind: 'address' as const, addresses: ['127.0.0.1'] };
    const ports = [pub.port, priv.port];
    t = await startTestGateway(
      [
        new TestDriver([
          snapshot({ namespace: 'team-a', name: 'web', uid: 'a1', sessionModel: 'none', endpoint: at, ports, publicPorts: [pub.port], accessToken: TOKEN }),
          snapshot({ namespace: 'team-b', name: 'evil', uid: 'b1', sessionModel: 'none', endpoint: at, ports }),
        ]),
      ],
      { apiKeys: join(dir, 'keys.yaml'), keyPepperFile: join(dir, 'pepper'), linkKeysFile: join(dir, 'links.yaml'), readinessWaitMs: 0 },
    );
    Object.assign(doors, envoyDoors(t));
    doors.proxy = async (p) => {
      const r = await viaProxy(t.gw.proxyPort!, { host: p.host, path: p.path, method: p.method, headers: p.headers });
      const body = await text(r);
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(r.headers)) if (!TRANSPORT_HEADERS.has(k)) headers[k] = Array.isArray(v) ? v.join(', ') : String(v);
      return { status: r.status, headers, body, cookie: r.status === 200 ? (seen[seen.length - 1]!.cookie ?? null) : undefined };
    };
  });
  afterAll(async () => {
    await t.close();
    await pub.close();
    await priv.close();
    await rm(dir, { recursive: true, force: true });
  });

  const PUBLIC = () => `${pub.port}-web.team-a.localhost`;
  const PRIVATE = () => `${priv.port}-web.team-a.localhost`;
  const mint = async (over: Partial<LinkRequestClaims> = {}) =>
    (await mintLinkToken(KEYS, { namespace: 'team-a', name: 'web', uid: 'a1', port: priv.port, team: 'team-a', ttlSeconds: 600, ...over }, 86_400)).token;
  const errorLines = () => t.logs.lines.filter((l) => Number(l.level) >= 50).length;

  describe.each(['proxy', 'ext_authz', 'ext_proc', 'http_authz'])('%s', (name) => {
    const door = (): Ask => doors[name === 'ext_authz' ? 'extAuthz' : name === 'ext_proc' ? 'extProc' : name === 'http_authz' ? 'httpAuthz' : 'proxy']!;

    it('answers a request with a foreign or malformed cookie as one without it, and logs no error', async () => {
      const errorsBefore = errorLines();
      const shapes: { host: string; headers: Record<string, string> }[] = [
        { host: PUBLIC(), headers: {} },
        { host: PRIVATE(), headers: {} },
        { host: PRIVATE(), headers: { 'x-api-key': teamKey } },
        { host: PRIVATE(), headers: { 'x-api-key': teamKey, 'e2b-traffic-access-token': TOKEN } },
      ];
      for (const s of shapes) {
        const plain = await door()({ host: s.host, path: '/', headers: s.headers });
        for (const cookie of FOREIGN) {
          const r = await door()({ host: s.host, path: '/', headers: { ...s.headers, cookie } });
          expect([r.status, r.headers['x-sandgate-error']], `${s.host} ${JSON.stringify(s.headers)} ${cookie}`).toEqual([plain.status, plain.headers['x-sandgate-error']]);
          // Allowed: the sandbox gets every cookie but one of sandgate's exact names, as the client sent it.
          const want = withoutLinkCookie(cookie);
          if (r.status === 200) expect(r.cookie === undefined ? cookie : r.cookie, cookie).toBe(want === '' ? null : want);
        }
      }
      expect(errorLines()).toBe(errorsBefore);
    });

    it('lets the user in with their own cookie behind cookies a sibling planted', async () => {
      const victim = await mint();
      const attackers = await mint({ namespace: 'team-b', name: 'evil', uid: 'b1' });
      const planted = [`sandgate_session=${attackers}`, 'sandgate_session=x.y.z', 'sandgate_session=a.b.c', 'sandgate_session=junk', 'sandgate_session=j.u.nk', `sandgate_session=${victim.slice(0, -4)}AAAA`];
      const r = await door()({ host: PRIVATE(), path: '/', headers: { cookie: `prefs=a,b; ${planted.join('; ')}; sandgate_session=${victim}; sid="7"` } });
      expect([r.status, r.headers['x-sandgate-error']]).toEqual([200, undefined]);
      expect(r.cookie).toBe('prefs=a,b; sid="7"');
      // Over TLS the cookie is __Host-sandgate_session, read before any other.
      const tls = await door()({ host: PRIVATE(), path: '/', scheme: 'https', headers: { cookie: `${planted.join('; ')}; __Host-sandgate_session=${victim}` } });
      expect(tls.status).toBe(200);
    });

    it('passes the sandbox\'s own cookies byte for byte', async () => {
      const victim = await mint();
      const r = await door()({ host: PRIVATE(), path: '/', headers: { cookie: `prefs=a,b;sandgate_session=${victim};  theme = dark ;x=%2C` } });
      expect(r).toMatchObject({ status: 200, cookie: 'prefs=a,b;  theme = dark ;x=%2C' });
      const alone = await door()({ host: PUBLIC(), path: '/', headers: { cookie: 'prefs=a,b' } });
      expect(alone.status).toBe(200);
      expect([undefined, 'prefs=a,b']).toContain(alone.cookie);
    });

    it('redirects a link only to a path of the same host', async () => {
      const paths = ['//evil.example/', '/\\evil.example', '/%2F%2Fevil.example', '///evil.example/x', '/\\/evil.example'];
      // Bytes no HTTP/1.1 request line holds reach the Envoy doors in a path Envoy hands over.
      if (name === 'ext_authz' || name === 'ext_proc') paths.push('/\t/evil.example', '/\r\n/evil.example', '/\\\t\\evil.example');
      for (const [host, token] of [
        [PUBLIC(), 'junk'],
        [PRIVATE(), await mint()],
      ] as const) {
        for (const path of paths) {
          const r = await door()({ host, path: `${path}?sandgate_token=${token}` });
          expect(r.status, `${host} ${JSON.stringify(path)}`).toBe(303);
          const location = r.headers.location!;
          expect(location, JSON.stringify(path)).toMatch(/^\/(?![/\\])/);
          expect(new URL(location, `https://${host}/`).host, JSON.stringify(path)).toBe(host);
          expect(location).not.toMatch(/[\s\\]/);
        }
      }
    });
  });

  it('answers the link redirect at HTTP authz through nginx\'s X-Original-URI on the same host', async () => {
    const r = await doors.httpAuthz!({ host: PUBLIC(), path: '/', headers: { 'x-original-uri': '/\t/evil.example?sandgate_token=junk' } });
    expect(r.status).toBe(303);
    expect(new URL(r.headers.location!, `https://${PUBLIC()}/`).host).toBe(PUBLIC());
  });
});
