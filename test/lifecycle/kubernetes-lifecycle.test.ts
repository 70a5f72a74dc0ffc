import { request } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { KubernetesDriver } from '../../src/drivers/kubernetes/kubernetes-driver.js';
import { AGENT_SANDBOX, FakeKubeApi, fixture, loadKubeFixtures, OPENKRUISE_SANDBOX, type KubeObject, type RecordedRequest } from '../helpers/fake-kube-api.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { startUpstream } from '../helpers/upstream.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { eventually } from '../helpers/eventually.js';

/**
 * The lifecycle against the Kubernetes list/watch test server: activity reaches the Sandbox objects as
 * the `sandgate.dev/last-activity` annotation (at most once per interval, only when it moved, from one
 * gateway), and an idle sandbox is paused with exactly one merge patch of its kind's shape — also with two
 * gateways on one Redis. The clock is the test's, and the test runs the report rounds and idle checks
 * (their timers are set far apart so they do not run on their own meanwhile).
 */

const AGENT = loadKubeFixtures('agent-sandbox');
const KRUISE = loadKubeFixtures('openkruise');
const LAST_ACTIVITY = 'sandgate.dev/last-activity';
const T0 = Date.parse('2026-03-01T12:00:00Z');

const cleanup: (() => Promise<unknown> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

/** A Ready sandbox of each kind in team-a at 127.0.0.1 that needs no supervisor. */
function objects(): { agent: KubeObject; kruise: KubeObject } {
  const agent = fixture(AGENT, 'ready');
  const kruise = fixture(KRUISE, 'running');
  for (const o of [agent, kruise]) {
    delete o.metadata.uid;
    delete o.metadata.resourceVersion;
    o.metadata.namespace = 'team-a';
    o.metadata.annotations = { ...(o.metadata.annotations as object), 'sandgate.dev/supervisor': 'none' };
  }
  (agent.status as { podIPs: string[] }).podIPs = ['127.0.0.1'];
  delete (agent.status as { serviceFQDN?: string }).serviceFQDN;
  (kruise.status as { podInfo: { podIP: string } }).podInfo.podIP = '127.0.0.1';
  kruise.metadata.name = 'kruise';
  agent.metadata.name = 'agent';
  return { agent, kruise };
}

async function cluster(overrides: Record<string, unknown>, gateways = 1) {
  const api = await FakeKubeApi.start();
  cleanup.push(() => api.close());
  const { agent, kruise } = objects();
  api.create(AGENT_SANDBOX, agent);
  api.create(OPENKRUISE_SANDBOX, kruise);
  const up = await startUpstream((_req, res) => res.end('ok'));
  cleanup.push(() => up.close());
  const clock = { t: T0 };
  const gws: TestGateway[] = [];
  for (let i = 0; i < gateways; i++) {
    const drivers = (['agent-sandbox', 'openkruise'] as const).map((kind) => new KubernetesDriver({ kind, kubeConfig: { server: api.url }, backoff: { initialMs: 1, maxMs: 5 }, random: () => 1 }));
    const t = await startTestGateway(drivers, { activityReportIntervalMs: 600_000, activityPatchIntervalMs: 400, gatewayId: `gw-${i}`, ...overrides }, { now: () => clock.t });
    cleanup.push(() => t.close());
    gws.push(t);
  }
  for (const t of gws) await eventually(() => t.gw.view.get('team-a', 'agent')?.status.phase === 'Ready' && t.gw.view.get('team-a', 'kruise')?.status.phase === 'Ready', 5000, 'both sandboxes Ready');
  return { api, up, clock, gws };
}

function get(t: TestGateway, port: number, name: string): Promise<number> {
  return new Promise((resolve, reject) => {
    request({ host: '127.0.0.1', port: t.gw.proxyPort, path: '/', headers: { host: `${port}-${name}.team-a.localhost` } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode!));
    })
      .on('error', reject)
      .end();
  });
}

/** One report round on every gateway, its reports settled. */
const round = async (gws: readonly TestGateway[]): Promise<void> => {
  for (const t of gws) await t.gw.lifecycle.reporter.round();
};
/** One idle check on every gateway, its pauses settled. */
const check = async (gws: readonly TestGateway[]): Promise<void> => {
  for (const t of gws) await t.gw.lifecycle.idle.check();
};

