import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { AuthzFront, parseAuthzHead } from '../../src/edge/authz-front.js';
import { MAX_HEAD_BYTES, MAX_HEADERS } from '../../src/edge/http-front.js';
import type { AuthzSink, HttpAuthz } from '../../src/edge/http-authz.js';
import type { HeaderMap } from '../../src/domain/route-key.js';
import { createLogger, MemoryLogSink } from '../../src/observability/logger.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { RawClient } from '../helpers/raw-http-client.js';
import { eventually } from '../helpers/eventually.js';

/** Parses `head` (up to and without its blank line) as the front would. */
function parse(head: string) {
  const text = head + '\r\n\r\n';
  return parseAuthzHead(text, text.indexOf('\r\n\r\n'));
}

const ENVOY = 'GET /authz/api/v1/files?path=%2Fhome HTTP/1.1\r\nhost: 8000-web.team-a.localhost\r\nx-request-id: r-1\r\naccept: application/json';

describe('parseAuthzHead: which heads the front reads itself', () => {
  it('reads what Envoy and nginx (HTTP/1.1) send: lower-case names, values without surrounding blanks, Connection: close', () => {
    expect(parse(ENVOY)).toEqual({ method: 'GET', url: '/authz/api/v1/files?path=%2Fhome', headers: { host: '8000-web.team-a.localhost', 'x-request-id': 'r-1', accept: 'application/json' }, rawHeaders: ['host', '8000-web.team-a.localhost', 'x-request-id', 'r-1', 'accept', 'application/json'], close: false });
    expect(parse('POST /authz HTTP/1.1\r\nHost:  gw \t\r\nX-Original-URI: /sbx/a/b/1/\r\nContent-Length: 0\r\nConnection: Close')).toEqual({
      method: 'POST',
      url: '/authz',
      headers: { host: 'gw', 'x-original-uri': '/sbx/a/b/1/', 'content-length': '0', connection: 'Close' },
      rawHeaders: ['Host', 'gw', 'X-Original-URI', '/sbx/a/b/1/', 'Content-Length', '0', 'Connection', 'Close'],
      close: true,
    });
    expect(parse('GET /authz?x=1 HTTP/1.1\r\nhost: gw\r\nconnection: keep-alive\r\nx-empty:')?.headers).toEqual({ host: 'gw', connection: 'keep-alive', 'x-empty': '' });
  });

  it.each([
    ['another path', 'GET /healthz HTTP/1.1\r\nhost: gw'],
    ['a path that only starts like /authz', 'GET /authzx HTTP/1.1\r\nhost: gw'],
    ['HTTP/1.0', 'GET /authz/ HTTP/1.0\r\nhost: gw'],
    ['HTTP/2 preface-like version', 'GET /authz/ HTTP/2.0\r\nhost: gw'],
    ['a lower-case method', 'get /authz/ HTTP/1.1\r\nhost: gw'],
    ['a method past 16 letters', 'ABCDEFGHIJKLMNOPQ /authz/ HTTP/1.1\r\nhost: gw'],
    ['two spaces in the request line', 'GET  /authz/ HTTP/1.1\r\nhost: gw'],
    ['a tab in the target', 'GET /authz/\tx HTTP/1.1\r\nhost: gw'],
    ['a non-ASCII target', 'GET /authz/\u00e9 HTTP/1.1\r\nhost: gw'],
    ['no Host', 'GET /authz/ HTTP/1.1\r\naccept: */*'],
    ['no headers at all', 'GET /authz/ HTTP/1.1'],
    ['two Host headers', 'GET /authz/ HTTP/1.1\r\nhost: a\r\nhost: b'],
    ['a repeat in another case', 'GET /authz/ HTTP/1.1\r\nhost: a\r\nX-Sandbox-Id: web\r\nx-sandbox-id: api'],
    ['Transfer-Encoding', 'GET /authz/ HTTP/1.1\r\nhost: gw\r\ntransfer-encoding: chunked'],
    ['a body (Content-Length)', 'POST /authz/ HTTP/1.1\r\nhost: gw\r\ncontent-length: 5'],
    ['Content-Length and Transfer-Encoding together', 'POST /authz/ HTTP/1.1\r\nhost: gw\r\ncontent-length: 0\r\ntransfer-encoding: chunked'],
    ['Expect', 'POST /authz/ HTTP/1.1\r\nhost: gw\r\nexpect: 100-continue'],
    ['Upgrade', 'GET /authz/ HTTP/1.1\r\nhost: gw\r\nupgrade: websocket\r\nconnection: upgrade'],
    ['Connection: upgrade alone', 'GET /authz/ HTTP/1.1\r\nhost: gw\r\nconnection: upgrade'],
    ['obs-fold', 'GET /authz/ HTTP/1.1\r\nhost: gw\r\nx-a: 1\r\n  continued'],
    ['whitespace before the colon', 'GET /authz/ HTTP/1.1\r\nhost : gw'],
    ['a name with a non-token character', 'GET /authz/ HTTP/1.1\r\nhost: gw\r\nx(a): 1'],
    ['an empty name', 'GET /authz/ HTTP/1.1\r\nhost: gw\r\n: 1'],
    ['a bare LF in a value', 'GET /authz/ HTTP/1.1\r\nhost: gw\r\nx-a: 1\nx-sandbox-id: web'],
    ['a bare CR in a value', 'GET /authz/ HTTP/1.1\r\nhost: gw\r\nx-a: 1\rx-b: 2'],
    ['a bare LF ending the request line', 'GET /authz/ HTTP/1.1\nhost: gw'],
    ['a NUL in a value', 'GET /authz/ HTTP/1.1\r\nhost: gw\u0000evil'],
    ['obs-text in a value', 'GET /authz/ HTTP/1.1\r\nhost: gw\r\nx-a: caf\u00e9'],
    ['a name the object prototype has', 'GET /authz/ HTTP/1.1\r\nhost: gw\r\nconstructor: x'],
    ['__proto__', 'GET /authz/ HTTP/1.1\r\nhost: gw\r\n__proto__: x'],
    [`more than ${MAX_HEADERS} fields`, 'GET /authz/ HTTP/1.1\r\nhost: gw' + Array.from({ length: MAX_HEADERS }, (_, i) => `\r\nx-h${i}: ${i}`).join('')],
  ])('leaves to node:http: %s', (_what, head) => {
    expect(parse(head)).toBeUndefined();
  });
});

