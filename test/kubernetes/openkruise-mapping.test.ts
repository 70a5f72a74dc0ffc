import { describe, expect, it } from 'vitest';
import type { BackendState } from '../../src/domain/sandbox.js';
import { mapOpenKruiseSandbox } from '../../src/drivers/kubernetes/openkruise-mapping.js';
import { SandboxView } from '../../src/view/sandbox-view.js';
import { fixture, loadKubeFixtures } from '../helpers/fake-kube-api.js';

const FIXTURES = loadKubeFixtures('openkruise');
const OPTS = { defaultSessionModel: 'required' } as const;

interface Row {
  readonly name: string;
  readonly state: BackendState;
  readonly ready: { status: string; reason: string };
  readonly addresses: readonly string[];
  readonly revision?: { desired: string; current: string };
}

// One row per fixture object and what the mapping reads from it: rows that differ in one value stay rows.
const TABLE: readonly Row[] = [
  { name: 'running', state: 'ready', ready: { status: 'True', reason: 'PodReady' }, addresses: ['10.1.0.23'], revision: { desired: 'f8d7967bc', current: 'f8d7967bc' } },
  // Seed step 2: template changed, Ready=False reason PodReady while the pod is updated in place.
  { name: 'inplace-updating', state: 'starting', ready: { status: 'False', reason: 'PodReady' }, addresses: ['10.1.0.24'], revision: { desired: '78bbd5bd4d', current: 'f8d7967bc' } },
  { name: 'inplace-updating-v030', state: 'starting', ready: { status: 'False', reason: 'InplaceUpdating' }, addresses: ['10.1.0.25'] },
  { name: 'inplace-done', state: 'ready', ready: { status: 'True', reason: 'PodReady' }, addresses: ['10.1.0.24'], revision: { desired: '78bbd5bd4d', current: '78bbd5bd4d' } },
  { name: 'inplace-forbidden', state: 'ready', ready: { status: 'True', reason: 'PodReady' }, addresses: ['10.1.0.26'] },
  { name: 'paused', state: 'paused', ready: { status: 'False', reason: 'PodReady' }, addresses: [] },
  { name: 'pausing', state: 'paused', ready: { status: 'True', reason: 'PodReady' }, addresses: ['10.1.0.27'] },
  { name: 'resume-requested', state: 'starting', ready: { status: 'False', reason: 'PodReady' }, addresses: [] },
  { name: 'resuming', state: 'starting', ready: { status: 'False', reason: 'PodReady' }, addresses: [] },
  { name: 'pending', state: 'starting', ready: { status: 'False', reason: 'Pending' }, addresses: [] },
  { name: 'no-status', state: 'starting', ready: { status: 'Unknown', reason: 'NoStatus' }, addresses: [] },
  { name: 'failed', state: 'failed', ready: { status: 'False', reason: 'Failed' }, addresses: ['10.1.0.30'] },
  { name: 'start-container-failed', state: 'failed', ready: { status: 'False', reason: 'StartContainerFailed' }, addresses: ['10.1.0.31'] },
  { name: 'pod-create-failed', state: 'failed', ready: { status: 'False', reason: 'PodCreateFailed' }, addresses: [] },
  { name: 'upgrading', state: 'starting', ready: { status: 'False', reason: 'Upgrading' }, addresses: [] },
  { name: 'upgrade-failed', state: 'failed', ready: { status: 'False', reason: 'Upgrading' }, addresses: [] },
  { name: 'terminating', state: 'deleting', ready: { status: 'True', reason: 'PodReady' }, addresses: [] },
  { name: 'recycling', state: 'deleting', ready: { status: 'True', reason: 'PodReady' }, addresses: ['10.1.0.38'] },
  { name: 'deletion-timestamp', state: 'deleting', ready: { status: 'True', reason: 'PodReady' }, addresses: [] },
  { name: 'resize-infeasible', state: 'ready', ready: { status: 'True', reason: 'PodReady' }, addresses: ['10.1.0.40'], revision: { desired: 'f8d7967bc', current: 'f8d7967bc' } },
  { name: 'resize-in-progress', state: 'ready', ready: { status: 'True', reason: 'PodReady' }, addresses: ['10.1.0.41'] },
  { name: 'sandbox-ip-only', state: 'ready', ready: { status: 'True', reason: 'PodReady' }, addresses: ['10.1.0.42'] },
];

