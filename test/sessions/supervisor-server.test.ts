import { afterEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { pino } from 'pino';
import { SignJWT } from 'jose';
import { MemoryPresence } from '../../src/sessions/presence/memory-presence.js';
import { CLOSE, SUBPROTOCOL } from '../../src/sessions/supervisor-protocol.js';
import { SupervisorServer, type SupervisorServerOptions } from '../../src/sessions/supervisor-server.js';
import { mintSupervisorToken, parseSupervisorKeys, type SupervisorKeys } from '../../src/sessions/supervisor-token.js';
import { eventually } from '../helpers/eventually.js';
import { RawClient } from '../helpers/raw-http-client.js';
import { wsMessages } from '../helpers/ws-messages.js';

const SECRET_A = 'a'.repeat(40);
const SECRET_B = 'b'.repeat(40);
const keys: SupervisorKeys = { keys: parseSupervisorKeys(`keys:\n  - {kid: new, secret: ${SECRET_B}}\n  - {kid: old, secret: ${SECRET_A}}\n`, 'test'), audience: 'sandgate-supervisor' };

interface Harness {
  server: SupervisorServer;
  store: MemoryPresence;
  clock: { t: number };
  url: string;
}

const open: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of open.splice(0)) await c();
});

async function harness(over: Partial<SupervisorServerOptions> = {}): Promise<Harness> {
  const clock = { t: 1_000_000 };
  const store = new MemoryPresence('gw-a');
  const server = new SupervisorServer(
    {
      host: '127.0.0.1',
      port: 0,
      keys,
      heartbeatIntervalMs: 1000,
      helloTimeoutMs: 5000,
      maxFrameBytes: 4096,
      maxSessions: 100,
      maxSessionsPerSource: 100,
      now: () => clock.t,
      autoSweep: false,
      ...over,
    },
    store,
    pino({ level: 'silent' }),
  );
  const port = await server.start();
  open.push(() => server.close());
  return { server, store, clock, url: `ws://127.0.0.1:${port}/v1/supervisor` };
}

interface Conn {
  ws: WebSocket;
  messages: any[];
  closed: Promise<{ code: number; reason: string }>;
  next(): Promise<any>;
}

function connect(url: string, token: string | undefined, protocol: string | undefined = SUBPROTOCOL): Promise<Conn> {
  const headers: Record<string, string> = token === undefined ? {} : { authorization: `Bearer ${token}` };
  const ws = new WebSocket(url, protocol === undefined ? [] : [protocol], { headers });
  const received = wsMessages(ws);
  open.push(async () => {
    ws.terminate();
  });
  return new Promise((resolve, reject) => {
    ws.once('open', () =>
      resolve({ ws, ...received }),
    );
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => reject(Object.assign(new Error(`HTTP ${res.statusCode}`), { status: res.statusCode, body: body === '' ? undefined : JSON.parse(body) })));
    });
    ws.once('error', reject);
  });
}

const hello = (over: Record<string, unknown> = {}) => JSON.stringify({ type: 'hello', namespace: 'team-a', name: 'web', instanceId: 'inst-1', version: 'test/1', ...over });

async function accepted(h: Harness, token?: string, over: Record<string, unknown> = {}): Promise<Conn & { sessionId: string; epoch: number }> {
  const c = await connect(h.url, token ?? (await mintSupervisorToken(keys, 'team-a', 'web', 60, h.clock.t)));
  c.ws.send(hello(over));
  const m = await c.next();
  expect(m.type).toBe('accepted');
  return Object.assign(c, { sessionId: m.sessionId as string, epoch: m.epoch as number });
}

