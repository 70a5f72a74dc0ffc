import { decide } from '../../src/domain/decide.js';
import type { RouteOptions, RouteRequest } from '../../src/domain/route-key.js';
import type { BackendSnapshot } from '../../src/domain/sandbox.js';
import { SandboxView } from '../../src/view/sandbox-view.js';
import { envoyHeaders } from './envoy-requests.js';
import { heapAfterGc } from './heap-after-gc.js';
import { latencies, record, summarise, type LatencySummary } from './histogram.js';
import { announceReady, exitWithParent, serveIpc } from './ipc.js';
import { decodedSnapshots } from './sandboxes.js';

/**
 * The in-process half of the scale section, run in a child of its own per view size (`node --expose-gc`):
 * it fills a SandboxView the way a driver's list does, measures heap after GC with the snapshots alone and
 * with the view holding them, then times decide() — parse the route, look the sandbox up, decide — over
 * Envoy-shaped requests for random sandboxes.
 *
 * One decide() takes a few hundred nanoseconds, less than the resolution worth trusting from a clock read,
 * so calls are timed in batches of BATCH and each batch's mean per call is one sample: the percentiles are
 * of those means. A GC pause or a cache-missing batch still shows in the tail.
 */

export interface ViewProbeArgs {
  readonly size: number;
  /** Timed decide() calls (after a warm-up of a tenth as many). */
  readonly ops: number;
}

export interface ViewProbeResult {
  readonly size: number;
  /** Heap after GC per sandbox: the decoded snapshots alone, and the view holding them. */
  readonly snapshotBytesPerSandbox: number;
  readonly viewBytesPerSandbox: number;
  /** Mean time to apply one upsert while filling. */
  readonly applyNsPerSandbox: number;
  readonly latency: LatencySummary;
  readonly allowed: number;
}

const BATCH = 32;
const DISTINCT_REQUESTS = 4096;
const CHUNK = 10_000;

/** The options `sandgate serve` runs with by default. */
const ROUTE: RouteOptions = { order: ['headers', 'e2b-headers', 'host', 'path'], baseDomain: 'localhost', defaultNamespace: 'default', defaultPort: 49983, pathPrefix: '' };

/** What the ext_authz door hands decide(): the lower-cased header map, the authority and the path. */
function routeRequests(size: number): RouteRequest[] {
  const out: RouteRequest[] = [];
  let x = 0x9e3779b9;
  for (let k = 0; k < DISTINCT_REQUESTS; k++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    const headers = envoyHeaders(x % size, `req-${k}`);
    out.push({ headers, host: headers[':authority'], path: headers[':path'] });
  }
  return out;
}

function probe(a: ViewProbeArgs): ViewProbeResult {
  const h0 = heapAfterGc();
  let snapshots: BackendSnapshot[] | undefined = [];
  for (let from = 0; from < a.size; from += CHUNK) {
    for (const s of decodedSnapshots(from, Math.min(CHUNK, a.size - from))) snapshots.push(s);
  }
  const h1 = heapAfterGc();
  const now = Date.parse('2025-06-01T00:00:00Z');
  const view = new SandboxView({ now: () => now });
  view.registerDriver('bench');
  view.replace('bench', []);
  const t0 = process.hrtime.bigint();
  for (const s of snapshots) view.apply('bench', { type: 'upsert', snapshot: s });
  const applyNs = Number(process.hrtime.bigint() - t0);
  // The array of snapshots goes: what stays is what the view holds.
  snapshots = undefined;
  const h2 = heapAfterGc();

  const requests = routeRequests(a.size);
  const hist = latencies();
  let allowed = 0;
  const run = (ops: number, measured: boolean): void => {
    let k = 0;
    for (let done = 0; done < ops; done += BATCH) {
      const t = process.hrtime.bigint();
      for (let j = 0; j < BATCH; j++) {
        if (decide(view, ROUTE, requests[k]!).allow) allowed++;
        k = (k + 1) & (DISTINCT_REQUESTS - 1);
      }
      if (measured) record(hist, Number(process.hrtime.bigint() - t) / BATCH);
    }
  };
  run(Math.max(BATCH, Math.floor(a.ops / 10)), false);
  allowed = 0;
  run(a.ops, true);
  return {
    size: a.size,
    snapshotBytesPerSandbox: (h1 - h0) / a.size,
    viewBytesPerSandbox: (h2 - h0) / a.size,
    applyNsPerSandbox: applyNs / a.size,
    latency: summarise(hist),
    allowed,
  };
}

exitWithParent();
serveIpc({ probe: (args: ViewProbeArgs) => probe(args) });
announceReady({ pid: process.pid });
