import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import type { Allow } from '../../src/domain/decide.js';
import { EmbeddedProxy } from '../../src/edge/proxy/http-proxy.js';
import { RelayCredentials } from '../../src/edge/relay/relay-credential.js';
import { relayHeaders } from '../../src/edge/relay/relay-headers.js';
import type { SupervisorClient } from '../../src/sessions/supervisor-client.js';
import { eventually } from '../helpers/eventually.js';
import { relaySandbox, RELAY_CREDENTIALS, startGatewayPair, startSupervisor, viaRelay, type GatewayPair, type RelayStack } from '../helpers/relay-stack.js';
import { patternStream, sha256Of, startUpstream, text, viaProxy } from '../helpers/upstream.js';

// Two gateways in one process sharing presence through a real redis-server. The supervisor holds its
// session on B; a request that reaches A is forwarded to B's relay listener, whose address A reads from
// B's gateway lease — by A's embedded proxy, or by Envoy (A's decision names B's listener).

const MiB = 1024 * 1024;
/** 64 MiB through the relay is CPU-bound: beside a busy neighbour it takes far longer than the default. */
const BULK_TIMEOUT_MS = 120_000;

let peers: GatewayPair;
let a: RelayStack;
let b: RelayStack;
let sup: SupervisorClient;
let up: Awaited<ReturnType<typeof startUpstream>>;
let wss: WebSocketServer;
let sseNext: (() => void) | undefined;

const host = () => `${up.port}-box.team-a.localhost`;
const ownerOn = (g: RelayStack) => g.view.get('team-a', 'box')?.relayOwner;

beforeAll(async () => {
  up = await startUpstream((req, res) => {
    if (req.url === '/hash') return void sha256Of(req).then((r) => res.end(JSON.stringify(r)));
    if (req.url?.startsWith('/download/')) {
      const n = Number(req.url.split('/')[2]);
      res.writeHead(200, { 'content-length': String(n) });
      return void patternStream(n).pipe(res);
    }
    if (req.url === '/sse') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: one\n\n');
      sseNext = () => res.end('data: two\n\n');
      return;
    }
    res.end('ok ' + req.url);
  });
  wss = new WebSocketServer({ server: up.server });
  wss.on('connection', (ws) => ws.on('message', (m, isBinary) => ws.send(m, { binary: isBinary })));
  peers = await startGatewayPair(relaySandbox('box'), 'relay-cluster');
  ({ a, b, sup } = peers);
});

afterAll(async () => {
  // A test moves the session to a supervisor of its own, so the one now connected is stopped here.
  sup.stop();
  wss.close();
  await peers.close();
  await up.close();
});