const HOST = '8000-web.team-a.localhost';
const req = (path: string, extra = '', method = 'GET', host = HOST) => `${method} ${path} HTTP/1.1\r\nhost: ${host}\r\n${extra}\r\n`;

const B_HEADERS = 'x-sandbox-id: web\r\nx-sandbox-namespace: team-a\r\nx-sandbox-port: 8000\r\nx-sandgate-upstream: 10.6.6.6:1\r\n';

describe('the admin port front, in a gateway', () => {
  let t: TestGateway;
  let driver: TestDriver;
  const clients: RawClient[] = [];
  const client = (): RawClient => {
    const c = new RawClient(t.gw.adminPort);
    clients.push(c);
    return c;
  };
  beforeAll(async () => {
    driver = new TestDriver([
      snapshot({ name: 'web', sessionModel: 'none', ports: [8000], endpoint: { kind: 'address', addresses: ['127.0.0.2'] } }),
      snapshot({ name: 'later', uid: 'uid-later', endpoint: { kind: 'address', addresses: ['127.0.0.4'] } }),
    ]);
    t = await startTestGateway([driver], { readinessWaitMs: 5000 });
  });
  afterEach(() => {
    for (const c of clients.splice(0)) c.close();
  });
  afterAll(() => t.close());

  it('answers requests on one keep-alive connection in order, as node:http answers the same requests', async () => {
    const c = client();
    c.write(req('/authz/a') + req('/authz/b', B_HEADERS) + req('/authz/c', '', 'GET', '22-web.team-a.localhost'));
    const [a, b, d] = [await c.read(), await c.read(), await c.read()];
    expect([a?.status, a?.headers['x-sandgate-upstream'], a?.headers['x-sandgate-sandbox'], a?.headers.connection, a?.headers['keep-alive']]).toEqual([200, '127.0.0.2:8000', 'team-a/web', 'keep-alive', 'timeout=65']);
    expect([b?.status, b?.headers['x-sandgate-upstream'], b?.headers['x-envoy-auth-headers-to-remove']]).toEqual([200, '127.0.0.2:8000', 'x-sandbox-id,x-sandbox-namespace,x-sandbox-port']);
    expect([d?.status, JSON.parse(d!.body).code, d?.headers['content-type'], d?.headers['x-sandgate-error']]).toEqual([403, 'port_not_allowed', 'application/json', 'port_not_allowed']);
    // The same three through node:http (HTTP/1.0 is never the front's): the same answers.
    for (const [answer, r] of [
      [a, req('/authz/a')],
      [b, req('/authz/b', B_HEADERS)],
      [d, req('/authz/c', '', 'GET', '22-web.team-a.localhost')],
    ] as const) {
      const h = client();
      h.write(r.replace('HTTP/1.1', 'HTTP/1.0'));
      const viaNode = await h.read();
      expect([viaNode?.status, viaNode?.body, viaNode?.headers['x-sandgate-upstream'], viaNode?.headers['x-envoy-auth-headers-to-remove'], viaNode?.headers['x-sandgate-error']]).toEqual([
        answer!.status,
        answer!.body,
        answer!.headers['x-sandgate-upstream'],
        answer!.headers['x-envoy-auth-headers-to-remove'],
        answer!.headers['x-sandgate-error'],
      ]);
    }
  });

  it('reads a head that arrives a byte at a time', async () => {
    const c = client();
    for (const ch of req('/authz/')) c.write(ch);
    expect((await c.read())?.headers['x-sandgate-upstream']).toBe('127.0.0.2:8000');
  });

  it('hands a connection to node:http at the first request it does not read, with every byte after it', async () => {
    const c = client();
    c.write(req('/authz/') + req('/healthz') + req('/authz/x'));
    const [a, b, d] = [await c.read(), await c.read(), await c.read()];
    expect([a?.status, a?.headers['x-sandgate-upstream']]).toEqual([200, '127.0.0.2:8000']);
    expect([b?.status, JSON.parse(b!.body)]).toEqual([200, { status: 'ok' }]);
    // node:http answers the authz request after it (as it always did): the same decision.
    expect([d?.status, d?.headers['x-sandgate-upstream']]).toEqual([200, '127.0.0.2:8000']);
  });

  it('a smuggling attempt (Content-Length with Transfer-Encoding) meets node:http, which refuses it', async () => {
    const c = client();
    c.write('POST /authz/ HTTP/1.1\r\nhost: ' + HOST + '\r\ncontent-length: 4\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\nGET /authz/ HTTP/1.1\r\nhost: 8000-web.team-a.localhost\r\n\r\n');
    const a = await c.read();
    expect(a?.status).toBe(400);
    expect(a?.headers['x-sandgate-upstream']).toBeUndefined();
    await c.closedByServer();
  });

  it.each([
    ['a bare LF inside a header', `GET /authz/ HTTP/1.1\r\nhost: ${HOST}\r\nx-a: 1\nx-sandbox-id: other\r\n\r\n`],
    ['a NUL in the Host', `GET /authz/ HTTP/1.1\r\nhost: ${HOST}\u0000.evil\r\n\r\n`],
    ['obs-fold', `GET /authz/ HTTP/1.1\r\nhost: ${HOST}\r\nx-a: 1\r\n x-sandbox-id: other\r\n\r\n`],
  ])('%s: node:http answers 400, nothing is decided', async (_w, raw) => {
    const c = client();
    c.write(raw);
    const a = await c.read();
    expect(a?.status).toBe(400);
    expect(a?.headers['x-sandgate-upstream']).toBeUndefined();
  });

  it(`a head past ${MAX_HEAD_BYTES} bytes goes to node:http (431), whether or not it is complete`, async () => {
    const big = 'x-big: ' + 'a'.repeat(MAX_HEAD_BYTES) + '\r\n';
    for (const raw of [req('/authz/', big), `GET /authz/ HTTP/1.1\r\nhost: ${HOST}\r\n${big}`]) {
      const c = client();
      c.write(raw);
      expect((await c.read())?.status).toBe(431);
    }
  });

  it('HEAD: the head only, with the length the body would have; the next request on the connection still reads', async () => {
    const c = client();
    c.write(req('/authz/', '', 'HEAD', '8000-nope.team-a.localhost') + req('/authz/'));
    const a = await c.read(true);
    expect([a?.status, Number(a?.headers['content-length']) > 0, a?.body]).toEqual([404, true, '']);
    expect((await c.read())?.headers['x-sandgate-upstream']).toBe('127.0.0.2:8000');
  });

  it('Connection: close and a client that half-closes: answered, then closed', async () => {
    const c = client();
    c.write(req('/authz/', 'connection: close\r\n') + req('/authz/'));
    const a = await c.read();
    expect([a?.status, a?.headers.connection]).toEqual([200, 'close']);
    await c.closedByServer();
    expect(await c.read()).toBeUndefined();
    const d = client();
    d.write(req('/authz/'));
    d.socket.end();
    expect((await d.read())?.status).toBe(200);
    await d.closedByServer();
  });

  it('a readiness wait holds the requests behind it on the connection; they are answered in order once the sandbox is Ready', async () => {
    const c = client();
    c.write(req('/authz/1', '', 'GET', '8000-later.team-a.localhost') + req('/authz/2'));
    await eventually(() => t.gw.view.waiters.size === 1, 5000, 'the first request to wait for readiness');
    expect(c.unread).toBe('');
    driver.upsert(snapshot({ name: 'later', uid: 'uid-later', resourceVersion: '2', sessionModel: 'none', endpoint: { kind: 'address', addresses: ['127.0.0.4'] } }));
    const [a, b] = [await c.read(), await c.read()];
    expect([a?.headers['x-sandgate-upstream'], b?.headers['x-sandgate-upstream']]).toEqual(['127.0.0.4:8000', '127.0.0.2:8000']);
  });

  it('a client gone during a readiness wait ends the wait (aborted), and the gateway goes on answering', async () => {
    const aborted = async () => {
      const text = await (await fetch(`${t.admin}/metrics`)).text();
      return Number(/^sandgate_edge_readiness_waits_total\{outcome="aborted"\} (\d+)/m.exec(text)?.[1] ?? 0);
    };
    const before = await aborted();
    driver.upsert(snapshot({ name: 'gone', uid: 'uid-gone', endpoint: { kind: 'address', addresses: ['127.0.0.5'] } }));
    const c = client();
    c.write(req('/authz/', '', 'GET', '8000-gone.team-a.localhost'));
    await eventually(() => t.gw.view.waiters.size === 1, 5000, 'the request to wait for readiness');
    c.close();
    await eventually(async () => (await aborted()) === before + 1, 5000, 'the wait to end as aborted');
    expect(t.gw.view.waiters.size).toBe(0);
    const d = client();
    d.write(req('/authz/'));
    expect((await d.read())?.status).toBe(200);
  });
});

