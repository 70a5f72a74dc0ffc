import { connect, type ClientHttp2Session } from 'node:http2';
import { Pool } from 'undici';
import { alternateSlices, type AlternationPlan, type Measured, type Outcome } from './alternation.js';
import { grpcCaller, SAMPLE_EVERY, type GrpcKind } from './grpc-load.js';
import { row, target, type Row, type SectionOutput, type TargetResult } from './report.js';
import type { Target } from './targets.js';

/**
 * Cost (CPU µs per request, at a fixed offered rate) is what the doors are judged on: a req/s ratio between two
 * servers on a shared 2-core machine moves ±15 % from run to run, the CPU a request costs far less.
 */

/** Two processes of the same code differ by a per-request offset that lasts their life: blocks are spread over instance pairs. */
export const INSTANCES = 2;

export interface HttpRequestSpec {
  readonly method: string;
  readonly path: string;
  readonly headers: Readonly<Record<string, string>>;
}

export interface HttpSide {
  readonly target: Target;
  readonly url: string;
  readonly ca?: Buffer;
  readonly h2?: boolean;
}

export interface GrpcSide {
  readonly target: Target;
  readonly sandboxes: number;
}

export type Trials = { readonly a: readonly Measured[]; readonly b: readonly Measured[] };

export type Pair = (plan: AlternationPlan) => Promise<Trials>;

/** Runs `one` for each instance pair (a[i] against b[i]), sharing the blocks out among them. */
export async function overInstances<S>(a: readonly S[], b: readonly S[], one: (a: S, b: S, blocks: number) => Promise<Trials>, blocks: number): Promise<Trials> {
  if (a.length === 0 || a.length !== b.length) throw new Error(`instance pairs: ${a.length} against ${b.length}`);
  const out = { a: [] as Measured[], b: [] as Measured[] };
  for (let i = 0; i < a.length; i++) {
    const r = await one(a[i]!, b[i]!, Math.ceil(blocks / a.length));
    out.a.push(...r.a);
    out.b.push(...r.b);
  }
  return out;
}

/** tls.ts issues the server's certificate for this name. */
export const TLS_SERVERNAME = 'localhost';

interface Sender {
  send(finish: (o: Outcome) => void): void;
  close(): unknown;
}

function h1Sender(s: HttpSide, requests: readonly HttpRequestSpec[], inFlight: number): Sender {
  const connect = s.ca === undefined ? undefined : { ca: s.ca, servername: TLS_SERVERNAME };
  const pool = new Pool(s.url, { connections: inFlight, pipelining: 1, keepAliveTimeout: 60_000, connect });
  let next = 0;
  return {
    send(finish) {
      const spec = requests[next++ % requests.length]!;
      void pool.request({ path: spec.path, method: spec.method as 'GET', headers: spec.headers }).then(
        async (res) => {
          await res.body.dump();
          finish(res.statusCode === 200 ? undefined : 'denied');
        },
        (err: Error) => finish(err),
      );
    },
    close: () => pool.close().catch(() => {}),
  };
}

/** One HTTP/2 connection, as a browser keeps, its requests multiplexed on it. */
function h2Sender(s: HttpSide, requests: readonly HttpRequestSpec[]): Sender {
  let session: ClientHttp2Session | undefined;
  let next = 0;
  const open = (): ClientHttp2Session => {
    if (session === undefined || session.closed || session.destroyed) {
      session = connect(s.url, { ca: s.ca, servername: TLS_SERVERNAME });
      session.on('error', () => {});
    }
    return session;
  };
  return {
    send(finish) {
      const { method, path, headers } = requests[next++ % requests.length]!;
      const { host, ...rest } = headers;
      // A bodyless request ends with its HEADERS frame (END_STREAM), as browsers and curl send a GET.
      const st = open().request({ ':method': method, ':path': path, ':authority': host, ...rest }, { endStream: true });
      let status = 0;
      let failed: Error | undefined;
      st.on('response', (h) => (status = Number(h[':status'])));
      st.on('error', (err: Error) => (failed ??= err));
      st.on('close', () => finish(failed ?? (status === 200 ? undefined : 'denied')));
      st.resume();
    },
    close: () => session?.close(),
  };
}

/**
 * One seed for both sides: where the two name the same number of sandboxes, they are sent the same calls.
 * Calls go round the `connections` HTTP/2 connections in turn, as Envoy's gRPC client spreads them.
 */