describe('supervisor endpoint: handshake and presence', () => {
  it('hello → accepted{sessionId, epoch, heartbeatIntervalMs} and presence recorded', async () => {
    const h = await harness();
    const c = await accepted(h);
    expect(c.ws.protocol).toBe(SUBPROTOCOL);
    expect(c.epoch).toBe(1);
    expect(h.store.get('team-a', 'web')).toMatchObject({ gatewayId: 'gw-a', sessionId: c.sessionId, instanceId: 'inst-1', epoch: 1 });
    expect(h.server.size).toBe(1);
  });

  it('answers ping with pong echoing t', async () => {
    const h = await harness();
    const c = await accepted(h);
    c.ws.send(JSON.stringify({ type: 'ping', t: 42 }));
    expect(await c.next()).toEqual({ type: 'pong', t: 42 });
  });

  it('a supervisor disconnect removes presence', async () => {
    const h = await harness();
    const c = await accepted(h);
    const gone = new Promise<void>((r) => h.store.onChange((_n, _m, rec) => rec === undefined && r()));
    c.ws.close(1000);
    await gone;
    expect(h.store.get('team-a', 'web')).toBeUndefined();
  });

  it('counts a peer-initiated close by the code the peer sent (1001, 1006 without a close frame, other codes as "other")', async () => {
    const h = await harness();
    const gone = (): Promise<void> => new Promise((r) => h.store.onChange((_n, _m, rec) => rec === undefined && r()));
    let g = gone();
    (await accepted(h)).ws.close(1001);
    await g;
    g = gone();
    (await accepted(h)).ws.terminate();
    await g;
    g = gone();
    (await accepted(h)).ws.close(4999);
    await g;
    expect(Object.fromEntries(h.server.closes)).toEqual({ '1001': 1, '1006': 1, other: 1 });
  });

  it('a new session supersedes the old one (4000); the old socket cleanup does not evict the new presence', async () => {
    const h = await harness();
    const first = await accepted(h);
    const second = await accepted(h, undefined, { instanceId: 'inst-2' });
    expect((await first.closed).code).toBe(CLOSE.superseded);
    // The old socket's cleanup has run once the server saw its close.
    await eventually(() => h.server.connections === 1, 5000, 'the old socket to be cleaned up');
    expect(h.store.get('team-a', 'web')).toMatchObject({ sessionId: second.sessionId, epoch: 2, instanceId: 'inst-2' });
    expect(h.server.size).toBe(1);
  });

  it('accepts tokens signed by any active key (rotation)', async () => {
    const h = await harness();
    const old: SupervisorKeys = { keys: [keys.keys[1]!], audience: keys.audience };
    await accepted(h, await mintSupervisorToken(old, 'team-a', 'web', 60, h.clock.t));
  });
});

