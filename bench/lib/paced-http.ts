import { Pool } from 'undici';
import type { LoadResult } from './grpc-load.js';
import { Histogram, summarise } from './histogram.js';
import type { HttpRequestSpec } from './http-load.js';

/**
 * HTTP load at a fixed offered rate, for measuring what a request costs the target rather than how many it
 * can answer: requests leave evenly spread in time (every millisecond, as many as the rate says are due),
 * over a keep-alive pool of `connections`, each connection carrying one request at a time. autocannon's
 * rate limit sends each second's quota as one burst, which measures a saturated target in bursts.
 *
 * When the target falls behind, requests wait for a free connection; the run then completes fewer than
 * offered, and the caller reports the rate as not sustained.
 */

export interface PacedHttpRun {
  readonly url: string;
  readonly connections: number;
  /** Requests per second offered. */
  readonly rate: number;
  readonly warmupMs: number;
  readonly durationMs: number;
  readonly requests: readonly HttpRequestSpec[];
}

const TICK_MS = 1;
const DRAIN_MS = 10_000;

export async function pacedHttpLoad(r: PacedHttpRun): Promise<LoadResult> {
  const pool = new Pool(r.url, { connections: r.connections, pipelining: 1, keepAliveTimeout: 60_000 });
  const hist = new Histogram();
  let completed = 0;
  let errors = 0;
  let notAllowed = 0;
  let firstError: string | undefined;
  let issued = 0;
  let inFlight = 0;
  const t0 = performance.now();
  const start = t0 + r.warmupMs;
  const end = start + r.durationMs;
  let cpuAtStart: NodeJS.CpuUsage | undefined;
  let cpuInWindow: NodeJS.CpuUsage | undefined;

  const send = (spec: HttpRequestSpec): void => {
    const began = performance.now();
    inFlight++;
    pool.request({ path: spec.path, method: spec.method as 'GET', headers: spec.headers }).then(
      async (res) => {
        await res.body.dump();
        return res.statusCode;
      },
    ).then(
      (status) => finish(began, status, undefined),
      (err: Error) => finish(began, 0, err),
    );
  };

  let settle: (() => void) | undefined;
  const finish = (began: number, status: number, err: Error | undefined): void => {
    inFlight--;
    const now = performance.now();
    if (err !== undefined) {
      errors++;
      firstError ??= err.message;
    } else if (now >= start && now < end) {
      completed++;
      if (status !== 200) notAllowed++;
      hist.record((now - began) * 1e6);
    }
    if (inFlight === 0 && now >= end) settle?.();
  };

  await new Promise<void>((resolve) => {
    const drain = setTimeout(resolve, r.warmupMs + r.durationMs + DRAIN_MS);
    settle = () => {
      clearTimeout(drain);
      resolve();
    };
    const timer = setInterval(() => {
      const now = performance.now();
      if (now >= start) cpuAtStart ??= process.cpuUsage();
      if (now >= end) {
        cpuInWindow ??= process.cpuUsage(cpuAtStart);
        clearInterval(timer);
        if (inFlight === 0) settle?.();
        return;
      }
      // Requests beyond one per connection would only queue in the pool: the target is behind, and the
      // shortfall shows as fewer completed than offered.
      const due = Math.floor(((now - t0) / 1000) * r.rate);
      while (issued < due && inFlight < r.connections) send(r.requests[issued++ % r.requests.length]!);
      if (issued < due && inFlight >= r.connections) issued = due;
    }, TICK_MS);
  });
  await pool.close().catch(() => {});
  const cpu = cpuInWindow ?? process.cpuUsage(cpuAtStart);
  return {
    rps: completed / (r.durationMs / 1000),
    latency: summarise(hist),
    histogram: hist,
    durationMs: r.durationMs,
    completed,
    errors,
    notAllowed,
    loadCpuCores: (cpu.user + cpu.system) / 1000 / r.durationMs,
    firstError,
  };
}
