import type { Registry } from 'prom-client';
import { SandgateError } from '../domain/errors.js';
import { isDnsLabel } from '../domain/labels.js';
import type { Exchange, ExchangeSink } from './exchange.js';
import { SlotCounter } from './fast-metrics.js';

/**
 * Per-tenant figures without per-sandbox cardinality (`--metrics-namespaces`): decisions, bytes and
 * readiness waits by `sandbox_namespace`, for the namespaces on the allow-list; every other namespace
 * (and a request that named none) counts as `other`. So a series set is bounded by the list, whatever the
 * number of sandboxes or tenants. They are read from the exchange record (exchange.ts) like the access
 * log, so the list turns the records on; empty (the default), none of this exists.
 *
 * The label is `sandbox_namespace`, not `namespace`: Prometheus's Kubernetes discovery sets `namespace`
 * on every series to the gateway pod's own.
 */

export const OTHER_NAMESPACE = 'other';
const OUTCOMES = ['allow', 'deny'] as const;
const DIRECTIONS = ['received', 'sent'] as const;

/** The allow-list, checked: DNS labels, each once, never `other`. */
export function metricsNamespaces(list: readonly string[]): string[] {
  for (const ns of list) {
    if (!isDnsLabel(ns) || ns === OTHER_NAMESPACE) throw new SandgateError('config_invalid', `--metrics-namespaces: ${JSON.stringify(ns)} must be a namespace (a DNS-1123 label) other than "${OTHER_NAMESPACE}"`);
  }
  return [...new Set(list)];
}

export class NamespaceFigures implements ExchangeSink {
  private readonly index: ReadonlyMap<string, number>;
  private readonly other: number;
  private readonly decisions: SlotCounter;
  private readonly bytes: SlotCounter;
  private readonly waits: SlotCounter;
  private readonly waitSeconds: SlotCounter;

  constructor(registry: Registry, namespaces: readonly string[]) {
    const labels = [...namespaces, OTHER_NAMESPACE];
    this.index = new Map(namespaces.map((ns, i) => [ns, i]));
    this.other = namespaces.length;
    const values = labels.join(', ');
    this.decisions = new SlotCounter(
      registry,
      'sandgate_edge_namespace_decisions_total',
      `Final decisions by sandbox namespace (${values}) and outcome (allow, deny)`,
      labels.flatMap((ns) => OUTCOMES.map((outcome) => ({ sandbox_namespace: ns, outcome }))),
    );
    this.bytes = new SlotCounter(
      registry,
      'sandgate_edge_namespace_bytes_total',
      `Body bytes the embedded proxy and the relay listener carried, by sandbox namespace (${values}) and direction (received from clients, sent to them)`,
      labels.flatMap((ns) => DIRECTIONS.map((direction) => ({ sandbox_namespace: ns, direction }))),
    );
    this.waits = new SlotCounter(registry, 'sandgate_edge_namespace_readiness_waits_total', `Readiness waits by sandbox namespace (${values})`, labels.map((ns) => ({ sandbox_namespace: ns })));
    this.waitSeconds = new SlotCounter(registry, 'sandgate_edge_namespace_readiness_wait_seconds_total', `Time spent in readiness waits by sandbox namespace (${values})`, labels.map((ns) => ({ sandbox_namespace: ns })));
  }

  write(x: Exchange): void {
    const ns = x.namespace === undefined ? this.other : (this.index.get(x.namespace) ?? this.other);
    // The relay listener carries what a decision elsewhere allowed: bytes only (`allowed` stays unset).
    if (x.allowed !== undefined) this.decisions.inc(ns * 2 + (x.allowed ? 0 : 1));
    if (x.door === 'proxy' || x.door === 'relay') {
      this.bytes.add(ns * 2, x.bytesIn);
      this.bytes.add(ns * 2 + 1, x.bytesOut);
    }
    if (x.waitStart !== 0) {
      this.waits.inc(ns);
      this.waitSeconds.add(ns, ((x.waitEnd || x.endTime) - x.waitStart) / 1000);
    }
  }
}
