import { blocksMeasured, warmBlocks, type AlternationResult, type Measured } from './alternation.js';
import type { GrpcAlternationArgs, GrpcRunArgs, GrpcRunResult } from './grpc-load-worker.js';
import type { LatencySummary } from './histogram.js';
import { benchScript } from './machine.js';
import type { Child, ProcessGroup } from './processes.js';

/**
 * Drives a gRPC target from one or more load-generator processes (grpc-load-worker.ts), splitting the
 * in-flight count between them, and adds up their counts. Latency from several processes: p50 and the
 * mean weighted by their answers, p99 and p99.9 the highest of theirs.
 */

/** One target loaded for a window: GrpcRunArgs without the seed, which each load process gets its own of. */
export type GrpcLoadRun = Omit<GrpcRunArgs, 'seed'>;

export interface LoadResult {
  readonly rps: number;
  readonly latency: LatencySummary;
  readonly durationMs: number;
  readonly completed: number;
  readonly errors: number;
  /** Sampled answers that were not an allow: a non-zero count means the run measured denials. */
  readonly notAllowed: number;
  /** CPU of the load generators during the window, in cores. */
  readonly loadCpuCores: number;
  readonly firstError: string | undefined;
}

export class GrpcLoad {
  private constructor(private readonly workers: readonly Child[]) {}

  static async start(group: ProcessGroup, processes: number): Promise<GrpcLoad> {
    const workers: Child[] = [];
    for (let k = 0; k < processes; k++) workers.push(group.node(`grpc-load-${k}`, benchScript('lib/grpc-load-worker.js')));
    await Promise.all(workers.map((w) => w.ready()));
    return new GrpcLoad(workers);
  }

  async stop(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.stop()));
  }

  async run(r: GrpcLoadRun): Promise<LoadResult> {
    // Fewer calls in flight than processes: one process each, so the in-flight count stays exact.
    const used = this.workers.slice(0, Math.max(1, Math.min(this.workers.length, r.inFlight)));
    const shares = used.map((_, k) => Math.floor(r.inFlight / used.length) + (k < r.inFlight % used.length ? 1 : 0));
    const results = await Promise.all(
      used.map((w, k) => {
        const args: GrpcRunArgs = { target: r.target, kind: r.kind, inFlight: shares[k]!, warmupMs: r.warmupMs, durationMs: r.durationMs, sandboxes: r.sandboxes, seed: k };
        return w.request<GrpcRunResult>('run', args, r.warmupMs + r.durationMs + 60_000);
      }),
    );
    const sum = (f: (r: GrpcRunResult) => number): number => results.reduce((t, r) => t + f(r), 0);
    const completed = sum((r) => r.completed);
    const weighted = (f: (l: LatencySummary) => number): number => sum((r) => f(r.latency) * r.latency.count) / Math.max(1, completed);
    const highest = (f: (l: LatencySummary) => number): number => Math.max(...results.map((r) => f(r.latency)));
    const latency = { p50: weighted((l) => l.p50), mean: weighted((l) => l.mean), p99: highest((l) => l.p99), p999: highest((l) => l.p999), count: completed };
    return {
      rps: completed / (r.durationMs / 1000),
      latency,
      durationMs: r.durationMs,
      completed,
      errors: sum((r) => r.errors),
      notAllowed: sum((r) => r.notAllowed),
      loadCpuCores: sum((r) => r.cpuCores),
      firstError: results.find((r) => r.firstError !== undefined)?.firstError,
    };
  }

  /**
   * Two gRPC targets compared (alternation.ts), run by the first load process alone, which switches the
   * load between the two every slice and reads both targets' CPU from /proc at every block boundary. One
   * Measured per side and block.
   */
  async alternate(r: GrpcAlternationArgs): Promise<{ a: Measured[]; b: Measured[] }> {
    const timeoutMs = (warmBlocks(r) + r.blocks) * r.blockMs + 60_000;
    return blocksMeasured(await this.workers[0]!.request<AlternationResult>('alternate', r, timeoutMs), r.blockMs);
  }
}
