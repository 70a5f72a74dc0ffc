import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DEMO_SANDBOXES } from '../../src/demo/demo.js';
import { SandgateError } from '../../src/domain/errors.js';
import { expectSandgateError } from '../helpers/sandgate-error.js';
import type { BackendSnapshot, DriverEvent } from '../../src/domain/sandbox.js';
import { FileDriver, parseSandboxesFile } from '../../src/drivers/file/file-driver.js';

class Sink {
  lists: BackendSnapshot[][] = [];
  events: DriverEvent[] = [];
  errors: Error[] = [];
  private waiters: (() => void)[] = [];
  replace(s: readonly BackendSnapshot[]) {
    this.lists.push([...s]);
    this.wake();
  }
  apply(e: DriverEvent) {
    this.events.push(e);
  }
  error(e: Error) {
    this.errors.push(e);
    this.wake();
  }
  next(): Promise<void> {
    return new Promise((r) => this.waiters.push(r));
  }
  private wake() {
    for (const w of this.waiters.splice(0)) w();
  }
}

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), 'sandgate-file-'));
  dirs.push(d);
  return d;
}

describe('sandboxes file format', () => {
  it('parses the documented format (the demo file)', () => {
    const list = parseSandboxesFile(readFileSync(DEMO_SANDBOXES, 'utf8'), DEMO_SANDBOXES);
    const web = list.find((s) => s.name === 'web')!;
    expect(web).toMatchObject({
      namespace: 'team-a',
      ids: ['sbx-web-123'],
      endpoint: { kind: 'address', addresses: ['127.0.0.2'] },
      ports: [8000, 49983],
      state: 'ready',
      sessionModel: 'none',
    });
  });

  it('parses JSON too, with defaults (state ready, supervisor required, relay when no address)', () => {
    const [s] = parseSandboxesFile(JSON.stringify({ sandboxes: [{ namespace: 'a', name: 'b' }] }), 'x.json');
    expect(s).toMatchObject({ state: 'ready', sessionModel: 'required', endpoint: { kind: 'relay' }, ports: undefined });
  });

  it('reads envdAccessToken (the in-sandbox daemon\'s token) apart from accessToken (the traffic token)', () => {
    const [s] = parseSandboxesFile('sandboxes:\n  - {namespace: a, name: b, accessToken: t1, envdAccessToken: e1}');
    expect(s).toMatchObject({ accessToken: 't1', envdAccessToken: 'e1' });
  });

  it('reads {port, protocol} entries: h2c ports are listed apart, and every entry is in the allow-list', () => {
    const [s] = parseSandboxesFile('sandboxes:\n  - {namespace: a, name: b, ports: [8000, {port: 50051, protocol: h2c}, {port: 9000, protocol: http}, {port: 9001}]}');
    expect(s).toMatchObject({ ports: [8000, 50051, 9000, 9001], h2cPorts: [50051] });
    const [plain] = parseSandboxesFile('sandboxes:\n  - {namespace: a, name: b, ports: [8000]}');
    expect(plain!.h2cPorts).toBeUndefined();
  });

  it('reads {port, protocol: tcp}: TCP ports are listed apart, and every entry is in the allow-list', () => {
    const [s] = parseSandboxesFile('sandboxes:\n  - {namespace: a, name: b, ports: [8000, {port: 22, protocol: tcp}, {port: 5432, protocol: tcp}]}');
    expect(s).toMatchObject({ ports: [8000, 22, 5432], tcpPorts: [22, 5432] });
    expect(s!.h2cPorts).toBeUndefined();
    const [plain] = parseSandboxesFile('sandboxes:\n  - {namespace: a, name: b, ports: [8000]}');
    expect(plain!.tcpPorts).toBeUndefined();
  });

  it.each([
    ['not a list', 'sandboxes: 3', /top-level "sandboxes" list/],
    ['unknown protocol', 'sandboxes:\n  - {namespace: a, name: b, ports: [{port: 50051, protocol: h2}]}', /ports\[0\]\.protocol must be http, h2c or tcp/],
    ['a port both tcp and h2c', 'sandboxes:\n  - {namespace: a, name: b, ports: [{port: 22, protocol: tcp}, {port: 22, protocol: h2c}]}', /port 22 with two protocols/],
    ['a port both http and tcp', 'sandboxes:\n  - {namespace: a, name: b, ports: [22, {port: 22, protocol: tcp}]}', /port 22 with two protocols/],
    ['port mapping without a port', 'sandboxes:\n  - {namespace: a, name: b, ports: [{protocol: h2c}]}', /ports\[0\]\.port must be a port number/],
    ['unknown key in a port mapping', 'sandboxes:\n  - {namespace: a, name: b, ports: [{port: 1, proto: h2c}]}', /unknown key "proto"/],
    ['port with two protocols', 'sandboxes:\n  - {namespace: a, name: b, ports: [50051, {port: 50051, protocol: h2c}]}', /port 50051 with two protocols/],
    ['port as text', 'sandboxes:\n  - {namespace: a, name: b, ports: ["80"]}', /ports\[0\] must be a port number/],
    ['unknown key', 'sandboxes:\n  - {namespace: a, name: b, adress: 1.2.3.4}', /unknown key "adress"/],
    ['bad namespace', 'sandboxes:\n  - {namespace: A, name: b}', /namespace "A"/],
    ['bad address', 'sandboxes:\n  - {namespace: a, name: b, address: example.com}', /must be an IP/],
    ['bad port', 'sandboxes:\n  - {namespace: a, name: b, ports: [0]}', /ports/],
    ['bad state', 'sandboxes:\n  - {namespace: a, name: b, state: running}', /state must be one of/],
    ['duplicate', 'sandboxes:\n  - {namespace: a, name: b}\n  - {namespace: a, name: b}', /listed twice/],
    ['duplicate id', 'sandboxes:\n  - {namespace: a, name: b, id: x}\n  - {namespace: a, name: c, id: x}', /used twice/],
    ['yaml syntax', 'sandboxes: [', /does not parse/],
    ['empty envd token', 'sandboxes:\n  - {namespace: a, name: b, envdAccessToken: ""}', /envdAccessToken must not be empty/],
  ])('rejects %s with sandboxes_file_invalid', (_n, text, pattern) => {
    expectSandgateError(() => parseSandboxesFile(text), 'sandboxes_file_invalid', pattern);
  });
});

