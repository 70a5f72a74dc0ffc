import { afterEach, describe, expect, it, vi } from 'vitest';
import { isStale, SandboxView } from '../../src/view/sandbox-view.js';
import { cond, presence, snapshot } from '../helpers/snapshots.js';

function makeView(now = { t: 1_000_000 }) {
  return { view: new SandboxView({ now: () => now.t, tombstoneTtlMs: 60_000, waiters: { perSandbox: 2, total: 3 } }), now };
}

describe('SandboxView ordering and fences', () => {
  it('drops a snapshot older than the one held (resourceVersion)', () => {
    const { view } = makeView();
    expect(view.apply('d', { type: 'upsert', snapshot: snapshot({ resourceVersion: '10', state: 'paused' }) })).toBe(true);
    expect(view.apply('d', { type: 'upsert', snapshot: snapshot({ resourceVersion: '9', state: 'ready' }) })).toBe(false);
    expect(view.apply('d', { type: 'upsert', snapshot: snapshot({ resourceVersion: '10', state: 'ready' }) })).toBe(false);
    expect(view.get('team-a', 'web')?.status.phase).toBe('Paused');
    expect(view.apply('d', { type: 'upsert', snapshot: snapshot({ resourceVersion: '11', state: 'starting' }) })).toBe(true);
    expect(view.get('team-a', 'web')?.status.phase).toBe('Provisioning');
  });

  it('get() finds each sandbox by namespace and name, apart from same-named sandboxes of other namespaces, through deletes, relists and re-adds', () => {
    const { view } = makeView();
    view.registerDriver('d');
    view.apply('d', { type: 'upsert', snapshot: snapshot({ namespace: 'team-a', name: 'web', uid: 'a1' }) });
    view.apply('d', { type: 'upsert', snapshot: snapshot({ namespace: 'team-b', name: 'web', uid: 'b1' }) });
    expect([view.get('team-a', 'web')?.snapshot.uid, view.get('team-b', 'web')?.snapshot.uid, view.get('team-c', 'web')]).toEqual(['a1', 'b1', undefined]);
    view.apply('d', { type: 'delete', namespace: 'team-a', name: 'web', uid: 'a1', resourceVersion: '2' });
    expect([view.get('team-a', 'web'), view.get('team-b', 'web')?.snapshot.uid]).toEqual([undefined, 'b1']);
    view.apply('d', { type: 'upsert', snapshot: snapshot({ namespace: 'team-a', name: 'web', uid: 'a2' }) });
    expect(view.get('team-a', 'web')?.snapshot.uid).toBe('a2');
    // A relist without team-b's sandbox removes it; get() agrees with the entries the view lists.
    view.replace('d', [snapshot({ namespace: 'team-a', name: 'web', uid: 'a2' })]);
    expect([view.get('team-a', 'web')?.snapshot.uid, view.get('team-b', 'web')]).toEqual(['a2', undefined]);
    expect([...view.list()].map((e) => e.key)).toEqual(['team-a/web']);
  });

  // One line per pair of versions, grouped by what each probes.
  it('orders decimal versions numerically, not as strings', () => {
    expect(isStale('9', '10')).toBe(false);
    expect(isStale('10', '9')).toBe(true);
    expect(isStale('100', '0100')).toBe(true);
    expect(isStale('abc', 'abd')).toBe(false);
    expect(isStale('abc', 'abc')).toBe(true);
    // Leading zeros, zero itself, and equal lengths compared digit by digit.
    expect(isStale('0', '00')).toBe(true);
    expect(isStale('0', '1')).toBe(false);
    expect(isStale('009', '10')).toBe(false);
    expect(isStale('12345', '12346')).toBe(false);
    expect(isStale('12346', '12345')).toBe(true);
    expect(isStale('12345', '012345')).toBe(true);
    expect(isStale('', '1')).toBe(false);
  });

  it('a late update cannot resurrect a deleted sandbox (tombstone)', () => {
    const { view } = makeView();
    view.apply('d', { type: 'upsert', snapshot: snapshot({ resourceVersion: '5' }) });
    expect(view.apply('d', { type: 'delete', namespace: 'team-a', name: 'web', uid: 'uid-1', resourceVersion: '6' })).toBe(true);
    expect(view.get('team-a', 'web')).toBeUndefined();
    expect(view.apply('d', { type: 'upsert', snapshot: snapshot({ resourceVersion: '7' }) })).toBe(false);
    expect(view.get('team-a', 'web')).toBeUndefined();
  });

  it('the fence lifts after its TTL', () => {
    const { view, now } = makeView();
    view.apply('d', { type: 'upsert', snapshot: snapshot() });
    view.apply('d', { type: 'delete', namespace: 'team-a', name: 'web', uid: 'uid-1', resourceVersion: '2' });
    now.t += 60_001;
    view.tick();
    expect(view.apply('d', { type: 'upsert', snapshot: snapshot({ resourceVersion: '3' }) })).toBe(true);
  });

  it('a re-created sandbox (new uid) replaces the old one, and the old incarnation is fenced', () => {
    const { view } = makeView();
    view.apply('d', { type: 'upsert', snapshot: snapshot({ uid: 'old', resourceVersion: '5' }) });
    expect(view.apply('d', { type: 'upsert', snapshot: snapshot({ uid: 'new', resourceVersion: '3', state: 'paused' }) })).toBe(true);
    expect(view.get('team-a', 'web')?.snapshot.uid).toBe('new');
    expect(view.apply('d', { type: 'upsert', snapshot: snapshot({ uid: 'old', resourceVersion: '6' }) })).toBe(false);
    expect(view.apply('d', { type: 'delete', namespace: 'team-a', name: 'web', uid: 'old', resourceVersion: '7' })).toBe(false);
    expect(view.get('team-a', 'web')?.snapshot.uid).toBe('new');
  });

  it('replace() removes what a driver no longer lists and marks it synced', () => {
    const { view } = makeView();
    view.registerDriver('d');
    view.registerDriver('e');
    expect(view.synced).toBe(false);
    view.replace('d', [snapshot(), snapshot({ name: 'api', uid: 'uid-2' })]);
    expect(view.synced).toBe(false);
    expect(view.unsyncedDrivers()).toEqual(['e']);
    view.replace('e', [snapshot({ namespace: 'team-b', uid: 'uid-3' })]);
    expect(view.synced).toBe(true);
    view.replace('d', [snapshot({ resourceVersion: '2' })]);
    expect(view.get('team-a', 'api')).toBeUndefined();
    expect(view.get('team-b', 'web')).toBeDefined();
    expect(view.size).toBe(2);
  });
});

