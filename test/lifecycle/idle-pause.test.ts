import { afterEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { startWsEcho } from '../helpers/upstream.js';
import { ExampleDriver } from '../../examples/driver/example-driver.js';
import { GrpcDriver } from '../../src/drivers/grpc/grpc-driver.js';
import { cond, snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { eventually } from '../helpers/eventually.js';

/** Idle pause through a driver, on the test's clock; the test runs the idle checks itself. */

const cleanup: (() => Promise<unknown> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

const T0 = Date.parse('2026-02-01T00:00:00Z');
const ready = (name: string) => snapshot({ name, uid: `uid-${name}`, sessionModel: 'none', endpoint: { kind: 'address', addresses: ['127.0.0.1'] }, conditions: [cond('Ready', 'True', 'DependenciesReady')] });

async function sandboxApi(t: TestGateway, name: string): Promise<Record<string, any>> {
  return (await fetch(`${t.admin}/v1/sandboxes/team-a/${name}`)).json() as Promise<Record<string, any>>;
}

describe('idle pause', () => {
  it('a WebSocket that only pings does not keep its sandbox awake; one that sends data does', async () => {
    const echo = await startWsEcho();
    cleanup.push(() => echo.close());
    const port = echo.port;
    const clock = { t: T0 };
    const driver = new TestDriver([ready('pinger'), ready('talker')]);
    const t = await startTestGateway([driver], { idleTimeout: '1m', activityReportIntervalMs: 600_000 }, { now: () => clock.t });
    cleanup.push(() => t.close());
    const open = async (name: string): Promise<WebSocket> => {
      const ws = new WebSocket(`ws://127.0.0.1:${t.gw.proxyPort}/`, { headers: { host: `${port}-${name}.team-a.localhost` } });
      cleanup.push(() => ws.terminate());
      await new Promise((r, j) => ws.once('open', r).once('error', j));
      return ws;
    };
    const pinger = await open('pinger');
    const talker = await open('talker');
    for (let s = 10; s <= 80; s += 10) {
      clock.t = T0 + s * 1000;
      pinger.ping();
      await new Promise((r) => pinger.once('pong', r));
      talker.send(`tick ${s}`);
      await new Promise((r) => talker.once('message', r));
      await t.gw.lifecycle.idle.check();
    }
    expect(driver.paused).toEqual(['team-a/pinger']);
    const p = await sandboxApi(t, 'pinger');
    expect(p.idle.decision).toEqual({ decision: 'paused', reason: 'no traffic for 1m (idle timeout 1m)', at: new Date(T0 + 60_000).toISOString() });
    expect((await sandboxApi(t, 'talker')).idle.decision).toBeNull();
    expect(t.logs.lines.filter((l) => String(l.msg).startsWith('pausing idle sandbox')).map((l) => l.sandbox)).toEqual(['team-a/pinger']);
    const metrics = await (await fetch(`${t.admin}/metrics`)).text();
    expect(metrics).toMatch(/sandgate_lifecycle_pauses_total\{result="paused"\} 1/);
  });

  it('is asked once per idle period: a failed pause is retried only after another full timeout', async () => {
    const clock = { t: T0 };
    const driver = new TestDriver([ready('web')]);
    let fail = true;
    driver.onPause = async () => {
      if (fail) throw new Error('quota service down');
    };
    const t = await startTestGateway([driver], { idleTimeout: '30s', activityReportIntervalMs: 600_000 }, { now: () => clock.t });
    cleanup.push(() => t.close());
    clock.t = T0 + 31_000;
    await t.gw.lifecycle.idle.check();
    expect((await sandboxApi(t, 'web')).idle.decision).toMatchObject({ decision: 'failed', reason: 'pause failed: quota service down' });
    clock.t = T0 + 50_000;
    await t.gw.lifecycle.idle.check();
    expect(driver.paused.length).toBe(1);
    fail = false;
    clock.t = T0 + 62_000;
    await t.gw.lifecycle.idle.check();
    expect(driver.paused.length).toBe(2);
    expect((await sandboxApi(t, 'web')).idle.decision).toMatchObject({ decision: 'paused' });
    // Paused, then resumed: its idle time starts again from Ready.
    driver.upsert({ ...ready('web'), resourceVersion: '2', state: 'paused', conditions: [cond('Ready', 'False', 'SandboxPaused')] });
    clock.t = T0 + 70_000;
    driver.upsert({ ...ready('web'), resourceVersion: '3' });
    clock.t = T0 + 95_000;
    await t.gw.lifecycle.idle.check();
    expect(driver.paused.length).toBe(2);
    clock.t = T0 + 101_000;
    await t.gw.lifecycle.idle.check();
    expect(driver.paused.length).toBe(3);
  });

  it('a remote driver answering Pause UNIMPLEMENTED: reported unsupported, not asked again', async () => {
    const backend = await ExampleDriver.start({ style: 'docker' });
    cleanup.push(() => backend.close());
    backend.set({
      Id: 'c-web',
      Name: '/web',
      Config: { Labels: { 'sandgate.dev/namespace': 'team-a', 'sandgate.dev/name': 'web', 'sandgate.dev/supervisor': 'none' } },
      State: { Status: 'running', ExitCode: 0, Error: '', StartedAt: '2030-01-01T00:00:00Z' },
      NetworkSettings: { IPAddress: '127.0.0.1' },
    });
    const clock = { t: T0 };
    const t = await startTestGateway([new GrpcDriver({ name: 'docker', address: backend.address })], { idleTimeout: '10s', activityReportIntervalMs: 600_000 }, { now: () => clock.t });
    cleanup.push(() => t.close());
    await eventually(() => t.gw.view.get('team-a', 'web')?.status.phase === 'Ready', 5000, 'Ready');
    for (const s of [11, 20, 30, 40]) {
      clock.t = T0 + s * 1000;
      await t.gw.lifecycle.idle.check();
    }
    expect((await sandboxApi(t, 'web')).idle.decision).toMatchObject({ decision: 'unsupported', reason: expect.stringContaining('grpc/docker') });
    expect(t.logs.lines.filter((l) => l.level === 40 && String(l.msg).includes('cannot pause sandboxes')).length).toBe(1);
    expect(t.logs.lines.filter((l) => String(l.msg).startsWith('pausing idle sandbox')).length).toBe(1);
    const metrics = await (await fetch(`${t.admin}/metrics`)).text();
    expect(metrics).toMatch(/sandgate_lifecycle_pauses_total\{result="unsupported"\} 1/);
  });
});
