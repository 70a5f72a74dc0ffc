import { readFileSync } from 'node:fs';
import { once } from 'node:events';
import { request as httpRequest } from 'node:http';
import { connect as h2Connect, createServer as createH2Server, type Http2Server, type ServerHttp2Stream } from 'node:http2';
import { createServer as createNetServer, type AddressInfo, type Server as NetServer } from 'node:net';
import { credentials, Metadata, status, type ServiceError } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseFlags } from '../../src/config/load.js';
import type { EmbeddedProxy } from '../../src/edge/proxy/http-proxy.js';
import { eventually } from '../helpers/eventually.js';
import { startFrontProxy } from '../helpers/front-proxy.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { RELAY_CREDENTIALS, relaySandbox, startGatewayPair, startRelayStack, startSupervisor, type GatewayPair, type RelayStack } from '../helpers/relay-stack.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { makeCa, needsOpenssl, OPENSSL, type TestCa } from '../helpers/tls-certs.js';
import type { SupervisorClient } from '../../src/sessions/supervisor-client.js';
import { client, everyKindOfCall, expectDeadlineReachesServer, failure, h2c, h2cSeries, startEchoServer, unary, type EchoServer } from '../helpers/grpc-echo.js';

/**
 * gRPC and h2c to sandboxes: a grpc-js server is the "sandbox" (its port declared h2c), a grpc-js client
 * calls it through the embedded proxy — h2c on the plain port, h2 on the TLS port, over a supervisor's
 * relay session — with every kind of call, deadlines, cancellation, error statuses with trailing
 * metadata, credential stripping and typed errors; and what a hostile client or a wrong upstream does.
 */