describe('relay across two gateways (Redis presence)', () => {
  it("A decides a relay to B's relay listener, read from B's gateway lease", () => {
    const d = a.decider.decide('ext_authz', { headers: {}, host: host(), path: '/' });
    expect(d).toMatchObject({ allow: true, relay: true, upstream: b.relayAddress });
    expect(a.view.get('team-a', 'box')?.status.phase).toBe('Ready');
  });

  it("A's proxy forwards to B: small request, 64 MiB upload and 64 MiB download, byte-exact", async () => {
    const small = await viaProxy(a.proxy.port, { host: host(), path: '/small' });
    expect([small.status, await text(small)]).toEqual([200, 'ok /small']);
    const want = await sha256Of(patternStream(64 * MiB));
    const upload = await viaProxy(a.proxy.port, { host: host(), path: '/hash', method: 'POST', body: patternStream(64 * MiB) });
    expect(JSON.parse(await text(upload))).toEqual(want);
    const download = await viaProxy(a.proxy.port, { host: host(), path: `/download/${64 * MiB}` });
    expect(await sha256Of(download.res)).toEqual(want);
    // The streams rode B's session; A opened none of its own.
    expect(a.supervisors.relay.active).toBe(0);
  }, BULK_TIMEOUT_MS);

  it('Envoy with A as its decision service sends the request straight to B', async () => {
    const d = a.decider.decide('ext_authz', { headers: {}, host: host(), path: '/envoy' }) as Allow;
    const r = await viaRelay(d.upstream, { path: '/envoy', headers: { host: host(), ...Object.fromEntries(relayHeaders(d, RELAY_CREDENTIALS)) } });
    expect([r.status, await text(r)]).toEqual([200, 'ok /envoy']);
  });

  it("carries a WebSocket and Server-Sent Events from A through B's session", async () => {
    const ws = new WebSocket(`ws://127.0.0.1:${a.proxy.port}/ws`, { headers: { host: host() } });
    await new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    });
    const payload = Buffer.from(Array.from({ length: 300_000 }, (_, i) => i % 253));
    const got = new Promise<Buffer>((resolve) => ws.once('message', (m) => resolve(m as Buffer)));
    ws.send(payload);
    expect(Buffer.compare(await got, payload)).toBe(0);
    ws.close();
    const sse = await viaProxy(a.proxy.port, { host: host(), path: '/sse' });
    expect(await new Promise<string>((resolve) => sse.res.once('data', (c: Buffer) => resolve(c.toString())))).toBe('data: one\n\n');
    sseNext!();
    expect(await text(sse)).toBe('data: two\n\n');
  });

  it("a peer with the wrong secret gets B's 401 relay_unauthorized; an unreachable peer is 502 sandbox_unreachable", async () => {
    const wrong = new EmbeddedProxy(
      a.decider,
      { host: '127.0.0.1', port: 0, upstreamHeader: 'x-sandgate-upstream', stripHeaders: [], stripOriginOnUpgrade: false, connectTimeoutMs: 1000, headersTimeoutMs: 1000, idleTimeoutMs: 1000, relay: { gatewayId: 'gw-a', credentials: new RelayCredentials('not-the-shared-secret-0123456789abcdef', 10_000), streams: a.supervisors } },
      pino({ level: 'silent' }),
    );
    await wrong.start();
    try {
      const r = await viaProxy(wrong.port, { host: host() });
      expect([r.status, JSON.parse(await text(r)).code]).toEqual([401, 'relay_unauthorized']);
    } finally {
      await wrong.close(100);
    }
    const closed = createNetServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', () => r()));
    const dead = `127.0.0.1:${(closed.address() as AddressInfo).port}`;
    await new Promise<void>((r) => closed.close(() => r()));
    a.view.setRelayResolver((id) => (id === 'gw-b' ? dead : undefined));
    try {
      const r = await viaProxy(a.proxy.port, { host: host() });
      expect([r.status, JSON.parse(await text(r)).code]).toEqual([502, 'sandbox_unreachable']);
    } finally {
      a.view.setRelayResolver((id) => (id === 'gw-a' ? a.relayAddress : (a.presence as unknown as { gatewayInfo(id: string): Record<string, string> | undefined }).gatewayInfo(id)?.relay));
    }
  });

  it('when the supervisor moves to A, A relays locally and B forwards to A', async () => {
    sup.stop();
    sup = await startSupervisor(a.supervisorUrl, 'box');
    await eventually(() => ownerOn(a) === 'gw-a' && ownerOn(b) === 'gw-a' && b.view.relayAddress('gw-a') === a.relayAddress, 5000, 'both gateways to see the session on A');
    const viaA = await viaProxy(a.proxy.port, { host: host(), path: '/on-a' });
    expect([viaA.status, await text(viaA)]).toEqual([200, 'ok /on-a']);
    const viaB = await viaProxy(b.proxy.port, { host: host(), path: '/via-b' });
    expect([viaB.status, await text(viaB)]).toEqual([200, 'ok /via-b']);
    expect(b.decider.decide('proxy', { headers: {}, host: host(), path: '/' })).toMatchObject({ relay: true, upstream: a.relayAddress });
  });
});
