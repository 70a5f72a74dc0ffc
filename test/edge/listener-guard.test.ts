import { readFileSync } from 'node:fs';
import { connect as tcpConnect, type Socket } from 'node:net';
import { connect as h2Connect } from 'node:http2';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../helpers/eventually.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { FRAME, frame, PREFACE } from '../helpers/raw-h2.js';
import { makeCa, needsOpenssl, OPENSSL, type TestCa } from '../helpers/tls-certs.js';

/**
 * Every listener bounds what a connection may hold before it asks for anything (lib/connection-guard.ts):
 * a TLS handshake that never finishes, a first request head that never completes (HTTP/1.1, HTTP/2 over
 * TLS and h2c), and more connections than `--max-connections`. Each case is a hostile client on a real
 * gateway's loopback listener, waiting for the gateway to close it.
 */

const SECRET = 's'.repeat(32);

/** A client connection and what the gateway did with it. */
interface Held {
  readonly socket: Socket;
  /** Bytes the gateway sent. */
  received: number;
  /** Resolves when the gateway closed the connection. */
  readonly closed: Promise<void>;
  readonly isClosed: () => boolean;
}

const held: Held[] = [];

function hold(socket: Socket): Held {
  let isClosed = false;
  const h: Held = {
    socket,
    received: 0,
    closed: new Promise<void>((resolve) =>
      socket.once('close', () => {
        isClosed = true;
        resolve();
      }),
    ),
    isClosed: () => isClosed,
  };
  socket.on('error', () => {});
  socket.on('data', (d: Buffer) => (h.received += d.length));
  held.push(h);
  return h;
}

/** A TCP connection that sends nothing (or `bytes`), once connected. */
async function raw(port: number, bytes?: Buffer | string): Promise<Held> {
  const socket = tcpConnect(port, '127.0.0.1');
  const h = hold(socket);
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  if (bytes !== undefined) socket.write(bytes);
  return h;
}

/** A TLS connection whose handshake finished (ALPN `alpn`), that then sends `bytes` or nothing. */
async function tls(port: number, ca: TestCa, alpn: string[], bytes?: Buffer): Promise<Held & { socket: TLSSocket }> {
  const socket = tlsConnect({ port, host: '127.0.0.1', servername: 'localhost', ca: readFileSync(ca.caFile), ALPNProtocols: alpn });
  const h = hold(socket) as Held & { socket: TLSSocket };
  await new Promise<void>((resolve, reject) => socket.once('secureConnect', resolve).once('error', reject));
  if (bytes !== undefined) socket.write(bytes);
  return h;
}

afterAll(() => {
  for (const h of held.splice(0)) h.socket.destroy();
});

describe.skipIf(!OPENSSL)(needsOpenssl('connections that never finish their TLS handshake'), () => {
  let ca: TestCa;
  let t: TestGateway;

  beforeAll(async () => {
    ca = makeCa();
    const leaf = ca.issue('gw', ['localhost']);
    // The request-header timeout is far off: what closes these connections is the handshake timeout.
    t = await startTestGateway([], {
      proxyTlsPort: 0,
      tlsCertFile: leaf.certFile,
      tlsKeyFile: leaf.keyFile,
      doorsTlsCertFile: leaf.certFile,
      doorsTlsKeyFile: leaf.keyFile,
      tlsHandshakeTimeoutMs: 200,
      requestHeaderTimeoutMs: 600_000,
    });
  });
  afterAll(async () => {
    await t?.close();
    ca?.remove();
  });

  it('destroys raw TCP connections to the proxy TLS port that send nothing, unanswered', async () => {
    const clients = await Promise.all(Array.from({ length: 20 }, () => raw(t.gw.proxyTlsPort!)));
    await Promise.all(clients.map((c) => c.closed));
    expect(clients.map((c) => c.received)).toEqual(clients.map(() => 0));
  });

  it('destroys a connection to the proxy TLS port that stops halfway through its ClientHello, unanswered', async () => {
    // A TLS record header announcing a 512-byte handshake record, and only part of it.
    const c = await raw(t.gw.proxyTlsPort!, Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]));
    await c.closed;
    expect(c.received).toBe(0);
  });

  it('destroys raw TCP connections to the relay, gRPC and admin TLS listeners that send nothing', async () => {
    const clients = await Promise.all([raw(t.gw.relayPort), raw(t.gw.grpcPort), raw(t.gw.adminPort)]);
    await Promise.all(clients.map((c) => c.closed));
    expect(clients.map((c) => c.received)).toEqual([0, 0, 0]);
  });

  it('a handshake that fails is closed, never answered with HTTP', async () => {
    const c = await raw(t.gw.proxyTlsPort!, 'GET / HTTP/1.1\r\nHost: x\r\n\r\n');
    await c.closed;
    // A TLS alert may come back; an HTTP answer must not.
    expect(c.received).toBeLessThan(16);
  });
});

