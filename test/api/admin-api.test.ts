import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { presence, snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { json, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { readEvents } from '../helpers/sse.js';

describe('admin API', () => {
  let t: TestGateway;
  let driver: TestDriver;
  beforeAll(async () => {
    driver = new TestDriver([
      snapshot({ name: 'web', sessionModel: 'none' }),
      snapshot({ name: 'notebook', uid: 'u2' }),
      snapshot({ namespace: 'team-b', name: 'agent', uid: 'u3', state: 'paused' }),
    ]);
    t = await startTestGateway([driver]);
  });
  afterAll(() => t.close());

  it('/healthz and /readyz', async () => {
    expect(await json(await fetch(`${t.admin}/healthz`))).toEqual({ status: 'ok' });
    const r = await fetch(`${t.admin}/readyz`);
    expect(r.status).toBe(200);
    expect(await json(r)).toEqual({ status: 'ready', notReady: [], degraded: [] });
  });

  it('lists sandboxes, filtered by namespace and phase', async () => {
    const all = await json(await fetch(`${t.admin}/v1/sandboxes`));
    expect(all.items).toHaveLength(3);
    const b = await json(await fetch(`${t.admin}/v1/sandboxes?namespace=team-b`));
    expect(b.items.map((s: any) => s.name)).toEqual(['agent']);
    const prov = await json(await fetch(`${t.admin}/v1/sandboxes?phase=Provisioning`));
    expect(prov.items.map((s: any) => s.name)).toEqual(['notebook']);
    const bad = await fetch(`${t.admin}/v1/sandboxes?phase=Running`);
    expect(bad.status).toBe(400);
    expect((await json(bad)).code).toBe('invalid_request');
  });

  it('shows one sandbox with phase, conditions, endpoint and the owning gateway', async () => {
    t.gw.view.setPresence('team-a', 'notebook', presence({ gatewayId: 'gw-b', since: Date.parse('2026-01-01T00:00:00Z') }));
    const s = await json(await fetch(`${t.admin}/v1/sandboxes/team-a/notebook`));
    expect(s).toMatchObject({ namespace: 'team-a', name: 'notebook', phase: 'Ready', reason: 'DependenciesReady', session: { gatewayId: 'gw-b', since: '2026-01-01T00:00:00.000Z' } });
    expect(s.conditions[0]).toMatchObject({ type: 'Ready', status: 'True' });
    expect(s.endpoint).toEqual({ kind: 'address', addresses: ['10.0.0.1'] });
    t.gw.view.setPresence('team-a', 'notebook', undefined);
  });

  it('typed errors for unknown sandboxes, bad names, unknown paths and methods', async () => {
    const nf = await fetch(`${t.admin}/v1/sandboxes/team-a/nope`);
    expect([nf.status, (await json(nf)).code]).toEqual([404, 'sandbox_not_found']);
    const bad = await fetch(`${t.admin}/v1/sandboxes/Team_A/x`);
    expect([bad.status, (await json(bad)).code]).toEqual([400, 'invalid_request']);
    const np = await fetch(`${t.admin}/nope`);
    expect([np.status, (await json(np)).code]).toEqual([404, 'not_found']);
    const m = await fetch(`${t.admin}/v1/sandboxes`, { method: 'DELETE' });
    expect([m.status, (await json(m)).code]).toEqual([405, 'method_not_allowed']);
  });

  it('watch: reset, full state, synced, then changes', async () => {
    const res = await fetch(`${t.admin}/v1/sandboxes/watch?namespace=team-a`);
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    // The watch registered its client before answering the headers fetch() awaited: no wait needed.
    const pending = readEvents(res, 5);
    driver.upsert(snapshot({ namespace: 'team-b', name: 'agent', uid: 'u3', resourceVersion: '2' }));
    driver.upsert(snapshot({ name: 'web', resourceVersion: '2', state: 'paused', sessionModel: 'none' }));
    const events = await pending;
    expect(events.map((e) => e.event)).toEqual(['reset', 'upsert', 'upsert', 'synced', 'upsert']);
    expect(events[4]!.data).toMatchObject({ name: 'web', phase: 'Paused' });
    expect(Number(events[4]!.id)).toBeGreaterThan(Number(events[3]!.id));
  });

  it('watch keeps a reading client through a burst of changes in one tick (backpressure, not a drop)', async () => {
    const res = await fetch(`${t.admin}/v1/sandboxes/watch?namespace=team-c`);
    const burst = 5000;
    // The watch registered its client before answering the headers fetch() awaited: no wait needed.
    const pending = readEvents(res, 2 + burst);
    const big = 'x'.repeat(200);
    for (let i = 0; i < burst; i++) driver.upsert(snapshot({ namespace: 'team-c', name: 'burst', uid: 'burst', resourceVersion: String(i + 1), sessionModel: 'none', ids: [`id-${i}-${big.slice(0, 40)}`] }));
    const events = await pending;
    expect(events.filter((e) => e.event === 'upsert')).toHaveLength(burst);
    expect(events.at(-1)!.data.resourceVersion).toBe(String(burst));
  });

  it('watch resumes with Last-Event-ID, or resets when too old', async () => {
    const first = await readEvents(await fetch(`${t.admin}/v1/sandboxes/watch?namespace=team-a`), 4);
    const synced = first.find((e) => e.event === 'synced')!;
    driver.upsert(snapshot({ name: 'web', resourceVersion: '3', sessionModel: 'none' }));
    const resumed = await readEvents(await fetch(`${t.admin}/v1/sandboxes/watch?namespace=team-a`, { headers: { 'last-event-id': synced.id! } }), 1);
    expect(resumed[0]).toMatchObject({ event: 'upsert', data: { name: 'web', phase: 'Ready' } });
    const future = await readEvents(await fetch(`${t.admin}/v1/sandboxes/watch`, { headers: { 'last-event-id': '999999' } }), 1);
    expect(future[0]!.event).toBe('reset');
  });
});
