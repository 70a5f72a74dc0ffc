import type { IncomingHttpHeaders } from 'node:http';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { relayHeaders } from '../../src/edge/relay/relay-headers.js';
import type { Allow } from '../../src/domain/decide.js';
import type { SupervisorClient } from '../../src/sessions/supervisor-client.js';
import { eventually } from '../helpers/eventually.js';
import { relaySandbox, RELAY_CREDENTIALS, RELAY_SECRET, startRelayStack, startSupervisor, viaRelay, type RelayStack } from '../helpers/relay-stack.js';
import { patternStream, sha256Of, startUpstream, text, viaProxy, type ProxyResponse } from '../helpers/upstream.js';

// One gateway: a relay-only sandbox whose supervisor session this gateway holds. Every request rides the
// session — through the embedded proxy (no network hop: the session is local) and through the relay
// listener (what Envoy does with a relay decision). The "sandbox" is a server on 127.0.0.1 that the
// reference supervisor dials.

const MiB = 1024 * 1024;
/** 64 MiB through the relay is CPU-bound: beside a busy neighbour it takes far longer than the default. */
const BULK_TIMEOUT_MS = 120_000;
const WINDOW = 256 * 1024;
/** Stream buffers besides the window: readable/writable high-water marks and a chunk in hand. */
const SLACK = 256 * 1024;

let g: RelayStack;
let sup: SupervisorClient;
let up: Awaited<ReturnType<typeof startUpstream>>;
let wss: WebSocketServer;
let seen: { headers: IncomingHttpHeaders; url: string | undefined };
let sseNext: (() => void) | undefined;

const host = (name = 'box') => `${up.port}-${name}.team-a.localhost`;

/** What Envoy does: ask a front door, then send the request to the decided upstream with the door's headers. */
function asEnvoy(path: string, extra: Record<string, string> = {}, method = 'GET', body?: Readable | Buffer): Promise<ProxyResponse> {
  const d = g.decider.decide('ext_authz', { headers: {}, host: host(), path });
  if (!d.allow) throw new Error(`denied: ${d.code}`);
  return viaRelay(d.upstream, { path, method, body, headers: { host: host(), ...Object.fromEntries(relayHeaders(d, RELAY_CREDENTIALS)), ...extra } });
}

/** The gateway side of the session's streams. */
function gatewayMux() {
  return g.supervisors.session('team-a', 'box')!.mux!;
}

beforeAll(async () => {
  seen = { headers: {}, url: undefined };
  up = await startUpstream((req, res) => {
    seen = { headers: req.headers, url: req.url };
    if (req.url === '/hash') return void sha256Of(req).then((r) => res.end(JSON.stringify(r)));
    if (req.url?.startsWith('/download/')) {
      const n = Number(req.url.split('/')[2]);
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(n) });
      return void patternStream(n).pipe(res);
    }
    if (req.url === '/sse') {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.write('data: one\n\n');
      sseNext = () => res.end('data: two\n\n');
      return;
    }
    res.end('ok ' + req.url);
  });
  wss = new WebSocketServer({ server: up.server, handleProtocols: (p) => (p.has('chat.v1') ? 'chat.v1' : false) });
  wss.on('connection', (ws) => ws.on('message', (m, isBinary) => ws.send(m, { binary: isBinary })));
  g = await startRelayStack({ gatewayId: 'gw-a', sandboxes: [relaySandbox('box')] });
  sup = await startSupervisor(g.supervisorUrl, 'box');
});

// This file's own upstream and WebSocket echo (the upstream records what the relay delivered), torn
// down beside the one gateway they serve.
afterAll(async () => {
  sup.stop();
  wss.close();
  await g.close();
  await up.close();
});

