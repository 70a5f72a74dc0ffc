import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rawRequest } from '../helpers/upstream.js';
import { ConsoleAssets } from '../../src/api/console/console-assets.js';
import { newApiKey } from '../../src/auth/api-keys.js';
import { presence, snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';

/** The console's HTTP routes without a browser: authorization, hostile paths and parameters, escaping. */

/** A raw request: the path goes out exactly as written (fetch would normalise `..`). */
const raw = rawRequest;

const DATA_ROUTES = ['/console/table', '/console/api/overview', '/console/api/gateways', '/console/api/stats', '/console/api/phase-changes?namespace=team-a&name=web'];

describe('console routes', () => {
  let t: TestGateway;
  let port: number;
  let admin: Record<string, string>;
  let teamA: Record<string, string>;

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sandgate-console-api-'));
    const pepper = randomBytes(32).toString('base64');
    const a = newApiKey(new TextEncoder().encode(pepper), 'admin');
    const b = newApiKey(new TextEncoder().encode(pepper), 'team-a');
    writeFileSync(join(dir, 'keys.yaml'), `keys:\n  - ${JSON.stringify(a.record)}\n  - ${JSON.stringify(b.record)}\n`);
    writeFileSync(join(dir, 'pepper'), pepper);
    admin = { 'x-api-key': a.key };
    teamA = { 'x-api-key': b.key };
    const driver = new TestDriver([
      snapshot({ name: 'web', sessionModel: 'none', ids: ['<script>alert(1)</script>'] }),
      snapshot({ name: 'notebook', uid: 'u2' }),
      snapshot({ namespace: 'team-b', name: 'agent', uid: 'u3' }),
    ]);
    t = await startTestGateway([driver], { apiKeys: join(dir, 'keys.yaml'), keyPepperFile: join(dir, 'pepper'), metricsNamespaces: ['team-a', 'team-b'] });
    port = t.gw.adminPort;
    // Sessions held by a peer gateway with no live lease here, in both teams.
    t.gw.view.setPresence('team-a', 'notebook', presence({ gatewayId: 'gw-peer', since: Date.parse('2026-01-01T00:00:00Z') }));
    t.gw.view.setPresence('team-b', 'agent', presence({ gatewayId: 'gw-peer', sessionId: 's-2' }));
  });
  afterAll(() => t.close());

  it('the page and its assets need no key (they hold no data) and carry a strict CSP; the page names the key header', async () => {
    const page = await raw(port, '/console');
    expect(page.status).toBe(200);
    expect(page.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(page.headers['content-security-policy']).toContain("script-src 'self'");
    expect(page.headers['content-security-policy']).toContain("frame-ancestors 'none'");
    expect(page.body).toContain('<meta name="sandgate-api-key-header" content="x-api-key">');
    expect(page.body).toContain('href="/console/table"');
    const uplot = await raw(port, '/console/assets/uplot.min.js');
    expect([uplot.status, uplot.headers['content-type']]).toEqual([200, 'text/javascript; charset=utf-8']);
    expect(uplot.body).toMatch(/^\/\*! https:\/\/github.com\/leeoniya\/uPlot/);
    const again = await raw(port, '/console/assets/uplot.min.js', { 'if-none-match': String(uplot.headers.etag) });
    expect([again.status, again.body]).toEqual([304, '']);
    for (const name of ['console.js', 'console.css', 'sse-reader.js', 'uplot.min.css']) expect((await raw(port, `/console/assets/${name}`)).status).toBe(200);
    const head = await raw(port, '/console', {}, 'HEAD');
    expect([head.status, head.body]).toEqual([200, '']);
  });

  it('asset names never reach the file system: traversal, encoded traversal and unknown names are 404 not_found', async () => {
    for (const path of ['/console/assets/../../package.json', '/console/assets/%2e%2e%2fpackage.json', '/console/assets/..%2F..%2Fpackage.json', '/console/assets/index.html', '/console/assets/nope.js', '/console/assets/', '/console/nope']) {
      const r = await raw(port, path);
      expect([path, r.status, JSON.parse(r.body).code]).toEqual([path, 404, 'not_found']);
    }
    const post = await raw(port, '/console', {}, 'POST');
    expect([post.status, JSON.parse(post.body).code]).toEqual([405, 'method_not_allowed']);
  });

  it('every data route: no key → 401 api_key_required, a wrong or repeated key → 401 api_key_invalid', async () => {
    for (const path of DATA_ROUTES) {
      const none = await raw(port, path);
      expect([path, none.status, JSON.parse(none.body).code]).toEqual([path, 401, 'api_key_required']);
      const wrong = await raw(port, path, { 'x-api-key': 'sgk_wrong' });
      expect([path, wrong.status, JSON.parse(wrong.body).code]).toEqual([path, 401, 'api_key_invalid']);
    }
    const watch = await raw(port, '/v1/sandboxes/watch');
    expect([watch.status, JSON.parse(watch.body).code]).toEqual([401, 'api_key_required']);
  });

  it('the static table: all for admin, only its namespace for a team, escaped, bounded, with typed errors for bad parameters', async () => {
    const all = await raw(port, '/console/table', admin);
    expect(all.status).toBe(200);
    expect(all.headers['content-security-policy']).toBe("default-src 'none'; frame-ancestors 'none'");
    expect(all.body).toContain('<td>team-b</td>');
    expect(all.body).toContain('&lt;script&gt;alert(1)&lt;/script&gt;');
    expect(all.body).not.toContain('<script>');
    expect(all.body).toContain('<td>gw-peer since 2026-01-01T00:00:00.000Z</td>');
    const mine = await raw(port, '/console/table', teamA);
    expect(mine.body).toContain('<td>notebook</td>');
    expect(mine.body).not.toContain('team-b');
    expect(mine.body).toContain('<p>2 sandboxes.</p>');
    const one = await raw(port, '/console/table?limit=1', admin);
    expect(one.body).toContain('Showing 1 of 3 sandboxes');
    const paused = await raw(port, '/console/table?phase=Paused', admin);
    expect(paused.body).toContain('<p>0 sandboxes.</p>');
    for (const q of ['namespace=Team_A', 'phase=Sleeping', 'limit=0', 'limit=abc', 'limit=1000001', 'limit=-1']) {
      const r = await raw(port, `/console/table?${q}`, admin);
      expect([q, r.status, JSON.parse(r.body).code]).toEqual([q, 400, 'invalid_request']);
    }
  });

  it('gateways: this gateway and the peer holding sessions; session counts only over the namespaces the key may see', async () => {
    const all = JSON.parse((await raw(port, '/console/api/gateways', admin)).body);
    expect(all).toMatchObject({ gatewayId: 'gw-test', presence: 'memory', degraded: [] });
    expect(all.gateways).toEqual([
      { gatewayId: 'gw-peer', self: false, live: false, relay: null, expiresInMs: null, sessions: 2 },
      { gatewayId: 'gw-test', self: true, live: true, relay: t.gw.relayAddress, expiresInMs: null, sessions: 0 },
    ]);
    const mine = JSON.parse((await raw(port, '/console/api/gateways', teamA)).body);
    expect(mine.gateways.find((g: any) => g.gatewayId === 'gw-peer').sessions).toBe(1);
  });

  it('stats: the decision counters and latency buckets of /metrics, summed over doors; overview: the composition rules', async () => {
    const before = JSON.parse((await raw(port, '/console/api/stats', admin)).body);
    expect(before.latency.le.at(-1)).toBeNull();
    expect(before.latency.counts).toHaveLength(before.latency.le.length);
    await raw(port, '/authz/', { host: '8000-web.team-a.localhost', ...admin });
    await raw(port, '/authz/', { host: '8000-missing.team-a.localhost', ...admin });
    const after = JSON.parse((await raw(port, '/console/api/stats', admin)).body);
    expect(after.decisions.ok - before.decisions.ok).toBe(1);
    expect(after.decisions.sandbox_not_found - before.decisions.sandbox_not_found).toBe(1);
    expect(after.latency.counts.at(-1) - before.latency.counts.at(-1)).toBe(2);
    expect(after.t).toBeGreaterThanOrEqual(before.t);
    // Decisions by tenant namespace (--metrics-namespaces): the admin sees every listed one and `other`; a
    // team sees its own namespace only.
    expect(after.namespaces['team-a'] - (before.namespaces['team-a'] ?? 0)).toBe(2);
    expect(Object.keys(after.namespaces).sort()).toEqual(['other', 'team-a', 'team-b']);
    const team = JSON.parse((await raw(port, '/console/api/stats', teamA)).body);
    expect(Object.keys(team.namespaces)).toEqual(['team-a']);
    const overview = JSON.parse((await raw(port, '/console/api/overview', teamA)).body);
    expect(overview).toMatchObject({ gatewayId: 'gw-test', synced: true });
    expect(overview.rules.find((r: any) => r.name === 'supervisor-not-connected')).toMatchObject({ phase: 'Provisioning' });
  });
  it("a team key gets 404 for another team's sandbox, exactly as for a missing one", async () => {
    const phase = JSON.parse((await raw(port, '/console/api/phase-changes?namespace=team-b&name=agent', teamA)).body);
    const missing = JSON.parse((await raw(port, '/console/api/phase-changes?namespace=team-a&name=nope', teamA)).body);
    expect(phase.code).toBe('sandbox_not_found');
    expect(missing.code).toBe('sandbox_not_found');
    expect((await raw(port, '/console/api/phase-changes?namespace=team-b&name=agent', admin)).status).toBe(200);
  });
});