describe('gRPC through the embedded proxy to an h2c sandbox port', () => {
  let echo: EchoServer;
  let t: TestGateway;
  let http1: NetServer;
  let http1Port: number;
  let plainH2: Http2Server;
  let plainH2Port: number;
  let proxyPort: number;
  const authority = (name = 'grpc', port = echo.port) => `${port}-${name}.team-a.localhost`;

  beforeAll(async () => {
    echo = await startEchoServer();
    // A port declared h2c whose server speaks HTTP/1.1 only.
    http1 = createNetServer((s) => s.once('data', () => s.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n')));
    await new Promise<void>((r) => http1.listen(0, '127.0.0.1', r));
    http1Port = (http1.address() as AddressInfo).port;
    // A plain HTTP/2 (non-gRPC) server with trailers, for HTTP/1.1 clients.
    plainH2 = createH2Server();
    plainH2.on('stream', (stream: ServerHttp2Stream, headers) => {
      stream.respond({ ':status': 200, 'content-type': 'text/plain', 'x-seen-authority': String(headers[':authority']) }, { waitForTrailers: true });
      stream.once('wantTrailers', () => stream.sendTrailers({ 'x-checksum': 'abc' }));
      stream.end(`hello ${headers[':method']} ${headers[':path']}`);
    });
    await new Promise<void>((r) => plainH2.listen(0, '127.0.0.1', r));
    plainH2Port = (plainH2.address() as AddressInfo).port;
    const sandbox = { sessionModel: 'none' as const, endpoint: { kind: 'address' as const, addresses: ['127.0.0.1'] } };
    t = await startTestGateway([
      new TestDriver([
        snapshot({ name: 'grpc', ...sandbox, ...h2c(echo.port) }),
        snapshot({ name: 'old', uid: 'u2', ...sandbox, ...h2c(http1Port) }),
        snapshot({ name: 'plain', uid: 'u3', ...sandbox, ...h2c(plainH2Port) }),
      ]),
    ]);
    proxyPort = t.gw.proxyPort!;
  });
  afterAll(async () => {
    await t?.close();
    await echo?.close();
    http1?.close();
    plainH2?.close();
  });

  it('shows the h2c ports in the sandbox API', async () => {
    const body = (await (await fetch(`${t.admin}/v1/sandboxes/team-a/grpc`)).json()) as { ports: number[]; h2cPorts: number[] };
    expect(body).toMatchObject({ ports: [echo.port], h2cPorts: [echo.port] });
  });

  it('carries unary, server, client and bidi streaming calls over h2c on the plain port', async () => {
    const c = client(proxyPort, authority());
    try {
      await everyKindOfCall(c);
    } finally {
      c.close();
    }
  });

  it('strips the gateway credentials: the sandbox never sees x-api-key or authorization, and sees the rest', async () => {
    const c = client(proxyPort, authority());
    try {
      const md = new Metadata();
      md.set('x-api-key', 'team-key');
      md.set('authorization', 'Bearer gateway-token');
      md.set('x-app', 'mine');
      echo.seen.length = 0;
      await unary(c, 'creds', md);
      expect(echo.seen[0]).toMatchObject({ 'x-app': 'mine' });
      expect(echo.seen[0]).not.toHaveProperty('x-api-key');
      expect(echo.seen[0]).not.toHaveProperty('authorization');
      expect(echo.seen[0]!['x-forwarded-proto']).toBe('http');
      expect(echo.seen[0]!['x-forwarded-for']).toBe('127.0.0.1');
    } finally {
      c.close();
    }
  });

  it('passes an error status back with its message and trailing metadata', async () => {
    const c = client(proxyPort, authority());
    try {
      const err = await failure(unary(c, 'fail'));
      expect(err.code).toBe(status.INVALID_ARGUMENT);
      expect(err.details).toBe('bad input ü');
      expect(err.metadata.get('x-detail')).toEqual(['why']);
    } finally {
      c.close();
    }
  });

  it('passes the deadline on (grpc-timeout): a call past it ends DEADLINE_EXCEEDED and the server sees it cancelled', async () => {
    const c = client(proxyPort, authority());
    try {
      await expectDeadlineReachesServer(c, echo);
    } finally {
      c.close();
    }
  });

  it('cancels the upstream stream when the client cancels', async () => {
    const c = client(proxyPort, authority());
    try {
      const arrived = once(echo.events, 'hang');
      const cancelled = once(echo.events, 'cancelled');
      let call: { cancel(): void } | undefined;
      const result = new Promise<ServiceError | null>((resolve) => {
        call = c.Unary({ text: 'hang' }, new Metadata(), {}, (err) => resolve(err));
      });
      await arrived;
      call!.cancel();
      expect((await result)?.code).toBe(status.CANCELLED);
      await cancelled;
    } finally {
      c.close();
    }
  });

  it('answers an unknown sandbox with a typed gRPC status (NOT_FOUND, sandbox_not_found)', async () => {
    const c = client(proxyPort, authority('nope'));
    try {
      const err = await failure(unary(c, 'hi'));
      expect(err.code).toBe(status.NOT_FOUND);
      expect(err.details).toMatch(/^sandbox_not_found: /);
      expect(err.metadata.get('x-sandgate-error')).toEqual(['sandbox_not_found']);
    } finally {
      c.close();
    }
  });

  it('answers a declared-h2c port whose server speaks HTTP/1.1 with 502 upstream_error, and keeps serving', async () => {
    const c = client(proxyPort, authority('old', http1Port));
    try {
      const err = await failure(unary(c, 'hi'));
      expect(err.code).toBe(status.UNAVAILABLE);
      expect(err.details).toMatch(/^upstream_error: /);
    } finally {
      c.close();
    }
    const plain = await h1Get(proxyPort, authority('old', http1Port), '/');
    expect(plain.status).toBe(502);
    expect(plain.headers['x-sandgate-error']).toBe('upstream_error');
    const ok = client(proxyPort, authority());
    try {
      expect(await unary(ok, 'still')).toMatchObject({ text: 'echo still' });
    } finally {
      ok.close();
    }
  });

  it('carries an HTTP/1.1 request to an h2c port over HTTP/2, trailers included', async () => {
    const r = await h1Get(proxyPort, authority('plain', plainH2Port), '/some/path?q=1');
    expect(r.status).toBe(200);
    expect(r.body).toBe('hello GET /some/path?q=1');
    expect(r.headers['x-seen-authority']).toBe(authority('plain', plainH2Port));
    expect(r.trailers).toEqual({ 'x-checksum': 'abc' });
  });

  it('refuses a WebSocket upgrade to an h2c port with 501 upgrade_not_supported', async () => {
    const r = await new Promise<{ status: number; code: string | undefined }>((resolve, reject) => {
      const req = httpRequest({ port: proxyPort, host: '127.0.0.1', path: '/', headers: { host: authority('plain', plainH2Port), connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' } });
      req.on('response', (res) => {
        res.resume();
        resolve({ status: res.statusCode ?? 0, code: res.headers['x-sandgate-error'] as string | undefined });
      });
      req.on('upgrade', () => reject(new Error('upgraded')));
      req.on('error', reject);
      req.end();
    });
    expect(r).toEqual({ status: 501, code: 'upgrade_not_supported' });
  });
});

describe.skipIf(!OPENSSL)(needsOpenssl('gRPC over the TLS port'), () => {
  let echo: EchoServer;
  let ca: TestCa;
  let t: TestGateway;

  beforeAll(async () => {
    echo = await startEchoServer();
    ca = makeCa();
    const leaf = ca.issue('wild', ['*.team-a.sandboxes.test']);
    const sandbox = { sessionModel: 'none' as const, endpoint: { kind: 'address' as const, addresses: ['127.0.0.1'] } };
    t = await startTestGateway([new TestDriver([snapshot({ name: 'grpc', ...sandbox, ...h2c(echo.port) })])], { baseDomain: 'sandboxes.test', proxyTlsPort: 0, tlsCertFile: leaf.certFile, tlsKeyFile: leaf.keyFile });
  });
  afterAll(async () => {
    await t?.close();
    await echo?.close();
    ca?.remove();
  });

  it('carries every kind of call from a gRPC client over TLS (ALPN h2)', async () => {
    const name = `${echo.port}-grpc.team-a.sandboxes.test`;
    const c = client(t.gw.proxyTlsPort!, name, credentials.createSsl(readFileSync(ca.caFile)), { 'grpc.ssl_target_name_override': name });
    try {
      await everyKindOfCall(c);
    } finally {
      c.close();
    }
  });
});

describe('h2c bounds: one tenant cannot take another tenant\'s HTTP/2 capacity', () => {
  let a: EchoServer;
  let b: EchoServer;
  let big: Http2Server;
  let bigPort: number;
  let proxy: EmbeddedProxy;

  beforeAll(async () => {
    a = await startEchoServer();
    b = await startEchoServer();
    // A server that answers with more than any window holds.
    big = createH2Server();
    big.on('stream', (stream: ServerHttp2Stream) => {
      stream.respond({ ':status': 200 });
      stream.end(Buffer.alloc(4 * 1024 * 1024, 1));
    });
    await new Promise<void>((r) => big.listen(0, '127.0.0.1', r));
    bigPort = (big.address() as AddressInfo).port;
    const at = { sessionModel: 'none' as const, endpoint: { kind: 'address' as const, addresses: ['127.0.0.1'] } };
    proxy = await startFrontProxy(
      [
        snapshot({ namespace: 'team-a', name: 'a', ...at, ports: [a.port, bigPort], h2cPorts: [a.port, bigPort] }),
        snapshot({ namespace: 'team-b', name: 'b', uid: 'u-b', ...at, ...h2c(b.port) }),
      ],
      { h2c: { maxSessionsPerUpstream: 1, maxStreamsPerSession: 2, idleMs: 30_000 } },
    );
  });
  afterAll(async () => {
    await proxy?.close(200);
    await a?.close();
    await b?.close();
    big?.close();
  });

  it('refuses streams past the per-upstream cap with RESOURCE_EXHAUSTED, serves the other tenant, and recovers', async () => {
    const ca = client(proxy.port, `${a.port}-a.team-a.localhost`);
    const cb = client(proxy.port, `${b.port}-b.team-b.localhost`);
    try {
      const calls: { cancel(): void }[] = [];
      const results: Promise<ServiceError | null>[] = [];
      for (let i = 0; i < 2; i++) {
        const arrived = once(a.events, 'hang');
        results.push(new Promise((resolve) => calls.push(ca.Unary({ text: 'hang' }, new Metadata(), {}, (err) => resolve(err)))));
        await arrived;
      }
      const err = await failure(unary(ca, 'one more'));
      expect(err.code).toBe(status.RESOURCE_EXHAUSTED);
      expect(err.details).toMatch(/^too_many_connections: /);
      expect(await unary(cb, 'other tenant')).toMatchObject({ text: 'echo other tenant' });
      for (const c of calls) c.cancel();
      await Promise.all(results);
      expect(await eventually(async () => (await unary(ca, 'again').catch(() => undefined))?.text)).toBe('echo again');
      expect(proxy.h2c.sessions).toBeLessThanOrEqual(2);
    } finally {
      ca.close();
      cb.close();
    }
  });

  it('a client that never reads a large answer holds only its own stream', async () => {
    const session = h2Connect(`http://127.0.0.1:${proxy.port}`);
    try {
      const stuck = session.request({ ':path': '/big', ':authority': `${bigPort}-a.team-a.localhost` });
      const [head] = (await once(stuck, 'response')) as [Record<string, unknown>];
      expect(head[':status']).toBe(200);
      stuck.pause();
      const ca = client(proxy.port, `${a.port}-a.team-a.localhost`);
      const cb = client(proxy.port, `${b.port}-b.team-b.localhost`);
      try {
        expect(await unary(cb, 'b')).toMatchObject({ text: 'echo b' });
        expect(await unary(ca, 'a')).toMatchObject({ text: 'echo a' });
      } finally {
        ca.close();
        cb.close();
      }
    } finally {
      session.destroy();
    }
  });
});

/** The samples of /metrics whose name starts `sandgate_proxy_h2c_`, as written (name and labels) → value. */
describe('--h2c-* flags bound the proxy\'s pool, and /metrics shows it', () => {
  let a: EchoServer;
  let b: EchoServer;
  let t: TestGateway;
  const sandbox = { sessionModel: 'none' as const, endpoint: { kind: 'address' as const, addresses: ['127.0.0.1'] } };

  beforeAll(async () => {
    a = await startEchoServer();
    b = await startEchoServer();
    // One connection of one stream per port, closed 300 ms after its last stream (the default is 30 s).
    const flags = parseFlags(['--h2c-max-sessions-per-upstream', '1', '--h2c-max-streams-per-session=1', '--h2c-idle-timeout-ms', '300']).values;
    t = await startTestGateway(
      [
        new TestDriver([
          snapshot({ namespace: 'team-a', name: 'a', ...sandbox, ...h2c(a.port) }),
          snapshot({ namespace: 'team-b', name: 'b', uid: 'u-b', ...sandbox, ...h2c(b.port) }),
        ]),
      ],
      flags,
    );
  });
  afterAll(async () => {
    await t?.close();
    await a?.close();
    await b?.close();
  });

  it('refuses the second concurrent stream (RESOURCE_EXHAUSTED, 429), counts it, and the gauges follow the streams down to 0', async () => {
    expect(await h2cSeries(t.admin)).toEqual(new Map([['sandgate_proxy_h2c_sessions', 0], ['sandgate_proxy_h2c_streams', 0], ['sandgate_proxy_h2c_refused_total', 0]]));
    const ca = client(t.gw.proxyPort!, `${a.port}-a.team-a.localhost`);
    const cb = client(t.gw.proxyPort!, `${b.port}-b.team-b.localhost`);
    try {
      const arrived = once(a.events, 'hang');
      let call: { cancel(): void } | undefined;
      const held = new Promise<ServiceError | null>((resolve) => {
        call = ca.Unary({ text: 'hang' }, new Metadata(), {}, (err) => resolve(err));
      });
      await arrived;
      const open = await h2cSeries(t.admin);
      expect([open.get('sandgate_proxy_h2c_sessions'), open.get('sandgate_proxy_h2c_streams')]).toEqual([1, 1]);

      const err = await failure(unary(ca, 'second'));
      expect(err.code).toBe(status.RESOURCE_EXHAUSTED);
      expect(err.details).toMatch(/^too_many_connections: /);
      const plain = await h1Get(t.gw.proxyPort!, `${a.port}-a.team-a.localhost`, '/');
      expect(plain.status).toBe(429);
      expect(plain.headers['x-sandgate-error']).toBe('too_many_connections');
      expect((await h2cSeries(t.admin)).get('sandgate_proxy_h2c_refused_total')).toBe(2);

      // Another tenant's port has its own connection.
      expect(await unary(cb, 'other tenant')).toMatchObject({ text: 'echo other tenant' });

      call!.cancel();
      expect((await held)?.code).toBe(status.CANCELLED);
      await eventually(async () => (await h2cSeries(t.admin)).get('sandgate_proxy_h2c_streams') === 0, 5000, 'the streams gauge back to 0');
      // Closed after --h2c-idle-timeout-ms, long before the default 30 s.
      await eventually(async () => (await h2cSeries(t.admin)).get('sandgate_proxy_h2c_sessions') === 0, 5000, 'the sessions gauge back to 0');
      expect(await unary(ca, 'again')).toMatchObject({ text: 'echo again' });
    } finally {
      ca.close();
      cb.close();
    }
  });

  it('hostile: streams to other ports, refusals and unknown names add no series (no label a tenant can multiply)', async () => {
    const clients = [client(t.gw.proxyPort!, `${a.port}-a.team-a.localhost`), client(t.gw.proxyPort!, `${b.port}-b.team-b.localhost`), client(t.gw.proxyPort!, `${a.port}-nope-${'x'.repeat(40)}.team-a.localhost`)];
    try {
      const arrived = once(a.events, 'hang');
      let call: { cancel(): void } | undefined;
      const held = new Promise<ServiceError | null>((resolve) => {
        call = clients[0]!.Unary({ text: 'hang' }, new Metadata(), {}, (err) => resolve(err));
      });
      await arrived;
      expect((await failure(unary(clients[0]!, 'refused'))).code).toBe(status.RESOURCE_EXHAUSTED);
      expect(await unary(clients[1]!, 'b')).toMatchObject({ text: 'echo b' });
      expect((await failure(unary(clients[2]!, 'x'))).code).toBe(status.NOT_FOUND);
      const series = await h2cSeries(t.admin);
      expect([...series.keys()].sort()).toEqual(['sandgate_proxy_h2c_refused_total', 'sandgate_proxy_h2c_sessions', 'sandgate_proxy_h2c_streams']);
      expect(series.get('sandgate_proxy_h2c_streams')).toBe(1);
      call!.cancel();
      await held;
    } finally {
      for (const c of clients) c.close();
    }
  });
});

describe('gRPC over a relay (supervisor session) sandbox', () => {
  let echo: EchoServer;
  let stack: RelayStack;
  let sup: SupervisorClient;

  beforeAll(async () => {
    echo = await startEchoServer();
    stack = await startRelayStack({ gatewayId: 'gw-1', sandboxes: [{ ...relaySandbox('grpc'), ...h2c(echo.port) }] });
    sup = await startSupervisor(stack.supervisorUrl, 'grpc');
    await eventually(() => stack.view.get('team-a', 'grpc')?.status.phase === 'Ready');
  });
  afterAll(async () => {
    sup?.stop();
    await stack?.close();
    await echo?.close();
  });

  it('carries every kind of call over the local session\'s relay streams', async () => {
    const c = client(stack.proxy.port, `${echo.port}-grpc.team-a.localhost`);
    try {
      await everyKindOfCall(c);
      const err = await failure(unary(c, 'fail'));
      expect(err.code).toBe(status.INVALID_ARGUMENT);
      expect(err.metadata.get('x-detail')).toEqual(['why']);
    } finally {
      c.close();
    }
  });
});

describe('gRPC to a relay sandbox whose session a peer gateway holds (Redis presence)', () => {
  let echo: EchoServer;
  let peers: GatewayPair;

  beforeAll(async () => {
    echo = await startEchoServer();
    peers = await startGatewayPair({ ...relaySandbox('peer'), ...h2c(echo.port) }, 'grpc-peer');
  });
  afterAll(async () => {
    await peers?.close();
    await echo?.close();
  });

  it("carries every kind of call from A through a tunnel to B's relay listener", async () => {
    const c = client(peers.a.proxy.port, `${echo.port}-peer.team-a.localhost`);
    try {
      await everyKindOfCall(c);
      await expectDeadlineReachesServer(c, echo);
    } finally {
      c.close();
    }
  });

  it('refuses a tunnel without a valid relay credential (401 relay_unauthorized), and one whose credential names another target', async () => {
    const forged = await connectTo(peers.b.relayAddress, { 'x-sandgate-relay-target': `team-a/peer:${echo.port}`, 'x-sandgate-relay-auth': 'forged' });
    expect(forged).toMatchObject({ status: 401, code: 'relay_unauthorized' });
    const other = await connectTo(peers.b.relayAddress, { 'x-sandgate-relay-target': `team-a/peer:${echo.port}`, 'x-sandgate-relay-auth': RELAY_CREDENTIALS.mint('team-a/peer:1') });
    expect(other).toMatchObject({ status: 401, code: 'relay_unauthorized' });
    const none = await connectTo(peers.b.relayAddress, {});
    expect(none).toMatchObject({ status: 400, code: 'invalid_route' });
  });
});

/** A raw CONNECT to a relay listener: its answer's status and x-sandgate-error. */
function connectTo(address: string, headers: Record<string, string>): Promise<{ status: number; code: string | undefined }> {
  const [host, port] = [address.slice(0, address.lastIndexOf(':')), Number(address.slice(address.lastIndexOf(':') + 1))];
  return new Promise((resolve, reject) => {
    const req = httpRequest({ method: 'CONNECT', host, port, path: address, headers });
    req.once('connect', (res, socket) => {
      socket.destroy();
      resolve({ status: res.statusCode ?? 0, code: res.headers['x-sandgate-error'] as string | undefined });
    });
    req.once('response', (res) => {
      res.resume();
      resolve({ status: res.statusCode ?? 0, code: res.headers['x-sandgate-error'] as string | undefined });
    });
    req.once('error', reject);
    req.end();
  });
}

interface H1Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  trailers: Record<string, string | undefined>;
}

function h1Get(port: number, host: string, path: string): Promise<H1Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ port, host: '127.0.0.1', path, headers: { host } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body, trailers: res.trailers }));
    });
    req.on('error', reject);
    req.end();
  });
}