describe('SandboxView presence and ids', () => {
  it('presence that arrives before the snapshot counts when the snapshot comes', () => {
    const { view } = makeView();
    view.setPresence('team-a', 'web', presence());
    view.apply('d', { type: 'upsert', snapshot: snapshot() });
    expect(view.get('team-a', 'web')?.status.phase).toBe('Ready');
    view.setPresence('team-a', 'web', undefined);
    expect(view.get('team-a', 'web')?.status.phase).toBe('Provisioning');
    expect(view.get('team-a', 'web')?.status.reason).toBe('SupervisorNotConnected');
  });

  it('a later Ready snapshot without a session does not promote', () => {
    const { view } = makeView();
    view.apply('d', { type: 'upsert', snapshot: snapshot() });
    view.apply('d', { type: 'upsert', snapshot: snapshot({ resourceVersion: '2', conditions: [cond('Ready', 'True', 'DependenciesReady')] }) });
    expect(view.get('team-a', 'web')?.status.phase).toBe('Provisioning');
  });

  it('Error stays sticky across presence changes and same-instance snapshots', () => {
    const { view } = makeView();
    view.apply('d', { type: 'upsert', snapshot: snapshot({ state: 'failed' }) });
    view.apply('d', { type: 'upsert', snapshot: snapshot({ resourceVersion: '2' }) });
    view.setPresence('team-a', 'web', presence());
    expect(view.get('team-a', 'web')?.status.phase).toBe('Error');
    view.apply('d', { type: 'upsert', snapshot: snapshot({ resourceVersion: '3', instanceId: 'inst-2' }) });
    expect(view.get('team-a', 'web')?.status.phase).toBe('Ready');
  });

  it('resolves ids and the legacy <namespace>--<name> id, and forgets ids that go away', () => {
    const { view } = makeView();
    view.apply('d', { type: 'upsert', snapshot: snapshot({ ids: ['sbx-1'] }) });
    view.apply('d', { type: 'upsert', snapshot: snapshot({ namespace: 'a--b', name: 'c', uid: 'u2' }) });
    expect(view.getById('sbx-1')?.name).toBe('web');
    expect(view.getById('team-a--web')?.name).toBe('web');
    expect(view.getById('a--b--c')?.namespace).toBe('a--b');
    expect(view.getById('nope')).toBeUndefined();
    view.apply('d', { type: 'upsert', snapshot: snapshot({ resourceVersion: '2', ids: ['sbx-2'] }) });
    expect(view.getById('sbx-1')).toBeUndefined();
    expect(view.getById('sbx-2')?.name).toBe('web');
  });

  it('brackets IPv6 upstream hosts', () => {
    const { view } = makeView();
    view.apply('d', { type: 'upsert', snapshot: snapshot({ endpoint: { kind: 'address', addresses: ['fd00::1'] } }) });
    expect(view.get('team-a', 'web')?.upstreamHost).toBe('[fd00::1]');
  });

  it('an update keeps the held upstream host and port set while they stay the same, and replaces them when they change', () => {
    const { view } = makeView();
    const at = (rv: string, addresses: string[], ports: number[] | undefined) => view.apply('d', { type: 'upsert', snapshot: snapshot({ resourceVersion: rv, endpoint: { kind: 'address', addresses }, ports }) });
    at('1', ['10.0.0.1'], [8000, 9000]);
    const first = view.get('team-a', 'web')!;
    at('2', ['10.0.0.1'], [8000, 9000]);
    const same = view.get('team-a', 'web')!;
    expect(same).not.toBe(first);
    expect(same.ports).toBe(first.ports);
    expect(same.upstreamHost).toBe('10.0.0.1');
    at('3', ['fd00::2'], [8000]);
    expect([view.get('team-a', 'web')!.upstreamHost, [...view.get('team-a', 'web')!.ports!]]).toEqual(['[fd00::2]', [8000]]);
    at('4', ['fd00::2'], [9000]);
    expect([...view.get('team-a', 'web')!.ports!]).toEqual([9000]);
    at('5', ['fd00::2'], undefined);
    expect(view.get('team-a', 'web')!.ports).toBeUndefined();
    view.apply('d', { type: 'upsert', snapshot: snapshot({ resourceVersion: '6', endpoint: { kind: 'service', fqdn: 'web.team-a.svc.cluster.local' } }) });
    expect(view.get('team-a', 'web')!.upstreamHost).toBe('web.team-a.svc.cluster.local');
    view.apply('d', { type: 'upsert', snapshot: snapshot({ resourceVersion: '7', endpoint: { kind: 'relay' } }) });
    expect(view.get('team-a', 'web')!.upstreamHost).toBeUndefined();
  });

  it('an update of the same incarnation keeps the held objects where they are equal, and reads exactly as the update', () => {
    const { view } = makeView();
    const ready = { ...cond('Ready', 'True', 'Up'), lastTransitionTime: '2026-01-01T00:00:00.000Z' };
    const other = cond('Scheduled', 'True', 'Done');
    view.apply('d', { type: 'upsert', snapshot: snapshot({ resourceVersion: '1', ids: ['sbx-1'], conditions: [ready, other], endpoint: { kind: 'address', addresses: ['10.0.0.1'] }, ports: [8000] }) });
    const first = view.get('team-a', 'web')!.snapshot;
    const next = snapshot({ resourceVersion: '2', ids: ['sbx-1'], conditions: [{ ...cond('Ready', 'True', 'Up'), lastTransitionTime: '2026-01-01T00:00:01.000Z' }, cond('Scheduled', 'True', 'Done')], endpoint: { kind: 'address', addresses: ['10.0.0.1'] }, ports: [8000] });
    view.apply('d', { type: 'upsert', snapshot: next });
    const held = view.get('team-a', 'web')!.snapshot;
    expect(held).toEqual(next);
    expect([held.ids, held.endpoint, held.ports, held.conditions[1]]).toEqual([first.ids, first.endpoint, first.ports, first.conditions[1]]);
    expect(held.ids).toBe(first.ids);
    expect(held.endpoint).toBe(first.endpoint);
    expect(held.ports).toBe(first.ports);
    expect(held.conditions[1]).toBe(first.conditions[1]);
    expect(held.conditions[0]).not.toBe(first.conditions[0]);
    // A changed address, id list or condition count is taken from the update.
    const moved = snapshot({ resourceVersion: '3', ids: ['sbx-2'], conditions: [ready], endpoint: { kind: 'address', addresses: ['10.0.0.9'] }, ports: [8000] });
    view.apply('d', { type: 'upsert', snapshot: moved });
    expect(view.get('team-a', 'web')!.snapshot).toEqual(moved);
    expect(view.get('team-a', 'web')!.upstreamHost).toBe('10.0.0.9');
  });

  it('an update of a held sandbox keeps its presence, and one that arrives before its sandbox finds it', () => {
    const { view } = makeView();
    view.setPresence('team-a', 'web', presence());
    view.apply('d', { type: 'upsert', snapshot: snapshot({ resourceVersion: '1' }) });
    expect(view.get('team-a', 'web')!.presence).toEqual(presence());
    view.apply('d', { type: 'upsert', snapshot: snapshot({ resourceVersion: '2' }) });
    expect(view.get('team-a', 'web')!.presence).toEqual(presence());
    view.setPresence('team-a', 'web', undefined);
    view.apply('d', { type: 'upsert', snapshot: snapshot({ resourceVersion: '3' }) });
    expect(view.get('team-a', 'web')!.presence).toBeUndefined();
  });

  it('a re-created sandbox fences the old uid even while its successor is held', () => {
    const { view } = makeView();
    view.apply('d', { type: 'upsert', snapshot: snapshot({ uid: 'u1', resourceVersion: '5' }) });
    expect(view.apply('d', { type: 'upsert', snapshot: snapshot({ uid: 'u2', resourceVersion: '1' }) })).toBe(true);
    expect(view.apply('d', { type: 'upsert', snapshot: snapshot({ uid: 'u1', resourceVersion: '6' }) })).toBe(false);
    expect(view.apply('d', { type: 'upsert', snapshot: snapshot({ uid: 'u2', resourceVersion: '2' }) })).toBe(true);
    expect(view.get('team-a', 'web')!.snapshot.uid).toBe('u2');
  });

  it('tick() expires sandboxes whose shutdownTime passes', () => {
    const { view, now } = makeView();
    view.apply('d', { type: 'upsert', snapshot: snapshot({ sessionModel: 'none', shutdownTime: now.t + 500 }) });
    expect(view.get('team-a', 'web')?.status.phase).toBe('Ready');
    now.t += 500;
    view.tick();
    expect(view.get('team-a', 'web')?.status.phase).toBe('Deleting');
  });

  it('notifies listeners with an increasing version', () => {
    const { view } = makeView();
    const seen: [string, string | undefined, number][] = [];
    view.onChange((key, e, v) => seen.push([key, e?.status.phase, v]));
    view.apply('d', { type: 'upsert', snapshot: snapshot({ sessionModel: 'none' }) });
    view.apply('d', { type: 'delete', namespace: 'team-a', name: 'web', uid: 'uid-1', resourceVersion: '2' });
    expect(seen).toEqual([
      ['team-a/web', 'Ready', 1],
      ['team-a/web', undefined, 2],
    ]);
  });
});

