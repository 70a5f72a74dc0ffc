import { createHash } from 'node:crypto';
import { createServer, request, type IncomingHttpHeaders, type IncomingMessage, type RequestListener, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { WebSocketServer } from 'ws';

/** A real upstream on 127.0.0.1 with a handler per test. */
export async function startUpstream(handler: RequestListener): Promise<{ server: Server; port: number; close(): Promise<void> }> {
  const server = createServer(handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    server,
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** A deterministic pseudo-random byte stream of `total` bytes (so both ends can hash it). */
export function patternStream(total: number, chunk = 64 * 1024): Readable {
  let sent = 0;
  let seed = 0x12345678;
  return new Readable({
    read() {
      if (sent >= total) {
        this.push(null);
        return;
      }
      const n = Math.min(chunk, total - sent);
      const buf = Buffer.allocUnsafe(n);
      for (let i = 0; i < n; i++) {
        seed = (seed * 1103515245 + 12345) >>> 0;
        buf[i] = seed >>> 24;
      }
      sent += n;
      this.push(buf);
    },
  });
}

export async function sha256Of(stream: AsyncIterable<Buffer>): Promise<{ hash: string; bytes: number }> {
  const h = createHash('sha256');
  let bytes = 0;
  for await (const c of stream) {
    h.update(c);
    bytes += c.length;
  }
  return { hash: h.digest('hex'), bytes };
}

export interface ProxyResponse {
  status: number;
  headers: IncomingHttpHeaders;
  res: IncomingMessage;
}

/** An HTTP request through the proxy with a chosen Host header; the body (if any) is streamed. */
export function viaProxy(proxyPort: number, opts: { host: string; path?: string; method?: string; headers?: Record<string, string | string[]>; body?: Readable | Buffer }): Promise<ProxyResponse> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: proxyPort, path: opts.path ?? '/', method: opts.method ?? 'GET', headers: { host: opts.host, ...opts.headers } }, (res) =>
      resolve({ status: res.statusCode ?? 0, headers: res.headers, res }),
    );
    req.on('error', reject);
    if (opts.body instanceof Readable) opts.body.pipe(req);
    else req.end(opts.body);
  });
}

export async function text(r: ProxyResponse): Promise<string> {
  let s = '';
  for await (const c of r.res) s += c;
  return s;
}

export interface RawAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** A raw request on its own connection: Host and the path go out exactly as written (fetch sets Host and normalises `..`). */
export function rawRequest(port: number, path: string, headers: Record<string, string> = {}, method = 'GET'): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method, headers, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** A WebSocket server on 127.0.0.1 that echoes every message back: a sandbox's WebSocket app. */
export async function startWsEcho(): Promise<{ port: number; close(): Promise<void> }> {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  await new Promise((r) => wss.once('listening', r));
  wss.on('connection', (ws) => ws.on('message', (m) => ws.send(m)));
  return { port: (wss.address() as AddressInfo).port, close: () => new Promise((r) => wss.close(() => r())) };
}
