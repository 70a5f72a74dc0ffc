import type { IncomingMessage, ServerResponse } from 'node:http';
import { once } from 'node:events';
import { connect, createServer as createNetServer, type AddressInfo, type Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { eventually } from '../helpers/eventually.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { startUpstream } from '../helpers/upstream.js';
import { all, RawClient, type Answer } from '../helpers/raw-http-client.js';

/**
 * The embedded proxy (`--proxy-port`) on the wire: raw bytes in, raw bytes out, asserted byte for byte.
 * Written against the proxy with node:http reading every request, before the proxy's front
 * (src/edge/proxy/proxy-front.ts) read bodyless GET and HEAD itself, and holding the front to the same
 * answers: framing, head lines, ordering on a keep-alive connection, and which malformed or ambiguous
 * requests are refused before anything reaches a sandbox. Where the behaviour looks odd it is pinned (a
 * change must be deliberate), and the test says so.
 */

/** What an upstream sandbox saw of one request. */
interface Hit {
  readonly method: string;
  readonly url: string;
  readonly httpVersion: string;
  /** node:http's rawHeaders (latin1: one character per byte) without undici's own Connection header. */
  readonly raw: string[];
  body: string;
  /** How the upstream's response closed: undefined while it is open. */
  outcome: 'finished' | 'closed unanswered' | undefined;
  /** The upstream request closed (its socket or stream went away). */
  reqClosed: boolean;
  readonly res: ServerResponse;
}

/** node:http's answer to a request its parser refuses: the proxy's clientError handler (lib/http-listen.ts). */
const BAD_REQUEST = 'HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n';
const HTTP_DATE = /^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/;
const UPSTREAM_DATE = 'Sun, 06 Nov 1994 08:49:37 GMT';

/** The head lines of `a`, each `Date` checked to be an HTTP-date and shown as `Date: <date>`. */
function head(a: Answer | undefined): string[] {
  expect(a, 'a complete response').toBeDefined();
  return a!.lines.map((l) => {
    if (!l.startsWith('Date: ')) return l;
    expect(l.slice(6)).toMatch(HTTP_DATE);
    return 'Date: <date>';
  });
}

/** Rejects when `p` has not settled within `ms`: turns a hang into a failure that says what was awaited. */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

function withoutConnection(raw: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() !== 'connection') out.push(raw[i]!, raw[i + 1]!);
  return out;
}

/**
 * The upstream sandbox's handler, by the first path segment:
 * `/len/<text>` 200 text with Content-Length; `/chunked/<a>/<b>` 200 with no length (chunked), in two
 * writes; `/status/<code>` that status, no body; `/echo` `<method> <body>` once the body ended;
 * `/hold` never answers; `/reset` a head with Content-Length 100000 and 1000 bytes of it; else 200 `ok`.
 */
function sandboxHandler(hits: Hit[]) {
  return (req: IncomingMessage, res: ServerResponse): void => {
    const hit: Hit = { method: req.method!, url: req.url!, httpVersion: req.httpVersion, raw: withoutConnection(req.rawHeaders), body: '', outcome: undefined, reqClosed: false, res };
    hits.push(hit);
    req.setEncoding('latin1');
    req.on('data', (c: string) => (hit.body += c));
    req.on('close', () => (hit.reqClosed = true));
    res.on('close', () => (hit.outcome = res.writableFinished ? 'finished' : 'closed unanswered'));
    const [, kind, ...rest] = req.url!.split('/');
    switch (kind) {
      case 'len': {
        const body = decodeURIComponent(rest.join('/'));
        res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': String(body.length) }).end(body, 'latin1');
        return;
      }
      case 'chunked':
        res.writeHead(200, { 'Content-Type': 'text/plain' });
        res.write(rest[0]);
        setImmediate(() => res.end(rest[1]));
        return;
      case 'status': {
        const code = Number(rest[0]);
        res.writeHead(code, code === 304 ? { ETag: '"v1"' } : {}).end();
        return;
      }
      case 'echo':
        req.on('end', () => {
          const body = `${req.method} ${hit.body}`;
          res.writeHead(200, { 'Content-Length': String(body.length) }).end(body, 'latin1');
        });
        return;
      case 'hold':
        return;
      case 'reset':
        res.writeHead(200, { 'Content-Length': '100000' });
        res.write(Buffer.alloc(1000, 0x61));
        return;
      default:
        res.writeHead(200, { 'Content-Length': '2' }).end('ok');
    }
  };
}

/**
 * A raw upstream: each response's bytes chosen here, by the request path (`routes`; else a plain 200 `ok`).
 * A route answering `close` ends the connection after it (a close-delimited body). Requests carry no body.
 */