describe('relay through one gateway', () => {
  it('decides relay-only sandboxes to this gateway\'s relay listener', () => {
    const d = g.decider.decide('proxy', { headers: {}, host: host(), path: '/' }) as Allow;
    expect(d).toMatchObject({ allow: true, relay: true, upstream: g.relayAddress });
    const headers = relayHeaders(d, RELAY_CREDENTIALS);
    expect(headers.map(([k]) => k)).toEqual(['x-sandgate-relay-auth', 'x-sandgate-relay-target']);
    expect(headers[1]![1]).toBe(`team-a/box:${up.port}`);
    // A credential for this target, never the relay secret itself.
    expect(headers[0]![1]).not.toContain(RELAY_SECRET);
    expect(RELAY_CREDENTIALS.verify(headers[0]![1], `team-a/box:${up.port}`)).toBe('ok');
  });

  it('carries a small request through the proxy and through the relay listener; no gateway header reaches the sandbox', async () => {
    const a = await viaProxy(g.proxy.port, { host: host(), path: '/hello?x=1', headers: { 'x-sandgate-relay-target': 'team-a/other:1', 'x-forwarded-for': '198.51.100.1' } });
    expect([a.status, await text(a)]).toEqual([200, 'ok /hello?x=1']);
    expect(seen.headers['x-forwarded-for']).toBe('198.51.100.1, 127.0.0.1');
    expect(seen.headers.host).toBe(host());
    const b = await asEnvoy('/envoy', { 'x-sandgate-upstream': g.relayAddress, 'x-forwarded-for': '203.0.113.7' });
    expect([b.status, await text(b)]).toEqual([200, 'ok /envoy']);
    // The relay listener is an internal hop: it adds no X-Forwarded-For of its own.
    expect(seen.headers['x-forwarded-for']).toBe('203.0.113.7');
    expect(Object.keys(seen.headers).filter((k) => k.startsWith('x-sandgate-'))).toEqual([]);
  });

  it('the proxy uses the local session directly: it never dials the relay address', async () => {
    g.view.setRelayResolver((id) => (id === 'gw-a' ? '127.0.0.1:1' : undefined));
    try {
      const r = await viaProxy(g.proxy.port, { host: host(), path: '/local' });
      expect([r.status, await text(r)]).toEqual([200, 'ok /local']);
    } finally {
      g.view.setRelayResolver((id) => (id === 'gw-a' ? g.relayAddress : undefined));
    }
  });

  it('streams a 64 MiB upload byte-exact, through the proxy and through the relay listener', async () => {
    const want = await sha256Of(patternStream(64 * MiB));
    const a = await viaProxy(g.proxy.port, { host: host(), path: '/hash', method: 'POST', body: patternStream(64 * MiB) });
    expect(JSON.parse(await text(a))).toEqual(want);
    // Chunked this time (no Content-Length): the relay hop frames the body again.
    const b = await asEnvoy('/hash', { 'transfer-encoding': 'chunked' }, 'POST', patternStream(64 * MiB));
    expect(JSON.parse(await text(b))).toEqual(want);
  }, BULK_TIMEOUT_MS);

  it('streams a 64 MiB download byte-exact, through the proxy and through the relay listener', async () => {
    const want = await sha256Of(patternStream(64 * MiB));
    const a = await viaProxy(g.proxy.port, { host: host(), path: `/download/${64 * MiB}` });
    expect(await sha256Of(a.res)).toEqual(want);
    const b = await asEnvoy(`/download/${64 * MiB}`);
    expect(await sha256Of(b.res)).toEqual(want);
  }, BULK_TIMEOUT_MS);

  it('carries 32 concurrent streams on one session, each byte-exact, and frees every stream after', async () => {
    const sizes = Array.from({ length: 32 }, (_, i) => 100_000 + i * 7919);
    const results = await Promise.all(
      sizes.map(async (n, i) => {
        const r = i % 2 === 0 ? await viaProxy(g.proxy.port, { host: host(), path: '/hash', method: 'POST', body: patternStream(n, 4096) }) : await asEnvoy('/hash', { 'content-length': String(n) }, 'POST', patternStream(n, 4096));
        return JSON.parse(await text(r));
      }),
    );
    const want = await Promise.all(sizes.map((n) => sha256Of(patternStream(n))));
    expect(results).toEqual(want);
    await eventually(() => g.supervisors.relay.active === 0 && (sup.relay?.size ?? -1) === 0, 5000, 'every stream to close on both ends');
  });

  it('a slow reader stalls the sandbox: buffered bytes stay within one window per end', async () => {
    let written = 0;
    const total = 256 * MiB;
    const flood = await startUpstream((_req, res) => {
      res.writeHead(200, { 'content-length': String(total) });
      const chunk = Buffer.alloc(64 * 1024, 7);
      const more = (): void => {
        while (written < total) {
          written += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', more);
        }
        res.end();
      };
      more();
    });
    try {
      const r = await viaProxy(g.proxy.port, { host: `${flood.port}-box.team-a.localhost` });
      r.res.pause();
      const gwStream = () => [...gatewayMux().values()][0];
      const supStream = () => [...sup.relay!.values()][0];
      // The stall reaches the supervisor: its stream is out of credit and the gateway's queue is full.
      await eventually(() => supStream()?.blockedOnCredit === true && (gwStream()?.bufferedBytes ?? 0) >= WINDOW, 5000, 'the relay to stall');
      expect(gatewayMux().bufferedBytes()).toBeLessThanOrEqual(WINDOW + SLACK);
      expect(sup.relay!.bufferedBytes()).toBeLessThanOrEqual(SLACK);
      // The rest is in socket buffers (kernel), never the whole body.
      expect(written).toBeLessThan(32 * MiB);
      r.res.destroy();
      await eventually(() => g.supervisors.relay.active === 0, 5000, 'the stream to be released');
    } finally {
      await flood.close();
    }
  });

  it('a sandbox that does not read an upload stalls the client: buffered bytes stay within one window per end', async () => {
    let aborted = false;
    let upload: import('node:http').IncomingMessage | undefined;
    const stall = await startUpstream((req) => {
      upload = req;
      req.pause();
      req.once('close', () => (aborted = !req.complete));
    });
    let produced = 0;
    const body = patternStream(256 * MiB);
    body.on('data', (c: Buffer) => (produced += c.length));
    try {
      const { request } = await import('node:http');
      const req = request({ host: '127.0.0.1', port: g.proxy.port, method: 'POST', path: '/', headers: { host: `${stall.port}-box.team-a.localhost`, 'content-length': String(256 * MiB) } });
      req.on('error', () => {});
      body.pipe(req);
      const gwStream = () => [...gatewayMux().values()][0];
      const supStream = () => [...sup.relay!.values()][0];
      await eventually(() => gwStream()?.blockedOnCredit === true && (supStream()?.bufferedBytes ?? 0) >= WINDOW, 5000, 'the upload to stall');
      expect(sup.relay!.bufferedBytes()).toBeLessThanOrEqual(WINDOW + SLACK);
      expect(gatewayMux().bufferedBytes()).toBeLessThanOrEqual(SLACK);
      expect(produced).toBeLessThan(32 * MiB);
      // The sandbox reads again, and the client gives up mid-body: the sandbox sees the abort. (A socket
      // nobody reads from hears nothing, reset or not, so the abort comes once bytes flow.)
      await new Promise((resolve) => upload!.once('data', resolve).resume());
      body.unpipe(req);
      // The counting listener keeps the body flowing: stop it, or it would generate the rest in a burst.
      body.destroy();
      req.destroy();
      await eventually(() => aborted, 5000, 'the sandbox to see the abort');
      await eventually(() => g.supervisors.relay.active === 0, 5000, 'the stream to be released');
    } finally {
      body.destroy();
      await stall.close();
    }
  });

  // The steps of the proxy's own SSE test (test/edge/proxy.test.ts), here through the relay too: each path
  // has to show that an event is not held back.
  it('flushes Server-Sent Events as they come, through the proxy and through the relay listener', async () => {
    for (const open of [() => viaProxy(g.proxy.port, { host: host(), path: '/sse' }), () => asEnvoy('/sse')]) {
      const r = await open();
      expect(r.headers['content-type']).toBe('text/event-stream');
      const first = await new Promise<string>((resolve) => r.res.once('data', (c: Buffer) => resolve(c.toString())));
      expect(first).toBe('data: one\n\n');
      // The second event is written only now: the first one cannot have waited for it.
      sseNext!();
      expect(await text(r)).toBe('data: two\n\n');
    }
  });

  it('carries a WebSocket (echo, subprotocol, 1 MiB binary message) through the proxy and through the relay listener', async () => {
    const d = g.decider.decide('ext_authz', { headers: {}, host: host(), path: '/ws' }) as Allow;
    const viaEnvoy = { url: `ws://${d.upstream}/ws`, headers: { host: host(), ...Object.fromEntries(relayHeaders(d, RELAY_CREDENTIALS)) } };
    const viaEmbedded = { url: `ws://127.0.0.1:${g.proxy.port}/ws`, headers: { host: host() } };
    for (const target of [viaEmbedded, viaEnvoy]) {
      const ws = new WebSocket(target.url, ['chat.v1'], { headers: target.headers });
      await new Promise((resolve, reject) => {
        ws.once('open', resolve);
        ws.once('error', reject);
      });
      expect(ws.protocol).toBe('chat.v1');
      const payload = Buffer.from(Array.from({ length: MiB }, (_, i) => i % 251));
      const got = new Promise<Buffer>((resolve) => ws.once('message', (m) => resolve(m as Buffer)));
      ws.send(payload);
      expect(Buffer.compare(await got, payload)).toBe(0);
      const text1 = new Promise<string>((resolve) => ws.once('message', (m) => resolve(m.toString())));
      ws.send('hello');
      expect(await text1).toBe('hello');
      const closed = new Promise<number>((resolve) => ws.once('close', resolve));
      ws.close(1000);
      expect(await closed).toBe(1000);
    }
    await eventually(() => g.supervisors.relay.active === 0, 5000, 'the tunnels to be released');
  });

  it('a supervisor that disconnects mid-response breaks the client\'s response instead of ending it cleanly', async () => {
    const r = await viaProxy(g.proxy.port, { host: host(), path: `/download/${256 * MiB}` });
    const outcome = new Promise<string>((resolve) => {
      r.res.once('error', () => resolve('broken'));
      r.res.once('aborted', () => resolve('broken'));
      r.res.once('end', () => resolve('ended'));
    });
    await new Promise((resolve) => r.res.once('data', resolve));
    sup.stop();
    r.res.resume();
    expect(await outcome).toBe('broken');
    await eventually(() => g.supervisors.relay.active === 0, 5000, 'the stream to be released');
    sup = await startSupervisor(g.supervisorUrl, 'box');
  });
});
