import { request, type ServerResponse } from 'node:http';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { EmbeddedProxy } from '../../src/edge/proxy/http-proxy.js';
import { relayHeaders, RELAY_AUTH_HEADER, RELAY_TARGET_HEADER } from '../../src/edge/relay/relay-headers.js';
import type { Allow } from '../../src/domain/decide.js';
import type { SupervisorClient } from '../../src/sessions/supervisor-client.js';
import { eventually } from '../helpers/eventually.js';
import { relaySandbox, RELAY_CREDENTIALS, RELAY_SECRET, silentSupervisor, startRelayStack, startSupervisor, viaRelay, type RelayStack } from '../helpers/relay-stack.js';
import { startUpstream, text, viaProxy, type ProxyResponse } from '../helpers/upstream.js';
import { pino } from 'pino';

// Everything that can go wrong on the relay path, each with its typed answer: the sandbox refusing or
// not answering, the supervisor not answering OPEN, caps, the relay listener's own checks, and clients
// that leave mid-body.

let g: RelayStack;
let up: Awaited<ReturnType<typeof startUpstream>>;
let closedPort: number;
const supervisors: SupervisorClient[] = [];
let silent: WebSocket;
const held: ServerResponse[] = [];
let sink: { aborted: boolean; started: boolean } = { aborted: false, started: false };

const host = (name: string, port = up.port) => `${port}-${name}.team-a.localhost`;

async function denial(r: ProxyResponse): Promise<[number, string, string | undefined]> {
  const body = JSON.parse(await text(r)) as { code: string };
  expect(r.headers['x-sandgate-error']).toBe(body.code);
  return [r.status, body.code, r.headers['retry-after'] as string | undefined];
}

function relayTo(name: string, port: number, extra: Record<string, string> = {}, path = '/'): Promise<ProxyResponse> {
  return viaRelay(g.relayAddress, { path, headers: { host: host(name, port), [RELAY_AUTH_HEADER]: RELAY_CREDENTIALS.mint(`team-a/${name}:${port}`), [RELAY_TARGET_HEADER]: `team-a/${name}:${port}`, ...extra } });
}

beforeAll(async () => {
  up = await startUpstream((req, res) => {
    if (req.url === '/hold') return void held.push(res);
    if (req.url === '/slow-headers') return;
    if (req.url === '/sink') {
      sink = { aborted: false, started: false };
      req.on('data', () => (sink.started = true));
      req.once('close', () => (sink.aborted = !req.complete));
      return;
    }
    res.end('ok');
  });
  const closed = createNetServer();
  await new Promise<void>((r) => closed.listen(0, '127.0.0.1', () => r()));
  closedPort = (closed.address() as AddressInfo).port;
  await new Promise<void>((r) => closed.close(() => r()));
  g = await startRelayStack({
    gatewayId: 'gw-a',
    sandboxes: ['box', 'box2', 'guarded', 'silent', 'nosession'].map(relaySandbox),
    limits: { maxStreamsPerSandbox: 2, maxStreams: 3, openTimeoutMs: 150 },
    proxy: { headersTimeoutMs: 300 },
    readinessWaitMs: 0,
  });
  supervisors.push(await startSupervisor(g.supervisorUrl, 'box'), await startSupervisor(g.supervisorUrl, 'box2'), await startSupervisor(g.supervisorUrl, 'guarded', { allowPorts: [up.port] }));
  silent = await silentSupervisor(g.supervisorUrl, 'silent');
});

afterAll(async () => {
  for (const s of supervisors) s.stop();
  silent.terminate();
  for (const r of held) r.end();
  await g.close();
  await up.close();
});