async function rawUpstream(routes: Record<string, { bytes: string; close?: boolean }>) {
  const heads: string[] = [];
  const sockets = new Set<Socket>();
  const server = createNetServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    socket.setEncoding('latin1');
    let buf = '';
    socket.on('data', (d: string) => {
      buf += d;
      for (let i = buf.indexOf('\r\n\r\n'); i >= 0; i = buf.indexOf('\r\n\r\n')) {
        const h = buf.slice(0, i);
        buf = buf.slice(i + 4);
        heads.push(h);
        const route = routes[h.split(' ')[1]!] ?? { bytes: 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok' };
        if (route.close === true) socket.end(route.bytes, 'latin1');
        else socket.write(route.bytes, 'latin1');
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as AddressInfo).port,
    heads,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

const RAW_ROUTES: Record<string, { bytes: string; close?: boolean }> = {
  // A close-delimited body that itself looks like chunk framing and a head: only the close ends it.
  '/close': { bytes: 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nline one\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n\r\ncaf\u00e9', close: true },
  '/dated': {
    bytes:
      'HTTP/1.1 200 OK\r\nX-Case-Kept: A\r\nSet-Cookie: a=1\r\nConnection: keep-alive, X-Named\r\nDate: ' +
      UPSTREAM_DATE +
      '\r\nset-cookie: b=2\r\nKeep-Alive: timeout=5\r\nX-Named: gone\r\nProxy-Connection: keep-alive\r\nTrailer: X-T\r\nUpgrade: h2c\r\n' +
      'Proxy-Authenticate: Basic\r\nTE: trailers\r\nContent-Length: 2\r\n\r\nok',
  },
  '/undated': { bytes: 'HTTP/1.1 200 OK\r\nX-A: 1\r\nContent-Length: 2\r\n\r\nok' },
  '/latin': { bytes: 'HTTP/1.1 200 OK\r\nX-Latin: caf\u00e9 \u0080\u00ff\r\nContent-Length: 2\r\n\r\nok' },
  '/latin-name': { bytes: 'HTTP/1.1 200 OK\r\nX-\u00e9: 1\r\nContent-Length: 2\r\n\r\nok' },
  // Upgrades the upstream declines (chunked, with its own keep-alive) and accepts.
  '/tunnel-chunked': { bytes: 'HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer\r\nTransfer-Encoding: chunked\r\nKeep-Alive: timeout=5\r\nConnection: keep-alive\r\n\r\n3;x=1\r\nno!\r\n0\r\nX-T: 1\r\n\r\n' },
  '/switch': { bytes: 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n' },
};

describe('embedded proxy on the wire', () => {
  let t: TestGateway;
  let driver: TestDriver;
  let web: Awaited<ReturnType<typeof startUpstream>>;
  let other: Awaited<ReturnType<typeof startUpstream>>;
  /** Held requests go to their own upstream, so one arriving late never counts in another test's hits. */
  let slow: Awaited<ReturnType<typeof startUpstream>>;
  let raw: Awaited<ReturnType<typeof rawUpstream>>;
  const hits: Hit[] = [];
  const otherHits: Hit[] = [];
  const slowHits: Hit[] = [];
  const clients: RawClient[] = [];
  /** A sandbox host: `<port>-<name>.team-a.localhost` (the port defaults to the `web` upstream's). */
  const host = (name = 'web', port = web.port) => `${port}-${name}.team-a.localhost`;
  const get = (path: string, h = host(), extra = '', method = 'GET') => `${method} ${path} HTTP/1.1\r\nHost: ${h}\r\n${extra}\r\n`;
  const client = (): RawClient => {
    const c = new RawClient(t.gw.proxyPort!);
    clients.push(c);
    return c;
  };
  const urls = (): string[] => hits.map((h) => h.url);
  const sandbox = (name: string, uid: string, over: Parameters<typeof snapshot>[0] = {}) =>
    snapshot({ name, uid, sessionModel: 'none', endpoint: { kind: 'address', addresses: ['127.0.0.1'] }, ...over });

  beforeAll(async () => {
    web = await startUpstream(sandboxHandler(hits));
    other = await startUpstream(sandboxHandler(otherHits));
    slow = await startUpstream(sandboxHandler(slowHits));
    raw = await rawUpstream(RAW_ROUTES);
    driver = new TestDriver([
      sandbox('web', 'u-web'),
      sandbox('other', 'u-other'),
      // Supervisor-required without a session: in a readiness gap until a test makes it routable.
      snapshot({ name: 'later', uid: 'u-later', endpoint: { kind: 'address', addresses: ['127.0.0.1'] } }),
      snapshot({ name: 'gone', uid: 'u-gone', endpoint: { kind: 'address', addresses: ['127.0.0.1'] } }),
    ]);
    t = await startTestGateway([driver], { readinessWaitMs: 5000 });
  });
  beforeEach(() => {
    hits.length = 0;
    otherHits.length = 0;
    slowHits.length = 0;
    raw.heads.length = 0;
  });
  afterEach(() => {
    for (const c of clients.splice(0)) c.close();
  });
  afterAll(async () => {
    await t.close();
    await Promise.all([web.close(), other.close(), slow.close(), raw.close()]);
  });

  describe('keep-alive connections, framing', () => {
    it('answers GETs pipelined in one write in order, each body exact; a length-less upstream answer comes back chunk-framed', async () => {
      const c = client();
      c.write(get('/len/alpha') + get('/chunked/be/ta') + get('/len/gamma'));
      const [a, b, d] = [await c.read(), await c.read(), await c.read()];
      expect([a?.status, a?.framing, a?.body]).toEqual([200, 'length', 'alpha']);
      expect(head(a)).toEqual(['Content-Type: text/plain', 'Content-Length: 5', 'Date: <date>', 'Connection: keep-alive', 'Keep-Alive: timeout=65']);
      expect([b?.status, b?.framing, b?.body, b?.headers['content-length']]).toEqual([200, 'chunked', 'beta', undefined]);
      expect(head(b)).toEqual(['Content-Type: text/plain', 'Date: <date>', 'Connection: keep-alive', 'Keep-Alive: timeout=65', 'Transfer-Encoding: chunked']);
      expect(b!.wire.endsWith('\r\n0\r\n\r\n')).toBe(true);
      expect([d?.status, d?.body]).toEqual([200, 'gamma']);
      expect(c.unread).toBe('');
      expect(c.ended).toBe(false);
      expect(urls().sort()).toEqual(['/chunked/be/ta', '/len/alpha', '/len/gamma']);
    });

    it('reads a request head that arrives one byte at a time', async () => {
      const c = client();
      await c.connected;
      for (const ch of get('/len/bytewise', host(), 'Accept: */*\r\n')) {
        c.write(ch);
        await new Promise((r) => setImmediate(r));
      }
      const a = await c.read();
      expect([a?.status, a?.body]).toEqual([200, 'bytewise']);
      expect(hits.map((h) => [h.url, h.raw[0], h.raw[1], h.raw[2], h.raw[3]])).toEqual([['/len/bytewise', 'host', host(), 'Accept', '*/*']]);
    });

    it('skips empty lines before and between requests', async () => {
      const c = client();
      c.write('\r\n\r\n' + get('/len/first') + '\r\n' + get('/len/second'));
      expect([(await c.read())?.body, (await c.read())?.body]).toEqual(['first', 'second']);
    });

    it("HEAD: the head only, with the upstream's Content-Length; the next request on the connection is still read", async () => {
      const c = client();
      c.write(get('/len/hello', host(), '', 'HEAD') + get('/len/next'));
      const a = await c.read(true);
      expect([a?.status, a?.framing]).toEqual([200, 'none']);
      expect(head(a)).toEqual(['Content-Type: text/plain', 'Content-Length: 5', 'Date: <date>', 'Connection: keep-alive', 'Keep-Alive: timeout=65']);
      const b = await c.read();
      expect([b?.status, b?.body]).toEqual([200, 'next']);
      expect(c.unread).toBe('');
      expect(hits.map((h) => h.method).sort()).toEqual(['GET', 'HEAD']);
    });

    it('upstream 204 and 304: no body bytes, and the next request on the connection is fine', async () => {
      const c = client();
      c.write(get('/status/204') + get('/status/304') + get('/len/after'));
      const [a, b, d] = [await c.read(), await c.read(), await c.read()];
      expect(a?.statusLine).toBe('HTTP/1.1 204 No Content');
      expect(head(a)).toEqual(['Date: <date>', 'Connection: keep-alive', 'Keep-Alive: timeout=65']);
      expect(b?.statusLine).toBe('HTTP/1.1 304 Not Modified');
      expect(head(b)).toEqual(['ETag: "v1"', 'Date: <date>', 'Connection: keep-alive', 'Keep-Alive: timeout=65']);
      // Had either carried a body byte (a chunk terminator, say), this answer would not parse.
      expect([d?.statusLine, d?.body]).toEqual(['HTTP/1.1 200 OK', 'after']);
      expect(c.unread).toBe('');
    });

    it('a close-delimited upstream body (HTTP/1.1, Connection: close, no length) reaches the client exact, chunk-framed on a connection kept alive', async () => {
      const c = client();
      c.write(get('/close', host('web', raw.port)) + get('/len/after'));
      const a = await c.read();
      expect([a?.status, a?.framing, a?.body]).toEqual([200, 'chunked', 'line one\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n\r\ncaf\u00e9']);
      expect(head(a)).toEqual(['Content-Type: text/plain', 'Date: <date>', 'Connection: keep-alive', 'Keep-Alive: timeout=65', 'Transfer-Encoding: chunked']);
      expect((await c.read())?.body).toBe('after');
      expect(c.ended).toBe(false);
    });
  });

  describe('the response head', () => {
    it("keeps the upstream's Date (once), header case, order and repeats; drops hop-by-hop and Connection-named headers; adds Connection: keep-alive and Keep-Alive", async () => {
      const c = client();
      c.write(get('/dated', host('web', raw.port)) + get('/undated', host('web', raw.port)));
      const a = await c.read();
      expect([a?.status, a?.body]).toEqual([200, 'ok']);
      expect(a?.lines).toEqual(['X-Case-Kept: A', 'Set-Cookie: a=1', `Date: ${UPSTREAM_DATE}`, 'set-cookie: b=2', 'Content-Length: 2', 'Connection: keep-alive', 'Keep-Alive: timeout=65']);
      expect(all(a!, 'set-cookie')).toEqual(['a=1', 'b=2']);
      // Without a Date from the upstream, the proxy writes exactly one of its own.
      const b = await c.read();
      expect(head(b)).toEqual(['X-A: 1', 'Content-Length: 2', 'Date: <date>', 'Connection: keep-alive', 'Keep-Alive: timeout=65']);
    });

    it('latin1 bytes in an upstream response header value reach the client byte-exact; in a header name undici refuses the response (502 upstream_error)', async () => {
      const c = client();
      c.write(get('/latin', host('web', raw.port)) + get('/latin-name', host('web', raw.port)));
      const a = await c.read();
      expect(Buffer.from(all(a!, 'x-latin')[0]!, 'latin1')).toEqual(Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x20, 0x80, 0xff]));
      const b = await c.read();
      expect([b?.status, JSON.parse(b!.body).code, b?.headers.connection]).toEqual([502, 'upstream_error', 'keep-alive']);
    });
  });

  describe('closing', () => {
    it('Connection: close on the request: answered with Connection: close, then the server closes', async () => {
      const c = client();
      c.write(get('/len/bye', host(), 'Connection: close\r\n'));
      const a = await c.read();
      expect([a?.status, a?.body]).toEqual([200, 'bye']);
      expect(head(a)).toEqual(['Content-Type: text/plain', 'Content-Length: 3', 'Date: <date>', 'Connection: close']);
      await within(c.closedByServer(), 5000, 'the server to close');
      expect(c.unread).toBe('');
    });

    it('a request pipelined behind Connection: close is never read: the first is answered with Connection: close, then the connection closes', async () => {
      const c = client();
      c.write(get('/len/bye', host(), 'Connection: close\r\n') + get('/len/behind'));
      const a = await c.read();
      expect([a?.status, a?.body, a?.headers.connection]).toEqual([200, 'bye', 'close']);
      await within(c.closedByServer(), 5000, 'the server to close');
      expect(c.unread).toBe('');
      expect(urls()).toEqual(['/len/bye']);
    });

    it('a client that half-closes right after a complete request is not answered: as node:http (httpAllowHalfOpen false), the proxy ends the connection at the FIN', async () => {
      const c = client();
      // The upstream never answers: the connection can only end because the proxy ends it on the FIN.
      c.write(get('/hold', host('web', slow.port)));
      c.socket.end();
      await within(c.closedByServer(), 5000, 'the server to close the half-closed connection');
      expect(c.unread).toBe('');
      for (const h of slowHits) await eventually(() => h.outcome === 'closed unanswered', 5000, 'the held request to close');
    });

    it('HTTP/1.0 without Host: the typed 400 invalid_route with its length; with Host: forwarded, answered with Connection: close', async () => {
      const c = client();
      c.write('GET /len/x HTTP/1.0\r\nAccept: */*\r\n\r\n');
      await within(c.closedByServer(), 5000, 'the server to close');
      const a = await c.read();
      expect(a?.statusLine).toBe('HTTP/1.1 400 Bad Request');
      expect(head(a)).toEqual(['content-type: application/json', 'x-sandgate-error: invalid_route', `content-length: ${a!.body.length}`, 'Date: <date>', 'Connection: close']);
      expect(a?.framing).toBe('length');
      expect(JSON.parse(a!.body)).toEqual({ code: 'invalid_route', message: 'The request names no sandbox: use a sandbox host, the x-sandbox-* headers or the E2B headers' });
      const d = client();
      d.write(`GET /len/ten HTTP/1.0\r\nHost: ${host()}\r\n\r\n`);
      const b = await d.read();
      expect([b?.statusLine, b?.body]).toEqual(['HTTP/1.1 200 OK', 'ten']);
      expect(head(b)).toEqual(['Content-Type: text/plain', 'Content-Length: 3', 'Date: <date>', 'Connection: close']);
      await within(d.closedByServer(), 5000, 'the server to close');
      expect(urls()).toEqual(['/len/ten']);
      expect(hits[0]!.httpVersion).toBe('1.1');
    });

    it('HTTP/1.0 with Connection: keep-alive is kept alive; the next HTTP/1.0 request without it is answered, then closed', async () => {
      const c = client();
      c.write(`GET /len/one HTTP/1.0\r\nHost: ${host()}\r\nConnection: keep-alive\r\n\r\nGET /len/two HTTP/1.0\r\nHost: ${host()}\r\n\r\n`);
      const a = await c.read();
      expect([a?.body, a?.headers.connection, a?.headers['keep-alive']]).toEqual(['one', 'keep-alive', 'timeout=65']);
      const b = await c.read();
      expect([b?.body, b?.headers.connection]).toEqual(['two', 'close']);
      await within(c.closedByServer(), 5000, 'the server to close');
    });

    // The idle close itself is the shared front's (src/edge/http-front.ts), shown on a server with a short
    // keepAliveTimeout in test/edge/authz-front.test.ts; the proxy's server keeps 65 s (createStreamingServer),
    // advertised as Keep-Alive: timeout=65 above.
  });

  describe('refused before any sandbox sees them', () => {
    /** Sends `bytes` on a new connection: node:http answers its bare 400 and closes; no upstream saw anything. */
    async function refused(bytes: string, answer = BAD_REQUEST): Promise<void> {
      const c = client();
      c.write(bytes);
      await within(c.closedByServer(), 5000, 'the server to close');
      expect(c.unread).toBe(answer);
      expect([hits.length, otherHits.length]).toEqual([0, 0]);
    }

    it.each([
      ['Content-Length with Transfer-Encoding (POST)', 'POST /echo HTTP/1.1\r\nHost: {H}\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /len/smuggled HTTP/1.1\r\nHost: {H}\r\n\r\n'],
      ['Content-Length with Transfer-Encoding (GET)', 'GET /len/a HTTP/1.1\r\nHost: {H}\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'],
      ['two different Content-Length values', 'POST /echo HTTP/1.1\r\nHost: {H}\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab'],
      ['two equal Content-Length lines', 'POST /echo HTTP/1.1\r\nHost: {H}\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab'],
      ['a Content-Length list', 'POST /echo HTTP/1.1\r\nHost: {H}\r\nContent-Length: 2, 2\r\n\r\nab'],
      ['a signed Content-Length', 'POST /echo HTTP/1.1\r\nHost: {H}\r\nContent-Length: +1\r\n\r\na'],
      ['Transfer-Encoding not ending in chunked', 'POST /echo HTTP/1.1\r\nHost: {H}\r\nTransfer-Encoding: gzip\r\n\r\n'],
      ['Transfer-Encoding: chunked, chunked', 'POST /echo HTTP/1.1\r\nHost: {H}\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n'],
      ['obs-fold (a line starting with a space)', 'GET /len/a HTTP/1.1\r\nHost: {H}\r\nX-A: 1\r\n X-Sandbox-Id: other\r\n\r\n'],
      ['obs-fold (a line starting with a tab)', 'GET /len/a HTTP/1.1\r\nHost: {H}\r\nX-A: 1\r\n\tcontinued\r\n\r\n'],
      ['bare LF line endings throughout', 'GET /len/a HTTP/1.1\nHost: {H}\n\n'],
      ['a bare LF inside the head', 'GET /len/a HTTP/1.1\r\nHost: {H}\r\nX-A: 1\nX-Sandbox-Id: other\r\n\r\n'],
      ['a bare CR inside a value', 'GET /len/a HTTP/1.1\r\nHost: {H}\r\nX-A: 1\rX-B: 2\r\n\r\n'],
      ['a space between a header name and its colon (Host)', 'GET /len/a HTTP/1.1\r\nHost : {H}\r\n\r\n'],
      ['a space between a header name and its colon (another header)', 'GET /len/a HTTP/1.1\r\nHost: {H}\r\nX-A : 1\r\n\r\n'],
      ['a NUL in a header value', 'GET /len/a HTTP/1.1\r\nHost: {H}\r\nX-A: a\u0000b\r\n\r\n'],
      ['a NUL in the Host value', 'GET /len/a HTTP/1.1\r\nHost: {H}\u0000.evil\r\n\r\n'],
      ['a 0x01 control byte in a header value', 'GET /len/a HTTP/1.1\r\nHost: {H}\r\nX-A: a\u0001b\r\n\r\n'],
      ['a DEL (0x7f) in a header value', 'GET /len/a HTTP/1.1\r\nHost: {H}\r\nX-A: a\u007fb\r\n\r\n'],
      ['an empty header name', 'GET /len/a HTTP/1.1\r\nHost: {H}\r\n: x\r\n\r\n'],
      ['a non-token character in a header name', 'GET /len/a HTTP/1.1\r\nHost: {H}\r\nX(A): x\r\n\r\n'],
      ['a latin1 byte (0xe9) in a header name', 'GET /len/a HTTP/1.1\r\nHost: {H}\r\nX-\u00e9: 1\r\n\r\n'],
      ['an invalid method token', 'G@T /len/a HTTP/1.1\r\nHost: {H}\r\n\r\n'],
      ['a token method node:http does not know', 'FOO /len/a HTTP/1.1\r\nHost: {H}\r\n\r\n'],
      ['a lower-case method', 'get /len/a HTTP/1.1\r\nHost: {H}\r\n\r\n'],
      ['HTTP/1.2', 'GET /len/a HTTP/1.2\r\nHost: {H}\r\n\r\n'],
      ['a latin1 byte in the target', 'GET /len/caf\u00e9 HTTP/1.1\r\nHost: {H}\r\n\r\n'],
    ])('%s: node:http answers its bare 400 and closes', async (_what, bytes) => {
      await refused(bytes.replaceAll('{H}', host()));
    });

    it('the HTTP/2 connection preface: the port answers as an HTTP/2 server (its SETTINGS frame), not with a 400', async () => {
      const s = connect(t.gw.proxyPort!, '127.0.0.1');
      try {
        s.write('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00', 'latin1');
        const [first] = (await once(s, 'data')) as [Buffer];
        // A frame header: 24-bit length, type 0x4 (SETTINGS), flags, stream 0 (RFC 9113 §6.5).
        expect(first[3]).toBe(0x04);
        expect(first.subarray(0, 8).toString('latin1')).not.toMatch(/^HTTP\//);
      } finally {
        s.destroy();
      }
    });

    it('the HTTP/2 preface followed by bytes that are no HTTP/2 frames: the connection is closed (GOAWAY), and the port serves on', async () => {
      const s = connect(t.gw.proxyPort!, '127.0.0.1');
      s.on('error', () => undefined);
      s.resume();
      s.write('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n' + 'z'.repeat(64), 'latin1');
      await within(once(s, 'close'), 5000, 'the server to close');
      const c = client();
      c.write(get('/len/after'));
      expect((await c.read())?.body).toBe('after');
      c.close();
    });

    it('a malformed request pipelined behind a good GET: the GET is answered first, then the bare 400, and the connection closes', async () => {
      const c = client();
      c.write(get('/len/good') + 'GET /len/b HTTP/1.1\r\nHost : x\r\n\r\n');
      expect((await c.read())?.body).toBe('good');
      await within(c.closedByServer(), 5000, 'the server to close');
      expect(c.unread).toBe(BAD_REQUEST);
      expect(urls()).toEqual(['/len/good']);
    });

    it('a malformed request pipelined behind a request node:http reads (a POST with a body): no 400 ahead of its answer; it is answered, then the connection closes', async () => {
      const c = client();
      c.write(`POST /echo HTTP/1.1\r\nHost: ${host()}\r\nContent-Length: 5\r\n\r\nhello` + 'GET /len/b HTTP/1.1\r\nHost : x\r\n\r\n');
      const a = await c.read();
      expect([a?.status, a?.body]).toEqual([200, 'POST hello']);
      await within(c.closedByServer(), 5000, 'the server to close');
      expect(c.unread).toBe('');
      expect(urls()).toEqual(['/echo']);
    });

    // The HTTP/1.0 request above as HTTP/1.1: the same bytes but for the version, and another answer (RFC 9112
    // §3.2 makes Host mandatory in 1.1), so each has its own expectations.
    it('HTTP/1.1 without Host: node:http own 400 (chunked, empty), then closed', async () => {
      const c = client();
      c.write('GET /len/a HTTP/1.1\r\nAccept: */*\r\n\r\n');
      await within(c.closedByServer(), 5000, 'the server to close');
      const a = await c.read();
      expect(a?.statusLine).toBe('HTTP/1.1 400 Bad Request');
      expect(head(a)).toEqual(['Connection: close', 'Date: <date>', 'Transfer-Encoding: chunked']);
      expect([a?.wire, c.unread]).toEqual(['0\r\n\r\n', '']);
      expect(hits.length).toBe(0);
    });

    it('a request head over 16 KiB is refused 431, complete or not', async () => {
      const big = 'X-Big: ' + 'a'.repeat(16 * 1024) + '\r\n';
      const tooLarge = 'HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n';
      await refused(get('/len/a', host(), big), tooLarge);
      await refused(`GET /len/a HTTP/1.1\r\nHost: ${host()}\r\n${big}`, tooLarge);
    });

    it('a request head just under 16 KiB is read and forwarded', async () => {
      const c = client();
      c.write(get('/len/big', host(), 'X-Big: ' + 'a'.repeat(15 * 1024) + '\r\n'));
      expect((await c.read())?.body).toBe('big');
      expect(hits[0]!.raw.slice(2, 4)).toEqual(['X-Big', 'a'.repeat(15 * 1024)]);
    });

    it('CONNECT to an authority that names no tunnel: the typed 404 sandbox_not_found, then closed', async () => {
      const c = client();
      c.write(`CONNECT ${host()}:443 HTTP/1.1\r\nHost: ${host()}:443\r\n\r\n`);
      await within(c.closedByServer(), 5000, 'the server to close');
      expect(c.unread).toMatch(/^HTTP\/1\.1 404 sandbox_not_found\r\n/);
      expect(c.unread).toContain('"code":"sandbox_not_found"');
      expect(hits.length).toBe(0);
    });
  });

  describe('accepted although odd', () => {
    it('two spaces in the request line (before or after the target): node:http accepts it; forwarded as the single-spaced request', async () => {
      const c = client();
      c.write(`GET  /len/two HTTP/1.1\r\nHost: ${host()}\r\n\r\nGET /len/three  HTTP/1.1\r\nHost: ${host()}\r\n\r\n`);
      const [a, b] = [await c.read(), await c.read()];
      expect([a?.status, a?.body, b?.status, b?.body]).toEqual([200, 'two', 200, 'three']);
      expect(urls().sort()).toEqual(['/len/three', '/len/two']);
    });

    it('HTTP/2.0 and HTTP/0.9 in a request line: node:http accepts them; forwarded as HTTP/1.1, answered with Connection: close, then closed', async () => {
      for (const version of ['HTTP/2.0', 'HTTP/0.9']) {
        const c = client();
        c.write(`GET /len/v HTTP/${version.slice(5)}\r\nHost: ${host()}\r\n\r\n`);
        const a = await c.read();
        expect([a?.statusLine, a?.body]).toEqual(['HTTP/1.1 200 OK', 'v']);
        expect(head(a)).toEqual(['Content-Type: text/plain', 'Content-Length: 1', 'Date: <date>', 'Connection: close']);
        await within(c.closedByServer(), 5000, 'the server to close');
      }
      expect(hits.map((h) => [h.url, h.httpVersion])).toEqual([
        ['/len/v', '1.1'],
        ['/len/v', '1.1'],
      ]);
    });

    it('the target goes upstream byte-exact: dot segments, percent-encoding, query, even a fragment', async () => {
      const c = client();
      const target = '/p/a/./b/../c%2F%zz?x=1&y=%20&z=/..;q#frag';
      c.write(get(target));
      expect((await c.read())?.body).toBe('ok');
      expect(urls()).toEqual([target]);
    });

    it('header names in any case and values with blanks around them: Host routes case-insensitively, blanks trimmed', async () => {
      const c = client();
      c.write(`GET /len/a HTTP/1.1\r\nhOsT: \t ${host()} \t\r\nX-Empty:\r\nX-Tight:b\r\n\r\nGET /len/b HTTP/1.1\r\nHOST: ${host().toUpperCase()}\r\n\r\n`);
      expect([(await c.read())?.body, (await c.read())?.body]).toEqual(['a', 'b']);
      const a = hits.find((h) => h.url === '/len/a')!;
      expect(a.raw).toEqual(['host', host(), 'X-Empty', '', 'X-Tight', 'b', 'x-forwarded-for', '127.0.0.1', 'x-forwarded-proto', 'http', 'x-forwarded-host', host()]);
      expect(hits.find((h) => h.url === '/len/b')!.raw.slice(0, 2)).toEqual(['host', host().toUpperCase()]);
    });

    it('Expect: 100-continue (as curl sends for uploads): node:http sends 100 Continue, the body follows and reaches the sandbox without the Expect header', async () => {
      const c = client();
      c.write(`POST /echo HTTP/1.1\r\nHost: ${host()}\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n`);
      expect((await c.read())?.statusLine).toBe('HTTP/1.1 100 Continue');
      c.write('hello');
      const a = await c.read();
      expect([a?.status, a?.body]).toEqual([200, 'POST hello']);
      expect(hits.map((h) => [h.url, h.raw.some((v) => /^expect$/i.test(v))])).toEqual([['/echo', false]]);
    });

    it('an Expect other than 100-continue: node:http answers 417 itself, the connection kept', async () => {
      const c = client();
      c.write(get('/len/a', host(), 'Expect: foo\r\n') + get('/len/after'));
      const a = await c.read();
      expect(a?.statusLine).toBe('HTTP/1.1 417 Expectation Failed');
      expect(head(a)).toEqual(['Date: <date>', 'Connection: keep-alive', 'Keep-Alive: timeout=65', 'Transfer-Encoding: chunked']);
      expect((await c.read())?.body).toBe('after');
      expect(urls()).toEqual(['/len/after']);
    });

    it('asterisk-form (OPTIONS *): the typed 400 invalid_route on a connection kept alive, for a routable sandbox or not; no sandbox reached', async () => {
      for (const h of [host(), host('nope')]) {
        const c = client();
        c.write(`OPTIONS * HTTP/1.1\r\nHost: ${h}\r\n\r\n` + get('/len/after'));
        const a = await c.read();
        expect([a?.status, JSON.parse(a!.body)]).toEqual([400, { code: 'invalid_route', message: 'The embedded proxy forwards no asterisk-form request (OPTIONS *)' }]);
        expect((await c.read())?.body).toBe('after');
      }
      expect(urls()).toEqual(['/len/after', '/len/after']);
    });
  });

  describe('bodies', () => {
    it('a GET with a Content-Length body and a POST with a chunked body reach the upstream exactly; the GET pipelined behind each is answered after it', async () => {
      const c = client();
      c.write(
        get('/echo', host(), 'Content-Length: 5\r\n') +
          'hello' +
          get('/len/after1') +
          get('/echo', host(), 'Transfer-Encoding: chunked\r\n', 'POST') +
          '3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n' +
          get('/len/after2'),
      );
      const got = [];
      for (let i = 0; i < 4; i++) got.push((await c.read())?.body);
      expect(got).toEqual(['GET hello', 'after1', 'POST abcde', 'after2']);
      const post = hits.find((h) => h.method === 'POST')!;
      expect(post.body).toBe('abcde');
      // The request's framing is the proxy's (undici's) own: Transfer-Encoding is hop-by-hop, the trailer is not carried.
      expect(post.raw.some((v) => /transfer-encoding|x-trailer/i.test(v))).toBe(false);
      expect(hits.find((h) => h.method === 'GET' && h.url === '/echo')!.body).toBe('hello');
    });
  });

  describe('routing ambiguities', () => {
    it('two Host headers naming two different sandboxes: the typed 400 invalid_route on a connection kept alive; neither sandbox reached', async () => {
      const c = client();
      c.write(`GET /len/dup HTTP/1.1\r\nHost: ${host()}\r\nHost: ${host('other', other.port)}\r\n\r\n` + get('/len/after'));
      const a = await c.read();
      expect(a?.statusLine).toBe('HTTP/1.1 400 Bad Request');
      expect(head(a)).toEqual(['content-type: application/json', 'x-sandgate-error: invalid_route', `content-length: ${a!.body.length}`, 'Date: <date>', 'Connection: keep-alive', 'Keep-Alive: timeout=65']);
      expect(JSON.parse(a!.body)).toEqual({ code: 'invalid_route', message: 'The request has more than one Host header' });
      expect((await c.read())?.body).toBe('after');
      expect([urls(), otherHits.length]).toEqual([['/len/after'], 0]);
    });

    it('an absolute-form target whose authority differs from Host: the typed 400 invalid_route, neither sandbox reached; when they agree, routed to that sandbox in origin-form', async () => {
      const c = client();
      c.write(`GET http://${host()}/len/abs HTTP/1.1\r\nHost: ${host('other', other.port)}\r\n\r\n`);
      const a = await c.read();
      expect([a?.status, JSON.parse(a!.body)]).toEqual([400, { code: 'invalid_route', message: 'The Host header does not match the authority of the absolute-form request target' }]);
      expect([hits.length, otherHits.length]).toEqual([0, 0]);
      c.write(`GET http://${host('other', other.port)}/len/abs?q=1 HTTP/1.1\r\nHost: ${host('other', other.port)}\r\n\r\n`);
      expect((await c.read())?.body).toBe('abs?q=1');
      expect([hits.length, otherHits.map((h) => [h.url, h.raw[1]])]).toEqual([0, [['/len/abs?q=1', host('other', other.port)]]]);
      // Absolute-form without Host is an HTTP/1.1 request without Host: node:http's own 400.
      c.write(`GET http://${host()}/len/abs HTTP/1.1\r\n\r\n`);
      expect((await c.read())?.status).toBe(400);
      await within(c.closedByServer(), 5000, 'the server to close');
      expect(hits.length).toBe(0);
    });

    it('an Upgrade the upstream declines: its answer reaches the client with Connection: close, then the connection closes; nothing the client sent after the handshake reaches any sandbox', async () => {
      const smuggled = `GET /next HTTP/1.1\r\nHost: ${host('other', other.port)}\r\nX-Sandgate-Upstream: 10.6.6.6:1\r\nX-Forwarded-For: 203.0.113.66\r\n\r\n`;
      const handshake = `GET /tunnel HTTP/1.1\r\nHost: ${host('web', raw.port)}\r\nUpgrade: h2c\r\nConnection: Upgrade\r\nx-forwarded-for: 127.0.0.1\r\nx-forwarded-proto: http\r\nx-forwarded-host: ${host('web', raw.port)}`;
      // Pipelined with the handshake, and written after the answer.
      const c = client();
      c.write(get('/tunnel', host('web', raw.port), 'Upgrade: h2c\r\nConnection: Upgrade\r\n') + smuggled);
      const a = await c.read();
      expect([a?.statusLine, a?.lines, a?.body]).toEqual(['HTTP/1.1 200 OK', ['Content-Length: 2', 'Connection: close'], 'ok']);
      c.write(smuggled);
      await within(c.closedByServer(), 5000, 'the server to close');
      expect(c.unread).toBe('');
      // A chunked answer with the upstream's own keep-alive: hop-by-hop headers dropped, the chunks (and trailer) as sent.
      const d = client();
      d.write(get('/tunnel-chunked', host('web', raw.port), 'Upgrade: h2c\r\nConnection: Upgrade\r\n'));
      const b = await d.read();
      expect([b?.statusLine, b?.lines, b?.body, b?.wire]).toEqual(['HTTP/1.1 401 Unauthorized', ['WWW-Authenticate: Bearer', 'Transfer-Encoding: chunked', 'Connection: close'], 'no!', '3;x=1\r\nno!\r\n0\r\nX-T: 1\r\n\r\n']);
      d.write(smuggled);
      await within(d.closedByServer(), 5000, 'the server to close');
      expect(raw.heads).toEqual([handshake, handshake.replace('/tunnel', '/tunnel-chunked')]);
      expect(otherHits.length).toBe(0);
    });

    it('an Upgrade the upstream accepts: the 101, then the bytes sent with the handshake reach the upstream after it, then both ways spliced', async () => {
      const c = client();
      c.write(get('/switch', host('web', raw.port), 'Upgrade: h2c\r\nConnection: Upgrade\r\n') + 'EARLY /early HTTP/1.1\r\n\r\n');
      expect((await c.read())?.statusLine).toBe('HTTP/1.1 101 Switching Protocols');
      expect((await c.read())?.body).toBe('ok');
      c.write('LATER /later HTTP/1.1\r\n\r\n');
      expect((await c.read())?.body).toBe('ok');
      expect(raw.heads.slice(1)).toEqual(['EARLY /early HTTP/1.1', 'LATER /later HTTP/1.1']);
    });

    it('a denial (unknown sandbox → 404 with the typed body) keeps the connection; the next request on it is answered normally', async () => {
      const c = client();
      c.write(get('/len/x', host('nope')) + get('/len/good'));
      const a = await c.read();
      expect(a?.statusLine).toBe('HTTP/1.1 404 Not Found');
      expect(head(a)).toEqual(['content-type: application/json', 'x-sandgate-error: sandbox_not_found', `content-length: ${a!.body.length}`, 'Date: <date>', 'Connection: keep-alive', 'Keep-Alive: timeout=65']);
      expect(JSON.parse(a!.body)).toEqual({ code: 'sandbox_not_found', message: 'No such sandbox' });
      const b = await c.read();
      expect([b?.status, b?.body]).toEqual([200, 'good']);
      expect(urls()).toEqual(['/len/good']);
    });
  });

  describe('readiness waits and clients that leave', () => {
    const abortedWaits = async (): Promise<number> => {
      const text = await (await fetch(`${t.admin}/metrics`)).text();
      return Number(/^sandgate_edge_readiness_waits_total\{outcome="aborted"\} (\d+)/m.exec(text)?.[1] ?? 0);
    };

    it('a readiness wait holds its request and the one pipelined behind it (requests on a connection are read one at a time); both are answered in order once the sandbox is Ready', async () => {
      const c = client();
      c.write(get('/len/first', host('later')) + get('/len/second'));
      await eventually(() => t.gw.view.waiters.size === 1, 5000, 'the first request to wait');
      expect([c.unread, urls()]).toEqual(['', []]);
      driver.upsert(sandbox('later', 'u-later', { resourceVersion: '2' }));
      const [a, b] = [await c.read(), await c.read()];
      expect([a?.body, b?.body]).toEqual(['first', 'second']);
      expect(urls()).toEqual(['/len/first', '/len/second']);
    });

    it('a client gone during a readiness wait ends the wait (aborted); the gateway goes on serving other connections', async () => {
      const before = await abortedWaits();
      const c = client();
      c.write(get('/len/x', host('gone')));
      await eventually(() => t.gw.view.waiters.size === 1, 5000, 'the request to wait');
      c.close();
      await eventually(() => t.gw.view.waiters.size === 0, 5000, 'the wait to end');
      await eventually(async () => (await abortedWaits()) === before + 1, 5000, 'the aborted wait to be counted');
      const d = client();
      d.write(get('/len/still'));
      expect((await d.read())?.body).toBe('still');
      expect(urls()).toEqual(['/len/still']);
    });

    it('a client that disconnects before the upstream answered the head: the upstream sees its request closed unanswered', async () => {
      const c = client();
      c.write(get('/hold', host('web', slow.port)));
      const held = await eventually(() => slowHits.find((h) => h.url === '/hold'), 5000, 'the request to reach the upstream');
      expect(held.outcome).toBeUndefined();
      c.close();
      await eventually(() => held.outcome === 'closed unanswered' && held.reqClosed, 5000, 'the upstream to see the request go');
    });

    it('an upstream that resets mid-body (after the head and part of a Content-Length body): the client connection is closed without a complete body', async () => {
      const c = client();
      c.write(get('/reset'));
      await c.until((s) => s.indexOf('\r\n\r\n') >= 0 && s.length > s.indexOf('\r\n\r\n') + 4);
      const h = await eventually(() => hits.find((x) => x.url === '/reset'), 5000, 'the upstream to see the request');
      h.res.socket!.destroy();
      await within(c.closedByServer(), 5000, 'the proxy to close the client connection');
      expect(await c.read()).toBeUndefined();
      const got = c.unread;
      expect(got.startsWith('HTTP/1.1 200 OK\r\n')).toBe(true);
      expect(got).toContain('\r\nContent-Length: 100000\r\n');
      const body = got.slice(got.indexOf('\r\n\r\n') + 4);
      expect(body.length).toBeGreaterThan(0);
      expect(body.length).toBeLessThan(100000);
    });
  });

  describe('request headers', () => {
    it('latin1 bytes (0x80–0xff) in a request header value reach the upstream byte-exact', async () => {
      const c = client();
      c.write(get('/len/l', host(), 'X-Latin: caf\u00e9 \u0080\u00ff\r\n'));
      expect((await c.read())?.status).toBe(200);
      const i = hits[0]!.raw.indexOf('X-Latin');
      expect(Buffer.from(hits[0]!.raw[i + 1]!, 'latin1')).toEqual(Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x20, 0x80, 0xff]));
    });

    it('150 distinct request headers are all forwarded, in order, names as sent', async () => {
      const names = Array.from({ length: 150 }, (_, i) => [`X-H-${i}`, `v${i}`] as const);
      const c = client();
      c.write(get('/len/many', host(), names.map(([n, v]) => `${n}: ${v}\r\n`).join('')));
      expect((await c.read())?.body).toBe('many');
      expect(hits[0]!.raw).toEqual(['host', host(), ...names.flat(), 'x-forwarded-for', '127.0.0.1', 'x-forwarded-proto', 'http', 'x-forwarded-host', host()]);
    });

    it('a repeated Accept goes on as two lines in order; repeated X-Forwarded-For lines are joined into one with the client IP appended', async () => {
      const c = client();
      c.write(get('/len/rep', host(), 'Accept: a\r\nX-Forwarded-For: 198.51.100.1\r\naccept: b\r\nx-forwarded-for: 198.51.100.2, 198.51.100.3\r\n'));
      expect((await c.read())?.body).toBe('rep');
      expect(hits[0]!.raw).toEqual([
        'host',
        host(),
        'Accept',
        'a',
        'accept',
        'b',
        'x-forwarded-for',
        '198.51.100.1, 198.51.100.2, 198.51.100.3, 127.0.0.1',
        'x-forwarded-proto',
        'http',
        'x-forwarded-host',
        host(),
      ]);
    });

    it('hop-by-hop, Connection-named, x-sandgate-*, routing and X-Forwarded-Proto/-Host request headers are not forwarded', async () => {
      const c = client();
      c.write(
        get(
          '/len/hop',
          host(),
          'Connection: keep-alive, X-Drop\r\nX-Drop: 1\r\nTE: trailers\r\nKeep-Alive: timeout=1\r\nProxy-Connection: keep-alive\r\nX-Sandgate-Upstream: 10.6.6.6:1\r\n' +
            `X-Sandgate-Other: 1\r\nX-Sandbox-Id: web\r\nX-Sandbox-Namespace: team-a\r\nX-Sandbox-Port: ${web.port}\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil.example\r\nX-Kept: yes\r\n`,
        ),
      );
      expect((await c.read())?.body).toBe('hop');
      expect(hits[0]!.raw).toEqual(['host', host(), 'X-Kept', 'yes', 'x-forwarded-for', '127.0.0.1', 'x-forwarded-proto', 'http', 'x-forwarded-host', host()]);
    });
  });
});
