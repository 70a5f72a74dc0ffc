import { request } from 'node:http';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { eventually } from '../helpers/eventually.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { patternStream, sha256Of, startUpstream, text, viaProxy } from '../helpers/upstream.js';
import { forwardFailure } from '../../src/edge/forwarding/failure-codes.js';

const MiB = 1024 * 1024;

describe('embedded proxy', () => {
  let t: TestGateway;
  let echo: Awaited<ReturnType<typeof startUpstream>>;
  let last: { headers: Record<string, unknown>; url: string | undefined; aborted: boolean };
  let endSse: (() => void) | undefined;
  const host = (port: number, name = 'web') => `${port}-${name}.team-a.localhost`;

  beforeAll(async () => {
    last = { headers: {}, url: undefined, aborted: false };
    echo = await startUpstream((req, res) => {
      last = { headers: req.headers, url: req.url, aborted: false };
      req.on('aborted', () => (last.aborted = true));
      if (req.url === '/hash') {
        void sha256Of(req).then((r) => res.end(JSON.stringify(r)));
        return;
      }
      if (req.url?.startsWith('/download/')) {
        const n = Number(req.url.split('/')[2]);
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(n) });
        patternStream(n).pipe(res);
        return;
      }
      if (req.url === '/sse') {
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
        res.write('data: one\n\n');
        // The second event is sent only once the client holds the first: proof the proxy did not hold it back.
        endSse = () => res.end('data: two\n\n');
        return;
      }
      if (req.url === '/slow-headers') return;
      res.writeHead(200, { 'content-type': 'application/json', connection: 'keep-alive, x-hop', 'x-hop': 'secret', 'keep-alive': 'timeout=5' });
      res.end(JSON.stringify({ ok: true }));
    });
    t = await startTestGateway(
      [
        new TestDriver([
          snapshot({ name: 'web', sessionModel: 'none', endpoint: { kind: 'address', addresses: ['127.0.0.1'] } }),
          snapshot({ name: 'paused', uid: 'u2', state: 'paused', endpoint: { kind: 'address', addresses: ['127.0.0.1'] } }),
        ]),
      ],
      { proxyConnectTimeoutMs: 300, proxyHeadersTimeoutMs: 300, stripOriginOnUpgrade: true, pathPrefix: 'sbx' },
    );
  });
  afterAll(async () => {
    await t.close();
    await echo.close();
  });

  it('carries a request to the sandbox and removes hop-by-hop, routing and upstream headers; sets X-Forwarded-*', async () => {
    const r = await viaProxy(t.gw.proxyPort!, {
      host: host(echo.port),
      path: '/hello?x=1',
      headers: { 'x-sandgate-upstream': '169.254.169.254:80', 'x-sandbox-id': 'web', 'x-sandbox-namespace': 'team-a', 'x-sandbox-port': String(echo.port), 'x-forwarded-for': '198.51.100.1', connection: 'x-custom', 'x-custom': '1', te: 'trailers' },
    });
    expect(r.status).toBe(200);
    expect(JSON.parse(await text(r))).toEqual({ ok: true });
    expect(last.url).toBe('/hello?x=1');
    const h = last.headers;
    for (const gone of ['x-sandgate-upstream', 'x-sandbox-id', 'x-sandbox-namespace', 'x-sandbox-port', 'x-custom', 'te']) expect(h[gone], gone).toBeUndefined();
    expect(h['x-forwarded-for']).toBe('198.51.100.1, 127.0.0.1');
    expect(h['x-forwarded-proto']).toBe('http');
    expect(h['x-forwarded-host']).toBe(host(echo.port));
    expect(h.host).toBe(host(echo.port));
    expect(r.headers['x-hop']).toBeUndefined();
    expect(r.headers['keep-alive']).not.toBe('timeout=5');
  });

  it('passes response headers as the sandbox sent them (case, duplicates, order, latin1 bytes), without hop-by-hop or Connection-named ones', async () => {
    // A raw upstream: every byte of the head is chosen here, including a non-ASCII one.
    const head = Buffer.concat([
      Buffer.from('HTTP/1.1 201 Created\r\nX-Case-Kept: A\r\nSet-Cookie: a=1\r\nConnection: keep-alive, X-Named\r\nSet-Cookie: b=2\r\nX-Latin: caf'),
      Buffer.from([0xe9]),
      Buffer.from('\r\nX-Named: gone\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\nok'),
    ]);
    const raw = createNetServer((socket) => socket.once('data', () => socket.write(head)));
    await new Promise<void>((r) => raw.listen(0, '127.0.0.1', () => r()));
    try {
      const r = await viaProxy(t.gw.proxyPort!, { host: host((raw.address() as AddressInfo).port) });
      expect([r.status, await text(r)]).toEqual([201, 'ok']);
      const names = r.res.rawHeaders.filter((_, i) => i % 2 === 0);
      expect(names.filter((n) => n !== 'Date' && n !== 'Connection' && n !== 'Keep-Alive')).toEqual(['X-Case-Kept', 'Set-Cookie', 'Set-Cookie', 'X-Latin', 'Content-Length']);
      expect(r.headers['set-cookie']).toEqual(['a=1', 'b=2']);
      expect(Buffer.from(r.headers['x-latin'] as string, 'latin1')).toEqual(Buffer.from([0x63, 0x61, 0x66, 0xe9]));
      expect(r.headers['x-named']).toBeUndefined();
      expect(r.headers['keep-alive']).not.toBe('timeout=5');
    } finally {
      raw.close();
    }
  });

  it('does not pass on a 1xx (103 Early Hints) before the final response; the final response follows', async () => {
    const up = await startUpstream((_req, res) => {
      res.writeEarlyHints({ link: '</style.css>; rel=preload; as=style' });
      res.writeHead(200, { 'content-type': 'text/plain' }).end('final');
    });
    try {
      const r = await viaProxy(t.gw.proxyPort!, { host: host(up.port) });
      expect([r.status, await text(r)]).toEqual([200, 'final']);
    } finally {
      await up.close();
    }
  });

  it('rewrites the path for path routes', async () => {
    const r = await viaProxy(t.gw.proxyPort!, { host: 'gw.example.com', path: `/sbx/team-a/web/${echo.port}/inner/x?q=2` });
    await text(r);
    expect(last.url).toBe('/inner/x?q=2');
  });

  it('answers denials with the typed body (paused → 409, unknown → 404)', async () => {
    const p = await viaProxy(t.gw.proxyPort!, { host: host(echo.port, 'paused') });
    expect([p.status, JSON.parse(await text(p)).code]).toEqual([409, 'sandbox_paused']);
    const n = await viaProxy(t.gw.proxyPort!, { host: host(echo.port, 'nope') });
    expect([n.status, JSON.parse(await text(n)).code]).toEqual([404, 'sandbox_not_found']);
  });

  it('streams a 64 MiB upload byte-exact to the sandbox', async () => {
    const want = await sha256Of(patternStream(64 * MiB));
    const r = await viaProxy(t.gw.proxyPort!, { host: host(echo.port), path: '/hash', method: 'POST', body: patternStream(64 * MiB), headers: { 'content-type': 'application/octet-stream' } });
    expect(JSON.parse(await text(r))).toEqual(want);
  });

  it('streams a 64 MiB download byte-exact to the client', async () => {
    const want = await sha256Of(patternStream(64 * MiB));
    const r = await viaProxy(t.gw.proxyPort!, { host: host(echo.port), path: `/download/${64 * MiB}` });
    expect(await sha256Of(r.res)).toEqual(want);
  });

  it('carries many concurrent requests', async () => {
    const all = await Promise.all(
      Array.from({ length: 50 }, async (_, i) => {
        const r = await viaProxy(t.gw.proxyPort!, { host: host(echo.port), path: `/download/${1000 + i}` });
        return (await sha256Of(r.res)).bytes;
      }),
    );
    expect(all).toEqual(Array.from({ length: 50 }, (_, i) => 1000 + i));
  });

  it('a slow reader keeps memory bounded: the upstream is held back, not buffered whole', async () => {
    let written = 0;
    let blocked = false;
    const total = 256 * MiB;
    const up = await startUpstream((_req, res) => {
      res.writeHead(200, { 'content-length': String(total) });
      const chunk = Buffer.alloc(64 * 1024, 7);
      const pump = () => {
        while (written < total) {
          written += chunk.length;
          if (!res.write(chunk)) {
            blocked = true;
            res.once('drain', pump);
            return;
          }
        }
        res.end();
      };
      pump();
    });
    try {
      const r = await viaProxy(t.gw.proxyPort!, { host: host(up.port) });
      r.res.pause();
      // Wait until the upstream is blocked and stops making progress (backpressure has reached it): a stall
      // has no event of its own, so it is "blocked, and no byte written across 20 checks in a row".
      let before = -1;
      let quiet = 0;
      await eventually(() => {
        quiet = blocked && written === before ? quiet + 1 : 0;
        before = written;
        return quiet >= 20 || written >= total;
      }, 30_000, 'the upstream to stall');
      expect(blocked).toBe(true);
      // Socket buffers on both hops plus stream high-water marks: a few MiB, never the whole body.
      expect(written).toBeLessThan(32 * MiB);
      r.res.destroy();
    } finally {
      await up.close();
    }
  });

  it('flushes Server-Sent Events as they come', async () => {
    const r = await viaProxy(t.gw.proxyPort!, { host: host(echo.port), path: '/sse' });
    expect(r.headers['content-type']).toBe('text/event-stream');
    const first = await new Promise<string>((resolve) => r.res.once('data', (c: Buffer) => resolve(c.toString())));
    expect(first).toBe('data: one\n\n');
    endSse!();
    expect(await text(r)).toBe('data: two\n\n');
  });

  it('connection refused → 502 port_not_open', async () => {
    const closed = createNetServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', () => r()));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((r) => closed.close(() => r()));
    const r = await viaProxy(t.gw.proxyPort!, { host: host(port) });
    expect([r.status, JSON.parse(await text(r)).code]).toEqual([502, 'port_not_open']);
  });

  it('maps upstream failures before the response to typed denials (connect timeout → 504)', () => {
    // A connect timeout cannot be provoked on loopback (and tests send nothing off this machine), so the
    // mapping of undici's error codes is checked directly; refused and headers timeouts run end to end.
    expect(forwardFailure('sandbox', Object.assign(new Error('x'), { code: 'UND_ERR_CONNECT_TIMEOUT' }))).toBe('upstream_timeout');
    expect(forwardFailure('sandbox', Object.assign(new Error('x'), { code: 'UND_ERR_HEADERS_TIMEOUT' }))).toBe('upstream_timeout');
    expect(forwardFailure('sandbox', Object.assign(new Error('x'), { code: 'ECONNREFUSED' }))).toBe('port_not_open');
    expect(forwardFailure('sandbox', Object.assign(new Error('x'), { code: 'ECONNRESET' }))).toBe('upstream_error');
  });

  it('headers timeout → 504 upstream_timeout', async () => {
    const r = await viaProxy(t.gw.proxyPort!, { host: host(echo.port), path: '/slow-headers' });
    expect([r.status, JSON.parse(await text(r)).code]).toEqual([504, 'upstream_timeout']);
  });

  it('a reset mid-response closes the client connection instead of hanging', async () => {
    let reset: (() => void) | undefined;
    const up = await startUpstream((_req, res) => {
      res.writeHead(200, { 'content-length': '1000000' });
      res.write(Buffer.alloc(1000, 1));
      reset = () => res.socket?.destroy();
    });
    try {
      const r = await viaProxy(t.gw.proxyPort!, { host: host(up.port) });
      const err = await new Promise<unknown>((resolve) => {
        r.res.on('error', resolve);
        r.res.on('end', () => resolve('ended'));
        // The upstream resets once the client holds the first bytes: the reset is mid-response.
        r.res.once('data', () => reset!());
        r.res.resume();
      });
      expect(err).not.toBe('ended');
    } finally {
      await up.close();
    }
  });

  it('a client abort mid-upload reaches the upstream as an abort', async () => {
    const seen = new Promise<string>((resolve) => {
      let abortUpload: (() => void) | undefined;
      void startUpstream((req) => {
        req.on('aborted', () => resolve('aborted'));
        req.on('error', () => resolve('aborted'));
        req.on('end', () => resolve('completed'));
        // The client aborts once the upstream holds the first bytes of the body: the abort is mid-upload.
        req.once('data', () => abortUpload!());
        req.resume();
      }).then((up) => {
        const req = request({ host: '127.0.0.1', port: t.gw.proxyPort!, method: 'POST', path: '/', headers: { host: host(up.port), 'content-length': String(10 * MiB) } });
        req.on('error', () => {});
        abortUpload = () => req.destroy();
        req.write(Buffer.alloc(MiB));
        seen.finally(() => up.close());
      });
    });
    expect(await seen).toBe('aborted');
  });

  it('passes WebSocket upgrades through (echo), with subprotocol, and strips Origin when configured', async () => {
    const server = await startUpstream((_req, res) => res.end());
    const wss = new WebSocketServer({ server: server.server, handleProtocols: (p) => (p.has('chat.v1') ? 'chat.v1' : false) });
    let origin: string | undefined = 'unset';
    wss.on('connection', (ws, req) => {
      origin = req.headers.origin;
      ws.on('message', (m, isBinary) => ws.send(m, { binary: isBinary }));
    });
    try {
      const ws = new WebSocket(`ws://127.0.0.1:${t.gw.proxyPort}/socket`, ['chat.v1'], { headers: { host: host(server.port) }, origin: 'https://evil.example' });
      await new Promise((r, j) => {
        ws.once('open', r);
        ws.once('error', j);
      });
      expect(ws.protocol).toBe('chat.v1');
      const got = new Promise<Buffer>((r) => ws.once('message', (m) => r(m as Buffer)));
      const payload = Buffer.from(Array.from({ length: 100_000 }, (_, i) => i % 251));
      ws.send(payload);
      expect(Buffer.compare(await got, payload)).toBe(0);
      expect(origin).toBeUndefined();
      ws.close();
    } finally {
      wss.close();
      await server.close();
    }
  });

  it('refuses an upgrade for a paused sandbox with the typed denial', async () => {
    const ws = new WebSocket(`ws://127.0.0.1:${t.gw.proxyPort}/`, { headers: { host: host(echo.port, 'paused') } });
    const status = await new Promise<number>((resolve) => ws.once('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0)));
    expect(status).toBe(409);
  });
});

