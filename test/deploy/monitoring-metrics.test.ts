import { readFileSync } from 'node:fs';
import { get } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { resolveConfig } from '../../src/config/load.js';
import { supervisorKeysFromConfig } from '../../src/config/secrets.js';
import { SupervisorClient } from '../../src/sessions/supervisor-client.js';
import { mintSupervisorToken } from '../../src/sessions/supervisor-token.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { eventually } from '../helpers/eventually.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';

/**
 * The PrometheusRule and the Grafana dashboard of deploy/kubernetes/monitoring query only what a real
 * gateway's /metrics exposes: a gateway is started and given a little of each kind of work (a driver list
 * and a driver error, a request that waits for a sandbox, a supervisor socket that closes), its exposition
 * read live, and every metric (`sandgate_*`, and the runtime's `process_*` and `nodejs_*`), every label a
 * query filters or groups on, and every label value of a series the gateway creates up front (decisions by
 * door, outcome and code; readiness states; phases) must be there.
 */

const MONITORING = new URL('../../deploy/kubernetes/monitoring/', import.meta.url);
/** Labels Prometheus adds to every scraped series (target labels), besides the histogram's `le`. */
const TARGET_LABELS = new Set(['namespace', 'pod', 'job', 'instance', 'service', 'endpoint', 'container', 'le']);

interface Exposition {
  /** Series names (histograms as _bucket, _sum, _count) → label → values seen. */
  readonly series: Map<string, Map<string, Set<string>>>;
  /** Metrics whose every label value exists before any traffic. */
  readonly complete: Set<string>;
}

function readExposition(text: string): Exposition {
  const series = new Map<string, Map<string, Set<string>>>();
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type !== null) {
      const [, name, kind] = type;
      const names = kind === 'histogram' ? ['_bucket', '_sum', '_count'].map((s) => name! + s) : kind === 'summary' ? [name!, `${name!}_sum`, `${name!}_count`] : [name!];
      for (const n of names) series.set(n, new Map());
      continue;
    }
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? /.exec(line);
    if (sample === null) continue;
    const labels = series.get(sample[1]!);
    for (const m of (sample[2] ?? '').matchAll(/([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g)) {
      if (!labels?.has(m[1]!)) labels?.set(m[1]!, new Set());
      labels?.get(m[1]!)?.add(m[2]!);
    }
  }
  return { series, complete: new Set(['sandgate_edge_decisions_total', 'sandgate_readiness_state', 'sandgate_view_sandboxes_by_phase', 'sandgate_edge_namespace_decisions_total']) };
}

