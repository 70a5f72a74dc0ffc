import { connect, type ClientHttp2Session } from 'node:http2';
import { authorizationService, externalProcessorService } from '../../src/edge/envoy/protos.js';
import { checkRequest, processingRequest } from './envoy-requests.js';
import { alternateSlices, type AlternationPlan, type AlternationResult, type AlternationSide } from './alternation.js';
import { latencies, record, summarise, type LatencySummary } from './histogram.js';
import { announceReady, exitWithParent, serveIpc } from './ipc.js';
import { processCpuMicros } from './proc-stat.js';

/**
 * A gRPC load generator process: Envoy-shaped requests for sandboxes drawn at random from the view, either
 * a fixed number of calls in flight for a fixed time against one target (`run`) or two targets compared by
 * alternation.ts's schedule (`alternate`). Requests are encoded once up front and responses decoded only
 * for a sample, so the generator spends its CPU on the transport, not on protobuf; the target decodes and
 * encodes every message as it would behind Envoy.
 *
 * gRPC is framed by hand on node:http2 (one HEADERS, one length-prefixed DATA, read DATA and the
 * grpc-status trailer), as h2load does, at a third of a grpc-js client's CPU per call, so the generator
 * rather than the target is seldom what saturates. A Check is a unary call; an ext_proc Process is one
 * stream per request, as Envoy opens it (request_headers out, one ProcessingResponse back, half-close),
 * which looks the same on the wire when the client sends one message and half-closes.
 */

export type GrpcKind = 'check' | 'process';

export interface GrpcRunArgs {
  readonly target: string;
  readonly kind: GrpcKind;
  readonly inFlight: number;
  readonly warmupMs: number;
  readonly durationMs: number;
  /** Requests name sandboxes 0 … sandboxes-1. */
  readonly sandboxes: number;
  /** Seed offset, so two workers do not send the same sequence. */
  readonly seed: number;
}

export interface GrpcRunResult {
  readonly completed: number;
  readonly errors: number;
  /** Sampled responses that were not an allow (a wrong view, a not-ready gateway). */
  readonly notAllowed: number;
  readonly latency: LatencySummary;
  /** CPU this process used during the measured window, in cores (1 = one core busy). */
  readonly cpuCores: number;
  readonly firstError: string | undefined;
}

const DISTINCT_REQUESTS = 1024;
/** One response in SAMPLE_EVERY is decoded and checked. */
const SAMPLE_EVERY = 64;
const DRAIN_MS = 10_000;