describe('embedded proxy: per-sandbox connection cap', () => {
  it('a client that leaves while the response head is awaited aborts the upstream request and gives its slot back', async () => {
    const upstreamSaw: string[] = [];
    let arrived = 0;
    const up = await startUpstream((req, res) => {
      if (req.url === '/after') return void res.end('after');
      arrived++;
      res.on('close', () => upstreamSaw.push(res.writableFinished ? 'finished' : 'closed unanswered'));
    });
    const t = await startTestGateway([new TestDriver([snapshot({ name: 'web', sessionModel: 'none', endpoint: { kind: 'address', addresses: ['127.0.0.1'] } })])], {
      maxConnectionsPerSandbox: 1,
    });
    try {
      const host = `${up.port}-web.team-a.localhost`;
      const held = request({ host: '127.0.0.1', port: t.gw.proxyPort!, path: '/held', headers: { host }, agent: false });
      held.on('error', () => {});
      held.end();
      await eventually(() => arrived === 1, 5000, 'the held request to reach the upstream');
      const refused = await viaProxy(t.gw.proxyPort!, { host, path: '/after' });
      expect([refused.status, JSON.parse(await text(refused)).code]).toEqual([429, 'too_many_connections']);
      held.destroy();
      // The slot goes back before the upstream request is aborted, so once the upstream sees it go the next request fits.
      await eventually(() => upstreamSaw.length === 1, 5000, 'the upstream to see the request go');
      expect(upstreamSaw).toEqual(['closed unanswered']);
      const next = await viaProxy(t.gw.proxyPort!, { host, path: '/after' });
      expect([next.status, await text(next)]).toEqual([200, 'after']);
    } finally {
      await t.close();
      await up.close();
    }
  });

  it('answers 429 too_many_connections past --max-connections-per-sandbox, and frees the slot when a response ends', async () => {
    const held: (() => void)[] = [];
    const up = await startUpstream((_req, res) => held.push(() => res.end('done')));
    const t = await startTestGateway([new TestDriver([snapshot({ name: 'web', sessionModel: 'none', endpoint: { kind: 'address', addresses: ['127.0.0.1'] } })])], {
      maxConnectionsPerSandbox: 2,
    });
    try {
      const host = `${up.port}-web.team-a.localhost`;
      const first = viaProxy(t.gw.proxyPort!, { host });
      const second = viaProxy(t.gw.proxyPort!, { host });
      await eventually(() => held.length === 2, 5000, 'two requests to reach the upstream');
      const third = await viaProxy(t.gw.proxyPort!, { host });
      expect([third.status, JSON.parse(await text(third)).code]).toEqual([429, 'too_many_connections']);
      held.shift()!();
      expect(await text(await first)).toBe('done');
      const fourth = viaProxy(t.gw.proxyPort!, { host });
      await eventually(() => held.length === 2, 5000, 'the fourth request to reach the upstream');
      for (const release of held.splice(0)) release();
      expect(await text(await second)).toBe('done');
      expect(await text(await fourth)).toBe('done');
    } finally {
      await t.close();
      await up.close();
    }
  });
});