describe('mapOpenKruiseSandbox', () => {
  it.each(TABLE)('$name → $state', (row) => {
    const s = mapOpenKruiseSandbox(fixture(FIXTURES, row.name), OPTS)!;
    expect(s).toBeDefined();
    expect(s.state).toBe(row.state);
    const ready = s.conditions.find((c) => c.type === 'Ready')!;
    expect({ status: ready.status, reason: ready.reason }).toEqual(row.ready);
    expect(s.endpoint).toEqual({ kind: 'address', addresses: row.addresses });
    expect(s.revision).toEqual(row.revision);
  });

  // The agent-sandbox mapping test has the same check on its own fixture: the CRDs differ in where
  // identity, ids and addresses live, so each spells out the snapshot it expects.
  it('keeps identity, the sandbox-id label and only the routing fields', () => {
    const s = mapOpenKruiseSandbox(fixture(FIXTURES, 'running'), OPTS)!;
    expect(s).toEqual({
      namespace: 'default',
      name: 'running',
      uid: '9b7d4e10-0001-4c2a-8f3e-000000000001',
      resourceVersion: '90311',
      instanceId: '3c0e7b5a-aaaa-4d1e-9b0f-000000000001/1',
      ids: ['e2b-4hq8w2'],
      state: 'ready',
      conditions: [
        { type: 'Ready', status: 'True', reason: 'PodReady', message: '', lastTransitionTime: '2025-12-17T07:34:50Z' },
        { type: 'InPlaceUpdateReady', status: 'True', reason: '', message: '', lastTransitionTime: '2025-12-18T04:14:00Z' },
      ],
      endpoint: { kind: 'address', addresses: ['10.1.0.23'] },
      sessionModel: 'required',
      ports: undefined,
      shutdownTime: undefined,
      revision: { desired: 'f8d7967bc', current: 'f8d7967bc' },
    });
  });

  it('passes the update, upgrade, pause and resize conditions through', () => {
    const types = (name: string): string[] => mapOpenKruiseSandbox(fixture(FIXTURES, name), OPTS)!.conditions.map((c) => c.type);
    expect(types('inplace-updating')).toEqual(['InPlaceUpdateReady', 'Ready']);
    expect(types('inplace-updating-v030')).toEqual(['Ready', 'InplaceUpdate']);
    expect(types('upgrading')).toEqual(['Ready', 'Upgrading']);
    expect(types('paused')).toEqual(['Ready', 'SandboxPaused']);
    expect(types('resuming')).toEqual(['Ready', 'SandboxResumed']);
    expect(types('resize-infeasible')).toEqual(['Ready', 'InplaceUpdate', 'PodResizePending']);
    expect(types('resize-in-progress')).toEqual(['Ready', 'PodResizeInProgress']);
  });

  it('drops probe conditions and other types routing does not read', () => {
    expect(mapOpenKruiseSandbox(fixture(FIXTURES, 'probe-conditions'), OPTS)!.conditions.map((c) => c.type)).toEqual(['Ready']);
  });

  it('never lets in-place resize conditions change the state', () => {
    for (const name of ['resize-infeasible', 'resize-in-progress']) {
      const o = fixture(FIXTURES, name);
      const withResize = mapOpenKruiseSandbox(o, OPTS)!.state;
      const status = o.status as { conditions: { type: string }[] };
      status.conditions = status.conditions.filter((c) => c.type === 'Ready');
      expect(mapOpenKruiseSandbox(o, OPTS)!.state).toBe(withResize);
    }
  });

  it('omits revision when only status.revision is known (no pod-template-hash in podInfo)', () => {
    expect(mapOpenKruiseSandbox(fixture(FIXTURES, 'inplace-forbidden'), OPTS)!.revision).toBeUndefined();
    expect(mapOpenKruiseSandbox(fixture(FIXTURES, 'inplace-updating-v030'), OPTS)!.revision).toBeUndefined();
  });

  it('prefers status.updateRevision over status.revision', () => {
    const o = fixture(FIXTURES, 'running');
    (o.status as Record<string, unknown>).updateRevision = 'aaa111';
    expect(mapOpenKruiseSandbox(o, OPTS)!.revision).toEqual({ desired: 'aaa111', current: 'f8d7967bc' });
  });

  it('takes the pending phase message as the Ready message', () => {
    const ready = mapOpenKruiseSandbox(fixture(FIXTURES, 'pending'), OPTS)!.conditions[0]!;
    expect(ready).toEqual({ type: 'Ready', status: 'False', reason: 'Pending', message: 'waiting for the pod to be scheduled' });
  });

  it('reads spec.shutdownTime and the sandgate.dev annotations', () => {
    const s = mapOpenKruiseSandbox(fixture(FIXTURES, 'shutdown-scheduled'), OPTS)!;
    expect(s.shutdownTime).toBe(Date.parse('2026-02-01T09:00:00Z'));
    expect(s.ports).toEqual([49983]);
    expect(s.sessionModel).toBe('none');
    expect(s.instanceId).toBe('9b7d4e10-0024-4c2a-8f3e-000000000024/1/10.1.0.44');
  });

  it('adds the sandgate.dev/id annotation after the sandbox-id label, without duplicates', () => {
    const o = fixture(FIXTURES, 'running');
    o.metadata.annotations = { 'sandgate.dev/id': 'extra-id' };
    expect(mapOpenKruiseSandbox(o, OPTS)!.ids).toEqual(['e2b-4hq8w2', 'extra-id']);
    o.metadata.annotations = { 'sandgate.dev/id': 'e2b-4hq8w2' };
    expect(mapOpenKruiseSandbox(o, OPTS)!.ids).toEqual(['e2b-4hq8w2']);
  });

  it('a tenant-set sandbox-id label or id annotation cannot take another sandbox\'s id: creationTimestamp decides, legacy ids stay with their namespace', () => {
    const view = new SandboxView({ now: () => 0 });
    const owner = fixture(FIXTURES, 'running');
    owner.metadata = { ...owner.metadata, creationTimestamp: '2026-01-01T00:00:00Z' };
    const squatter = fixture(FIXTURES, 'running');
    squatter.metadata = { ...squatter.metadata, namespace: 'team-b', name: 'evil', uid: 'evil-uid', creationTimestamp: '2027-01-01T00:00:00Z' };
    squatter.metadata.annotations = { 'sandgate.dev/id': `${owner.metadata.namespace}--${owner.metadata.name}` };
    // The squatter is reported first: arrival order must not matter.
    view.apply('kubernetes/openkruise', { type: 'upsert', snapshot: mapOpenKruiseSandbox(squatter, OPTS)! });
    view.apply('kubernetes/openkruise', { type: 'upsert', snapshot: mapOpenKruiseSandbox(owner, OPTS)! });
    expect(view.getById('e2b-4hq8w2')?.key).toBe(`${owner.metadata.namespace}/${owner.metadata.name}`);
    expect(view.getById(`${owner.metadata.namespace}--${owner.metadata.name}`)?.key).toBe(`${owner.metadata.namespace}/${owner.metadata.name}`);
    expect(view.get('team-b', 'evil')!.refusedIds).toEqual(['e2b-4hq8w2', `${owner.metadata.namespace}--${owner.metadata.name}`]);
  });

  it('reads agents.kruise.io/runtime-access-token as envd\'s token, not as a traffic token', () => {
    const o = fixture(FIXTURES, 'running');
    o.metadata.annotations = { 'agents.kruise.io/runtime-access-token': 'rt-token' };
    const s = mapOpenKruiseSandbox(o, OPTS)!;
    expect([s.envdAccessToken, s.accessToken]).toEqual(['rt-token', undefined]);
    o.metadata.annotations = { 'agents.kruise.io/runtime-access-token': 'rt-token', 'sandgate.dev/access-token': 'derived' };
    expect(mapOpenKruiseSandbox(o, OPTS)!.accessToken).toEqual({ derived: true });
  });

  it('does not add the legacy <namespace>--<name> id (the view resolves it)', () => {
    expect(mapOpenKruiseSandbox(fixture(FIXTURES, 'pending'), OPTS)!.ids).toEqual([]);
  });

  it('changes instanceId with the pod uid and the generation', () => {
    const a = mapOpenKruiseSandbox(fixture(FIXTURES, 'running'), OPTS)!.instanceId;
    const recreated = fixture(FIXTURES, 'running');
    ((recreated.status as Record<string, unknown>).podInfo as Record<string, unknown>).podUID = 'another-pod';
    expect(mapOpenKruiseSandbox(recreated, OPTS)!.instanceId).not.toBe(a);
    const updated = fixture(FIXTURES, 'running');
    updated.metadata.generation = 2;
    expect(mapOpenKruiseSandbox(updated, OPTS)!.instanceId).not.toBe(a);
  });

  const hostile: readonly [string, unknown][] = [
    ['undefined', undefined],
    ['no uid', { metadata: { name: 'x', namespace: 'y' } }],
    ['no name', { metadata: { namespace: 'y', uid: 'u' } }],
    ['metadata is a list', { metadata: [] }],
  ];
  it.each(hostile)('refuses %s', (_what, obj) => {
    expect(mapOpenKruiseSandbox(obj, OPTS)).toBeUndefined();
  });

  it('survives garbage in status', () => {
    const s = mapOpenKruiseSandbox(
      { metadata: { name: 'g', namespace: 'n', uid: 'u' }, spec: { paused: 'yes' }, status: { phase: 7, podInfo: { podIP: '999.1.1.1', labels: 'x' }, conditions: {} } },
      OPTS,
    )!;
    expect(s.state).toBe('starting');
    expect(s.endpoint).toEqual({ kind: 'address', addresses: [] });
    expect(s.revision).toBeUndefined();
    expect(s.conditions[0]!.status).toBe('Unknown');
  });
});
