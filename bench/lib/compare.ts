import { Pool } from 'undici';
import { alternateSlices, blocksMeasured, type Measured, type Outcome } from './alternation.js';
import type { GrpcLoad } from './grpc-load.js';
import type { GrpcKind } from './grpc-load-worker.js';
import { sleep } from './processes.js';
import { row, target, type JudgedFigure, type Row, type TargetResult } from './report.js';
import type { Target } from './targets.js';

/**
 * Comparing two servers, and what a section reads from the comparison. Every comparison is alternation.ts's
 * schedule: `blocks` blocks, the load switched between the two sides within each block, one pair per
 * block. At a fixed offered rate it measures cost (CPU µs per request of each side's process, read from
 * /proc); without a rate, it measures each side at its limit (req/s and latency at `inFlight` open).
 *
 * Cost is what the doors are judged on: a req/s ratio between two servers on a shared 2-core machine moves
 * ±15 % from run to run, the CPU a request costs the process that serves it far less. Each figure is the
 * median of the per-block values, printed with its spread (lowest … highest block).
 */

/** Blocks of a comparison, in --quick as in a full run (a full run's blocks are longer). */
export const BLOCKS = 10;

/**
 * Process instances per side where a verdict sits near its bar: two processes of the same code differ
 * here by a per-request offset of their own that lasts the process's life, so the blocks of a comparison
 * are spread over several instance pairs (a[i] against b[i]) instead of one.
 */
export const INSTANCES = 2;

export interface ComparePlan {
  /** Requests per second offered to the side whose slice it is; undefined: each side at its limit. */
  readonly rate?: number | undefined;
  /** Connections (HTTP) or calls (gRPC) open per side at most. */
  readonly inFlight: number;
  /** Unmeasured blocks first (at least one), as many as this spans. */
  readonly warmupMs: number;
  readonly blockMs: number;
  readonly blocks?: number;
}

export interface HttpRequestSpec {
  readonly method: string;
  readonly path: string;
  readonly headers: Readonly<Record<string, string>>;
}

/** One side of an HTTP comparison: the process whose CPU is read, and where its load goes. */
export interface HttpSide {
  readonly target: Target;
  readonly url: string;
}

/** One side of a gRPC comparison: the process whose CPU is read, and how many sandboxes its calls name. */
export interface GrpcSide {
  readonly target: Target;
  readonly sandboxes: number;
}

export interface Trials {
  readonly a: readonly Measured[];
  readonly b: readonly Measured[];
}

/** Runs `one` for each instance pair (a[i] against b[i]), sharing `blocks` out among them, and lays the blocks end to end. */
export async function overInstances<S>(a: readonly S[], b: readonly S[], one: (a: S, b: S, blocks: number) => Promise<Trials>, blocks = BLOCKS): Promise<Trials> {
  if (a.length === 0 || a.length !== b.length) throw new Error(`instance pairs: ${a.length} against ${b.length}`);
  const out = { a: [] as Measured[], b: [] as Measured[] };
  for (let i = 0; i < a.length; i++) {
    const r = await one(a[i]!, b[i]!, Math.ceil(blocks / a.length));
    out.a.push(...r.a);
    out.b.push(...r.b);
  }
  return out;
}

/** The schedule over two keep-alive pools, one per side, both open for the whole run; any answer but 200 counts as not allowed. */
async function httpBlocks(plan: ComparePlan, blocks: number, requests: readonly HttpRequestSpec[], a: HttpSide, b: HttpSide): Promise<Trials> {
  const pool = (url: string) => new Pool(url, { connections: plan.inFlight, pipelining: 1, keepAliveTimeout: 60_000 });
  const pools = { a: pool(a.url), b: pool(b.url) };
  const side = (p: Pool, s: HttpSide) => {
    let next = 0;
    return {
      cpuMicros: () => s.target.cpuMicrosNow(),
      issue: (finish: (o: Outcome) => void): void => {
        const spec = requests[next++ % requests.length]!;
        p.request({ path: spec.path, method: spec.method as 'GET', headers: spec.headers })
          .then(async (res) => {
            await res.body.dump();
            return res.statusCode;
          })
          .then(
            (status) => finish(status === 200 ? undefined : 'denied'),
            (err: Error) => finish(err),
          );
      },
    };
  };
  try {
    const r = await alternateSlices({ maxInFlight: plan.inFlight, rate: plan.rate, warmupMs: plan.warmupMs, blockMs: plan.blockMs, blocks }, { a: side(pools.a, a), b: side(pools.b, b) });
    return blocksMeasured(r, plan.blockMs);
  } finally {
    await Promise.all([pools.a.close().catch(() => {}), pools.b.close().catch(() => {})]);
  }
}

/** Two HTTP servers (or instance pairs of them) compared by alternation. */
export function compareHttp(plan: ComparePlan, requests: readonly HttpRequestSpec[], a: readonly HttpSide[], b: readonly HttpSide[]): Promise<Trials> {
  return overInstances(a, b, (x, y, blocks) => httpBlocks(plan, blocks, requests, x, y), plan.blocks);
}

