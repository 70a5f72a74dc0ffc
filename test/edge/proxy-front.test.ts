import { createServer, type RequestListener, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { HttpFront, type FrontHandler } from '../../src/edge/http-front.js';
import { startFrontOverUpstream, type FrontOverUpstream } from '../helpers/front-proxy.js';
import { snapshot } from '../helpers/snapshots.js';
import { RawClient } from '../helpers/raw-http-client.js';
import { eventually } from '../helpers/eventually.js';

/**
 * The proxy port's front (src/edge/proxy/proxy-front.ts) against node:http: the same requests, once read
 * by the front and once by node:http (on a connection the front handed over), must get the same bytes back
 * — head lines, their order, the body's framing and the body — but for the `Date` value.
 */

const log = pino({ level: 'silent' });

/** Writes `bytes` on a new connection and returns all the server sent until it closed. */
async function exchange(port: number, bytes: string): Promise<string> {
  const c = new RawClient(port);
  c.write(bytes);
  await c.closedByServer();
  return c.unread;
}

const dateless = (s: string): string => s.replace(/\r\nDate: [^\r]*/gi, '\r\nDate: -');

/** The upstream's answers, one per path, each a framing the front must pass on as node:http would. */
const answer: RequestListener = (req, res) => {
  const path = req.url ?? '/';
  if (req.method === 'OPTIONS') return void res.writeHead(200, { 'content-length': '0' }).end();
  if (path === '/length') return void res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '5' }).end('hello');
  if (path === '/chunked') {
    res.writeHead(200, { 'content-type': 'text/plain', 'x-a': 'one' });
    res.write('first ');
    setImmediate(() => res.end('second'));
    return;
  }
  if (path === '/empty') return void res.writeHead(200, { 'x-empty': '1' }).end();
  if (path === '/no-content') return void res.writeHead(204, { 'x-b': '2' }).end();
  if (path === '/not-modified') return void res.writeHead(304, { etag: '"v1"' }).end();
  if (path === '/dated') return void res.writeHead(200, ['Date', 'Tue, 01 Jan 2030 00:00:00 GMT', 'Set-Cookie', 'a=1', 'set-cookie', 'b=2', 'X-Case', 'MiXeD']).end('dated');
  if (path === '/sse') return void res.writeHead(200, { 'content-type': 'text/event-stream' }).end('data: one\n\n');
  res.writeHead(404).end('nothing here');
};

