import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FileApiKeyStore } from '../../src/auth/api-key-file-store.js';
import { newApiKey } from '../../src/auth/api-keys.js';
import { mintLinkToken } from '../../src/auth/link-tokens.js';
import { eventually } from '../helpers/eventually.js';
import { envoyDoors, TRANSPORT_HEADERS, type Ask, type DoorAnswer } from '../helpers/door-answers.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { ed25519Pem, linkKeySet, writeLinkKeys } from '../helpers/link-keys.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { rawRequest, startUpstream, text, viaProxy } from '../helpers/upstream.js';

/**
 * Public ports (`publicPorts` / `sandgate.dev/public-ports`) at every door: a request to one needs no API
 * key, traffic token or link, whatever it sends; the sandbox's phase and the port allow-list still decide;
 * every credential a client sends is still taken out before the sandbox sees the request; a link token in
 * the query only gets the redirect without it. A private port of the same sandbox is unchanged.
 *
 * And CORS preflights: a private port's preflight is answered by the gateway — the same bytes for a missing
 * sandbox, another tenant's and an existing private one — and never reaches the sandbox; a public port's
 * goes to the sandbox, which answers its own CORS.
 */

const PEPPER = 'pepper-for-tests-0123456789abcdef0123456789';
const TOKEN = 'traffic-token-public-ports';

