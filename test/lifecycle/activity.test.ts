import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { connect as h2Connect, type IncomingHttpHeaders } from 'node:http2';
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { cond, snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { startUpstream, startWsEcho } from '../helpers/upstream.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { eventually } from '../helpers/eventually.js';
import { makeCa, needsOpenssl, OPENSSL } from '../helpers/tls-certs.js';
import { maskedFrame, maskedText, OPCODE, serverFrames } from '../helpers/ws-frames.js';
import { ignorePattern } from '../../src/lifecycle/activity-recorder.js';
import { ActivityReporter } from '../../src/lifecycle/activity-reporter.js';
import { ActivityLog } from '../../src/lifecycle/activity-log.js';
import { SandboxView } from '../../src/view/sandbox-view.js';
import { pino } from 'pino';
import { Redis } from 'ioredis';
import type { ActivityRecord } from '../../src/domain/sandbox.js';
import { decodeActivity, encodeActivity } from '../../src/lifecycle/lifecycle-channel.js';
import { parseDuration } from '../../src/domain/duration.js';

const cleanup: (() => Promise<unknown> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

/** A clock the test moves by hand. */
function clock(start = Date.parse('2026-01-01T00:00:00Z')) {
  const c = { t: start, now: () => c.t };
  return c;
}

function get(port: number, host: string, path = '/'): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, headers: { host } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function sandboxApi(t: TestGateway, name = 'web'): Promise<Record<string, any>> {
  return (await fetch(`${t.admin}/v1/sandboxes/team-a/${name}`)).json() as Promise<Record<string, any>>;
}

const ready = (over = {}) => snapshot({ sessionModel: 'none', endpoint: { kind: 'address', addresses: ['127.0.0.1'] }, conditions: [cond('Ready', 'True', 'DependenciesReady')], ...over });

describe('activity', () => {
  it('a request through the proxy moves lastActivity of its port; an --activity-ignore path does not', async () => {
    const up = await startUpstream((_req, res) => res.end('ok'));
    cleanup.push(() => up.close());
    const c = clock();
    const t = await startTestGateway([new TestDriver([ready()])], { activityIgnore: ['/healthz', '/api/health*'] }, { now: c.now });
    cleanup.push(() => t.close());
    const host = `${up.port}-web.team-a.localhost`;
    const before = await sandboxApi(t);
    expect(before.lastActivity).toBeNull();
    expect(before.idle).toMatchObject({ timeoutMs: 0, since: '2026-01-01T00:00:00.000Z', decision: null });

    c.t += 60_000;
    expect((await get(t.gw.proxyPort!, host, '/work?x=1')).status).toBe(200);
    const after = await sandboxApi(t);
    expect(after.lastActivity).toEqual({ at: '2026-01-01T00:01:00.000Z', ports: { [String(up.port)]: '2026-01-01T00:01:00.000Z' } });
    expect(after.idle.since).toBe('2026-01-01T00:01:00.000Z');

    c.t += 60_000;
    for (const path of ['/healthz', '/healthz?probe=1', '/api/health/deep']) expect((await get(t.gw.proxyPort!, host, path)).status).toBe(200);
    expect((await sandboxApi(t)).lastActivity.at).toBe('2026-01-01T00:01:00.000Z');
    // A prefix of an ignored path is not ignored.
    expect((await get(t.gw.proxyPort!, host, '/healthzz')).status).toBe(200);
    expect((await sandboxApi(t)).lastActivity.at).toBe('2026-01-01T00:02:00.000Z');

    // The console's static table shows the idle time; /metrics the histogram, without a sandbox label.
    c.t += 90_000;
    const table = await (await fetch(`${t.admin}/console/table`)).text();
    expect(table).toContain('idle for 1m30s');
    const metrics = await (await fetch(`${t.admin}/metrics`)).text();
    expect(metrics).toMatch(/sandgate_lifecycle_idle_seconds_bucket\{le="120"\} 1/);
    expect(metrics).toMatch(/sandgate_lifecycle_idle_seconds_bucket\{le="60"\} 0/);
    expect(metrics).not.toMatch(/sandgate_lifecycle_idle_seconds[^\n]*web/);
  });

  it('a denied request is not activity', async () => {
    const c = clock();
    const t = await startTestGateway([new TestDriver([ready({ accessToken: 'tok' })])], {}, { now: c.now });
    cleanup.push(() => t.close());
    expect((await get(t.gw.proxyPort!, '8000-web.team-a.localhost')).status).toBe(401);
    expect((await sandboxApi(t)).lastActivity).toBeNull();
  });

  it('a WebSocket that only pings does not move activity; one that sends data does', async () => {
    const echo = await startWsEcho();
    cleanup.push(() => echo.close());
    const port = echo.port;
    const c = clock();
    const t = await startTestGateway([new TestDriver([ready()])], {}, { now: c.now });
    cleanup.push(() => t.close());
    const ws = new WebSocket(`ws://127.0.0.1:${t.gw.proxyPort}/`, { headers: { host: `${port}-web.team-a.localhost` } });
    cleanup.push(() => ws.terminate());
    await new Promise((r, j) => ws.once('open', r).once('error', j));
    const opened = (await sandboxApi(t)).lastActivity.at;
    expect(opened).toBe('2026-01-01T00:00:00.000Z');

    c.t += 60_000;
    for (let i = 0; i < 5; i++) {
      ws.ping(Buffer.from('keepalive'));
      await new Promise((r) => ws.once('pong', r));
    }
    expect((await sandboxApi(t)).lastActivity.at).toBe(opened);

    c.t += 60_000;
    ws.send('hello');
    await new Promise((r) => ws.once('message', r));
    expect((await sandboxApi(t)).lastActivity.at).toBe('2026-01-01T00:02:00.000Z');
  });

  it.skipIf(!OPENSSL)(needsOpenssl('a WebSocket over HTTP/2 (RFC 8441) that only pings does not move activity; one that sends data does'), async () => {
    const echo = await startWsEcho();
    cleanup.push(() => echo.close());
    const port = echo.port;
    const ca = makeCa();
    cleanup.push(() => ca.remove());
    const leaf = ca.issue('wild', ['*.team-a.localhost']);
    const c = clock();
    const t = await startTestGateway([new TestDriver([ready()])], { proxyTlsPort: 0, tlsCertFile: leaf.certFile, tlsKeyFile: leaf.keyFile }, { now: c.now });
    cleanup.push(() => t.close());
    const host = `${port}-web.team-a.localhost`;
    const session = h2Connect(`https://127.0.0.1:${t.gw.proxyTlsPort}`, { ca: readFileSync(ca.caFile), servername: host });
    cleanup.push(() => session.destroy());
    const stream = session.request({ ':method': 'CONNECT', ':protocol': 'websocket', ':scheme': 'https', ':path': '/', ':authority': host, 'sec-websocket-version': '13' }, { endStream: false });
    expect((await new Promise<IncomingHttpHeaders>((r) => stream.once('response', r)))[':status']).toBe(200);
    const frames = serverFrames(stream);
    const opened = (await sandboxApi(t)).lastActivity.at;
    expect(opened).toBe('2026-01-01T00:00:00.000Z');

    c.t += 60_000;
    for (let i = 0; i < 5; i++) {
      stream.write(maskedFrame(OPCODE.PING, Buffer.from('keepalive')));
      expect((await frames.nextFrame()).opcode).toBe(OPCODE.PONG);
    }
    expect((await sandboxApi(t)).lastActivity.at).toBe(opened);

    c.t += 60_000;
    stream.write(maskedText('hello'));
    expect(await frames.next()).toBe('hello');
    expect((await sandboxApi(t)).lastActivity.at).toBe('2026-01-01T00:02:00.000Z');
  });

  it('a long response keeps moving activity while its bytes flow', async () => {
    const c = clock();
    let push: ((s: string) => void) | undefined;
    let end: (() => void) | undefined;
    const up = await startUpstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      push = (s) => res.write(s);
      end = () => res.end();
    });
    cleanup.push(() => up.close());
    const t = await startTestGateway([new TestDriver([ready()])], {}, { now: c.now });
    cleanup.push(() => t.close());
    const chunks: string[] = [];
    const done = new Promise<void>((resolve) => {
      request({ host: '127.0.0.1', port: t.gw.proxyPort, path: '/events', headers: { host: `${up.port}-web.team-a.localhost` } }, (res) => {
        res.setEncoding('utf8');
        res.on('data', (d: string) => chunks.push(d));
        res.on('end', resolve);
      }).end();
    });
    await eventually(() => push !== undefined);
    push!('data: 1\n\n');
    await eventually(() => chunks.length >= 1);
    c.t += 60_000;
    push!('data: 2\n\n');
    await eventually(() => chunks.length >= 2);
    expect((await sandboxApi(t)).lastActivity.at).toBe('2026-01-01T00:01:00.000Z');
    end!();
    await done;
  });

  it('is shared between gateways on one Redis: a request on one shows on the other after a report round', async () => {
    const redis = await startRedisServer();
    cleanup.push(() => redis.stop());
    const up = await startUpstream((_req, res) => res.end('ok'));
    cleanup.push(() => up.close());
    const common = { presence: redis.url, activityReportIntervalMs: 100, leaseTtlMs: 1000 };
    const a = await startTestGateway([new TestDriver([ready()])], { ...common, gatewayId: 'gw-a' });
    cleanup.push(() => a.close());
    const b = await startTestGateway([new TestDriver([ready()])], { ...common, gatewayId: 'gw-b' });
    cleanup.push(() => b.close());
    expect((await get(a.gw.proxyPort!, `${up.port}-web.team-a.localhost`)).status).toBe(200);
    const seen = await eventually(async () => (await sandboxApi(b)).lastActivity ?? undefined, 5000, 'activity on gw-b');
    expect(Object.keys(seen.ports)).toEqual([String(up.port)]);
    expect(seen.at).toBe((await sandboxApi(a)).lastActivity.at);
  });
});

