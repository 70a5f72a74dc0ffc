import { row, target, type Row, type TargetResult } from './lib/report.js';
import { probeOnce, type Section } from './lib/section.js';
import type { SnapshotMemoryResult } from './lib/snapshot-memory-probe.js';
import type { KubeKind } from './lib/kube-variants.js';

/**
 * 9. Kubernetes snapshots: heap retained per sandbox by the Kubernetes drivers (agent-sandbox and
 * OpenKruise objects shaped like the test fixtures), in a child of its own per kind
 * (snapshot-memory-probe.ts), against the parsed raw objects held the same way.
 */

const KINDS: readonly KubeKind[] = ['agent-sandbox', 'openkruise'];
/** Well under the 6.26 KiB per sandbox OpenKruise's own gateway reports for its whole route entry. */
const MAX_BYTES_PER_SANDBOX = 2048;

export const snapshotMemory: Section = {
  id: 'snapshot-memory',
  title: '9. Kubernetes snapshots (heap per sandbox)',
  estimateSeconds: { quick: 10, full: 20 },
  async run(ctx) {
    const count = ctx.quick ? 10_000 : 25_000;
    const rows: Row[] = [];
    const targets: TargetResult[] = [];
    const results: SnapshotMemoryResult[] = [];
    for (const kind of KINDS) {
      ctx.log(`snapshot-memory: ${count.toLocaleString('en-US')} ${kind} objects`);
      results.push(await probeOnce<SnapshotMemoryResult>(ctx, `snapshot-memory-${kind}`, 'lib/snapshot-memory-probe.js', { kind, count }));
    }
    for (const r of results) {
      rows.push(row(`${r.kind} snapshot`, 'B', r.snapshotBytes, r.rawObjectBytes, 'vs the parsed object in a store'));
      rows.push(row(`${r.kind} snapshot + store entry`, 'B', r.withStoreBytes, r.rawObjectBytes, 'vs the parsed object in a store'));
      targets.push(target(`≤ ${MAX_BYTES_PER_SANDBOX} B heap per ${r.kind} sandbox (snapshot + store entry, after GC)`, r.withStoreBytes <= MAX_BYTES_PER_SANDBOX, `${Math.round(r.withStoreBytes)} B`));
    }
    const notes = [`${count.toLocaleString('en-US')} objects per kind; heap figures are heapUsed after two full GCs, per sandbox`];
    const data = results.map((r) => ({ kind: r.kind, count: r.count, snapshotBytes: Math.round(r.snapshotBytes), withStoreBytes: Math.round(r.withStoreBytes), rawObjectBytes: Math.round(r.rawObjectBytes) }));
    return { baseline: 'the parsed Kubernetes object in the same store', rows, targets, notes, data };
  },
};
