import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { ROOT } from './machine.js';

/** Distinct objects shaped like a fixture under test/fixtures/kubernetes, as JSON text, the way a watch delivers them. */

interface KubeObject {
  metadata: Record<string, unknown>;
  status?: unknown;
}

export type KubeKind = 'agent-sandbox' | 'openkruise';

function fixture(file: KubeKind, name: string): KubeObject {
  const text = readFileSync(join(ROOT, 'test', 'fixtures', 'kubernetes', `${file}.yaml`), 'utf8');
  for (const doc of parseAllDocuments(text)) {
    const o = doc.toJS() as KubeObject;
    if (o.metadata.name === name) return o;
  }
  throw new Error(`no fixture ${name} in ${file}.yaml`);
}

export function variantIp(i: number): string {
  return `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
}

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

export function kubeVariants(kind: KubeKind, n: number): string[] {
  if (kind === 'agent-sandbox') {
    return variants(fixture(kind, 'ready'), n, (o, i) => {
      const status = o.status as Record<string, unknown>;
      status.podIPs = [variantIp(i)];
      status.serviceFQDN = `${String(o.metadata.name)}.${String(o.metadata.namespace)}.svc.cluster.local`;
    });
  }
  return variants(fixture(kind, 'running'), n, (o, i) => {
    (o.metadata.labels as Record<string, string>)['agents.kruise.io/sandbox-id'] = kruiseId(i);
    const podInfo = (o.status as Record<string, unknown>).podInfo as Record<string, unknown>;
    podInfo.podIP = variantIp(i);
    podInfo.podUID = `3c0e7b5a-${(i % 65536).toString(16).padStart(4, '0')}-4d1e-9b0f-${i.toString(16).padStart(12, '0')}`;
  });
}

export function kruiseId(i: number): string {
  return `e2b-${i.toString(36).padStart(8, '0')}`;
}
