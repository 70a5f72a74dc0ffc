import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pacedAlternation } from '../../bench/lib/paced-http.js';

/** A loopback server that answers 200 and notes when each request arrived (performance.now()). */
async function server(arrivals: number[]): Promise<{ server: Server; url: string }> {
  const s = createServer((_req, res) => {
    arrivals.push(performance.now());
    res.writeHead(200, { 'content-length': '2' }).end('ok');
  });
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  return { server: s, url: `http://127.0.0.1:${(s.address() as AddressInfo).port}` };
}

describe('bench interleaved HTTP trials (pacedAlternation)', () => {
  const arrivals = { a: [] as number[], b: [] as number[] };
  let a: { server: Server; url: string };
  let b: { server: Server; url: string };
  beforeAll(async () => {
    a = await server(arrivals.a);
    b = await server(arrivals.b);
  });
  afterAll(() => {
    a.server.close();
    b.server.close();
  });

  it('loads one side at a time in A B B A slices, reads both CPUs at each block boundary, and divides per block', async () => {
    // A stand-in CPU counter per side that records when it was read: 1,000 µs more at every read for A, 500 for B.
    const reads = { a: [] as number[], b: [] as number[] };
    const counter = (side: 'a' | 'b', step: number) => () => {
      reads[side].push(performance.now());
      return reads[side].length * step;
    };
    const blockMs = 800;
    const rate = 400;
    const r = await pacedAlternation({
      a: { url: a.url, cpuMicros: counter('a', 1000) },
      b: { url: b.url, cpuMicros: counter('b', 500) },
      connections: 4,
      rate,
      warmupMs: blockMs,
      blockMs,
      blocks: 3,
      requests: [{ method: 'GET', path: '/x', headers: { host: 'h' } }],
    });
    expect(r.a).toHaveLength(3);
    expect(r.b).toHaveLength(3);
    // Both read at the start of every measured block and at the end: blocks + 1 times, a block apart.
    expect(reads.a).toHaveLength(4);
    expect(reads.b).toHaveLength(4);
    for (let k = 1; k < 4; k++) expect(reads.a[k]! - reads.a[k - 1]!).toBeGreaterThan(blockMs * 0.8);
    const expected = (rate * blockMs) / 2 / 1000;
    for (const side of [r.a, r.b]) {
      for (const m of side) {
        expect(m.errors).toBe(0);
        expect(m.completed).toBeGreaterThan(expected * 0.7);
        expect(m.completed).toBeLessThanOrEqual(expected + 1);
        expect(m.durationMs).toBe(blockMs / 2);
      }
    }
    // CPU per request of a block is the block's CPU over the side's own answers: 1,000 µs ÷ completed for A.
    const perRequest = (m: (typeof r.a)[number]) => (m.targetCpuCores * m.durationMs * 1000) / m.completed;
    expect(perRequest(r.a[0]!)).toBeCloseTo(1000 / r.a[0]!.completed, 6);
    expect(perRequest(r.b[0]!)).toBeCloseTo(500 / r.b[0]!.completed, 6);
    // Each side was loaded only in its own slices: A in the 1st, 4th, 5th and 8th eighth of a block, B in the others.
    const start = reads.a[0]!;
    const slice = blockMs / 8;
    const stray = (times: readonly number[], own: readonly number[]) =>
      times.filter((t) => t >= start && t < start + 3 * blockMs).filter((t) => {
        const k = Math.floor((t - start) / slice) % 8;
        const edge = (t - start) % slice;
        return !own.includes(k) && edge > 25 && edge < slice - 25;
      }).length;
    expect(stray(arrivals.a, [0, 3, 4, 7])).toBe(0);
    expect(stray(arrivals.b, [1, 2, 5, 6])).toBe(0);
  });
  it('fails the run, not the process, when a side can no longer be read (its process exited)', async () => {
    let reads = 0;
    const gone = () => {
      if (++reads > 1) throw new Error('bare-http is not running');
      return 0;
    };
    const run = pacedAlternation({
      a: { url: a.url, cpuMicros: () => 0 },
      b: { url: b.url, cpuMicros: gone },
      connections: 2,
      rate: 200,
      warmupMs: 200,
      blockMs: 200,
      blocks: 3,
      requests: [{ method: 'GET', path: '/x', headers: { host: 'h' } }],
    });
    await expect(run).rejects.toThrow('bare-http is not running');
  });
});
