import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BackendSnapshot } from '../../src/domain/sandbox.js';
import { relayHeaders } from '../../src/edge/relay/relay-headers.js';
import type { SupervisorClient } from '../../src/sessions/supervisor-client.js';
import { RawClient } from '../helpers/raw-http-client.js';
import { relaySandbox, RELAY_CREDENTIALS, startRelayStack, startSupervisor, type RelayStack } from '../helpers/relay-stack.js';

/**
 * A hostile sandbox: the program behind a sandbox's port answers with bytes that are not a valid HTTP
 * response for the request. Every door and every path — the embedded proxy's own front (bodyless GET) and
 * node:http (a POST), each to a directly reachable sandbox (undici) and to a relay-only one (over the
 * supervisor session), and the relay listener as Envoy calls it after ext_authz — must answer such a
 * response with 502 `upstream_error`, never forward it, never hang, and never take the process down
 * (an exception escaping a listener would fail this file).
 */

/** What the sandbox sends once it has read the request head; `hold` keeps the connection open after it. */
interface Shape {
  readonly bytes: string;
  readonly hold?: boolean;
}

const SHAPES: Readonly<Record<string, Shape>> = {
  'status 099': { bytes: 'HTTP/1.1 099 X\r\ncontent-length: 2\r\n\r\nok' },
  'status 000': { bytes: 'HTTP/1.1 000 X\r\ncontent-length: 2\r\n\r\nok' },
  'status 99 (two digits)': { bytes: 'HTTP/1.1 99 X\r\ncontent-length: 2\r\n\r\nok' },
  'status 1000': { bytes: 'HTTP/1.1 1000 X\r\ncontent-length: 2\r\n\r\nok' },
  'status 600': { bytes: 'HTTP/1.1 600 X\r\ncontent-length: 2\r\n\r\nok' },
  'status not a number': { bytes: 'HTTP/1.1 2x0 OK\r\ncontent-length: 2\r\n\r\nok' },
  'not HTTP at all': { bytes: 'garbage\r\n\r\n' },
  'binary bytes': { bytes: '\x00\x01\x02\xff\xfe\r\n\r\n' },
  'header name with a space': { bytes: 'HTTP/1.1 200 OK\r\nBad Name: x\r\ncontent-length: 2\r\n\r\nok' },
  'header name with a colon only': { bytes: 'HTTP/1.1 200 OK\r\n: x\r\ncontent-length: 2\r\n\r\nok' },
  'header value with a control byte': { bytes: 'HTTP/1.1 200 OK\r\nx-a: a\x01b\r\ncontent-length: 2\r\n\r\nok' },
  'header value with NUL': { bytes: 'HTTP/1.1 200 OK\r\nx-a: a\x00b\r\ncontent-length: 2\r\n\r\nok' },
  'two content-lengths': { bytes: 'HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok' },
  'closed before the head': { bytes: '' },
  'closed mid status line': { bytes: 'HTTP/1.1 20' },
  'closed mid head': { bytes: 'HTTP/1.1 200 OK\r\ncontent-le' },
  'only 100 Continue, then closed': { bytes: 'HTTP/1.1 100 Continue\r\n\r\n' },
  'unsolicited 101 with Upgrade, held open': { bytes: 'HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n', hold: true },
  'unsolicited 101 without Upgrade, held open': { bytes: 'HTTP/1.1 101 Switching Protocols\r\n\r\n', hold: true },
  'unsolicited 101, then bytes': { bytes: 'HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\nconnection: upgrade\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok', hold: true },
};

let g: RelayStack;
let sup: SupervisorClient;
let sandbox: Server;
let port = 0;
const held = new Set<Socket>();

