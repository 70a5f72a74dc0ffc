import { createHistogram, type RecordableHistogram } from 'node:perf_hooks';

/**
 * Latency as every row reads it: Node's HDR histogram (perf_hooks) records nanoseconds in the process that
 * sent the requests, and only its summary crosses a process boundary.
 */

/** p50 / p99 / p99.9 and the mean in microseconds, and how many values. */
export interface LatencySummary {
  readonly p50: number;
  readonly p99: number;
  readonly p999: number;
  readonly mean: number;
  readonly count: number;
}

export type Latencies = RecordableHistogram;

export const latencies = (): Latencies => createHistogram();

/** Records one value in nanoseconds (the histogram takes whole nanoseconds from 1). */
export function record(h: Latencies, ns: number): void {
  h.record(Math.max(1, Math.round(ns)));
}

export function summarise(h: Latencies): LatencySummary {
  if (h.count === 0) return { p50: 0, p99: 0, p999: 0, mean: 0, count: 0 };
  return { p50: h.percentile(50) / 1000, p99: h.percentile(99) / 1000, p999: h.percentile(99.9) / 1000, mean: h.mean / 1000, count: h.count };
}