/** A small deterministic generator (mulberry32), so runs pick the same sandboxes. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface Method {
  readonly path: string;
  requestSerialize(v: object): Buffer;
  responseDeserialize(b: Buffer): Record<string, unknown>;
}

function method(kind: GrpcKind): Method {
  const Ctor = kind === 'check' ? authorizationService() : externalProcessorService();
  return (Ctor.service as unknown as Record<string, Method>)[kind === 'check' ? 'Check' : 'Process']!;
}

function isAllow(kind: GrpcKind, r: Record<string, unknown>): boolean {
  if (kind === 'check') return r.ok_response !== undefined && r.ok_response !== null;
  const h = r.request_headers as { response?: { status?: string } } | undefined;
  return h?.response !== undefined && (h.response.status === undefined || h.response.status === 'CONTINUE');
}

async function h2Session(target: string): Promise<ClientHttp2Session> {
  const session = connect('http://' + target);
  await new Promise<void>((resolve, reject) => {
    session.once('connect', () => resolve());
    session.once('error', reject);
  });
  session.on('error', () => {});
  return session;
}

/** A gRPC length-prefixed message: compressed flag 0, 4-byte big-endian length, the bytes. */
function grpcFrame(message: Buffer): Buffer {
  const out = Buffer.allocUnsafe(5 + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  message.copy(out, 5);
  return out;
}

/** One call: `answered` gets the response message (undefined when it failed) or the error. */
type Call = (answered: (message: Buffer | undefined, err: Error | undefined) => void) => void;

interface Caller {
  readonly call: Call;
  /** Decodes a response and says whether it is an allow. */
  readonly allowed: (message: Buffer) => boolean;
  close(): void;
}

/** Envoy-shaped calls of `kind` to `target` for sandboxes drawn from 0 … sandboxes-1. */
async function caller(kind: GrpcKind, target: string, sandboxes: number, seed: number): Promise<Caller> {
  const m = method(kind);
  const rnd = random(0x5eed + seed);
  const framed: Buffer[] = [];
  for (let k = 0; k < DISTINCT_REQUESTS; k++) {
    const i = Math.floor(rnd() * sandboxes);
    const id = `bench-${seed}-${k}`;
    framed.push(grpcFrame(m.requestSerialize(kind === 'check' ? checkRequest(i, id) : processingRequest(i, id))));
  }
  const session = await h2Session(target);
  let seq = 0;
  const call: Call = (answered) => {
    const st = session.request({ ':method': 'POST', ':path': m.path, 'content-type': 'application/grpc', te: 'trailers' });
    const chunks: Buffer[] = [];
    let failed: Error | undefined;
    st.on('response', (h) => {
      const status = h['grpc-status'];
      if (status !== undefined && status !== '0') failed ??= new Error(`grpc-status ${String(status)}: ${String(h['grpc-message'] ?? '')}`);
    });
    st.on('trailers', (h) => {
      if (h['grpc-status'] !== '0') failed ??= new Error(`grpc-status ${String(h['grpc-status'])}: ${String(h['grpc-message'] ?? '')}`);
    });
    st.on('data', (d: Buffer) => chunks.push(d));
    st.on('error', (err: Error) => {
      failed ??= err;
    });
    st.on('close', () => {
      const body = Buffer.concat(chunks);
      if (failed === undefined && body.length < 5) failed = new Error('no response message');
      answered(failed === undefined ? body.subarray(5) : undefined, failed);
    });
    st.end(framed[seq++ % DISTINCT_REQUESTS]!);
  };
  return { call, allowed: (message) => isAllow(kind, m.responseDeserialize(message)), close: () => session.close() };
}

/** `inFlight` calls open at all times for the window (after the warm-up); each answer in the window is counted. */
async function run(a: GrpcRunArgs): Promise<GrpcRunResult> {
  const c = await caller(a.kind, a.target, a.sandboxes, a.seed);
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

/** One side of an interleaved comparison: where the calls go, whose CPU is read, which sandboxes the calls name. */
export interface GrpcAlternationSide {
  readonly target: string;
  readonly pid: number;
  readonly sandboxes: number;
}

export interface GrpcAlternationArgs extends AlternationPlan {
  readonly a: GrpcAlternationSide;
  readonly b: GrpcAlternationSide;
  readonly kind: GrpcKind;
}

/**
 * Two gRPC targets compared (alternation.ts), run here so the slices the load switches at and the block
 * boundaries both targets' CPU is read at (from /proc) are one schedule. Every SAMPLE_EVERY-th answer of a
 * side is decoded and checked to be an allow.
 */
async function alternate(a: GrpcAlternationArgs): Promise<AlternationResult> {
  // One seed for both: where the two name the same number of sandboxes, they are sent the same calls.
  const connect = (s: GrpcAlternationSide) => caller(a.kind, s.target, s.sandboxes, 0);
  const side = (c: Caller, pid: number): AlternationSide => {
    let answers = 0;
    return {
      cpuMicros: () => {
        const us = processCpuMicros(pid);
        if (us === undefined) throw new Error(`process ${pid} is not running`);
        return us;
      },
      issue: (finish) =>
        c.call((buf, err) => {
          if (err !== undefined || buf === undefined) return finish(err ?? new Error('no response message'));
          finish(++answers % SAMPLE_EVERY === 0 && !c.allowed(buf) ? 'denied' : undefined);
        }),
    };
  };
  const ca = await connect(a.a);
  try {
    const cb = await connect(a.b);
    try {
      return await alternateSlices(a, { a: side(ca, a.a.pid), b: side(cb, a.b.pid) });
    } finally {
      cb.close();
    }
  } finally {
    ca.close();
  }
}

exitWithParent();
serveIpc({ run: (args: GrpcRunArgs) => run(args), alternate: (args: GrpcAlternationArgs) => alternate(args) });
announceReady({ pid: process.pid });
