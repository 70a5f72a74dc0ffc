import type { GrpcLoad } from './grpc-load.js';
import type { GrpcKind } from './grpc-load-worker.js';
import type { Arm } from './interleave.js';
import type { HttpRequestSpec } from './http-load.js';
import { profiledTogether, round2, runData, type Measured } from './measure.js';
import { pacedAlternation } from './paced-http.js';
import { row, target, type JudgedFigure, type Row, type TargetResult } from './report.js';
import { sleep } from './processes.js';
import type { Timing } from './section.js';
import type { Target } from './targets.js';

/**
 * Cost, not just rate. A req/s ratio between two servers on a shared 2-core machine moves ±15 % from run
 * to run; the CPU a request costs the process that serves it moves far less. So every door is judged by
 * the CPU per request of its process (from /proc, proc-stat.ts) at a fixed offered load that both it and
 * its baseline sustain, against the same figure of the baseline, and each figure comes from interleaved
 * pairs — for the HTTP and gRPC doors BLOCKS blocks with the load switched between the two within each
 * block (alternateHttp, alternateGrpc), for churn PAIRS pairs of whole trials, A B, B A, A B … (alternate) — as the median of
 * the per-pair differences, with the spread (lowest … highest pair) printed beside it. Throughput (both at their limit, also alternated) is printed
 * next to it as a ratio with its own spread.
 */

export function judgedFigure(s: Spread, unit: string): JudgedFigure {
  return { median: s.median, min: s.min, max: s.max, unit };
}

/**
 * Pairs of trials: five in a --quick run as in a full one (a full run's windows are longer). With three,
 * one pair a machine's noise moved decided the median often enough that a verdict flipped between
 * otherwise alike --quick runs.
 */
export const PAIRS = 5;

/**
 * Blocks of an interleaved HTTP comparison (alternateHttp), in --quick as in a full run: as many pairs in
 * about the time five separate pairs of trials took, since no trial opens connections or warms up alone.
 */
export const BLOCKS = 10;

/** One side of an HTTP cost comparison: the process whose CPU is read, and where the load goes. */
export interface HttpSide {
  readonly target: Target;
  readonly url: string;
}

/**
 * Process instances per side where a verdict sits near its bar (the embedded proxy, Check at 100k vs 1k):
 * two processes of the same code differ here by a per-request offset of their own that stays for the
 * process's life (an embedded proxy read +1.5 … +18.3 µs over a forwarder across nine pairs of fresh
 * processes, each pair's blocks agreeing with each other), so the pairs of a comparison are spread over
 * several instance pairs instead of one.
 */
export const INSTANCES = 2;

/** Runs `one` for each instance pair (a[i] against b[i]), sharing `blocks` out among them, and lays the blocks end to end. */
export async function overInstances<S>(
  a: readonly S[],
  b: readonly S[],
  one: (a: S, b: S, blocks: number) => Promise<{ a: Measured[]; b: Measured[] }>,
  blocks = BLOCKS,
): Promise<{ a: Measured[]; b: Measured[] }> {
  if (a.length === 0 || a.length !== b.length) throw new Error(`instance pairs: ${a.length} against ${b.length}`);
  const out = { a: [] as Measured[], b: [] as Measured[] };
  for (let i = 0; i < a.length; i++) {
    const r = await one(a[i]!, b[i]!, Math.ceil(blocks / a.length));
    out.a.push(...r.a);
    out.b.push(...r.b);
  }
  return out;
}

/**
 * CPU per request of two HTTP servers at `rate` req/s, interleaved finely (paced-http.ts pacedAlternation):
 * BLOCKS blocks of `t.durationMs`, each one pair, the load switched between the two every eighth of a block
 * over connections that stay open, both processes' CPU read over the same block; unmeasured blocks of
 * warm-up first (one, or as many as `t.warmupMs` spans). With several instances per side, a[i] is
 * compared with b[i] and the blocks are shared out among the instance pairs.
 */
export function alternateHttp(t: Timing, rate: number, connections: number, requests: readonly HttpRequestSpec[], a: readonly HttpSide[], b: readonly HttpSide[]): Promise<{ a: Measured[]; b: Measured[] }> {
  const side = (s: HttpSide) => ({ url: s.url, cpuMicros: () => s.target.cpuMicrosNow() });
  return overInstances(a, b, (x, y, blocks) =>
    profiledTogether([x.target, y.target], () => pacedAlternation({ a: side(x), b: side(y), connections, rate, warmupMs: t.warmupMs, blockMs: t.durationMs, blocks, requests })),
  );
}

/** One side of a gRPC cost comparison: the process whose CPU is read, and how many sandboxes its calls name. */
export interface GrpcSide {
  readonly target: Target;
  readonly sandboxes: number;
}

/**
 * CPU per call of two gRPC servers at `rate` calls/s, interleaved as alternateHttp is (the load process runs
 * the schedule, grpc-load.ts alternate): `blocks` blocks (BLOCKS unless given) of `t.durationMs`, at most
 * `inFlight` calls open per side, one unmeasured block of warm-up first (more when `t.warmupMs` is longer
 * than a block), shared out among the instance pairs as alternateHttp does.
 */