describe.skipIf(!OPENSSL)(needsOpenssl('connections that never complete a first request'), () => {
  let ca: TestCa;
  let t: TestGateway;

  beforeAll(async () => {
    ca = makeCa();
    const leaf = ca.issue('gw', ['localhost']);
    t = await startTestGateway([], {
      proxyTlsPort: 0,
      tlsCertFile: leaf.certFile,
      tlsKeyFile: leaf.keyFile,
      doorsTlsCertFile: leaf.certFile,
      doorsTlsKeyFile: leaf.keyFile,
      supervisorSecret: SECRET,
      opsPort: 0,
      requestHeaderTimeoutMs: 300,
    });
  });
  afterAll(async () => {
    await t?.close();
    ca?.remove();
  });

  it('closes a TLS client that completes the handshake and never sends a request (HTTP/1.1)', async () => {
    const c = await tls(t.gw.proxyTlsPort!, ca, ['http/1.1']);
    await c.closed;
  });

  it('closes an HTTP/2 client (ALPN h2) that sends no preface, and one that sends the preface but no HEADERS', async () => {
    const silent = await tls(t.gw.proxyTlsPort!, ca, ['h2']);
    expect(silent.socket.alpnProtocol).toBe('h2');
    const noHeaders = await tls(t.gw.proxyTlsPort!, ca, ['h2'], Buffer.concat([PREFACE, frame(FRAME.SETTINGS, 0, 0)]));
    await Promise.all([silent.closed, noHeaders.closed]);
    // The server's SETTINGS answered the preface: the connection was read, and still closed.
    expect(noHeaders.received).toBeGreaterThan(0);
  });

  it('closes an h2c client (prior knowledge, plain port) that sends the preface but no HEADERS, and one that sends part of it', async () => {
    const noHeaders = await raw(t.gw.proxyPort!, Buffer.concat([PREFACE, frame(FRAME.SETTINGS, 0, 0)]));
    const partial = await raw(t.gw.proxyPort!, PREFACE.subarray(0, 10));
    await Promise.all([noHeaders.closed, partial.closed]);
  });

  it('closes a plain HTTP client that trickles its head a byte at a time, forever', async () => {
    const c = await raw(t.gw.proxyPort!);
    const head = 'GET / HTTP/1.1\r\nX-Slow: ' + 'a'.repeat(100_000);
    let i = 0;
    // The client's side of the attack: a byte every 20 ms keeps any idle timeout from firing.
    const drip = setInterval(() => c.socket.write(head[i++ % head.length]!), 20);
    try {
      await c.closed;
    } finally {
      clearInterval(drip);
    }
  });

  it('closes silent connections on every other listener: relay, supervisor, admin, ops, and a gRPC client without HEADERS', async () => {
    const relay = await tls(t.gw.relayPort, ca, ['http/1.1']);
    const relayH2 = await tls(t.gw.relayPort, ca, ['h2'], Buffer.concat([PREFACE, frame(FRAME.SETTINGS, 0, 0)]));
    const supervisor = await raw(t.gw.supervisorPort!);
    const admin = await tls(t.gw.adminPort, ca, ['http/1.1']);
    const ops = await tls(t.gw.opsPort!, ca, ['http/1.1']);
    const grpc = await tls(t.gw.grpcPort, ca, ['h2'], Buffer.concat([PREFACE, frame(FRAME.SETTINGS, 0, 0)]));
    await Promise.all([relay, relayH2, supervisor, admin, ops, grpc].map((c) => c.closed));
  });

  it('a keep-alive connection that served a request is left to the keep-alive timeout (front, node:http and HTTP/2)', async () => {
    // A bodyless GET the proxy's front reads, a POST node:http reads, a stream over HTTP/2.
    const get = await answering(await raw(t.gw.proxyPort!), 'GET / HTTP/1.1\r\nHost: nowhere.example\r\n\r\n');
    const post = await answering(await raw(t.gw.proxyPort!), 'POST / HTTP/1.1\r\nHost: nowhere.example\r\nContent-Length: 2\r\n\r\nhi');
    const h2 = h2Connect(`https://localhost:${t.gw.proxyTlsPort!}`, { ca: readFileSync(ca.caFile) });
    h2.on('error', () => {});
    let h2Closed = false;
    h2.once('close', () => (h2Closed = true));
    const h2Ask = (): Promise<number> =>
      new Promise((resolve, reject) => {
        const req = h2.request({ ':path': '/', host: 'nowhere.example' }).end();
        req.once('response', (headers) => resolve(Number(headers[':status'])));
        req.once('error', reject);
        req.resume();
      });
    expect(await h2Ask()).toBeGreaterThanOrEqual(400);
    // A connection accepted after those requests were answered, closed at its own request-header
    // timeout: by then the earlier connections' had long passed too.
    const later = await raw(t.gw.proxyPort!);
    await later.closed;
    expect([get.held.isClosed(), post.held.isClosed(), h2Closed]).toEqual([false, false, false]);
    await Promise.all([get.again(), post.again()]);
    expect(await h2Ask()).toBeGreaterThanOrEqual(400);
    h2.destroy();
  });
});

