import { Pool } from 'undici';
import { Histogram, summarise } from './histogram.js';
import type { HttpRequestSpec } from './http-load.js';
import type { Measured } from './measure.js';

/**
 * HTTP load at a fixed offered rate, for measuring what a request costs two targets rather than how many
 * they can answer: requests leave evenly spread in time (every millisecond, as many as the rate says are
 * due), over a keep-alive pool of `connections` per target, each connection carrying one request at a
 * time. autocannon's rate limit sends each second's quota as one burst, which measures a saturated target
 * in bursts.
 *
 * When a target falls behind, requests beyond one per connection are not sent; the run then completes
 * fewer than offered, and the caller reports the rate as not sustained.
 */

const TICK_MS = 1;
const DRAIN_MS = 10_000;

/** One side of an alternating run: where its requests go and how to read its process's CPU (µs, every thread). */
export interface AlternatingArm {
  readonly url: string;
  readonly cpuMicros: () => number;
}

export interface AlternatingRun {
  readonly a: AlternatingArm;
  readonly b: AlternatingArm;
  readonly connections: number;
  /** Requests per second offered to the arm whose slice it is. */
  readonly rate: number;
  /** Unmeasured blocks first: each pool's connections opened and the code on both sides warm. */
  readonly warmupMs: number;
  /** Length of one block (one pair of the comparison); each arm carries load for half of it. */
  readonly blockMs: number;
  readonly blocks: number;
  readonly requests: readonly HttpRequestSpec[];
}

/**
 * Slices per block: A B B A A B B A. A block of 2 s is then eight slices of 250 ms, each arm loaded for four,
 * and whatever else the machine does over a second or two (another tenant of the host, the load generator's
 * own GC) falls on both arms of the block alike.
 */
const SLICES = ['a', 'b', 'b', 'a', 'a', 'b', 'b', 'a'] as const;

/**
 * Alternating trials at a fixed offered rate: two keep-alive pools, one per target, both open for the whole
 * run, and the offered load switched between them every slice (SLICES). Each block is one pair: over the
 * same block both processes' CPU is read (from /proc, whole block, so work an arm's requests leave behind
 * after its slice still counts) and each arm's CPU per request is its CPU ÷ the requests it answered.
 * Returns one Measured-shaped result per arm and block (durationMs: the time the arm carried load).
 */
export async function pacedAlternation(r: AlternatingRun): Promise<{ a: Measured[]; b: Measured[] }> {
  const pool = (url: string) => new Pool(url, { connections: r.connections, pipelining: 1, keepAliveTimeout: 60_000 });
  const pools = { a: pool(r.a.url), b: pool(r.b.url) };
  const sliceMs = r.blockMs / SLICES.length;
  const warmBlocks = Math.max(1, Math.ceil(r.warmupMs / r.blockMs));
  interface Tally {
    completed: number;
    errors: number;
    notAllowed: number;
    firstError: string | undefined;
    hist: Histogram;
  }
  const fresh = (): Tally => ({ completed: 0, errors: 0, notAllowed: 0, firstError: undefined, hist: new Histogram() });
  const tallies: { a: Tally; b: Tally }[] = [];
  const inFlight = { a: 0, b: 0 };

  const send = (arm: 'a' | 'b', tally: Tally | undefined, spec: HttpRequestSpec): void => {
    const began = performance.now();
    inFlight[arm]++;
    pools[arm]
      .request({ path: spec.path, method: spec.method as 'GET', headers: spec.headers })
      .then(async (res) => {
        await res.body.dump();
        return res.statusCode;
      })
      .then(
        (status) => {
          inFlight[arm]--;
          if (tally === undefined) return;
          tally.completed++;
          if (status !== 200) tally.notAllowed++;
          tally.hist.record((performance.now() - began) * 1e6);
        },
        (err: Error) => {
          inFlight[arm]--;
          if (tally === undefined) return;
          tally.errors++;
          tally.firstError ??= err.message;
        },
      );
  };

  const cpu = { a: [] as number[], b: [] as number[] };
  const load: number[] = [];
  const close = () => Promise.all([pools.a.close().catch(() => {}), pools.b.close().catch(() => {})]);
  const schedule = new Promise<void>((resolve, reject) => {
    const t0 = performance.now();
    const total = warmBlocks + r.blocks;
    let slice = -1;
    let issued = 0;
    let sliceStart = t0;
    const timer = setInterval(() => {
      const now = performance.now();
      const k = Math.floor((now - t0) / sliceMs);
      if (k !== slice) {
        // A block boundary (even one a late tick jumped past the start of): read both processes' CPU (and
        // the generator's) before the next slice's load. A side that stopped fails the run, not the process.
        const boundary = Math.min(Math.floor(k / SLICES.length), total);
        if (boundary !== Math.floor(slice / SLICES.length) && boundary >= warmBlocks) {
          try {
            cpu.a.push(r.a.cpuMicros());
            cpu.b.push(r.b.cpuMicros());
          } catch (err) {
            clearInterval(timer);
            reject(err instanceof Error ? err : new Error(String(err)));
            return;
          }
          const u = process.cpuUsage();
          load.push(u.user + u.system);
        }
        if (k >= total * SLICES.length) {
          clearInterval(timer);
          resolve();
          return;
        }
        slice = k;
        issued = 0;
        sliceStart = t0 + k * sliceMs;
      }
      const arm = SLICES[slice % SLICES.length]!;
      const block = Math.floor(slice / SLICES.length) - warmBlocks;
      const tally = block < 0 ? undefined : (tallies[block] ??= { a: fresh(), b: fresh() })[arm];
      const due = Math.floor(((now - sliceStart) / 1000) * r.rate);
      while (issued < due && inFlight[arm] < r.connections) send(arm, tally, r.requests[issued++ % r.requests.length]!);
      if (issued < due && inFlight[arm] >= r.connections) issued = due;
    }, TICK_MS);
  });
  await schedule.catch(async (err: unknown) => {
    await close();
    throw err;
  });
  const deadline = performance.now() + DRAIN_MS;
  while ((inFlight.a > 0 || inFlight.b > 0) && performance.now() < deadline) await new Promise((res) => setTimeout(res, 5));
  await close();
  const activeMs = r.blockMs / 2;
  const result = (arm: 'a' | 'b', k: number): Measured => {
    const t = tallies[k]![arm];
    return {
      rps: t.completed / (activeMs / 1000),
      latency: summarise(t.hist),
      histogram: t.hist,
      durationMs: activeMs,
      completed: t.completed,
      errors: t.errors,
      notAllowed: t.notAllowed,
      loadCpuCores: (load[k + 1]! - load[k]!) / 1000 / r.blockMs,
      targetCpuCores: (cpu[arm][k + 1]! - cpu[arm][k]!) / 1000 / activeMs,
      firstError: t.firstError,
    };
  };
  const blocks = Array.from({ length: r.blocks }, (_, k) => k);
  return { a: blocks.map((k) => result('a', k)), b: blocks.map((k) => result('b', k)) };
}
