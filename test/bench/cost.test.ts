import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import type { Measured } from '../../bench/lib/alternation.js';
import { compareCost, compareRate, cpuPerRequest, Findings, overInstances, spread } from '../../bench/lib/compare.js';
import { latencies, summarise } from '../../bench/lib/histogram.js';
import { processCpuMicros } from '../../bench/lib/proc-stat.js';

function trial(completed: number, targetCpuCores: number, durationMs = 2000, errors = 0): Measured {
  return {
    rps: completed / (durationMs / 1000),
    latency: summarise(latencies()),
    durationMs,
    completed,
    errors,
    notAllowed: 0,
    loadCpuCores: 0,
    targetCpuCores,
    firstError: undefined,
  };
}

describe('bench cost figures', () => {
  it('takes the median and the spread of the values', () => {
    expect(spread([3, 1, 2])).toMatchObject({ median: 2, min: 1, max: 3 });
    expect(spread([4, 1, 2, 3])).toMatchObject({ median: 2.5, min: 1, max: 4 });
  });

  it('divides the CPU of the window by the requests answered in it', () => {
    // 0.2 cores for 2 s = 400 ms of CPU over 10,000 requests = 40 µs each.
    expect(cpuPerRequest(trial(10_000, 0.2))).toBeCloseTo(40, 6);
    expect(cpuPerRequest(trial(0, 0.2))).toBeNaN();
  });

  it('judges the median of per-pair differences and names the trials that fell short of the offered rate', () => {
    const a = [trial(10_000, 0.21), trial(10_000, 0.3), trial(10_000, 0.22)];
    const b = [trial(10_000, 0.2), trial(10_000, 0.2), trial(9_000, 0.2)];
    const c = compareCost(5000, { a, b }, { a: 'door', b: 'baseline' });
    // Pairs: 42−40 = 2, 60−40 = 20, 44−44.4 = −0.44: the outlier pair does not move the median.
    expect(c.diffUs.median).toBeCloseTo(2, 6);
    expect(c.diffUs.min).toBeCloseTo(44 - 400 / 9, 6);
    expect(c.diffUs.max).toBeCloseTo(20, 6);
    expect(c.shortfalls).toEqual(['baseline trial 3: 4500 of 5000 req/s']);
  });

  it('reports a cost comparison and a limit as the rows BENCHMARKS.md quotes, with what went wrong as notes', () => {
    const f = new Findings();
    const failed = { ...trial(0, 0.1), firstError: 'ECONNREFUSED' };
    const cost = compareCost(5000, { a: [trial(10_000, 0.2), failed], b: [trial(10_000, 0.1), trial(10_000, 0.1)] }, { a: 'sandgate', b: 'bare' });
    f.cost('@ 64 conn', cost, { note: 'vs bare', limit: compareRate({ a: [trial(20_000, 1)], b: [trial(10_000, 1)] }), title: 'door @ 64 conn' });
    f.limit('door @ 1 conn', { a: [trial(4000, 0.5)], b: [trial(4000, 0.5)] }, { a: 'sandgate', b: 'bare' });
    expect(f.rows.map((r) => r.measure)).toEqual([
      'CPU per request @ 64 conn, 5000 req/s offered',
      'req/s per core @ 64 conn (1e6 ÷ CPU per request)',
      'req/s at the limit @ 64 conn',
      'req/s door @ 1 conn',
      'p50 door @ 1 conn',
      'p99 door @ 1 conn',
    ]);
    // 0.2 cores × 2 s over 10,000 requests = 40 µs; the block that answered nothing has no figure.
    expect(f.rows[0]).toMatchObject({ value: 40, baseline: 20, ratio: 2, note: 'vs bare' });
    expect(f.rows[2]).toMatchObject({ value: 10_000, baseline: 5000 });
    expect(f.notes[0]).toBe('door @ 64 conn: CPU per request 40.0 vs 20.0 µs; difference +20.0 µs (spread +20.0 … +20.0, 2 pairs)');
    expect(f.notes.slice(1)).toEqual([
      'door @ 64 conn: the offered 5000 req/s was not sustained (sandgate trial 2: 0 of 5000 req/s): its CPU per request is of a saturated process',
      'door @ 64 conn: sandgate block 2: no request completed (ECONNREFUSED)',
    ]);
    expect(f.output('bare').targets).toEqual([]);
  });

  it('reads the CPU of another process from /proc, without its help', async () => {
    // The child burns CPU until it has used 200 ms by its own count, prints that count, then waits.
    const script = 'while (true) { const c = process.cpuUsage(); if (c.user + c.system >= 200000) { console.log(c.user + c.system); break; } } setTimeout(() => {}, 60000)';
    const child = spawn(process.execPath, ['-e', script]);
    try {
      const own = await new Promise<number>((resolve) => child.stdout.once('data', (d: Buffer) => resolve(Number(d.toString()))));
      const read = processCpuMicros(child.pid!)!;
      // The same kernel counter (getrusage in the child, schedstat or stat here), read after the child's.
      expect(read).toBeGreaterThanOrEqual(own * 0.95);
    } finally {
      child.kill('SIGKILL');
    }
    expect(processCpuMicros(2 ** 22 + 12_345)).toBeUndefined();
  });

  it('shares the blocks of a comparison out among instance pairs, each a[i] against b[i], and lays them end to end', async () => {
    const BLOCKS = 10;
    const calls: string[] = [];
    const r = await overInstances(['g1', 'g2'], ['f1', 'f2'], (a, b, blocks) => {
      calls.push(`${a}-${b}-${blocks}`);
      const list = (cpu: number) => Array.from({ length: blocks }, () => trial(100, cpu));
      return Promise.resolve({ a: list(a === 'g1' ? 0.1 : 0.2), b: list(0.1) });
    }, BLOCKS);
    expect(calls).toEqual([`g1-f1-${BLOCKS / 2}`, `g2-f2-${BLOCKS / 2}`]);
    expect(r.a).toHaveLength(BLOCKS);
    expect(r.b).toHaveLength(BLOCKS);
    // The first pair's blocks come first: their differences are 0, the second pair's positive.
    const c = compareCost(50, r, { a: 'g', b: 'f' });
    expect(c.diffUs.values.slice(0, BLOCKS / 2).every((d) => d === 0)).toBe(true);
    expect(c.diffUs.values.slice(BLOCKS / 2).every((d) => d > 0)).toBe(true);
    await expect(overInstances(['g1'], ['f1', 'f2'], () => Promise.resolve({ a: [], b: [] }), BLOCKS)).rejects.toThrow('instance pairs: 1 against 2');
  });
});
