import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config/load.js';
import { startGateway } from '../../src/gateway.js';
import { MemoryLogSink } from '../../src/observability/logger.js';
import { eventually } from '../helpers/eventually.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { rawRequest, startUpstream, text, viaProxy } from '../helpers/upstream.js';

/**
 * `--metrics-namespaces`: decisions, bytes and readiness waits by namespace, bounded by the allow-list —
 * a namespace not on it is counted as `other` and never appears as a label value.
 */

const at = { kind: 'address' as const, addresses: ['127.0.0.1'] };

describe('per-namespace figures in /metrics', () => {
  let t: TestGateway;
  let upstream: Awaited<ReturnType<typeof startUpstream>>;
  let metrics: string;

  beforeAll(async () => {
    upstream = await startUpstream((req, res) => {
      req.resume();
      req.on('end', () => res.end('0123456789'));
    });
    const later = snapshot({ namespace: 'team-a', name: 'later', uid: 'l', sessionModel: 'none', endpoint: at, state: 'starting', conditions: [] });
    const driver = new TestDriver([snapshot({ namespace: 'team-a', name: 'web', uid: 'a', sessionModel: 'none', endpoint: at }), snapshot({ namespace: 'team-b', name: 'web', uid: 'b', sessionModel: 'none', endpoint: at }), later]);
    t = await startTestGateway([driver], { metricsNamespaces: ['team-a', 'team-c'], readinessWaitMs: 5000 });
    const host = (ns: string, name = 'web') => `${upstream.port}-${name}.${ns}.localhost`;
    await text(await viaProxy(t.gw.proxyPort!, { host: host('team-a'), method: 'POST', path: '/', body: Buffer.alloc(100) }));
    await text(await viaProxy(t.gw.proxyPort!, { host: host('team-b') }));
    await rawRequest(t.gw.adminPort, '/authz/', { host: `${upstream.port}-missing.team-a.localhost` });
    const waited = viaProxy(t.gw.proxyPort!, { host: host('team-a', 'later') });
    await eventually(() => t.gw.view.waiters.size === 1);
    driver.upsert({ ...later, resourceVersion: '2', state: 'ready', conditions: [{ type: 'Ready', status: 'True', reason: 'DependenciesReady', message: '' }] });
    await text(await waited);
    metrics = await (await fetch(`${t.admin}/metrics`)).text();
  });
  afterAll(async () => {
    await t.close();
    await upstream.close();
  });

  const value = (series: string): number => {
    const line = metrics.split('\n').find((l) => l.startsWith(series + ' '));
    if (line === undefined) throw new Error(`${series} is not exposed`);
    return Number(line.slice(series.length + 1));
  };

  it('counts decisions per listed namespace, the rest as other', () => {
    expect(value('sandgate_edge_namespace_decisions_total{sandbox_namespace="team-a",outcome="allow"}')).toBe(2);
    expect(value('sandgate_edge_namespace_decisions_total{sandbox_namespace="team-a",outcome="deny"}')).toBe(1);
    expect(value('sandgate_edge_namespace_decisions_total{sandbox_namespace="other",outcome="allow"}')).toBe(1);
    expect(value('sandgate_edge_namespace_decisions_total{sandbox_namespace="team-c",outcome="allow"}')).toBe(0);
  });

  it('counts body bytes both ways and the waits with their time', () => {
    expect(value('sandgate_edge_namespace_bytes_total{sandbox_namespace="team-a",direction="received"}')).toBe(100);
    expect(value('sandgate_edge_namespace_bytes_total{sandbox_namespace="team-a",direction="sent"}')).toBe(20);
    expect(value('sandgate_edge_namespace_bytes_total{sandbox_namespace="other",direction="sent"}')).toBe(10);
    expect(value('sandgate_edge_namespace_readiness_waits_total{sandbox_namespace="team-a"}')).toBe(1);
    expect(value('sandgate_edge_namespace_readiness_wait_seconds_total{sandbox_namespace="team-a"}')).toBeGreaterThan(0);
  });

  it('never shows a namespace that is not on the list', () => {
    expect(metrics).not.toContain('team-b');
  });
});

describe('--metrics-namespaces is checked at start', () => {
  it.each([['other'], ['Team_A'], ['']])('%j is refused with config_invalid, and nothing starts', async (ns) => {
    const logs = new MemoryLogSink();
    const config = resolveConfig({ overrides: { listenHost: '127.0.0.1', grpcPort: 0, adminPort: 0, proxyPort: 0, relayPort: 0, metricsNamespaces: [ns] } });
    await expect(startGateway({ config, drivers: [], logDestination: logs })).rejects.toMatchObject({ code: 'config_invalid' });
  });

  it('off (the default): no per-namespace series at all', async () => {
    const g = await startTestGateway([new TestDriver()]);
    try {
      expect(await (await fetch(`${g.admin}/metrics`)).text()).not.toContain('sandgate_edge_namespace_');
    } finally {
      await g.close();
    }
  });
});