async function grpcSender(kind: GrpcKind, s: GrpcSide, connections: number): Promise<Sender> {
  const callers = await Promise.all(Array.from({ length: connections }, () => grpcCaller(kind, s.target.grpcTarget, s.sandboxes, 0)));
  let answers = 0;
  let next = 0;
  return {
    send(finish) {
      const c = callers[next++ % callers.length]!;
      c.call((buf, err) => {
        if (err !== undefined || buf === undefined) return finish(err ?? new Error('no response message'));
        finish(++answers % SAMPLE_EVERY === 0 && !c.allowed(buf) ? 'denied' : undefined);
      });
    },
    close: () => {
      for (const c of callers) c.close();
    },
  };
}

function pair<S extends { readonly target: Target }>(a: readonly S[], b: readonly S[], open: (s: S, plan: AlternationPlan) => Sender | Promise<Sender>): Pair {
  return (plan) =>
    overInstances(
      a,
      b,
      async (x, y, blocks) => {
        const senders: Sender[] = [];
        try {
          for (const s of [x, y]) senders.push(await open(s, plan));
          const side = (s: S, sender: Sender) => ({ cpuMicros: () => s.target.cpuMicrosNow(), issue: sender.send });
          return await alternateSlices({ ...plan, blocks }, { a: side(x, senders[0]!), b: side(y, senders[1]!) });
        } finally {
          await Promise.all(senders.map((s) => s.close()));
        }
      },
      plan.blocks,
    );
}

export function httpPair(requests: readonly HttpRequestSpec[], a: readonly HttpSide[], b: readonly HttpSide[]): Pair {
  return pair(a, b, (s, plan) => (s.h2 === true ? h2Sender(s, requests) : h1Sender(s, requests, plan.inFlight)));
}

/** `connections`: the HTTP/2 connections each side's calls are spread over (the plan's inFlight is the total). */
export function grpcPair(kind: GrpcKind, a: readonly GrpcSide[], b: readonly GrpcSide[], connections = 1): Pair {
  return pair(a, b, (s) => grpcSender(kind, s, connections));
}

export interface Spread {
  readonly median: number;
  readonly min: number;
  readonly max: number;
  readonly values: readonly number[];
}

/** Median and range of the finite values (a block that answered nothing has no CPU per request). */
export function spread(values: readonly number[]): Spread {
  const sorted = values.filter(Number.isFinite).sort((x, y) => x - y);
  const n = sorted.length;
  if (n === 0) return { median: Number.NaN, min: Number.NaN, max: Number.NaN, values };
  const median = n % 2 === 1 ? sorted[(n - 1) / 2]! : (sorted[n / 2 - 1]! + sorted[n / 2]!) / 2;
  return { median, min: sorted[0]!, max: sorted[n - 1]!, values };
}

export function medianOf(ms: readonly Measured[], f: (m: Measured) => number): number {
  return spread(ms.map(f)).median;
}

export function cpuPerRequest(m: Measured): number {
  return m.completed > 0 ? (m.targetCpuCores * m.durationMs * 1000) / m.completed : Number.NaN;
}

/** A block sustained its offered rate when it answered ≥ this share of it, without errors. */
const SUSTAINED = 0.95;

export type Names = { readonly a: string; readonly b: string };

export interface CostComparison extends Trials {
  readonly names: Names;
  readonly rate: number;
  readonly aUs: Spread;
  readonly bUs: Spread;
  /** a − b per pair. */
  readonly diffUs: Spread;
  readonly shortfalls: readonly string[];
}

export function compareCost(rate: number, trials: Trials, names: Names): CostComparison {
  const shortfalls: string[] = [];
  for (const [name, list] of [[names.a, trials.a], [names.b, trials.b]] as const) {
    list.forEach((m, k) => {
      if (m.rps < rate * SUSTAINED || m.errors > 0) shortfalls.push(`${name} trial ${k + 1}: ${Math.round(m.rps)} of ${rate} req/s${m.errors > 0 ? `, ${m.errors} errors` : ''}`);
    });
  }
  const aUs = trials.a.map(cpuPerRequest);
  const bUs = trials.b.map(cpuPerRequest);
  return { names, rate, a: trials.a, b: trials.b, aUs: spread(aUs), bUs: spread(bUs), diffUs: spread(aUs.map((x, k) => x - bUs[k]!)), shortfalls };
}

export async function measureCost(pair: Pair, plan: AlternationPlan, rate: number, names: Names): Promise<CostComparison> {
  return compareCost(rate, await pair({ ...plan, rate }), names);
}

export interface RateComparison extends Trials {
  /** a ÷ b req/s per pair. */
  readonly ratio: Spread;
}

export function compareRate(trials: Trials): RateComparison {
  return { ...trials, ratio: spread(trials.a.map((m, k) => m.rps / trials.b[k]!.rps)) };
}

const signed = (v: number, digits = 1): string => (v >= 0 ? '+' : '') + v.toFixed(digits);