describe('supervisor endpoint: hostile input closes with a specific code and changes no state', () => {
  async function expectClose(h: Harness, c: Conn, code: number): Promise<void> {
    expect((await c.closed).code).toBe(code);
    expect(h.store.get('team-a', 'web')).toBeUndefined();
    expect(h.server.size).toBe(0);
  }

  // No valid token: refused on the HTTP upgrade request itself (401 with the typed body), before any
  // session slot is taken; only a valid token naming another sandbox meets the session's 4403 at hello.
  const cases: [string, (h: Harness) => Promise<string>, number | string][] = [
    ['no token', async () => '', 'token_missing'],
    ['expired token', async (h) => mintSupervisorToken(keys, 'team-a', 'web', 60, h.clock.t - 120_000), 'token_expired'],
    ['wrong audience', async (h) => mintSupervisorToken({ ...keys, audience: 'other' }, 'team-a', 'web', 60, h.clock.t), 'token_invalid'],
    ['unknown key id', async (h) => mintSupervisorToken({ keys: [{ kid: 'gone', secret: new TextEncoder().encode('c'.repeat(40)) }], audience: keys.audience }, 'team-a', 'web', 60, h.clock.t), 'token_invalid'],
    ['wrong signature', async (h) => mintSupervisorToken({ keys: [{ kid: 'new', secret: new TextEncoder().encode('c'.repeat(40)) }], audience: keys.audience }, 'team-a', 'web', 60, h.clock.t), 'token_invalid'],
    [
      'alg none',
      async (h) => {
        const b64 = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
        return `${b64({ alg: 'none', typ: 'JWT', kid: 'new' })}.${b64({ sub: 'team-a/web', aud: 'sandgate-supervisor', exp: Math.floor(h.clock.t / 1000) + 60 })}.`;
      },
      'token_invalid',
    ],
    [
      'HS512 instead of HS256',
      async (h) =>
        new SignJWT({})
          .setProtectedHeader({ alg: 'HS512', kid: 'new' })
          .setSubject('team-a/web')
          .setAudience('sandgate-supervisor')
          .setExpirationTime(Math.floor(h.clock.t / 1000) + 60)
          .sign(new TextEncoder().encode(SECRET_B)),
      'token_invalid',
    ],
    ['token for another sandbox', async (h) => mintSupervisorToken(keys, 'team-a', 'other', 60, h.clock.t), CLOSE.forbidden],
  ];

  it.each(cases)('%s', async (_n, token, expected) => {
    const h = await harness();
    const t = await token(h);
    if (typeof expected === 'string') {
      await expect(connect(h.url, t === '' ? undefined : t)).rejects.toMatchObject({ status: 401, body: { code: expected } });
      expect(h.server.connections).toBe(0);
      expect(h.store.get('team-a', 'web')).toBeUndefined();
      return;
    }
    const c = await connect(h.url, t);
    c.ws.send(hello());
    await expectClose(h, c, expected);
  });

  const frames: [string, (ws: WebSocket) => void, number][] = [
    ['malformed JSON', (ws) => ws.send('{"type":'), CLOSE.malformed],
    ['a JSON array', (ws) => ws.send('[1,2]'), CLOSE.malformed],
    ['unknown type', (ws) => ws.send('{"type":"open-relay"}'), CLOSE.unexpected],
    ['binary before hello', (ws) => ws.send(Buffer.from([1, 2, 3])), CLOSE.unexpected],
    ['ping before hello', (ws) => ws.send('{"type":"ping","t":1}'), CLOSE.unexpected],
    ['hello with a bad name', (ws) => ws.send(hello({ name: 'Web!' })), CLOSE.malformed],
    ['hello with a control character in instanceId', (ws) => ws.send(hello({ instanceId: 'a\nb' })), CLOSE.malformed],
    ['an oversize frame', (ws) => ws.send(JSON.stringify({ type: 'hello', pad: 'x'.repeat(5000) })), CLOSE.tooBig],
  ];

  it.each(frames)('%s', async (_n, send, code) => {
    const h = await harness();
    const c = await connect(h.url, await mintSupervisorToken(keys, 'team-a', 'web', 60, h.clock.t));
    send(c.ws);
    await expectClose(h, c, code);
  });

  it('a second hello closes the session (4415) and removes its presence', async () => {
    const h = await harness();
    const c = await accepted(h);
    c.ws.send(hello());
    expect((await c.closed).code).toBe(CLOSE.unexpected);
    await eventually(() => h.store.get('team-a', 'web') === undefined, 5000, 'the presence to be removed');
  });

  it('refuses the upgrade without the subprotocol (400), on another path (404), and past the per-source limit (429)', async () => {
    const h = await harness({ maxSessionsPerSource: 1 });
    const token = await mintSupervisorToken(keys, 'team-a', 'web', 60, h.clock.t);
    await expect(connect(h.url, token, 'other.v1')).rejects.toMatchObject({ status: 400 });
    await expect(connect(h.url.replace('/v1/supervisor', '/v2/x'), token)).rejects.toMatchObject({ status: 404 });
    await connect(h.url, token);
    await expect(connect(h.url, token)).rejects.toMatchObject({ status: 429 });
  });

  it('refuses past the overall limit (503)', async () => {
    const h = await harness({ maxSessions: 1 });
    const token = await mintSupervisorToken(keys, 'team-a', 'web', 60, h.clock.t);
    await connect(h.url, token);
    await expect(connect(h.url, token)).rejects.toMatchObject({ status: 503 });
  });
});

describe('supervisor endpoint: sockets without a valid token hold no slot', () => {
  it('many unauthenticated upgrade requests, never reading their answer: each is answered 401 and closed, and a legitimate supervisor is accepted', async () => {
    const h = await harness({ maxSessions: 1, maxSessionsPerSource: 1 });
    const port = Number(new URL(h.url).port);
    const peers: RawClient[] = [];
    for (let i = 0; i < 20; i++) {
      const c = new RawClient(port);
      c.socket.pause();
      c.write(`GET /v1/supervisor HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-protocol: ${SUBPROTOCOL}\r\nauthorization: Bearer not.a.jwt${i}\r\n\r\n`);
      peers.push(c);
      open.push(async () => c.close());
    }
    // The legitimate supervisor: the only slot (overall and for its source address) is still its.
    const ok = await accepted(h);
    expect(h.server.size).toBe(1);
    for (const c of peers) {
      c.socket.resume();
      const a = await c.read();
      expect([a?.status, a === undefined ? undefined : JSON.parse(a.body).code]).toEqual([401, 'token_invalid']);
      await c.closedByServer();
    }
    expect(h.server.connections).toBe(1);
    ok.ws.close();
  });
});

