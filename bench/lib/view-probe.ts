import { decide } from '../../src/domain/decide.js';
import type { RouteOptions, RouteRequest } from '../../src/domain/route-key.js';
import type { BackendSnapshot } from '../../src/domain/sandbox.js';
import { mapAgentSandbox } from '../../src/drivers/kubernetes/agent-sandbox-mapping.js';
import { mapOpenKruiseSandbox } from '../../src/drivers/kubernetes/openkruise-mapping.js';
import { SandboxView } from '../../src/view/sandbox-view.js';
import { envoyHeaders } from './envoy-requests.js';
import { heapAfterGc } from './heap-after-gc.js';
import { latencies, record, summarise, type LatencySummary } from './histogram.js';
import { announceReady, exitWithParent, serveIpc } from './ipc.js';
import { kubeVariants, type KubeKind } from './kube-variants.js';
import { decodedSnapshots } from './sandboxes.js';

/**
 * The scale section's heap and decide() figures, in a child of its own per view. For a Kubernetes view the
 * baseline is the parsed objects held by namespace/name: what a driver that kept the raw objects would cost.
 *
 * One decide() takes a few hundred nanoseconds, less than the resolution worth trusting from a clock read,
 * so each sample is the mean of a batch of BATCH calls. A GC pause or a cache-missing batch still shows in the tail.
 */

export interface ViewProbeArgs {
  readonly size: number;
  /** Timed decide() calls (after a warm-up of a tenth as many); 0 measures memory only. */
  readonly ops: number;
  /** A Kubernetes driver whose mapped objects fill the view; the file driver's snapshots when absent. */
  readonly kube?: KubeKind;
}

export interface ViewProbeResult {
  readonly size: number;
  readonly snapshotBytesPerSandbox: number;
  readonly viewBytesPerSandbox: number;
  readonly rawObjectBytesPerSandbox?: number;
  readonly latency: LatencySummary;
  readonly allowed: number;
}

const BATCH = 32;
const DISTINCT_REQUESTS = 4096;
const CHUNK = 10_000;

/** The options `sandgate serve` runs with by default. */
const ROUTE: RouteOptions = { order: ['headers', 'e2b-headers', 'host', 'path'], baseDomain: 'localhost', defaultNamespace: 'default', defaultPort: 49983, pathPrefix: '' };

const MAPPERS = { 'agent-sandbox': mapAgentSandbox, openkruise: mapOpenKruiseSandbox } as const;

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

/** The input texts of a Kubernetes view, held for the whole probe so that every heap reading includes them alike. */
let texts: string[] = [];

function snapshotsOf(a: ViewProbeArgs): BackendSnapshot[] {
  const out: BackendSnapshot[] = [];
  if (a.kube === undefined) {
    for (let from = 0; from < a.size; from += CHUNK) for (const s of decodedSnapshots(from, Math.min(CHUNK, a.size - from))) out.push(s);
    return out;
  }
  const map = MAPPERS[a.kube];
  for (const t of texts) {
    const s = map(JSON.parse(t), { defaultSessionModel: 'none' });
    if (s === undefined) throw new Error(`a ${a.kube} object did not map to a snapshot`);
    out.push(s);
  }
  return out;
}

function rawObjectBytes(): number {
  const r0 = heapAfterGc();
  const raw = new Map<string, unknown>();
  for (const t of texts) {
    const o = JSON.parse(t) as { metadata: { namespace: string; name: string } };
    raw.set(`${o.metadata.namespace}/${o.metadata.name}`, o);
  }
  const bytes = (heapAfterGc() - r0) / raw.size;
  if (raw.size !== texts.length) throw new Error(`${texts.length - raw.size} objects collided`);
  return bytes;
}

function probe(a: ViewProbeArgs): ViewProbeResult {
  texts = a.kube === undefined ? [] : kubeVariants(a.kube, a.size);
  const h0 = heapAfterGc();
  let snapshots: BackendSnapshot[] | undefined = snapshotsOf(a);
  const h1 = heapAfterGc();
  const now = Date.parse('2025-06-01T00:00:00Z');
  const view = new SandboxView({ now: () => now });
  view.registerDriver('bench');
  view.replace('bench', []);
  for (const s of snapshots) view.apply('bench', { type: 'upsert', snapshot: s });
  // The array of snapshots goes: what stays is what the view holds.
  snapshots = undefined;
  const h2 = heapAfterGc();
  if (view.size !== a.size) throw new Error(`the view holds ${view.size} of ${a.size} sandboxes`);

  const hist = latencies();
  let allowed = 0;
  if (a.ops > 0) {
    const requests = routeRequests(a.size);
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
  }
  const rawObjectBytesPerSandbox = a.kube === undefined ? undefined : rawObjectBytes();
  texts = [];
  return { size: a.size, snapshotBytesPerSandbox: (h1 - h0) / a.size, viewBytesPerSandbox: (h2 - h0) / a.size, rawObjectBytesPerSandbox, latency: summarise(hist), allowed };
}

exitWithParent();
serveIpc({ probe: (args: ViewProbeArgs) => probe(args) });
announceReady({ pid: process.pid });