describe('relay failures', () => {
  it('a closed port → 502 port_not_open (proxy, relay listener, WebSocket)', async () => {
    expect(await denial(await viaProxy(g.proxy.port, { host: host('box', closedPort) }))).toEqual([502, 'port_not_open', undefined]);
    expect(await denial(await relayTo('box', closedPort))).toEqual([502, 'port_not_open', undefined]);
    const ws = new WebSocket(`ws://127.0.0.1:${g.proxy.port}/`, { headers: { host: host('box', closedPort) } });
    expect(await new Promise<number>((resolve) => ws.once('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0)))).toBe(502);
  });

  it('a port the supervisor does not relay to → 403 port_not_allowed', async () => {
    expect(await denial(await viaProxy(g.proxy.port, { host: host('guarded', closedPort) }))).toEqual([403, 'port_not_allowed', undefined]);
    const ok = await viaProxy(g.proxy.port, { host: host('guarded') });
    expect([ok.status, await text(ok)]).toEqual([200, 'ok']);
  });

  it('no response head in time → 504 upstream_timeout', async () => {
    expect(await denial(await viaProxy(g.proxy.port, { host: host('box'), path: '/slow-headers' }))).toEqual([504, 'upstream_timeout', undefined]);
    await eventually(() => g.supervisors.relay.active === 0, 5000, 'the stream to be released');
  });

  it('a supervisor that never answers OPEN → 504 upstream_timeout, and the pending stream is released', async () => {
    expect(await denial(await viaProxy(g.proxy.port, { host: host('silent') }))).toEqual([504, 'upstream_timeout', undefined]);
    expect(await denial(await relayTo('silent', up.port))).toEqual([504, 'upstream_timeout', undefined]);
    expect(g.supervisors.relay.active).toBe(0);
  });

  it('caps streams per sandbox and overall → 503 relay_busy with Retry-After; places free up as streams end', async () => {
    const holds = [viaProxy(g.proxy.port, { host: host('box'), path: '/hold' }), relayTo('box', up.port, {}, '/hold')];
    await eventually(() => g.supervisors.relay.activeFor('team-a', 'box') === 2, 5000, 'two streams to box');
    expect(await denial(await viaProxy(g.proxy.port, { host: host('box') }))).toEqual([503, 'relay_busy', '1']);
    holds.push(viaProxy(g.proxy.port, { host: host('box2'), path: '/hold' }));
    await eventually(() => g.supervisors.relay.active === 3, 5000, 'three streams in all');
    expect(await denial(await relayTo('box2', up.port))).toEqual([503, 'relay_busy', '1']);
    await eventually(() => held.length === 3, 5000, 'the sandbox to hold three requests');
    for (const r of held.splice(0)) r.end('released');
    for (const r of await Promise.all(holds)) expect([r.status, await text(r)]).toEqual([200, 'released']);
    await eventually(() => g.supervisors.relay.active === 0, 5000, 'every place to be free');
    const again = await viaProxy(g.proxy.port, { host: host('box') });
    expect(again.status).toBe(200);
    await text(again);
  });

  it('the relay listener: no or wrong credential → 401 relay_unauthorized; a bad target → 400 invalid_route; no session here → 502 sandbox_unreachable', async () => {
    const target = { [RELAY_TARGET_HEADER]: `team-a/box:${up.port}` };
    expect(await denial(await viaRelay(g.relayAddress, { headers: target }))).toEqual([401, 'relay_unauthorized', undefined]);
    expect(await denial(await viaRelay(g.relayAddress, { headers: { ...target, [RELAY_AUTH_HEADER]: RELAY_SECRET } }))).toEqual([401, 'relay_unauthorized', undefined]);
    for (const bad of ['', 'team-a/box', 'team-a/box:0', 'team-a/box:080', 'team-a/box:65536', 'Team-A/box:80', 'team-a/box:80/x', '../box:80']) {
      expect(await denial(await viaRelay(g.relayAddress, { headers: { [RELAY_AUTH_HEADER]: RELAY_CREDENTIALS.mint(`team-a/box:${up.port}`), [RELAY_TARGET_HEADER]: bad } })), bad).toEqual([400, 'invalid_route', undefined]);
    }
    expect(await denial(await relayTo('nosession', up.port))).toEqual([502, 'sandbox_unreachable', undefined]);
    const ws = new WebSocket(`ws://${g.relayAddress}/`, { headers: target });
    expect(await new Promise<number>((resolve) => ws.once('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0)))).toBe(401);
  });

  it('a proxy without relay configured answers a relay decision with 502 sandbox_unreachable', async () => {
    const bare = new EmbeddedProxy(g.decider, { host: '127.0.0.1', port: 0, upstreamHeader: 'x-sandgate-upstream', stripHeaders: [], stripOriginOnUpgrade: false, connectTimeoutMs: 1000, headersTimeoutMs: 1000, idleTimeoutMs: 1000 }, pino({ level: 'silent' }));
    await bare.start();
    try {
      expect(await denial(await viaProxy(bare.port, { host: host('box') }))).toEqual([502, 'sandbox_unreachable', undefined]);
    } finally {
      await bare.close(100);
    }
  });

  for (const via of ['proxy', 'relay listener'] as const) {
    it(`a client abort mid-upload reaches the sandbox as an abort (${via})`, async () => {
      const port = via === 'proxy' ? g.proxy.port : Number(g.relayAddress.split(':')[1]);
      const d = g.decider.decide('ext_authz', { headers: {}, host: host('box'), path: '/sink' }) as Allow;
      const extra = via === 'proxy' ? {} : Object.fromEntries(relayHeaders(d, RELAY_CREDENTIALS));
      const req = request({ host: '127.0.0.1', port, method: 'POST', path: '/sink', headers: { host: host('box'), 'content-length': String(10 * 1024 * 1024), ...extra } });
      req.on('error', () => {});
      req.write(Buffer.alloc(1024 * 1024));
      await eventually(() => sink.started, 5000, 'the sandbox to receive the first bytes');
      req.destroy();
      await eventually(() => sink.aborted, 5000, 'the sandbox to see the abort');
      await eventually(() => g.supervisors.relay.active === 0, 5000, 'the stream to be released');
    });
  }
});
