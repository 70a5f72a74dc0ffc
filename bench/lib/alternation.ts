import type { LoadResult } from './grpc-load.js';
import { latencies, record, summarise } from './histogram.js';

/** How one request ended: undefined answered as expected, 'denied' answered otherwise, an Error not answered. */
export type Outcome = undefined | 'denied' | Error;

export interface AlternationSide {
  /** CPU time used so far by the side's process (every thread), µs; throws when it is gone. */
  readonly cpuMicros: () => number;
  /** Sends one request; `finish` is called once, when it is over. */
  readonly issue: (finish: (outcome: Outcome) => void) => void;
}

export interface AlternationPlan {
  /** Connections (HTTP/1.1), streams (HTTP/2) or calls (gRPC) open per side at most. */
  readonly inFlight: number;
  /** Requests per second offered to the side whose slice it is; undefined: at the limit, `inFlight` kept open. */
  readonly rate?: number | undefined;
  /** Unmeasured blocks first (at least one): connections open and the code on both sides warm. */
  readonly warmupMs: number;
  readonly blockMs: number;
  readonly blocks: number;
}

/** One side in one block; durationMs is the time it carried load (half the block). */
export interface Measured extends LoadResult {
  /** The side's CPU over the whole block (so work its requests leave behind after its slices counts), per ms it carried load, in cores. */
  readonly targetCpuCores: number;
}

/**
 * Each block is one pair, the load switched every eighth of it, so whatever else the machine does over a second
 * or two falls on both sides alike; in A B B A both sides' slices sit at the same mean time, so a drift does too.
 */
const SLICES = ['a', 'b', 'b', 'a', 'a', 'b', 'b', 'a'] as const;

const TICK_MS = 1;
const DRAIN_MS = 10_000;

const fresh = () => ({ completed: 0, errors: 0, notAllowed: 0, firstError: undefined as string | undefined, hist: latencies() });
type Tally = ReturnType<typeof fresh>;

/**
 * Runs the plan, both sides' CPU read at every block boundary; rejects (after the requests in flight have drained)
 * when a side's CPU can no longer be read. With a `rate`, a request beyond `inFlight` open is not sent: the block
 * answers fewer than offered, which the caller reports as a rate not sustained.
 */
export async function alternateSlices(plan: AlternationPlan, sides: { readonly a: AlternationSide; readonly b: AlternationSide }): Promise<{ a: Measured[]; b: Measured[] }> {
  const sliceMs = plan.blockMs / SLICES.length;
  const warm = Math.max(1, Math.ceil(plan.warmupMs / plan.blockMs));
  const tallies: { a: Tally; b: Tally }[] = [];
  const open = { a: 0, b: 0 };
  const cpu = { a: [] as number[], b: [] as number[] };
  const load: number[] = [];

  let slice = -1;
  let issued = { a: 0, b: 0 };
  let sliceStart = 0;
  let over = false;
  const send = (arm: 'a' | 'b', tally: Tally | undefined): void => {
    const began = performance.now();
    open[arm]++;
    sides[arm].issue((outcome) => {
      open[arm]--;
      if (tally !== undefined) {
        if (outcome instanceof Error) {
          tally.errors++;
          tally.firstError ??= outcome.message;
        } else {
          tally.completed++;
          if (outcome === 'denied') tally.notAllowed++;
          record(tally.hist, (performance.now() - began) * 1e6);
        }
      }
      if (plan.rate === undefined) fill();
    });
  };
  // What is due counts the side's earlier slices of the block too, so a slice a busy machine gave no tick near
  // its end is made up in the side's next one: the offered rate holds per block, load still only in own slices.
  const fill = (): void => {
    if (over || slice < 0) return;
    const inBlock = slice % SLICES.length;
    const arm = SLICES[inBlock]!;
    const block = Math.floor(slice / SLICES.length) - warm;
    const tally = block < 0 ? undefined : (tallies[block] ??= { a: fresh(), b: fresh() })[arm];
    const ownBefore = SLICES.slice(0, inBlock).filter((s) => s === arm).length;
    const due = plan.rate === undefined ? Infinity : Math.floor(((ownBefore * sliceMs + performance.now() - sliceStart) / 1000) * plan.rate);
    while (issued[arm] < due && open[arm] < plan.inFlight) {
      issued[arm]++;
      send(arm, tally);
    }
    if (issued[arm] < due && plan.rate !== undefined) issued[arm] = due;
  };

  const schedule = new Promise<void>((resolve, reject) => {
    const t0 = performance.now();
    const total = warm + plan.blocks;
    const end = (err?: unknown): void => {
      over = true;
      clearInterval(timer);
      if (err === undefined) resolve();
      else reject(err instanceof Error ? err : new Error(String(err)));
    };
    const timer = setInterval(() => {
      const k = Math.floor((performance.now() - t0) / sliceMs);
      if (k !== slice) {
        // A block boundary (even one a late tick jumped past the start of): read both processes' CPU (and
        // the generator's) before the next slice's load. A side that stopped fails the run, not the process.
        const boundary = Math.min(Math.floor(k / SLICES.length), total);
        if (boundary !== Math.floor(slice / SLICES.length) && boundary >= warm) {
          try {
            cpu.a.push(sides.a.cpuMicros());
            cpu.b.push(sides.b.cpuMicros());
          } catch (err) {
            return end(err);
          }
          const u = process.cpuUsage();
          load.push(u.user + u.system);
        }
        if (k >= total * SLICES.length) return end();
        if (Math.floor(k / SLICES.length) !== Math.floor(slice / SLICES.length)) issued = { a: 0, b: 0 };
        slice = k;
        sliceStart = t0 + k * sliceMs;
      }
      fill();
    }, TICK_MS);
  });
  try {
    await schedule;
  } finally {
    const deadline = performance.now() + DRAIN_MS;
    while ((open.a > 0 || open.b > 0) && performance.now() < deadline) await new Promise((res) => setTimeout(res, 5));
  }
  const activeMs = plan.blockMs / 2;
  const result = (arm: 'a' | 'b', k: number): Measured => {
    const t = tallies[k]![arm];
    return {
      rps: t.completed / (activeMs / 1000),
      latency: summarise(t.hist),
      durationMs: activeMs,
      completed: t.completed,
      errors: t.errors,
      notAllowed: t.notAllowed,
      loadCpuCores: (load[k + 1]! - load[k]!) / 1000 / plan.blockMs,
      targetCpuCores: (cpu[arm][k + 1]! - cpu[arm][k]!) / 1000 / activeMs,
      firstError: t.firstError,
    };
  };
  const blocks = Array.from({ length: plan.blocks }, (_, k) => k);
  return { a: blocks.map((k) => result('a', k)), b: blocks.map((k) => result('b', k)) };
}
