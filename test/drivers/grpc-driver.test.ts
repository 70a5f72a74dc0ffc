import { afterEach, describe, expect, it, vi } from 'vitest';
import { ExampleDriver } from '../../examples/driver/example-driver.js';
import { STYLE_MAPPINGS, type DockerContainer } from '../../examples/driver/styles.js';
import { SandgateError } from '../../src/domain/errors.js';
import type { BackendSnapshot } from '../../src/domain/sandbox.js';
import { DriverError } from '../../src/drivers/grpc/driver-error.js';
import type { WireSandbox, WireWatchEvent } from '../../src/drivers/grpc/driver-proto.js';
import { GrpcDriver, parseGrpcDriverUrl } from '../../src/drivers/grpc/grpc-driver.js';
import { backoffDelay } from '../../src/lib/backoff.js';
import { deletionFromWire, snapshotFromWire, snapshotToWire } from '../../src/drivers/grpc/sandbox-codec.js';
import { ViewSink } from '../helpers/view-sink.js';

function container(name: string, status: DockerContainer['State']['Status'], ip = '10.0.0.2', id = 'c-' + name): DockerContainer {
  return {
    Id: id,
    Name: '/' + name,
    Config: { Labels: { 'sandgate.dev/namespace': 'team-a', 'sandgate.dev/name': name, 'sandgate.dev/sandbox-id': 'sbx-' + name } },
    State: { Status: status, ExitCode: 0, Error: '', StartedAt: '2030-01-01T00:00:00Z' },
    NetworkSettings: { IPAddress: ip },
  };
}

/** Fails with a clear message instead of the test's timeout when `p` hangs. */
async function within<T>(p: Promise<T>, what: string, ms = 5_000): Promise<T> {
  let guard: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    guard = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(guard);
  }
}

const FAST = { initialMs: 10, maxMs: 50 };
const open: { stop(): Promise<void> }[] = [];

afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.stop();
});

async function setup(records: DockerContainer[] = []): Promise<{ backend: ExampleDriver<'docker'>; driver: GrpcDriver; sink: ViewSink }> {
  const backend = await ExampleDriver.start({ style: 'docker' });
  open.push({ stop: () => backend.close() });
  for (const r of records) backend.set(r);
  const driver = new GrpcDriver({ name: 'docker', address: backend.address, backoff: FAST });
  const sink = new ViewSink(driver.id);
  open.push(driver);
  await driver.start(sink);
  await sink.until(() => sink.replaces.length === 1, 'the initial list');
  return { backend, driver, sink };
}