export function alternateGrpc(
  t: Timing,
  rate: number,
  inFlight: number,
  load: GrpcLoad,
  kind: GrpcKind,
  a: readonly GrpcSide[],
  b: readonly GrpcSide[],
  blocks = BLOCKS,
): Promise<{ a: Measured[]; b: Measured[] }> {
  const side = (s: GrpcSide) => ({ target: s.target.grpcTarget, pid: s.target.pid, sandboxes: s.sandboxes });
  return overInstances(
    a,
    b,
    (x, y, n) => profiledTogether([x.target, y.target], () => load.alternate({ a: side(x), b: side(y), kind, maxInFlight: inFlight, rate, warmupMs: t.warmupMs, blockMs: t.durationMs, blocks: n })),
    blocks,
  );
}

/**
 * The resolution of an interleaved HTTP comparison on this machine: the same trials between a second copy
 * of the baseline and the baseline (an A/A comparison). Its median and spread are what two identical
 * processes differ by here, printed beside the verdict.
 */
export async function noiseFloor(t: Timing, rate: number, connections: number, requests: readonly HttpRequestSpec[], copies: readonly HttpSide[], baselines: readonly HttpSide[]): Promise<CostComparison> {
  return compareCost(rate, await alternateHttp(t, rate, connections, requests, copies, baselines), { a: copies[0]!.target.name, b: baselines[0]!.target.name });
}

/** "A/A noise floor (a second copy of the baseline against it): +1.2 µs (spread …)", for notes and target lines. */
export function floorText(floor: CostComparison): string {
  return `A/A noise floor (a second copy of the baseline against it): ${formatDiff(floor.diffUs)}`;
}

export interface Spread {
  readonly median: number;
  readonly min: number;
  readonly max: number;
  readonly values: readonly number[];
}

export function spread(values: readonly number[]): Spread {
  const sorted = [...values].sort((x, y) => x - y);
  const n = sorted.length;
  if (n === 0) return { median: Number.NaN, min: Number.NaN, max: Number.NaN, values };
  const median = n % 2 === 1 ? sorted[(n - 1) / 2]! : (sorted[n / 2 - 1]! + sorted[n / 2]!) / 2;
  return { median, min: sorted[0]!, max: sorted[n - 1]!, values };
}

/**
 * A note on what each process spends with no load at all (timers, monitors, runtime threads), measured over
 * `ms` before the trials: at a fixed offered rate it is part of every request's figure, `cores × 1e6 ÷ rate`
 * µs of it, and a gateway does more of it than a bare server.
 */
export async function idleNote(label: string, rate: number, processes: Readonly<Record<string, Target>>, ms: number): Promise<string> {
  const before = await Promise.all(Object.values(processes).map((p) => p.cpuMicros()));
  await sleep(ms);
  const after = await Promise.all(Object.values(processes).map((p) => p.cpuMicros()));
  const parts = Object.keys(processes).map((name, k) => {
    const cores = (after[k]! - before[k]!) / 1000 / ms;
    return `${name} ${cores.toFixed(4)} cores (${((cores * 1e6) / rate).toFixed(2)} µs per request at ${rate.toLocaleString('en-US')} req/s)`;
  });
  return `${label}: CPU with no load, over ${ms / 1000} s before the trials: ${parts.join(', ')}`;
}

/**
 * Runs `pairs` pairs of trials, A B, B A, A B …: each pair in the opposite order to the one before, so a
 * drift over the run (a heap growing, the machine's other load) does not always land on the same arm.
 * Trial k of A and trial k of B are pair k.
 */
export async function alternate(pairs: number, t: Timing, a: Arm, b: Arm): Promise<{ a: Measured[]; b: Measured[] }> {
  const out = { a: [] as Measured[], b: [] as Measured[] };
  for (let k = 0; k < pairs; k++) {
    if (k % 2 === 0) {
      out.a.push(await a(t));
      out.b.push(await b(t));
    } else {
      out.b.push(await b(t));
      out.a.push(await a(t));
    }
  }
  return out;
}

/** CPU µs the process under test spent per request it answered in the window. */
export function cpuPerRequest(m: Measured): number {
  return m.completed > 0 ? (m.targetCpuCores * m.durationMs * 1000) / m.completed : Number.NaN;
}

/** A trial sustained its offered rate when it answered ≥ this share of it, without errors. */
const SUSTAINED = 0.95;

export interface CostComparison {
  /** Requests per second offered to both. */
  readonly rate: number;
  readonly a: readonly Measured[];
  readonly b: readonly Measured[];
  readonly aUs: Spread;
  readonly bUs: Spread;
  /** a − b, µs per request, per pair. */
  readonly diffUs: Spread;
  /** Trials that fell short of the offered rate ("A trial 2: 3,810 of 4,000 req/s"). */
  readonly shortfalls: readonly string[];
}

