import { once } from 'node:events';
import { connect as h2Connect } from 'node:http2';
import { connect as netConnect } from 'node:net';
import { credentials, InterceptingCall, Metadata, status, type Interceptor } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Allow } from '../../src/domain/decide.js';
import type { RouteRequest } from '../../src/domain/route-key.js';
import { allowResponse } from '../../src/edge/envoy/ext-authz.js';
import type { SupervisorClient } from '../../src/sessions/supervisor-client.js';
import { envoyDoors, type Ask, type DoorAnswer } from '../helpers/door-answers.js';
import { eventually } from '../helpers/eventually.js';
import { CHECK } from '../helpers/grpc-wire.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { client, everyKindOfCall, expectDeadlineReachesServer, failure, h2c, h2cSeries, startEchoServer, unary, type EchoClient, type EchoServer } from '../helpers/grpc-echo.js';
import { KEYS, RELAY_CREDENTIALS, RELAY_SECRET, relaySandbox, startGatewayPair, startRelayStack, startSupervisor, supervisedReady, type GatewayPair, type RelayStack } from '../helpers/relay-stack.js';
import { TestDriver } from '../helpers/test-driver.js';
import { certificatePairs, makeCa, needsOpenssl, OPENSSL, type TestCa } from '../helpers/tls-certs.js';
import type { CertificateSet } from '../../src/lib/tls/certificate-store.js';
import { PeerTls } from '../../src/lib/tls/peer-tls.js';
import { readFileSync } from 'node:fs';

/**
 * gRPC to a relay-only sandbox behind Envoy. No Envoy runs here, so the test plays it: it asks a door, and
 * dials what the answer names (`x-sandgate-upstream`, a gateway's relay listener) with the protocol it
 * names (`x-sandgate-upstream-protocol: h2c`: HTTP/2 with prior knowledge), the headers the answer sets
 * added to the request — as the shipped configs' `sandbox_upstream_h2c` route does. The sandbox is a
 * grpc-js server reached through its supervisor's relay session, held by the gateway that decided or by
 * its peer. And what the relay listener does with HTTP/2 that did not come from a decision.
 */

const GRPC_CALL = { path: '/sandgate.test.echo.Echo/Unary', method: 'POST', headers: { 'content-type': 'application/grpc', te: 'trailers' } };
const DOOR_OPTS = { upstreamHeader: 'x-sandgate-upstream', removeHeaders: new Set<string>(), relay: RELAY_CREDENTIALS };

/** Adds `headers` to every call's metadata: what Envoy adds to the request after the decision. */
function adding(headers: Record<string, string>): Interceptor {
  return (options, next) =>
    new InterceptingCall(next(options), {
      start(md, listener, go) {
        for (const [k, v] of Object.entries(headers)) md.set(k, v);
        go(md, listener);
      },
    });
}

/** Envoy's side of an allow: the HTTP/2 client to the upstream the answer names, with the headers it sets. */
function asEnvoy(a: DoorAnswer, authority: string): EchoClient {
  expect([a.status, a.set?.['x-sandgate-upstream-protocol']]).toEqual([200, 'h2c']);
  const upstream = a.set!['x-sandgate-upstream']!;
  const port = Number(upstream.slice(upstream.lastIndexOf(':') + 1));
  return client(port, authority, credentials.createInsecure(), { interceptors: [adding(a.set!)] });
}

/** ext_authz's answer to `route`, decided by `stack`, as door-answers.ts reduces it. */
function extAuthzOf(stack: RelayStack, route: RouteRequest): DoorAnswer {
  const d = stack.decider.decide('ext_authz', route);
  expect(d.allow).toBe(true);
  const r = CHECK.responseDeserialize(allowResponse(d as Allow, DOOR_OPTS, route)) as { ok_response: { headers: { header: { key: string; value: string } }[] } };
  const set: Record<string, string> = {};
  for (const h of r.ok_response.headers) set[h.header.key] = h.header.value;
  return { status: 200, headers: {}, body: '', set };
}

