import type { MetricValue, Registry } from 'prom-client';
import { OTHER_NAMESPACE } from '../../observability/namespace-figures.js';

/** A sample as histograms report it: prom-client's value plus the series name (`_bucket`, `_sum`, `_count`). */
type Sample = MetricValue<string> & { readonly metricName?: string };

/**
 * The counters the console charts, read from the gateway's own Prometheus registry (the very numbers
 * `/metrics` exposes): cumulative totals, summed over front doors. The browser keeps the previous sample
 * and charts the differences (rates, and quantiles from bucket deltas), so the server keeps no per-viewer
 * state.
 */

export interface StatsSnapshot {
  /** Epoch ms when the sample was read. */
  readonly t: number;
  /** Final decisions by code (`ok` for an allow), all doors together. */
  readonly decisions: Record<string, number>;
  /** Decision-time histogram, all doors together: upper bounds in seconds (last is Infinity as null) and cumulative counts. */
  readonly latency: { readonly le: (number | null)[]; readonly counts: number[] };
  /** Readiness waits by outcome. */
  readonly waits: Record<string, number>;
  /**
   * Whether `decisions`, `latency` and `waits` are filled: they are gateway-wide, every tenant's traffic
   * together, so only a caller who sees every namespace gets them (a team key gets its namespaces'
   * figures alone, and empty gateway-wide ones).
   */
  readonly gatewayWide: boolean;
  /**
   * Final decisions by sandbox namespace (`--metrics-namespaces`; empty without it), only the namespaces
   * the caller sees — `other` too only for a caller who sees every namespace.
   */
  readonly namespaces: Record<string, number>;
}

async function values(registry: Registry, name: string): Promise<Sample[]> {
  const metric = registry.getSingleMetric(name);
  if (metric === undefined) return [];
  return (await metric.get()).values;
}

/** `sees`: the namespaces the caller may see; `seesAll`: every one (no key store, or the admin team). */
export async function statsSnapshot(registry: Registry, now: number, sees: (namespace: string) => boolean, seesAll: boolean): Promise<StatsSnapshot> {
  const decisions: Record<string, number> = {};
  for (const v of await values(registry, 'sandgate_edge_decisions_total')) {
    const code = String(v.labels.code ?? 'unknown');
    decisions[code] = (decisions[code] ?? 0) + v.value;
  }
  const buckets = new Map<string, number>();
  for (const v of await values(registry, 'sandgate_edge_decision_duration_seconds')) {
    if (v.metricName !== 'sandgate_edge_decision_duration_seconds_bucket') continue;
    const le = String(v.labels.le);
    buckets.set(le, (buckets.get(le) ?? 0) + v.value);
  }
  const bounds = [...buckets.keys()].sort((a, b) => Number(a === '+Inf' ? Infinity : a) - Number(b === '+Inf' ? Infinity : b));
  const waits: Record<string, number> = {};
  for (const v of await values(registry, 'sandgate_edge_readiness_waits_total')) {
    const outcome = String(v.labels.outcome ?? 'unknown');
    waits[outcome] = (waits[outcome] ?? 0) + v.value;
  }
  const namespaces: Record<string, number> = {};
  for (const v of await values(registry, 'sandgate_edge_namespace_decisions_total')) {
    const ns = String(v.labels.sandbox_namespace);
    // `other` holds every unlisted namespace: only a caller who sees them all may read it.
    if (!(ns === OTHER_NAMESPACE ? seesAll : sees(ns))) continue;
    namespaces[ns] = (namespaces[ns] ?? 0) + v.value;
  }
  if (!seesAll) return { t: now, gatewayWide: false, decisions: {}, namespaces, latency: { le: [], counts: [] }, waits: {} };
  return {
    t: now,
    gatewayWide: true,
    decisions,
    namespaces,
    latency: { le: bounds.map((b) => (b === '+Inf' ? null : Number(b))), counts: bounds.map((b) => buckets.get(b)!) },
    waits,
  };
}