describe('console phase changes', () => {
  it("a sandbox's recent phase changes, newest first, with reason and rule; other tenants' and missing sandboxes are 404; bad names 400", async () => {
    const driver = new TestDriver([snapshot({ name: 'notebook' }), snapshot({ namespace: 'team-b', name: 'agent', uid: 'u2' })]);
    const t = await startTestGateway([driver]);
    try {
      t.gw.view.setPresence('team-a', 'notebook', presence());
      t.gw.view.setPresence('team-a', 'notebook', presence({ epoch: 2, sessionId: 's-2' }));
      t.gw.view.setPresence('team-a', 'notebook', undefined);
      const r = await raw(t.gw.adminPort, '/console/api/phase-changes?namespace=team-a&name=notebook');
      const items = JSON.parse(r.body).items;
      // The second session replaced the first without a phase change: not recorded.
      expect(items.map((c: any) => [c.from, c.to, c.rule])).toEqual([
        ['Ready', 'Provisioning', 'supervisor-not-connected'],
        ['Provisioning', 'Ready', 'ready-with-session'],
        [null, 'Provisioning', 'supervisor-not-connected'],
      ]);
      expect(items[0].reason).toBe('SupervisorNotConnected');
      expect(Date.parse(items[0].at)).toBeGreaterThanOrEqual(Date.parse(items[2].at));
      for (const q of ['namespace=team-a&name=nope', 'namespace=team-c&name=notebook']) {
        const missing = await raw(t.gw.adminPort, `/console/api/phase-changes?${q}`);
        expect([q, missing.status, JSON.parse(missing.body).code]).toEqual([q, 404, 'sandbox_not_found']);
      }
      for (const q of ['namespace=team-a', 'name=notebook', 'namespace=Team-A&name=notebook', 'namespace=team-a&name=a%2Fb']) {
        const bad = await raw(t.gw.adminPort, `/console/api/phase-changes?${q}`);
        expect([q, bad.status, JSON.parse(bad.body).code]).toEqual([q, 400, 'invalid_request']);
      }
    } finally {
      await t.close();
    }
  });

});