/** The hostile program: the shape is named by the request path (`/<index of SHAPES>`); `/ok` answers properly. */
function startHostileSandbox(): Promise<Server> {
  const names = Object.keys(SHAPES);
  const server = createServer((socket) => {
    socket.on('error', () => undefined);
    let head = '';
    socket.on('data', (d: Buffer) => {
      if (head.includes('\r\n\r\n')) return;
      head += d.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      const path = head.split(' ')[1] ?? '/';
      if (path === '/ok') return void socket.end('HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok');
      if (path === '/mid-body') return void socket.end('HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort');
      const shape = SHAPES[names[Number(path.slice(1))]!]!;
      if (shape.hold === true) {
        held.add(socket);
        socket.write(shape.bytes, 'latin1');
      } else socket.end(shape.bytes, 'latin1');
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

const direct: BackendSnapshot = { ...relaySandbox('direct'), uid: 'uid-direct', endpoint: { kind: 'address', addresses: ['127.0.0.1'] }, sessionModel: 'none' };

beforeAll(async () => {
  sandbox = await startHostileSandbox();
  port = (sandbox.address() as AddressInfo).port;
  g = await startRelayStack({ gatewayId: 'gw-a', sandboxes: [relaySandbox('box'), direct], proxy: { headersTimeoutMs: 20_000 } });
  sup = await startSupervisor(g.supervisorUrl, 'box');
});

afterAll(async () => {
  sup.stop();
  for (const s of held) s.destroy();
  await g.close();
  await new Promise((r) => sandbox.close(r));
});

const host = (name: string): string => `${port}-${name}.team-a.localhost`;

/** One request on its own raw connection; the answer as read off the wire (undefined: closed unanswered). */
async function send(to: number, path: string, method: 'GET' | 'POST', headers: Record<string, string>) {
  const c = new RawClient(to);
  let req = `${method} ${path} HTTP/1.1\r\n`;
  for (const [k, v] of Object.entries(headers)) req += `${k}: ${v}\r\n`;
  req += method === 'POST' ? 'content-length: 5\r\ncontent-type: text/plain\r\n\r\nhello' : '\r\n';
  c.write(req);
  try {
    return await c.read();
  } finally {
    c.close();
  }
}

/** The doors and paths, each sending `path` to the hostile sandbox. */
const PATHS: Readonly<Record<string, (path: string) => ReturnType<typeof send>>> = {
  'proxy front (GET) → sandbox (undici)': (p) => send(g.proxy.port, p, 'GET', { host: host('direct') }),
  'proxy node:http (POST) → sandbox (undici)': (p) => send(g.proxy.port, p, 'POST', { host: host('direct') }),
  'proxy front (GET) → relay stream': (p) => send(g.proxy.port, p, 'GET', { host: host('box') }),
  'proxy node:http (POST) → relay stream': (p) => send(g.proxy.port, p, 'POST', { host: host('box') }),
  'relay listener (GET, as Envoy after ext_authz)': (p) => asEnvoy(p, 'GET'),
  'relay listener (POST, as Envoy after ext_authz)': (p) => asEnvoy(p, 'POST'),
};

function asEnvoy(path: string, method: 'GET' | 'POST') {
  const d = g.decider.decide('ext_authz', { headers: {}, host: host('box'), path });
  if (!d.allow) throw new Error(`denied: ${d.code}`);
  const [, relayPort] = d.upstream.split(':');
  return send(Number(relayPort), path, method, { host: host('box'), ...Object.fromEntries(relayHeaders(d, RELAY_CREDENTIALS)) });
}

const CASES = Object.entries(PATHS).flatMap(([door, via]) => Object.keys(SHAPES).map((shape, i) => ({ door, via, shape, path: `/${i}` })));

describe('a sandbox answering what is not a valid HTTP response gets its client a 502 upstream_error', () => {
  it.each(CASES)('$door: $shape', async ({ via, path }) => {
    const a = await via(path);
    expect(a?.statusLine).toBe('HTTP/1.1 502 Bad Gateway');
    expect(a?.headers['x-sandgate-error']).toBe('upstream_error');
    expect(JSON.parse(a!.body)).toMatchObject({ code: 'upstream_error' });
  });

  it.each(Object.entries(PATHS))('%s: a response cut mid-body reaches the client as a broken response, not a complete one', async (_door, via) => {
    const c = await via('/mid-body');
    // The head (200, length 100) went out before the cut: the connection closes with the body short.
    expect(c).toBeUndefined();
  });

  it.each(Object.entries(PATHS))('%s: still serves a well-formed answer after all of it', async (_door, via) => {
    const a = await via('/ok');
    expect([a?.status, a?.body]).toEqual([200, 'ok']);
  });
});

describe('a sandbox answering a WebSocket upgrade with no HTTP head gets its client a 502 upstream_error, not a cut connection', () => {
  const NO_HEAD = ['not HTTP at all', 'binary bytes', 'closed before the head', 'closed mid head'];
  const names = Object.keys(SHAPES);
  const upgrade = { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' };
  const cases = NO_HEAD.flatMap((shape) => ['direct', 'box'].map((name) => ({ shape, name, path: `/${names.indexOf(shape)}` })));
  it.each(cases)('$shape ($name)', async ({ name, path }) => {
    const a = await send(g.proxy.port, path, 'GET', { host: host(name), ...upgrade });
    expect([a?.status, a?.headers['x-sandgate-error']]).toEqual([502, 'upstream_error']);
  });
});
