import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { authzClient, check, envoyCheckRequest, json, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { rawRequest, text, viaProxy } from '../helpers/upstream.js';

/**
 * Id squatting through the doors: team-b's sandboxes declare team-a's legacy id and
 * an id team-a's sandbox already holds, from another driver, and are reported before it. Team-a's and
 * team-b's upstreams listen on the same port of two loopback addresses, so a request routed to the wrong
 * sandbox would really reach team-b's server: the test asserts it never does.
 */

interface Upstream {
  readonly server: Server;
  readonly seen: string[];
}

async function listen(host: string, port: number, who: string): Promise<Upstream & { port: number }> {
  const seen: string[] = [];
  const server = createServer((req, res) => {
    seen.push(req.url ?? '');
    res.end(who);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  return { server, seen, port: (server.address() as AddressInfo).port };
}

function close(s: Server): Promise<void> {
  s.closeAllConnections();
  return new Promise((r) => s.close(() => r()));
}

describe('id squatting through the doors', () => {
  let t: TestGateway;
  let teamA: Upstream;
  let teamB: Upstream;
  let port = 0;
  let authz: ReturnType<typeof authzClient>;
  const kube = new TestDriver([], 'kubernetes/openkruise');
  let remote: TestDriver;

  beforeAll(async () => {
    const a = await listen('127.0.0.2', 0, 'team-a');
    port = a.port;
    teamA = a;
    teamB = await listen('127.0.0.3', port, 'team-b');
    const at = (ip: string) => ({ kind: 'address' as const, addresses: [ip] });
    // The squatters come first, from another driver, and one of them declares a creation time after team-a's.
    remote = new TestDriver([
      snapshot({ namespace: 'team-b', name: 'evil', uid: 'b1', sessionModel: 'none', endpoint: at('127.0.0.3'), createdAt: 2000, ids: ['team-a--web', 'web-a', 'evil-b'] }),
      snapshot({ namespace: 'team-b', name: 'ageless', uid: 'b2', sessionModel: 'none', endpoint: at('127.0.0.3'), ids: ['web-a'] }),
    ], 'grpc/other');
    t = await startTestGateway([remote, kube], { readinessWaitMs: 0 });
    kube.sync([snapshot({ namespace: 'team-a', name: 'web', uid: 'a1', sessionModel: 'none', endpoint: at('127.0.0.2'), createdAt: 1000, ids: ['web-a'] })]);
    authz = authzClient(t.grpcTarget);
  });
  afterAll(async () => {
    authz.close();
    await t.close();
    await Promise.all([close(teamA.server), close(teamB.server)]);
  });

  // [what the request names, how] — each must reach team-a's upstream.
  const hostile: [string, { host?: (p: number) => string; headers?: (p: number) => Record<string, string> }][] = [
    ['team-a\'s legacy id in the host', { host: (p) => `${p}-team-a--web.localhost` }],
    ['team-a\'s legacy id in the E2B headers', { headers: (p) => ({ 'e2b-sandbox-id': 'team-a--web', 'e2b-sandbox-port': String(p) }) }],
    ['an id team-a holds, in the host', { host: (p) => `${p}-web-a.localhost` }],
    ['an id team-a holds, in the E2B headers', { headers: (p) => ({ 'e2b-sandbox-id': 'web-a', 'e2b-sandbox-port': String(p) }) }],
    ['team-a\'s namespace and name', { host: (p) => `${p}-web.team-a.localhost` }],
  ];

  it.each(hostile)('embedded proxy: %s reaches team-a, never team-b', async (_what, r) => {
    const before = teamB.seen.length;
    const res = await viaProxy(t.gw.proxyPort!, { host: r.host?.(port) ?? 'shared.localhost', path: '/probe', headers: r.headers?.(port) });
    expect(res.status).toBe(200);
    expect(await text(res)).toBe('team-a');
    expect(teamB.seen.length).toBe(before);
  });

  it.each(hostile)('HTTP authz: %s is answered with team-a\'s upstream', async (_what, r) => {
    const res = await rawRequest(t.gw.adminPort, '/authz/', { host: r.host?.(port) ?? 'shared.localhost', ...r.headers?.(port) });
    expect({ status: res.status, upstream: res.headers['x-sandgate-upstream'] }).toEqual({ status: 200, upstream: `127.0.0.2:${port}` });
  });

  it.each(hostile)('ext_authz: %s is answered with team-a\'s upstream', async (_what, r) => {
    const h = r.headers?.(port) ?? {};
    const res = await check(authz, envoyCheckRequest({ host: r.host?.(port) ?? 'shared.localhost', headers: h }));
    expect(res.http_response).toBe('ok_response');
    const set = (res.ok_response.headers as { header: { key: string; value: string } }[]).find((x) => x.header.key === 'x-sandgate-upstream');
    expect(set?.header.value).toBe(`127.0.0.2:${port}`);
  });

  it('team-b keeps the id nobody else claimed', async () => {
    const res = await viaProxy(t.gw.proxyPort!, { host: `${port}-evil-b.localhost` });
    expect(await text(res)).toBe('team-b');
  });

  it('the refused sandboxes show an IdConflict condition in the status API, and the gateway warns and counts', async () => {
    const evil = await json(await fetch(`${t.admin}/v1/sandboxes/team-b/evil`));
    const c = evil.conditions.find((x: { type: string }) => x.type === 'IdConflict');
    expect(c).toMatchObject({ status: 'True', reason: 'IdInUse' });
    expect(JSON.stringify(evil)).not.toContain('team-a/web');
    const ageless = await json(await fetch(`${t.admin}/v1/sandboxes/team-b/ageless`));
    expect(ageless.conditions.some((x: { type: string }) => x.type === 'IdConflict')).toBe(true);
    const web = await json(await fetch(`${t.admin}/v1/sandboxes/team-a/web`));
    expect(web.conditions.some((x: { type: string }) => x.type === 'IdConflict')).toBe(false);

    const warnings = t.logs.lines.filter((l) => l.part === 'drivers' && l.level === 40 && typeof l.id === 'string');
    expect(warnings.map((l) => [l.driver, l.namespace, l.name, l.id, l.reason]).sort()).toEqual(
      [
        ['grpc/other', 'team-b', 'evil', 'team-a--web', 'names_another_sandbox'],
        ['grpc/other', 'team-b', 'evil', 'web-a', 'in_use'],
        ['grpc/other', 'team-b', 'ageless', 'web-a', 'in_use'],
      ].sort(),
    );
    const metrics = await (await fetch(`${t.admin}/metrics`)).text();
    expect(metrics).toContain('sandgate_view_refused_ids{reason="in_use"} 2');
    expect(metrics).toContain('sandgate_view_refused_ids{reason="names_another_sandbox"} 1');
    expect(metrics).toContain('sandgate_drivers_refused_ids_total{driver="grpc/other",reason="in_use"} 2');
  });
});
