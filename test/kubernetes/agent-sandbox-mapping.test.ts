import { describe, expect, it } from 'vitest';
import type { BackendState, Endpoint } from '../../src/domain/sandbox.js';
import { mapAgentSandbox } from '../../src/drivers/kubernetes/agent-sandbox-mapping.js';
import { fixture, loadKubeFixtures } from '../helpers/fake-kube-api.js';

const FIXTURES = loadKubeFixtures('agent-sandbox');
const OPTS = { defaultSessionModel: 'required' } as const;

interface Row {
  readonly name: string;
  readonly state: BackendState;
  readonly ready: { status: string; reason: string };
  readonly endpoint: Endpoint;
}

const TABLE: readonly Row[] = [
  { name: 'ready', state: 'ready', ready: { status: 'True', reason: 'DependenciesReady' }, endpoint: { kind: 'address', addresses: ['10.0.3.17'] } },
  {
    name: 'ready-service-only',
    state: 'ready',
    ready: { status: 'True', reason: 'DependenciesReady' },
    endpoint: { kind: 'service', fqdn: 'ready-service-only.team-a.svc.cluster.local' },
  },
  {
    name: 'starting',
    state: 'starting',
    ready: { status: 'False', reason: 'DependenciesNotReady' },
    endpoint: { kind: 'service', fqdn: 'starting.team-a.svc.cluster.local' },
  },
  { name: 'no-status', state: 'starting', ready: { status: 'Unknown', reason: 'NoStatus' }, endpoint: { kind: 'address', addresses: [] } },
  { name: 'suspended', state: 'paused', ready: { status: 'False', reason: 'SandboxSuspended' }, endpoint: { kind: 'service', fqdn: 'suspended.team-a.svc.cluster.local' } },
  { name: 'resuming', state: 'starting', ready: { status: 'False', reason: 'SandboxSuspended' }, endpoint: { kind: 'service', fqdn: 'resuming.team-a.svc.cluster.local' } },
  { name: 'resumed-suspended-lingers', state: 'ready', ready: { status: 'True', reason: 'DependenciesReady' }, endpoint: { kind: 'address', addresses: ['10.0.3.40'] } },
  { name: 'pod-failed', state: 'failed', ready: { status: 'False', reason: 'PodFailed' }, endpoint: { kind: 'address', addresses: ['10.0.3.41'] } },
  { name: 'pod-succeeded', state: 'failed', ready: { status: 'False', reason: 'PodSucceeded' }, endpoint: { kind: 'address', addresses: [] } },
  { name: 'reconciler-error', state: 'starting', ready: { status: 'False', reason: 'ReconcilerError' }, endpoint: { kind: 'address', addresses: [] } },
  { name: 'expired', state: 'deleting', ready: { status: 'False', reason: 'SandboxExpired' }, endpoint: { kind: 'address', addresses: [] } },
  { name: 'deleting', state: 'deleting', ready: { status: 'True', reason: 'DependenciesReady' }, endpoint: { kind: 'address', addresses: ['10.0.3.44'] } },
  { name: 'unknown-reason', state: 'failed', ready: { status: 'False', reason: 'ImagePullBackOffForever' }, endpoint: { kind: 'address', addresses: [] } },
  { name: 'resize-in-progress', state: 'ready', ready: { status: 'True', reason: 'DependenciesReady' }, endpoint: { kind: 'address', addresses: ['10.0.3.50'] } },
  { name: 'dual-stack', state: 'ready', ready: { status: 'True', reason: 'DependenciesReady' }, endpoint: { kind: 'address', addresses: ['10.0.3.60', 'fd00:10::3c'] } },
];