/** Every sandgate, process and Node.js metric a PromQL expression names, with its label matchers; and the labels it groups by. */
function queried(expr: string): { metrics: { name: string; matchers: { label: string; op: string; value: string }[] }[]; groupBy: string[] } {
  const metrics = [...expr.matchAll(/\b((?:sandgate|process|nodejs)_[a-z0-9_]+)\b(?:\{([^}]*)\})?/g)].map((m) => ({
    name: m[1]!,
    matchers: [...(m[2] ?? '').matchAll(/(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"/g)].map((x) => ({ label: x[1]!, op: x[2]!, value: x[3]! })),
  }));
  const groupBy = [...expr.matchAll(/\b(?:by|without)\s*\(([^)]*)\)/g)].flatMap((m) => m[1]!.split(',').map((s) => s.trim()).filter(Boolean));
  return { metrics, groupBy };
}

/** What in `expr` the exposition does not have. */
function problems(expr: string, exp: Exposition): string[] {
  const out: string[] = [];
  const { metrics, groupBy } = queried(expr);
  if (metrics.length === 0) out.push(`no sandgate, process or nodejs metric in ${expr}`);
  const labelsOfQuery = new Set<string>(TARGET_LABELS);
  for (const m of metrics) {
    const labels = exp.series.get(m.name);
    if (labels === undefined) {
      out.push(`${m.name} is not in /metrics`);
      continue;
    }
    for (const l of labels.keys()) labelsOfQuery.add(l);
    for (const { label, op, value } of m.matchers) {
      if (TARGET_LABELS.has(label)) continue;
      if (labels.size > 0 && !labels.has(label)) out.push(`${m.name} has no label ${label}`);
      if (!exp.complete.has(m.name) || op.startsWith('!')) continue;
      const wanted = op === '=~' ? value.split('|') : [value];
      for (const v of wanted) if (!labels.get(label)?.has(v)) out.push(`${m.name}{${label}="${v}"} is never exposed`);
    }
  }
  for (const l of groupBy) if (!labelsOfQuery.has(l)) out.push(`grouping by ${l}, a label none of ${metrics.map((m) => m.name).join(', ')} has`);
  return out;
}

const RULES = parse(readFileSync(new URL('prometheusrule.yaml', MONITORING), 'utf8')) as { spec: { groups: { rules: { alert: string; expr: string }[] }[] } };
const DASHBOARD = JSON.parse(readFileSync(new URL('sandgate-dashboard.json', MONITORING), 'utf8')) as {
  panels: { title: string; targets: { expr: string }[] }[];
  templating: { list: { name: string; definition?: string }[] };
};
const ALERTS = RULES.spec.groups.flatMap((g) => g.rules).map((r) => [r.alert, r.expr] as const);
const PANELS = [
  ...DASHBOARD.panels.flatMap((p) => p.targets.map((t, i) => [`${p.title} #${i + 1}`, t.expr] as const)),
  ...DASHBOARD.templating.list.filter((v) => v.definition !== undefined).map((v) => [`variable ${v.name}`, v.definition!] as const),
];

const SECRET = 'monitoring-test-secret-0123456789abcdef';
let gateway: TestGateway;
let exposition: Exposition;

const metricsText = async (gw: TestGateway): Promise<string> => (await fetch(`${gw.admin}/metrics`)).text();

beforeAll(async () => {
  // The supervisor endpoint on (a secret), so the session metrics are registered as in production; a
  // sandbox whose supervisor never connects, so a request for it waits (briefly) and times out.
  const driver = new TestDriver([snapshot()]);
  gateway = await startTestGateway([driver], { supervisorSecret: SECRET, readinessWaitMs: 1, metricsNamespaces: ['team-a'] });
  driver.sink!.error(new Error('a bad object'));
  // node:http, not fetch: fetch does not send a Host header of the caller's choosing.
  const status = await new Promise<number | undefined>((resolve, reject) =>
    get({ host: '127.0.0.1', port: gateway.gw.adminPort, path: '/authz/', headers: { host: '8000-web.team-a.localhost' } }, (res) => {
      res.resume();
      resolve(res.statusCode);
    }).once('error', reject),
  );
  expect(status).toBe(503);
  const keys = supervisorKeysFromConfig(resolveConfig({ overrides: { supervisorSecret: SECRET } }))!;
  const token = await mintSupervisorToken(keys, 'team-a', 'web', 60);
  const supervisor = new SupervisorClient({ gateway: `ws://127.0.0.1:${gateway.gw.supervisorPort!}`, token, namespace: 'team-a', name: 'web', instanceId: 'inst-1' });
  await new Promise((resolve) => supervisor.once('accepted', resolve).start());
  supervisor.stop();
  await eventually(async () => /^sandgate_sessions_closes_total\{/m.test(await metricsText(gateway)), 5000, 'the close counted');
  exposition = readExposition(await metricsText(gateway));
});

afterAll(async () => {
  await gateway.close();
});

describe('deploy/kubernetes/monitoring against a live /metrics', () => {
  it('covers the dashboard panels the operators need', () => {
    const titles = DASHBOARD.panels.map((p) => p.title);
    for (const t of ['Decisions by code', 'Decision latency', 'Readiness waits', 'Supervisor sessions', 'Presence degradation', 'Redis errors', 'Decisions by tenant namespace']) expect(titles).toContain(t);
  });

  it.each(ALERTS)('alert %s queries what /metrics exposes', (_alert, expr) => {
    expect(problems(expr, exposition)).toEqual([]);
  });

  it.each(PANELS)('dashboard %s queries what /metrics exposes', (_panel, expr) => {
    expect(problems(expr, exposition)).toEqual([]);
  });

  it('notices a renamed metric, a missing label and a label value the gateway never creates', () => {
    expect(problems('rate(sandgate_edge_decision_total[5m])', exposition).join()).toMatch(/not in \/metrics/);
    expect(problems('rate(sandgate_process_cpu_seconds_total[5m])', exposition).join()).toMatch(/not in \/metrics/);
    expect(problems('sum by (tenant) (rate(sandgate_edge_decisions_total[5m]))', exposition).join()).toMatch(/grouping by tenant/);
    expect(problems('sandgate_edge_decisions_total{code="no_such_code"}', exposition).join()).toMatch(/never exposed/);
    expect(problems('sandgate_readiness_state{phase="ready"}', exposition).join()).toMatch(/no label phase/);
  });
});

describe('readiness gauges', () => {
  it('follow /readyz: degraded while Redis is down, ready again when it returns', async () => {
    const redis = await startRedisServer();
    const gw = await startTestGateway([], { presence: redis.url, supervisorSecret: SECRET, leaseTtlMs: 1000 });
    const metric = async (line: RegExp): Promise<boolean> => line.test(await (await fetch(`${gw.admin}/metrics`)).text());
    try {
      await eventually(() => metric(/^sandgate_readiness_state\{state="ready"\} 1$/m), 5000, 'ready');
      expect(await metric(/^sandgate_presence_degraded 0$/m)).toBe(true);
      await redis.kill();
      await eventually(() => metric(/^sandgate_presence_degraded 1$/m), 5000, 'presence degraded');
      expect(await metric(/^sandgate_readiness_state\{state="degraded"\} 1$/m)).toBe(true);
      expect(((await (await fetch(`${gw.admin}/readyz`)).json()) as { status: string }).status).toBe('degraded');
      await redis.restart();
      await eventually(() => metric(/^sandgate_presence_degraded 0$/m), 10_000, 'presence healthy again');
      await eventually(() => metric(/^sandgate_readiness_state\{state="ready"\} 1$/m), 5000, 'ready again');
    } finally {
      await gw.close();
      await redis.stop();
    }
  });
});
