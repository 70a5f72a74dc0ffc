import { describe, expect, it } from 'vitest';
import type { SandboxAccess } from '../../src/domain/access-policy.js';
import type { SandgateError } from '../../src/domain/errors.js';
import { snapshotFromWire, snapshotToWire } from '../../src/drivers/grpc/sandbox-codec.js';
import { sandboxDriverService } from '../../src/drivers/grpc/driver-proto.js';
import { decodeWatchEvent } from '../../src/drivers/grpc/watch-event-decoder.js';
import { ANNOTATION_ACCESS, readAnnotations, type Identity } from '../../src/drivers/kubernetes/sandbox-object.js';
import { snapshot } from '../helpers/snapshots.js';

/** A sandbox's own access policy as each remote source reads it: the Kubernetes annotation, the remote driver's field. */

const JWT: SandboxAccess = {
  default: [{ kind: 'keys' }],
  ports: {
    3000: [{ kind: 'public' }],
    9000: [{ kind: 'jwt', issuer: 'https://k8s', audience: 'sandgate', claims: [{ claim: 'kubernetes.io.serviceaccount.name', values: ['agent'] }] }],
  },
};

describe('access policy: Kubernetes annotation', () => {
  const identity = (annotations: Record<string, string>): Identity => ({
    namespace: 'team-a', name: 'web', uid: 'u1', resourceVersion: '1', generation: 1, createdAt: undefined, deleting: false, labels: undefined, annotations,
  });
  const read = (annotations: Record<string, string>) => {
    const warnings: string[] = [];
    const a = readAnnotations(identity(annotations), { defaultSessionModel: 'none', onWarning: (m) => warnings.push(m) });
    return { access: a.access, publicPorts: a.publicPorts, warnings };
  };

  it('reads sandgate.dev/access (YAML or JSON); its public ports are public ports', () => {
    const r = read({ [ANNOTATION_ACCESS]: 'default: [keys]\nports:\n  3000: public\n  9000: [{jwt: {issuer: "https://k8s", audience: sandgate, claims: {kubernetes.io.serviceaccount.name: agent}}}]' });
    expect(r).toEqual({ access: JWT, publicPorts: [3000], warnings: [] });
    expect(read({ [ANNOTATION_ACCESS]: '[{"jwt": {"issuer": "https://k8s"}}]' }).access).toEqual({ default: [{ kind: 'jwt', issuer: 'https://k8s', audience: undefined, claims: [] }] });
  });

  it.each<[string, string, Record<string, string>?]>([
    ['an unknown rule', 'oauth'],
    ['public as a default', '[public]'],
    ['a public port outside the ports annotation', '{ports: {3000: public}}', { 'sandgate.dev/ports': '8080' }],
    ['not YAML', '{ports: ['],
  ])('fails closed on %s: a warning, and no credential admitted', (_n, value, more: Record<string, string> = {}) => {
    const r = read({ [ANNOTATION_ACCESS]: value, ...more });
    expect(r.access).toEqual({ default: [] });
    expect(r.publicPorts).toBeUndefined();
    expect(r.warnings).toEqual([expect.stringMatching(/team-a\/web: annotation sandgate\.dev\/access is not a valid access policy/)]);
  });
});

describe('access policy: remote driver protocol', () => {
  it('round-trips access (field 23), through proto-loader and the wire decoder alike', () => {
    const s = snapshot({ ports: [3000, 9000], access: JWT, publicPorts: [3000] });
    const wire = snapshotToWire(s);
    expect(JSON.parse(wire.access!)).toEqual({ default: ['keys'], ports: { 3000: ['public'], 9000: [{ jwt: { issuer: 'https://k8s', audience: 'sandgate', claims: { 'kubernetes.io.serviceaccount.name': ['agent'] } } }] } });
    expect(snapshotFromWire(wire)).toMatchObject({ access: JWT, publicPorts: [3000] });
    expect(snapshotFromWire(snapshotToWire(snapshot())).access).toBeUndefined();
    const bytes = sandboxDriverService().service.WatchSandboxes!.responseSerialize({ upserted: wire });
    expect(decodeWatchEvent(bytes).upserted?.access).toBe(wire.access);
  });

  it.each([
    ['not JSON', '{'],
    ['a bad rule', '{"default": ["oauth"]}'],
    ['a public port outside ports', '{"ports": {"8080": "public"}}'],
  ])('refuses %s as driver_message_invalid naming the field', (_n, access) => {
    let err: unknown;
    try {
      snapshotFromWire({ ...snapshotToWire(snapshot({ ports: [3000] })), access });
    } catch (e) {
      err = e;
    }
    expect((err as SandgateError).code).toBe('driver_message_invalid');
    expect((err as Error).message).toContain('access');
  });
});