export function formatDiff(s: Spread, unit = 'µs', digits = 1): string {
  return `${signed(s.median, digits)} ${unit} (spread ${signed(s.min, digits)} … ${signed(s.max, digits)}, ${s.values.length} pairs)`;
}

export function formatRatio(s: Spread): string {
  return `${s.median.toFixed(2)}× (spread ${s.min.toFixed(2)} … ${s.max.toFixed(2)})`;
}

/** The verdict on the median cost difference, with the req/s ratio and its own bar beside it. */
export function costTarget(name: string, limitUs: number, cost: CostComparison, rate?: { readonly r: RateComparison; readonly min: number }): TargetResult {
  const rateText = rate === undefined ? '' : `; req/s ${formatRatio(rate.r.ratio)} (bar ≥ ${rate.min}×: ${rate.r.ratio.median >= rate.min ? 'met' : 'not met'})`;
  const unsustained = cost.shortfalls.length > 0 ? `; offered rate not sustained in ${cost.shortfalls.length} trial(s)` : '';
  return target(
    `${name} ≤ +${limitUs} µs CPU per request`,
    cost.diffUs.median <= limitUs,
    `${formatDiff(cost.diffUs)} (${cost.aUs.median.toFixed(1)} vs ${cost.bUs.median.toFixed(1)} µs at ${cost.rate} req/s offered)${rateText}${unsustained}`,
  );
}

/** What makes a block's figures suspect: nothing answered, errors, denials where allows were expected. */
export function trialProblems(names: Names, r: Trials): string[] {
  const problems = (what: string, m: Measured): string[] => {
    const first = m.firstError === undefined ? '' : ` (${m.firstError})`;
    if (m.completed === 0) return [`${what}: no request completed${first}`];
    return [...(m.errors > 0 ? [`${what}: ${m.errors} errors${first}`] : []), ...(m.notAllowed > 0 ? [`${what}: ${m.notAllowed} answers were not an allow`] : [])];
  };
  return [...r.a.flatMap((m, k) => problems(`${names.a} block ${k + 1}`, m)), ...r.b.flatMap((m, k) => problems(`${names.b} block ${k + 1}`, m))];
}

export class Findings {
  readonly rows: Row[] = [];
  readonly notes: string[] = [];
  readonly targets: TargetResult[] = [];

  /** CPU per request and what it makes a core worth, req/s at the limit when measured; `title` names the comparison in the notes. */
  cost(label: string, cost: CostComparison, opts: { readonly note?: string; readonly limit?: RateComparison; readonly title?: string } = {}): void {
    const { note, limit, title = label } = opts;
    this.rows.push(
      row(`CPU per request ${label}, ${cost.rate} req/s offered`, 'µs', cost.aUs.median, cost.bUs.median, note),
      row(`req/s per core ${label} (1e6 ÷ CPU per request)`, 'req/s', 1e6 / cost.aUs.median, 1e6 / cost.bUs.median, note),
    );
    if (limit !== undefined) this.rows.push(row(`req/s at the limit ${label}`, 'req/s', medianOf(limit.a, (m) => m.rps), medianOf(limit.b, (m) => m.rps), note));
    this.notes.push(`${title}: CPU per request ${cost.aUs.median.toFixed(1)} vs ${cost.bUs.median.toFixed(1)} µs; difference ${formatDiff(cost.diffUs)}`);
    if (cost.shortfalls.length > 0) this.notes.push(`${title}: the offered ${cost.rate} req/s was not sustained (${cost.shortfalls.join('; ')}): its CPU per request is of a saturated process`);
    this.problems(title, cost.names, cost);
    if (limit !== undefined) this.problems(`${title} at the limit`, cost.names, limit);
  }

  limit(label: string, r: Trials, names: Names, note?: string): void {
    this.rows.push(
      row(`req/s ${label}`, 'req/s', medianOf(r.a, (m) => m.rps), medianOf(r.b, (m) => m.rps), note),
      row(`p50 ${label}`, 'µs', medianOf(r.a, (m) => m.latency.p50), medianOf(r.b, (m) => m.latency.p50), note),
      row(`p99 ${label}`, 'µs', medianOf(r.a, (m) => m.latency.p99), medianOf(r.b, (m) => m.latency.p99), note),
    );
    this.problems(label, names, r);
  }

  private problems(title: string, names: Names, r: Trials): void {
    this.notes.push(...trialProblems(names, r).map((p) => `${title}: ${p}`));
  }

  output(baseline: string): SectionOutput {
    return { baseline, rows: this.rows, targets: this.targets, notes: this.notes };
  }
}

export function round2(v: number): number {
  return Math.round(v * 100) / 100;
}