describe('GrpcDriver', () => {
  it('turns the initial list into one replace() and marks the driver synced', async () => {
    const { driver, sink } = await setup([container('web', 'running'), container('db', 'paused', '10.0.0.3')]);
    expect(driver.id).toBe('grpc/docker');
    expect(sink.view.synced).toBe(true);
    expect(sink.replaces[0]!.map((s) => s.name).sort()).toEqual(['db', 'web']);
    expect(sink.view.get('team-a', 'web')?.snapshot).toMatchObject({ state: 'ready', uid: 'c-web', ids: ['sbx-web'], endpoint: { kind: 'address', addresses: ['10.0.0.2'] } });
    expect(sink.view.get('team-a', 'db')?.status.phase).toBe('Paused');
    expect(sink.errors).toEqual([]);
  });

  it('syncs an empty backend too (an empty list is a list)', async () => {
    const { sink } = await setup();
    expect(sink.replaces).toEqual([[]]);
    expect(sink.view.synced).toBe(true);
  });

  it('applies events in the order the driver sent them', async () => {
    const { backend, sink } = await setup([container('db', 'running')]);
    const a1 = backend.set(container('web', 'created'));
    const a2 = backend.set(container('web', 'running'));
    backend.delete('team-a', 'db');
    const a3 = backend.set(container('web', 'paused'));
    await sink.until(() => sink.events.length === 4, 'four events');
    expect(sink.events.map((e) => (e.type === 'upsert' ? `upsert ${e.snapshot.name} ${e.snapshot.state} ${e.snapshot.resourceVersion}` : `delete ${e.name}`))).toEqual([
      `upsert web starting ${a1.resourceVersion}`,
      `upsert web ready ${a2.resourceVersion}`,
      'delete db',
      `upsert web paused ${a3.resourceVersion}`,
    ]);
    expect(sink.view.get('team-a', 'db')).toBeUndefined();
    expect(sink.view.get('team-a', 'web')?.snapshot.state).toBe('paused');
  });

  it('asks for batches, reads the initial list in batches, and applies a batch in order, dropping only its invalid event', async () => {
    const many = Array.from({ length: 1200 }, (_, i) => container(`s${i}`, 'running', `10.1.${i >> 8}.${i & 255}`));
    const { backend, sink } = await setup(many);
    expect(backend.watchRequests.map((r) => r.accepts_batches)).toEqual([true]);
    // 1,201 events (1,200 snapshots and synced) arrived as three batches and made one list.
    expect(sink.replaces.length).toBe(1);
    expect(sink.replaces[0]!.length).toBe(1200);
    const web = snapshotToWire(backend.set(container('s0', 'paused', '10.1.0.0')));
    await sink.until(() => sink.events.length === 1, 'the single upsert');
    backend.sendRaw({
      batch: {
        events: [
          { upserted: { ...web, state: 'BACKEND_STATE_STARTING', resource_version: String(Number(web.resource_version) + 1) } },
          { upserted: { ...web, namespace: 'Not_A_Label' } },
          { deleted: { namespace: 'team-a', name: 's1', uid: 'c-s1', resource_version: String(Number(web.resource_version) + 2) } },
          { upserted: { ...web, state: 'BACKEND_STATE_READY', resource_version: String(Number(web.resource_version) + 3) } },
        ],
      },
    });
    await sink.until(() => sink.events.length === 4, 'the three valid events of the batch');
    expect(sink.events.slice(1).map((e) => (e.type === 'upsert' ? `upsert ${e.snapshot.name} ${e.snapshot.state}` : `delete ${e.name}`))).toEqual(['upsert s0 starting', 'delete s1', 'upsert s0 ready']);
    expect(sink.errors.map((e) => (e as DriverError).field)).toEqual(['upserted.namespace']);
    expect(sink.errors[0]!.message).toContain('event dropped');
    expect(sink.view.get('team-a', 's1')).toBeUndefined();
    expect(sink.view.get('team-a', 's0')?.snapshot.state).toBe('ready');
  });

  it('reconnects after the driver process restarts and resyncs: a sandbox deleted meanwhile disappears', async () => {
    const { backend, driver, sink } = await setup([container('web', 'running'), container('gone', 'running', '10.0.0.9')]);
    expect(sink.view.size).toBe(2);
    await backend.restart(() => {
      backend.delete('team-a', 'gone');
      backend.set(container('web', 'paused'));
      backend.set(container('new', 'created', '10.0.0.4'));
    });
    await sink.until(() => sink.replaces.length === 2, 'the relist after reconnecting');
    expect(driver.streamsOpened).toBeGreaterThanOrEqual(2);
    expect(sink.view.get('team-a', 'gone')).toBeUndefined();
    expect(sink.view.get('team-a', 'web')?.snapshot.state).toBe('paused');
    expect(sink.view.get('team-a', 'new')?.snapshot.state).toBe('starting');
    expect(sink.errors.length).toBeGreaterThan(0);
    expect(sink.errors.every((e) => e instanceof DriverError && e.code === 'driver_unavailable')).toBe(true);
    // The new stream carries on with incremental events.
    backend.set(container('new', 'running', '10.0.0.4'));
    await sink.until(() => sink.view.get('team-a', 'new')?.snapshot.state === 'ready', 'an event on the new stream');
  });

  it('starts while the driver is down, reports it, and syncs once the driver comes up', async () => {
    const backend = await ExampleDriver.start({ style: 'docker' });
    open.push({ stop: () => backend.close() });
    await backend.close();
    backend.set(container('web', 'running'));
    const driver = new GrpcDriver({ name: 'late', address: backend.address, backoff: FAST });
    const sink = new ViewSink(driver.id);
    open.push(driver);
    await driver.start(sink);
    await sink.until(() => sink.errors.length >= 2, 'failed connection attempts');
    expect(sink.view.synced).toBe(false);
    await backend.restart();
    await sink.until(() => sink.view.synced, 'the first list');
    expect(sink.view.get('team-a', 'web')?.snapshot.state).toBe('ready');
  });

  describe('rejects malformed messages with sink.error and no state change', () => {
    const good: WireSandbox = snapshotToWire({
      namespace: 'team-a',
      name: 'web',
      uid: 'u1',
      resourceVersion: '5',
      instanceId: 'i1',
      ids: ['sbx-web'],
      state: 'ready',
      conditions: [{ type: 'Ready', status: 'True', reason: 'ContainerRunning', message: '' }],
      endpoint: { kind: 'address', addresses: ['10.0.0.2'] },
      sessionModel: 'required',
    });
    const cases: { name: string; event: WireWatchEvent; field?: string }[] = [
      { name: 'a namespace that is not a DNS label', event: { upserted: { ...good, namespace: 'Team_A' } }, field: 'upserted.namespace' },
      { name: 'a missing name', event: { upserted: { ...good, name: '' } }, field: 'upserted.name' },
      { name: 'no backend state', event: { upserted: { ...good, state: 'BACKEND_STATE_UNSPECIFIED' } }, field: 'upserted.state' },
      { name: 'a backend state number the proto does not define', event: { upserted: { ...good, state: 42 } }, field: 'upserted.state' },
      { name: 'no uid', event: { upserted: { ...good, uid: '' } }, field: 'upserted.uid' },
      { name: 'a negative idle timeout', event: { upserted: { ...good, idle_timeout: { seconds: '-5', nanos: 0 } } }, field: 'upserted.idle_timeout' },
      { name: 'a wake timeout over a year', event: { upserted: { ...good, wake_timeout: { seconds: '40000000', nanos: 0 } } }, field: 'upserted.wake_timeout' },
      { name: 'no resource_version', event: { upserted: { ...good, resource_version: '' } }, field: 'upserted.resource_version' },
      { name: 'an oversized uid', event: { upserted: { ...good, uid: 'x'.repeat(300) } }, field: 'upserted.uid' },
      { name: 'a condition without status', event: { upserted: { ...good, conditions: [{ type: 'Ready' }] } }, field: 'upserted.conditions[0].status' },
      { name: 'a condition without type', event: { upserted: { ...good, conditions: [{ status: 'CONDITION_STATUS_TRUE' }] } }, field: 'upserted.conditions[0].type' },
      {
        name: 'two Ready conditions',
        event: { upserted: { ...good, conditions: [{ type: 'Ready', status: 'CONDITION_STATUS_TRUE' }, { type: 'Ready', status: 'CONDITION_STATUS_FALSE' }] } },
        field: 'upserted.conditions[1].type',
      },
      { name: 'an address that is not an IP', event: { upserted: { ...good, addresses: { addresses: ['evil.example:80'] } } }, field: 'upserted.addresses.addresses[0]' },
      { name: 'a service FQDN that is not a DNS name', event: { upserted: { ...good, addresses: undefined, service_fqdn: 'a b.svc' } }, field: 'upserted.service_fqdn' },
      { name: 'port 0', event: { upserted: { ...good, ports: [8000, 0] } }, field: 'upserted.ports[1]' },
      { name: 'a port above 65535', event: { upserted: { ...good, ports: [70_000] } }, field: 'upserted.ports[0]' },
      { name: 'an id that is not a DNS label', event: { upserted: { ...good, ids: ['SBX'] } }, field: 'upserted.ids[0]' },
      { name: 'the same id twice', event: { upserted: { ...good, ids: ['a', 'a'] } }, field: 'upserted.ids[1]' },
      { name: 'a session model the proto does not define', event: { upserted: { ...good, session_model: 9 } }, field: 'upserted.session_model' },
      { name: 'a timestamp with nanos out of range', event: { upserted: { ...good, shutdown_time: { seconds: '1', nanos: 2_000_000_000 } } }, field: 'upserted.shutdown_time.nanos' },
      { name: 'a timestamp past the end of time', event: { upserted: { ...good, shutdown_time: { seconds: '9007199254740' } } }, field: 'upserted.shutdown_time' },
      { name: 'a revision without current', event: { upserted: { ...good, revision: { desired: 'r2' } } }, field: 'upserted.revision.current' },
      { name: 'a deletion without uid', event: { deleted: { namespace: 'team-a', name: 'web' } }, field: 'deleted.uid' },
      { name: 'a snapshot after synced', event: { snapshot: good } },
      { name: 'a second synced', event: { synced: {} } },
      { name: 'an event with nothing set', event: {} },
      { name: 'a batch inside a batch', event: { batch: { events: [{ batch: { events: [{ upserted: { ...good, state: 'BACKEND_STATE_PAUSED' } }] } }] } } },
    ];

    it.each(cases)('$name', async ({ event, field }) => {
      const { backend, sink } = await setup([container('web', 'running')]);
      const before = sink.view.version;
      const held = sink.view.get('team-a', 'web');
      backend.sendRaw(event);
      await sink.until(() => sink.errors.length === 1, 'the rejection');
      const err = sink.errors[0] as DriverError;
      expect(err).toBeInstanceOf(DriverError);
      expect(err.code).toBe('driver_message_invalid');
      if (field !== undefined) expect(err.field).toBe(field);
      expect(sink.events).toEqual([]);
      expect(sink.replaces.length).toBe(1);
      expect(sink.view.version).toBe(before);
      expect(sink.view.get('team-a', 'web')).toBe(held);
      // The stream survives a bad message: the next good one still applies.
      backend.set(container('web', 'paused'));
      await sink.until(() => sink.view.get('team-a', 'web')?.snapshot.state === 'paused', 'the next event');
    });
  });

  it('sends Resume to the driver, which resumes the sandbox natively', async () => {
    const { backend, driver, sink } = await setup([container('web', 'paused')]);
    await driver.resume('team-a', 'web');
    expect(backend.resumeCalls).toEqual([{ namespace: 'team-a', name: 'web' }]);
    await sink.until(() => sink.view.get('team-a', 'web')?.snapshot.state === 'ready', 'the resumed sandbox');
    await expect(driver.resume('team-a', 'nope')).rejects.toSatisfy((e) => e instanceof SandgateError && e.code === 'sandbox_not_found');
    expect(backend.resumeCalls.length).toBe(2);
  });

  it('a driver answering Pause with UNIMPLEMENTED makes pause() reject driver_unsupported', async () => {
    const { driver } = await setup([container('web', 'running')]);
    await expect(driver.pause('team-a', 'web')).rejects.toSatisfy((e) => e instanceof SandgateError && e.code === 'driver_unsupported');
  });

  it('sends activity as one batched ActivityReport', async () => {
    const { backend, driver } = await setup([container('web', 'running'), container('db', 'running', '10.0.0.3')]);
    const t = Date.parse('2030-01-01T00:00:05.250Z');
    await driver.reportActivity([
      { namespace: 'team-a', name: 'web', at: t, ports: new Map([[8000, t], [49983, t - 1000]]) },
      { namespace: 'team-a', name: 'db', at: t - 5000, ports: new Map([[5432, t - 5000]]) },
    ]);
    expect(backend.activityReports.length).toBe(1);
    const [web, db] = backend.activityReports[0]!.sandboxes;
    expect(web).toMatchObject({ namespace: 'team-a', name: 'web', last_activity: { seconds: String(t / 1000 - 0.25), nanos: 250_000_000 } });
    expect(web!.ports.map((p) => p.port)).toEqual([8000, 49983]);
    expect(db).toMatchObject({ name: 'db', ports: [{ port: 5432 }] });
  });

  it('reads one sandbox with Get', async () => {
    const { driver } = await setup([container('web', 'running')]);
    expect(await driver.get('team-a', 'web')).toMatchObject({ name: 'web', state: 'ready', uid: 'c-web' });
    expect(await driver.get('team-a', 'nope')).toBeUndefined();
  });

  it('stop() cancels the stream and leaves no open handles', async () => {
    const tcp = (): number => process.getActiveResourcesInfo().filter((r) => r.startsWith('TCP')).length;
    const timers = (): number => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    const baseline = { tcp: tcp(), timers: timers() };
    const backend = await ExampleDriver.start({ style: 'docker' });
    const driver = new GrpcDriver({ name: 'docker', address: backend.address, backoff: FAST });
    const sink = new ViewSink(driver.id);
    await driver.start(sink);
    await sink.until(() => sink.view.synced, 'the first list');
    expect(backend.watchers).toBe(1);
    await within(driver.stop(), 'stop()');
    // A graceful server shutdown waits for open calls: it completes only because the watch was cancelled.
    await within(backend.close('graceful'), 'a graceful shutdown of the driver process');
    expect(sink.errors).toEqual([]);
    expect(tcp()).toBe(baseline.tcp);
    expect(timers()).toBeLessThanOrEqual(baseline.timers);
    await expect(driver.resume('team-a', 'web')).rejects.toBeInstanceOf(DriverError);
  });

  it('stop() during a reconnect backoff clears the timer', async () => {
    const backend = await ExampleDriver.start({ style: 'docker' });
    await backend.close();
    const timers = (): number => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    const baseline = timers();
    const baselineTcp = process.getActiveResourcesInfo().filter((r) => r.startsWith('TCP')).length;
    const driver = new GrpcDriver({ name: 'docker', address: backend.address, backoff: { initialMs: 60_000, maxMs: 60_000 }, random: () => 0.99 });
    const sink = new ViewSink(driver.id);
    await driver.start(sink);
    await sink.until(() => sink.errors.length === 1, 'the first failed attempt');
    await within(driver.stop(), 'stop()');
    expect(timers()).toBeLessThanOrEqual(baseline);
    expect(process.getActiveResourcesInfo().filter((r) => r.startsWith('TCP')).length).toBe(baselineTcp);
  });
});

