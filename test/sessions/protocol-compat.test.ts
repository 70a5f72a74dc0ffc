import { afterEach, describe, expect, it } from 'vitest';
import { pino } from 'pino';
import WebSocket, { WebSocketServer } from 'ws';
import { MemoryPresence } from '../../src/sessions/presence/memory-presence.js';
import { FRAME } from '../../src/sessions/relay-frames.js';
import { SupervisorClient } from '../../src/sessions/supervisor-client.js';
import { CLOSE, SUBPROTOCOL } from '../../src/sessions/supervisor-protocol.js';
import { SupervisorServer } from '../../src/sessions/supervisor-server.js';
import { mintSupervisorToken, type SupervisorKeys } from '../../src/sessions/supervisor-token.js';
import { wsMessages } from '../helpers/ws-messages.js';

/**
 * The compatibility matrix of the supervisor protocol: a version 1 supervisor (raw frames exactly as
 * version 1 wrote them) against this gateway, and this supervisor against a version 1 gateway (a raw
 * server answering as version 1 did, and refusing every frame type version 1 did not know with 4415).
 * A feature is used only when both sides announced it.
 */

const keys: SupervisorKeys = { keys: [{ kid: 'k', secret: new TextEncoder().encode('c'.repeat(32)) }], audience: 'sandgate-supervisor' };

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

async function gateway(): Promise<{ server: SupervisorServer; url: string }> {
  const server = new SupervisorServer(
    { host: '127.0.0.1', port: 0, keys, heartbeatIntervalMs: 1000, helloTimeoutMs: 5000, maxFrameBytes: 65_536, maxSessions: 10, maxSessionsPerSource: 10, autoSweep: false },
    new MemoryPresence('gw-new'),
    pino({ level: 'silent' }),
  );
  const port = await server.start();
  cleanup.push(() => server.close());
  return { server, url: `ws://127.0.0.1:${port}/v1/supervisor` };
}

async function rawSupervisor(url: string): Promise<WebSocket & ReturnType<typeof wsMessages>> {
  const ws = new WebSocket(url, [SUBPROTOCOL], { headers: { authorization: `Bearer ${await mintSupervisorToken(keys, 'team-a', 'web', 60)}` } });
  cleanup.push(() => ws.terminate());
  const m = wsMessages(ws);
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  return Object.assign(ws, m);
}

/** The hello of a version 1 supervisor, byte for byte what it sent. */
const V1_HELLO = JSON.stringify({ type: 'hello', namespace: 'team-a', name: 'web', instanceId: 'i-v1', version: 'sandgate-supervisor/1' });

describe('a version 1 supervisor against this gateway', () => {
  it('is accepted as before, takes relay streams, and is never sent a move', async () => {
    const g = await gateway();
    const v1 = await rawSupervisor(g.url);
    v1.send(V1_HELLO);
    const acc = await v1.next();
    // Every field version 1 read is there; the new ones are extra, which version 1 ignores.
    expect(acc).toMatchObject({ type: 'accepted', epoch: 1, heartbeatIntervalMs: 1000, maxFrameBytes: 65_536, protocol: 2, features: ['relay'] });
    v1.send(JSON.stringify({ type: 'ping', t: 7 }));
    expect(await v1.next()).toEqual({ type: 'pong', t: 7 });
    // Relay streams were part of version 1: the gateway opens one (an OPEN frame reaches the supervisor).
    const opened = new Promise<Buffer>((resolve) => v1.once('message', (d, binary) => binary && resolve(d as Buffer)));
    const stream = g.server.openRelayStream('team-a', 'web', 8000).catch((err: Error) => err);
    expect((await opened)[0]).toBe(FRAME.open);
    v1.close(1000);
    await stream;
    expect(g.server.size).toBe(0);
  });

  it('is never asked to move: move() sends nothing and answers false', async () => {
    const g = await gateway();
    const v1 = await rawSupervisor(g.url);
    v1.send(V1_HELLO);
    await v1.next();
    const [s] = [...g.server.sessions()];
    expect(g.server.move(s!, 'ws://elsewhere:1', 'rebalance')).toBe(false);
    v1.send(JSON.stringify({ type: 'ping', t: 1 }));
    // The next frame is the pong: no move was queued before it.
    expect(await v1.next()).toEqual({ type: 'pong', t: 1 });
  });

  it('a hello with a malformed protocol or features is refused (4400) and records nothing', async () => {
    const g = await gateway();
    for (const bad of [{ protocol: 0 }, { protocol: 1.5 }, { protocol: '2' }, { features: 'move' }, { features: Array.from({ length: 33 }, (_, i) => `f${i}`) }, { features: [''] }, { features: ['x'.repeat(65)] }]) {
      const ws = await rawSupervisor(g.url);
      ws.send(JSON.stringify({ ...JSON.parse(V1_HELLO), ...bad }));
      expect((await ws.closed).code, JSON.stringify(bad)).toBe(CLOSE.malformed);
    }
    expect(g.server.size).toBe(0);
  });

  it('unknown features are ignored: the session uses what both sides know', async () => {
    const g = await gateway();
    const ws = await rawSupervisor(g.url);
    ws.send(JSON.stringify({ ...JSON.parse(V1_HELLO), protocol: 3, features: ['move', 'teleport'] }));
    expect(await ws.next()).toMatchObject({ type: 'accepted', protocol: 2, features: ['move'] });
    // No `relay` announced: the gateway opens no stream to it.
    await expect(g.server.openRelayStream('team-a', 'web', 8000)).rejects.toMatchObject({ reason: 'no_session' });
  });
});