/** An HttpAuthz that answers every request 200 with its Host, holds it when the Host is `hold`, and throws for `throw`. */
function echoAuthz(held: AuthzSink[]): HttpAuthz {
  return {
    handle: (_req, res) => res.writeHead(500).end(),
    handleParsed(_url: string, headers: HeaderMap, to: AuthzSink) {
      if (headers.host === 'throw') throw new Error('injected answer failure');
      if (headers.host === 'hold') held.push(to);
      else to.send({ status: 200, head: ['x-host', headers.host ?? '', 'content-length', '0'], body: '' });
    },
  };
}

describe('the front on its own server: idle connections, closing', () => {
  let server: Server;
  let front: AuthzFront;
  const held: AuthzSink[] = [];
  const logs = new MemoryLogSink();
  const log = createLogger('debug', logs);
  const sockets: Socket[] = [];
  /** Server-side sockets whose idle (keep-alive) timeout has fired. */
  const timedOut = new Set<Socket>();
  beforeAll(async () => {
    server = createServer((_req, res) => res.writeHead(204).end());
    server.keepAliveTimeout = 300;
    front = new AuthzFront(server, echoAuthz(held), log);
    // Added after the front's own listener, so each server-side socket's events reach the test after the front.
    server.on('connection', (s: Socket) => {
      sockets.push(s);
      s.on('timeout', () => timedOut.add(s));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));
  const port = () => (server.address() as AddressInfo).port;
  /** The server's end of `c`'s connection. */
  const serverSide = async (c: RawClient): Promise<Socket> => {
    await c.connected;
    return eventually(() => sockets.find((s) => s.remotePort === c.socket.localPort), 5000, 'the server to accept the connection');
  };
  const holding = (n: number) => eventually(() => held.length >= n, 5000, `${n} request(s) held by the answer`);

  it('refuses a server that already has another connection listener', () => {
    const s = createServer();
    s.on('connection', () => undefined);
    expect(() => new AuthzFront(s, echoAuthz([]), log)).toThrow(/connection listeners/);
  });

  it('a request held longer than the keep-alive timeout is not cut while it waits', async () => {
    const c = new RawClient(port());
    c.write(req('/authz/', '', 'GET', 'hold'));
    await holding(1);
    const s = await serverSide(c);
    // The keep-alive timeout fires on the waiting connection; the front's listener (called first) leaves it open.
    await eventually(() => timedOut.has(s), 5000, 'the keep-alive timeout to fire');
    expect(s.destroyed).toBe(false);
    held.shift()!.send({ status: 200, head: ['content-length', '0'], body: '' });
    expect((await c.read())?.status).toBe(200);
    // Idle after the answer: the keep-alive timeout closes it as any idle connection.
    await c.closedByServer();
  });

  it('an answer that throws: logged, that connection cut, the server goes on', async () => {
    const c = new RawClient(port());
    c.write(req('/authz/', '', 'GET', 'throw'));
    expect(await c.read()).toBeUndefined();
    expect(logs.find((l) => l.msg === 'answering a request read by the front failed')).toBeDefined();
    const d = new RawClient(port());
    d.write(req('/authz/', '', 'GET', 'a'));
    expect((await d.read())?.headers['x-host']).toBe('a');
    d.close();
  });

  it("closes a connection idle past the server's keepAliveTimeout", async () => {
    const c = new RawClient(port());
    c.write(req('/authz/', '', 'GET', 'a'));
    expect((await c.read())?.headers['keep-alive']).toBe('timeout=0');
    const s = await serverSide(c);
    await c.closedByServer();
    // Closed by the idle timeout, not at once after the answer: the timeout came first.
    expect(timedOut.has(s)).toBe(true);
  });

  it('a client that keeps sending while its request waits is read no further than one more head, then resumed', async () => {
    const c = new RawClient(port());
    c.write(req('/authz/', '', 'GET', 'hold'));
    await holding(1);
    const s = await serverSide(c);
    // About flow control, not the idle timeout: the 4,000 answers may take longer than 300 ms on a busy machine.
    s.setTimeout(0);
    const flood = req('/authz/', 'x-pad: ' + 'p'.repeat(1000) + '\r\n', 'GET', 'b');
    const count = 4000;
    c.write(flood.repeat(count));
    // Paused server side: the 4 MB stay in the client's socket buffer and the kernel's, not in the gateway,
    // which read at most one more head and a few socket reads past it.
    await eventually(() => s.isPaused(), 5000, 'the server side to pause reading');
    expect(s.bytesRead).toBeLessThan(512 * 1024);
    held.shift()!.send({ status: 200, head: ['content-length', '0'], body: '' });
    expect((await c.read())?.status).toBe(200);
    for (let i = 0; i < count; i++) expect((await c.read())?.headers['x-host']).toBe('b');
    c.close();
  });

  it('a value that would break the head is never written: the connection is cut instead', async () => {
    const c = new RawClient(port());
    c.write(req('/authz/', '', 'GET', 'hold'));
    await holding(1);
    held.shift()!.send({ status: 200, head: ['x-a', 'ok\r\nx-injected: 1', 'content-length', '0'], body: '' });
    expect(await c.read()).toBeUndefined();
  });

  it('closing: idle connections end at once, a busy one after its answer (which says Connection: close); closeAll cuts the rest', async () => {
    const idle = new RawClient(port());
    idle.write(req('/authz/', '', 'GET', 'a'));
    await idle.read();
    const busy = new RawClient(port());
    busy.write(req('/authz/', '', 'GET', 'hold'));
    const stuck = new RawClient(port());
    stuck.write(req('/authz/', '', 'GET', 'hold'));
    await holding(2);
    front.closeIdle();
    await idle.closedByServer();
    expect(busy.ended).toBe(false);
    held.shift()!.send({ status: 200, head: ['content-length', '0'], body: '' });
    expect((await busy.read())?.headers.connection).toBe('close');
    await busy.closedByServer();
    front.closeAll();
    await stuck.closedByServer();
    await eventually(() => front.size === 0, 5000, 'the front to forget every connection');
    front.closing = false;
  });
});
