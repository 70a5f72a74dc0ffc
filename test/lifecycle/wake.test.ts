import { request } from 'node:http';
import { createServer, type Server } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import type { BackendSnapshot } from '../../src/domain/sandbox.js';
import { cond, snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { freePort } from '../helpers/redis-server.js';
import { eventually } from '../helpers/eventually.js';
import { CHROMIUM, launchChromium, needsChromium } from '../helpers/chromium.js';

/**
 * Waking a paused sandbox on traffic, as clients live through it: the first request is answered once the
 * sandbox is Ready and its port accepts (also when the app listens seconds after Ready); past the wake
 * budget a browser gets a page that reloads itself and an SDK a 503 with Retry-After; a sandbox being
 * deleted, or in a namespace at its running limit, is never woken.
 */

const cleanup: (() => Promise<unknown> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

const paused = (over: Partial<BackendSnapshot> = {}): BackendSnapshot =>
  snapshot({ name: 'app', uid: 'uid-app', sessionModel: 'none', state: 'paused', resumeOnTraffic: true, conditions: [cond('Ready', 'False', 'SandboxPaused')], endpoint: { kind: 'address', addresses: ['127.0.0.1'] }, ...over });
const running = (s: BackendSnapshot, rv: string): BackendSnapshot => ({ ...s, resourceVersion: rv, state: 'ready', conditions: [cond('Ready', 'True', 'DependenciesReady')] });

/** The sandbox's app: a page naming itself, on `port` (started when the test says so). */
async function app(port: number): Promise<Server> {
  const server = createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>app</title><h1>hello from the app</h1>'));
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  cleanup.push(() => new Promise((r) => server.close(r)));
  return server;
}

function get(t: TestGateway, host: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  return new Promise((resolve, reject) => {
    request({ host: '127.0.0.1', port: t.gw.proxyPort, path: '/', headers: { host, ...headers } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    })
      .on('error', reject)
      .end();
  });
}

describe('wake on traffic', () => {
  it('answers 200 once the controller reports Ready and the port accepts, even when the app listens only after Ready', async () => {
    const port = await freePort();
    const driver = new TestDriver([paused()]);
    const t = await startTestGateway([driver], {});
    cleanup.push(() => t.close());
    const answer = get(t, `${port}-app.team-a.localhost`);
    await eventually(() => driver.resumed.length === 1, 5000, 'the resume call');
    driver.upsert(running(paused(), '2'));
    // Ready, and nothing listens on the port yet: the gateway is refused, and retries.
    await eventually(() => t.logs.find((l) => l.msg === 'the sandbox refused the connection after a wake; retrying'), 5000, 'a refused attempt on the port');
    await app(port);
    const res = await answer;
    expect(res.status).toBe(200);
    expect(res.body).toContain('hello from the app');
    expect(driver.resumed).toEqual(['team-a/app']);
  });

  it('without the retry (--upstream-connect-retry-ms 0) the same request gets 502 port_not_open', async () => {
    const port = await freePort();
    const driver = new TestDriver([paused()]);
    driver.onResume = async () => driver.upsert(running(paused(), '2'));
    const t = await startTestGateway([driver], { upstreamConnectRetryMs: 0 });
    cleanup.push(() => t.close());
    const res = await get(t, `${port}-app.team-a.localhost`);
    expect(res.status).toBe(502);
    expect(JSON.parse(res.body).code).toBe('port_not_open');
  });

  it('past the wake budget (sandgate.dev/wake-timeout): an SDK gets 503 + Retry-After, an E2B client 429, a browser the starting page; one resume', async () => {
    const driver = new TestDriver([paused({ wakeTimeoutMs: 200, ids: ['sbx-app'] })]);
    driver.onResume = () => new Promise(() => undefined);
    const t = await startTestGateway([driver], {});
    cleanup.push(() => t.close());
    const sdk = await get(t, '8000-app.team-a.localhost');
    expect(sdk.status).toBe(503);
    expect(sdk.headers['retry-after']).toBe('2');
    expect(JSON.parse(sdk.body)).toMatchObject({ code: 'sandbox_not_ready', phase: 'Paused' });
    const e2b = await get(t, '8000-sbx-app.localhost');
    expect(e2b.status).toBe(429);
    expect(e2b.headers['x-sandgate-error']).toBe('sandbox_not_ready');
    // The starting page's own checks: status, HTML, the reload after Retry-After, and no script.
    for (const headers of [{ 'sec-fetch-mode': 'navigate', accept: '*/*' }, { accept: 'text/html,application/xhtml+xml' }] as Record<string, string>[]) {
      const page = await get(t, '8000-app.team-a.localhost', headers);
      expect(page.status).toBe(503);
      expect(page.headers['content-type']).toContain('text/html');
      expect(page.body).toContain('<meta http-equiv="refresh" content="2">');
      expect(page.body).toContain('Starting…');
      expect(page.body).not.toContain('<script');
    }
    expect(driver.resumed).toEqual(['team-a/app']);
  });

  it('never wakes a sandbox being deleted (410 sandbox_gone) or one no longer there (404)', async () => {
    const driver = new TestDriver([paused(), paused({ name: 'doomed', uid: 'uid-doomed', state: 'deleting', conditions: [cond('Ready', 'False', 'Deleting')] })]);
    const t = await startTestGateway([driver], {});
    cleanup.push(() => t.close());
    const gone = await get(t, '8000-doomed.team-a.localhost');
    expect(gone.status).toBe(410);
    expect(JSON.parse(gone.body).code).toBe('sandbox_gone');
    driver.sink!.apply({ type: 'delete', namespace: 'team-a', name: 'app', uid: 'uid-app', resourceVersion: '9' });
    expect((await get(t, '8000-app.team-a.localhost')).status).toBe(404);
    expect(driver.resumed).toEqual([]);
  });

  it('refuses the wake with 429 namespace_quota_exceeded when the namespace runs --max-running-per-namespace, before any resume', async () => {
    const up = snapshot({ name: 'busy', uid: 'uid-busy', sessionModel: 'none', endpoint: { kind: 'address', addresses: ['127.0.0.1'] } });
    const driver = new TestDriver([up, paused(), paused({ namespace: 'team-b', uid: 'uid-b' })]);
    driver.onResume = async (namespace, name) => driver.upsert(running(paused({ namespace, name, uid: namespace === 'team-b' ? 'uid-b' : 'uid-app' }), '2'));
    const t = await startTestGateway([driver], { maxRunningPerNamespace: 1, upstreamConnectRetryMs: 0 });
    cleanup.push(() => t.close());
    const refused = await get(t, '8000-app.team-a.localhost');
    expect(refused.status).toBe(429);
    expect(JSON.parse(refused.body).code).toBe('namespace_quota_exceeded');
    expect(refused.headers['retry-after']).toBeDefined();
    expect(t.gw.view.get('team-a', 'app')!.status.phase).toBe('Paused');
    // Another namespace has room: its sandbox wakes (and, nothing listening, answers 502 from the port).
    expect((await get(t, '8000-app.team-b.localhost')).status).toBe(502);
    expect(driver.resumed).toEqual(['team-b/app']);
  });
});

describe.skipIf(CHROMIUM === undefined)(needsChromium('wake in Chromium'), () => {
  it('a navigation whose wake outlasts the budget sees the starting page, then the app, without a manual reload', async () => {
    const port = await freePort();
    const driver = new TestDriver([paused({ wakeTimeoutMs: 300 })]);
    // The backend takes longer than the budget: the sandbox runs only once the starting page was answered.
    let startingPage = (): void => undefined;
    const answeredStarting = new Promise<void>((r) => (startingPage = r));
    driver.onResume = async () => {
      void answeredStarting.then(() => app(port)).then(() => driver.upsert(running(paused({ wakeTimeoutMs: 300 }), '2')));
    };
    const t = await startTestGateway([driver], {});
    cleanup.push(() => t.close());
    const browser = await launchChromium();
    cleanup.push(() => browser.close());
    const page = await browser.newPage();
    const seen: string[] = [];
    page.on('response', (r) => {
      seen.push(`${r.status()}`);
      if (r.status() === 503) startingPage();
    });
    await page.goto(`http://${port}-app.team-a.localhost:${t.gw.proxyPort}/`);
    expect(await page.title()).toBe('Starting…');
    await page.waitForSelector('text=hello from the app', { timeout: 10_000 });
    expect(await page.title()).toBe('app');
    expect(seen[0]).toBe('503');
    expect(seen.at(-1)).toBe('200');
    expect(driver.resumed).toEqual(['team-a/app']);
  });
});
