import { describe, expect, it } from 'vitest';
import { kruiseId, kubeVariants, variantIp } from '../../bench/lib/kube-variants.js';
import { sandboxKey, type BackendSnapshot } from '../../src/domain/sandbox.js';
import { mapAgentSandbox } from '../../src/drivers/kubernetes/agent-sandbox-mapping.js';
import { mapOpenKruiseSandbox } from '../../src/drivers/kubernetes/openkruise-mapping.js';

/**
 * The objects whose views the benchmark's scale section measures (bench/lib/view-probe.ts) map to what they
 * should: every one to a ready snapshot of its own sandbox, with its own address (and, for OpenKruise,
 * its own sandbox id). The heap figures themselves live in the benchmark, not here.
 */

const N = 500;

function mapAll(kind: 'agent-sandbox' | 'openkruise', map: (obj: unknown, opts: { defaultSessionModel: 'required' }) => BackendSnapshot | undefined): BackendSnapshot[] {
  return kubeVariants(kind, N).map((t) => {
    const s = map(JSON.parse(t), { defaultSessionModel: 'required' });
    expect(s).toBeDefined();
    return s!;
  });
}

describe('Kubernetes object variants (the scale benchmark input)', () => {
  it.each([
    ['agent-sandbox', mapAgentSandbox],
    ['openkruise', mapOpenKruiseSandbox],
  ] as const)('%s: every variant maps to a ready snapshot of its own sandbox and address', (kind, map) => {
    const snapshots = mapAll(kind, map);
    expect(new Set(snapshots.map((s) => sandboxKey(s.namespace, s.name))).size).toBe(N);
    snapshots.forEach((s, i) => {
      expect(s.state).toBe('ready');
      expect(s.endpoint).toEqual({ kind: 'address', addresses: [variantIp(i)] });
      if (kind === 'openkruise') expect(s.ids).toContain(kruiseId(i));
    });
  });
});
