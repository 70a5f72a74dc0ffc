import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { createServer as createH2Server, type Http2Server, type ServerHttp2Stream } from 'node:http2';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { Metadata, type ClientDuplexStream } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { relayHeaders } from '../../src/edge/relay/relay-headers.js';
import { eventually } from '../helpers/eventually.js';
import { h2c } from '../helpers/grpc-echo.js';
import { envoyRequestHeaders, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { RELAY_CREDENTIALS, relaySandbox, startRelayStack, startSupervisor, viaRelay, type RelayStack } from '../helpers/relay-stack.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { startUpstream, text, viaProxy } from '../helpers/upstream.js';
import type { SupervisorClient } from '../../src/sessions/supervisor-client.js';

/**
 * A sandbox that answers `Set-Cookie: sandgate_session=…; Domain=<base domain>` (or the `__Host-` name)
 * would plant a cookie in the browser that every sibling sandbox host receives, shadowing their link
 * cookies. Every carrier of a sandbox's answer drops such a line and passes the sandbox's other
 * Set-Cookie lines byte for byte, in order: the embedded proxy (its front and node:http, HTTP/1.1 and h2c
 * upstreams, a WebSocket handshake's 101), the relay listener, and ext_proc's response headers.
 */

const PLANTED = ['sandgate_session=evil; Domain=localhost; Path=/', '__Host-sandgate_session=evil; Path=/; Secure', 'SANDGATE_SESSION=evil; Domain=localhost', ' __Secure-sandgate_session =evil'];
const OWN = ['app=1; Path=/', 'theme=dark,light; Max-Age=60', 'xsandgate_session=ok', 'empty='];
/** The sandbox's Set-Cookie lines, planted ones among its own. */
const ANSWERED = [OWN[0]!, PLANTED[0]!, OWN[1]!, PLANTED[1]!, PLANTED[2]!, OWN[2]!, PLANTED[3]!, OWN[3]!];

describe('a sandbox\'s Set-Cookie of sandgate\'s cookie', () => {
  let up: Awaited<ReturnType<typeof startUpstream>>;
  let h2: Http2Server;
  let h2Port: number;
  let t: TestGateway;
  let g: RelayStack;
  let sup: SupervisorClient;
  const upgraded: Duplex[] = [];

  beforeAll(async () => {
    up = await startUpstream((_req, res) => {
      res.setHeader('set-cookie', ANSWERED);
      res.end('app');
    });
    up.server.on('upgrade', (req, socket) => {
      upgraded.push(socket);
      const lines = ANSWERED.map((c) => `Set-Cookie: ${c}\r\n`).join('');
      socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${wsAccept(String(req.headers['sec-websocket-key']))}\r\n${lines}\r\n`);
    });
    h2 = createH2Server();
    h2.on('stream', (stream: ServerHttp2Stream) => {
      stream.respond({ ':status': 200, 'set-cookie': ANSWERED });
      stream.end('app');
    });
    await new Promise<void>((r) => h2.listen(0, '127.0.0.1', r));
    h2Port = (h2.address() as AddressInfo).port;
    const at = { kind: 'address' as const, addresses: ['127.0.0.1'] };
    t = await startTestGateway([new TestDriver([snapshot({ name: 'web', sessionModel: 'none', endpoint: at }), snapshot({ name: 'h2', uid: 'u2', sessionModel: 'none', endpoint: at, ...h2c(h2Port) })])]);
    g = await startRelayStack({ gatewayId: 'gw-a', sandboxes: [relaySandbox('box')] });
    sup = await startSupervisor(g.supervisorUrl, 'box');
    await eventually(() => g.view.get('team-a', 'box')?.status.phase === 'Ready', 5000, 'box Ready');
  });
  afterAll(async () => {
    sup?.stop();
    await g?.close();
    await t?.close();
    h2?.close();
    for (const s of upgraded) s.destroy();
    await up?.close();
  });

  const host = (name = 'web', port = up.port) => `${port}-${name}.team-a.localhost`;

  it('is dropped by the embedded proxy, its front and node:http alike', async () => {
    for (const method of ['GET', 'POST']) {
      const r = await viaProxy(t.gw.proxyPort!, { host: host(), method, headers: method === 'POST' ? { 'content-length': '0' } : {} });
      expect([r.status, await text(r)]).toEqual([200, 'app']);
      expect(r.headers['set-cookie'], method).toEqual(OWN);
    }
  });

  it('is dropped from an h2c sandbox port\'s answer', async () => {
    const r = await viaProxy(t.gw.proxyPort!, { host: host('h2', h2Port) });
    expect([r.status, await text(r)]).toEqual([200, 'app']);
    expect(r.headers['set-cookie']).toEqual(OWN);
  });

  it('is dropped from a WebSocket handshake\'s 101', async () => {
    const ws = new WebSocket(`ws://127.0.0.1:${t.gw.proxyPort}/socket`, { headers: { host: host() } });
    const [res] = (await once(ws, 'upgrade')) as [{ headers: Record<string, string | string[]> }];
    ws.terminate();
    expect(res.headers['set-cookie']).toEqual(OWN);
  });

  it('is dropped by the relay listener and by the proxy carrying a request over a relay session', async () => {
    const target = `${up.port}-box.team-a.localhost`;
    const d = g.decider.decide('ext_authz', { headers: {}, host: target, path: '/' });
    if (!d.allow) throw new Error(`denied: ${d.code}`);
    const viaListener = await viaRelay(d.upstream, { path: '/', headers: { host: target, ...Object.fromEntries(relayHeaders(d, RELAY_CREDENTIALS)) } });
    expect([viaListener.status, await text(viaListener)]).toEqual([200, 'app']);
    expect(viaListener.headers['set-cookie']).toEqual(OWN);
    const viaSession = await viaProxy(g.proxy.port, { host: target });
    expect([viaSession.status, await text(viaSession)]).toEqual([200, 'app']);
    expect(viaSession.headers['set-cookie']).toEqual(OWN);
  });

  it('is removed by ext_proc\'s response header mutation, the other lines added back as they came', async () => {
    const { proc } = t.envoyClients();
    const stream = (proc.Process as (m: Metadata) => ClientDuplexStream<unknown, Record<string, any>>)(new Metadata());
    const answers: Record<string, any>[] = [];
    stream.on('data', (m: Record<string, any>) => answers.push(m));
    const next = async (n: number) => {
      while (answers.length < n) await once(stream, 'data');
      return answers[n - 1]!;
    };
    stream.write(envoyRequestHeaders({ ':authority': host(), ':path': '/', ':method': 'GET', ':scheme': 'http' }));
    expect((await next(1)).request_headers.response.status).toBe('CONTINUE');
    const response = (cookies: string[]) => ({ response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }, ...cookies.map((c) => ({ key: 'set-cookie', raw_value: Buffer.from(c) })), { key: 'content-type', raw_value: Buffer.from('text/plain') }] } } });
    stream.write(response(ANSWERED));
    const mutation = (await next(2)).response_headers.response.header_mutation;
    expect(mutation.remove_headers).toEqual(['set-cookie']);
    expect(mutation.set_headers.map((h: { header: { key: string; raw_value: Buffer }; append: { value: boolean } }) => [h.header.key, Buffer.from(h.header.raw_value).toString('latin1'), h.append.value])).toEqual(OWN.map((c) => ['set-cookie', c, true]));
    // An answer that sets none of sandgate's cookies passes untouched.
    stream.write(response(OWN));
    expect((await next(3)).response_headers.response).toEqual({ status: 'CONTINUE' });
    stream.end();
  });
});

/** The `Sec-WebSocket-Accept` for a key (RFC 6455 §4.2.2). */
function wsAccept(key: string): string {
  return createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
}