describe('activity is recorded only while something reads it', () => {
  it('no idle timeout, reports, console or namespace figures: nothing is recorded and no writer lock is taken; a sandbox with its own idle timeout turns both on', async () => {
    const redis = await startRedisServer();
    cleanup.push(() => redis.stop());
    const up = await startUpstream((_req, res) => res.end('ok'));
    cleanup.push(() => up.close());
    const driver = new TestDriver([ready()]);
    const t = await startTestGateway([driver], { presence: redis.url, leaseTtlMs: 300, console: false, activityReports: false });
    cleanup.push(() => t.close());
    const lock = `{${t.gw.config.presenceKeyPrefix}}:lifecycle-writer`;
    const client = new Redis(redis.url);
    cleanup.push(() => client.disconnect());

    expect((await get(t.gw.proxyPort!, `${up.port}-web.team-a.localhost`)).status).toBe(200);
    expect(t.gw.activity.get('team-a/web')).toBeUndefined();
    expect((await sandboxApi(t)).lastActivity).toBeNull();
    // The channel's first claim ran before the gateway started serving: with no writer work it took nothing.
    expect(await client.exists(lock)).toBe(0);

    driver.upsert(ready({ name: 'napper', idleTimeoutMs: 60_000 }));
    expect((await get(t.gw.proxyPort!, `${up.port}-napper.team-a.localhost`)).status).toBe(200);
    expect(t.gw.activity.get('team-a/napper')).toBeDefined();
    await eventually(async () => (await client.get(lock)) === t.gw.gatewayId || undefined, 5000, 'the writer lock, once a sandbox has its own idle timeout');

    // The last such sandbox goes: recording stops, and the lock is given up at the next renewal.
    driver.upsert(ready({ name: 'napper', idleTimeoutMs: undefined, resourceVersion: '9' }));
    await eventually(async () => (await client.exists(lock)) === 0 || undefined, 5000, 'the writer lock released');
    expect((await get(t.gw.proxyPort!, `${up.port}-web.team-a.localhost`)).status).toBe(200);
    expect(t.gw.activity.get('team-a/web')).toBeUndefined();
  });

  it('each reader alone turns recording on: --idle-timeout, a driver taking reports, the console, --metrics-namespaces', async () => {
    const up = await startUpstream((_req, res) => res.end('ok'));
    cleanup.push(() => up.close());
    const off = { console: false, activityReports: false };
    for (const on of [{ idleTimeout: '30m' }, { activityReports: true }, { console: true }, { metricsNamespaces: ['team-a'] }]) {
      const t = await startTestGateway([new TestDriver([ready()])], { ...off, ...on });
      cleanup.push(() => t.close());
      expect((await get(t.gw.proxyPort!, `${up.port}-web.team-a.localhost`)).status).toBe(200);
      expect(t.gw.activity.get('team-a/web'), JSON.stringify(on)).toBeDefined();
    }
  });
});

