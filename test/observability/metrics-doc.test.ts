import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestDriver } from '../helpers/test-driver.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';

/** The metrics table of docs/operations.md: metric name → label names (as written). */
function documented(): Map<string, string[]> {
  const doc = readFileSync(new URL('../../docs/operations.md', import.meta.url), 'utf8');
  const section = doc.slice(doc.indexOf('## Metrics'));
  const rows = section.slice(0, section.indexOf('\n\n', section.indexOf('| metric |'))).split('\n').filter((l) => l.startsWith('| `'));
  const out = new Map<string, string[]>();
  for (const row of rows) {
    const [, names, labels] = row.split('|');
    const labelList = labels!.split(',').map((l) => l.trim()).filter((l) => l !== '');
    for (const m of names!.matchAll(/`([a-z_:][a-z0-9_:]*)`/g)) out.set(m[1]!, labelList);
  }
  return out;
}

/** /metrics: metric family name → label names seen on its samples, and its help text. */
function exposed(text: string): Map<string, { labels: Set<string>; help: string }> {
  const out = new Map<string, { labels: Set<string>; help: string }>();
  for (const line of text.split('\n')) {
    const help = /^# HELP (\S+) (.*)$/.exec(line);
    if (help !== null) out.set(help[1]!, { labels: new Set(), help: help[2]! });
  }
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || line === '') continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? /.exec(line);
    if (m === null) continue;
    const family = [...out.keys()].find((f) => m[1] === f || m[1] === `${f}_bucket` || m[1] === `${f}_sum` || m[1] === `${f}_count`);
    if (family === undefined) continue;
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_]+)="/g)) if (l[1] !== 'le' && l[1] !== 'quantile') out.get(family)!.labels.add(l[1]!);
  }
  return out;
}

describe('/metrics matches the table in docs/operations.md', () => {
  let t: TestGateway;
  let metrics: Map<string, { labels: Set<string>; help: string }>;
  beforeAll(async () => {
    t = await startTestGateway([new TestDriver()], { supervisorSecret: 'metrics-doc-test-supervisor-secret-0123456789', metricsNamespaces: ['team-a'] });
    metrics = exposed(await (await fetch(`${t.admin}/metrics`)).text());
  });
  afterAll(() => t.close());

  it('every exposed metric is documented, with its labels', () => {
    const doc = documented();
    for (const [name, { labels }] of metrics) {
      expect(doc.has(name), `${name} is not in docs/operations.md`).toBe(true);
      if (labels.size > 0) expect([...labels].sort(), name).toEqual([...doc.get(name)!].sort());
    }
  });

  it('every documented metric is exposed', () => {
    for (const name of documented().keys()) expect(metrics.has(name), `${name} is documented but not exposed`).toBe(true);
  });

  it('process and runtime metrics keep their standard names; sandgate\'s own are under sandgate_', () => {
    for (const name of ['process_cpu_seconds_total', 'process_resident_memory_bytes', 'nodejs_eventloop_lag_seconds', 'nodejs_gc_duration_seconds']) expect(metrics.has(name), name).toBe(true);
    const own = [...metrics.keys()].filter((n) => !n.startsWith('process_') && !n.startsWith('nodejs_'));
    expect(own.length).toBeGreaterThan(0);
    for (const n of own) expect(n).toMatch(/^sandgate_[a-z]+_[a-z0-9_]+$/);
    expect([...metrics.keys()].filter((n) => n.startsWith('sandgate_process'))).toEqual([]);
  });

  it('help texts of labelled sandgate metrics list the label values', () => {
    expect(metrics.get('sandgate_edge_readiness_waits_total')!.help).toContain('ready, final, timeout, busy, closed, aborted, resume_failed');
    expect(metrics.get('sandgate_sessions_closes_total')!.help).toMatch(/1000, 1001, 1006, 1009, 1012, 4000, .*4500, other/);
    expect(metrics.get('sandgate_view_sandboxes_by_phase')!.help).toContain('Ready');
    expect(metrics.get('sandgate_drivers_events_total')!.help).toContain('applied, stale, resync');
  });
});