describe('gRPC to a relay-only sandbox through Envoy and the relay listener of the gateway that decided', () => {
  let echo: EchoServer;
  let t: TestGateway;
  let sup: SupervisorClient;
  let doors: { extAuthz: Ask; extProc: Ask; httpAuthz: Ask };
  const host = (): string => `${echo.port}-relayed.team-a.localhost`;

  beforeAll(async () => {
    echo = await startEchoServer();
    t = await startTestGateway([new TestDriver([{ ...relaySandbox('relayed'), ...h2c(echo.port) }])], { relaySecret: RELAY_SECRET }, { supervisorKeys: KEYS });
    sup = await supervisedReady(t.gw, 'relayed');
    doors = envoyDoors(t);
  });
  afterAll(async () => {
    sup?.stop();
    await t?.close();
    await echo?.close();
  });

  it.each(['extAuthz', 'extProc', 'httpAuthz'] as const)('%s: unary and streaming calls reach the sandbox over the relay session, deadlines too', async (door) => {
    const a = await doors[door]({ host: host(), ...GRPC_CALL });
    expect([a.set?.['x-sandgate-upstream'], a.set?.['x-sandgate-relay-target']]).toEqual([t.gw.relayAddress, `team-a/relayed:${echo.port}`]);
    const c = asEnvoy(a, host());
    try {
      await everyKindOfCall(c);
      await expectDeadlineReachesServer(c, echo);
      const err = await failure(unary(c, 'fail'));
      expect([err.code, err.metadata.get('x-detail')]).toEqual([status.INVALID_ARGUMENT, ['why']]);
      // The sandbox never sees the gateway's headers: the credential and the target stay at the listener.
      const seen = echo.seen.at(-1)!;
      expect(Object.keys(seen).filter((k) => k.startsWith('x-sandgate-'))).toEqual([]);
    } finally {
      c.close();
    }
  });

  it("counts the relay listener's HTTP/2 streams in /metrics beside the proxy's", async () => {
    const c = asEnvoy(await doors.extAuthz({ host: host(), ...GRPC_CALL }), host());
    const arrived = once(echo.events, 'hang');
    let call: { cancel(): void } | undefined;
    const ended = new Promise<void>((resolve) => (call = c.Unary({ text: 'hang' }, new Metadata(), {}, () => resolve())));
    try {
      await arrived;
      const series = await h2cSeries(t.admin);
      expect(series.get('sandgate_proxy_h2c_streams')).toBe(1);
      expect(series.get('sandgate_proxy_h2c_sessions')).toBeGreaterThanOrEqual(1);
    } finally {
      call!.cancel();
      await ended;
      c.close();
    }
  });
});

describe('gRPC to a relay-only sandbox through Envoy when a peer gateway holds its session', () => {
  let echo: EchoServer;
  let peers: GatewayPair;
  const host = (): string => `${echo.port}-peer.team-a.localhost`;

  beforeAll(async () => {
    echo = await startEchoServer();
    peers = await startGatewayPair({ ...relaySandbox('peer'), ...h2c(echo.port) }, 'h2c-envoy-peer');
  });
  afterAll(async () => {
    await peers?.close();
    await echo?.close();
  });

  it("A decides, Envoy dials B's relay listener over HTTP/2, and every kind of call reaches the sandbox", async () => {
    const a = extAuthzOf(peers.a, { headers: { 'content-type': 'application/grpc' }, host: host(), path: GRPC_CALL.path, method: 'POST' });
    expect(a.set?.['x-sandgate-upstream']).toBe(peers.b.relayAddress);
    const c = asEnvoy(a, host());
    try {
      await everyKindOfCall(c);
      await expectDeadlineReachesServer(c, echo);
    } finally {
      c.close();
    }
  });

  it('keeps HTTP/1.1 from Envoy to the same listener working beside it', async () => {
    const a = extAuthzOf(peers.a, { headers: {}, host: host(), path: '/', method: 'GET' });
    const [h, port] = peers.b.relayAddress.split(':');
    // The sandbox port speaks HTTP/2 only: an HTTP/1.1 request reaches it and fails there (502), not at the listener.
    const res = await fetch(`http://${h}:${port}/`, { headers: { host: host(), 'x-sandgate-relay-auth': a.set!['x-sandgate-relay-auth']!, 'x-sandgate-relay-target': a.set!['x-sandgate-relay-target']! } });
    expect([res.status, res.headers.get('x-sandgate-error')]).toEqual([502, 'upstream_error']);
    const forged = await fetch(`http://${h}:${port}/`, { headers: { host: host(), 'x-sandgate-relay-auth': 'forged', 'x-sandgate-relay-target': a.set!['x-sandgate-relay-target']! } });
    expect([forged.status, forged.headers.get('x-sandgate-error')]).toEqual([401, 'relay_unauthorized']);
  });
});

