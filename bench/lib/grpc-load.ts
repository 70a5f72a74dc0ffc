import { connect } from 'node:http2';
import { authorizationService, externalProcessorService } from '../../src/edge/envoy/protos.js';
import { checkRequest, processingRequest } from './envoy-requests.js';
import type { GrpcRunArgs, GrpcRunResult } from './grpc-load-worker.js';
import type { LatencySummary } from './histogram.js';
import { benchScript } from './machine.js';
import type { Child, ProcessGroup } from './processes.js';

/**
 * Requests are encoded once up front and only a sample of responses decoded, and gRPC is framed by hand on
 * node:http2 as h2load does (a third of a grpc-js client's CPU per call), so the generator spends its CPU on the
 * transport and is seldom what saturates. An ext_proc Process is one stream per request, as Envoy opens it:
 * on the wire the same as a unary call.
 */

export type GrpcKind = 'check' | 'process';

const DISTINCT_REQUESTS = 1024;
export const SAMPLE_EVERY = 64;

interface Method {
  readonly path: string;
  requestSerialize(v: object): Buffer;
  responseDeserialize(b: Buffer): Record<string, unknown>;
}

function isAllow(kind: GrpcKind, r: Record<string, unknown>): boolean {
  if (kind === 'check') return r.ok_response !== undefined && r.ok_response !== null;
  const h = r.request_headers as { response?: { status?: string } } | undefined;
  return h?.response !== undefined && (h.response.status === undefined || h.response.status === 'CONTINUE');
}

/** A gRPC length-prefixed message: compressed flag 0, 4-byte big-endian length, the bytes. */
function grpcFrame(message: Buffer): Buffer {
  const out = Buffer.allocUnsafe(5 + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  message.copy(out, 5);
  return out;
}

interface GrpcCaller {
  call(answered: (message: Buffer | undefined, err: Error | undefined) => void): void;
  allowed(message: Buffer): boolean;
  close(): void;
}

export async function grpcCaller(kind: GrpcKind, target: string, sandboxes: number, seed: number): Promise<GrpcCaller> {
  const Ctor = kind === 'check' ? authorizationService() : externalProcessorService();
  const m = (Ctor.service as unknown as Record<string, Method>)[kind === 'check' ? 'Check' : 'Process']!;
  const framed = Array.from({ length: DISTINCT_REQUESTS }, (_, k) => {
    // Scattered over the view by a stride prime to any count of sandboxes the bench uses, the same in every run.
    const i = ((seed * DISTINCT_REQUESTS + k) * 7919) % sandboxes;
    const id = `bench-${seed}-${k}`;
    return grpcFrame(m.requestSerialize(kind === 'check' ? checkRequest(i, id) : processingRequest(i, id)));
  });
  const session = connect('http://' + target);
  await new Promise<void>((resolve, reject) => {
    session.once('connect', () => resolve());
    session.once('error', reject);
  });
  session.on('error', () => {});
  let seq = 0;
  const statusError = (h: Record<string, unknown>): Error => new Error(`grpc-status ${String(h['grpc-status'])}: ${String(h['grpc-message'] ?? '')}`);
  return {
    call(answered) {
      const st = session.request({ ':method': 'POST', ':path': m.path, 'content-type': 'application/grpc', te: 'trailers' });
      const chunks: Buffer[] = [];
      let failed: Error | undefined;
      st.on('response', (h) => {
        if (h['grpc-status'] !== undefined && h['grpc-status'] !== '0') failed ??= statusError(h);
      });
      st.on('trailers', (h) => {
        if (h['grpc-status'] !== '0') failed ??= statusError(h);
      });
      st.on('data', (d: Buffer) => chunks.push(d));
      st.on('error', (err: Error) => (failed ??= err));
      st.on('close', () => {
        const body = Buffer.concat(chunks);
        if (failed === undefined && body.length < 5) failed = new Error('no response message');
        answered(failed === undefined ? body.subarray(5) : undefined, failed);
      });
      st.end(framed[seq++ % DISTINCT_REQUESTS]!);
    },
    allowed: (message) => isAllow(kind, m.responseDeserialize(message)),
    close: () => session.close(),
  };
}

export interface LoadResult {
  readonly rps: number;
  readonly latency: LatencySummary;
  readonly durationMs: number;
  readonly completed: number;
  readonly errors: number;
  /** Sampled answers that were not an allow: a non-zero count means the run measured denials. */
  readonly notAllowed: number;
  readonly loadCpuCores: number;
  readonly firstError: string | undefined;
}

/** Calls in flight from several load processes: p50 and the mean weighted by their answers, p99 and p99.9 the highest of theirs. */
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

  async run(r: Omit<GrpcRunArgs, 'seed'>): Promise<LoadResult> {
    // Fewer calls in flight than processes: one process each, so the in-flight count stays exact.
    const used = this.workers.slice(0, Math.max(1, Math.min(this.workers.length, r.inFlight)));
    const shares = used.map((_, k) => Math.floor(r.inFlight / used.length) + (k < r.inFlight % used.length ? 1 : 0));
    const results = await Promise.all(used.map((w, k) => w.request<GrpcRunResult>('run', { ...r, inFlight: shares[k]!, seed: k }, r.warmupMs + r.durationMs + 60_000)));
    const sum = (f: (r: GrpcRunResult) => number): number => results.reduce((t, r) => t + f(r), 0);
    const completed = sum((r) => r.completed);
    const weighted = (f: (l: LatencySummary) => number): number => sum((r) => f(r.latency) * r.latency.count) / Math.max(1, completed);
    const highest = (f: (l: LatencySummary) => number): number => Math.max(...results.map((r) => f(r.latency)));
    return {
      rps: completed / (r.durationMs / 1000),
      latency: { p50: weighted((l) => l.p50), mean: weighted((l) => l.mean), p99: highest((l) => l.p99), p999: highest((l) => l.p999), count: completed },
      durationMs: r.durationMs,
      completed,
      errors: sum((r) => r.errors),
      notAllowed: sum((r) => r.notAllowed),
      loadCpuCores: sum((r) => r.cpuCores),
      firstError: results.find((r) => r.firstError !== undefined)?.firstError,
    };
  }
}