/** Whether this gateway holds the lifecycle writer lock (it logs when it takes it). */
const gwIsWriter = (t: TestGateway): boolean => t.logs.lines.some((l) => l.msg === 'this gateway is the lifecycle writer');

const activityPatches = (api: FakeKubeApi, name: string): RecordedRequest[] => api.patches().filter((p) => p.path.endsWith(`/sandboxes/${name}`) && p.body.includes(LAST_ACTIVITY));
const pausePatches = (api: FakeKubeApi, name: string): RecordedRequest[] => api.patches().filter((p) => p.path.endsWith(`/sandboxes/${name}`) && !p.body.includes(LAST_ACTIVITY));

describe('Kubernetes: activity annotation', () => {
  it('traffic moves sandgate.dev/last-activity, once per interval under constant traffic, and not without traffic', async () => {
    const { api, up, clock, gws } = await cluster({});
    const [t] = gws as [TestGateway];
    // Constant traffic: a request every 100 ms of the clock for 1 s; the patch interval is 400 ms.
    for (let step = 0; step <= 10; step++) {
      clock.t = T0 + step * 100;
      expect(await get(t, up.port, 'agent')).toBe(200);
      await round(gws);
    }
    const patches = activityPatches(api, 'agent');
    expect(patches.map((p) => JSON.parse(p.body).metadata.annotations[LAST_ACTIVITY])).toEqual([new Date(T0).toISOString(), new Date(T0 + 400).toISOString(), new Date(T0 + 800).toISOString()]);
    for (const p of patches) expect(p.contentType).toBe('application/merge-patch+json');
    expect(api.get(AGENT_SANDBOX, 'team-a', 'agent')!.metadata.annotations).toMatchObject({ [LAST_ACTIVITY]: new Date(T0 + 800).toISOString(), 'sandgate.dev/supervisor': 'none' });
    // The other sandbox saw no traffic: never patched.
    expect(activityPatches(api, 'kruise')).toEqual([]);
    // The traffic after the last patch (at 1000) goes out once its interval has passed; then, with no
    // traffic, no more patches however long.
    clock.t += 5000;
    await round(gws);
    expect(activityPatches(api, 'agent').length).toBe(4);
    expect(JSON.parse(activityPatches(api, 'agent')[3]!.body).metadata.annotations[LAST_ACTIVITY]).toBe(new Date(T0 + 1000).toISOString());
    clock.t += 5000;
    await round(gws);
    await round(gws);
    expect(activityPatches(api, 'agent').length).toBe(4);
    // The next request is reported at the next round.
    expect(await get(t, up.port, 'agent')).toBe(200);
    await round(gws);
    expect(activityPatches(api, 'agent').length).toBe(5);
  });

  it('with two gateways on one Redis, only one patches, and it reports the other one\'s traffic', async () => {
    const redis = await startRedisServer();
    cleanup.push(() => redis.stop());
    const { api, up, clock, gws } = await cluster({ presence: redis.url, leaseTtlMs: 1000 }, 2);
    const writers = gws.filter((t) => t.gw.lifecycle.reporter !== undefined && t.gw.log !== undefined && gwIsWriter(t));
    expect(writers.length).toBe(1);
    const writer = writers[0]!;
    const other = gws.find((t) => t !== writer)!;
    for (let step = 0; step <= 8; step++) {
      clock.t = T0 + step * 100;
      // Traffic on both gateways; the kruise sandbox only through the one that is not the writer.
      expect(await get(gws[step % 2]!, up.port, 'agent')).toBe(200);
      expect(await get(other, up.port, 'kruise')).toBe(200);
      // The other gateway publishes; the writer hears it, then reports.
      await other.gw.lifecycle.reporter.round();
      await eventually(() => writer.gw.activity.last('team-a/kruise') === clock.t, 5000, 'the peer activity on the writer');
      await round(gws);
    }
    const agent = activityPatches(api, 'agent').map((p) => JSON.parse(p.body).metadata.annotations[LAST_ACTIVITY]);
    expect(agent).toEqual([T0, T0 + 400, T0 + 800].map((t) => new Date(t).toISOString()));
    const kruise = activityPatches(api, 'kruise').map((p) => JSON.parse(p.body).metadata.annotations[LAST_ACTIVITY]);
    expect(kruise).toEqual([T0, T0 + 400, T0 + 800].map((t) => new Date(t).toISOString()));
  });
});

