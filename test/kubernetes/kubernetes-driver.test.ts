import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BackendSnapshot, DriverEvent } from '../../src/domain/sandbox.js';
import type { DriverSink } from '../../src/drivers/driver.js';
import { KubeApiError } from '../../src/drivers/kubernetes/kube-client.js';
import { createKubernetesDrivers, KubernetesDriver, type KubernetesDriverOptions } from '../../src/drivers/kubernetes/kubernetes-driver.js';
import { AGENT_SANDBOX, FakeKubeApi, fixture, loadKubeFixtures, OPENKRUISE_SANDBOX, Recorder } from '../helpers/fake-kube-api.js';

/** The drivers against a fake API server: what the gateway's sink sees, namespaces, resume, stop. */

type Call = { kind: 'replace'; snapshots: readonly BackendSnapshot[] } | { kind: 'apply'; event: DriverEvent } | { kind: 'error'; err: Error };

function recordingSink(): { sink: DriverSink; calls: Recorder<Call> } {
  const calls = new Recorder<Call>();
  return {
    calls,
    sink: {
      replace: (snapshots) => calls.push({ kind: 'replace', snapshots }),
      apply: (event) => calls.push({ kind: 'apply', event }),
      error: (err) => calls.push({ kind: 'error', err }),
    },
  };
}

const AGENT = loadKubeFixtures('agent-sandbox');
const KRUISE = loadKubeFixtures('openkruise');

/** A fixture as the API server would hold it before create() fills metadata in. */
function fresh(all: typeof AGENT, name: string, namespace?: string): Record<string, unknown> {
  const o = fixture(all, name);
  delete o.metadata.uid;
  delete o.metadata.resourceVersion;
  delete o.metadata.deletionTimestamp;
  if (namespace !== undefined) o.metadata.namespace = namespace;
  return o;
}

const replaces = (calls: readonly Call[]): Extract<Call, { kind: 'replace' }>[] => calls.filter((c): c is Extract<Call, { kind: 'replace' }> => c.kind === 'replace');
const applies = (calls: readonly Call[]): DriverEvent[] => calls.flatMap((c) => (c.kind === 'apply' ? [c.event] : []));
const errorReasons = (calls: readonly Call[]): string[] => calls.flatMap((c) => (c.kind === 'error' ? [(c.err as KubeApiError).reason] : []));
const names = (snaps: readonly BackendSnapshot[]): string[] => snaps.map((s) => `${s.namespace}/${s.name}`).sort();

let api: FakeKubeApi;
const drivers: KubernetesDriver[] = [];

beforeEach(async () => {
  api = await FakeKubeApi.start({ token: 'sekret' });
});

afterEach(async () => {
  await Promise.all(drivers.splice(0).map((d) => d.stop()));
  await api.close();
});

function driver(opts: Partial<KubernetesDriverOptions> = {}): KubernetesDriver {
  const d = new KubernetesDriver({
    kind: 'agent-sandbox',
    kubeConfig: { server: api.url, token: 'sekret' },
    backoff: { initialMs: 1, maxMs: 5 },
    random: () => 1,
    ...opts,
  });
  drivers.push(d);
  return d;
}