describe('mapAgentSandbox', () => {
  it.each(TABLE)('$name → $state', (row) => {
    const s = mapAgentSandbox(fixture(FIXTURES, row.name), OPTS)!;
    expect(s).toBeDefined();
    expect(s.state).toBe(row.state);
    const ready = s.conditions.find((c) => c.type === 'Ready')!;
    expect({ status: ready.status, reason: ready.reason }).toEqual(row.ready);
    expect(s.endpoint).toEqual(row.endpoint);
    expect(s.namespace).toBe(fixture(FIXTURES, row.name).metadata.namespace);
    expect(s.name).toBe(row.name);
  });

  it('keeps identity, versions and only the routing fields', () => {
    const s = mapAgentSandbox(fixture(FIXTURES, 'ready'), OPTS)!;
    expect(s).toEqual({
      namespace: 'team-a',
      name: 'ready',
      uid: '6f1c2a8e-0001-4b7e-9a51-000000000001',
      resourceVersion: '48213',
      // metadata.creationTimestamp: decides who keeps a contested id (the API server sets it, not the tenant).
      createdAt: Date.parse('2026-01-10T09:00:00Z'),
      instanceId: '6f1c2a8e-0001-4b7e-9a51-000000000001/1/10.0.3.17',
      ids: [],
      state: 'ready',
      conditions: [
        { type: 'Ready', status: 'True', reason: 'DependenciesReady', message: 'Pod is Ready; Service Exists', lastTransitionTime: '2026-01-10T09:00:08Z' },
      ],
      endpoint: { kind: 'address', addresses: ['10.0.3.17'] },
      sessionModel: 'required',
      ports: undefined,
      shutdownTime: undefined,
    });
  });

  it('passes a lingering Suspended condition through without letting it decide', () => {
    const s = mapAgentSandbox(fixture(FIXTURES, 'resumed-suspended-lingers'), OPTS)!;
    expect(s.conditions.map((c) => c.type)).toEqual(['Suspended', 'Ready']);
    expect(s.state).toBe('ready');
  });

  it('passes in-place resize conditions through and never changes the state for them', () => {
    const s = mapAgentSandbox(fixture(FIXTURES, 'resize-in-progress'), OPTS)!;
    expect(s.conditions.map((c) => c.type)).toEqual(['Ready', 'PodResizeInProgress']);
    const without = fixture(FIXTURES, 'resize-in-progress');
    (without.status as { conditions: unknown[] }).conditions.splice(1, 1);
    expect(mapAgentSandbox(without, OPTS)!.state).toBe(s.state);
  });

  it('reads spec.shutdownTime as epoch milliseconds', () => {
    expect(mapAgentSandbox(fixture(FIXTURES, 'expired'), OPTS)!.shutdownTime).toBe(Date.parse('2026-01-10T12:00:00Z'));
  });

  it('reads the sandgate.dev annotations', () => {
    const s = mapAgentSandbox(fixture(FIXTURES, 'annotated'), OPTS)!;
    expect(s.sessionModel).toBe('none');
    expect(s.ports).toEqual([8000, 49983, 50051]);
    expect(s.h2cPorts).toEqual([50051]);
    expect(s.ids).toEqual(['sbx-7k2m9q']);
    expect(s.shutdownTime).toBe(Date.parse('2030-01-01T00:00:00Z'));
  });

  it('warns about bad annotations, fails closed on ports and keeps the default session model', () => {
    const warnings: string[] = [];
    const s = mapAgentSandbox(fixture(FIXTURES, 'bad-annotations'), { defaultSessionModel: 'none', onWarning: (m) => warnings.push(m) })!;
    expect(s.sessionModel).toBe('none');
    expect(s.ports).toEqual([80]);
    expect(s.h2cPorts).toBeUndefined();
    expect(s.ids).toEqual([]);
    expect(s.endpoint).toEqual({ kind: 'address', addresses: ['10.0.4.3'] });
    expect(warnings).toHaveLength(4);
    expect(warnings.join('\n')).toMatch(/sandgate\.dev\/port-protocols.*81=grpc.*ignored/);
    expect(warnings.join('\n')).toMatch(/sandgate\.dev\/supervisor.*maybe/);
    expect(warnings.join('\n')).toMatch(/sandgate\.dev\/ports.*abc.*70000.*080/);
    expect(warnings.join('\n')).toMatch(/sandgate\.dev\/id.*Not_A_Label/);
  });

  it('uses the default session model when there is no annotation', () => {
    expect(mapAgentSandbox(fixture(FIXTURES, 'ready'), { defaultSessionModel: 'none' })!.sessionModel).toBe('none');
  });

  it('changes instanceId when the pod is replaced or the spec changes, not otherwise', () => {
    const a = mapAgentSandbox(fixture(FIXTURES, 'ready'), OPTS)!;
    const sameAgain = fixture(FIXTURES, 'ready');
    sameAgain.metadata.resourceVersion = '48999';
    expect(mapAgentSandbox(sameAgain, OPTS)!.instanceId).toBe(a.instanceId);
    const newPod = fixture(FIXTURES, 'ready');
    (newPod.status as { podIPs: string[] }).podIPs = ['10.0.3.99'];
    expect(mapAgentSandbox(newPod, OPTS)!.instanceId).not.toBe(a.instanceId);
    const respec = fixture(FIXTURES, 'ready');
    respec.metadata.generation = 2;
    expect(mapAgentSandbox(respec, OPTS)!.instanceId).not.toBe(a.instanceId);
  });

  const hostile: readonly [string, unknown][] = [
    ['missing uid', fixture(FIXTURES, 'no-uid')],
    ['null', null],
    ['a string', 'Sandbox'],
    ['an array', []],
    ['no metadata', { kind: 'Sandbox' }],
    ['numeric name', { metadata: { name: 7, namespace: 'a', uid: 'u' } }],
    ['empty namespace', { metadata: { name: 'x', namespace: '', uid: 'u' } }],
  ];
  it.each(hostile)('refuses %s', (_what, obj) => {
    expect(mapAgentSandbox(obj, OPTS)).toBeUndefined();
  });

  it('survives garbage in status and spec', () => {
    const s = mapAgentSandbox(
      {
        metadata: { name: 'g', namespace: 'n', uid: 'u', resourceVersion: 5 },
        spec: { replicas: 'zero', shutdownTime: 'not a time' },
        status: { podIPs: 'x', serviceFQDN: 12, conditions: [null, 1, { type: 'Ready', status: 'Maybe', reason: 3 }, { status: 'True' }] },
      },
      OPTS,
    )!;
    expect(s.state).toBe('starting');
    expect(s.resourceVersion).toBe('');
    expect(s.shutdownTime).toBeUndefined();
    expect(s.endpoint).toEqual({ kind: 'address', addresses: [] });
    expect(s.conditions).toEqual([{ type: 'Ready', status: 'Unknown', reason: '', message: '' }]);
  });

  it('cuts long condition messages', () => {
    const o = fixture(FIXTURES, 'reconciler-error');
    (o.status as { conditions: { message: string }[] }).conditions[0]!.message = 'x'.repeat(10_000);
    const s = mapAgentSandbox(o, OPTS)!;
    expect(s.conditions[0]!.message.length).toBe(256);
  });
});