describe('Kubernetes: idle pause', () => {
  it.each([
    ['one gateway', 1],
    ['two gateways on one Redis', 2],
  ])('an idle sandbox of each kind gets exactly one pause patch of its shape (%s)', async (_what, n) => {
    const extra: Record<string, unknown> = { idleTimeout: '1s' };
    if (n > 1) {
      const redis = await startRedisServer();
      cleanup.push(() => redis.stop());
      extra.presence = redis.url;
      extra.leaseTtlMs = 1000;
      // With peers, a timeout is waited out plus one report interval (a peer's activity arrives that late).
      extra.activityReportIntervalMs = 200;
    }
    const { api, clock, gws } = await cluster(extra, n);
    clock.t = T0 + 900;
    await check(gws);
    expect(pausePatches(api, 'agent')).toEqual([]);
    clock.t = T0 + 2000;
    await check(gws);
    // Later checks, on every gateway, ask nothing more: the sandboxes are still Ready here (no controller
    // acts on the patch), and each was asked once.
    clock.t = T0 + 4000;
    await check(gws);
    await check(gws);
    expect(pausePatches(api, 'agent').map((p) => JSON.parse(p.body))).toEqual([{ spec: { replicas: 0 } }]);
    expect(pausePatches(api, 'kruise').map((p) => JSON.parse(p.body))).toEqual([{ spec: { paused: true } }]);
    expect(api.get(AGENT_SANDBOX, 'team-a', 'agent')!.spec).toMatchObject({ replicas: 0 });
    expect(api.get(OPENKRUISE_SANDBOX, 'team-a', 'kruise')!.spec).toMatchObject({ paused: true });
    // The decision and its reason: in the API of the gateway that made it, and in its log.
    const writer = gws.find((t) => t.logs.lines.some((l) => /pausing idle sandbox team-a\/agent/.test(String(l.msg))));
    expect(writer).toBeDefined();
    const body = (await (await fetch(`${writer!.admin}/v1/sandboxes/team-a/agent`)).json()) as { idle: { decision: { decision: string; reason: string } } };
    expect(body.idle.decision).toMatchObject({ decision: 'paused', reason: expect.stringMatching(/^no traffic for 2s \(idle timeout 1s\)$/) });
  });

  it('a sandbox annotated sandgate.dev/idle-timeout: 0 is never paused; one annotated 3s waits 3s', async () => {
    const api = await FakeKubeApi.start();
    cleanup.push(() => api.close());
    const { agent, kruise } = objects();
    agent.metadata.annotations = { ...(agent.metadata.annotations as object), 'sandgate.dev/idle-timeout': '0' };
    kruise.metadata.annotations = { ...(kruise.metadata.annotations as object), 'sandgate.dev/idle-timeout': '3s' };
    api.create(AGENT_SANDBOX, agent);
    api.create(OPENKRUISE_SANDBOX, kruise);
    const clock = { t: T0 };
    const drivers = (['agent-sandbox', 'openkruise'] as const).map((kind) => new KubernetesDriver({ kind, kubeConfig: { server: api.url } }));
    const t = await startTestGateway(drivers, { activityReportIntervalMs: 600_000, idleTimeout: '1s' }, { now: () => clock.t });
    cleanup.push(() => t.close());
    await eventually(() => t.gw.view.get('team-a', 'kruise')?.status.phase === 'Ready' && t.gw.view.get('team-a', 'agent')?.status.phase === 'Ready', 5000, 'Ready');
    clock.t = T0 + 2000;
    await check([t]);
    expect(pausePatches(api, 'kruise')).toEqual([]);
    clock.t = T0 + 3500;
    await check([t]);
    expect(pausePatches(api, 'kruise').length).toBe(1);
    clock.t = T0 + 100_000;
    await check([t]);
    expect(pausePatches(api, 'agent')).toEqual([]);
  });
});