/** Sends `request` on `c` and waits for its answer; again() sends it once more and waits for the next one. */
async function answering(c: Held, request: string): Promise<{ held: Held; again(): Promise<void> }> {
  let answers = 0;
  let text = '';
  c.socket.on('data', (d: Buffer) => {
    text += d.toString('latin1');
    for (;;) {
      const m = /^HTTP\/1\.1 \d{3}[^]*?\r\n\r\n/.exec(text);
      const length = m === null ? null : /\r\ncontent-length: (\d+)/i.exec(m[0]);
      if (m === null || length === null || text.length < m[0].length + Number(length[1])) return;
      answers++;
      text = text.slice(m[0].length + Number(length[1]));
    }
  });
  const ask = async (): Promise<void> => {
    const n = answers + 1;
    c.socket.write(request);
    await eventually(() => answers >= n, 5000, 'an answer');
  };
  await ask();
  return { held: c, again: ask };
}

describe.skipIf(!OPENSSL)(needsOpenssl('--max-connections'), () => {
  let ca: TestCa;
  let t: TestGateway;

  beforeAll(async () => {
    ca = makeCa();
    const leaf = ca.issue('gw', ['localhost']);
    t = await startTestGateway([], { maxConnections: 3, proxyTlsPort: 0, tlsCertFile: leaf.certFile, tlsKeyFile: leaf.keyFile });
  });
  afterAll(async () => {
    await t?.close();
    ca?.remove();
  });

  async function metric(name: string, listener: string): Promise<number | undefined> {
    const text = await (await fetch(`${t.admin}/metrics`)).text();
    const m = new RegExp(`^${name}\\{listener="${listener}"\\} (\\d+)$`, 'm').exec(text);
    return m === null ? undefined : Number(m[1]);
  }

  it('closes new connections past the cap, counts them, and a closed one frees a place', async () => {
    const first = await Promise.all([raw(t.gw.proxyPort!), raw(t.gw.proxyPort!), raw(t.gw.proxyPort!)]);
    await eventually(async () => (await metric('sandgate_listener_connections', 'proxy')) === 3, 5000, 'three connections on the proxy port');
    const refused = await raw(t.gw.proxyPort!);
    await refused.closed;
    expect(refused.received).toBe(0);
    expect(first.some((c) => c.isClosed())).toBe(false);
    expect(await metric('sandgate_listener_connections_refused_total', 'proxy')).toBe(1);
    // Every listener has a cap of its own.
    expect(await metric('sandgate_listener_connections_refused_total', 'admin')).toBe(0);
    expect(await metric('sandgate_listener_connections_refused_total', 'proxy_tls')).toBe(0);

    first[0]!.socket.destroy();
    await eventually(async () => (await metric('sandgate_listener_connections', 'proxy')) === 2, 5000, 'the place freed');
    const next = await raw(t.gw.proxyPort!, 'GET / HTTP/1.1\r\nHost: nowhere.example\r\n\r\n');
    await eventually(() => next.received > 0, 5000, 'an answer on the connection that took the freed place');
    expect(next.isClosed()).toBe(false);
    expect(await metric('sandgate_listener_connections_refused_total', 'proxy')).toBe(1);
  });

  it('the same on the TLS port: refused before the handshake, and a freed place takes a TLS client', async () => {
    const first = await Promise.all([raw(t.gw.proxyTlsPort!), raw(t.gw.proxyTlsPort!), raw(t.gw.proxyTlsPort!)]);
    await eventually(async () => (await metric('sandgate_listener_connections', 'proxy_tls')) === 3, 5000, 'three connections on the TLS port');
    const refused = await raw(t.gw.proxyTlsPort!);
    await refused.closed;
    expect(refused.received).toBe(0);
    expect(await metric('sandgate_listener_connections_refused_total', 'proxy_tls')).toBe(1);
    first[0]!.socket.destroy();
    await eventually(async () => (await metric('sandgate_listener_connections', 'proxy_tls')) === 2, 5000, 'the place freed');
    const next = await tls(t.gw.proxyTlsPort!, ca, ['http/1.1']);
    expect(next.isClosed()).toBe(false);
  });
});
