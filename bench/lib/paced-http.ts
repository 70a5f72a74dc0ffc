import { Pool } from 'undici';
import { alternateSlices, blocksMeasured, type Outcome } from './alternation.js';
import type { HttpRequestSpec } from './http-load.js';
import type { Measured } from './measure.js';

/**
 * HTTP load at a fixed offered rate, for measuring what a request costs two targets rather than how many
 * they can answer (alternation.ts's schedule), over a keep-alive pool of `connections` per target, each
 * connection carrying one request at a time. autocannon's rate limit sends each second's quota as one
 * burst, which measures a saturated target in bursts.
 */

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
 * Alternating HTTP trials at a fixed offered rate: two keep-alive pools, one per target, both open for the
 * whole run, the offered load switched between them every slice; any answer but 200 counts as not allowed.
 */
export async function pacedAlternation(r: AlternatingRun): Promise<{ a: Measured[]; b: Measured[] }> {
  const pool = (url: string) => new Pool(url, { connections: r.connections, pipelining: 1, keepAliveTimeout: 60_000 });
  const pools = { a: pool(r.a.url), b: pool(r.b.url) };
  const side = (p: Pool, cpuMicros: () => number) => {
    let next = 0;
    return {
      cpuMicros,
      issue: (finish: (o: Outcome) => void): void => {
        const spec = r.requests[next++ % r.requests.length]!;
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
    const plan = { maxInFlight: r.connections, rate: r.rate, warmupMs: r.warmupMs, blockMs: r.blockMs, blocks: r.blocks };
    return blocksMeasured(await alternateSlices(plan, { a: side(pools.a, r.a.cpuMicros), b: side(pools.b, r.b.cpuMicros) }), r.blockMs);
  } finally {
    await Promise.all([pools.a.close().catch(() => {}), pools.b.close().catch(() => {})]);
  }
}
