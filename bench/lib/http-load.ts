import autocannon from 'autocannon';
import { Histogram, summarise } from './histogram.js';
import type { LoadResult } from './grpc-load.js';
import { sandboxHost } from './sandboxes.js';

/**
 * HTTP load with autocannon from the runner's process (the target runs in another). autocannon keeps its
 * latencies in whole milliseconds, so every response is also timed here into a microsecond histogram, and
 * only responses that arrive after the warm-up count toward req/s and latency.
 */

export interface HttpLoadRun {
  /** Base URL of the target, e.g. http://127.0.0.1:9090 */
  readonly url: string;
  readonly connections: number;
  readonly warmupMs: number;
  readonly durationMs: number;
  /** Requests name sandboxes 0 … sandboxes-1 (by Host). */
  readonly sandboxes: number;
  /** Requests to cycle through instead of the HTTP authz ones (the proxy benches send sandbox paths). */
  readonly requests?: readonly HttpRequestSpec[];
}

export interface HttpRequestSpec {
  readonly method: string;
  readonly path: string;
  readonly headers: Readonly<Record<string, string>>;
}

/**
 * autocannon builds the buffer of every listed request for every connection when it connects: 256
 * requests × 256 connections stalled the generator for most of a short window. 16 distinct Hosts are
 * enough to keep the gateway from answering one sandbox from a hot cache line.
 */
const DISTINCT_REQUESTS = 16;

/** What nginx auth_request / Envoy's http_service send: the original Host and path under /authz. */
export function authzRequests(sandboxes: number): HttpRequestSpec[] {
  const out = [];
  for (let k = 0; k < DISTINCT_REQUESTS; k++) {
    const i = (k * 7919) % sandboxes;
    out.push({
      method: 'GET',
      path: '/authz/api/v1/files?path=%2Fhome%2Fuser',
      headers: {
        host: sandboxHost(i),
        accept: 'application/json',
        'user-agent': 'Mozilla/5.0 (X11; Linux x86_64) Chrome/131.0',
        'x-forwarded-for': '203.0.113.7',
        'x-forwarded-proto': 'https',
        'x-request-id': `bench-${k}`,
      },
    });
  }
  return out;
}

export async function httpLoad(r: HttpLoadRun): Promise<LoadResult> {
  const hist = new Histogram();
  let completed = 0;
  let notAllowed = 0;
  const t0 = performance.now();
  const start = t0 + r.warmupMs;
  const end = start + r.durationMs;
  let cpuAtStart: NodeJS.CpuUsage | undefined;
  let cpuInWindow: NodeJS.CpuUsage | undefined;
  const instance = autocannon({
    url: r.url,
    connections: r.connections,
    // A bound only: the run is stopped just after the window (autocannon's own stop waits for its next
    // one-second tick).
    duration: Math.ceil((r.warmupMs + r.durationMs) / 1000) + 5,
    timeout: 10,
    requests: (r.requests ?? authzRequests(r.sandboxes)).map((q) => ({ ...q, headers: { ...q.headers } })),
  });
  instance.on('response', (_client, statusCode, _bytes, responseTime) => {
    const now = performance.now();
    if (now < start) return;
    cpuAtStart ??= process.cpuUsage();
    if (now >= end) {
      cpuInWindow ??= process.cpuUsage(cpuAtStart);
      return;
    }
    completed++;
    if (statusCode !== 200) notAllowed++;
    hist.record(responseTime * 1e6);
  });
  const stop = setTimeout(() => instance.stop(), r.warmupMs + r.durationMs + 50);
  const result = await new Promise<{ errors: number; timeouts: number }>((resolve) => instance.on('done', resolve));
  clearTimeout(stop);
  const cpu = cpuInWindow ?? process.cpuUsage(cpuAtStart);
  return {
    rps: completed / (r.durationMs / 1000),
    latency: summarise(hist),
    histogram: hist,
    durationMs: r.durationMs,
    completed,
    errors: result.errors + result.timeouts,
    notAllowed,
    loadCpuCores: (cpu.user + cpu.system) / 1000 / r.durationMs,
    firstError: result.errors > 0 ? `${result.errors} connection errors` : undefined,
  };
}