describe('KubernetesDriver', () => {
  it('marks itself synced with one replace() of the full list, then applies watch events in order', async () => {
    api.create(AGENT_SANDBOX, fresh(AGENT, 'ready'));
    api.create(AGENT_SANDBOX, fresh(AGENT, 'suspended'));
    api.create(OPENKRUISE_SANDBOX, fresh(KRUISE, 'running'));
    const { sink, calls } = recordingSink();
    const d = driver({ pageSize: 1 });
    expect(d.id).toBe('kubernetes/agent-sandbox');
    await d.start(sink);
    await calls.until((c) => replaces(c).length === 1, 'the first replace');
    const first = replaces(calls.items)[0]!;
    expect(names(first.snapshots)).toEqual(['team-a/ready', 'team-a/suspended']);
    expect(first.snapshots.find((s) => s.name === 'suspended')!.state).toBe('paused');

    await api.waitForWatches(1);
    api.create(AGENT_SANDBOX, fresh(AGENT, 'starting'));
    api.modify(AGENT_SANDBOX, 'team-a', 'starting', (o) => {
      const st = o.status as { conditions: Record<string, unknown>[]; podIPs?: string[] };
      st.conditions[0] = { type: 'Ready', status: 'True', reason: 'DependenciesReady', message: 'Pod is Ready' };
      st.podIPs = ['10.0.9.9'];
    });
    const deleted = api.get(AGENT_SANDBOX, 'team-a', 'ready')!;
    api.remove(AGENT_SANDBOX, 'team-a', 'ready');
    await calls.until((c) => applies(c).length === 3, 'three events');
    const [added, modified, removed] = applies(calls.items);
    expect(added).toMatchObject({ type: 'upsert', snapshot: { name: 'starting', state: 'starting' } });
    expect(modified).toMatchObject({ type: 'upsert', snapshot: { name: 'starting', state: 'ready', endpoint: { kind: 'address', addresses: ['10.0.9.9'] } } });
    expect(removed).toEqual({ type: 'delete', namespace: 'team-a', name: 'ready', uid: deleted.metadata.uid, resourceVersion: api.resourceVersion });
    expect(api.requests.every((r) => r.authorization === 'Bearer sekret')).toBe(true);
    expect(calls.items.filter((c) => c.kind === 'error')).toEqual([]);
  });

  it('lists and watches each configured namespace, and replaces once all have listed', async () => {
    api.create(AGENT_SANDBOX, fresh(AGENT, 'ready', 'team-a'));
    api.create(AGENT_SANDBOX, fresh(AGENT, 'ready', 'team-b'));
    api.create(AGENT_SANDBOX, fresh(AGENT, 'ready', 'team-c'));
    const { sink, calls } = recordingSink();
    await driver({ namespaces: ['team-a', 'team-b', 'team-a'] }).start(sink);
    await calls.until((c) => replaces(c).length === 1, 'the first replace');
    expect(names(replaces(calls.items)[0]!.snapshots)).toEqual(['team-a/ready', 'team-b/ready']);
    expect(api.lists().map((r) => r.path).sort()).toEqual([
      '/apis/agents.x-k8s.io/v1alpha1/namespaces/team-a/sandboxes',
      '/apis/agents.x-k8s.io/v1alpha1/namespaces/team-b/sandboxes',
    ]);
    await api.waitForWatches(2);
    api.create(AGENT_SANDBOX, fresh(AGENT, 'starting', 'team-c'));
    api.create(AGENT_SANDBOX, fresh(AGENT, 'starting', 'team-b'));
    await calls.until((c) => applies(c).length === 1, 'the team-b event');
    expect(applies(calls.items)[0]).toMatchObject({ type: 'upsert', snapshot: { namespace: 'team-b', name: 'starting' } });

    // A relist (here of every namespace) still replaces with all namespaces' sandboxes.
    api.expireWatches();
    await calls.until((c) => replaces(c).length >= 2, 'the relist');
    await calls.until((c) => names(replaces(c).at(-1)!.snapshots).length === 3, 'the full relist');
    expect(names(replaces(calls.items).at(-1)!.snapshots)).toEqual(['team-a/ready', 'team-b/ready', 'team-b/starting']);
  });

  it('relists after 410 and replaces with the truth, dropping what was deleted meanwhile', async () => {
    api.create(AGENT_SANDBOX, fresh(AGENT, 'ready'));
    api.create(AGENT_SANDBOX, fresh(AGENT, 'starting'));
    const { sink, calls } = recordingSink();
    await driver().start(sink);
    await calls.until((c) => replaces(c).length === 1, 'the first replace');
    await api.waitForWatches(1);
    api.holdEvents = true;
    api.remove(AGENT_SANDBOX, 'team-a', 'starting');
    api.create(AGENT_SANDBOX, fresh(AGENT, 'annotated', 'team-a'));
    api.compact();
    api.holdEvents = false;
    api.dropWatches();
    await calls.until((c) => replaces(c).length === 2, 'the relist');
    expect(names(replaces(calls.items)[1]!.snapshots)).toEqual(['team-a/annotated', 'team-a/ready']);
    expect(applies(calls.items)).toEqual([]);
  });

  it('resumes a dropped watch from the last resourceVersion without replacing again', async () => {
    const { sink, calls } = recordingSink();
    await driver().start(sink);
    await api.waitForWatches(1);
    api.create(AGENT_SANDBOX, fresh(AGENT, 'ready'));
    await calls.until((c) => applies(c).length === 1, 'the event');
    const rv = api.resourceVersion;
    api.dropWatches();
    await api.waitForWatches(2);
    expect(api.watches()[1]!.query.resourceVersion).toBe(rv);
    api.create(AGENT_SANDBOX, fresh(AGENT, 'starting'));
    await calls.until((c) => applies(c).length === 2, 'the next event');
    expect(replaces(calls.items)).toHaveLength(1);
    expect(errorReasons(calls.items)).toEqual(['WatchDropped']);
  });

  it('resumes agent-sandbox with a merge patch of spec.replicas: 1', async () => {
    api.create(AGENT_SANDBOX, fresh(AGENT, 'suspended'));
    const { sink, calls } = recordingSink();
    const d = driver();
    await d.start(sink);
    await api.waitForWatches(1);
    await d.resume('team-a', 'suspended');
    const [patch] = api.patches();
    expect(patch).toMatchObject({ path: '/apis/agents.x-k8s.io/v1alpha1/namespaces/team-a/sandboxes/suspended', contentType: 'application/merge-patch+json', authorization: 'Bearer sekret' });
    expect(JSON.parse(patch!.body)).toEqual({ spec: { replicas: 1 } });
    // The controller has not reacted yet (Ready still says SandboxSuspended): a resume in progress.
    await calls.until((c) => applies(c).length === 1, 'the patched object');
    expect(applies(calls.items)[0]).toMatchObject({ type: 'upsert', snapshot: { name: 'suspended', state: 'starting' } });
  });

  it('resumes OpenKruise with a merge patch of spec.paused: false', async () => {
    api.create(OPENKRUISE_SANDBOX, fresh(KRUISE, 'paused'));
    const { sink, calls } = recordingSink();
    const d = driver({ kind: 'openkruise' });
    expect(d.id).toBe('kubernetes/openkruise');
    await d.start(sink);
    await calls.until((c) => replaces(c).length === 1, 'the list');
    expect(replaces(calls.items)[0]!.snapshots[0]!.state).toBe('paused');
    await api.waitForWatches(1);
    await d.resume('default', 'paused');
    const [patch] = api.patches();
    expect(patch!.path).toBe('/apis/agents.kruise.io/v1alpha1/namespaces/default/sandboxes/paused');
    expect(patch!.contentType).toBe('application/merge-patch+json');
    expect(JSON.parse(patch!.body)).toEqual({ spec: { paused: false } });
    await calls.until((c) => applies(c).length === 1, 'the patched object');
    expect(applies(calls.items)[0]).toMatchObject({ type: 'upsert', snapshot: { name: 'paused', state: 'starting' } });
  });

  it('rejects resume of a missing sandbox with the API status', async () => {
    const d = driver();
    await expect(d.resume('team-a', 'nope')).rejects.toMatchObject({ name: 'KubeApiError', status: 404, reason: 'NotFound' });
    api.failNext('patch', 403);
    api.create(AGENT_SANDBOX, fresh(AGENT, 'suspended'));
    await expect(d.resume('team-a', 'suspended')).rejects.toMatchObject({ status: 403 });
  });

  it('reports a refused credential and does not mark itself synced', async () => {
    const { sink, calls } = recordingSink();
    await driver({ kubeConfig: { server: api.url, token: 'wrong' } }).start(sink);
    await calls.until((c) => c.filter((x) => x.kind === 'error').length >= 2, 'two failures');
    expect(replaces(calls.items)).toEqual([]);
    expect(calls.items[0]).toMatchObject({ kind: 'error', err: { status: 401 } });
  });

  it('counts a kind whose CRD is not installed as synced and empty, and picks it up once installed', async () => {
    await api.close();
    api = await FakeKubeApi.start({ serve: [AGENT_SANDBOX] });
    const { sink, calls } = recordingSink();
    await driver({ kind: 'openkruise', kubeConfig: { server: api.url } }).start(sink);
    await calls.until((c) => replaces(c).length === 1, 'the empty replace');
    expect(replaces(calls.items)[0]!.snapshots).toEqual([]);
    expect(calls.items.some((c) => c.kind === 'error' && /CRD/.test(c.err.message))).toBe(true);
    api.create(OPENKRUISE_SANDBOX, fresh(KRUISE, 'running'));
    await calls.until((c) => replaces(c).some((r) => r.snapshots.length === 1), 'the sandbox after the CRD appeared');
  });

  it('reports objects it cannot map and keeps going', async () => {
    const { sink, calls } = recordingSink();
    await driver().start(sink);
    await api.waitForWatches(1);
    api.writeRaw(JSON.stringify({ type: 'ADDED', object: { kind: 'Sandbox', metadata: { name: 'x', namespace: 'team-a', resourceVersion: '999' } } }) + '\n');
    api.create(AGENT_SANDBOX, fresh(AGENT, 'ready'));
    await calls.until((c) => applies(c).length === 1, 'the good event');
    expect(errorReasons(calls.items)).toEqual(['InvalidObject']);
  });

  it('stop() ends watches and timers and leaves no open handle', async () => {
    const base = process.getActiveResourcesInfo().filter((r) => r === 'Timeout' || r === 'TCPSocketWrap').length;
    const { sink, calls } = recordingSink();
    const d = driver({ namespaces: ['team-a', 'team-b'] });
    await d.start(sink);
    await calls.until((c) => replaces(c).length === 1, 'synced');
    await api.waitForWatches(2);
    expect(api.openWatches).toBe(2);
    await d.stop();
    await api.waitForNoWatches();
    await new Promise((r) => setImmediate(r));
    const left = process.getActiveResourcesInfo().filter((r) => r === 'Timeout' || r === 'TCPSocketWrap').length;
    expect(left).toBeLessThanOrEqual(base);
    // Nothing reaches the sink after stop().
    const n = calls.items.length;
    api.create(AGENT_SANDBOX, fresh(AGENT, 'ready'));
    await new Promise((r) => setImmediate(r));
    expect(calls.items.length).toBe(n);
  });
});