/**
 * A version 1 gateway: the hello fields it read, its `accepted`, pings and pongs, and 4415 for any frame
 * type it did not know (which is what it did).
 */
async function v1Gateway(): Promise<{
  url: string;
  received: Record<string, unknown>[];
  /** Resolves at the first frame received from now on that `match` accepts. */
  receives(match: (m: Record<string, unknown>) => boolean): Promise<void>;
  ping(t: number): void;
  move(): void;
  connections(): number;
}> {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1', handleProtocols: (p) => (p.has(SUBPROTOCOL) ? SUBPROTOCOL : false) });
  await new Promise((resolve) => wss.once('listening', resolve));
  cleanup.push(() => new Promise<void>((resolve) => wss.close(() => resolve())));
  const received: Record<string, unknown>[] = [];
  const waiters = new Set<(m: Record<string, unknown>) => void>();
  const sockets: WebSocket[] = [];
  wss.on('connection', (ws) => {
    sockets.push(ws);
    cleanup.push(() => ws.terminate());
    ws.on('message', (data) => {
      const m = JSON.parse(data.toString()) as Record<string, unknown>;
      received.push(m);
      for (const w of [...waiters]) w(m);
      if (m.type === 'hello') ws.send(JSON.stringify({ type: 'accepted', sessionId: 's-1', epoch: 1, heartbeatIntervalMs: 1000, maxFrameBytes: 65_536, expiresAt: Date.now() + 60_000 }));
      else if (m.type === 'ping') ws.send(JSON.stringify({ type: 'pong', t: m.t }));
      else if (m.type !== 'pong') ws.close(CLOSE.unexpected, `unknown frame type ${String(m.type)}`);
    });
  });
  const port = (wss.address() as { port: number }).port;
  return {
    url: `ws://127.0.0.1:${port}`,
    received,
    receives: (match) =>
      new Promise((resolve) => {
        const w = (m: Record<string, unknown>): void => {
          if (!match(m)) return;
          waiters.delete(w);
          resolve();
        };
        waiters.add(w);
      }),
    ping: (t) => sockets[0]?.send(JSON.stringify({ type: 'ping', t })),
    move: () => sockets[0]?.send(JSON.stringify({ type: 'move', reason: 'rebalance', gateway: `ws://127.0.0.1:${port}` })),
    connections: () => wss.clients.size,
  };
}

describe('this supervisor against a version 1 gateway', () => {
  it('is accepted, reads the session as version 1 (relay only), heartbeats, and sends no frame version 1 did not know', async () => {
    const g = await v1Gateway();
    const c = new SupervisorClient({ gateway: g.url, token: await mintSupervisorToken(keys, 'team-a', 'web', 60), namespace: 'team-a', name: 'web', instanceId: 'i-2' });
    cleanup.push(() => c.stop());
    const accepted = new Promise<{ features: string[] }>((resolve) => c.once('accepted', resolve));
    c.start();
    expect((await accepted).features).toEqual(['relay']);
    // The client answers the gateway's ping; the extra hello fields did not disturb a version 1 reader.
    const pong = g.receives((m) => m.type === 'pong' && m.t === 5);
    g.ping(5);
    await pong;
    expect(g.received[0]).toMatchObject({ type: 'hello', namespace: 'team-a', name: 'web', instanceId: 'i-2' });
    expect(new Set(g.received.map((m) => m.type))).toEqual(new Set(['hello', 'pong']));
    expect(c.state).toBe('connected');
  });

  it('ignores a move from a gateway that did not announce the feature', async () => {
    const g = await v1Gateway();
    const c = new SupervisorClient({ gateway: g.url, token: await mintSupervisorToken(keys, 'team-a', 'web', 60), namespace: 'team-a', name: 'web', instanceId: 'i-3' });
    cleanup.push(() => c.stop());
    const moving: unknown[] = [];
    c.on('moving', (m) => moving.push(m));
    await new Promise((resolve) => c.once('accepted', resolve).start());
    g.move();
    const pong = g.receives((m) => m.type === 'pong' && m.t === 9);
    g.ping(9);
    await pong;
    expect(moving).toEqual([]);
    expect(g.connections()).toBe(1);
  });
});