describe('label prefix of the example driver', () => {
  /** `c` with more labels. */
  const labelled = (c: DockerContainer, more: Record<string, string>): DockerContainer => ({ ...c, Config: { Labels: { ...c.Config.Labels, ...more } } });
  /** `c` with its sandgate.dev/ labels spelled with the deprecated sandgate.io/ prefix. */
  const oldSpelling = (c: DockerContainer): DockerContainer => ({
    ...c,
    Config: { Labels: Object.fromEntries(Object.entries(c.Config.Labels).map(([k, v]) => [k.replace(/^sandgate\.dev\//, 'sandgate.io/'), v])) },
  });

  it('reads sandgate.dev/ labels; still reads sandgate.io/ ones, warning once per process', async () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => undefined);
    try {
      const { backend, sink } = await setup([labelled(container('web', 'running'), { 'sandgate.dev/supervisor': 'none', 'sandgate.dev/ports': '8000,50051', 'sandgate.dev/port-protocols': '50051=h2c,8000=http' })]);
      expect(sink.view.get('team-a', 'web')?.snapshot).toMatchObject({ ids: ['sbx-web'], sessionModel: 'none', ports: [8000, 50051], h2cPorts: [50051] });
      expect(warn).not.toHaveBeenCalled();

      backend.set(oldSpelling(labelled(container('old-a', 'running', '10.0.0.4'), { 'sandgate.dev/supervisor': 'none', 'sandgate.dev/ports': '9000' })));
      backend.set(oldSpelling(container('old-b', 'running', '10.0.0.5')));
      await sink.until(() => sink.view.get('team-a', 'old-b') !== undefined, 'the old-spelling sandboxes');
      expect(sink.view.get('team-a', 'old-a')?.snapshot).toMatchObject({ ids: ['sbx-old-a'], sessionModel: 'none', ports: [9000] });
      expect(sink.view.get('team-a', 'old-b')?.snapshot).toMatchObject({ ids: ['sbx-old-b'], sessionModel: 'required' });

      const kube = STYLE_MAPPINGS.kubernetes.toSnapshot(
        {
          metadata: { namespace: 'team-a', name: 'k', uid: 'u-k', labels: { 'sandgate.io/sandbox-id': 'sbx-k' }, annotations: { 'sandgate.io/supervisor': 'none' } },
          spec: { replicas: 1 },
          status: { conditions: [{ type: 'Ready', status: 'True', reason: 'DependenciesReady' }], podIPs: ['10.0.0.6'] },
        },
        '1',
      );
      expect(kube).toMatchObject({ ids: ['sbx-k'], sessionModel: 'none' });

      expect(warn).toHaveBeenCalledTimes(1);
      expect(String(warn.mock.calls[0]![0])).toMatch(/deprecated.*sandgate\.io\/.*sandgate\.dev\//);
    } finally {
      warn.mockRestore();
    }
  });
});

describe('sandbox codec', () => {
  it('round-trips every field of a snapshot', () => {
    const s: BackendSnapshot = {
      namespace: 'team-a',
      name: 'web',
      uid: 'u1',
      resourceVersion: '17',
      instanceId: 'pod-1',
      ids: ['sbx-1', 'sbx-2'],
      state: 'starting',
      conditions: [
        { type: 'Ready', status: 'False', reason: 'InplaceUpdating', message: 'updating', lastTransitionTime: '2030-01-01T00:00:01.250Z' },
        { type: 'PodResizePending', status: 'True', reason: 'Deferred', message: '', lastTransitionTime: undefined },
      ],
      endpoint: { kind: 'service', fqdn: 'web.team-a.svc.cluster.local' },
      sessionModel: 'none',
      ports: [8000, 49983, 50051],
      h2cPorts: [50051],
      shutdownTime: Date.parse('2030-06-01T12:00:00.5Z'),
      revision: { desired: 'r2', current: 'r1' },
      createdAt: Date.parse('2030-01-01T00:00:00.125Z'),
      envdAccessToken: 'envd-token-1',
      idleTimeoutMs: 1_800_000,
      wakeTimeoutMs: 20_500,
    };
    expect(snapshotFromWire(snapshotToWire(s))).toEqual(s);
    // An idle timeout of zero (never) is not the same as none (the gateway's default).
    expect(snapshotFromWire(snapshotToWire({ ...s, idleTimeoutMs: 0 })).idleTimeoutMs).toBe(0);
    expect(snapshotFromWire(snapshotToWire({ ...s, idleTimeoutMs: undefined, wakeTimeoutMs: undefined }))).toMatchObject({ idleTimeoutMs: undefined, wakeTimeoutMs: undefined });
    for (const endpoint of [{ kind: 'relay' }, { kind: 'address', addresses: ['fd00::7', '10.0.0.7'] }] as const) {
      expect(snapshotFromWire(snapshotToWire({ ...s, endpoint, ports: undefined, shutdownTime: undefined, revision: undefined, createdAt: undefined }))).toEqual({
        ...s,
        endpoint,
        ports: undefined,
        shutdownTime: undefined,
        revision: undefined,
        createdAt: undefined,
      });
    }
  });

  it('reads an unset endpoint as "no address yet" and an unset session model as required', () => {
    const s = snapshotFromWire({ namespace: 'a', name: 'b', uid: 'u', resource_version: '1', state: 'BACKEND_STATE_READY' });
    expect(s.endpoint).toEqual({ kind: 'address', addresses: [] });
    expect(s.sessionModel).toBe('required');
    expect(s.ports).toBeUndefined();
    expect(s.h2cPorts).toBeUndefined();
  });

  it('rejects an h2c port that is not a port, or not in a non-empty allow-list', () => {
    const base = { namespace: 'a', name: 'b', uid: 'u', resource_version: '1', state: 'BACKEND_STATE_READY' };
    expect(snapshotFromWire({ ...base, h2c_ports: [50051] }).h2cPorts).toEqual([50051]);
    expect(() => snapshotFromWire({ ...base, h2c_ports: [0] })).toThrow(/h2c_ports\[0\].*1-65535/);
    expect(() => snapshotFromWire({ ...base, ports: [8000], h2c_ports: [50051] })).toThrow(/h2c_ports\[0\].*not in ports/);
  });

  it('reads tcp_ports (field 22), each in a non-empty allow-list and never also h2c', () => {
    const base = { namespace: 'a', name: 'b', uid: 'u', resource_version: '1', state: 'BACKEND_STATE_READY' };
    expect(snapshotFromWire({ ...base, ports: [22, 8000], tcp_ports: [22] }).tcpPorts).toEqual([22]);
    expect(snapshotFromWire(base).tcpPorts).toBeUndefined();
    expect(() => snapshotFromWire({ ...base, tcp_ports: [70000] })).toThrow(/tcp_ports\[0\].*1-65535/);
    expect(() => snapshotFromWire({ ...base, ports: [8000], tcp_ports: [22] })).toThrow(/tcp_ports\[0\].*not in ports/);
    expect(() => snapshotFromWire({ ...base, h2c_ports: [22], tcp_ports: [22] })).toThrow(/tcp_ports\[0\].*also in h2c_ports/);
  });

  it.each([null, undefined, 'text', 7, []])('rejects %j as a sandbox', (msg) => {
    expect(() => snapshotFromWire(msg)).toThrow(DriverError);
    expect(() => deletionFromWire(msg)).toThrow(DriverError);
  });
});

describe('backoffDelay', () => {
  // [attempt, random draw, delay ms]: the formula's edges (the first attempt, the cap, a zero draw) as rows.
  it.each([
    [0, 0.999, 99],
    [1, 0.999, 199],
    [3, 0.5, 400],
    [20, 0.999, 4995],
    [10_000, 0.999, 4995],
    [5, 0, 0],
  ])('attempt %i with random %d waits %i ms', (attempt, r, ms) => {
    expect(backoffDelay(attempt, { initialMs: 100, maxMs: 5000 }, () => r)).toBe(ms);
  });
});

describe('parseGrpcDriverUrl', () => {
  it.each([
    ['grpc://127.0.0.1:7000', '127.0.0.1:7000', '127.0.0.1:7000'],
    ['grpc://127.0.0.1:7000?name=docker', '127.0.0.1:7000', 'docker'],
    ['grpc://[::1]:7000', '[::1]:7000', '::1:7000'],
    ['grpc://driver.sandboxes.svc:7000/?name=vm-1', 'driver.sandboxes.svc:7000', 'vm-1'],
  ])('%s', (url, address, name) => {
    expect(parseGrpcDriverUrl(url)).toEqual({ address, name });
  });

  it.each(['127.0.0.1:7000', 'http://127.0.0.1:7000', 'grpc://127.0.0.1', 'grpc://u:p@h:1', 'grpc://h:1/path', 'grpc://h:1?nmae=x', 'grpc://h:1?name=a/b', 'grpc://h:1?name='])(
    'rejects %s',
    (url) => {
      expect(() => parseGrpcDriverUrl(url)).toThrow(expect.objectContaining({ code: 'config_invalid' }));
    },
  );
});