describe('the embedded proxy front: the bytes node:http would send', () => {
  let door: FrontOverUpstream;

  beforeAll(async () => {
    door = await startFrontOverUpstream(answer, [snapshot({ name: 'paused', uid: 'u2', state: 'paused', sessionModel: 'none', endpoint: { kind: 'address', addresses: ['127.0.0.1'] } })]);
  });
  afterAll(() => door.close());

  const get = (path: string, method = 'GET', h = door.host, extra = '') => `${method} ${path} HTTP/1.1\r\nHost: ${h}\r\nAccept: */*\r\n${extra}\r\n`;
  /** An OPTIONS request first: the front hands the connection to node:http, which then reads what follows. */
  const OPTIONS = (h: string): string => `OPTIONS /options HTTP/1.1\r\nHost: ${h}\r\n\r\n`;
  const OPTIONS_ANSWER = /^HTTP\/1\.1 200 OK\r\n[^]*?\r\n\r\n/;

  async function both(requests: string): Promise<{ front: string; node: string }> {
    const front = await exchange(door.proxy.port, requests);
    const node = await exchange(door.proxy.port, OPTIONS(door.host) + requests);
    expect(node).toMatch(OPTIONS_ANSWER);
    return { front: dateless(front), node: dateless(node.replace(OPTIONS_ANSWER, '')) };
  }

  it.each([
    ['a Content-Length body', '/length'],
    ['a chunked body (the upstream sent no length), written in two parts', '/chunked'],
    ['an empty body without a length', '/empty'],
    ['204 No Content', '/no-content'],
    ['304 Not Modified', '/not-modified'],
    ["the sandbox's own Date, repeated Set-Cookie, header case", '/dated'],
    ['Server-Sent Events', '/sse'],
    ['HEAD of a Content-Length body', '/length', 'HEAD'],
    ['HEAD of a chunked body', '/chunked', 'HEAD'],
    ['a 404 from the sandbox', '/missing'],
  ])('%s: keep-alive then Connection: close, pipelined', async (_what, path, method = 'GET') => {
    // Built here, not in the table: the Host names the upstream's port, known once beforeAll has run.
    const request = get(path, method);
    const closing = request.replace('\r\n\r\n', '\r\nConnection: close\r\n\r\n');
    const { front, node } = await both(request + closing);
    expect(front).toBe(node);
    // The sandbox answered, not the gateway refusing an unknown Host.
    expect(front).not.toContain('x-sandgate-error');
    expect(front.split('HTTP/1.1 ')).toHaveLength(3);
    expect(front).toContain('Connection: keep-alive\r\nKeep-Alive: timeout=65\r\n');
  });

  it.each([
    ['an unknown sandbox (404 sandbox_not_found)', '1-nope.team-a.localhost'],
    ['a paused sandbox (409)', `1-paused.team-a.localhost`],
    ['a Host that names no sandbox (400)', 'localhost'],
  ])('denials: %s', async (_what, h) => {
    const { front, node } = await both(get('/x', 'GET', h) + get('/y', 'GET', h, 'Connection: close\r\n'));
    expect(front).toBe(node);
    expect(front).toMatch(/^HTTP\/1\.1 (400|404|409) /);
    expect(front).toContain('x-sandgate-error: ');
  });

  it('an absolute-form target is routed on its authority and forwarded origin-form, as by node:http', async () => {
    const { front, node } = await both(`GET http://${door.host}/length HTTP/1.1\r\nHost: ${door.host}\r\nConnection: close\r\n\r\n`);
    expect(front).toBe(node);
    expect(front).toMatch(/hello$/);
  });

  it('reads GET and HEAD itself and hands a connection to node:http at its first request with a body', async () => {
    const c = new RawClient(door.proxy.port);
    await c.connected;
    c.write(get('/length'));
    await c.until((got) => got.endsWith('hello'));
    expect(door.proxy.front!.size).toBe(1);
    c.write(`POST /length HTTP/1.1\r\nHost: ${door.host}\r\nContent-Length: 2\r\n\r\nhi`);
    await c.until((got) => got.split('hello').length === 3);
    expect(door.proxy.front!.size).toBe(0);
    c.close();
  });
});

describe('a front on its own server: a head that trickles in', () => {
  let server: Server;
  let front: HttpFront<null>;
  let answered = 0;
  const sockets: Socket[] = [];

  beforeAll(async () => {
    server = createServer((_req, res) => res.end('node'));
    server.headersTimeout = 300;
    const handler: FrontHandler<null> = {
      accepts: () => true,
      connect: () => null,
      handle: () => answered++,
    };
    front = new HttpFront(server, handler, log);
    // After the front's listener: a server-side socket's 'data' reaches the test once the front has read it.
    server.on('connection', (s: Socket) => sockets.push(s));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  });
  afterEach(() => {
    vi.useRealTimers();
  });
  afterAll(async () => {
    front.closeAll();
    await new Promise<void>((r) => server.close(() => r()));
  });

  /** Resolves once the server side has read `n` bytes (and the front has seen them). */
  const arrived = (s: Socket, n: number): Promise<void> =>
    new Promise((resolve) => {
      const check = (): void => {
        if (s.bytesRead < n) return;
        s.off('data', check);
        resolve();
      };
      s.on('data', check);
      check();
    });

  it("is answered 408 once it has taken longer than the server's headersTimeout, as node:http answers", async () => {
    const c = new RawClient((server.address() as AddressInfo).port);
    await c.connected;
    const s = await eventually(() => sockets.find((x) => x.remotePort === c.socket.localPort), 5000, 'the server side of the connection');
    // The front reads the clock as bytes arrive: the test sets it (only Date is faked; sockets run as ever).
    const t0 = Date.now();
    vi.useFakeTimers({ toFake: ['Date'], now: t0 });
    let sent = 'GET / HTTP/1.1\r\n';
    c.write(sent);
    await arrived(s, sent.length);
    // Exactly the timeout since the first bytes: not past it yet.
    vi.setSystemTime(t0 + 300);
    c.write('Host: a\r\n');
    sent += 'Host: a\r\n';
    await arrived(s, sent.length);
    expect([s.bytesWritten, s.writableEnded]).toEqual([0, false]);
    vi.setSystemTime(t0 + 301);
    c.write('X-Late: 1\r\n');
    await c.closedByServer();
    const got = c.unread;
    expect(got).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
    expect(answered).toBe(0);
  });
});
