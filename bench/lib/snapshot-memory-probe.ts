import type { BackendSnapshot } from '../../src/domain/sandbox.js';
import { sandboxKey } from '../../src/domain/sandbox.js';
import { mapAgentSandbox } from '../../src/drivers/kubernetes/agent-sandbox-mapping.js';
import { mapOpenKruiseSandbox } from '../../src/drivers/kubernetes/openkruise-mapping.js';
import type { MapOptions } from '../../src/drivers/kubernetes/sandbox-object.js';
import { heapAfterGc } from './heap-after-gc.js';
import { announceReady, exitWithParent, serveIpc } from './ipc.js';
import { kubeVariants, type KubeKind } from './kube-variants.js';

/**
 * The child of the snapshot-memory section (`node --expose-gc`): bytes retained per sandbox by the
 * Kubernetes drivers. `count` objects (JSON text, as a watch delivers them) are parsed and mapped, the raw
 * objects dropped, and the snapshots held in a Map by namespace/name as the driver's store holds them.
 * Heap after two full GCs, before and after, divided by the count. The baseline is the parsed objects
 * themselves, held the same way: what a driver that kept the raw objects would cost.
 */

export interface SnapshotMemoryArgs {
  readonly kind: KubeKind;
  readonly count: number;
}

export interface SnapshotMemoryResult {
  readonly kind: KubeKind;
  readonly count: number;
  /** Heap after GC per sandbox: the snapshots alone, then with the store's Map entry. */
  readonly snapshotBytes: number;
  readonly withStoreBytes: number;
  /** Heap after GC per sandbox of the parsed raw objects in a Map by namespace/name. */
  readonly rawObjectBytes: number;
}

const OPTS: MapOptions = { defaultSessionModel: 'required' };
const MAPPERS: Record<KubeKind, (obj: unknown, opts: MapOptions) => BackendSnapshot | undefined> = {
  'agent-sandbox': mapAgentSandbox,
  openkruise: mapOpenKruiseSandbox,
};

/** The input texts, held here for the whole probe: a local the code no longer reads may be collected early and skew a figure. */
let texts: string[] = [];

function probe(a: SnapshotMemoryArgs): SnapshotMemoryResult {
  texts = kubeVariants(a.kind, a.count);
  const map = MAPPERS[a.kind];

  const h0 = heapAfterGc();
  const held: BackendSnapshot[] = [];
  for (const t of texts) {
    const s = map(JSON.parse(t), OPTS);
    if (s === undefined) throw new Error(`a ${a.kind} variant did not map to a snapshot`);
    held.push(s);
  }
  const h1 = heapAfterGc();
  const store = new Map<string, BackendSnapshot>();
  for (const s of held) store.set(sandboxKey(s.namespace, s.name), s);
  const h2 = heapAfterGc();
  if (store.size !== a.count) throw new Error(`${a.count - store.size} variants collided in the store`);
  store.clear();
  held.length = 0;

  const r0 = heapAfterGc();
  const raw = new Map<string, unknown>();
  for (const t of texts) {
    const o = JSON.parse(t) as { metadata: { namespace: string; name: string } };
    raw.set(sandboxKey(o.metadata.namespace, o.metadata.name), o);
  }
  const r1 = heapAfterGc();
  if (raw.size !== a.count) throw new Error(`${a.count - raw.size} raw objects collided`);
  texts = [];
  return { kind: a.kind, count: a.count, snapshotBytes: (h1 - h0) / a.count, withStoreBytes: (h2 - h0) / a.count, rawObjectBytes: (r1 - r0) / a.count };
}

exitWithParent();
serveIpc({ probe: (args: SnapshotMemoryArgs) => probe(args) });
announceReady({ pid: process.pid });