describe('console with --ops-port', () => {
  it('is served on the ops port only; the decision door (admin port) answers 404 for it', async () => {
    const t = await startTestGateway([new TestDriver([snapshot()])], { opsPort: 0, opsListenHost: '127.0.0.1' });
    try {
      expect((await raw(t.gw.opsPort!, '/console')).status).toBe(200);
      expect((await raw(t.gw.opsPort!, '/console/table')).body).toContain('<td>web</td>');
      for (const path of ['/console', '/console/assets/console.js', '/console/table', '/console/api/stats']) {
        const r = await raw(t.gw.adminPort, path);
        expect([path, r.status, JSON.parse(r.body).code]).toEqual([path, 404, 'not_found']);
      }
    } finally {
      await t.close();
    }
  });
});

describe('console files', () => {
  it('a package without its console files refuses to start with config_invalid, naming --no-console', () => {
    expect(() => new ConsoleAssets(join(tmpdir(), 'no-such-console-dir'), 'x-api-key')).toThrow(expect.objectContaining({ code: 'config_invalid', message: expect.stringContaining('--no-console') }));
  });
});

describe('console off', () => {
  it('--no-console: /console is 404 and the API is unchanged', async () => {
    const t = await startTestGateway([new TestDriver([snapshot()])], { console: false });
    try {
      expect((await raw(t.gw.adminPort, '/console')).status).toBe(404);
      expect((await raw(t.gw.adminPort, '/v1/sandboxes')).status).toBe(200);
    } finally {
      await t.close();
    }
  });
});
