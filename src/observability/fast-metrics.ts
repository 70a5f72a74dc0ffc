import type { Metric, Registry } from 'prom-client';

/**
 * Counters and a histogram for the hot path: a decision adds to a typed array (no label hashing, no
 * object lookups, no allocation) and prom-client reads the arrays only when /metrics is scraped. The
 * exposition is prom-client's own (these objects give it `{name, help, type, values}` as its metrics do).
 */

interface Sample {
  readonly value: number;
  readonly labels: Record<string, string | number>;
  readonly metricName?: string;
}

function register(registry: Registry, m: { name: string; help: string; type: string; get(): Promise<unknown> }): void {
  registry.registerMetric(m as unknown as Metric);
}

/** A counter over a fixed set of label combinations, addressed by slot number. */
export class SlotCounter {
  private readonly counts: Float64Array;

  constructor(
    registry: Registry,
    readonly name: string,
    readonly help: string,
    /** The label set of each slot. */
    private readonly slots: readonly Record<string, string>[],
  ) {
    this.counts = new Float64Array(slots.length);
    register(registry, { name, help, type: 'counter', get: async () => ({ name, help, type: 'counter', values: this.values(), aggregator: 'sum' }) });
  }

  inc(slot: number): void {
    this.counts[slot]!++;
  }

  add(slot: number, n: number): void {
    this.counts[slot]! += n;
  }

  private values(): Sample[] {
    return this.slots.map((labels, i) => ({ value: this.counts[i]!, labels }));
  }
}

/** A histogram per label value (one label), addressed by index. */
export class IndexedHistogram {
  private readonly bucketCounts: Float64Array;
  private readonly sums: Float64Array;
  private readonly totals: Float64Array;

  constructor(
    registry: Registry,
    readonly name: string,
    readonly help: string,
    private readonly label: string,
    private readonly labelValues: readonly string[],
    private readonly buckets: readonly number[],
  ) {
    this.bucketCounts = new Float64Array(labelValues.length * buckets.length);
    this.sums = new Float64Array(labelValues.length);
    this.totals = new Float64Array(labelValues.length);
    register(registry, { name, help, type: 'histogram', get: async () => ({ name, help, type: 'histogram', values: this.values(), aggregator: 'sum' }) });
  }

  observe(index: number, value: number): void {
    const b = this.buckets;
    for (let i = 0; i < b.length; i++) {
      if (value <= b[i]!) {
        this.bucketCounts[index * b.length + i]!++;
        break;
      }
    }
    this.sums[index]! += value;
    this.totals[index]!++;
  }

  private values(): Sample[] {
    const out: Sample[] = [];
    const b = this.buckets;
    for (let l = 0; l < this.labelValues.length; l++) {
      const lv = this.labelValues[l]!;
      let cumulative = 0;
      for (let i = 0; i < b.length; i++) {
        cumulative += this.bucketCounts[l * b.length + i]!;
        out.push({ metricName: this.name + '_bucket', labels: { le: b[i]!, [this.label]: lv }, value: cumulative });
      }
      out.push({ metricName: this.name + '_bucket', labels: { le: '+Inf', [this.label]: lv }, value: this.totals[l]! });
      out.push({ metricName: this.name + '_sum', labels: { [this.label]: lv }, value: this.sums[l]! });
      out.push({ metricName: this.name + '_count', labels: { [this.label]: lv }, value: this.totals[l]! });
    }
    return out;
  }
}
