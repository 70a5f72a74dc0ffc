import { createHistogram, type RecordableHistogram } from 'node:perf_hooks';

/** Recorded in ns in the process that sent the requests; only the summary (in µs) crosses a process boundary. */
export interface LatencySummary {
  readonly p50: number;
  readonly p99: number;
  readonly p999: number;
  readonly mean: number;
  readonly count: number;
}

export const latencies = (): RecordableHistogram => createHistogram();

/** The histogram takes whole nanoseconds from 1. */
export function record(h: RecordableHistogram, ns: number): void {
  h.record(Math.max(1, Math.round(ns)));
}

export function summarise(h: RecordableHistogram): LatencySummary {
  if (h.count === 0) return { p50: 0, p99: 0, p999: 0, mean: 0, count: 0 };
  return { p50: h.percentile(50) / 1000, p99: h.percentile(99) / 1000, p999: h.percentile(99.9) / 1000, mean: h.mean / 1000, count: h.count };
}