/** Sends ping `t` (unless `sent` already) and resolves at its pong; fails if the session closes first. */
async function untilPong(c: Conn, t: number, sent = false): Promise<void> {
  if (!sent && c.ws.readyState === WebSocket.OPEN) c.ws.send(JSON.stringify({ type: 'ping', t }));
  const pong = (async () => {
    for (let m = await c.next(); m.type !== 'pong' || m.t !== t; m = await c.next());
  })();
  await Promise.race([pong, c.closed.then((x) => Promise.reject(new Error(`closed ${x.code} before pong ${t}`)))]);
}

describe('supervisor endpoint: heartbeats and timeouts (driven clock)', () => {
  it('pings every interval and drops a peer silent for 3 intervals (4001), removing presence', async () => {
    const h = await harness();
    const c = await accepted(h);
    h.clock.t += 1000;
    h.server.sweep();
    expect((await c.next()).type).toBe('ping');
    h.clock.t += 1999;
    h.server.sweep();
    expect((await c.next()).type).toBe('ping');
    expect(h.store.get('team-a', 'web')).toBeDefined();
    h.clock.t += 1;
    h.server.sweep();
    expect((await c.closed).code).toBe(CLOSE.heartbeatTimeout);
    expect(h.store.get('team-a', 'web')).toBeUndefined();
  });

  it('a frozen supervisor (socket open, nothing sent) is dropped after --heartbeat-misses intervals, not before', async () => {
    const h = await harness({ heartbeatIntervalMs: 2000, heartbeatMisses: 3 });
    const c = await accepted(h);
    h.clock.t += 5999;
    h.server.sweep();
    // The sweep pinged (the first of the run); the client reads it after the sweep's re-check has run.
    expect((await c.next()).type).toBe('ping');
    await untilPong(c, 1);
    expect(h.server.size).toBe(1);
    h.clock.t += 6000;
    h.server.sweep();
    expect((await c.closed).code).toBe(CLOSE.heartbeatTimeout);
    expect(h.store.get('team-a', 'web')).toBeUndefined();
  });

  it('a ping still unread on the socket when an overdue sweep runs keeps the session (a busy gateway loop drops nobody)', async () => {
    const h = await harness({ heartbeatIntervalMs: 2000, heartbeatMisses: 3 });
    const c = await accepted(h);
    h.clock.t += 6000;
    // The ping is in the gateway's socket buffer, not read yet, when the sweep finds the session overdue:
    // what a timer firing late on a loop at full CPU sees.
    c.ws.send(JSON.stringify({ type: 'ping', t: 1 }));
    h.server.sweep();
    await untilPong(c, 1, true);
    // Two more round trips: the sweep's re-check has run by then.
    await untilPong(c, 2);
    await untilPong(c, 3);
    expect(c.ws.readyState).toBe(WebSocket.OPEN);
    expect(h.store.get('team-a', 'web')).toMatchObject({ sessionId: c.sessionId });
  });

  it('any frame from the supervisor keeps it alive', async () => {
    const h = await harness();
    const c = await accepted(h);
    for (let i = 0; i < 5; i++) {
      h.clock.t += 2500;
      c.ws.send(JSON.stringify({ type: 'pong', t: i }));
      // Frames are handled in order: the answer to a ping sent after the pong shows the pong was read.
      c.ws.send(JSON.stringify({ type: 'ping', t: i }));
      for (let m = await c.next(); m.type !== 'pong' || m.t !== i; m = await c.next());
      h.server.sweep();
    }
    expect(c.ws.readyState).toBe(WebSocket.OPEN);
    expect(h.server.size).toBe(1);
  });

  it('closes a socket that sends no hello within the hello timeout (4408)', async () => {
    const h = await harness();
    const c = await connect(h.url, await mintSupervisorToken(keys, 'team-a', 'web', 60, h.clock.t));
    h.clock.t += 5000;
    h.server.sweep();
    expect((await c.closed).code).toBe(CLOSE.helloTimeout);
  });

  it('graceful close tells every supervisor "service restart" (1012)', async () => {
    const h = await harness();
    const c = await accepted(h);
    await h.server.close();
    expect(await c.closed).toEqual({ code: CLOSE.serviceRestart, reason: 'service restart' });
  });
});
