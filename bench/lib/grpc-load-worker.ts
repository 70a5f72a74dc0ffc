import { grpcCaller, SAMPLE_EVERY, type GrpcKind, type LoadResult } from './grpc-load.js';
import { latencies, record, summarise } from './histogram.js';
import { announceReady, exitWithParent, serveIpc } from './ipc.js';

export interface GrpcRunArgs {
  readonly target: string;
  readonly kind: GrpcKind;
  readonly inFlight: number;
  readonly warmupMs: number;
  readonly durationMs: number;
  readonly sandboxes: number;
  /** So two workers do not send the same sequence. */
  readonly seed: number;
}

/** `cpuCores`: the CPU this process used during the measured window. */
export type GrpcRunResult = Omit<LoadResult, 'rps' | 'durationMs' | 'loadCpuCores'> & { readonly cpuCores: number };

const DRAIN_MS = 10_000;

async function run(a: GrpcRunArgs): Promise<GrpcRunResult> {
  const c = await grpcCaller(a.kind, a.target, a.sandboxes, a.seed);
  const hist = latencies();
  const r = { completed: 0, errors: 0, notAllowed: 0, firstError: undefined as string | undefined };
  const start = performance.now() + a.warmupMs;
  const end = start + a.durationMs;
  let cpu0: NodeJS.CpuUsage | undefined;
  let cpu: NodeJS.CpuUsage | undefined;
  await new Promise<void>((resolve) => {
    let running = a.inFlight;
    const drain = setTimeout(resolve, a.warmupMs + a.durationMs + DRAIN_MS);
    const issue = (): void => {
      const began = performance.now();
      c.call((buf, err) => {
        const now = performance.now();
        if (now >= start) cpu0 ??= process.cpuUsage();
        if (now >= end) cpu ??= process.cpuUsage(cpu0);
        if (err !== undefined) {
          r.errors++;
          r.firstError ??= err.message;
        } else if (now >= start && now < end) {
          r.completed++;
          record(hist, (now - began) * 1e6);
          if (buf !== undefined && r.completed % SAMPLE_EVERY === 0 && !c.allowed(buf)) r.notAllowed++;
        }
        if (now < end) return issue();
        if (--running === 0) {
          clearTimeout(drain);
          resolve();
        }
      });
    };
    for (let k = 0; k < a.inFlight; k++) issue();
  });
  c.close();
  const used = cpu ?? process.cpuUsage(cpu0);
  return { ...r, latency: summarise(hist), cpuCores: (used.user + used.system) / 1000 / a.durationMs };
}

exitWithParent();
serveIpc({ run: (args: GrpcRunArgs) => run(args) });
announceReady({ pid: process.pid });
