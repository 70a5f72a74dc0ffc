import { mkdtemp, rm } from 'node:fs/promises';
import type { IncomingHttpHeaders } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { FileApiKeyStore } from '../../src/auth/api-key-file-store.js';
import { newApiKey } from '../../src/auth/api-keys.js';
import { mintLinkToken } from '../../src/auth/link-tokens.js';
import { CHROMIUM, launchChromium, needsChromium } from '../helpers/chromium.js';
import { eventually } from '../helpers/eventually.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { ed25519Pem, linkKeySet, writeLinkKeys } from '../helpers/link-keys.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { startUpstream } from '../helpers/upstream.js';

/** The sandbox's page: its own script opens a WebSocket to the host it came from and shows the echo. */
const PAGE = `<!doctype html><title>sandbox app</title><h1>sandbox app</h1><p id="ws">waiting</p>
<script>
  const ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/echo');
  ws.onopen = () => ws.send('ping from the page');
  ws.onmessage = (e) => { document.getElementById('ws').textContent = 'echo: ' + e.data; };
  ws.onerror = () => { document.getElementById('ws').textContent = 'websocket failed'; };
</script>`;

describe.skipIf(CHROMIUM === undefined)(needsChromium('signed links in Chromium'), () => {
  const PEPPER = 'p'.repeat(32);
  const PRIVATE = ed25519Pem().privateKey;
  let dir: string;
  let a: TestGateway;
  let b: TestGateway;
  let browser: Browser;
  let app: Awaited<ReturnType<typeof startUpstream>>;
  let other: Awaited<ReturnType<typeof startUpstream>>;
  let adminKey: string;
  /** Every request either sandbox received: its target and headers. */
  const seen: { url: string | undefined; headers: IncomingHttpHeaders }[] = [];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sandgate-link-browser-'));
    await writeLinkKeys(join(dir, 'links.yaml'), [{ kid: 'k1', privateKey: PRIVATE }]);
    const admin = newApiKey(new TextEncoder().encode(PEPPER), 'admin');
    await new FileApiKeyStore(join(dir, 'keys.yaml')).add(admin.record);
    adminKey = admin.key;
    const record = (req: { url?: string; headers: IncomingHttpHeaders }) => seen.push({ url: req.url, headers: req.headers });
    app = await startUpstream((req, res) => {
      record(req);
      res.writeHead(200, { 'content-type': 'text/html' }).end(PAGE);
    });
    const wss = new WebSocketServer({ server: app.server });
    wss.on('connection', (ws, req) => {
      record(req);
      ws.on('message', (m) => ws.send(String(m)));
    });
    other = await startUpstream((req, res) => {
      record(req);
      res.end('the other sandbox');
    });
    const at = { kind: 'address' as const, addresses: ['127.0.0.1'] };
    const driver = () => new TestDriver([snapshot({ name: 'web', sessionModel: 'none', endpoint: at }), snapshot({ name: 'other', uid: 'uid-o', sessionModel: 'none', endpoint: at })]);
    const common = { linkKeysFile: join(dir, 'links.yaml'), linkScheme: 'http', apiKeys: join(dir, 'keys.yaml'), keyPepper: PEPPER };
    a = await startTestGateway([driver()], { ...common, gatewayId: 'gw-a' });
    b = await startTestGateway([driver()], { ...common, gatewayId: 'gw-b' });
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await a?.close();
    await b?.close();
    await app?.close();
    await other?.close();
    await rm(dir, { recursive: true, force: true });
  });

  /** A link minted by gateway a's API, pointed at gateway `g`'s proxy (Chromium resolves *.localhost to loopback). */
  async function link(g: TestGateway, body: object): Promise<{ url: string; id: string }> {
    const r = await fetch(`${a.admin}/v1/sandboxes/team-a/web/links`, { method: 'POST', headers: { 'x-api-key': adminKey }, body: JSON.stringify(body) });
    const minted = (await r.json()) as { url: string; id: string };
    const u = new URL(minted.url);
    u.port = String(g.gw.proxyPort);
    return { url: u.toString(), id: minted.id };
  }
  const webHost = (g: TestGateway) => `http://${app.port}-web.team-a.localhost:${g.gw.proxyPort}`;

  it('opens the sandbox page from a link: no token in the address bar, its WebSocket echoes, its cookie stays on its host', async () => {
    const { url } = await link(a, { port: app.port, websocket: true });
    const context = await browser.newContext();
    const page = await context.newPage();
    const response = await page.goto(url);
    expect(response?.status()).toBe(200);
    expect(page.url()).toBe(`${webHost(a)}/`);
    expect(page.url()).not.toContain('sandgate_token');
    expect(await page.locator('h1').textContent()).toBe('sandbox app');
    await expect.poll(() => page.locator('#ws').textContent()).toBe('echo: ping from the page');
    const cookies = await context.cookies();
    expect(cookies).toHaveLength(1);
    expect(cookies[0]).toMatchObject({ name: 'sandgate_session', domain: `${app.port}-web.team-a.localhost`, path: '/', httpOnly: true, sameSite: 'Lax' });

    // Another sandbox's host gets no cookie: it answers as for any browser without a key.
    const before = seen.length;
    const otherPage = await page.goto(`http://${other.port}-other.team-a.localhost:${a.gw.proxyPort}/`);
    expect(otherPage?.status()).toBe(401);
    expect(await page.textContent('body')).toContain('api_key_required');
    expect(seen.length).toBe(before);
    await context.close();
  });

  it('shows the page for an expired link', async () => {
    const old = await mintLinkToken(linkKeySet([{ kid: 'k1', privateKey: PRIVATE }]), { namespace: 'team-a', name: 'web', uid: 'uid-1', port: app.port, team: 'admin', ttlSeconds: 60 }, 86_400, Date.now() - 120_000);
    const context = await browser.newContext();
    const page = await context.newPage();
    const response = await page.goto(`${webHost(a)}/?sandgate_token=${old.token}`);
    expect(response?.status()).toBe(401);
    expect(await page.locator('h1').textContent()).toBe('The link has expired');
    expect(await context.cookies()).toHaveLength(0);
    await context.close();
  });

  it('a revoked link and its cookie stop working on the second gateway', async () => {
    const { url, id } = await link(b, { port: app.port });
    const context = await browser.newContext();
    const page = await context.newPage();
    expect((await page.goto(url))?.status()).toBe(200);
    // Cookies are per host, not per port: the cookie set through b also goes to a's proxy on that host.
    expect((await page.goto(`${webHost(a)}/again`))?.status()).toBe(200);
    const del = await fetch(`${a.admin}/v1/links/${id}`, { method: 'DELETE', headers: { 'x-api-key': adminKey } });
    expect(del.status).toBe(200);
    await eventually(async () => (await page.goto(`${webHost(b)}/after`))?.status() === 401, 10_000, 'gateway b to refuse the revoked cookie');
    expect(await page.locator('h1').textContent()).toBe('The link was revoked');
    const fresh = await browser.newContext();
    const relink = await (await fresh.newPage()).goto(url);
    expect(relink?.status()).toBe(401);
    await fresh.close();
    await context.close();
  });

  it('the sandboxes never saw sandgate_token nor sandgate_session', () => {
    expect(seen.length).toBeGreaterThan(3);
    for (const r of seen) expect(JSON.stringify(r)).not.toMatch(/sandgate_token|sandgate_session/);
  });
});
