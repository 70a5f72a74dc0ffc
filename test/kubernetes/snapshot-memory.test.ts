import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import type { BackendSnapshot } from '../../src/domain/sandbox.js';
import type { MapOptions } from '../../src/drivers/kubernetes/sandbox-object.js';
import { mapAgentSandbox } from '../../src/drivers/kubernetes/agent-sandbox-mapping.js';
import { mapOpenKruiseSandbox } from '../../src/drivers/kubernetes/openkruise-mapping.js';
import { fixture, loadKubeFixtures, type KubeObject } from '../helpers/fake-kube-api.js';

/**
 * Bytes retained per sandbox by the Kubernetes drivers: 10,000 objects (as JSON text, the way they
 * arrive) are parsed and mapped, the raw objects dropped, and the snapshots held in the driver's store
 * (a Map by namespace/name). Heap after a forced GC minus heap before, divided by the count. Set
 * SANDGATE_PRINT_MEMORY=1 to print the figures (docs/kubernetes-driver.md quotes them).
 */

const N = 10_000;
const OPTS: MapOptions = { defaultSessionModel: 'required' };

function forceGc(): () => void {
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
}

/** N distinct objects shaped like `base`: own name, uid, resourceVersion, pod IP and sandbox id. */
function variants(base: KubeObject, n: number, vary: (o: KubeObject, i: number) => void): string[] {
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const o = structuredClone(base);
    o.metadata.name = `sandbox-${i.toString(36).padStart(6, '0')}`;
    o.metadata.namespace = `team-${i % 20}`;
    o.metadata.uid = `6f1c2a8e-${(i % 65536).toString(16).padStart(4, '0')}-4b7e-9a51-${i.toString(16).padStart(12, '0')}`;
    o.metadata.resourceVersion = String(1_000_000 + i);
    vary(o, i);
    out.push(JSON.stringify(o));
  }
  return out;
}

function ip(i: number): string {
  return `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
}

function measure(texts: readonly string[], map: (obj: unknown, opts: MapOptions) => BackendSnapshot | undefined): { snapshot: number; withStore: number } {
  const gc = forceGc();
  gc();
  gc();
  const before = process.memoryUsage().heapUsed;
  const held: BackendSnapshot[] = [];
  for (const t of texts) held.push(map(JSON.parse(t), OPTS)!);
  gc();
  gc();
  const mid = process.memoryUsage().heapUsed;
  const store = new Map<string, BackendSnapshot>();
  for (const s of held) store.set(`${s.namespace}/${s.name}`, s);
  gc();
  gc();
  const after = process.memoryUsage().heapUsed;
  expect(store.size).toBe(texts.length);
  return { snapshot: (mid - before) / texts.length, withStore: (after - before) / texts.length };
}

describe('bytes retained per sandbox', () => {
  it('agent-sandbox and OpenKruise snapshots stay small', () => {
    const agentBase = fixture(loadKubeFixtures('agent-sandbox'), 'ready');
    const agentTexts = variants(agentBase, N, (o, i) => {
      (o.status as Record<string, unknown>).podIPs = [ip(i)];
      (o.status as Record<string, unknown>).serviceFQDN = `${String(o.metadata.name)}.${String(o.metadata.namespace)}.svc.cluster.local`;
    });
    const kruiseBase = fixture(loadKubeFixtures('openkruise'), 'running');
    const kruiseTexts = variants(kruiseBase, N, (o, i) => {
      (o.metadata.labels as Record<string, string>)['agents.kruise.io/sandbox-id'] = `e2b-${i.toString(36).padStart(8, '0')}`;
      const podInfo = (o.status as Record<string, unknown>).podInfo as Record<string, unknown>;
      podInfo.podIP = ip(i);
      podInfo.podUID = `3c0e7b5a-${(i % 65536).toString(16).padStart(4, '0')}-4d1e-9b0f-${i.toString(16).padStart(12, '0')}`;
    });
    const agent = measure(agentTexts, mapAgentSandbox);
    const kruise = measure(kruiseTexts, mapOpenKruiseSandbox);
    if (process.env.SANDGATE_PRINT_MEMORY === '1') {
      process.stderr.write(
        `bytes per sandbox (n=${N}): agent-sandbox snapshot ${agent.snapshot.toFixed(0)}, +store ${agent.withStore.toFixed(0)}; ` +
          `OpenKruise snapshot ${kruise.snapshot.toFixed(0)}, +store ${kruise.withStore.toFixed(0)}\n`,
      );
    }
    // Budget: well under the 6.26 KiB per sandbox OpenKruise's own gateway reports for its whole route entry.
    for (const m of [agent, kruise]) {
      expect(m.snapshot).toBeGreaterThan(0);
      expect(m.withStore).toBeLessThan(2048);
    }
  });
});