export function compareCost(rate: number, trials: { a: readonly Measured[]; b: readonly Measured[] }, names: { a: string; b: string }): CostComparison {
  const shortfalls: string[] = [];
  for (const [name, list] of [[names.a, trials.a], [names.b, trials.b]] as const) {
    list.forEach((m, k) => {
      if (m.rps < rate * SUSTAINED || m.errors > 0) shortfalls.push(`${name} trial ${k + 1}: ${Math.round(m.rps)} of ${rate} req/s${m.errors > 0 ? `, ${m.errors} errors` : ''}`);
    });
  }
  const aUs = trials.a.map(cpuPerRequest);
  const bUs = trials.b.map(cpuPerRequest);
  return { rate, a: trials.a, b: trials.b, aUs: spread(aUs), bUs: spread(bUs), diffUs: spread(aUs.map((x, k) => x - bUs[k]!)), shortfalls };
}

export interface RateComparison {
  readonly a: readonly Measured[];
  readonly b: readonly Measured[];
  /** a ÷ b req/s, per pair. */
  readonly ratio: Spread;
}

export function compareRate(trials: { a: readonly Measured[]; b: readonly Measured[] }): RateComparison {
  return { ...trials, ratio: spread(trials.a.map((m, k) => m.rps / trials.b[k]!.rps)) };
}

function signed(v: number, digits = 1): string {
  return (v >= 0 ? '+' : '') + v.toFixed(digits);
}

/** "+1.3 µs (spread +0.8 … +2.1, 3 pairs)" */
export function formatDiff(s: Spread): string {
  return `${signed(s.median)} µs (spread ${signed(s.min)} … ${signed(s.max)}, ${s.values.length} pairs)`;
}

/** "0.91× (spread 0.88 … 0.95)" */
export function formatRatio(s: Spread): string {
  return `${s.median.toFixed(2)}× (spread ${s.min.toFixed(2)} … ${s.max.toFixed(2)})`;
}

/** Table rows: CPU per request of each side (medians), then req/s of each side at their limit (medians). */
export function costRows(label: string, cost: CostComparison, rate: RateComparison | undefined, note?: string): Row[] {
  const out = [row(`CPU per request ${label}, ${cost.rate.toLocaleString('en-US')} req/s offered`, 'µs', cost.aUs.median, cost.bUs.median, note)];
  if (rate !== undefined) out.push(row(`req/s at the limit ${label}`, 'req/s', spread(rate.a.map((m) => m.rps)).median, spread(rate.b.map((m) => m.rps)).median, note));
  return out;
}

/** Notes: the spread of every figure, and any trial that did not sustain the offered rate. */
export function costNotes(label: string, cost: CostComparison, rate: RateComparison | undefined): string[] {
  const out = [
    `${label}: CPU per request ${cost.aUs.values.map((v) => v.toFixed(1)).join(' / ')} vs ${cost.bUs.values.map((v) => v.toFixed(1)).join(' / ')} µs; difference ${formatDiff(cost.diffUs)}` +
      (rate === undefined ? '' : `; req/s at the limit ${formatRatio(rate.ratio)}`),
  ];
  if (cost.shortfalls.length > 0) out.push(`${label}: the offered ${cost.rate} req/s was not sustained (${cost.shortfalls.join('; ')}): its CPU per request is of a saturated process`);
  return out;
}

/**
 * The verdict on the cost difference (median of the pairs ≤ limitUs); the req/s ratio and its own bar are
 * printed beside it. A comparison whose offered rate was not sustained is judged all the same, and says so.
 */
export function costTarget(name: string, limitUs: number, cost: CostComparison, rate?: { readonly r: RateComparison; readonly min: number }, floor?: CostComparison): TargetResult {
  const rateText = rate === undefined ? '' : `; req/s ${formatRatio(rate.r.ratio)} (bar ≥ ${rate.min}×: ${rate.r.ratio.median >= rate.min ? 'met' : 'not met'})`;
  const floorPart = floor === undefined ? '' : `; ${floorText(floor)}`;
  const unsustained = cost.shortfalls.length > 0 ? `; offered rate not sustained in ${cost.shortfalls.length} trial(s)` : '';
  return target(
    `${name} ≤ +${limitUs} µs CPU per request`,
    cost.diffUs.median <= limitUs,
    `${formatDiff(cost.diffUs)} (${cost.aUs.median.toFixed(1)} vs ${cost.bUs.median.toFixed(1)} µs at ${cost.rate.toLocaleString('en-US')} req/s offered)${rateText}${floorPart}${unsustained}`,
    judgedFigure(cost.diffUs, 'µs'),
  );
}

/** The raw figures of a comparison, for the JSON file. */
export function costData(cost: CostComparison, rate: RateComparison | undefined): Record<string, unknown> {
  const trial = (m: Measured): Record<string, unknown> => ({ ...runData(m), cpuUsPerRequest: round2(cpuPerRequest(m)) });
  return {
    offered: cost.rate,
    diffUs: { median: round2(cost.diffUs.median), min: round2(cost.diffUs.min), max: round2(cost.diffUs.max) },
    cost: { a: cost.a.map(trial), b: cost.b.map(trial) },
    ...(rate === undefined ? {} : { rpsRatio: { median: round2(rate.ratio.median), min: round2(rate.ratio.min), max: round2(rate.ratio.max) }, rate: { a: rate.a.map(trial), b: rate.b.map(trial) } }),
  };
}
