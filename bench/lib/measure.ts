import { join } from 'node:path';
import type { LoadResult } from './grpc-load.js';
import { Histogram, summarise } from './histogram.js';
import { sleep } from './processes.js';
import { row, type Row } from './report.js';
import type { Timing } from './section.js';
import type { Target } from './targets.js';

/** A load run plus how busy the target was during its window. */
export interface Measured extends LoadResult {
  /** CPU the target used during the window, in cores. */
  readonly targetCpuCores: number;
}

let windows = 0;

/**
 * Runs `load` against `target` and samples the target's CPU time over the measured window (and, with
 * `--cpu-prof-windows`, profiles the window: `<n>-<target>.cpuprofile`, the profiler's own cost included).
 */
export async function measured(target: Target, t: Timing, load: () => Promise<LoadResult>): Promise<Measured> {
  const dir = target.windowProfileDir;
  const running = load();
  await sleep(t.warmupMs);
  if (dir !== undefined) await target.child.request('profileStart');
  const c0 = await target.cpuMicros();
  await sleep(t.durationMs);
  const c1 = await target.cpuMicros();
  if (dir !== undefined) await target.child.request('profileStop', { file: join(dir, `${++windows}-${target.name}.cpuprofile`) });
  const result = await running;
  return { ...result, targetCpuCores: (c1 - c0) / 1000 / t.durationMs };
}

/**
 * Runs `run` with each target's profiler on for its whole length (`--cpu-prof-windows`), for loads that
 * measure several targets at once (cost.ts alternateHttp): `<n>-<target>.cpuprofile` per target.
 */
export async function profiledTogether<T>(targets: readonly Target[], run: () => Promise<T>): Promise<T> {
  const on = targets.filter((t) => t.windowProfileDir !== undefined);
  for (const t of on) await t.child.request('profileStart');
  const out = await run();
  for (const t of on) await t.child.request('profileStop', { file: join(t.windowProfileDir!, `${++windows}-${t.name}.cpuprofile`) });
  return out;
}

/** Two runs of the same target as one: counts and histograms summed, CPU averaged over the time. */
export function mergeRuns(a: Measured, b: Measured): Measured {
  const histogram = new Histogram();
  histogram.merge(a.histogram);
  histogram.merge(b.histogram);
  const durationMs = a.durationMs + b.durationMs;
  const completed = a.completed + b.completed;
  const weigh = (x: number, y: number): number => (x * a.durationMs + y * b.durationMs) / durationMs;
  return {
    rps: completed / (durationMs / 1000),
    latency: summarise(histogram),
    histogram,
    durationMs,
    completed,
    errors: a.errors + b.errors,
    notAllowed: a.notAllowed + b.notAllowed,
    loadCpuCores: weigh(a.loadCpuCores, b.loadCpuCores),
    targetCpuCores: weigh(a.targetCpuCores, b.targetCpuCores),
    firstError: a.firstError ?? b.firstError,
  };
}

export interface Pair {
  readonly g: Measured;
  readonly b: Measured;
}

/**
 * Measures two arms in the order baseline, sandgate, sandgate, baseline, each for half the window, and
 * merges the halves: whatever else the machine does drifts over the run, and this order lays that drift
 * on both arms alike.
 */
export async function abba(t: Timing, g: (w: Timing) => Promise<Measured>, b: (w: Timing) => Promise<Measured>): Promise<Pair> {
  const half: Timing = { warmupMs: t.warmupMs, durationMs: t.durationMs / 2 };
  const b1 = await b(half);
  const g1 = await g(half);
  const g2 = await g(half);
  const b2 = await b(half);
  return { g: mergeRuns(g1, g2), b: mergeRuns(b1, b2) };
}

/** sandgate against its baseline target, the same load on each (see abba). */
export function paired(gw: Target, bare: Target, t: Timing, load: (target: Target, t: Timing) => Promise<LoadResult>): Promise<Pair> {
  return abba(
    t,
    (w) => measured(gw, w, () => load(gw, w)),
    (w) => measured(bare, w, () => load(bare, w)),
  );
}

/** When the target used less than this much CPU, something else (load generator, machine) set the pace. */
export const SATURATED_CORES = 0.8;

/** A note when a judged figure was not measured at the target's limit. */
export function saturationNote(what: string, p: Pair): string | undefined {
  if (p.g.targetCpuCores >= SATURATED_CORES || p.b.targetCpuCores >= SATURATED_CORES) return undefined;
  return (
    `${what}: neither target was saturated (sandgate ${round2(p.g.targetCpuCores)}, baseline ${round2(p.b.targetCpuCores)} cores; ` +
    `load generator ${round2(p.g.loadCpuCores)}): the load generator or other work on the machine set the pace, so this ratio understates the difference in capacity`
  );
}

/** req/s, p50, p99 and p99.9 of one operating point, sandgate beside its baseline. */
export function loadRows(label: string, g: LoadResult, b: LoadResult | undefined): Row[] {
  return [
    row(`req/s ${label}`, 'req/s', g.rps, b?.rps),
    row(`p50 ${label}`, 'µs', g.latency.p50, b?.latency.p50),
    row(`p99 ${label}`, 'µs', g.latency.p99, b?.latency.p99),
    row(`p99.9 ${label}`, 'µs', g.latency.p999, b?.latency.p999),
  ];
}

/** Problems with a run that make its figures suspect (errors, denials where allows were expected). */
export function runProblems(what: string, r: LoadResult): string[] {
  const out: string[] = [];
  if (r.completed === 0) out.push(`${what}: no request completed${r.firstError !== undefined ? ` (${r.firstError})` : ''}`);
  if (r.errors > 0) out.push(`${what}: ${r.errors} errors${r.firstError !== undefined ? ` (first: ${r.firstError})` : ''}`);
  if (r.notAllowed > 0) out.push(`${what}: ${r.notAllowed} answers were not an allow`);
  return out;
}

/** A compact JSON record of one run. */
export function runData(r: Measured): Record<string, unknown> {
  return {
    rps: Math.round(r.rps),
    p50us: r.latency.p50,
    p99us: r.latency.p99,
    p999us: r.latency.p999,
    meanUs: r.latency.mean,
    completed: r.completed,
    errors: r.errors,
    notAllowed: r.notAllowed,
    loadCpuCores: round2(r.loadCpuCores),
    targetCpuCores: round2(r.targetCpuCores),
  };
}

export function round2(v: number): number {
  return Math.round(v * 100) / 100;
}
