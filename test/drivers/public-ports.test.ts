import { describe, expect, it } from 'vitest';
import { SandgateError } from '../../src/domain/errors.js';
import { expectSandgateError } from '../helpers/sandgate-error.js';
import { parseSandboxesFile } from '../../src/drivers/file/file-driver.js';
import { snapshotFromWire, snapshotToWire } from '../../src/drivers/grpc/sandbox-codec.js';
import { ANNOTATION_PUBLIC_PORTS, readAnnotations, type Identity } from '../../src/drivers/kubernetes/sandbox-object.js';
import { snapshot } from '../helpers/snapshots.js';

/** Public ports as each driver reads them: the file's `publicPorts`, the annotation, the remote driver's field. */

describe('public ports: file driver', () => {
  it('reads publicPorts, once each', () => {
    const [s] = parseSandboxesFile('sandboxes:\n  - {namespace: a, name: b, ports: [3000, 8080, 9000], publicPorts: [3000, 8080, 3000]}');
    expect(s).toMatchObject({ ports: [3000, 8080, 9000], publicPorts: [3000, 8080] });
    const [any] = parseSandboxesFile('sandboxes:\n  - {namespace: a, name: b, publicPorts: [3000]}');
    expect(any).toMatchObject({ ports: undefined, publicPorts: [3000] });
    const [none] = parseSandboxesFile('sandboxes:\n  - {namespace: a, name: b, publicPorts: []}');
    expect(none!.publicPorts).toBeUndefined();
  });

  it.each([
    ['a port that is not a number', 'publicPorts: ["3000"]', /publicPorts must be a list of port numbers/],
    ['port 0', 'publicPorts: [0]', /publicPorts must be a list of port numbers/],
    ['not a list', 'publicPorts: 3000', /publicPorts must be a list of port numbers/],
    ['a port outside the allow-list', 'ports: [8080], publicPorts: [3000]', /publicPorts lists port 3000, which is not in ports/],
  ])('rejects %s with sandboxes_file_invalid', (_n, fields, pattern) => {
    expectSandgateError(() => parseSandboxesFile(`sandboxes:\n  - {namespace: a, name: b, ${fields}}`), 'sandboxes_file_invalid', pattern);
  });
});

describe('public ports: Kubernetes annotation', () => {
  const identity = (annotations: Record<string, string>): Identity => ({
    namespace: 'team-a', name: 'web', uid: 'u1', resourceVersion: '1', generation: 1, createdAt: undefined, deleting: false, labels: undefined, annotations,
  });
  const read = (annotations: Record<string, string>) => {
    const warnings: string[] = [];
    const a = readAnnotations(identity(annotations), { defaultSessionModel: 'none', onWarning: (m) => warnings.push(m) });
    return { publicPorts: a.publicPorts, warnings };
  };

  it('reads sandgate.dev/public-ports', () => {
    expect(read({ [ANNOTATION_PUBLIC_PORTS]: '3000, 8080,3000' })).toEqual({ publicPorts: [3000, 8080], warnings: [] });
    expect(read({ [ANNOTATION_PUBLIC_PORTS]: '3000', 'sandgate.dev/ports': '3000,9000' })).toEqual({ publicPorts: [3000], warnings: [] });
    expect(read({})).toEqual({ publicPorts: undefined, warnings: [] });
  });

  it.each([
    ['a word', 'all'],
    ['an empty value', ''],
    ['a port out of range', '3000,70000'],
    ['one bad entry among good ones', '3000,x'],
  ])('ignores %s with a warning: no port is public', (_n, value) => {
    const r = read({ [ANNOTATION_PUBLIC_PORTS]: value });
    expect(r.publicPorts).toBeUndefined();
    expect(r.warnings).toEqual([expect.stringMatching(/team-a\/web: annotation sandgate\.dev\/public-ports=.* ignored \(no port is public\)/)]);
  });

  it('ignores a public port the ports annotation does not allow', () => {
    const r = read({ [ANNOTATION_PUBLIC_PORTS]: '3000', 'sandgate.dev/ports': '8080' });
    expect(r.publicPorts).toBeUndefined();
    expect(r.warnings.length).toBe(1);
  });
});

describe('public ports: remote driver protocol', () => {
  it('round-trips public_ports', () => {
    const s = snapshot({ ports: [3000, 9000], publicPorts: [3000] });
    expect(snapshotToWire(s).public_ports).toEqual([3000]);
    expect(snapshotFromWire(snapshotToWire(s)).publicPorts).toEqual([3000]);
    expect(snapshotFromWire(snapshotToWire(snapshot())).publicPorts).toBeUndefined();
  });

  it.each([
    ['port 0', [3000, 9000], [0], 'public_ports[0]'],
    ['a port outside ports', [3000], [9000], 'public_ports[0]'],
  ])('refuses %s as driver_message_invalid naming the field', (_n, ports, publicPorts, field) => {
    const wire = { ...snapshotToWire(snapshot({ ports })), public_ports: publicPorts };
    let err: unknown;
    try {
      snapshotFromWire(wire);
    } catch (e) {
      err = e;
    }
    expect((err as SandgateError).code).toBe('driver_message_invalid');
    expect((err as Error).message).toContain(field);
  });
});
