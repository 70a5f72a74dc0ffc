import { mkdtemp, rm } from 'node:fs/promises';
import type { IncomingHttpHeaders } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { FileApiKeyStore } from '../../src/auth/api-key-file-store.js';
import { newApiKey } from '../../src/auth/api-keys.js';
import { eventually } from '../helpers/eventually.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { ed25519Pem, writeLinkKeys } from '../helpers/link-keys.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { rawRequest, startUpstream } from '../helpers/upstream.js';

/**
 * Signed links at the embedded proxy: a minted URL's token becomes a 303 and a host-only session cookie;
 * the cookie opens the same sandbox port (requests and WebSocket upgrades); neither the token nor the
 * cookie reaches the sandbox, whose own cookies pass untouched; answers people read are pages.
 */
interface Minted {
  url: string;
  expiresAt: string;
  id: string;
  message: string;
}

describe('signed links at the embedded proxy', () => {
  const PEPPER = 'p'.repeat(32);
  let dir: string;
  let t: TestGateway;
  let up: Awaited<ReturnType<typeof startUpstream>>;
  let wss: WebSocketServer;
  const seen: { url: string | undefined; headers: IncomingHttpHeaders }[] = [];
  let adminKey: string;
  let teamBKey: string;
  const host = () => `${up.port}-web.team-a.localhost`;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sandgate-links-'));
    await writeLinkKeys(join(dir, 'links.yaml'), [{ kid: 'k1', privateKey: ed25519Pem().privateKey }]);
    const store = new FileApiKeyStore(join(dir, 'keys.yaml'));
    const admin = newApiKey(new TextEncoder().encode(PEPPER), 'admin');
    const teamB = newApiKey(new TextEncoder().encode(PEPPER), 'team-b');
    await store.add(admin.record);
    await store.add(teamB.record);
    adminKey = admin.key;
    teamBKey = teamB.key;
    up = await startUpstream((req, res) => {
      seen.push({ url: req.url, headers: req.headers });
      res.writeHead(200, { 'content-type': 'text/plain', 'set-cookie': 'app=1; Path=/' }).end(`hello ${req.method} ${req.url}`);
    });
    wss = new WebSocketServer({ server: up.server });
    wss.on('connection', (ws, req) => {
      seen.push({ url: req.url, headers: req.headers });
      ws.on('message', (m, binary) => ws.send(m, { binary }));
    });
    const at = { kind: 'address' as const, addresses: ['127.0.0.1'] };
    t = await startTestGateway(
      [new TestDriver([snapshot({ name: 'web', sessionModel: 'none', endpoint: at }), snapshot({ namespace: 'team-b', name: 'web', uid: 'uid-b', sessionModel: 'none', endpoint: at })])],
      { linkKeysFile: join(dir, 'links.yaml'), linkScheme: 'http', apiKeys: join(dir, 'keys.yaml'), keyPepper: PEPPER },
    );
  });
  afterAll(async () => {
    await t.close();
    wss.close();
    await up.close();
    await rm(dir, { recursive: true, force: true });
  });

  async function mintVia(body: object, key = adminKey, ns = 'team-a'): Promise<{ status: number; json: Minted }> {
    const r = await fetch(`${t.admin}/v1/sandboxes/${ns}/web/links`, { method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return { status: r.status, json: (await r.json()) as Minted };
  }
  const pathOf = (url: string) => {
    const u = new URL(url);
    return u.pathname + u.search;
  };
  const cookieOf = (headers: IncomingHttpHeaders) => headers['set-cookie']![0]!.split(';')[0]!;

  it('mints through the API, redirects the token to a cookie, and serves the sandbox with the cookie', async () => {
    const { status, json } = await mintVia({ port: up.port, ttlSeconds: 300 });
    expect(status).toBe(201);
    expect(json.url).toMatch(new RegExp(`^http://${up.port}-web\\.team-a\\.localhost/\\?sandgate_token=`));
    expect(Date.parse(json.expiresAt)).toBeGreaterThan(Date.now());
    const before = seen.length;
    const first = await rawRequest(t.gw.proxyPort!, pathOf(json.url).replace('/?', '/page?x=1&'), { host: host(), accept: 'text/html' });
    expect(first.status).toBe(303);
    expect(first.headers.location).toBe('/page?x=1');
    expect(first.headers['referrer-policy']).toBe('no-referrer');
    expect(first.headers['cache-control']).toBe('no-store');
    const setCookie = first.headers['set-cookie']![0]!;
    expect(setCookie).toMatch(/^sandgate_session=[\w-]+\.[\w-]+\.[\w-]+; Path=\/; Max-Age=(29\d|300); HttpOnly; SameSite=Lax$/);
    expect(setCookie).not.toMatch(/Domain|Secure/i);
    expect(seen.length).toBe(before);

    const page = await rawRequest(t.gw.proxyPort!, '/page?x=1', { host: host(), cookie: `theme=dark; ${cookieOf(first.headers)}; sid=7` });
    expect(page.status).toBe(200);
    expect(page.body).toBe('hello GET /page?x=1');
    expect(page.headers['set-cookie']).toEqual(['app=1; Path=/']);
    const last = seen[seen.length - 1]!;
    expect(last.headers.cookie).toBe('theme=dark; sid=7');
    expect(JSON.stringify(last)).not.toMatch(/sandgate_token|sandgate_session/);

    // A body goes through node:http rather than the proxy's front: the same check and the same stripping.
    const post = await rawRequest(t.gw.proxyPort!, '/form', { host: host(), cookie: cookieOf(first.headers), 'content-length': '0' }, 'POST');
    expect(post.body).toBe('hello POST /form');
    expect(seen[seen.length - 1]!.headers.cookie).toBeUndefined();
  });

  it('opens a WebSocket with the cookie when the link allows it, and refuses one when it does not', async () => {
    const ws = (await mintVia({ port: up.port, websocket: true })).json;
    const plain = (await mintVia({ port: up.port })).json;
    const cookie = async (url: string) => cookieOf((await rawRequest(t.gw.proxyPort!, pathOf(url), { host: host() })).headers);
    const open = new WebSocket(`ws://127.0.0.1:${t.gw.proxyPort}/socket`, { headers: { host: host(), cookie: `${await cookie(ws.url)}; app=1` } });
    await new Promise((r, j) => {
      open.once('open', r);
      open.once('error', j);
    });
    const echoed = new Promise<string>((r) => open.once('message', (m) => r(String(m))));
    open.send('ping');
    expect(await echoed).toBe('ping');
    open.close();
    expect(seen[seen.length - 1]!.headers.cookie).toBe('app=1');
    const refused = new WebSocket(`ws://127.0.0.1:${t.gw.proxyPort}/socket`, { headers: { host: host(), cookie: await cookie(plain.url) } });
    const [status, code] = await new Promise<[number, string]>((resolve) => refused.once('unexpected-response', (_q, res) => resolve([res.statusCode ?? 0, String(res.headers['x-sandgate-error'])])));
    expect([status, code]).toEqual([403, 'link_invalid']);
  });

  it('answers a bad link as a page to a browser and as JSON otherwise', async () => {
    const { json } = await mintVia({ port: up.port });
    const wrongPort = pathOf(json.url);
    const other = `${up.port + 1}-web.team-a.localhost`;
    const html = await rawRequest(t.gw.proxyPort!, wrongPort, { host: other, 'sec-fetch-mode': 'navigate' });
    expect(html.status).toBe(403);
    expect(html.headers['content-type']).toMatch(/text\/html/);
    expect(html.body).toMatch(/<h1>The link opens another port of this sandbox<\/h1>/);
    expect(html.headers['referrer-policy']).toBe('no-referrer');
    const api = await rawRequest(t.gw.proxyPort!, wrongPort, { host: other });
    expect(api.headers['content-type']).toBe('application/json');
    expect(JSON.parse(api.body)).toMatchObject({ code: 'link_invalid' });
    const forged = await rawRequest(t.gw.proxyPort!, '/?sandgate_token=eyJhbGciOiJub25lIn0.e30.', { host: host(), accept: 'text/html,application/xhtml+xml' });
    expect([forged.status, forged.headers['x-sandgate-error']]).toEqual([403, 'link_invalid']);
    expect(forged.body).toMatch(/^<!doctype html>/);
  });

  it('lets a team mint only for its namespace, answering another team\'s sandbox as a missing one', async () => {
    const foreign = await mintVia({ port: up.port }, teamBKey, 'team-a');
    const missing = await fetch(`${t.admin}/v1/sandboxes/team-a/nothing/links`, { method: 'POST', headers: { 'x-api-key': teamBKey }, body: JSON.stringify({ port: 1 }) });
    expect(foreign.status).toBe(404);
    // The answer a missing sandbox of that name gets (the message names what was asked for).
    expect(foreign.json).toEqual({ ...((await missing.json()) as object), message: 'No sandbox team-a/web' });
    expect((await mintVia({ port: up.port }, teamBKey, 'team-b')).status).toBe(201);
    for (const [body, why] of [
      [{ port: 0 }, /port/],
      [{ port: up.port, ttlSeconds: 2 * 86_400 }, /link-max-ttl/],
      [{ port: up.port, extra: 1 }, /unknown field/],
      [{ port: up.port, path: 'no-slash' }, /path/],
    ] as const) {
      const r = await mintVia(body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.json.message).toMatch(why);
    }
  });

  it('revokes a link and its cookie (DELETE /v1/links/{id})', async () => {
    const { json } = await mintVia({ port: up.port });
    const cookie = cookieOf((await rawRequest(t.gw.proxyPort!, pathOf(json.url), { host: host() })).headers);
    expect((await rawRequest(t.gw.proxyPort!, '/', { host: host(), cookie })).status).toBe(200);
    const del = await fetch(`${t.admin}/v1/links/${json.id}`, { method: 'DELETE', headers: { 'x-api-key': adminKey } });
    expect(await del.json()).toEqual({ id: json.id, revoked: true });
    await eventually(async () => expect((await rawRequest(t.gw.proxyPort!, '/', { host: host(), cookie })).headers['x-sandgate-error']).toBe('link_revoked'));
    expect((await rawRequest(t.gw.proxyPort!, pathOf(json.url), { host: host() })).status).toBe(401);
    expect((await fetch(`${t.admin}/v1/links/${json.id}`, { method: 'DELETE' })).status).toBe(401);
  });

  it('keeps the key requirement for a request with no link (the header is no link)', async () => {
    const { json } = await mintVia({ port: up.port });
    const token = new URL(json.url).searchParams.get('sandgate_token')!;
    const r = await rawRequest(t.gw.proxyPort!, '/', { host: host(), sandgate_token: token });
    expect([r.status, r.headers['x-sandgate-error']]).toEqual([401, 'api_key_required']);
  });
});
