import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AlternationResult } from '../../bench/lib/alternation.js';
import type { GrpcAlternationArgs } from '../../bench/lib/grpc-load-worker.js';
import { ProcessGroup, type Child } from '../../bench/lib/processes.js';

/**
 * The gRPC doors' interleaved cost trials, run by the load-generator process (grpc-load-worker.ts
 * `alternate`) against two real bare grpc-js servers on loopback: both built scripts, as the bench runs them.
 */

const DIST = join(import.meta.dirname, '..', '..', 'dist', 'bench', 'lib');

describe('bench interleaved gRPC trials (grpc-load-worker alternate)', () => {
  const group = new ProcessGroup();
  let servers: { child: Child; target: string; pid: number }[];
  let worker: Child;

  beforeAll(async () => {
    servers = [];
    for (const name of ['bare-a', 'bare-b']) {
      const child = group.node(name, join(DIST, 'bare-grpc-server.js'), ['0']);
      const info = await child.ready();
      servers.push({ child, target: `127.0.0.1:${String(info.port)}`, pid: child.proc.pid! });
    }
    worker = group.node('grpc-load', join(DIST, 'grpc-load-worker.js'));
    await worker.ready();
  });
  afterAll(() => group.stopAll());

  const args = (over: Partial<GrpcAlternationArgs> = {}): GrpcAlternationArgs => ({
    a: { target: servers[0]!.target, pid: servers[0]!.pid, sandboxes: 10 },
    b: { target: servers[1]!.target, pid: servers[1]!.pid, sandboxes: 10 },
    kind: 'check',
    client: 'h2',
    maxInFlight: 8,
    rate: 400,
    warmupMs: 800,
    blockMs: 800,
    blocks: 3,
    ...over,
  });

  it.each(['h2', 'grpc-js'] as const)('loads each side in its own slices at the offered rate and reads both CPUs per block (%s client)', async (client) => {
    const r = await worker.request<AlternationResult>('alternate', args({ client }), 30_000);
    expect(r.a).toHaveLength(3);
    expect(r.b).toHaveLength(3);
    expect(r.activeMs).toBe(400);
    // 400 calls/s for the 400 ms a side carries load in a block.
    for (const block of [...r.a, ...r.b]) {
      expect(block.errors).toBe(0);
      expect(block.notAllowed).toBe(0);
      expect(block.completed).toBeGreaterThan(160 * 0.7);
      expect(block.completed).toBeLessThanOrEqual(161);
      // Each server answered its calls: its own CPU over the block is not nothing.
      expect(block.cpuMicros).toBeGreaterThan(0);
      expect(block.loadMicros).toBeGreaterThan(0);
    }
  });

  it('fails the run, not the worker, when a side can no longer be read (its process exited)', async () => {
    const gone = args({ b: { target: servers[1]!.target, pid: 2 ** 22 + 7, sandboxes: 10 }, blocks: 1 });
    await expect(worker.request('alternate', gone, 30_000)).rejects.toThrow(/is not running/);
    // The worker still serves the next run.
    const r = await worker.request<AlternationResult>('alternate', args({ blocks: 1 }), 30_000);
    expect(r.a).toHaveLength(1);
  });
});