describe('createKubernetesDrivers', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'sandgate-kube-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  function kubeconfigFile(server: string): string {
    const path = join(dir, 'config');
    writeFileSync(
      path,
      [
        'apiVersion: v1',
        'kind: Config',
        'clusters:',
        '- name: fake',
        '  cluster:',
        `    server: ${server}`,
        '    insecure-skip-tls-verify: true',
        'users:',
        '- name: me',
        '  user:',
        '    token: sekret',
        'contexts:',
        '- name: fake',
        '  context: {cluster: fake, user: me}',
        'current-context: fake',
      ].join('\n'),
    );
    return path;
  }

  it('makes one driver per kind from a kubeconfig file, authenticated', async () => {
    const made = createKubernetesDrivers({ kubeconfig: kubeconfigFile(api.url), kinds: ['agent-sandbox', 'openkruise'], namespaces: [], defaultSessionModel: 'none' });
    drivers.push(...made);
    expect(made.map((d) => d.id)).toEqual(['kubernetes/agent-sandbox', 'kubernetes/openkruise']);
    api.create(AGENT_SANDBOX, fresh(AGENT, 'ready'));
    const { sink, calls } = recordingSink();
    await made[0]!.start(sink);
    await calls.until((c) => replaces(c).length === 1, 'synced');
    expect(replaces(calls.items)[0]!.snapshots[0]!.sessionModel).toBe('none');
    expect(api.requests[0]!.authorization).toBe('Bearer sekret');
  });

  const bad: readonly [string, Parameters<typeof createKubernetesDrivers>[0]][] = [
    ['an unknown kind', { kinds: ['knative'], namespaces: [], defaultSessionModel: 'required' }],
    ['no kind', { kinds: [], namespaces: [], defaultSessionModel: 'required' }],
    ['a bad namespace', { kinds: ['openkruise'], namespaces: ['Team_A'], defaultSessionModel: 'required' }],
    ['a bad session model', { kinds: ['openkruise'], namespaces: [], defaultSessionModel: 'sometimes' }],
    ['a missing kubeconfig file', { kubeconfig: '/nonexistent/kubeconfig', kinds: ['openkruise'], namespaces: [], defaultSessionModel: 'required' }],
  ];
  it.each(bad)('refuses %s with config_invalid', (_what, config) => {
    expect(() => createKubernetesDrivers(config)).toThrow(expect.objectContaining({ code: 'config_invalid' }));
  });
});
