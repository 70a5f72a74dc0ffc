import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { KubernetesDriver, KUBE_KINDS, type KubeKind } from '../../src/drivers/kubernetes/kubernetes-driver.js';
import { AGENT_SANDBOX, FakeKubeApi, fixture, loadKubeFixtures, OPENKRUISE_SANDBOX, type RecordedRequest } from '../helpers/fake-kube-api.js';
import { ViewSink } from '../helpers/view-sink.js';

/**
 * The RBAC the Kubernetes manifests grant (deploy/kubernetes/base/rbac.yaml) is exactly what the drivers
 * call: every request the drivers send to a (fake) API server — listing, watching, resuming, pausing and
 * writing the last-activity annotation, cluster-wide
 * and per namespace — is turned into the verb the API server authorizes it as, and the ClusterRole must
 * grant those verbs and no others, on those groups and no others.
 */

interface Rule {
  readonly apiGroups: string[];
  readonly resources: string[];
  readonly verbs: string[];
}

/** The authorization verb of a request, as the API server's request-info resolver derives it. */
function verbOf(r: RecordedRequest): string {
  const named = /\/sandboxes\/[^/]+$/.test(r.path);
  const watching = r.query.watch === '1' || r.query.watch === 'true';
  switch (r.method) {
    case 'GET':
      return watching ? 'watch' : named ? 'get' : 'list';
    case 'PATCH':
      return 'patch';
    case 'PUT':
      return 'update';
    case 'POST':
      return 'create';
    case 'DELETE':
      return named ? 'delete' : 'deletecollection';
    default:
      return r.method.toLowerCase();
  }
}

function groupOf(r: RecordedRequest): string {
  return /^\/apis\/([^/]+)\//.exec(r.path)?.[1] ?? '';
}

function clusterRole(): Rule[] {
  const text = readFileSync(new URL('../../deploy/kubernetes/base/rbac.yaml', import.meta.url), 'utf8');
  const role = parseAllDocuments(text)
    .map((d) => d.toJS() as { kind: string; rules?: Rule[] })
    .find((o) => o.kind === 'ClusterRole');
  if (role?.rules === undefined) throw new Error('no ClusterRole with rules in rbac.yaml');
  return role.rules;
}

const AGENT = loadKubeFixtures('agent-sandbox');
const KRUISE = loadKubeFixtures('openkruise');
let api: FakeKubeApi | undefined;
const drivers: KubernetesDriver[] = [];

afterEach(async () => {
  await Promise.all(drivers.splice(0).map((d) => d.stop()));
  await api?.close();
});

/** Runs both drivers through list, watch, resume, pause and activity reports; returns every request the API server received. */
async function exercise(namespaces: readonly string[]): Promise<readonly RecordedRequest[]> {
  api = await FakeKubeApi.start();
  const paused = { agent: fixture(AGENT, 'suspended'), kruise: fixture(KRUISE, 'paused') };
  for (const o of [paused.agent, paused.kruise]) {
    delete o.metadata.uid;
    delete o.metadata.resourceVersion;
    o.metadata.namespace = 'team-a';
  }
  api.create(AGENT_SANDBOX, paused.agent);
  api.create(OPENKRUISE_SANDBOX, paused.kruise);
  for (const kind of Object.keys(KUBE_KINDS) as KubeKind[]) {
    const d = new KubernetesDriver({ kind, kubeConfig: { server: api.url }, namespaces, backoff: { initialMs: 1, maxMs: 5 }, random: () => 1 });
    drivers.push(d);
    const sink = new ViewSink(d.id);
    await d.start(sink);
    await sink.until(() => sink.replaces.length > 0, `${kind} listed`);
    const name = String((kind === 'agent-sandbox' ? paused.agent : paused.kruise).metadata.name);
    await d.resume('team-a', name);
    await sink.until(() => sink.events.length > 0, `${kind} saw its resume through the watch`);
    await d.pause('team-a', name);
    await d.reportActivity([{ namespace: 'team-a', name, at: Date.now(), ports: new Map([[8000, Date.now()]]) }]);
  }
  return api.requests;
}

describe('the ClusterRole in deploy/kubernetes/base/rbac.yaml', () => {
  it.each([
    ['cluster-wide', []],
    ['per namespace', ['team-a', 'team-b']],
  ])('grants exactly the verbs and groups the drivers use (%s)', async (_how, namespaces) => {
    const requests = await exercise(namespaces);
    const used = new Map<string, Set<string>>();
    for (const r of requests) {
      const group = groupOf(r);
      if (!used.has(group)) used.set(group, new Set());
      used.get(group)!.add(verbOf(r));
    }
    const granted = new Map<string, Set<string>>();
    for (const rule of clusterRole()) {
      expect(rule.resources, 'only the sandboxes resource').toEqual(['sandboxes']);
      for (const g of rule.apiGroups) granted.set(g, new Set([...(granted.get(g) ?? []), ...rule.verbs]));
    }
    const sorted = (m: Map<string, Set<string>>) => Object.fromEntries([...m].map(([g, v]) => [g, [...v].sort()]).sort());
    expect(sorted(granted)).toEqual(sorted(used));
    expect([...used.keys()].sort()).toEqual(Object.values(KUBE_KINDS).map((k) => k.group).sort());
  });

  it('tells a wrong grant apart: a get the drivers never send is not in the used set', () => {
    const get: RecordedRequest = { method: 'GET', path: '/apis/agents.x-k8s.io/v1alpha1/namespaces/a/sandboxes/x', query: {}, authorization: undefined, contentType: undefined, body: '' };
    const watch = { ...get, path: '/apis/agents.x-k8s.io/v1alpha1/sandboxes', query: { watch: '1' } };
    expect([verbOf(get), verbOf(watch), verbOf({ ...watch, query: {} }), verbOf({ ...get, method: 'PATCH' })]).toEqual(['get', 'watch', 'list', 'patch']);
  });
});
