import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeApiKeyFiles } from '../helpers/api-key-files.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { rawRequest } from '../helpers/upstream.js';

/**
 * The operator surface against a hostile site and a hostile tenant: no answer of it may be framed
 * (clickjacking the console, which shows tenant data and holds a key), walked page by page on every
 * listener that serves it; and the gateway-wide counters behind the console's charts are the admin
 * team's only — a team key must not read another team's traffic there.
 */

const PEPPER = 'pepper-for-framing-tests-0123456789abcdef0123456';

async function keys(): Promise<{ keysFile: string; pepperFile: string; admin: string; team: string }> {
  const { keysFile, pepperFile, keys: k } = await writeApiKeyFiles(PEPPER, { admin: 'admin', team: 'team-a' });
  return { keysFile, pepperFile, ...k };
}

function expectNotFramed(r: Response, what: string): void {
  expect(r.headers.get('x-frame-options'), what).toBe('DENY');
  expect(r.headers.get('content-security-policy') ?? '', what).toContain("frame-ancestors 'none'");
}

/** Every operator page: the console, its assets (as the page names them), its API, the static table, the API, metrics, health. */
async function operatorPages(base: string, headers: Record<string, string>): Promise<string[]> {
  const page = await (await fetch(`${base}/console`, { headers })).text();
  const assets = [...page.matchAll(/(?:src|href)="(\/console\/assets\/[^"]+)"/g)].map((m) => m[1]!);
  expect(assets.length).toBeGreaterThan(3);
  return [
    '/console',
    '/console/',
    ...assets,
    '/console/assets/no-such.js',
    '/console/table',
    '/console/table?phase=Nope',
    '/console/api/overview',
    '/console/api/gateways',
    '/console/api/stats',
    '/console/api/phase-changes?namespace=team-a&name=web',
    '/console/nothing',
    '/v1/sandboxes',
    '/v1/sandboxes/team-a/web',
    '/metrics',
    '/healthz',
    '/readyz',
    '/no/such/route',
  ];
}

describe('operator pages cannot be framed', () => {
  let t: TestGateway;
  let k: Awaited<ReturnType<typeof keys>>;
  beforeAll(async () => {
    k = await keys();
    t = await startTestGateway([new TestDriver([snapshot({ sessionModel: 'none' })])], { apiKeys: k.keysFile, keyPepperFile: k.pepperFile, opsPort: 0 });
  });
  afterAll(() => t.close());

  it('every page of the ops port, with and without a key, says frame-ancestors none and X-Frame-Options DENY', async () => {
    const ops = `http://127.0.0.1:${t.gw.opsPort}`;
    for (const headers of [{ 'x-api-key': k.admin }, { 'x-api-key': k.team }, {}] as Record<string, string>[]) {
      for (const path of await operatorPages(ops, headers)) expectNotFramed(await fetch(ops + path, { headers }), `${path} ${Object.keys(headers).join()}`);
    }
  });

  it('the admin port beside it (health only) too', async () => {
    for (const path of ['/healthz', '/readyz', '/console', '/v1/sandboxes']) expectNotFramed(await fetch(t.admin + path), path);
  });
});

describe('/console/api/stats: gateway-wide figures are the admin team\'s only', () => {
  let t: TestGateway;
  let k: Awaited<ReturnType<typeof keys>>;
  beforeAll(async () => {
    k = await keys();
    t = await startTestGateway([new TestDriver([snapshot({ namespace: 'team-b', name: 'db', sessionModel: 'none' })])], { apiKeys: k.keysFile, keyPepperFile: k.pepperFile });
    // team-b's traffic: a denial counted gateway-wide.
    await rawRequest(t.gw.proxyPort!, '/', { host: '8000-nothing.team-b.localhost' });
  });
  afterAll(() => t.close());

  it("a team key gets no gateway-wide figures (another team's decisions); the admin key reads them; no key is refused", async () => {
    const team = await fetch(`${t.admin}/console/api/stats`, { headers: { 'x-api-key': k.team } });
    const body = (await team.json()) as Record<string, unknown>;
    expect(team.status).toBe(200);
    expect(body).toMatchObject({ gatewayWide: false, decisions: {}, waits: {}, latency: { le: [], counts: [] }, namespaces: {} });
    const admin = await fetch(`${t.admin}/console/api/stats`, { headers: { 'x-api-key': k.admin } });
    expect(admin.status).toBe(200);
    const figures = ((await admin.json()) as { decisions: Record<string, number> }).decisions;
    expect(Object.values(figures).reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    expect((await fetch(`${t.admin}/console/api/stats`)).status).toBe(401);
  });

  it('the rest of the console stays a team\'s: its overview and table answer', async () => {
    for (const path of ['/console/api/overview', '/console/api/gateways', '/console/table']) expect((await fetch(t.admin + path, { headers: { 'x-api-key': k.team } })).status, path).toBe(200);
  });
});