describe('public ports and CORS preflights at every door', () => {
  let dir: string;
  let t: TestGateway;
  let pub: Awaited<ReturnType<typeof startUpstream>>;
  let priv: Awaited<ReturnType<typeof startUpstream>>;
  let seen: { port: number; method: string; url: string; headers: Record<string, unknown> }[] = [];
  let extAuthz: Ask;
  let extProc: Ask;
  let httpAuthz: Ask;
  const keys: Record<string, string> = {};
  const PRIVATE_KEY = ed25519Pem().privateKey;

  beforeAll(async () => {
    const record = (port: () => number, body: string) =>
      startUpstream((req, res) => {
        seen.push({ port: port(), method: req.method ?? '', url: req.url ?? '', headers: req.headers });
        res.writeHead(200, { 'access-control-allow-origin': 'https://app.example' }).end(body);
      });
    pub = await record(() => pub.port, 'public app');
    priv = await record(() => priv.port, 'private app');
    dir = await mkdtemp(join(tmpdir(), 'sandgate-public-ports-'));
    await writeFile(join(dir, 'pepper'), PEPPER);
    const store = new FileApiKeyStore(join(dir, 'keys.yaml'));
    for (const team of ['team-a', 'team-b', 'revoked']) {
      const { key, record: r } = newApiKey(new TextEncoder().encode(PEPPER), team === 'revoked' ? 'team-a' : team);
      await store.add(r);
      keys[team] = key;
      if (team === 'revoked') await store.revoke(r.id);
    }
    await writeLinkKeys(join(dir, 'links.yaml'), [{ kid: 'k1', privateKey: PRIVATE_KEY }]);
    const at = { kind: 'address' as const, addresses: ['127.0.0.1'] };
    const ports = [pub.port, priv.port];
    t = await startTestGateway(
      [
        new TestDriver([
          snapshot({ namespace: 'team-a', name: 'web', uid: 'a1', sessionModel: 'none', endpoint: at, ports, publicPorts: [pub.port], accessToken: TOKEN }),
          snapshot({ namespace: 'team-a', name: 'sleepy', uid: 'a2', sessionModel: 'none', endpoint: at, ports, publicPorts: [pub.port], state: 'paused' }),
          snapshot({ namespace: 'team-b', name: 'web', uid: 'b1', sessionModel: 'none', endpoint: at, ports, accessToken: TOKEN }),
        ]),
      ],
      { apiKeys: join(dir, 'keys.yaml'), keyPepperFile: join(dir, 'pepper'), linkKeysFile: join(dir, 'links.yaml'), readinessWaitMs: 0 },
    );
    ({ extAuthz, extProc, httpAuthz } = envoyDoors(t));
  });
  afterAll(async () => {
    await t.close();
    await pub.close();
    await priv.close();
    await rm(dir, { recursive: true, force: true });
  });

  const PUBLIC = () => `${pub.port}-web.team-a.localhost`;
  const PRIVATE = () => `${priv.port}-web.team-a.localhost`;

  const proxy: Ask = async (p) => {
    const r = await viaProxy(t.gw.proxyPort!, { host: p.host, path: p.path, method: p.method, headers: p.headers });
    const body = await text(r);
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(r.headers)) if (!TRANSPORT_HEADERS.has(k)) headers[k] = Array.isArray(v) ? v.join(', ') : String(v);
    return { status: r.status, headers, body };
  };

  const code = (r: DoorAnswer): number | string => (r.status === 200 ? 200 : (r.headers['x-sandgate-error'] ?? r.status));

  describe.each<[string, () => Ask]>([
    ['proxy', () => proxy],
    ['ext_authz', () => extAuthz],
    ['ext_proc', () => extProc],
    ['HTTP authz', () => httpAuthz],
  ])('%s', (door, ask) => {
    it('passes a public port without any credential, and with a wrong or foreign one', async () => {
      const host = PUBLIC();
      expect(code(await ask()({ host }))).toBe(200);
      expect(code(await ask()({ host, headers: { 'x-api-key': keys.revoked! } }))).toBe(200);
      expect(code(await ask()({ host, headers: { 'x-api-key': 'sg_not-a-key' } }))).toBe(200);
      expect(code(await ask()({ host, headers: { 'x-api-key': keys['team-b']! } }))).toBe(200);
      expect(code(await ask()({ host, headers: { 'x-api-key': keys['team-a']!, 'e2b-traffic-access-token': 'wrong' } }))).toBe(200);
      if (door === 'proxy') {
        const r = await ask()({ host });
        expect(r.body).toBe('public app');
      }
    });

    it('keeps every check but the credential: private ports, missing sandboxes, phase', async () => {
      expect(code(await ask()({ host: PRIVATE() }))).toBe('api_key_required');
      expect(code(await ask()({ host: PRIVATE(), headers: { 'x-api-key': keys['team-a']! } }))).toBe('token_required');
      expect(code(await ask()({ host: `${pub.port}-nope.team-a.localhost` }))).toBe('api_key_required');
      // team-b's sandbox declares no public port: the same port is private there.
      expect(code(await ask()({ host: `${pub.port}-web.team-b.localhost` }))).toBe('api_key_required');
      expect(code(await ask()({ host: `${pub.port}-web.team-b.localhost`, headers: { 'x-api-key': keys['team-a']! } }))).toBe('sandbox_not_found');
      // A paused sandbox's public port answers as paused, to anyone: what the port being public already tells.
      expect(code(await ask()({ host: `${pub.port}-sleepy.team-a.localhost` }))).toBe('sandbox_paused');
    });

    it('still takes every credential out of what reaches the sandbox', async () => {
      seen = [];
      const sent = { 'x-api-key': keys['team-a']!, 'e2b-traffic-access-token': TOKEN, cookie: 'sid=1; sandgate_session=abc.def.ghi' };
      const r = await ask()({ host: PUBLIC(), headers: sent });
      expect(r.status).toBe(200);
      if (door === 'proxy') {
        expect(seen.length).toBe(1);
        const h = seen[0]!.headers;
        expect([h['x-api-key'], h['e2b-traffic-access-token'], h.cookie]).toEqual([undefined, undefined, 'sid=1']);
      } else {
        expect([...(r.removed ?? [])].filter((x) => x !== 'cookie').sort()).toEqual(['e2b-traffic-access-token', 'x-api-key']);
        expect(r.cookie).toBe('sid=1');
      }
    });

    it('takes a link token out of a public port URL with a redirect, and sets no cookie', async () => {
      const minted = await mintLinkToken(linkKeySet([{ kid: 'k1', privateKey: PRIVATE_KEY }]), { namespace: 'team-b', name: 'web', uid: 'b1', port: 1, team: 'team-b', ttlSeconds: 60 }, 86_400, Date.now());
      const r = await ask()({ host: PUBLIC(), path: `/app?x=1&sandgate_token=${minted.token}` });
      expect([r.status, r.headers.location, r.headers['set-cookie'], r.headers['referrer-policy']]).toEqual([303, '/app?x=1', undefined, 'no-referrer']);
    });

    it('answers a private port preflight itself: the same bytes for a missing, a foreign and an existing sandbox', async () => {
      seen = [];
      const preflight = { origin: 'https://app.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type, e2b-traffic-access-token' };
      const ask3 = async (headers: Record<string, string>) =>
        Promise.all([PRIVATE(), `${priv.port}-web.team-b.localhost`, `${priv.port}-nope.team-a.localhost`].map((host) => ask()({ host, method: 'OPTIONS', path: '/api', headers })));
      for (const headers of [preflight, { ...preflight, 'x-api-key': keys['team-b']! }, { ...preflight, 'x-api-key': keys.revoked! }]) {
        const [own, foreign, missing] = await ask3(headers);
        expect(own).toEqual(missing);
        expect(foreign).toEqual(missing);
      }
      const [answer] = await ask3(preflight);
      expect(answer!.status).toBe(204);
      expect(answer!.body).toBe('');
      expect(answer!.headers).toMatchObject({
        'access-control-allow-origin': '*',
        'access-control-allow-methods': 'GET, HEAD, POST, PUT, PATCH, DELETE',
        'access-control-allow-headers': 'content-type, e2b-traffic-access-token',
        'x-sandgate-error': 'cors_preflight',
      });
      // Never credentials: a request relying on sandgate's cookie fails its preflight in the browser.
      expect(answer!.headers['access-control-allow-credentials']).toBeUndefined();
      expect(seen).toEqual([]);
    });

    it('forwards a public port preflight, and a private one that carries a valid credential', async () => {
      const preflight = { origin: 'https://app.example', 'access-control-request-method': 'PUT' };
      expect(code(await ask()({ host: PUBLIC(), method: 'OPTIONS', headers: preflight }))).toBe(200);
      expect(code(await ask()({ host: PRIVATE(), method: 'OPTIONS', headers: { ...preflight, 'x-api-key': keys['team-a']!, 'e2b-traffic-access-token': TOKEN } }))).toBe(200);
      // A plain OPTIONS (no Origin) to a private port is refused like any request.
      expect(code(await ask()({ host: PRIVATE(), method: 'OPTIONS' }))).toBe('api_key_required');
    });

    it("counts a link cookie for WebSockets and changes only from a page of the sandbox's own host", async () => {
      const minted = await mintLinkToken(linkKeySet([{ kid: 'k1', privateKey: PRIVATE_KEY }]), { namespace: 'team-a', name: 'web', uid: 'a1', port: priv.port, team: 'team-a', ttlSeconds: 60, websocket: true }, 86_400, Date.now());
      const cookie = `sandgate_session=${minted.token}`;
      const host = PRIVATE();
      const sibling = `http://${pub.port}-evil.team-a.localhost`;
      const ws = { upgrade: 'websocket', connection: 'upgrade', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' };
      // Another sandbox's page (same site: SameSite=Lax lets the cookie ride) is refused before the sandbox.
      expect(code(await ask()({ host, path: '/ws', headers: { cookie, origin: sibling, ...ws } }))).toBe('link_invalid');
      expect(code(await ask()({ host, path: '/api', method: 'POST', headers: { cookie, origin: sibling } }))).toBe('link_invalid');
      expect(code(await ask()({ host, path: '/api', method: 'POST', headers: { cookie, origin: 'null' } }))).toBe('link_invalid');
      // Its own pages, safe requests from anywhere (reading is CORS's business), and requests without Origin pass.
      expect(code(await ask()({ host, path: '/api', method: 'POST', headers: { cookie, origin: `http://${host}` } }))).toBe(200);
      expect(code(await ask()({ host, path: '/api', method: 'POST', headers: { cookie, origin: `https://${host}` } }))).toBe(200);
      expect(code(await ask()({ host, path: '/api', headers: { cookie, origin: sibling } }))).toBe(200);
      expect(code(await ask()({ host, path: '/api', method: 'POST', headers: { cookie } }))).toBe(200);
      if (door !== 'proxy') expect(code(await ask()({ host, path: '/ws', headers: { cookie, origin: `http://${host}`, ...ws } }))).toBe(200);
    });

    it('does not echo a header list that is not one', async () => {
      const r = await ask()({ host: PRIVATE(), method: 'OPTIONS', headers: { origin: 'https://app.example', 'access-control-request-method': 'GET', 'access-control-request-headers': 'x-a, <script>' } });
      expect(r.status).toBe(204);
      expect(r.headers['access-control-allow-headers']).toBeUndefined();
    });
  });

  it('HTTP authz behind nginx (X-Original-Method) refuses a private port preflight with 403: auth_request allows on any 2xx', async () => {
    const headers = { 'x-original-method': 'OPTIONS', origin: 'https://app.example', 'access-control-request-method': 'PUT' };
    const answers = await Promise.all([PRIVATE(), `${priv.port}-nope.team-a.localhost`].map((host) => rawRequest(t.gw.adminPort, '/authz/api', { ...headers, 'x-forwarded-host': host })));
    for (const a of answers) expect([a.status, a.headers['x-sandgate-error'], a.body]).toEqual([403, 'cors_preflight', '']);
    // A public port's preflight is still allowed (nginx then forwards it to the sandbox).
    expect((await rawRequest(t.gw.adminPort, '/authz/api', { ...headers, 'x-forwarded-host': PUBLIC() })).status).toBe(200);
  });

  it('HTTP authz reads a WebSocket handshake from `upgrade` alone, as the shipped Envoy file forwards it (no `connection`)', async () => {
    const keysOf = linkKeySet([{ kid: 'k1', privateKey: PRIVATE_KEY }]);
    const link = async (websocket: boolean) => (await mintLinkToken(keysOf, { namespace: 'team-a', name: 'web', uid: 'a1', port: priv.port, team: 'team-a', ttlSeconds: 60, websocket }, 86_400, Date.now())).token;
    const ask = async (token: string) => code(await httpAuthz({ host: PRIVATE(), path: '/ws', headers: { cookie: `sandgate_session=${token}`, upgrade: 'websocket' } }));
    expect(await ask(await link(false))).toBe('link_invalid');
    expect(await ask(await link(true))).toBe(200);
  });
});

describe('public ports keep the gateway bounds', () => {
  it('an anonymous request to a public port counts against --max-connections-per-sandbox like any other', async () => {
    const held: (() => void)[] = [];
    const up = await startUpstream((_req, res) => held.push(() => res.end('done')));
    const at = { kind: 'address' as const, addresses: ['127.0.0.1'] };
    const t = await startTestGateway([new TestDriver([snapshot({ name: 'web', sessionModel: 'none', endpoint: at, publicPorts: [up.port], accessToken: 'tok' })])], { maxConnectionsPerSandbox: 1 });
    try {
      const host = `${up.port}-web.team-a.localhost`;
      const first = viaProxy(t.gw.proxyPort!, { host });
      await eventually(() => held.length === 1, 5000, 'the first request to reach the upstream');
      const second = await viaProxy(t.gw.proxyPort!, { host });
      expect([second.status, JSON.parse(await text(second)).code]).toEqual([429, 'too_many_connections']);
      held[0]!();
      const r = await first;
      expect([r.status, await text(r)]).toEqual([200, 'done']);
    } finally {
      for (const release of held) release();
      await t.close();
      await up.close();
    }
  });
});