describe('activity inputs', () => {
  it.each([
    ['30s', 30_000],
    ['500ms', 500],
    ['1h30m', 5_400_000],
    ['15m', 900_000],
    ['90', 90_000],
    ['0', 0],
    [' 2m ', 120_000],
  ])('duration %j is %d ms', (text, ms) => expect(parseDuration(text)).toBe(ms));

  it.each(['', '-5s', '1.5s', '30x', 's', '30s5', '10y', '99999999h', '1e3', '30 s'])('duration %j is refused with a sentence', (text) => {
    expect(typeof parseDuration(text)).toBe('string');
  });

  it('refuses --activity-ignore patterns that are not paths', () => {
    for (const bad of ['healthz', '/a b', '/x?y', '/x#y', '']) expect(() => ignorePattern([bad])).toThrow(/activity-ignore/);
    const re = ignorePattern(['/a.b', '/c(d)*'])!;
    expect(re.test('/a.b')).toBe(true);
    expect(re.test('/aXb')).toBe(false);
    expect(re.test('/c(d)/e?f')).toBe(true);
  });

  it('a peer report timed past this gateway\'s clock counts as now, and one for an unknown sandbox is dropped', () => {
    const c = clock();
    const view = new SandboxView({ now: c.now, waiters: { perSandbox: 10, total: 100 } });
    view.registerDriver('test');
    view.replace('test', [ready()]);
    let deliver: (records: ActivityRecord[]) => void = () => undefined;
    const channel = { publish: () => undefined, onActivity: (l: (records: ActivityRecord[]) => void) => void (deliver = l), isWriter: () => false, start: async () => undefined, close: async () => undefined };
    const activity = new ActivityLog(view, 0);
    new ActivityReporter({ view, activity, channel, report: () => undefined, reportIntervalMs: 10_000, patchIntervalMs: 60_000, now: c.now, log: pino({ level: 'silent' }) });
    deliver([
      { namespace: 'team-a', name: 'web', port: 8000, at: c.t + 86_400_000 },
      { namespace: 'team-a', name: 'nobody', port: 8000, at: c.t },
    ]);
    const key = view.get('team-a', 'web')!.key;
    expect(activity.get(key)?.last).toBe(c.t);
    expect(activity.get(key)?.ports.get(8000)).toBe(c.t);
    expect(view.get('team-a', 'nobody')).toBeUndefined();
  });

  it('drops hostile peer activity messages whole, and ignores its own', () => {
    const good = encodeActivity('gw-b', [{ namespace: 'team-a', name: 'web', port: 8000, at: 5 }]);
    expect(decodeActivity(good, 'gw-a')).toEqual([{ namespace: 'team-a', name: 'web', port: 8000, at: 5 }]);
    expect(decodeActivity(good, 'gw-b')).toEqual([]);
    for (const bad of ['not json', 'null', '[]', '{"g":1,"r":[]}', '{"g":"x","r":{}}', '{"g":"x","r":[["a","b",0,1]]}', '{"g":"x","r":[["a","b",70000,1]]}', '{"g":"x","r":[["a","b",80,-1]]}', '{"g":"x","r":[["a","b",80,1.5]]}', '{"g":"x","r":[["","b",80,1]]}', '{"g":"x","r":[["a","b",80]]}']) {
      expect(decodeActivity(bad, 'gw-a')).toBeUndefined();
    }
  });
});