describe('hostile HTTP/2 at the relay listener', () => {
  let echo: EchoServer;
  let stack: RelayStack;
  let sup: SupervisorClient;
  const host = (): string => `${echo.port}-box.team-a.localhost`;
  const target = (): string => `team-a/box:${echo.port}`;
  const toListener = (headers: Record<string, string>): EchoClient => client(stack.listener.port, host(), credentials.createInsecure(), { interceptors: [adding(headers)] });

  beforeAll(async () => {
    echo = await startEchoServer();
    stack = await startRelayStack({ gatewayId: 'gw-1', sandboxes: [{ ...relaySandbox('box'), ...h2c(echo.port) }], proxy: { headersTimeoutMs: 500 }, h2c: { maxSessionsPerUpstream: 1, maxStreamsPerSession: 2 } });
    sup = await startSupervisor(stack.supervisorUrl, 'box');
    await eventually(() => stack.view.get('team-a', 'box')?.status.phase === 'Ready');
  });
  afterAll(async () => {
    sup?.stop();
    await stack?.close();
    await echo?.close();
  });

  it.each<[string, () => Record<string, string>, number, string]>([
    ['no credential', () => ({ 'x-sandgate-relay-target': target() }), status.UNAUTHENTICATED, 'relay_unauthorized'],
    ['a forged credential', () => ({ 'x-sandgate-relay-target': target(), 'x-sandgate-relay-auth': 'v1.forged.0.x' }), status.UNAUTHENTICATED, 'relay_unauthorized'],
    ['the relay secret itself', () => ({ 'x-sandgate-relay-target': target(), 'x-sandgate-relay-auth': RELAY_SECRET }), status.UNAUTHENTICATED, 'relay_unauthorized'],
    ["another target's credential", () => ({ 'x-sandgate-relay-target': target(), 'x-sandgate-relay-auth': RELAY_CREDENTIALS.mint('team-a/box:1') }), status.UNAUTHENTICATED, 'relay_unauthorized'],
    ['no target', () => ({ 'x-sandgate-relay-auth': RELAY_CREDENTIALS.mint(target()) }), status.INVALID_ARGUMENT, 'invalid_route'],
  ])('refuses a gRPC call with %s, and the sandbox sees nothing', async (_name, headers, code, named) => {
    const before = echo.seen.length;
    const c = toListener(headers());
    try {
      const err = await failure(unary(c, 'hi'));
      expect(err.code).toBe(code);
      expect(err.details).toContain(named);
      expect(echo.seen.length).toBe(before);
    } finally {
      c.close();
    }
  });

  it('refuses a WebSocket over HTTP/2 (extended CONNECT) with 501 upgrade_not_supported', async () => {
    const s = h2Connect(`http://127.0.0.1:${stack.listener.port}`);
    try {
      await once(s, 'remoteSettings');
      const req = s.request({ ':method': 'CONNECT', ':protocol': 'websocket', ':scheme': 'http', ':path': '/ws', ':authority': host(), 'x-sandgate-relay-target': target(), 'x-sandgate-relay-auth': RELAY_CREDENTIALS.mint(target()) });
      const [head] = (await once(req, 'response')) as [Record<string, string>];
      expect([head[':status'], head['x-sandgate-error']]).toEqual([501, 'upgrade_not_supported']);
      req.close();
    } finally {
      s.destroy();
    }
  });

  it.each([
    ['a broken preface', Buffer.from('PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n', 'latin1')],
    ['frames that are not HTTP/2 after a whole preface', Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1'), Buffer.alloc(64, 0xff)])],
    ['half a preface, then silence', Buffer.from('PRI * HTTP/2', 'latin1')],
  ])('cuts %s, and keeps serving', async (_name, bytes) => {
    const sock = netConnect(stack.listener.port, '127.0.0.1');
    let got = '';
    sock.on('data', (b: Buffer) => (got += b.toString('latin1')));
    sock.on('error', () => undefined);
    sock.write(bytes);
    const t0 = Date.now();
    await once(sock, 'close');
    expect(Date.now() - t0).toBeLessThan(3000);
    expect(got).not.toMatch(/^HTTP\/1\.1 [23]/);
    const c = toListener({ 'x-sandgate-relay-target': target(), 'x-sandgate-relay-auth': RELAY_CREDENTIALS.mint(target()) });
    try {
      expect(await unary(c, 'after')).toMatchObject({ text: 'echo after' });
    } finally {
      c.close();
    }
  });

  it('bounds a stream flood by the h2c pool: streams past its caps are refused RESOURCE_EXHAUSTED, and it recovers', async () => {
    const c = toListener({ 'x-sandgate-relay-target': target(), 'x-sandgate-relay-auth': RELAY_CREDENTIALS.mint(target()) });
    const held: { cancel(): void }[] = [];
    try {
      let hung = 0;
      echo.events.on('hang', () => hung++);
      const results = Array.from({ length: 12 }, () => new Promise<number>((resolve) => held.push(c.Unary({ text: 'hang' }, new Metadata(), {}, (err) => resolve(err?.code ?? status.OK)))));
      await eventually(() => hung === 2 && stack.listener.h2c.refused >= 10, 5000, 'two calls held by the sandbox, ten refused');
      expect([stack.listener.h2c.sessions, stack.listener.h2c.streams]).toEqual([1, 2]);
      for (const h of held) h.cancel();
      const codes = await Promise.all(results);
      expect(codes.filter((code) => code === status.RESOURCE_EXHAUSTED).length).toBe(10);
      await eventually(() => stack.listener.h2c.streams === 0, 5000, 'the held streams released');
      expect(await unary(c, 'again')).toMatchObject({ text: 'echo again' });
    } finally {
      echo.events.removeAllListeners('hang');
      c.close();
    }
  });
});

describe.skipIf(!OPENSSL)(needsOpenssl('gRPC to the relay listener over mutual TLS, ALPN h2'), () => {
  let ca: TestCa;
  let stranger: TestCa;
  let store: CertificateSet;
  let echo: EchoServer;
  let stack: RelayStack;
  let sup: SupervisorClient;
  const host = (): string => `${echo.port}-box.team-a.localhost`;

  beforeAll(async () => {
    ca = makeCa('sandgate doors CA');
    stranger = makeCa('another CA');
    store = certificatePairs(ca.issue('gw', ['sandgate.internal'], { both: true }), { clientCa: readFileSync(ca.caFile) });
    echo = await startEchoServer();
    const tls = { listener: { options: store.serverOptions(), attach: (srv: Parameters<CertificateSet['attach']>[0]) => store.attach(srv) }, peer: new PeerTls(store) };
    stack = await startRelayStack({ gatewayId: 'gw-1', sandboxes: [{ ...relaySandbox('box'), ...h2c(echo.port) }], tls });
    sup = await startSupervisor(stack.supervisorUrl, 'box');
    await eventually(() => stack.view.get('team-a', 'box')?.status.phase === 'Ready');
  }, 60_000);
  afterAll(async () => {
    sup?.stop();
    await stack?.close();
    await echo?.close();
    store?.detachAll();
    ca?.remove();
    stranger?.remove();
  });

  /** Envoy's relay_upstream_h2c: TLS with its client certificate (or the one given), ALPN h2, the doors name checked. */
  const overTls = (pair: { cert: Buffer; key: Buffer } | undefined): EchoClient => {
    const a = extAuthzOf(stack, { headers: { 'content-type': 'application/grpc' }, host: host(), path: GRPC_CALL.path, method: 'POST' });
    const creds = credentials.createSsl(readFileSync(ca.caFile), pair?.key ?? null, pair?.cert ?? null);
    return client(stack.listener.port, host(), creds, { interceptors: [adding(a.set!)], 'grpc.ssl_target_name_override': 'sandgate.internal' });
  };

  it('carries every kind of call from a client with a certificate the CA issued', async () => {
    const envoy = ca.issue('envoy', ['envoy.internal'], { client: true });
    const c = overTls(envoy);
    try {
      await everyKindOfCall(c);
    } finally {
      c.close();
    }
  });

  it('refuses at the handshake a client without a certificate, and one another CA issued: the sandbox sees nothing', async () => {
    const before = echo.seen.length;
    for (const pair of [undefined, stranger.issue('intruder', ['intruder.internal'], { client: true })]) {
      const c = overTls(pair);
      try {
        expect((await failure(unary(c, 'hi'))).code).toBe(status.UNAVAILABLE);
      } finally {
        c.close();
      }
    }
    expect(echo.seen.length).toBe(before);
  });
});