/** Two gRPC servers (or instance pairs of them) compared by alternation, run by the first load process. */
export function compareGrpc(plan: ComparePlan, load: GrpcLoad, kind: GrpcKind, a: readonly GrpcSide[], b: readonly GrpcSide[]): Promise<Trials> {
  const side = (s: GrpcSide) => ({ target: s.target.grpcTarget, pid: s.target.pid, sandboxes: s.sandboxes });
  return overInstances(
    a,
    b,
    (x, y, n) => load.alternate({ a: side(x), b: side(y), kind, maxInFlight: plan.inFlight, rate: plan.rate, warmupMs: plan.warmupMs, blockMs: plan.blockMs, blocks: n }),
    plan.blocks,
  );
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

export function judgedFigure(s: Spread, unit: string): JudgedFigure {
  return { median: s.median, min: s.min, max: s.max, unit };
}

/** CPU µs the process under test spent per request it answered in the block. */
export function cpuPerRequest(m: Measured): number {
  return m.completed > 0 ? (m.targetCpuCores * m.durationMs * 1000) / m.completed : Number.NaN;
}

/** A block sustained its offered rate when it answered ≥ this share of it, without errors. */
const SUSTAINED = 0.95;

export interface CostComparison extends Trials {
  /** Requests per second offered to both. */
  readonly rate: number;
  readonly aUs: Spread;
  readonly bUs: Spread;
  /** a − b, µs per request, per pair. */
  readonly diffUs: Spread;
  /** Blocks that fell short of the offered rate ("baseline trial 2: 3,810 of 4,000 req/s"). */
  readonly shortfalls: readonly string[];
}

export function compareCost(rate: number, trials: Trials, names: { a: string; b: string }): CostComparison {
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

export interface RateComparison extends Trials {
  /** a ÷ b req/s, per pair. */
  readonly ratio: Spread;
}

export function compareRate(trials: Trials): RateComparison {
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

/** "A/A noise floor (a second copy of the baseline against it): +1.2 µs (spread …)", for notes and target lines. */
export function floorText(floor: CostComparison): string {
  return `A/A noise floor (a second copy of the baseline against it): ${formatDiff(floor.diffUs)}`;
}

const median = (ms: readonly Measured[], f: (m: Measured) => number): number => spread(ms.map(f)).median;

/** CPU per request of each side (medians), then, when measured, req/s of each side at their limit (medians). */
export function costRows(label: string, cost: CostComparison, rate: RateComparison | undefined, note?: string): Row[] {
  const out = [row(`CPU per request ${label}, ${cost.rate.toLocaleString('en-US')} req/s offered`, 'µs', cost.aUs.median, cost.bUs.median, note)];
  if (rate !== undefined) out.push(row(`req/s at the limit ${label}`, 'req/s', median(rate.a, (m) => m.rps), median(rate.b, (m) => m.rps), note));
  return out;
}

/** req/s, p50, p99 and p99.9 of one operating point at the limit, each side's median over the blocks. */
export function limitRows(label: string, r: Trials, note?: string): Row[] {
  return [
    row(`req/s ${label}`, 'req/s', median(r.a, (m) => m.rps), median(r.b, (m) => m.rps), note),
    row(`p50 ${label}`, 'µs', median(r.a, (m) => m.latency.p50), median(r.b, (m) => m.latency.p50), note),
    row(`p99 ${label}`, 'µs', median(r.a, (m) => m.latency.p99), median(r.b, (m) => m.latency.p99), note),
    row(`p99.9 ${label}`, 'µs', median(r.a, (m) => m.latency.p999), median(r.b, (m) => m.latency.p999), note),
  ];
}

/** Notes: the per-block figures and their spread, and any block that did not sustain the offered rate. */
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

/** Problems that make a block's figures suspect (errors, denials where allows were expected). */
export function runProblems(what: string, r: Measured): string[] {
  const out: string[] = [];
  if (r.completed === 0) out.push(`${what}: no request completed${r.firstError !== undefined ? ` (${r.firstError})` : ''}`);
  if (r.errors > 0) out.push(`${what}: ${r.errors} errors${r.firstError !== undefined ? ` (first: ${r.firstError})` : ''}`);
  if (r.notAllowed > 0) out.push(`${what}: ${r.notAllowed} answers were not an allow`);
  return out;
}

/** runProblems over every block of both sides, named "<a> block k" / "<b> block k". */
export function trialProblems(names: { a: string; b: string }, r: Trials): string[] {
  return [...r.a.flatMap((m, k) => runProblems(`${names.a} block ${k + 1}`, m)), ...r.b.flatMap((m, k) => runProblems(`${names.b} block ${k + 1}`, m))];
}

export function round2(v: number): number {
  return Math.round(v * 100) / 100;
}

/** A compact JSON record of one block. */
export function runData(r: Measured): Record<string, unknown> {
  return {
    rps: Math.round(r.rps),
    p50us: r.latency.p50,
    p99us: r.latency.p99,
    completed: r.completed,
    errors: r.errors,
    notAllowed: r.notAllowed,
    targetCpuCores: round2(r.targetCpuCores),
    cpuUsPerRequest: round2(cpuPerRequest(r)),
  };
}

/** The raw figures of a comparison, for the JSON file. */
export function trialsData(r: Trials): Record<string, unknown> {
  return { a: r.a.map(runData), b: r.b.map(runData) };
}

/**
 * A note on what each process spends with no load at all (timers, monitors, runtime threads), measured over
 * `ms` before the trials: at a fixed offered rate it is part of every request's figure, `cores × 1e6 ÷ rate` µs.
 */
export async function idleNote(label: string, rate: number, processes: Readonly<Record<string, Target>>, ms: number): Promise<string> {
  const before = Object.values(processes).map((p) => p.cpuMicrosNow());
  await sleep(ms);
  const after = Object.values(processes).map((p) => p.cpuMicrosNow());
  const parts = Object.keys(processes).map((name, k) => {
    const cores = (after[k]! - before[k]!) / 1000 / ms;
    return `${name} ${cores.toFixed(4)} cores (${((cores * 1e6) / rate).toFixed(2)} µs per request at ${rate.toLocaleString('en-US')} req/s)`;
  });
  return `${label}: CPU with no load, over ${ms / 1000} s before the trials: ${parts.join(', ')}`;
}