describe('ChangeWaiters (through the view)', () => {
  afterEach(() => vi.useRealTimers());

  it('wakes a waiter on a change of its sandbox, not of another', async () => {
    const { view } = makeView();
    view.apply('d', { type: 'upsert', snapshot: snapshot() });
    const w = view.waiters.wait('team-a/web', 10_000);
    view.apply('d', { type: 'upsert', snapshot: snapshot({ name: 'other', uid: 'u9' }) });
    view.setPresence('team-a', 'web', presence());
    expect(await w).toBe('changed');
    expect(view.waiters.size).toBe(0);
  });

  it('times out, refuses past the limits, aborts and closes', async () => {
    vi.useFakeTimers();
    const { view } = makeView();
    const t = view.waiters.wait('a/x', 100);
    vi.advanceTimersByTime(100);
    expect(await t).toBe('timeout');

    const w1 = view.waiters.wait('a/x', 1000);
    const w2 = view.waiters.wait('a/x', 1000);
    expect(await view.waiters.wait('a/x', 1000)).toBe('busy');
    const ac = new AbortController();
    const w3 = view.waiters.wait('a/y', 1000, ac.signal);
    expect(await view.waiters.wait('a/z', 1000)).toBe('busy');
    ac.abort();
    expect(await w3).toBe('aborted');
    view.waiters.close();
    expect(await w1).toBe('closed');
    expect(await w2).toBe('closed');
    expect(await view.waiters.wait('a/x', 1000)).toBe('closed');
    expect(view.waiters.size).toBe(0);
  });
});