describe('FileDriver', () => {
  it('loads, reloads on change, keeps the last good set on a bad file, and keeps uids stable', async () => {
    const dir = tmp();
    const path = join(dir, 'sandboxes.yaml');
    writeFileSync(path, 'sandboxes:\n  - {namespace: a, name: web, address: 127.0.0.2}\n');
    const driver = new FileDriver(path);
    const sink = new Sink();
    await driver.start(sink);
    try {
      expect(sink.lists).toHaveLength(1);
      const first = sink.lists[0]![0]!;

      let next = sink.next();
      writeFileSync(path, 'sandboxes: [oops');
      await next;
      expect(sink.errors.at(-1)).toBeInstanceOf(SandgateError);
      expect(sink.lists).toHaveLength(1);

      next = sink.next();
      // Replace atomically, as editors and Kubernetes config maps do.
      writeFileSync(join(dir, 'tmp'), 'sandboxes:\n  - {namespace: a, name: web, address: 127.0.0.2, state: paused}\n  - {namespace: a, name: api, address: 127.0.0.3}\n');
      renameSync(join(dir, 'tmp'), path);
      await next;
      const last = sink.lists.at(-1)!;
      expect(last.map((s) => s.name).sort()).toEqual(['api', 'web']);
      const web = last.find((s) => s.name === 'web')!;
      expect(web.uid).toBe(first.uid);
      expect(web.state).toBe('paused');
      expect(Number(web.resourceVersion)).toBeGreaterThan(Number(first.resourceVersion));
    } finally {
      await driver.stop();
    }
  });

  it('a reload hands over an unchanged entry as the same snapshot, and a new one for any change, however deep', async () => {
    const dir = tmp();
    const path = join(dir, 'sandboxes.yaml');
    const file = (apiPorts: string) =>
      `sandboxes:\n  - {namespace: a, name: web, address: 127.0.0.2, ports: [80]}\n  - {namespace: a, name: api, address: 127.0.0.3, ports: [${apiPorts}]}\n`;
    writeFileSync(path, file('80, 443'));
    const driver = new FileDriver(path);
    const sink = new Sink();
    await driver.start(sink);
    try {
      const before = new Map(sink.lists[0]!.map((s) => [s.name, s]));
      const next = sink.next();
      writeFileSync(join(dir, 'tmp'), file('80, 444'));
      renameSync(join(dir, 'tmp'), path);
      await next;
      const after = new Map(sink.lists.at(-1)!.map((s) => [s.name, s]));
      expect(after.get('web')).toBe(before.get('web'));
      expect(after.get('web')!.resourceVersion).toBe('1');
      const api = after.get('api')!;
      expect(api).not.toBe(before.get('api'));
      expect(api.ports).toEqual([80, 444]);
      expect(api.uid).toBe(before.get('api')!.uid);
      expect(api.resourceVersion).toBe('2');
    } finally {
      await driver.stop();
    }
  });

  it('hands over every field an entry sets, plus its uid and resourceVersion', async () => {
    const dir = tmp();
    const path = join(dir, 'sandboxes.yaml');
    const entry = {
      namespace: 'a', name: 'web', ids: ['sbx-web'], address: '127.0.0.2', ports: [8000, 49983], state: 'paused', supervisor: 'none', reason: 'Paused',
      message: 'paused by its owner', instanceId: 'pod-1', shutdownTime: '2030-01-01T00:00:00Z', accessToken: 'tok', envdAccessToken: 'envd', resume: 'on-traffic',
    };
    writeFileSync(path, JSON.stringify({ sandboxes: [entry] }));
    const [parsed] = parseSandboxesFile(readFileSync(path, 'utf8'), path);
    const driver = new FileDriver(path);
    const sink = new Sink();
    await driver.start(sink);
    try {
      const [s] = sink.lists[0]!;
      expect(s).toEqual({ ...parsed, uid: s!.uid, resourceVersion: '1' });
      expect(s!.uid).toMatch(/^file-/);
    } finally {
      await driver.stop();
    }
  });

  it('a missing file at start is reported and counts as an empty, synced list', async () => {
    const driver = new FileDriver(join(tmp(), 'missing.yaml'));
    const sink = new Sink();
    await driver.start(sink);
    await driver.stop();
    expect(sink.errors[0]?.message).toMatch(/cannot read/);
    expect(sink.lists).toEqual([[]]);
  });
});
