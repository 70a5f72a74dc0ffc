import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { request as httpRequest } from 'node:http';
import { connect as h2Connect, constants, type ClientHttp2Session, type IncomingHttpHeaders } from 'node:http2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { eventually } from '../helpers/eventually.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { startUpstream } from '../helpers/upstream.js';
import { serverFrames, maskedText } from '../helpers/ws-frames.js';
import { CURL_HTTP2, makeCa, needsCurl, needsOpenssl, OPENSSL, type TestCa } from '../helpers/tls-certs.js';

/**
 * The embedded proxy's TLS port: the same cases through curl over HTTP/1.1 and HTTP/2 (routing, tenancy,
 * header stripping, streaming, typed errors), WebSockets over RFC 8441 extended CONNECT from a node:http2
 * client, the redirect from the plain port, and what a hostile HTTP/2 client sends.
 */

const DOMAIN = 'sandboxes.test';
const TOKEN = 'tok-' + 'x'.repeat(28);

interface Seen {
  url?: string;
  headers?: IncomingHttpHeaders;
  body?: number;
}

describe.skipIf(!OPENSSL)(needsOpenssl('the proxy over TLS'), () => {
  let ca: TestCa;
  let t: TestGateway;
  let up: Awaited<ReturnType<typeof startUpstream>>;
  let wss: WebSocketServer;
  let seen: Seen = {};
  let certFile: string;
  let release: (() => void) | undefined;
  const host = (name = 'web', port = up.port) => `${port}-${name}.team-a.${DOMAIN}`;

  beforeAll(async () => {
    ca = makeCa();
    const leaf = ca.issue('wild', [`*.team-a.${DOMAIN}`]);
    certFile = leaf.certFile;
    up = await startUpstream((req, res) => {
      seen = { url: req.url, headers: req.headers };
      if (req.url === '/upload') {
        let n = 0;
        req.on('data', (c: Buffer) => (n += c.length));
        req.on('end', () => res.end(JSON.stringify({ received: n })));
        return;
      }
      if (req.url === '/stream') {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: one\n\n');
        release = () => res.end('data: two\n\n');
        return;
      }
      if (req.url === '/head') {
        const fields = ['Content-Type', 'text/plain', 'Set-Cookie', 'a=1', 'Connection', 'x-secret, keep-alive', 'X-Secret', 'dropped', 'Keep-Alive', 'timeout=5'];
        res.writeHead(200, [...fields, 'Set-Cookie', 'b=2', 'Constructor', 'kept', 'Length', '7']);
        res.end('head');
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json', 'set-cookie': ['a=1', 'b=2'] });
      res.end(JSON.stringify({ ok: true, url: req.url }));
    });
    wss = new WebSocketServer({ server: up.server });
    wss.on('connection', (ws, req) => {
      ws.send(`hello ${req.url} ${req.headers['sec-websocket-protocol'] ?? ''}`);
      ws.on('message', (m) => ws.send(`echo ${String(m)}`));
    });
    const sandbox = { sessionModel: 'none' as const, endpoint: { kind: 'address' as const, addresses: ['127.0.0.1'] } };
    t = await startTestGateway(
      [new TestDriver([snapshot({ name: 'web', ...sandbox }), snapshot({ name: 'locked', uid: 'u2', accessToken: TOKEN, ...sandbox })])],
      { baseDomain: DOMAIN, proxyTlsPort: 0, tlsCertFile: leaf.certFile, tlsKeyFile: leaf.keyFile, proxyConnectTimeoutMs: 500 },
    );
  });
  afterAll(async () => {
    await t?.close();
    wss?.close();
    await up?.close();
    ca?.remove();
  });

  /** curl through the TLS port; the body and `%{http_version} %{http_code}` on the last line. */
  function curl(version: '--http1.1' | '--http2', name: string, path: string, args: string[] = []): Promise<{ status: number; version: string; body: string; headers: string }> {
    const h = name.includes('.') ? name : host(name);
    const a = [version, '-sS', '--cacert', ca.caFile, '--resolve', `${h}:${t.gw.proxyTlsPort}:127.0.0.1`, '-D', '-', '-w', '\n%{http_version} %{http_code}', ...args, `https://${h}:${t.gw.proxyTlsPort}${path}`];
    return new Promise((resolve, reject) =>
      execFile('curl', a, { encoding: 'utf8', timeout: 10_000 }, (err, stdout) => {
        if (err !== null && stdout === '') return reject(err);
        const lines = stdout.split('\n');
        const [v, code] = lines.pop()!.split(' ');
        const text = lines.join('\n');
        const split = text.indexOf('\r\n\r\n');
        resolve({ status: Number(code), version: v!, headers: text.slice(0, split), body: text.slice(split + 4).replace(/\n$/, '') });
      }),
    );
  }

  describe.skipIf(!CURL_HTTP2).each([
    ['--http1.1', '1.1'],
    ['--http2', '2'],
  ] as const)(needsCurl('curl %s'), (flag, version) => {
    it('routes by host, strips credentials and gateway headers, sets X-Forwarded-Proto https', async () => {
      const r = await curl(flag, 'web', '/hello?x=1', ['-H', 'authorization: Bearer secret', '-H', 'x-sandgate-upstream: 169.254.169.254:80', '-H', 'x-sandgate-id: forged']);
      expect(r.version).toBe(version);
      expect(r.status).toBe(200);
      expect(JSON.parse(r.body)).toEqual({ ok: true, url: '/hello?x=1' });
      expect(r.headers.match(/^set-cookie: /gim)).toHaveLength(2);
      expect(seen.headers!.authorization).toBeUndefined();
      expect(seen.headers!['x-sandgate-upstream']).toBeUndefined();
      expect(seen.headers!['x-sandgate-id']).toBeUndefined();
      expect(seen.headers!['x-forwarded-proto']).toBe('https');
      expect(seen.headers!.host).toBe(`${host()}:${t.gw.proxyTlsPort}`);
    });

    it('streams a request body up', async () => {
      const file = join(ca.dir, 'upload.bin');
      writeFileSync(file, Buffer.alloc(300_000, 7));
      const r = await curl(flag, 'web', '/upload', ['-H', 'content-type: application/octet-stream', '--data-binary', `@${file}`]);
      expect(r.status).toBe(200);
      expect(JSON.parse(r.body).received).toBe(300_000);
    });

    it('tenancy: a sandbox with a traffic token refuses without it (401 token_required) and gets it stripped with it', async () => {
      const without = await curl(flag, 'locked', '/');
      expect(without.status).toBe(401);
      expect(JSON.parse(without.body).code).toBe('token_required');
      expect(without.headers).toMatch(/^x-sandgate-error: token_required/im);
      const withToken = await curl(flag, 'locked', '/', ['-H', `e2b-traffic-access-token: ${TOKEN}`]);
      expect(withToken.status).toBe(200);
      expect(seen.headers!['e2b-traffic-access-token']).toBeUndefined();
    });

    it('typed errors: unknown sandbox 404, nothing listening 502 port_not_open', async () => {
      const missing = await curl(flag, 'nobody', '/');
      expect([missing.status, JSON.parse(missing.body).code]).toEqual([404, 'sandbox_not_found']);
      const closed = await curl(flag, host('web', 1), '/');
      expect([closed.status, JSON.parse(closed.body).code]).toEqual([502, 'port_not_open']);
    });
  });

  function h2(): Promise<ClientHttp2Session> {
    return new Promise((resolve, reject) => {
      const s = h2Connect(`https://127.0.0.1:${t.gw.proxyTlsPort}`, { ca: readFileSync(ca.caFile), servername: host() });
      // The server's SETTINGS (SETTINGS_ENABLE_CONNECT_PROTOCOL among them) have arrived.
      s.once('remoteSettings', () => resolve(s));
      s.once('error', reject);
    });
  }

  function exchange(s: ClientHttp2Session, headers: Record<string, string>, body?: string): Promise<{ headers: IncomingHttpHeaders; body: string; error?: string }> {
    return new Promise((resolve) => {
      const req = s.request(headers, { endStream: body === undefined });
      let got: IncomingHttpHeaders = {};
      let text = '';
      req.on('response', (h) => (got = h));
      req.on('data', (c: Buffer) => (text += c.toString()));
      req.on('end', () => resolve({ headers: got, body: text }));
      req.on('error', (err) => resolve({ headers: got, body: text, error: (err as NodeJS.ErrnoException).code ?? err.message }));
      if (body !== undefined) req.end(body);
    });
  }

  it('HTTP/2: a response streams as the sandbox writes it (the second event only after the client holds the first)', async () => {
    const s = await h2();
    try {
      const req = s.request({ ':path': '/stream', ':authority': host() });
      const first = await new Promise<string>((resolve) => req.once('data', (c: Buffer) => resolve(c.toString())));
      expect(first).toBe('data: one\n\n');
      let rest = '';
      req.on('data', (c: Buffer) => (rest += c.toString()));
      const ended = new Promise((r) => req.on('end', r));
      release!();
      await ended;
      expect(rest).toBe('data: two\n\n');
    } finally {
      s.close();
    }
  });

  it('HTTP/2: the sandbox\'s head arrives as over HTTP/1.1 — repeats in order, hop-by-hop and Connection-named fields dropped, `constructor` a field like any other', async () => {
    const s = await h2();
    try {
      const r = await exchange(s, { ':path': '/head', ':authority': host() });
      expect(r.body).toBe('head');
      expect(r.headers['set-cookie']).toEqual(['a=1', 'b=2']);
      expect([r.headers['x-secret'], r.headers['keep-alive'], r.headers.connection]).toEqual([undefined, undefined, undefined]);
      expect([r.headers.constructor, r.headers.length]).toEqual(['kept', '7']);
    } finally {
      s.close();
    }
  });

  it('HTTP/2: a request body larger than every window goes up whole, and its answer comes back', async () => {
    const s = await h2();
    try {
      const r = await exchange(s, { ':method': 'POST', ':path': '/upload', ':authority': host() }, 'x'.repeat(3_000_000));
      expect(JSON.parse(r.body)).toEqual({ received: 3_000_000 });
    } finally {
      s.close();
    }
  });

  it('HTTP/2 WebSocket: extended CONNECT (RFC 8441) is carried to the sandbox as an HTTP/1.1 upgrade', async () => {
    const s = await h2();
    try {
      // The server advertised SETTINGS_ENABLE_CONNECT_PROTOCOL.
      expect(s.remoteSettings.enableConnectProtocol).toBe(true);
      const ws = s.request({ ':method': 'CONNECT', ':protocol': 'websocket', ':scheme': 'https', ':path': '/chat?room=1', ':authority': host(), 'sec-websocket-version': '13', 'sec-websocket-protocol': 'chat' }, { endStream: false });
      const status = await new Promise<IncomingHttpHeaders>((resolve) => ws.once('response', resolve));
      expect(status[':status']).toBe(200);
      expect(status['sec-websocket-protocol']).toBe('chat');
      const frames = serverFrames(ws);
      expect(await frames.next()).toBe('hello /chat?room=1 chat');
      ws.write(maskedText('ping over h2'));
      expect(await frames.next()).toBe('echo ping over h2');
      ws.close();
    } finally {
      s.close();
    }
  });

  it('hostile HTTP/2 WebSocket: a client that resets its open stream ends that stream alone; the gateway serves on', async () => {
    const s = await h2();
    try {
      const ws = s.request({ ':method': 'CONNECT', ':protocol': 'websocket', ':scheme': 'https', ':path': '/chat', ':authority': host(), 'sec-websocket-version': '13' }, { endStream: false });
      expect((await new Promise<IncomingHttpHeaders>((resolve) => ws.once('response', resolve)))[':status']).toBe(200);
      await serverFrames(ws).next();
      // RST_STREAM CANCEL while the tunnel is open: its request body on the gateway ends without a reader.
      ws.close(constants.NGHTTP2_CANCEL);
      await new Promise((resolve) => ws.once('close', resolve));
      expect((await exchange(s, { ':method': 'GET', ':scheme': 'https', ':path': '/after', ':authority': host() })).headers[':status']).toBe(200);
    } finally {
      s.close();
    }
  });

  it('HTTP/2 WebSocket to an unknown sandbox is a typed 404; a CONNECT without :protocol websocket is 405 (hostile: a tunnel)', async () => {
    const s = await h2();
    try {
      const missing = await exchange(s, { ':method': 'CONNECT', ':protocol': 'websocket', ':scheme': 'https', ':path': '/', ':authority': host('nobody'), 'sec-websocket-version': '13' });
      expect(missing.headers[':status']).toBe(404);
      expect(JSON.parse(missing.body).code).toBe('sandbox_not_found');
      const other = await exchange(s, { ':method': 'CONNECT', ':protocol': 'smtp', ':scheme': 'https', ':path': '/', ':authority': host() });
      expect(other.headers[':status']).toBe(405);
      expect(other.headers['x-sandgate-error']).toBe('method_not_allowed');
    } finally {
      s.close();
    }
  });

  it('hostile HTTP/2: a Host field disagreeing with :authority does not reach the sandbox; OPTIONS * is refused; an oversized head fails only its stream', async () => {
    const s = await h2();
    try {
      const r = await exchange(s, { ':path': '/h', ':authority': host(), host: 'evil.example' });
      expect(r.headers[':status']).toBe(200);
      expect(seen.headers!.host).toBe(host());
      const star = await exchange(s, { ':method': 'OPTIONS', ':path': '*', ':authority': host() });
      expect(star.headers[':status']).toBe(400);
      expect(JSON.parse(star.body).code).toBe('invalid_route');
      const big = await exchange(s, { ':path': '/', ':authority': host(), 'x-big': 'y'.repeat(20_000) });
      expect(big.headers[':status']).not.toBe(200);
    } finally {
      s.destroy();
    }
    const again = await h2();
    try {
      expect((await exchange(again, { ':path': '/after', ':authority': host() })).headers[':status']).toBe(200);
    } finally {
      again.close();
    }
  });

  it('a certificate file broken on disk keeps the last good pair serving, and /readyz and the metrics say so', async () => {
    const good = readFileSync(certFile);
    writeFileSync(certFile, 'not a certificate');
    try {
      await eventually(async () => {
        const r = (await (await fetch(`${t.admin}/readyz`)).json()) as { status: string; degraded: string[] };
        return r.status === 'degraded' && r.degraded.some((d) => d.includes('TLS certificate') && d.includes('no PEM certificate'));
      });
      expect(await (await fetch(`${t.admin}/metrics`)).text()).toMatch(/sandgate_tls_reloads_total\{result="failed"\} 1/);
      expect(t.logs.find((l) => l.part === 'tls' && l.code === 'tls_certificate_invalid')).toBeDefined();
      const s = await h2();
      expect((await exchange(s, { ':path': '/still', ':authority': host() })).headers[':status']).toBe(200);
      s.close();
    } finally {
      writeFileSync(certFile, good);
    }
    await eventually(async () => ((await (await fetch(`${t.admin}/readyz`)).json()) as { status: string }).status === 'ready');
  });
});

describe.skipIf(!OPENSSL)(needsOpenssl('the plain proxy port redirecting to HTTPS'), () => {
  let ca: TestCa;
  let t: TestGateway;
  beforeAll(async () => {
    ca = makeCa();
    const leaf = ca.issue('gw', ['*.localhost']);
    t = await startTestGateway([new TestDriver([])], { proxyTlsPort: 0, tlsCertFile: leaf.certFile, tlsKeyFile: leaf.keyFile, proxyRedirectHttpsPort: 443 });
  });
  afterAll(async () => {
    await t?.close();
    ca?.remove();
  });

  const get = (headers: Record<string, string>, path = '/a?b=c') =>
    new Promise<{ status: number; location?: string; code?: string }>((resolve, reject) => {
      const req = httpRequest({ port: t.gw.proxyPort, host: '127.0.0.1', path, headers, method: 'POST' }, (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode!, location: res.headers.location, code: body === '' ? undefined : JSON.parse(body).code }));
      });
      req.on('error', reject);
      req.end('x');
    });

  it('answers 308 to the same host and target over https; a Host that is no host is 400 invalid_route (hostile)', async () => {
    expect(await get({ host: '3000-web.team-a.localhost:8080' })).toEqual({ status: 308, location: 'https://3000-web.team-a.localhost/a?b=c', code: undefined });
    expect(await get({ host: 'a.localhost/evil.example' })).toMatchObject({ status: 400, code: 'invalid_route' });
    expect(await get({ host: 'a.localhost' }, 'http://evil.example/')).toMatchObject({ status: 400, code: 'invalid_route' });
  });
});
